"""Byte-range locks (RFC 8881 section 9; LOCK, LOCKT, LOCKU in 18.10-18.12), without I/O.

- :class:`LockOwner`: the lock owner of a key the caller chooses (FUSE's ``lock_owner`` of a process
  for POSIX locks, a key per open file for flock, a :class:`~pynfsrdma._client.api.File` of the path
  API). Its opaque name goes on the wire in ``lock_owner4`` beside the client ID.
- :class:`LockState`: what one lock owner holds on one open file: the lock stateid the server gave
  (its seqid as the server last returned it), the byte ranges held (to reclaim them after a server
  restart, and to know when none is left and the stateid can be freed: RFC 8881 8.2.4), and, when the
  server no longer has them, why (I/O by that owner then fails with EIO rather than go on unprotected).
- :class:`LockRanges`: one owner's ranges, merged and split as POSIX locks are (as the server keeps them).
- :class:`LockTable`: the owners and lock states of one client.
- Ranges: NFS says (offset, length) with a length of all ones for "to end of file"; POSIX and FUSE say
  (start, end) with ``end`` inclusive and :data:`OFFSET_MAX` for the same. :func:`nfs_range` and
  :func:`posix_range` convert; :func:`nfs_lock_type` and :func:`posix_lock_type` convert the types.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.types import LOCK4denied, exist_lock_owner4, lock_owner4, open_to_lock_owner4, stateid4

if TYPE_CHECKING:
    from .open_state import OpenFile

TO_EOF = c.NFS4_UINT64_MAX  # an NFS lock length: from the offset to the end of the file, however it grows
OFFSET_MAX = (1 << 63) - 1  # POSIX (and FUSE): the largest file offset; a lock ending there runs to end of file
_END = 1 << 64  # the exclusive end of a range that runs to end of file
_SEQID_MASK = 0xFFFFFFFF

_READ_TYPES = frozenset({c.READ_LT, c.READW_LT})
_TYPES = frozenset({c.READ_LT, c.WRITE_LT, c.READW_LT, c.WRITEW_LT})


def nfs_range(start: int, end: int) -> tuple[int, int]:
    """A POSIX range (``start`` to ``end`` inclusive, ``end`` OFFSET_MAX for "to end of file") as NFS's
    (offset, length)."""
    if start < 0 or end < start:
        raise ValueError(f"not a byte range: {start}..{end}")
    if end >= OFFSET_MAX:
        return start, TO_EOF
    return start, end - start + 1


def posix_range(offset: int, length: int) -> tuple[int, int]:
    """NFS's (offset, length) as a POSIX range (start, end inclusive); a range that runs to end of file
    (length all ones) or past the largest POSIX offset ends at OFFSET_MAX."""
    if length == TO_EOF or offset + length - 1 >= OFFSET_MAX:
        return offset, OFFSET_MAX
    return offset, offset + length - 1


def nfs_lock_type(posix_type: int) -> int:
    """``fcntl.F_RDLCK`` / ``F_WRLCK`` as READ_LT / WRITE_LT."""
    if posix_type == fcntl.F_RDLCK:
        return c.READ_LT
    if posix_type == fcntl.F_WRLCK:
        return c.WRITE_LT
    raise ValueError(f"not a lock type: {posix_type} (fcntl.F_RDLCK or fcntl.F_WRLCK)")


def posix_lock_type(locktype: int) -> int:
    """READ_LT / WRITE_LT (or their blocking forms) as ``fcntl.F_RDLCK`` / ``F_WRLCK``."""
    return fcntl.F_RDLCK if locktype in _READ_TYPES else fcntl.F_WRLCK


def plain_lock_type(locktype: int) -> int:
    """READ_LT or WRITE_LT for any lock type (the blocking forms only ask differently)."""
    if locktype not in _TYPES:
        raise ValueError(f"not an NFS lock type: {locktype}")
    return c.READ_LT if locktype in _READ_TYPES else c.WRITE_LT


def newer(seqid: int, than: int) -> bool:
    """Whether stateid seqid ``seqid`` comes after ``than`` (they count up and wrap: RFC 8881 8.2.2)."""
    return seqid != than and ((seqid - than) & _SEQID_MASK) < 0x80000000


@dataclass(frozen=True, slots=True)
class LockConflict:
    """A lock that stood in the way (LOCK4denied): its range, type (READ_LT / WRITE_LT) and owner,
    which may be another client's (``owner.clientid``)."""

    offset: int
    length: int
    type: int
    owner: lock_owner4

    @classmethod
    def from_denied(cls, denied: LOCK4denied) -> LockConflict:
        """The conflict a LOCK4denied describes. A length of 0, which no lock can have, is read as
        "to end of file" (NFS-Ganesha 4.3 describes such locks so)."""
        length = int(denied.length) or TO_EOF
        return cls(int(denied.offset), length, plain_lock_type(int(denied.locktype)), denied.owner)

    @property
    def start(self) -> int:
        return self.offset

    @property
    def end(self) -> int:
        """The last byte, POSIX style (OFFSET_MAX: to end of file)."""
        return posix_range(self.offset, self.length)[1]

    @property
    def posix_type(self) -> int:
        return posix_lock_type(self.type)


class LockDenied(NFS4Error, BlockingIOError):
    """LOCK answered NFS4ERR_DENIED: another lock owner holds a conflicting lock (EAGAIN, as fcntl's
    F_SETLK says); ``conflict`` is that lock as the server described it."""

    conflict: LockConflict

    def __new__(cls, conflict: LockConflict, op: int | None = c.OP_LOCK, path: str | None = None) -> LockDenied:
        self: LockDenied = NFS4Error.__new__(cls, c.NFS4ERR_DENIED, op, path)  # type: ignore[assignment]
        return self

    def __init__(self, conflict: LockConflict, op: int | None = c.OP_LOCK, path: str | None = None) -> None:
        super().__init__(c.NFS4ERR_DENIED, op, path)
        self.conflict = conflict

    def __reduce__(self) -> tuple[Any, ...]:
        return (LockDenied, (self.conflict, self.op, self.path))


class LockLost(OSError):
    """The server no longer has the locks of this owner on this file (a restart without a grace
    period to reclaim them in, revoked state, an open made again): the owner's I/O and locking fail
    with EIO until it unlocks what it held, as another client may have written meanwhile."""

    def __init__(self, why: str, path: str | None = None) -> None:
        super().__init__(errno.EIO, f"byte-range lock lost: {why}", path)


def _span(offset: int, length: int) -> tuple[int, int]:
    if length == 0:
        raise ValueError("a lock range of length 0")
    return offset, _END if length == TO_EOF else min(offset + length, _END)


def _length(start: int, end: int) -> int:
    return TO_EOF if end == _END else end - start


class LockRanges:
    """The byte ranges one lock owner holds on one file, with their types, as POSIX keeps them (and
    the server for NFS's locks): a new lock replaces whatever the owner held under its range (an
    upgrade or downgrade), an unlock may split a range, neighbours of one type merge."""

    __slots__ = ("_ranges",)

    def __init__(self) -> None:
        self._ranges: list[tuple[int, int, int]] = []  # (start, end exclusive, READ_LT/WRITE_LT), sorted, disjoint

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        """(offset, length, type) of each range, in order; length TO_EOF for the last up to end of file."""
        for s, e, t in self._ranges:
            yield s, _length(s, e), t

    def __repr__(self) -> str:
        return f"LockRanges({list(self)})"

    def add(self, offset: int, length: int, locktype: int) -> None:
        s, e = _span(offset, length)
        t = plain_lock_type(locktype)
        self._cut(s, e)
        rs = self._ranges
        i = 0
        while i < len(rs) and rs[i][0] < s:
            i += 1
        if i > 0 and rs[i - 1][1] == s and rs[i - 1][2] == t:  # joins the one before
            s = rs[i - 1][0]
            i -= 1
            del rs[i]
        if i < len(rs) and rs[i][0] == e and rs[i][2] == t:  # and the one after
            e = rs[i][1]
            del rs[i]
        rs.insert(i, (s, e, t))

    def remove(self, offset: int, length: int) -> None:
        self._cut(*_span(offset, length))

    def _cut(self, s: int, e: int) -> None:
        out: list[tuple[int, int, int]] = []
        for rs, re, t in self._ranges:
            if re <= s or rs >= e:
                out.append((rs, re, t))
                continue
            if rs < s:
                out.append((rs, s, t))
            if re > e:
                out.append((e, re, t))
        self._ranges = out

    def covered_by(self, offset: int, length: int) -> bool:
        """Whether unlocking the range leaves nothing held."""
        s, e = _span(offset, length)
        return all(s <= rs and re <= e for rs, re, _ in self._ranges)

    def within(self, offset: int, length: int) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
        """What is held under a range and what is not: ((offset, length, type) pieces held, (offset,
        length) gaps), to put a range back as it was."""
        s, e = _span(offset, length)
        held: list[tuple[int, int, int]] = []
        gaps: list[tuple[int, int]] = []
        pos = s
        for rs, re, t in self._ranges:
            if re <= s or rs >= e:
                continue
            a, b = max(rs, s), min(re, e)
            if a > pos:
                gaps.append((pos, _length(pos, a)))
            held.append((a, _length(a, b), t))
            pos = b
        if pos < e:
            gaps.append((pos, _length(pos, e)))
        return held, gaps


@dataclass(eq=False)
class LockOwner:
    """A lock owner: the caller's ``key`` and the opaque name the server knows it by."""

    key: Hashable
    name: bytes
    states: int = 0  # lock states (files) it has: the owner is forgotten with its last


@dataclass(eq=False)
class LockState:
    """The byte-range locks of one lock owner on one open file, one lock stateid on the server."""

    of: OpenFile
    owner: LockOwner
    stateid: stateid4 | None = None  # None until a LOCK is granted (the next one then introduces the owner)
    ranges: LockRanges = field(default_factory=LockRanges)
    lost: str | None = None  # why the server no longer has these locks (None: it has them)
    users: int = 0  # calls under way on this state (it is not forgotten under them)

    @property
    def idle(self) -> bool:
        """Holds nothing, has no stateid, lost nothing, and no call is under way: it can be forgotten."""
        return not self.ranges and self.stateid is None and self.lost is None and self.users == 0

    def locker(self, clientid: int) -> tuple[bool, Any]:
        """LOCK's ``locker4``: the first LOCK of this owner on this open gives the open stateid and the
        new lock owner (open_to_lock_owner4), later ones the lock stateid (exist_lock_owner4). The
        seqids beside them are NFSv4.0's: NFSv4.1's sessions order requests, and they go as 0."""
        if self.stateid is None:
            return True, open_to_lock_owner4(0, self.of.stateid, 0, lock_owner4(clientid, self.owner.name))
        return False, exist_lock_owner4(self.stateid, 0)

    def took(self, stateid: stateid4) -> None:
        """The server returned ``stateid`` for this state (LOCK, LOCKU): keep it unless an older reply."""
        old = self.stateid
        if old is None or old.other != stateid.other or newer(stateid.seqid, old.seqid):
            self.stateid = stateid

    def granted(self, stateid: stateid4, offset: int, length: int, locktype: int) -> None:
        self.took(stateid)
        self.ranges.add(offset, length, locktype)

    def unlocked(self, stateid: stateid4 | None, offset: int, length: int) -> None:
        if stateid is not None:
            self.took(stateid)
        self.ranges.remove(offset, length)

    def lose(self, why: str) -> None:
        """The server no longer has these locks; its stateid is no longer worth sending."""
        self.lost = why
        self.stateid = None

    def check(self, path: str | None = None) -> None:
        """Raise :class:`LockLost` (EIO) when the server lost this owner's locks."""
        if self.lost is not None:
            raise LockLost(self.lost, path)


class LockTable:
    """The lock owners and lock states of one client (one per (open, owner key)), and the owners by
    the name the server knows (a CB_NOTIFY_LOCK names one)."""

    def __init__(self, prefix: bytes = b"lock-") -> None:
        self._prefix = prefix
        self._numbers = itertools.count(1)
        self._owners: dict[Hashable, LockOwner] = {}
        self._names: dict[bytes, LockOwner] = {}
        self._states: dict[tuple[int, Hashable], LockState] = {}
        self._by_open: dict[int, dict[Hashable, LockState]] = {}  # the same states, by open

    def __bool__(self) -> bool:
        """Whether any lock state exists (I/O looks for a lock stateid only then)."""
        return bool(self._states)

    def __len__(self) -> int:
        return len(self._states)

    def owner_name(self, key: Hashable) -> bytes:
        """The name of ``key``'s lock owner; one that holds nothing anywhere gets a name no owner has
        (for LOCKT, which needs one: such an owner has no lock to be told apart from)."""
        owner = self._owners.get(key)
        return owner.name if owner is not None else self._prefix + b"test"

    def owner_by_name(self, name: bytes) -> LockOwner | None:
        return self._names.get(name)

    def get(self, of: OpenFile, key: Hashable) -> LockState | None:
        return self._states.get((id(of), key))

    def state(self, of: OpenFile, key: Hashable) -> LockState:
        """The lock state of (``of``, ``key``), made (with the owner, if new) when there is none."""
        st = self._states.get((id(of), key))
        if st is not None:
            return st
        owner = self._owners.get(key)
        if owner is None:
            owner = LockOwner(key, self._prefix + b"%d" % next(self._numbers))
            self._owners[key] = owner
            self._names[owner.name] = owner
        owner.states += 1
        st = self._states[(id(of), key)] = LockState(of, owner)
        self._by_open.setdefault(id(of), {})[key] = st
        return st

    def of_open(self, of: OpenFile) -> list[LockState]:
        states = self._by_open.get(id(of))
        return list(states.values()) if states else []

    def stateid_of_open(self, of: OpenFile) -> bool:
        """Whether a lock state of ``of`` has a stateid from the server (locks it holds or held)."""
        states = self._by_open.get(id(of))
        return states is not None and any(st.stateid is not None for st in states.values())

    def all(self) -> list[LockState]:
        return list(self._states.values())

    def forget(self, st: LockState) -> None:
        """``st`` is over (its locks released and its stateid freed, or its open closed)."""
        if self._states.get((id(st.of), st.owner.key)) is not st:
            return
        del self._states[(id(st.of), st.owner.key)]
        states = self._by_open[id(st.of)]
        del states[st.owner.key]
        if not states:
            del self._by_open[id(st.of)]
        st.owner.states -= 1
        if st.owner.states <= 0:
            self._owners.pop(st.owner.key, None)
            self._names.pop(st.owner.name, None)


__all__ = [
    "OFFSET_MAX",
    "TO_EOF",
    "LockConflict",
    "LockDenied",
    "LockLost",
    "LockOwner",
    "LockRanges",
    "LockState",
    "LockTable",
    "newer",
    "nfs_lock_type",
    "nfs_range",
    "plain_lock_type",
    "posix_lock_type",
    "posix_range",
]
