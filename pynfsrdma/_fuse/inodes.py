"""Inode numbers for the kernel and what stands behind them (sans-I/O).

The inode number is the NFS fileid (the export's root is FUSE's root inode), so ``stat`` shows the
same numbers a local look at the export would. The table maps it to the current file handle and
attributes and keeps the kernel's lookup count; an inode is dropped when the kernel has forgotten it
and nothing has it open.

Attributes are taken only when they are not older than a write the kernel has seen complete. Every
write of ours counts (:meth:`InodeTable.wrote`: when FUSE hands it over and when its WRITE is
answered); a request for attributes notes the count when it is sent (:meth:`InodeTable.asking`), and
its reply is taken only if no write of that file counted meanwhile and none was on its way when it
was sent or when it came. Otherwise the server may have answered before our write reached it: the
reply is dropped (the next look asks again), since its size, handed to the kernel (a listing's
entries carry attributes), would cut the kernel's idea of the file short and a read after it would
find the end of the file early. For the same reason what the kernel is told of a file we write is
never smaller than the end of the data it wrote through us (:attr:`Inode.size_floor`) until
attributes taken after that data reached the server show it.

A listing hands the kernel every name with its attributes (readdirplus), and the kernel may never
ask about most of them again: a file first seen there is kept as a :data:`Listed` record (the
kernel's lookups of it counted there), and becomes an :class:`Inode` when the kernel or the server
first needs one (:meth:`InodeTable.get`, :meth:`InodeTable.learn`: a GETATTR, a LOOKUP, an OPEN).

Our own changes to a directory (a name created, removed, renamed or linked in it) count the same way
(:meth:`InodeTable.changing`), when they are sent and when they are answered, and while one is on its
way no answer about the directory is taken. The directory's attributes that come back in the
change's own COMPOUND are taken (:meth:`InodeTable.changed_by_us`) only if no other change of ours
to it was sent since, nor is still on its way: then no answer taken before is newer.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from .._client.attributes import RECORD_CHANGE, RECORD_FILEID, AttrRecord, FileAttrs, file_attrs
from .._proto.nfs4 import const as c
from .cache import AttrTimeouts, Listing

ROOT_INODE = 1  # pyfuse3.ROOT_INODE (FUSE_ROOT_ID)
REMAPPED = 1 << 63  # a non-root file whose fileid is 0 or the root's number gets this bit
STALE = float("-inf")  # Inode.fetched of attributes known stale
_NF4DIR = c.NF4DIR
SHOWN_MTIMES = 4  # mtimes given to the kernel that a file's Inode remembers


@dataclass(eq=False, slots=True)
class Inode:
    ino: int
    fh: bytes
    attrs: FileAttrs
    fetched: float  # when attrs were fetched (trio clock); -inf when known stale
    timeo: float  # current attribute timeout
    lookups: int = 0
    opens: int = 0  # FUSE file handles open on it
    data_change: int | None = None  # the change attribute the kernel's page cache holds data of
    # the size and mtime the kernel's inode holds, which it keeps itself with the writeback cache
    # (None: known to differ from the server's); see kernel_learned
    kernel_view: tuple[int, int] | None = None
    silly: list[tuple[bytes, str]] = field(default_factory=list)  # (dir fh, .nfsXXXX name) to remove
    shared: dict[bytes, Any] = field(default_factory=dict)  # open owner -> our shared open state
    open_lock: Any = None  # serialises OPEN and CLOSE of this file (set by the I/O layer)
    readaheads: set[Any] = field(default_factory=set)  # the read-ahead windows of its open files
    written: int = 0  # the table's write count at this file's last write (see InodeTable.wrote)
    size_floor: int = 0  # the end of data written through us that attributes taken may not show yet
    listing: Listing | None = None  # a directory's every name, while only we change it (cache.Listing)
    # (parent inode, name) of every name the kernel may reach it by (a file another client renamed
    # can be reached by its old name and its new one): see InodeTable.named
    names: tuple[tuple[int, str], ...] = ()
    generation: int = 0  # moves on when the fileid comes back for another file (a new handle)
    granted: dict[Any, int] | None = None  # ACCESS answers by credential, while its attributes hold
    changes: int = 0  # our changes to the directory on their way (see InodeTable.changing)
    releasing: int = 0  # FUSE handles of it being released (their writes' attributes not yet taken)
    shown_mtimes: tuple[int, ...] = ()  # the last mtimes the kernel was given of it (see may_hold)
    # until when the kernel's lookups of its names and its next open are answered from the OPEN
    # that made its kernel inode go (see Opens.regenerate)
    regenerated: float = 0.0
    opened: bool = False  # opened here since its kernel inode was made: the kernel may hold pages of it

    def shown(self, mtime_ns: int) -> None:
        """The kernel was given ``mtime_ns`` as the file's mtime (see :meth:`may_hold`)."""
        if mtime_ns not in self.shown_mtimes:
            self.shown_mtimes = (*self.shown_mtimes[1 - SHOWN_MTIMES :], mtime_ns)

    def may_hold(self, mtime_ns: int) -> bool:
        """Whether ``mtime_ns`` is one we gave the kernel lately as the file's mtime: with the
        writeback cache, an mtime the kernel sends back that it did not stamp itself (and not one a
        caller chose)."""
        return mtime_ns in self.shown_mtimes

    def kernel_learned(self) -> None:
        """The kernel's inode holds the size and mtime of ``attrs`` now (it made them, or made a
        new inode from them)."""
        self.kernel_view = (self.attrs.size, self.attrs.mtime_ns)

    def drop_readahead(self) -> None:
        """The file's data changed (or is changing): no open file reads on from what it read ahead."""
        for r in self.readaheads:
            r.drop()

    @property
    def is_dir(self) -> bool:
        return self.attrs.type == c.NF4DIR

    @property
    def is_reg(self) -> bool:
        return self.attrs.type == c.NF4REG

    def stale(self) -> None:
        self.fetched = STALE
        self.granted = None

    @property
    def writing(self) -> bool:
        """Data of ours is gathered or on its way to the server (not yet answered)."""
        return any(s.writer is not None and s.writer.unsent for s in self.shared.values())


# a file a listing handed the kernel, of which no Inode was made yet: [file handle, attributes (the
# listing's AttrRecord: FileAttrs made with the Inode), when they were read (trio clock), the kernel's
# lookups of it, (directory inode, name) it was listed as]
Listed = list[Any]


# ``asked`` of attributes that came back with our own last write (nothing of ours can be newer)
OWN = None
UNTRUSTED = -1  # asked while a write of the file was on its way: never current


class _Changing(contextlib.AbstractContextManager[int]):
    """:meth:`InodeTable.changing`'s context."""

    __slots__ = ("node", "table")

    def __init__(self, table: InodeTable, node: Inode) -> None:
        self.table, self.node = table, node

    def __enter__(self) -> int:
        self.node.changes += 1
        self.table.wrote(self.node)
        return self.table.writes

    def __exit__(self, *exc: object) -> None:
        self.node.changes -= 1
        self.table.wrote(self.node)


class InodeTable:
    def __init__(self, root_fh: bytes, root_attrs: FileAttrs, timeouts: AttrTimeouts, now: float) -> None:
        self.timeouts = timeouts
        self.root_fileid = root_attrs.fileid
        self.root = Inode(ROOT_INODE, root_fh, root_attrs, now, timeouts.initial(True), lookups=1)
        self._by_ino: dict[int, Inode] = {ROOT_INODE: self.root}
        # (parent inode, name) -> inode, for every name a node was reached by while we know it
        self._by_name: dict[tuple[int, str], int] = {}
        self._listed: dict[int, Listed] = {}  # by inode number: files listed, no Inode made yet
        self.writes = 0  # writes counted so far (see wrote)

    def ino_for(self, attrs: FileAttrs) -> int:
        return self.ino_of(attrs.fileid)

    def ino_of(self, fid: int) -> int:
        """The inode number of the file whose fileid is ``fid``."""
        if fid == self.root_fileid:
            return ROOT_INODE
        if fid in (0, ROOT_INODE):
            return REMAPPED | fid
        return fid

    def get(self, ino: int) -> Inode | None:
        node = self._by_ino.get(ino)
        if node is None and ino in self._listed:
            node = self._made(ino)
        return node

    def listed(self, fh: bytes, attrs: AttrRecord, now: float, parent: int, name: str) -> int:
        """A listing of directory ``parent`` hands the kernel ``name`` with ``attrs`` (one lookup the
        kernel counts): kept as a :data:`Listed` record when no Inode of the file is needed yet.
        Returns its inode number, or 0 when it must go through :meth:`learn` (the file has an Inode,
        its number is the root's or remapped, or what was listed of it before differs: another
        handle, another change attribute, another name)."""
        ino = attrs[RECORD_FILEID]
        if ino == self.root_fileid or ino in (0, ROOT_INODE) or ino in self._by_ino:
            return 0
        key = (parent, name)
        rec = self._listed.get(ino)
        if rec is None:
            self._listed[ino] = [fh, attrs, now, 1, key]
            self._by_name[key] = ino
        elif rec[0] == fh and rec[1][RECORD_CHANGE] == attrs[RECORD_CHANGE] and rec[4] == key:
            rec[1], rec[2] = attrs, now
            rec[3] += 1
        else:
            return 0
        return ino

    def _made(self, ino: int) -> Inode:
        """The Inode of a file only listed so far (:data:`Listed`)."""
        fh, record, fetched, lookups, key = self._listed.pop(ino)
        attrs = file_attrs(record)
        timeo = self.timeouts.initial(attrs.type == _NF4DIR)
        node = Inode(ino, fh, attrs, fetched, timeo, lookups, 0, attrs.change, (attrs.size, attrs.mtime_ns))  # (positional)
        if attrs.type == c.NF4REG:
            node.shown(attrs.mtime_ns)
        self._by_ino[ino] = node
        if self._by_name.get(key) == ino:
            node.names = (key,)
        return node

    def wrote(self, node: Inode, end: int = 0) -> None:
        """A write of ``node``'s data (up to offset ``end``) was handed to us, or its WRITE was
        answered: attributes asked for before now may not show it."""
        self.writes += 1
        node.written = self.writes
        if end > node.size_floor:
            node.size_floor = end

    def size(self, node: Inode) -> int:
        """The file's size as the kernel must be told it: the attributes', or the end of what was
        written through us if that is further."""
        size = node.attrs.size
        return node.size_floor if node.size_floor > size else size

    def asking(self, node: Inode | None = None) -> int:
        """Note taken before asking the server for attributes (of ``node``, or of files not known
        yet): pass it as ``asked`` with the reply."""
        if node is not None and (node.writing or node.changes):
            return UNTRUSTED
        return self.writes

    def _current(self, node: Inode, asked: int | None) -> bool:
        return asked is OWN or (
            asked != UNTRUSTED and node.written <= asked and not node.changes and not node.writing
        )

    def changing(self, node: Inode) -> _Changing:
        """``with``: around an operation of ours that changes directory ``node`` (creates, removes,
        renames or links a name in it), from before it is sent until after its answer is handled:
        attributes asked for before then, or while it is on its way, may not show it and are not
        taken. Gives the note to pass to :meth:`changed_by_us` with the directory's attributes its
        reply brings."""
        return _Changing(self, node)

    def changed_by_us(self, node: Inode, attrs: FileAttrs, now: float, asked: int) -> bool:
        """``attrs``: directory ``node``'s attributes right after our change to it (from the change's
        own COMPOUND; ``asked``: what :meth:`changing` yielded). They are taken if no other change
        of ours to it was sent since ours (none is on its way and none was answered since, so no
        answer taken meanwhile is newer). Whether they were taken."""
        if node.changes != 1 or node.written != asked:
            return False
        self.refresh(node, attrs, now, asked=OWN)
        return True

    def learn(
        self, fh: bytes, attrs: FileAttrs, now: float, lookup: bool = True, *, asked: int | None
    ) -> tuple[Inode, bool]:
        """Record a file handle and its attributes (``asked``: see :meth:`asking`); count one lookup
        if asked to.

        Returns the inode and whether its change attribute moved since we last saw it."""
        ino = attrs.fileid
        if ino == self.root_fileid or ino in (0, ROOT_INODE):
            ino = self.ino_for(attrs)
        node = self.get(ino)
        changed = False
        if node is None:  # (a listing makes thousands: no more calls than needed)
            t = self.timeouts
            timeo = t.dirmin if attrs.type == _NF4DIR else t.regmin
            node = Inode(ino, fh, attrs, now, timeo, 0, 0, attrs.change, (attrs.size, attrs.mtime_ns))  # (positional)
            self._by_ino[ino] = node
        elif node.fh != fh:
            # the server reused the fileid for another file (ext4 reuses inode numbers): the kernel
            # is told by a new generation, which makes its inode of the old file fail and go
            node.fh = fh
            node.generation += 1
            node.attrs, node.fetched, node.data_change = attrs, now, attrs.change
            node.kernel_learned()
            node.size_floor, node.granted, node.listing = 0, None, None
            for key in node.names:  # (those of the old file)
                if self._by_name.get(key) == node.ino:
                    del self._by_name[key]
            node.names = ()
            changed = True
        else:
            changed = self.refresh(node, attrs, now, asked=asked)
        if lookup:
            node.lookups += 1
        return node, changed

    def refresh(self, node: Inode, attrs: FileAttrs, now: float, *, asked: int | None) -> bool:
        """New attributes from the server (``asked``: see :meth:`asking`; ``OWN`` for those that came
        back after our own last write); adapts the timeout. True if the change attribute moved.
        Attributes that may be older than one of our writes are not taken: the next look asks the
        server again."""
        if not self._current(node, asked):
            node.fetched = STALE
            return False
        changed = attrs.change != node.attrs.change
        node.timeo = self.timeouts.next(node.timeo, attrs.type == c.NF4DIR, changed)
        node.attrs = attrs
        node.size_floor = 0
        if changed:
            node.granted = None
        if node.listing is not None and not node.listing.seen(attrs.change):
            node.listing = None
        node.fetched = now
        return changed

    def retime(self, timeouts: AttrTimeouts) -> list[int]:
        """New attribute timeouts (a remount): every inode's timeout starts again from the minimum.
        Returns the inode numbers, whose attributes the kernel keeps under the old timeouts."""
        self.timeouts = timeouts
        for node in self._by_ino.values():
            node.timeo = timeouts.initial(node.is_dir)
        return [*self._by_ino, *self._listed]

    def ttl(self, node: Inode, now: float) -> float:
        """How much longer ``node``'s attributes may be kept (0 when they are not fresh)."""
        left = node.fetched + node.timeo - now
        return left if left > 0 else 0.0

    def fresh(self, node: Inode, now: float) -> bool:
        return self.timeouts.fresh(node.fetched, node.timeo, now)

    def named(self, node: Inode, parent: int, name: str) -> None:
        """``name`` in directory ``parent`` leads to ``node`` (the kernel reached it by that name)."""
        key = (parent, name)
        if key not in node.names:
            node.names = (*node.names, key)
        self._by_name[key] = node.ino

    def by_name(self, parent: int, name: str) -> Inode | None:
        """The node ``name`` in ``parent`` led to when we last saw it, if we still know it."""
        ino = self._by_name.get((parent, name))
        return None if ino is None else self.get(ino)

    def unnamed(self, parent: int, name: str) -> Inode | None:
        """``name`` in ``parent`` is gone (removed, or renamed away): the node it led to, if known."""
        key = (parent, name)
        ino = self._by_name.pop(key, None)
        node = None if ino is None else self.get(ino)
        if node is not None and key in node.names:
            node.names = tuple(k for k in node.names if k != key)
        return node

    @staticmethod
    def name(node: Inode) -> tuple[int, str] | None:
        """A name ``node`` was reached by (the latest), if any."""
        return node.names[-1] if node.names else None

    def forget(self, ino: int, n: int) -> None:
        node = self._by_ino.get(ino)
        if node is None:
            rec = self._listed.get(ino)
            if rec is not None:
                rec[3] -= n
                if rec[3] <= 0:
                    del self._listed[ino]
                    if self._by_name.get(rec[4]) == ino:
                        del self._by_name[rec[4]]
            return
        if ino == ROOT_INODE:
            return
        node.lookups = max(0, node.lookups - n)
        self.drop_if_unused(node)

    def drop_if_unused(self, node: Inode) -> None:
        if node.ino != ROOT_INODE and node.lookups == 0 and node.opens == 0 and not node.shared:
            self._by_ino.pop(node.ino, None)
            for key in node.names:
                if self._by_name.get(key) == node.ino:
                    del self._by_name[key]

    def open_inodes(self) -> list[Inode]:
        return [n for n in self._by_ino.values() if n.opens]

    def __len__(self) -> int:
        return len(self._by_ino)

    def __iter__(self) -> Any:
        return iter(list(self._by_ino.values()))
