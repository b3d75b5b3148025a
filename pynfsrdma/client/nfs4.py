"""File-level NFSv4.1 operations on file handles, one COMPOUND each.

This is the layer the FUSE front end and the path-based API both stand on. Every method builds one
COMPOUND (PUTFH, the operation, GETFH/GETATTR as needed) and turns a failed operation into an
:class:`~pynfsrdma.errors.NFS4Error` carrying its status and operation. What a method makes of the
results (file handles, attributes) it makes inside the session's checks (:meth:`NFSv4.query`): a
reply it cannot use is a protocol violation like a malformed one (the request goes again on a new
connection, then fails with :class:`~pynfsrdma.errors.ProtocolError`), and every error of a reply
names the path it was about.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import itertools
import logging
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import trio

from ..errors import NFS4Error, ProtocolError, ReplyError
from ..proto.nfs4 import const as c
from ..proto.nfs4.attrs import DirList
from ..proto.nfs4.compound import ResOp, result_of, results_of
from ..proto.nfs4.types import (
    ACCESS4args,
    ALLOCATE4args,
    CLONE4args,
    CLOSE4args,
    COMMIT4args,
    COPY4args,
    CREATE4args,
    DEALLOCATE4args,
    DELEGRETURN4args,
    FREE_STATEID4args,
    GETATTR4args,
    GETFH4args,
    GETXATTR4args,
    LINK4args,
    LISTXATTRS4args,
    LOCK4args,
    LOCKT4args,
    LOCKU4args,
    LOOKUP4args,
    LOOKUPP4args,
    OPEN4args,
    PUTFH4args,
    PUTROOTFH4args,
    READ4args,
    READDIR4args,
    READLINK4args,
    REMOVE4args,
    REMOVEXATTR4args,
    RENAME4args,
    RESTOREFH4args,
    SAVEFH4args,
    SECINFO4args,
    SECINFO_NO_NAME4args,
    SEEK4args,
    SETATTR4args,
    SETXATTR4args,
    TEST_STATEID4args,
    WRITE4args,
    change_info4,
    creatverfattr,
    fattr4,
    lock_owner4,
    open_owner4,
    specdata4,
    stateid4,
)
from ..proto.rpcsec_gss import Flavor, flavor_of_secinfo
from ..rpc.auth import Credential
from ..session.client_id import ClientID
from ..session.session import COMPOUND_ROOM
from ..transport.base import ReplyHints
from .attributes import (
    FS_INFO_BITMAP,
    NOW,
    STAT_BITMAP,
    STATFS_BITMAP,
    XATTR_SUPPORT_BITMAP,
    FileAttrs,
    FsStat,
    entry_attrs_decoder_at,
    setattr_fattr4,
)
from .copy_commit import CopyThen, on_commit, on_copy_reply
from .locks import TO_EOF, LockConflict, LockDenied, LockState, LockTable, plain_lock_type
from .lost_lock_state import LockThen, on_lock_error
from .lost_state import STATE_LOST, Then, on_stateid_error

log = logging.getLogger(__name__)
T = TypeVar("T")

ANONYMOUS_STATEID = stateid4(0, bytes(12))
CURRENT_STATEID_SEQID = 0  # in NFSv4.1 a seqid of 0 means "the current one" (RFC 8881 8.2.2)
XATTR_SIZE_MAX = 64 * 1024  # the largest extended attribute value (Linux's limit, as its client's)
XATTR_LIST_MAX = 64 * 1024  # the largest list of names asked for in one LISTXATTRS
EMPTY_FATTR = fattr4([], b"")
VERIFIER_SIZE = 8
# CLOSEs nobody waits for (close_later) wait this long for others to share their COMPOUND, and go
# this many to a COMPOUND at most (fewer if the session's ca_maxoperations says so)
CLOSE_GATHER = 0.02
CLOSES_PER_COMPOUND = 8
# a CLOSE that meets one of these finds the open state gone already (expired, revoked, the server
# restarted) or moved on by a later OPEN of ours (OLD_STATEID): nothing is left to close
CLOSE_GONE = frozenset({c.NFS4ERR_BAD_STATEID, c.NFS4ERR_OLD_STATEID, c.NFS4ERR_EXPIRED,
                        c.NFS4ERR_STALE_STATEID, c.NFS4ERR_ADMIN_REVOKED})


# what LOCKU meets when the server no longer has the lock state (or the open) it names
_LOCK_STATE_GONE = STATE_LOST
# a blocked lock (a LOCK with READW_LT/WRITEW_LT answered NFS4ERR_DENIED) is asked for again after
# LOCK_POLL_FIRST, then twice as long each time, up to LOCK_POLL_MAX; up to LOCK_POLL_NOTIFIED when the
# server said at OPEN that it may send CB_NOTIFY_LOCK (which wakes the waiter at once; the RFC lets it
# be lost, so the waiter still asks now and then: RFC 8881 9.6, 20.11)
LOCK_POLL_FIRST = 0.1
LOCK_POLL_MAX = 5.0
LOCK_POLL_NOTIFIED = 30.0
# the operations a server told us it does not support (NFSv4.2's optional ones) answer one of these
_NOT_SUPPORTED = frozenset({c.NFS4ERR_NOTSUPP, c.NFS4ERR_OP_ILLEGAL})


def _open_attrs(res: list[ResOp], sent: int) -> FileAttrs | None:
    """The attributes an OPEN's COMPOUND ends with (None when it stopped short of them)."""
    last = res[-1]
    return FileAttrs.from_fattr4(last.res.obj_attributes) if len(res) == sent and last.opnum == c.OP_GETATTR else None


def _granted(res: list[ResOp]) -> int | None:
    """What the ACCESS in an OPEN's COMPOUND allowed, if it had one."""
    return next((int(r.res.access) for r in res if r.opnum == c.OP_ACCESS), None)


def current(stateid: stateid4) -> stateid4:
    """``stateid`` with seqid 0: "whatever is current" (RFC 8881 8.2.2). I/O sent with it stays valid
    when another OPEN by the same owner moves the open's seqid meanwhile (the kernel nfsd answers
    NFS4ERR_OLD_STATEID to a READ with the seqid before an OPEN of the same file in parallel)."""
    return stateid4(CURRENT_STATEID_SEQID, stateid.other)


# an entry as readdir_plus lists it: (name as the server sent it, cookie, file handle, attributes);
# a tuple, made by the thousand in a listing
ListedEntry = tuple[bytes, int, "bytes | None", "FileAttrs | None"]


@dataclass(slots=True)
class DirEntry:
    name: str
    cookie: int
    fh: bytes | None
    attrs: FileAttrs | None


_READ_DELEGATIONS = (c.OPEN_DELEGATE_READ, c.OPEN_DELEGATE_READ_ATTRS_DELEG)
_WRITE_DELEGATIONS = (c.OPEN_DELEGATE_WRITE, c.OPEN_DELEGATE_WRITE_ATTRS_DELEG)


@dataclass(slots=True, eq=False)
class Delegation:
    """A delegation the server granted on an OPEN (RFC 8881 10.4): while we hold it, nobody else
    writes the file (read delegation) or even opens it (write delegation), so opens it covers are
    made locally and cached attributes and data stay valid until it is recalled."""

    type: int  # OPEN_DELEGATE_READ / WRITE (or their _ATTRS_DELEG forms)
    stateid: stateid4
    fh: bytes
    returning: bool = False  # being returned: no new opens are made under it
    returned: trio.Event = field(default_factory=trio.Event)

    @property
    def write(self) -> bool:
        return self.type in _WRITE_DELEGATIONS

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
    granted: int | None = None  # what an ACCESS in the OPEN's COMPOUND allowed (when asked)
    may_notify_lock: bool = False  # the server said it may send CB_NOTIFY_LOCK for this file (OPEN's rflags)
    # unstable writes not yet committed: offset -> (length, verifier)
    uncommitted: dict[int, tuple[int, bytes]] = field(default_factory=dict)


class OwnerTraffic:
    """The OPENs and CLOSEs of each open owner on their way to the server. One owner's OPEN of a
    file it has open already moves that open state's seqid on: a CLOSE of the earlier seqid that the
    OPEN overtook would end nothing (NFS4ERR_OLD_STATEID) and the server would keep an open we
    believe closed. So an OPEN waits for its owner's CLOSEs on their way, and CLOSEs wait for their
    owner's OPENs on the way (which may carry the open state on: the CLOSE is then dropped)."""

    def __init__(self) -> None:
        self._opening: collections.Counter[bytes] = collections.Counter()
        self._closing: collections.Counter[bytes] = collections.Counter()
        self._settled = trio.Event()  # set, then replaced, whenever an OPEN or a CLOSE is answered

    def is_opening(self, owner: bytes) -> bool:
        return self._opening[owner] > 0

    async def settled(self) -> None:
        """Until an OPEN or a batch of CLOSEs on its way is answered."""
        await self._settled.wait()

    def _settle(self) -> None:
        settled, self._settled = self._settled, trio.Event()
        settled.set()

    @contextlib.asynccontextmanager
    async def opening(self, owner: bytes) -> AsyncIterator[None]:
        while self._closing[owner]:
            await self._settled.wait()
        self._opening[owner] += 1
        try:
            yield
        finally:
            self._opening[owner] -= 1
            self._settle()

    @contextlib.asynccontextmanager
    async def closing(self, owners: Iterable[bytes]) -> AsyncIterator[None]:
        counted = collections.Counter(owners)
        self._closing.update(counted)
        try:
            yield
        finally:
            self._closing.subtract(counted)
            self._settle()


class NFSv4:
    """File-handle level operations over a :class:`ClientID`'s session."""

    def __init__(self, client: ClientID) -> None:
        self.client = client
        self.root_fh: bytes = b""
        self.maxread = 1 << 20
        self.maxwrite = 1 << 20
        self.opens: dict[int, OpenFile] = {}  # id(open) -> open, for reclaim after a server restart
        self.delegations: dict[bytes, Delegation] = {}
        # ask for delegations (the FUSE mount caches under them; the path API has no cache to keep)
        self.want_delegations = False
        # called with a file handle before its delegation goes back: dirty data must reach the server
        self.delegation_return_hooks: list[Callable[[bytes], Awaitable[None]]] = []
        self.delegation_counts = {"granted": 0, "recalled": 0, "returned": 0, "local_opens": 0}
        self.reclaimed = 0  # opens reclaimed after server restarts
        # the export's file system has extended attributes (NFSv4.2 sessions only; learned by mount)
        self.xattr_support = False
        # an open owner per OPEN (the path API: its opens are independent, and one open owner's
        # opens of one file are one open state on the server, which the first CLOSE would end for
        # all); the FUSE mount shares one open per (file, user) itself and keeps one owner per user
        self.owner_per_open = False
        # byte-range locks: lock owners and the lock state of each (open, owner)
        self.locks = LockTable()
        self.lock_counts = {"granted": 0, "denied": 0, "reclaimed": 0, "lost": 0, "notified": 0}
        # the NFSv4.2 operations the server said it does not support: not sent again
        self.unsupported: set[int] = set()
        self._opens_made = itertools.count(1)
        self._closing: collections.deque[tuple[OpenFile, Credential]] = collections.deque()
        self._close_sender: trio.Event | None = None  # set when the sender of _closing is done
        # OPENs and CLOSEs of one open owner do not pass each other on the way to the server
        self._owners = OwnerTraffic()
        # queued CLOSEs an OPEN carried the open state on from: only their locks are let go
        self._superseded: set[int] = set()
        # one LOCK or LOCKU of a lock state at a time (each moves its stateid's seqid on)
        self._lock_serial: weakref.WeakKeyDictionary[LockState, trio.Lock] = weakref.WeakKeyDictionary()
        # blocked locks waiting, by (file handle, lock owner name): set by CB_NOTIFY_LOCK
        self._lock_waiters: dict[tuple[bytes, bytes], set[trio.Event]] = {}
        client.reclaim_hooks.append(self._reclaim)
        client.state_revoked_hooks.append(self._revoked)
        client.backchannel.on_recall = self._recall
        client.backchannel.on_recall_any = self._recall_any
        client.backchannel.on_notify_lock = self._notify_lock

    # -- plumbing ---------------------------------------------------------------------------------------
    async def run(
        self,
        ops: Sequence[Any],
        cred: Credential,
        hints: ReplyHints | None = None,
        *,
        payload: int = 0,
        path: str | None = None,
        recovering: bool = False,
        check: Callable[[list[ResOp]], None] | None = None,
    ) -> list[ResOp]:
        """Run a COMPOUND; raise NFS4Error for the failed operation, else return the results (one per
        operation, each for its operation: the session checked the reply). ``check``: see
        :meth:`ClientID.compound`."""
        try:
            res = await self.client.compound(
                ops, cred, hints if hints is not None else _NO_HINTS, payload=payload, check=check,
                _recovering=recovering,
            )
        except ReplyError as e:
            raise e.located(None, path) from None
        if res.status != c.NFS4_OK:
            failed = res.resarray[-1] if res.resarray else None
            raise NFS4Error(res.status, failed.opnum if failed else None, path)
        return res.resarray

    async def query(
        self,
        ops: Sequence[Any],
        cred: Credential,
        parse: Callable[[list[ResOp]], T],
        hints: ReplyHints | None = None,
        *,
        payload: int = 0,
        path: str | None = None,
        recovering: bool = False,
    ) -> T:
        """As :meth:`run`, returning ``parse(results)``, which runs inside the session's checks: what
        it raises for results it cannot use (XdrError for malformed attributes) is a protocol
        violation, as a malformed reply is."""
        out: list[T] = []

        def check(results: list[ResOp]) -> None:
            out[:] = [parse(results)]

        await self.run(ops, cred, hints, payload=payload, path=path, recovering=recovering, check=check)
        return out[0]

    def io_window(self, io_size: int) -> int:
        """READs or WRITEs of ``io_size`` bytes a transfer keeps in flight now: it grows with the
        live paths and their bandwidth-delay products, within the session's slots."""
        return self.client.io_window(io_size)

    # -- the export ---------------------------------------------------------------------------------------
    async def mount(self, export: str, cred: Credential) -> tuple[bytes, FileAttrs]:
        """Look up the export's root; learn maxread/maxwrite and the lease time."""
        ops: list[Any] = [PUTROOTFH4args()]
        ops += [LOOKUP4args(n) for n in _components(export)]
        ops += [GETFH4args(), GETATTR4args(STAT_BITMAP), GETATTR4args(FS_INFO_BITMAP)]
        v42 = self.client.options.minorversion >= c.NFS4_MINOR_VERSION_2
        if v42:
            ops.append(GETATTR4args(XATTR_SUPPORT_BITMAP))
        from ..proto.nfs4.attrs import decode_fattr4

        def parse(res: list[ResOp]) -> tuple[bool, bytes, FileAttrs, dict[int, Any]]:
            stat, fs_info, *xattrs = results_of(res, c.OP_GETATTR)
            xattr = decode_fattr4(xattrs[0].obj_attributes) if v42 else {}
            return (bool(xattr.get(c.FATTR4_XATTR_SUPPORT, False)), bytes(result_of(res, c.OP_GETFH).object),
                    FileAttrs.from_fattr4(stat.obj_attributes), decode_fattr4(fs_info.obj_attributes))

        self.xattr_support, fh, attrs, info = await self.query(ops, cred, parse, path=export)
        # no more than the server's maxread and maxwrite, and than its session carries
        session = self.client.session
        room = (session.max_response_size - COMPOUND_ROOM, session.max_request_size - COMPOUND_ROOM) if session else (0, 0)
        self.maxread = min(self.client.options.rsize, info.get(c.FATTR4_MAXREAD, self.maxread) or self.maxread)
        self.maxwrite = min(self.client.options.wsize, info.get(c.FATTR4_MAXWRITE, self.maxwrite) or self.maxwrite)
        self.maxread = max(1, min(self.maxread, room[0] or self.maxread))
        self.maxwrite = max(1, min(self.maxwrite, room[1] or self.maxwrite))
        if c.FATTR4_LEASE_TIME in info:
            self.client.lease_time = info[c.FATTR4_LEASE_TIME]
        self.root_fh = fh
        return fh, attrs

    async def secinfo(self, export: str, cred: Credential) -> list[Flavor]:
        """The flavours the server takes for ``export``, in its order of preference, of those this
        client speaks: SECINFO of the first name on the way that the server refused to ``cred``
        (NFS4ERR_WRONGSEC), in its parent, or SECINFO_NO_NAME of the export when none was refused."""
        names = _components(export)
        walk: list[Any] = [PUTROOTFH4args(), *(LOOKUP4args(n) for n in names)]
        res = await self.client.compound(walk, cred)
        if res.status == c.NFS4ERR_WRONGSEC and 1 < len(res.resarray) <= len(walk):
            refused = len(res.resarray) - 1  # (walk[refused] is the LOOKUP into the export)
            ops = [*walk[:refused], SECINFO4args(names[refused - 1])]
        elif res.status == c.NFS4_OK:
            ops = [*walk, SECINFO_NO_NAME4args(c.SECINFO_STYLE4_CURRENT_FH)]
        else:
            failed = res.resarray[-1] if res.resarray else None
            raise NFS4Error(res.status, failed.opnum if failed else None, export)
        found: list[Flavor] = []
        for flavor, info in (await self.run(ops, cred, path=export))[-1].res:
            f = flavor_of_secinfo(flavor, *((info.oid, info.service) if info is not None else ()))
            if f is not None and f not in found:
                found.append(f)
        return found

    # -- names --------------------------------------------------------------------------------------------
    async def lookup(self, dir_fh: bytes, name: str, cred: Credential) -> tuple[bytes, FileAttrs]:
        return await self.query(
            [PUTFH4args(dir_fh), LOOKUP4args(name), GETFH4args(), GETATTR4args(STAT_BITMAP)], cred, _fh_attrs,
            path=name,
        )

    async def lookup_path(self, dir_fh: bytes, names: Sequence[str], cred: Credential,
                          path: str | None = None) -> tuple[bytes, FileAttrs]:
        """Several LOOKUPs in one COMPOUND (a path below ``dir_fh``)."""
        ops: list[Any] = [PUTFH4args(dir_fh)]
        ops += [LOOKUP4args(n) for n in names]
        ops += [GETFH4args(), GETATTR4args(STAT_BITMAP)]
        return await self.query(ops, cred, _fh_attrs, path=path)

    async def lookupp(self, fh: bytes, cred: Credential) -> tuple[bytes, FileAttrs]:
        return await self.query([PUTFH4args(fh), LOOKUPP4args(), GETFH4args(), GETATTR4args(STAT_BITMAP)], cred,
                                _fh_attrs)

    async def getattr(self, fh: bytes, cred: Credential, path: str | None = None) -> FileAttrs:
        return await self.query([PUTFH4args(fh), GETATTR4args(STAT_BITMAP)], cred, _last_attrs, path=path)

    async def setattr(
        self, fh: bytes, cred: Credential, *, stateid: stateid4 | None = None, path: str | None = None,
        mode: int | None = None, uid: int | None = None, gid: int | None = None, size: int | None = None,
        atime_ns: int | str | None = None, mtime_ns: int | str | None = None,
    ) -> FileAttrs:
        f = setattr_fattr4(mode, uid, gid, size, atime_ns, mtime_ns)
        return await self.query(
            [PUTFH4args(fh), SETATTR4args(stateid or ANONYMOUS_STATEID, f), GETATTR4args(STAT_BITMAP)],
            cred, _last_attrs, path=path,
        )

    async def access(self, fh: bytes, mask: int, cred: Credential) -> int:
        res = await self.run([PUTFH4args(fh), ACCESS4args(mask)], cred)
        return int(result_of(res, c.OP_ACCESS).access)

    async def access_attrs(self, fh: bytes, mask: int, cred: Credential) -> tuple[int, FileAttrs]:
        """What of ``mask`` ``cred`` may do to ``fh`` (ACCESS), and its attributes."""
        return await self.query([PUTFH4args(fh), ACCESS4args(mask), GETATTR4args(STAT_BITMAP)], cred,
                                lambda r: (int(result_of(r, c.OP_ACCESS).access), _last_attrs(r)))

    async def lookup_access(
        self, dir_fh: bytes, name: str, mask: int, cred: Credential
    ) -> tuple[bytes, int, FileAttrs]:
        """``name`` in ``dir_fh``: its file handle, what of ``mask`` ``cred`` may do to it (ACCESS),
        and its attributes, in one COMPOUND."""
        return await self.query(
            [PUTFH4args(dir_fh), LOOKUP4args(name), GETFH4args(), ACCESS4args(mask), GETATTR4args(STAT_BITMAP)],
            cred, lambda r: (bytes(result_of(r, c.OP_GETFH).object), int(result_of(r, c.OP_ACCESS).access), _last_attrs(r)),
            path=name,
        )

    async def statfs(self, fh: bytes, cred: Credential) -> FsStat:
        return await self.query([PUTFH4args(fh), GETATTR4args(STATFS_BITMAP)], cred,
                                lambda r: FsStat.from_fattr4(result_of(r, c.OP_GETATTR).obj_attributes))

    # -- directories --------------------------------------------------------------------------------------
    async def readdir(
        self, fh: bytes, cred: Credential, cookie: int = 0, verifier: bytes = bytes(VERIFIER_SIZE),
        maxcount: int = 64 * 1024, with_attrs: bool = True, path: str | None = None,
    ) -> tuple[list[DirEntry], bytes, bool]:
        """One READDIR: (entries, cookie verifier, eof)."""
        bitmap = _READDIR_BITMAP if with_attrs else _READDIR_FH_ONLY
        from ..proto.nfs4.attrs import decode_fattr4

        def parse(res: list[ResOp]) -> tuple[list[DirEntry], bytes, bool]:
            ok = result_of(res, c.OP_READDIR)
            entries = []
            for e in ok.reply.entries:
                d = decode_fattr4(e.attrs)
                efh = d.get(c.FATTR4_FILEHANDLE)
                entries.append(DirEntry(e.name, e.cookie, bytes(efh) if efh is not None else None,
                                        FileAttrs.from_dict(d) if with_attrs else None))
            return entries, bytes(ok.cookieverf), bool(ok.reply.eof)

        return await self.query(
            [PUTFH4args(fh), READDIR4args(cookie, verifier, maxcount, maxcount, bitmap)],
            cred, parse, ReplyHints(max_reply=maxcount), path=path,
        )

    async def listdir(self, fh: bytes, cred: Credential, with_attrs: bool = True,
                      path: str | None = None) -> list[DirEntry]:
        """All entries, paging READDIR with cookie and verifier."""
        out: list[DirEntry] = []
        cookie, verf = 0, bytes(VERIFIER_SIZE)
        cookies = Cookies(self.client.server, path)
        while True:
            entries, verf, eof = await self.readdir(fh, cred, cookie, verf, with_attrs=with_attrs, path=path)
            cookies.check(e.cookie for e in entries)
            out.extend(entries)
            if eof or not entries:
                return out
            cookie = entries[-1].cookie

    async def create(
        self, dir_fh: bytes, name: str, ftype: int, cred: Credential, *, mode: int = 0o755,
        linkdata: bytes | None = None, rdev: tuple[int, int] = (0, 0), uid: int | None = None,
        gid: int | None = None, path: str | None = None,
    ) -> tuple[bytes, FileAttrs, change_info4]:
        """CREATE a non-regular object: directory, symlink, device, fifo, socket. Returns its file
        handle, its attributes and how the directory changed."""
        if ftype == c.NF4LNK:
            objtype: tuple[int, Any] = (c.NF4LNK, linkdata or b"")
        elif ftype in (c.NF4BLK, c.NF4CHR):
            objtype = (ftype, specdata4(*rdev))
        else:
            objtype = (ftype, None)
        attrs = setattr_fattr4(mode=mode, uid=uid, gid=gid)
        return await self.query(
            [PUTFH4args(dir_fh), CREATE4args(objtype, name, attrs), GETFH4args(), GETATTR4args(STAT_BITMAP)],
            cred, lambda r: (bytes(result_of(r, c.OP_GETFH).object), _last_attrs(r), result_of(r, c.OP_CREATE).cinfo),
            path=path or name,
        )

    async def remove(self, dir_fh: bytes, name: str, cred: Credential, path: str | None = None) -> change_info4:
        """REMOVE; returns how the directory changed."""
        res = await self.run([PUTFH4args(dir_fh), REMOVE4args(name)], cred, path=path or name)
        return cast(change_info4, result_of(res, c.OP_REMOVE).cinfo)

    async def rename(self, src_dir: bytes, old: str, dst_dir: bytes, new: str, cred: Credential,
                     path: str | None = None) -> tuple[change_info4, change_info4]:
        """RENAME; returns how the source and the target directory changed."""
        res = await self.run(
            [PUTFH4args(src_dir), SAVEFH4args(), PUTFH4args(dst_dir), RENAME4args(old, new)], cred,
            path=path or old,
        )
        ok = result_of(res, c.OP_RENAME)
        return ok.source_cinfo, ok.target_cinfo

    async def link(self, fh: bytes, dir_fh: bytes, name: str, cred: Credential,
                   path: str | None = None) -> tuple[FileAttrs, change_info4]:
        """LINK; returns the file's attributes and how the directory changed."""
        return await self.query(
            [PUTFH4args(fh), SAVEFH4args(), PUTFH4args(dir_fh), LINK4args(name), RESTOREFH4args(),
             GETATTR4args(STAT_BITMAP)],
            cred, lambda r: (_last_attrs(r), result_of(r, c.OP_LINK).cinfo), path=path or name,
        )

    async def readlink(self, fh: bytes, cred: Credential, path: str | None = None) -> bytes:
        # no Write chunk for the link (DDP-eligible, but Linux's nfsd 6.1 misplaces it in one, and
        # Linux's client never offers one): up to 4096 bytes of link in the reply, a Reply chunk
        # when that may not fit inline
        hints = ReplyHints(max_reply=4096 + 512)
        res = await self.run([PUTFH4args(fh), READLINK4args()], cred, hints, path=path)
        return bytes(result_of(res, c.OP_READLINK).link)

    # -- extended attributes (NFSv4.2, RFC 8276: the "user." namespace, without its prefix) ---------------
    async def getxattr(self, fh: bytes, name: str, cred: Credential, path: str | None = None) -> bytes:
        """The value of extended attribute ``name`` (NFS4Error NFS4ERR_NOXATTR: ENODATA when absent)."""
        hints = ReplyHints(max_reply=XATTR_SIZE_MAX + 512)
        res = await self.run([PUTFH4args(fh), GETXATTR4args(name)], cred, hints, path=path)
        return bytes(result_of(res, c.OP_GETXATTR))

    async def setxattr(
        self,
        fh: bytes,
        name: str,
        value: bytes,
        cred: Credential,
        option: int = c.SETXATTR4_EITHER,
        path: str | None = None,
    ) -> None:
        """Set extended attribute ``name``; ``option`` SETXATTR4_CREATE fails if it exists
        (EEXIST), SETXATTR4_REPLACE if it does not (ENODATA)."""
        await self.run([PUTFH4args(fh), SETXATTR4args(option, name, value)], cred, path=path)

    async def listxattrs(self, fh: bytes, cred: Credential, path: str | None = None) -> list[str]:
        """The names of every extended attribute of the file (LISTXATTRS, paged by cookie)."""
        names: list[str] = []
        cookie = 0
        while True:
            res = await self.run(
                [PUTFH4args(fh), LISTXATTRS4args(cookie, XATTR_LIST_MAX)],
                cred,
                ReplyHints(max_reply=XATTR_LIST_MAX + 512),
                path=path,
            )
            ok = result_of(res, c.OP_LISTXATTRS)
            names.extend(ok.lxr_names)
            if ok.lxr_eof or not ok.lxr_names:
                return names
            cookie = ok.lxr_cookie

    async def removexattr(self, fh: bytes, name: str, cred: Credential, path: str | None = None) -> None:
        await self.run([PUTFH4args(fh), REMOVEXATTR4args(name)], cred, path=path)

    # -- open state ---------------------------------------------------------------------------------------
    def open_owner(self, cred: Credential) -> bytes:
        user = cred.uid if cred.uid is not None else "none"
        if self.owner_per_open:
            return f"open-{user}-{next(self._opens_made)}".encode()
        return f"open-{user}".encode()

    async def open(
        self, dir_fh: bytes, name: str, cred: Credential, *, access: int = c.OPEN4_SHARE_ACCESS_READ,
        create: bool = False, exclusive: bool = False, truncate: bool = False, mode: int = 0o644,
        check: int = 0, path: str | None = None,
    ) -> OpenFile:
        """OPEN by name (CLAIM_NULL), creating if asked; O_EXCL uses EXCLUSIVE4_1 with a verifier.
        ``check``: ACCESS bits to ask about in the same COMPOUND (``OpenFile.granted``)."""
        owner = self.open_owner(cred)
        if create:
            if exclusive:
                how: tuple[int, Any] = (c.EXCLUSIVE4_1, creatverfattr(os.urandom(VERIFIER_SIZE),
                                                                      setattr_fattr4(mode=mode)))
            else:
                how = (c.UNCHECKED4, setattr_fattr4(mode=mode, size=0 if truncate else None))
            openhow: tuple[int, Any] = (c.OPEN4_CREATE, how)
        else:
            openhow = (c.OPEN4_NOCREATE, None)
        clientid = self.client.identity.clientid if self.client.identity else 0
        args = OPEN4args(0, self.share_access(access), c.OPEN4_SHARE_DENY_NONE,
                         open_owner4(clientid, owner), openhow, (c.CLAIM_NULL, name))
        ops: list[Any] = [PUTFH4args(dir_fh), args, GETFH4args()]
        if check:
            ops.append(ACCESS4args(check))
        if create and exclusive:
            # the server may keep the exclusive create's verifier in the file's times (RFC 8881
            # 18.16.4; NFS-Ganesha does): they are set to its "now" in the same COMPOUND
            ops.append(SETATTR4args(ANONYMOUS_STATEID, setattr_fattr4(atime_ns=NOW, mtime_ns=NOW)))
        ops.append(GETATTR4args(STAT_BITMAP))
        async with self._owners.opening(owner):
            res, attrs = await self._run_open(ops, cred, path or name)
            ok = result_of(res, c.OP_OPEN)
            of = OpenFile(bytes(result_of(res, c.OP_GETFH).object), ok.stateid, access, owner, attrs,
                          cred=cred, dir_change=ok.cinfo, granted=_granted(res),
                          may_notify_lock=bool(ok.rflags & c.OPEN4_RESULT_MAY_NOTIFY_LOCK))
            self._continued(of)
        if of.attrs is None:
            of.attrs = await self.getattr(of.fh, cred, path=path or name)
        self.took_delegation(of, ok.delegation)
        if truncate and not create and of.attrs is not None and of.attrs.size:
            of.attrs = await self.setattr(of.fh, cred, stateid=of.stateid, size=0, path=path)
        self.opens[id(of)] = of
        return of

    async def _run_open(self, ops: list[Any], cred: Credential, path: str) -> tuple[list[ResOp], FileAttrs | None]:
        """Run an OPEN COMPOUND: its results and the attributes it ends with. A failure after the
        OPEN and its GETFH (setting the times an exclusive create used) leaves the file open, and
        the results up to there are returned (without attributes)."""
        attrs: list[FileAttrs | None] = [None]

        def check(res: list[ResOp]) -> None:
            attrs[0] = _open_attrs(res, len(ops))

        try:
            res = await self.client.compound(ops, cred, _NO_HINTS, check=check)
        except ReplyError as e:
            raise e.located(None, path) from None
        if res.status == c.NFS4_OK:
            return res.resarray, attrs[0]
        done = res.resarray[:-1]
        if len(done) >= 3:
            log.info("%s: after the OPEN: %s", path, NFS4Error(res.status, res.resarray[-1].opnum, path))
            return done, None
        failed = res.resarray[-1] if res.resarray else None
        raise NFS4Error(res.status, failed.opnum if failed else None, path)

    async def open_fh(self, fh: bytes, cred: Credential, access: int = c.OPEN4_SHARE_ACCESS_READ,
                      path: str | None = None, check: int = 0) -> OpenFile:
        """OPEN an already looked-up file (CLAIM_FH). A read delegation we hold goes back first when
        the open is for writing (:meth:`prepare_open`). ``check``: as :meth:`open`."""
        await self.prepare_open(fh, access)
        owner = self.open_owner(cred)
        clientid = self.client.identity.clientid if self.client.identity else 0
        args = OPEN4args(0, self.share_access(access), c.OPEN4_SHARE_DENY_NONE,
                         open_owner4(clientid, owner), (c.OPEN4_NOCREATE, None), (c.CLAIM_FH, None))
        ops: list[Any] = [PUTFH4args(fh), args]
        if check:
            ops.append(ACCESS4args(check))
        ops.append(GETATTR4args(STAT_BITMAP))
        async with self._owners.opening(owner):
            res, attrs = await self.query(ops, cred, lambda r: (r, _open_attrs(r, len(ops))), path=path)
            ok = result_of(res, c.OP_OPEN)
            of = OpenFile(fh, ok.stateid, access, owner, attrs, cred=cred,
                          granted=_granted(res), may_notify_lock=bool(ok.rflags & c.OPEN4_RESULT_MAY_NOTIFY_LOCK))
            self._continued(of)
        self.took_delegation(of, ok.delegation)
        self.opens[id(of)] = of
        return of

    async def prepare_open(self, fh: bytes, access: int) -> None:
        """Before an OPEN of ``fh`` with ``access``: a read delegation we hold on it goes back if the
        open is for writing (as the Linux client does with an incompatible delegation)."""
        d = self.delegations.get(fh)
        if d is not None and not d.write and access & c.OPEN4_SHARE_ACCESS_WRITE:
            await self.return_delegation(fh)

    def open_delegated(self, d: Delegation, cred: Credential, access: int) -> OpenFile:
        """An open made locally under the delegation ``d`` (which must cover ``access``): no OPEN is
        sent, I/O uses the delegation's stateid, and closing it sends nothing (RFC 8881 10.4)."""
        of = OpenFile(d.fh, d.stateid, access, self.open_owner(cred), None, d, local=True, cred=cred)
        self.opens[id(of)] = of
        self.delegation_counts["local_opens"] += 1
        return of

    async def close(self, of: OpenFile, cred: Credential) -> None:
        """CLOSE ``of``; the locks held on it go first, in the same COMPOUND (every lock owner's: a
        server refuses to close an open with locks on it, NFS4ERR_LOCKS_HELD)."""
        if of.closed:
            self._forget_locks(of)
            return
        of.closed = True
        self.opens.pop(id(of), None)
        release = self._release_ops(of)
        self._forget_locks(of)
        if of.local:
            return  # made under a delegation: the server never saw it
        try:
            await self.run([PUTFH4args(of.fh), *release, CLOSE4args(0, of.stateid)], cred)
        except NFS4Error as e:
            if e.status not in CLOSE_GONE:
                raise

    def _continued(self, of: OpenFile) -> None:
        """``of`` was just OPENed: a CLOSE still waiting to go for the same open state (the same
        owner opened the same file again) is not sent, as ``of`` carries that state on; the locks
        held on the earlier open still go."""
        other = of.stateid.other
        for q, _ in self._closing:
            if q.stateid.other == other:
                self._superseded.add(id(q))

    def close_later(self, of: OpenFile, cred: Credential, nursery: trio.Nursery) -> None:
        """CLOSE ``of`` soon, in one COMPOUND with the other opens closed about then, for a caller
        that does not wait for the CLOSE (FUSE's release). The open is over for us at once: no I/O
        may use it, and it is not reclaimed. An OPEN of the same file by the same owner meanwhile
        carries the open state on, and the CLOSE is not sent (the locks still held on it go all the
        same). :meth:`flush_closes` sends what waits. Locks still held on it are released in the same
        COMPOUND, as :meth:`close` does."""
        if of.closed:
            self._forget_locks(of)
            return
        of.closed = True
        self.opens.pop(id(of), None)
        if of.local:
            self._forget_locks(of)
            return
        self._closing.append((of, cred))
        if self._close_sender is None:
            self._close_sender = trio.Event()
            nursery.start_soon(self._send_closes)

    async def flush_closes(self) -> None:
        """Send every CLOSE that :meth:`close_later` holds, and wait for their replies."""
        while self._close_sender is not None:
            await self._close_sender.wait()
        await self._send_queued()

    async def _send_closes(self) -> None:
        try:
            await trio.sleep(CLOSE_GATHER)
            await self._send_queued()
        finally:
            done, self._close_sender = self._close_sender, None
            if done is not None:
                done.set()

    async def _send_queued(self) -> None:
        """Send the queued CLOSEs, waiting for OPENs of their owners on the way to be answered (the
        OPEN may carry the open state on, and its CLOSE is then not sent)."""
        while self._closing:
            if all(self._owners.is_opening(of.owner) for of, _ in self._closing):
                await self._owners.settled()
                continue
            await self._close_some()

    async def _close_some(self) -> None:
        """One COMPOUND of CLOSEs (PUTFH, [LOCKU, FREE_STATEID ...], CLOSE, PUTFH, CLOSE ...) from the
        queue, in order, all with one user's credential, none of an owner whose OPEN is on its way;
        those after a failed one go back to the queue. Of an open whose state an OPEN carried on,
        only the locks are let go."""
        session = self.client.session
        room = session.max_operations - 1 if session is not None else 2  # (SEQUENCE takes one)
        owners = self._owners
        first = next(cr for of, cr in self._closing if not owners.is_opening(of.owner))
        who = (first.uid, first.gid, first.gids)
        batch: list[OpenFile] = []
        ops: list[Any] = []
        whose: list[int] = []  # for each operation, the open of the batch it closes
        kept: collections.deque[tuple[OpenFile, Credential]] = collections.deque()
        full = False
        while self._closing:
            of, cred = self._closing.popleft()
            if full or (cred.uid, cred.gid, cred.gids) != who or owners.is_opening(of.owner):
                kept.append((of, cred))
                continue
            release = self._release_ops(of)
            if id(of) in self._superseded:
                self._superseded.discard(id(of))
                these = [PUTFH4args(of.fh), *release] if release else []
            else:
                these = [PUTFH4args(of.fh), *release, CLOSE4args(0, of.stateid)]
            if batch and len(ops) + len(these) > room:
                kept.append((of, cred))
                full = True
                continue
            self._forget_locks(of)
            if not these:
                continue
            whose += [len(batch)] * len(these)
            batch.append(of)
            ops += these
            full = len(batch) >= CLOSES_PER_COMPOUND
        self._closing = kept
        if not batch:
            return
        try:
            async with owners.closing(of.owner for of in batch):
                res = await self.client.compound(ops, first, _NO_HINTS)
        except Exception as e:  # (nobody waits for these: a failure must not end the caller's nursery)
            # the session is gone (and the opens with it), a bad reply, an RPC-level refusal
            log.info("CLOSE of %d open(s): %s", len(batch), e)
            return
        if res.status == c.NFS4_OK:
            return
        if not res.resarray:  # (SEQUENCE itself failed)
            log.warning("CLOSE of %d open(s): %s", len(batch), NFS4Error(res.status, c.OP_SEQUENCE))
            return
        failed = whose[min(len(res.resarray), len(whose)) - 1]  # the open whose operation failed
        if res.status not in CLOSE_GONE:
            log.warning("CLOSE of an open: %s", NFS4Error(res.status, res.resarray[-1].opnum))
        self._closing.extendleft(reversed([(of, first) for of in batch[failed + 1:]]))

    async def _reclaim(self, client: ClientID) -> None:
        """After a server restart: reclaim every open with CLAIM_PREVIOUS during the grace period, and
        the byte-range locks held on it (LOCK with reclaim). What cannot be reclaimed is reported and
        recorded as lost (I/O by the lock owner then fails with EIO), never dropped in silence."""
        clientid = client.identity.clientid if client.identity else 0
        # delegations are not reclaimed: opens made under them are reclaimed as opens of their own
        for d in self.delegations.values():
            d.returning = True
            d.returned.set()
        self.delegations.clear()
        for of in list(self.opens.values()):
            args = OPEN4args(0, of.access | c.OPEN4_SHARE_ACCESS_WANT_NO_DELEG, c.OPEN4_SHARE_DENY_NONE,
                             open_owner4(clientid, of.owner), (c.OPEN4_NOCREATE, None),
                             (c.CLAIM_PREVIOUS, c.OPEN_DELEGATE_NONE))
            try:
                res = await self.run([PUTFH4args(of.fh), args], client.machine_cred, recovering=True)
            except NFS4Error as e:
                of.closed = True  # could not be reclaimed: further I/O on it fails cleanly
                self.opens.pop(id(of), None)
                self._lose_locks(of, f"the open they stood on was not reclaimed after a server restart ({e.name})")
                continue
            of.stateid, of.local = result_of(res, c.OP_OPEN).stateid, False
            self.reclaimed += 1
            for st in self.locks.of_open(of):
                await self._reclaim_locks(st, of.cred or client.machine_cred)

    async def _reclaim_locks(self, st: LockState, cred: Credential) -> None:
        """LOCK with reclaim each range ``st`` held before the server restarted (its open was just
        reclaimed: the first LOCK introduces the lock owner again with the new open stateid)."""
        if st.lost is not None:
            return  # lost before: stays lost until the owner unlocks
        held = list(st.ranges)
        st.stateid = None
        if not held:
            self._settle(st)
            return
        for offset, length, locktype in held:
            try:
                await self._send_lock(st, locktype, offset, length, cred, reclaim=True)
            except NFS4Error as e:
                self._lose(st, f"not reclaimed after a server restart ({e.name})")
                return
        self.lock_counts["reclaimed"] += 1

    async def _revoked(self, client: ClientID) -> None:
        """Some state was revoked: find which with TEST_STATEID, free it, and fail the opens that
        stood on it (an open made under a revoked delegation too: its data may be stale) and the
        locks (their owners' I/O fails with EIO)."""
        unique: dict[bytes, stateid4] = {}
        for of in self.opens.values():
            unique.setdefault(bytes(of.stateid.other), of.stateid)
        for d in self.delegations.values():
            unique.setdefault(bytes(d.stateid.other), d.stateid)
        for st in self.locks.all():
            if st.stateid is not None:
                unique.setdefault(bytes(st.stateid.other), st.stateid)
        if not unique:
            return
        stateids = list(unique.values())
        res = await self.run([TEST_STATEID4args(stateids)], client.machine_cred)
        codes = result_of(res, c.OP_TEST_STATEID).tsr_status_codes
        bad = set()
        for sid, code in zip(stateids, codes, strict=False):
            if code != c.NFS4_OK:
                await self.run([FREE_STATEID4args(sid)], client.machine_cred)
                bad.add(bytes(sid.other))
        for st in self.locks.all():
            if st.stateid is not None and bytes(st.stateid.other) in bad:
                self._lose(st, "revoked by the server")
        for of in list(self.opens.values()):
            if bytes(of.stateid.other) in bad:
                of.closed = True
                self.opens.pop(id(of), None)
                self._lose_locks(of, "the open they stood on was revoked by the server")
        for fh, d in list(self.delegations.items()):
            if bytes(d.stateid.other) in bad:
                del self.delegations[fh]
                d.returning = True
                d.returned.set()

    def upgraded(self, into: OpenFile, of: OpenFile) -> None:
        """The open owner of ``into`` opened the same file again and got ``of``: the server upgraded
        the one open state, which ``into`` now stands for (with the access of both; an open made
        under a delegation has open state of its own now, when ``of`` has)."""
        into.stateid = of.stateid
        into.access |= of.access
        into.local = of.local
        self.opens.pop(id(of), None)

    async def reopen(self, of: OpenFile, cred: Credential) -> None:
        """The server lost the open state behind ``of`` (it restarted without a grace period, or our
        lease ran out and the state went): OPEN the file again and carry on with the new stateid in
        ``of``. The byte-range locks held on it are recorded as lost, not taken again: between the
        loss and now another client may have locked and written the range (their owners' I/O fails
        with EIO until they unlock)."""
        new = await self.open_fh(of.fh, cred, of.access)
        self.opens.pop(id(new), None)
        of.stateid, of.owner, of.closed, of.local = new.stateid, new.owner, False, False
        of.may_notify_lock = new.may_notify_lock
        self.opens[id(of)] = of
        self._lose_locks(of, "the open they stood on was lost on the server and made again")

    async def release_all(self) -> None:
        """Unlock and close everything still open, best effort (before the client ID goes: a server
        keeps what we leave until our lease runs out, and other clients wait for those locks)."""
        for of in list(self.opens.values()):
            try:
                await self.close(of, of.cred or self.client.machine_cred)
            except Exception as e:  # (the session may be gone already: nothing is left to release)
                log.info("releasing an open at the end: %s", e)
        await self.flush_closes()

    # -- delegations (RFC 8881 10.2, 10.4) ----------------------------------------------------------------
    def share_access(self, access: int) -> int:
        """OPEN's share_access: with ``want_delegations`` the server chooses (no want bits, as the
        Linux client sends); otherwise we say we want none."""
        return access if self.want_delegations else access | c.OPEN4_SHARE_ACCESS_WANT_NO_DELEG

    def took_delegation(self, of: OpenFile, granted: tuple[int, Any]) -> None:
        """Record the delegation an OPEN's reply carries (if any) for ``of``'s file."""
        dtype, arm = granted
        if dtype not in _READ_DELEGATIONS and dtype not in _WRITE_DELEGATIONS:
            return
        d = Delegation(int(dtype), arm.stateid, of.fh)
        old = self.delegations.get(of.fh)
        if old is not None and old.stateid.other == d.stateid.other:
            old.type, old.stateid = d.type, d.stateid  # the same delegation (upgraded)
            of.delegation = old
            return
        self.delegations[of.fh] = d
        of.delegation = d
        self.delegation_counts["granted"] += 1
        if arm.recall:  # granted on a reclaim, but the server wants it back at once
            self.client.nursery.start_soon(self.return_delegation, of.fh)

    def delegation_for(self, fh: bytes, access: int) -> Delegation | None:
        """The delegation held on ``fh`` if it covers an open with ``access``."""
        d = self.delegations.get(fh)
        return d if d is not None and d.covers(access) else None

    async def return_delegation(self, fh: bytes, stateid: stateid4 | None = None) -> None:
        """Give the delegation on ``fh`` back (DELEGRETURN): first the opens made under it are OPENed
        for real (CLAIM_DELEG_CUR_FH) so they outlive it, then the return hooks send dirty data.
        Single-flight: a second caller waits for the first. ``stateid`` names a delegation we do not
        know (a recall of one we let go already): it is returned as it is."""
        d = self.delegations.get(fh)
        if d is None or (stateid is not None and d.stateid.other != stateid.other):
            if stateid is not None:
                await self._delegreturn(fh, stateid)
            return
        if d.returning:
            await d.returned.wait()
            return
        d.returning = True
        try:
            clientid = self.client.identity.clientid if self.client.identity else 0
            for of in list(self.opens.values()):
                if not (of.local and of.fh == fh and not of.closed):
                    continue
                args = OPEN4args(0, of.access | c.OPEN4_SHARE_ACCESS_WANT_NO_DELEG, c.OPEN4_SHARE_DENY_NONE,
                                 open_owner4(clientid, of.owner), (c.OPEN4_NOCREATE, None),
                                 (c.CLAIM_DELEG_CUR_FH, d.stateid))
                res = await self.run([PUTFH4args(fh), args], of.cred or self.client.machine_cred)
                of.stateid, of.local = result_of(res, c.OP_OPEN).stateid, False
            for hook in self.delegation_return_hooks:
                await hook(fh)
            await self._delegreturn(fh, d.stateid)
            self.delegation_counts["returned"] += 1
        finally:
            if self.delegations.get(fh) is d:
                del self.delegations[fh]
            d.returned.set()

    async def return_delegations(self) -> None:
        """Give every delegation back (at unmount, before the client ID goes)."""
        for fh in list(self.delegations):
            await self.return_delegation(fh)

    async def _delegreturn(self, fh: bytes, stateid: stateid4) -> None:
        with trio.move_on_after(30):
            try:
                await self.run([PUTFH4args(fh), DELEGRETURN4args(stateid)], self.client.machine_cred)
            except NFS4Error as e:
                log.info("DELEGRETURN: %s (the server has let the delegation go)", e)

    async def _recall(self, fh: bytes, stateid: Any, truncate: bool) -> None:
        """CB_RECALL (acknowledged already by the backchannel): return the delegation."""
        self.delegation_counts["recalled"] += 1
        await self.return_delegation(fh, stateid)

    async def _recall_any(self, keep: int, mask: int) -> None:
        for fh in list(self.delegations)[keep:]:
            await self.return_delegation(fh)

    # -- byte-range locks (RFC 8881 section 9) ---------------------------------------------------------------
    async def lock(
        self, of: OpenFile, owner: Hashable, locktype: int, offset: int, length: int, cred: Credential, *,
        wait: bool = False, reclaim: bool = False, path: str | None = None,
    ) -> None:
        """LOCK ``length`` bytes (TO_EOF: to end of file, however it grows) from ``offset`` of the file
        open as ``of``, READ_LT or WRITE_LT, for the lock owner of ``owner`` (any hashable key: FUSE's
        lock_owner, a key per open file for flock, ...). What that owner held under the range is
        replaced (an upgrade or downgrade). A conflicting lock raises :class:`LockDenied` (EAGAIN)
        carrying it; with ``wait`` the lock is asked for again (READW_LT/WRITEW_LT, sooner when a
        CB_NOTIFY_LOCK says it may be free) until granted: trio cancellation ends the wait, and a
        lock granted while the caller was being cancelled is given back, the owner then holding what
        it held before. Locks whose state the server lost raise :class:`LockLost` (EIO)."""
        locktype = plain_lock_type(locktype)
        if of.closed:
            raise OSError(errno.EBADF, "lock on a closed file", path)
        if of.local:  # locks need open state of the file's own on the server
            await self.return_delegation(of.fh)
        st = self.locks.state(of, owner)
        st.users += 1
        try:
            st.check(path)
            if wait:
                await self._lock_wait(st, locktype, offset, length, cred, path)
            else:
                await self._lock_once(st, locktype, offset, length, cred, reclaim=reclaim, path=path)
        finally:
            st.users -= 1
            self._settle(st)  # (a lock owner's first LOCK on this open, refused: no state is left)

    async def lockt(
        self, of: OpenFile, owner: Hashable, locktype: int, offset: int, length: int, cred: Credential,
        path: str | None = None,
    ) -> LockConflict | None:
        """LOCKT: the lock that would stand in the way of ``owner`` locking the range (the owner's own
        locks never do), or None."""
        name = lock_owner4(self._clientid(), self.locks.owner_name(owner))
        args = LOCKT4args(plain_lock_type(locktype), offset, length, name)
        res = await self.client.compound([PUTFH4args(of.fh), args], cred, _NO_HINTS)
        r = res.resarray[-1] if res.resarray else None
        if res.status == c.NFS4_OK:
            return None
        if r is not None and r.opnum == c.OP_LOCKT and r.status == c.NFS4ERR_DENIED and r.res is not None:
            return LockConflict.from_denied(r.res)
        raise NFS4Error(res.status, r.opnum if r is not None else None, path)

    async def locku(
        self, of: OpenFile, owner: Hashable, offset: int, length: int, cred: Credential, path: str | None = None,
    ) -> None:
        """LOCKU the range for ``owner`` (``0, TO_EOF``: every lock it holds on the file, as FUSE's
        flush and release need). When nothing is left, the lock stateid is freed in the same COMPOUND
        (FREE_STATEID: in NFSv4.1 a lock stateid outlives its last lock until freed, RFC 8881 8.2.4).
        Unlocking what the server lost already sends nothing and clears the loss once nothing is left."""
        st = self.locks.get(of, owner)
        if st is None:
            return
        st.users += 1
        try:
            await self._locku(st, offset, length, cred, path)
        finally:
            st.users -= 1
            self._settle(st)

    async def _locku(self, st: LockState, offset: int, length: int, cred: Credential, path: str | None) -> None:
        async with self._serial(st):
            sent = st.stateid
            if sent is None or st.lost is not None:
                st.unlocked(None, offset, length)
                if not st.ranges:
                    st.lost = None  # nothing left that was lost
                return
            free = st.ranges.covered_by(offset, length)
            ops: list[Any] = [PUTFH4args(st.of.fh), LOCKU4args(c.WRITE_LT, 0, sent, offset, length)]
            if free:
                ops.append(FREE_STATEID4args(current(sent)))
            with trio.CancelScope(shield=True):  # (its outcome moves the stateid on: wait for it)
                res = await self.client.compound(ops, cred, _NO_HINTS)
            done = {r.opnum: r for r in res.resarray}
            unlocked = done.get(c.OP_LOCKU)
            if unlocked is not None and unlocked.status == c.NFS4_OK:
                st.unlocked(unlocked.res, offset, length)
                if not free:
                    return
                freed = done.get(c.OP_FREE_STATEID)
                if freed is not None and freed.status == c.NFS4_OK:
                    st.stateid = None
                else:  # the server holds locks we did not know of: the stateid stays (freed at CLOSE)
                    log.info("FREE_STATEID of a lock state after its last unlock: %s",
                             NFS4Error(res.status, c.OP_FREE_STATEID, path))
                return
            if res.status in _LOCK_STATE_GONE:
                # the server has none of these locks any more: what was unlocked is unlocked
                st.unlocked(None, offset, length)
                if st.ranges:
                    self._lose(st, f"the server no longer had them ({NFS4Error(res.status).name})")
                else:
                    st.stateid = None
                return
            raise NFS4Error(res.status, unlocked.opnum if unlocked is not None else None, path)

    def lock_state(self, of: OpenFile, owner: Hashable) -> LockState | None:
        """The locks ``owner`` holds on ``of`` (None: none), with ``lost`` set when the server lost them."""
        return self.locks.get(of, owner)

    def _clientid(self) -> int:
        return self.client.identity.clientid if self.client.identity else 0

    def _serial(self, st: LockState) -> trio.Lock:
        lock = self._lock_serial.get(st)
        if lock is None:
            lock = self._lock_serial[st] = trio.Lock()
        return lock

    async def _send_lock(
        self, st: LockState, locktype: int, offset: int, length: int, cred: Credential, *,
        reclaim: bool = False, path: str | None = None,
    ) -> None:
        """One LOCK for ``st``; its outcome is waited for whatever the caller's cancellation (it moves
        the lock stateid on, and a lock granted unknown to us would stay until the file is closed)."""
        args = LOCK4args(locktype, reclaim, offset, length, st.locker(self._clientid()))
        with trio.CancelScope(shield=True):
            res = await self.client.compound([PUTFH4args(st.of.fh), args], cred, _NO_HINTS, _recovering=reclaim)
        r = res.resarray[-1] if res.resarray else None
        if res.status == c.NFS4_OK and r is not None and r.opnum == c.OP_LOCK:
            st.granted(r.res.lock_stateid, offset, length, locktype)
            self.lock_counts["granted"] += 1
            return
        if r is not None and r.opnum == c.OP_LOCK and r.status == c.NFS4ERR_DENIED and r.res is not None:
            self.lock_counts["denied"] += 1
            raise LockDenied(LockConflict.from_denied(r.res), c.OP_LOCK, path)
        raise NFS4Error(res.status, r.opnum if r is not None else None, path)

    async def _lock_once(
        self, st: LockState, locktype: int, offset: int, length: int, cred: Credential, *,
        reclaim: bool = False, path: str | None = None,
    ) -> None:
        async with self._serial(st):
            before = st.ranges.within(offset, length)
            attempts = 0
            while True:
                attempts += 1
                st.check(path)
                basis = st.stateid if st.stateid is not None else st.of.stateid
                try:
                    await self._send_lock(st, locktype, offset, length, cred, reclaim=reclaim, path=path)
                    break
                except NFS4Error as e:
                    then = on_lock_error(
                        e.status, denied=isinstance(e, LockDenied), attempts=attempts,
                        replaced=(st.stateid if st.stateid is not None else st.of.stateid) != basis,
                        holds_ranges=bool(st.ranges), has_lock_stateid=st.stateid is not None,
                    )
                    if then is LockThen.FAIL:
                        raise
                    if then is LockThen.LOSE:
                        self._lose(st, f"the server no longer had them ({e.name})")
                        st.check(path)  # (raises LockLost)
                        raise
                    if then is LockThen.NEW_LOCK_OWNER:
                        st.stateid = None
            try:
                await trio.lowlevel.checkpoint_if_cancelled()
            except trio.Cancelled:
                with trio.CancelScope(shield=True):
                    await self._put_back(st, offset, length, before, cred)
                raise

    async def _put_back(
        self, st: LockState, offset: int, length: int,
        before: tuple[list[tuple[int, int, int]], list[tuple[int, int]]], cred: Credential,
    ) -> None:
        """Make the range as ``before`` had it (a lock granted while its caller was being cancelled):
        what was held goes back to its type (a downgrade, always granted), the rest is unlocked, and
        a lock state left with nothing is freed with the last LOCKU."""
        held, gaps = before
        try:
            for o, n, t in held:
                await self._send_lock(st, t, o, n, cred)
            for o, n in gaps:
                if st.stateid is None:
                    break
                free = st.ranges.covered_by(o, n)
                ops: list[Any] = [PUTFH4args(st.of.fh), LOCKU4args(c.WRITE_LT, 0, st.stateid, o, n)]
                if free:
                    ops.append(FREE_STATEID4args(current(st.stateid)))
                res = await self.client.compound(ops, cred, _NO_HINTS)
                if res.status != c.NFS4_OK:
                    raise NFS4Error(res.status, res.resarray[-1].opnum if res.resarray else None)
                st.unlocked(result_of(res.resarray, c.OP_LOCKU), o, n)
                if free:
                    st.stateid = None
        except NFS4Error as e:
            log.warning("a lock granted to a cancelled request could not be given back: %s", e)

    async def _lock_wait(
        self, st: LockState, locktype: int, offset: int, length: int, cred: Credential, path: str | None,
    ) -> None:
        blocking = c.READW_LT if locktype == c.READ_LT else c.WRITEW_LT
        key = (st.of.fh, st.owner.name)
        delay = LOCK_POLL_FIRST
        while True:
            woken = trio.Event()
            waiters = self._lock_waiters.setdefault(key, set())
            waiters.add(woken)  # (before asking: a CB_NOTIFY_LOCK right after the refusal is not missed)
            try:
                try:
                    await self._lock_once(st, blocking, offset, length, cred, path=path)
                    return
                except LockDenied:
                    pass
                with trio.move_on_after(delay):
                    await woken.wait()
            finally:
                waiters.discard(woken)
                if not waiters and self._lock_waiters.get(key) is waiters:
                    del self._lock_waiters[key]
            if st.of.closed:
                raise OSError(errno.EBADF, "the file was closed while a lock was waited for", path)
            delay = min(delay * 2, LOCK_POLL_NOTIFIED if st.of.may_notify_lock else LOCK_POLL_MAX)

    def _notify_lock(self, fh: bytes, owner: lock_owner4) -> None:
        """CB_NOTIFY_LOCK (RFC 8881 20.11): a lock this owner waits for on this file may be free; its
        waiters ask again now (a hint: it grants nothing)."""
        self.lock_counts["notified"] += 1
        for woken in self._lock_waiters.get((bytes(fh), bytes(owner.owner)), ()):
            woken.set()

    def _release_ops(self, of: OpenFile) -> list[Any]:
        """The operations that give up every lock held on ``of`` (LOCKU of all, FREE_STATEID), to go
        before its CLOSE in one COMPOUND (after PUTFH of its file)."""
        ops: list[Any] = []
        for st in self.locks.of_open(of):
            if st.stateid is None or st.lost is not None:
                continue
            if st.ranges:
                ops.append(LOCKU4args(c.WRITE_LT, 0, st.stateid, 0, TO_EOF))
            ops.append(FREE_STATEID4args(current(st.stateid)))
        return ops

    def _forget_locks(self, of: OpenFile) -> None:
        for st in self.locks.of_open(of):
            self.locks.forget(st)

    def _settle(self, st: LockState) -> None:
        """Forget ``st`` once it is idle (see :attr:`LockState.idle`)."""
        if st.idle:
            self.locks.forget(st)

    def _lose(self, st: LockState, why: str) -> None:
        log.warning("byte-range locks of lock owner %r lost: %s", st.owner.name.decode(), why)
        st.lose(why)
        self.lock_counts["lost"] += 1

    def _lose_locks(self, of: OpenFile, why: str) -> None:
        for st in self.locks.of_open(of):
            if st.ranges and st.lost is None:
                self._lose(st, why)
            elif not st.ranges:
                st.stateid = None
                self._settle(st)

    # -- data ---------------------------------------------------------------------------------------------
    def io_stateid(self, of: OpenFile | None, lock_owner: Hashable | None = None,
                   path: str | None = None) -> stateid4:
        """The stateid I/O by ``lock_owner`` through ``of`` goes with: the owner's lock stateid when it
        holds locks on that open (RFC 8881 9.1: a server that enforces locks checks the I/O's owner),
        else the open's (the anonymous stateid without an open). :class:`LockLost` (EIO) when the
        server lost that owner's locks: what it writes is no longer protected."""
        if of is None:
            return ANONYMOUS_STATEID
        if lock_owner is not None and self.locks:
            st = self.locks.get(of, lock_owner)
            if st is not None:
                st.check(path)
                if st.stateid is not None:
                    return st.stateid
        return of.stateid

    async def run_with_open(
        self,
        of: OpenFile | None,
        build: Callable[[stateid4], list[Any]],
        cred: Credential,
        hints: ReplyHints | None = None,
        *,
        payload: int = 0,
        lock_owner: Hashable | None = None,
        path: str | None = None,
        check: Callable[[list[ResOp]], None] | None = None,
    ) -> list[ResOp]:
        """Run the COMPOUND ``build(stateid)`` makes with the stateid :meth:`io_stateid` chooses. A
        request that waited in the session's recovery after a server restart carries the stateid from
        before, which the server calls stale, while the open (or lock) was reclaimed meanwhile with a
        new one: it is sent again with that one (only then). ``check``: as :meth:`run`."""
        while True:
            stateid = self.io_stateid(of, lock_owner, path)
            try:
                return await self.run(build(current(stateid)), cred, hints, payload=payload, path=path,
                                      check=check)
            except NFS4Error as e:
                replaced = of is not None and not of.closed and self.io_stateid(of, lock_owner, path) != stateid
                if on_stateid_error(e.status, replaced=replaced, reopens=0, can_reopen=False) is not Then.RESEND:
                    raise
                log.info("%s with a stateid replaced meanwhile (reclaimed): sending it again", e.name)

    async def read(self, of: OpenFile | None, fh: bytes, offset: int, count: int,
                   cred: Credential, *, lock_owner: Hashable | None = None,
                   path: str | None = None) -> tuple[memoryview, bool]:
        """One READ of at most maxread bytes: (data as a view of the reply, eof)."""
        count = min(count, self.maxread)
        res = await self.run_with_open(
            of, lambda s: [PUTFH4args(fh), READ4args(s, offset, count)], cred, ReplyHints(ddp_sizes=[count]),
            lock_owner=lock_owner, path=path,
        )
        ok = result_of(res, c.OP_READ)
        return ok.data, bool(ok.eof)

    async def write(self, of: OpenFile, offset: int, data: Any, cred: Credential,
                    stable: int = c.UNSTABLE4, *, lock_owner: Hashable | None = None,
                    path: str | None = None) -> tuple[int, int, bytes]:
        """One WRITE (data sent by reference): (count, committed, write verifier)."""
        n = memoryview(data).nbytes
        res = await self.run_with_open(
            of, lambda s: [PUTFH4args(of.fh), WRITE4args(s, offset, stable, data)], cred, payload=n,
            lock_owner=lock_owner, path=path,
        )
        ok = result_of(res, c.OP_WRITE)
        return int(ok.count), int(ok.committed), bytes(ok.writeverf)

    async def commit(self, fh: bytes, cred: Credential, offset: int = 0, count: int = 0,
                     path: str | None = None) -> bytes:
        res = await self.run([PUTFH4args(fh), COMMIT4args(offset, count)], cred, path=path)
        return bytes(result_of(res, c.OP_COMMIT).writeverf)

    # -- NFSv4.2 (RFC 7862): holes, space, copies on the server ---------------------------------------------
    def supports(self, opnum: int) -> bool:
        """Whether ``opnum`` (an NFSv4.2 operation) may be sent: the session is NFSv4.2 and the server
        has not answered it NFS4ERR_NOTSUPP before."""
        return self.client.options.minorversion >= c.NFS4_MINOR_VERSION_2 and opnum not in self.unsupported

    async def _run_v42(
        self, opnum: int, build: Callable[[stateid4], list[Any]], cred: Credential, path: str | None, *,
        of: OpenFile | None = None, lock_owner: Hashable | None = None,
        check: Callable[[list[ResOp]], None] | None = None,
    ) -> list[ResOp]:
        """Run an NFSv4.2 operation's COMPOUND (as :meth:`run_with_open` does, with ``of``'s stateid),
        or raise NFS4ERR_NOTSUPP (EOPNOTSUPP) without sending it on an NFSv4.1 session or to a server
        that said it does not support it (remembered)."""
        if not self.supports(opnum):
            raise NFS4Error(c.NFS4ERR_NOTSUPP, opnum, path)
        try:
            return await self.run_with_open(of, build, cred, lock_owner=lock_owner, path=path, check=check)
        except NFS4Error as e:
            if e.status in _NOT_SUPPORTED and e.op in (opnum, c.OP_ILLEGAL):
                self.unsupported.add(opnum)
                raise NFS4Error(c.NFS4ERR_NOTSUPP, opnum, path) from None
            raise

    async def seek(self, of: OpenFile, offset: int, what: int, cred: Credential, path: str | None = None,
                   *, lock_owner: Hashable | None = None) -> int:
        """SEEK: where the first byte of data (NFS4_CONTENT_DATA) or of a hole (NFS4_CONTENT_HOLE) at or
        after ``offset`` is, as lseek's SEEK_DATA and SEEK_HOLE (the end of the file counts as a hole).
        ENXIO (NFS4ERR_NXIO) from the end of the file on, and for data when none follows."""
        res = await self._run_v42(
            c.OP_SEEK, lambda s: [PUTFH4args(of.fh), SEEK4args(s, offset, what)], cred, path,
            of=of, lock_owner=lock_owner,
        )
        ok = result_of(res, c.OP_SEEK)
        if what == c.NFS4_CONTENT_DATA and ok.sr_eof:
            raise NFS4Error(c.NFS4ERR_NXIO, c.OP_SEEK, path)
        return int(ok.sr_offset)

    async def allocate(self, of: OpenFile, offset: int, length: int, cred: Credential, path: str | None = None,
                       *, lock_owner: Hashable | None = None) -> FileAttrs:
        """ALLOCATE: reserve space for the range (as fallocate mode 0: the file grows if it ends
        before the range does); the file's attributes after it."""
        attrs = Parsed(_last_attrs)
        await self._run_v42(
            c.OP_ALLOCATE,
            lambda s: [PUTFH4args(of.fh), ALLOCATE4args(s, offset, length), GETATTR4args(STAT_BITMAP)],
            cred, path, of=of, lock_owner=lock_owner, check=attrs.check,
        )
        return attrs.value

    async def deallocate(self, of: OpenFile, offset: int, length: int, cred: Credential, path: str | None = None,
                         *, lock_owner: Hashable | None = None) -> FileAttrs:
        """DEALLOCATE: punch a hole (the range reads back as zeros; the size stays); the file's
        attributes after it."""
        attrs = Parsed(_last_attrs)
        await self._run_v42(
            c.OP_DEALLOCATE,
            lambda s: [PUTFH4args(of.fh), DEALLOCATE4args(s, offset, length), GETATTR4args(STAT_BITMAP)],
            cred, path, of=of, lock_owner=lock_owner, check=attrs.check,
        )
        return attrs.value

    async def copy(
        self, src: OpenFile, dst: OpenFile, src_offset: int, dst_offset: int, count: int, cred: Credential,
        path: str | None = None,
    ) -> int:
        """COPY ``count`` bytes within the server, synchronously (the reply comes when the data is
        there), consecutively (a short copy is the first bytes of the range, so the rest is asked for
        from where it stopped). Data the reply calls UNSTABLE is committed, and copied again if the
        COMMIT shows another write verifier (the server restarted and may have lost it). Returns the
        bytes copied: fewer than ``count`` when the source ends first. NFS4ERR_NOTSUPP (EOPNOTSUPP)
        when the server has no COPY: the caller reads and writes instead."""
        if count <= 0:
            raise ValueError("COPY needs a count (RFC 7862's 0, 'to the end', is not offered)")
        done = 0
        changes = 0
        while done < count:
            n, committed, verifier = await self._copy_once(
                src, dst, src_offset + done, dst_offset + done, count - done, cred, path
            )
            then = on_copy_reply(n, committed)
            if then is CopyThen.COMMIT:
                then = on_commit(await self.commit(dst.fh, cred, dst_offset + done, n) == verifier, changes=changes)
            if then is CopyThen.FAIL:
                raise NFS4Error(c.NFS4ERR_IO, c.OP_COPY, path)
            if then is CopyThen.COPY_AGAIN:
                changes += 1
                log.info("COPY: the write verifier changed before COMMIT: copying again")
                continue
            if then is CopyThen.END_OF_SOURCE:
                break
            done += n
        return done

    async def _copy_once(
        self, src: OpenFile, dst: OpenFile, src_offset: int, dst_offset: int, count: int, cred: Credential,
        path: str | None,
    ) -> tuple[int, int, bytes]:
        def ops(_: stateid4) -> list[Any]:
            args = COPY4args(current(src.stateid), current(dst.stateid), src_offset, dst_offset, count,
                             True, True, [])
            return [PUTFH4args(src.fh), SAVEFH4args(), PUTFH4args(dst.fh), args]

        try:
            res = await self._run_v42(c.OP_COPY, ops, cred, path)
        except NFS4Error as e:
            if e.status == c.NFS4ERR_OFFLOAD_NO_REQS:  # it cannot copy synchronously and consecutively
                self.unsupported.add(c.OP_COPY)
                raise NFS4Error(c.NFS4ERR_NOTSUPP, c.OP_COPY, path) from None
            raise
        w = result_of(res, c.OP_COPY).cr_response
        if w.wr_callback_id:  # gone asynchronous although asked not to: no CB_OFFLOAD to wait for here
            raise NFS4Error(c.NFS4ERR_SERVERFAULT, c.OP_COPY, path)
        return int(w.wr_count), int(w.wr_committed), bytes(w.wr_writeverf)

    async def clone(
        self, src: OpenFile, dst: OpenFile, src_offset: int, dst_offset: int, count: int, cred: Credential,
        path: str | None = None,
    ) -> FileAttrs:
        """CLONE: ``dst``'s range shares ``src``'s blocks (``count`` 0: to the end of the source); the
        destination's attributes after it. NFS4ERR_NOTSUPP (EOPNOTSUPP) when the server cannot."""
        attrs = Parsed(_last_attrs)
        await self._run_v42(
            c.OP_CLONE,
            lambda _: [PUTFH4args(src.fh), SAVEFH4args(), PUTFH4args(dst.fh),
                       CLONE4args(current(src.stateid), current(dst.stateid), src_offset, dst_offset, count),
                       GETATTR4args(STAT_BITMAP)],
            cred, path, check=attrs.check,
        )
        return attrs.value

    # -- COMPOUNDs of the FUSE mount that carry more per round trip -----------------------------------------
    async def write_getattr(
        self, of: OpenFile, offset: int, data: Any, cred: Credential, stable: int = c.FILE_SYNC4,
        setattrs: fattr4 | None = None, *, lock_owner: Hashable | None = None, path: str | None = None,
    ) -> tuple[int, int, bytes, FileAttrs]:
        """One WRITE, then (if given) a SETATTR of ``setattrs`` (not of the size: it goes with the
        anonymous stateid, as :meth:`setattr` sends it), then GETATTR, in one COMPOUND: (count,
        committed, write verifier, attributes after them)."""
        n = memoryview(data).nbytes

        def build(stateid: stateid4) -> list[Any]:
            ops: list[Any] = [PUTFH4args(of.fh), WRITE4args(stateid, offset, stable, data)]
            if setattrs is not None:
                ops.append(SETATTR4args(ANONYMOUS_STATEID, setattrs))
            ops.append(GETATTR4args(STAT_BITMAP))
            return ops

        attrs = Parsed(_last_attrs)
        res = await self.run_with_open(of, build, cred, payload=n, lock_owner=lock_owner, check=attrs.check,
                                       path=path)
        ok = result_of(res, c.OP_WRITE)
        return int(ok.count), int(ok.committed), bytes(ok.writeverf), attrs.value

    async def readdir_plus(
        self, fh: bytes, cred: Credential, cookie: int = 0, verifier: bytes = bytes(VERIFIER_SIZE),
        maxcount: int = 64 * 1024, path: str | None = None,
    ) -> tuple[list[ListedEntry], bytes, bool]:
        """As :meth:`readdir` with attributes, for a listing: each entry a :data:`ListedEntry`, its
        attributes decoded straight into FileAttrs (None for an entry whose attributes the server could
        not get, an rdattr_error) from the reply's entries in place (no entry4 or fattr4 made)."""
        def parse(res: list[ResOp]) -> tuple[list[ListedEntry], bytes, bool]:
            ok = result_of(res, c.OP_READDIR)
            listed = cast(DirList, ok.reply.entries)  # (what DirEntries decodes)
            b = listed.data
            entries: list[ListedEntry] = []
            append = entries.append
            mask: list[int] | None = None
            for ecookie, n, m, emask, a, z in listed.spans:
                if emask is not mask:  # (one list for all the entries with the same mask, as a rule all)
                    mask, dec = emask, entry_attrs_decoder_at(emask)
                attrs, efh = dec(b, a, z)
                append((b[n:m], ecookie, efh, attrs))
            return entries, bytes(ok.cookieverf), bool(ok.reply.eof)

        return await self.query(
            [PUTFH4args(fh), READDIR4args(cookie, verifier, maxcount, maxcount, _READDIR_BITMAP)],
            cred, parse, ReplyHints(max_reply=maxcount), path=path,
        )


def _last_attrs(res: list[ResOp]) -> FileAttrs:
    """The attributes of a COMPOUND's last GETATTR."""
    return FileAttrs.from_fattr4(result_of(res, c.OP_GETATTR).obj_attributes)


def _fh_attrs(res: list[ResOp]) -> tuple[bytes, FileAttrs]:
    """The file handle and attributes of a COMPOUND that ends with GETFH and GETATTR."""
    return bytes(result_of(res, c.OP_GETFH).object), _last_attrs(res)


class Parsed:
    """What ``parse`` makes of a COMPOUND's results, made in the session's checks (``check``); the
    value of the last successful reply is ``value``."""

    __slots__ = ("_parse", "value")

    def __init__(self, parse: Callable[[list[ResOp]], Any]) -> None:
        self._parse = parse
        self.value: Any = None

    def check(self, res: list[ResOp]) -> None:
        self.value = self._parse(res)


class Cookies:
    """The READDIR cookies of one listing, page after page: one seen before (a server going round in
    circles) is a protocol violation, not a listing that never ends."""

    __slots__ = ("path", "seen", "server")

    def __init__(self, server: str, path: str | None) -> None:
        self.server = server
        self.path = path
        self.seen: set[int] = set()

    def check(self, cookies: Iterable[int]) -> None:
        seen = self.seen
        for k in cookies:
            if k in seen:
                raise ProtocolError(f"cookie {k} repeated in a listing", self.server, c.OP_READDIR, self.path)
            seen.add(k)


def _components(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def _readdir_bitmaps() -> tuple[list[int], list[int]]:
    from ..proto.nfs4.attrs import bitmap4_from
    from .attributes import STAT_ATTRS

    return (bitmap4_from((*STAT_ATTRS, c.FATTR4_FILEHANDLE, c.FATTR4_RDATTR_ERROR)),
            bitmap4_from((c.FATTR4_FILEHANDLE, c.FATTR4_TYPE)))


_READDIR_BITMAP, _READDIR_FH_ONLY = _readdir_bitmaps()
_NO_HINTS = ReplyHints()
