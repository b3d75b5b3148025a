"""Attribute and name caching decisions, as the Linux NFS client makes them (sans-I/O).

Attribute timeout (nfs(5), ``acregmin``/``acregmax``, ``acdirmin``/``acdirmax``): an inode's attributes
are trusted for ``timeo`` seconds after they were fetched; ``timeo`` starts at the minimum, doubles
each time a revalidation finds the change attribute unmoved, and drops back to the minimum when it
moved. ``noac`` makes every timeout zero.

Names: ``(directory inode, name) -> inode`` entries, positive and negative, each stamped with the
directory's change attribute; an entry is only used while the directory's attributes are fresh and
their change attribute is the one the entry was made under. Our own changes to a directory drop
its entries explicitly.

Names read ahead (:class:`NameReadAhead`): a program that stats the names of a directory one after
another (``find -type``, ``du``, ``rsync``, a build's stats) needs a LOOKUP for each, as the kernel
keeps no name it never saw. Once a directory has needed ``READ_AHEAD_AFTER`` of them, its entries
are read ahead with READDIR (the directory's attributes after each page in the same COMPOUND), a
page at a time, never more than ``READ_AHEAD_PER_NAME`` entries per name asked for in it, by a
LOOKUP or from the pages (so that a few names looked up in a huge directory cost little more than
their LOOKUPs would, while a program that stats every name reads on as it uses the pages: a server
lists a directory in its own order, not the program's, and the names it asks for next are spread
over pages not read yet). A
name found there is answered as its LOOKUP would have been at the time the page was read: once
(the kernel then keeps it, and asks again only when its entry expired or led to a file the server
no longer has: that question goes to the server), only for a file we hold no attributes of yet,
only while those attributes would still be fresh (``acregmin``, ``acdirmin`` for a directory), and
only while the directory's change attribute, fresh, is the one the page was read at. A name whose
entry went stale before it was asked for (a directory larger than the program stats in
``acregmin``) is asked for with the next page, and a directory read to its end is then read again
from its start, at the same pace, for the names still to come.

Listings (``lookupcache=all``): of a directory we made ourselves we know every name, as long as the
directory changes only by our hand. Each of our changes to it (OPEN that creates, CREATE, REMOVE,
RENAME, LINK) comes back with the directory's change attribute before and after it (change_info4);
when "before" is the change the listing is at, the listing moves to "after" with the name added or
taken out. Any other change attribute seen for the directory ends the listing. A name not in the
listing is answered absent without a LOOKUP only while we are filling the directory: after a run of
at least ``LISTING_RUN`` of our own changes there, each within ``LISTING_TRUST`` seconds of the one
before, and within that of the last (and of ``acdirmin``). That is the kernel's lookup before each
create of a ``tar x`` or ``cp -r``. Otherwise the server is asked, as the Linux client asks for a
name it never looked up: a directory we made and someone else fills shows its files at once, as
does one we wrote a file into, and one we are filling shows another client's file once our run of
changes pauses. (A change_info4 the server does not call atomic is trusted the same way when
"before" matches: another client's change would have to fall inside the server's handling of our
own operation.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._client.attributes import RECORD_TYPE
from .._client.timed_map import TimedMap
from .._proto.nfs4.const import NF4DIR
from .options import MountOptions

if TYPE_CHECKING:
    from .._client.attributes import AttrRecord

NEGATIVE = 0  # a name known not to exist
NAME_CACHE_SIZE = 65536
LISTING_MAX_NAMES = 65536  # a directory with more names than this is not listed (memory)
LISTING_TRUST = 0.25  # seconds between our own changes to a directory that keep its listing answering
LISTING_RUN = 2  # our changes in a row before the listing answers for absent names
READ_AHEAD_AFTER = 8  # LOOKUPs a directory needed before its entries are read ahead (NameReadAhead)
READ_AHEAD_PER_NAME = 32  # entries read ahead, at most, per name asked for (LOOKUP sent or answered ahead)
READ_AHEAD_DIRS = 4  # directories whose entries are kept read ahead at once


@dataclass(frozen=True, slots=True)
class AttrTimeouts:
    """The actimeo family, in seconds."""

    regmin: float
    regmax: float
    dirmin: float
    dirmax: float

    @classmethod
    def from_options(cls, o: MountOptions) -> AttrTimeouts:
        return cls(o.acregmin, o.acregmax, o.acdirmin, o.acdirmax)

    def initial(self, is_dir: bool) -> float:
        return self.dirmin if is_dir else self.regmin

    def next(self, current: float, is_dir: bool, changed: bool) -> float:
        """The timeout after a revalidation that did (not) find a change."""
        lo, hi = (self.dirmin, self.dirmax) if is_dir else (self.regmin, self.regmax)
        if changed:
            return lo
        return min(hi, max(lo, current * 2 if current > 0 else lo))

    @staticmethod
    def fresh(fetched: float, timeo: float, now: float) -> bool:
        return timeo > 0 and now - fetched < timeo


class NameCache:
    """``(dir inode, name) -> (inode or NEGATIVE, dir change)`` with a time limit (``acdirmax``)."""

    def __init__(self, ttl: float, maxsize: int = NAME_CACHE_SIZE) -> None:
        self.enabled = ttl > 0
        self._c: TimedMap[tuple[int, str], tuple[int, int]] = TimedMap(maxsize, ttl if ttl > 0 else 1)

    def get(self, parent: int, name: str, parent_change: int) -> int | None:
        """The cached inode (``NEGATIVE`` for a known absence), or None when not known."""
        if not self.enabled:
            return None
        hit = self._c.get((parent, name))
        if hit is None:
            return None
        ino, change = hit
        if change != parent_change:
            self._c.pop((parent, name))
            return None
        return ino

    def put(self, parent: int, name: str, ino: int, parent_change: int) -> None:
        if self.enabled:
            self._c[(parent, name)] = (ino, parent_change)

    def drop(self, parent: int, name: str) -> None:
        self._c.pop((parent, name))

    def drop_inode(self, ino: int) -> None:
        """Forget every entry naming ``ino`` (it was removed or renamed)."""
        for k in [k for k, (i, _) in self._c.items() if i == ino]:
            self._c.pop(k)

    def __len__(self) -> int:
        return len(self._c)


@dataclass(slots=True)
class Listing:
    """Every name a directory holds, at its change attribute ``change`` (see the module's text)."""

    change: int
    ours: float  # when our own last change moved it (trio clock; -inf: none yet)
    names: set[str]
    run: int = 0  # our changes in a row, each within LISTING_TRUST of the one before

    def absent(self, name: str, now: float, ttl: float) -> bool:
        """Whether ``name`` is known not to exist in the directory now (``ttl``: acdirmin)."""
        return self.run >= LISTING_RUN and now - self.ours < min(ttl, LISTING_TRUST) and name not in self.names

    def changed(self, before: int, after: int, name: str, present: bool, now: float) -> bool:
        """Our operation added (``present``) or removed ``name``, and the server says the directory
        went from ``before`` to ``after``. False if the listing is no longer known to be whole."""
        if before != self.change or (present and len(self.names) >= LISTING_MAX_NAMES):
            return False
        self.run = self.run + 1 if now - self.ours < LISTING_TRUST else 1
        self.change, self.ours = after, now
        if present:
            self.names.add(name)
        else:
            self.names.discard(name)
        return True

    def seen(self, change: int) -> bool:
        """The directory's change attribute from the server; False if it moved without us."""
        return change == self.change


# a name read ahead: (file handle, attributes, when they were read (trio clock), the attribute note
# taken before (InodeTable.asking), the directory's change attribute the page was read at)
ReadAheadEntry = tuple[bytes, "AttrRecord", float, int, int]


@dataclass(slots=True)
class NameReadAhead:
    """A directory's entries read ahead of the LOOKUPs a program sends for them (see the module's
    text); the pages' I/O is the caller's, the decisions are here."""

    lookups: int = 0  # LOOKUPs the directory needed (its names not read ahead)
    hits: int = 0  # names answered from the entries read ahead
    read: int = 0  # entries read ahead so far
    cookie: int = 0  # where the next page starts
    verifier: bytes = bytes(8)
    eof: bool = False  # every entry was read (or the directory cannot be read: no more pages)
    unreadable: bool = False  # the directory cannot be read (no more pages, ever)
    reading: bool = False  # a page is on its way
    entries: dict[str, ReadAheadEntry] = field(default_factory=dict)

    def needed_lookup(self) -> None:
        """A LOOKUP in the directory is about to be sent: its name was not read ahead."""
        self.lookups += 1

    def has(self, name: str, now: float, timeouts: AttrTimeouts) -> bool:
        """Whether ``name`` has an entry whose attributes are still fresh at ``now``; one gone stale
        is dropped, and a directory read to its end is read again from its start, for the names
        the program has not asked for yet (their entries, read as long ago, went stale too)."""
        hit = self.entries.get(name)
        if hit is None:
            return False
        _, attrs, when, _, _ = hit
        if timeouts.fresh(when, timeouts.initial(attrs[RECORD_TYPE] == NF4DIR), now):
            return True
        del self.entries[name]
        if self.eof and not self.unreadable and not self.reading:
            self.cookie, self.verifier, self.eof = 0, bytes(8), False
        return False

    def cannot_read(self) -> None:
        """The directory cannot be read (or its cookie is no longer taken): no more pages."""
        self.eof = self.unreadable = True

    def wants_page(self) -> bool:
        """Whether the next page is to be read before a LOOKUP is sent."""
        return (
            not self.eof
            and not self.reading
            and self.lookups >= READ_AHEAD_AFTER
            and self.read < READ_AHEAD_PER_NAME * (self.lookups + self.hits)
            and len(self.entries) < LISTING_MAX_NAMES
        )

    def page(self, entries: dict[str, ReadAheadEntry], cookie: int, verifier: bytes, eof: bool) -> None:
        """A page read: ``entries`` by name, and where the next one starts."""
        self.entries.update(entries)
        self.read += len(entries)
        self.cookie, self.verifier, self.eof = cookie, verifier, eof or not entries

    def take(self, name: str, dir_change: int, now: float, timeouts: AttrTimeouts) -> ReadAheadEntry | None:
        """``name``'s entry, to answer its LOOKUP with (once), if the directory's fresh change
        attribute ``dir_change`` is the one its page was read at and its attributes are still fresh."""
        hit = self.entries.pop(name, None)
        if hit is None:
            return None
        _, attrs, when, _, change = hit
        if change != dir_change or not timeouts.fresh(when, timeouts.initial(attrs[RECORD_TYPE] == NF4DIR), now):
            return None
        self.hits += 1
        return hit
