"""The state an OPEN leaves on the client (RFC 8881 sections 8, 9.1, 10.4): an open (its file
handle, open stateid, share access), a delegation, and the stateids I/O goes with. Plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio

from .._proto.nfs4 import const as c
from .._proto.nfs4.types import change_info4, nfstime4, stateid4
from .._rpc.auth import Credential
from .attributes import FileAttrs

ANONYMOUS_STATEID = stateid4(0, bytes(12))
# "the stateid the operation before set" (RFC 8881 16.2.3.1.2): an OPEN's, for the WRITE and CLOSE
# after it in the same COMPOUND
CURRENT_STATEID = stateid4(1, bytes(12))
CURRENT_STATEID_SEQID = 0  # in NFSv4.1 a seqid of 0 means "the current one" (RFC 8881 8.2.2)


def current(stateid: stateid4) -> stateid4:
    """``stateid`` with seqid 0: "whatever is current" (RFC 8881 8.2.2). I/O sent with it stays valid
    when another OPEN by the same owner moves the open's seqid meanwhile (the kernel nfsd answers
    NFS4ERR_OLD_STATEID to a READ with the seqid before an OPEN of the same file in parallel)."""
    return stateid4(CURRENT_STATEID_SEQID, stateid.other)


READ_DELEGATIONS = (c.OPEN_DELEGATE_READ, c.OPEN_DELEGATE_READ_ATTRS_DELEG)
WRITE_DELEGATIONS = (c.OPEN_DELEGATE_WRITE, c.OPEN_DELEGATE_WRITE_ATTRS_DELEG)
# attribute delegations (RFC 9754): the holder keeps the file's access and modify times too
ATTRS_DELEGATIONS = (c.OPEN_DELEGATE_READ_ATTRS_DELEG, c.OPEN_DELEGATE_WRITE_ATTRS_DELEG)


def nfstime(ns: int) -> nfstime4:
    """A time in nanoseconds since the epoch as an nfstime4."""
    return nfstime4(ns // 1_000_000_000, ns % 1_000_000_000)


@dataclass(slots=True, eq=False)
class Delegation:
    """A delegation the server granted on an OPEN (RFC 8881 10.4): while we hold it, nobody else
    writes the file (read delegation) or even opens it (write delegation), so opens it covers are
    made locally and cached attributes and data stay valid until it is recalled."""

    type: int  # OPEN_DELEGATE_READ / WRITE (or their _ATTRS_DELEG forms)
    stateid: stateid4
    fh: bytes
    # the file's change attribute when it was granted: what CB_GETATTR reports while nothing the
    # server has not seen was written (RFC 8881 10.4.3; the server compares it with its own)
    change: int = 0
    returning: bool = False  # being returned: no new opens are made under it
    # the server's ACCESS answers while it is held, by (caller, the file's mode, owner and group when
    # asked): nobody else can change who may open the file without the delegation being recalled
    granted: dict[tuple[object, ...], int] = field(default_factory=dict)
    returned: trio.Event = field(default_factory=trio.Event)
    # under an attribute delegation (RFC 9754): the times our reads and writes set since it was
    # granted (ns since the epoch; None: not set), which the server learns from us, not the reverse
    atime_ns: int | None = None
    mtime_ns: int | None = None

    @property
    def write(self) -> bool:
        return self.type in WRITE_DELEGATIONS

    @property
    def timestamps(self) -> bool:
        """Whether the holder keeps the file's access and modify times (an attribute delegation)."""
        return self.type in ATTRS_DELEGATIONS

    def accessed(self, now_ns: int) -> None:
        """A read at ``now_ns``: the access time the holder keeps (attribute delegations only)."""
        if self.timestamps:
            self.atime_ns = now_ns

    def modified(self, now_ns: int) -> None:
        """A write at ``now_ns``: the modify time the holder keeps (write attribute delegations only)."""
        if self.timestamps and self.write:
            self.mtime_ns = now_ns

    def kept_times(self) -> dict[int, nfstime4]:
        """The times kept under an attribute delegation, by attribute (time_deleg_access/modify):
        what CB_GETATTR answers and what goes back with DELEGRETURN."""
        kept: dict[int, nfstime4] = {}
        if self.atime_ns is not None:
            kept[c.FATTR4_TIME_DELEG_ACCESS] = nfstime(self.atime_ns)
        if self.mtime_ns is not None:
            kept[c.FATTR4_TIME_DELEG_MODIFY] = nfstime(self.mtime_ns)
        return kept

    def covers(self, access: int) -> bool:
        """Whether an open with this share access can be made locally under the delegation."""
        return not self.returning and (self.write or not access & c.OPEN4_SHARE_ACCESS_WRITE)


@dataclass(eq=False)
class OpenFile:
    """An open of a file: its file handle, open stateid and share access (and how to reclaim it)."""

    fh: bytes
    stateid: stateid4
    access: int
    owner: bytes
    attrs: FileAttrs | None = None
    delegation: Delegation | None = None
    closed: bool = False
    local: bool = False  # opened under a delegation, no OPEN sent: ``stateid`` is the delegation's
    cred: Credential | None = None  # who opened it (to OPEN for real when the delegation goes back)
    dir_change: change_info4 | None = None  # how an OPEN by name changed the directory (it may create)
    dir_attrs: FileAttrs | None = None  # the directory's attributes right after that OPEN (when asked)
    granted: int | None = None  # what an ACCESS in the OPEN's COMPOUND allowed (when asked)
    may_notify_lock: bool = False  # the server said it may send CB_NOTIFY_LOCK for this file (OPEN's rflags)
    # what a READ in the OPEN's COMPOUND read of the file's first bytes (when asked): (the data, a view
    # of the reply; eof), for the caller to take
    first_read: tuple[Any, bool] | None = None
    # unstable writes not yet committed: offset -> (length, verifier)
    uncommitted: dict[int, tuple[int, bytes]] = field(default_factory=dict)

