"""Open state (RFC 8881 sections 9, 18.16, 18.2): OPEN by name or by file handle, CLOSE (with the
locks held on the open released in the same COMPOUND), CLOSEs nobody waits for sent several to one
COMPOUND or in front of the next OPEN in its own, an open made again when the server lost it. One open owner's OPENs and CLOSEs do not pass
each other on the way (:class:`OwnerTraffic`)."""

from __future__ import annotations

import collections
import itertools
import logging
import os
from collections.abc import Iterable
from typing import Any, overload

import trio

from .._errors import NFS4Error, ReplyError
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import ResOp, result_of
from .._proto.nfs4.compound_shapes import CompoundShape
from .._proto.nfs4.types import (
    ACCESS4args,
    CLOSE4args,
    GETATTR4args,
    GETFH4args,
    OPEN4args,
    PUTFH4args,
    READ4args,
    RESTOREFH4args,
    SAVEFH4args,
    SETATTR4args,
    change_info4,
    creatverfattr,
    open_owner4,
    stateid4,
)
from .._rpc.auth import Credential
from .._session.client_id import ClientID
from .._transport.base import ReplyHints
from .attributes import NOW, STAT_BITMAP, FileAttrs, entry_attrs_decoder_at, setattr_fattr4
from .byte_range_locks import ByteRangeLocks
from .compounds import NO_HINTS, VERIFIER_SIZE
from .delegations import Delegations
from .names import Names
from .open_state import ANONYMOUS_STATEID, CURRENT_STATEID, Delegation, OpenFile

log = logging.getLogger(__name__)

# CLOSEs nobody waits for (close_later) wait this long at most for others to share their COMPOUND,
# and go this many to a COMPOUND at most (fewer if the session's ca_maxoperations says so); they go
# at once when that many wait, or when one of them holds locks (another client may be waiting for
# them). A longer gather saves COMPOUNDs on a slow stream of releases, but a CLOSE held longer
# lands after what the process that closed does next (the guest's delegation steps count them).
CLOSE_GATHER = 0.02
CLOSES_PER_COMPOUND = 16
# a CLOSE that meets one of these finds the open state gone already (expired, revoked, the server
# restarted) or moved on by a later OPEN of ours (OLD_STATEID): nothing is left to close
CLOSE_GONE = frozenset({c.NFS4ERR_BAD_STATEID, c.NFS4ERR_OLD_STATEID, c.NFS4ERR_EXPIRED,
                        c.NFS4ERR_STALE_STATEID, c.NFS4ERR_ADMIN_REVOKED})
# CLOSEs that wait go in front of an OPEN within the session's ca_maxrequestsize: counted as this many
# bytes at most per operation of theirs (PUTFH of the largest file handle, a CLOSE, a LOCKU, a
# FREE_STATEID), after this many for the OPEN's own operations (a name of the longest, its attributes)
_RIDING_OP_SIZE = 2 * 4 + c.NFS4_FHSIZE
_OPEN_SIZE = 4 * 1024
# and no more CLOSEs than this in front of an OPEN: the OPEN's reply is kept in the server's reply
# cache, which may be small (the Linux nfsd's holds about 2 KiB), and each PUTFH and CLOSE adds 32
# bytes to it; a server that still finds the reply too big to cache has the OPEN sent again alone
_RIDING_CLOSES = 8
# a READ in an OPEN's COMPOUND (its reply is kept in the server's reply cache: the OPEN is not
# idempotent) asks for the session's ca_maxresponsesize_cached less this, for the rest of the reply
# (SEQUENCE, the OPEN and its delegation, a file handle, ACCESS, the file's attributes, the CLOSEs
# in front) at most
_OPEN_REPLY_ROOM = 2 * 1024
# a server that will not keep an OPEN's reply with the READ in it answers so: the OPEN goes again alone
_READ_TOO_BIG = frozenset({c.NFS4ERR_REP_TOO_BIG_TO_CACHE, c.NFS4ERR_REP_TOO_BIG})


# the FUSE mount's creates, prepared once: an exclusive create (its times set to the server's "now")
# and an unchecked one with its ACCESS, each with the file's attributes and the directory's after it
_TIMES_TO_NOW = SETATTR4args(ANONYMOUS_STATEID, setattr_fattr4(atime_ns=NOW, mtime_ns=NOW))
CREATE_EXCLUSIVE_SHAPE = CompoundShape(
    [PUTFH4args, SAVEFH4args(), OPEN4args, GETFH4args(), _TIMES_TO_NOW, GETATTR4args(STAT_BITMAP), RESTOREFH4args(),
     GETATTR4args(STAT_BITMAP)], entry_attrs_decoder_at)
CREATE_ACCESS_SHAPE = CompoundShape(
    [PUTFH4args, SAVEFH4args(), OPEN4args, GETFH4args(), ACCESS4args, GETATTR4args(STAT_BITMAP), RESTOREFH4args(),
     GETATTR4args(STAT_BITMAP)], entry_attrs_decoder_at)


# the CLOSEs nobody waits for, N to a COMPOUND with nothing else (no lock let go with them): PUTFH,
# CLOSE, PUTFH, CLOSE ..., one prepared shape per N, made when first sent
_CLOSES_SHAPES: dict[int, CompoundShape] = {}


def closes_shape(n: int) -> CompoundShape:
    """The prepared COMPOUND of ``n`` files' CLOSEs (PUTFH, CLOSE; ``n`` times)."""
    shape = _CLOSES_SHAPES.get(n)
    if shape is None:
        shape = _CLOSES_SHAPES[n] = CompoundShape([PUTFH4args, CLOSE4args] * n)
    return shape


# an OPEN's prepared shape with N files' CLOSEs in front of it (PUTFH, CLOSE; N times; then the
# OPEN's own operations), one per (shape, N), made when first sent
_RIDING_SHAPES: dict[tuple[CompoundShape, int], CompoundShape] = {}


def riding_shape(shape: CompoundShape, n: int) -> CompoundShape:
    """``shape`` (an OPEN's) with ``n`` files' CLOSEs in front of it; what it decodes is ``shape``'s."""
    key = (shape, n)
    riding = _RIDING_SHAPES.get(key)
    if riding is None:
        riding = _RIDING_SHAPES[key] = CompoundShape([*closes_shape(n).template, *shape.template],
                                                     entry_attrs_decoder_at)
    return riding


def _closed(values: tuple[Any, ...]) -> None:
    """What a shaped reply of CLOSEs gave (nothing to read: every one succeeded)."""


class _Opened:
    """What an OPEN's COMPOUND gave, from the general decoder's results or a shape's values."""

    __slots__ = ("after", "attrs", "cinfo", "delegation", "fh", "granted", "read", "rflags", "stateid")

    def __init__(self, fh: bytes, stateid: stateid4, cinfo: change_info4, rflags: int, delegation: tuple[int, Any],
                 granted: int | None, attrs: FileAttrs | None, after: FileAttrs | None,
                 read: tuple[Any, bool] | None = None) -> None:
        self.fh, self.stateid, self.cinfo, self.rflags = fh, stateid, cinfo, rflags
        self.delegation, self.granted, self.attrs, self.after = delegation, granted, attrs, after
        self.read = read  # what a READ after the OPEN read: (data, eof)


def _open_attrs(res: list[ResOp], at: int) -> FileAttrs | None:
    """The attributes of the GETATTR at ``at`` in an OPEN's COMPOUND (None when it stopped short of it)."""
    if len(res) <= at or res[at].opnum != c.OP_GETATTR:
        return None
    return FileAttrs.from_fattr4(res[at].res.obj_attributes)


def _granted(res: list[ResOp]) -> int | None:
    """What the ACCESS in an OPEN's COMPOUND allowed, if it had one."""
    return next((int(r.res.access) for r in res if r.opnum == c.OP_ACCESS), None)


def _opened(res: list[ResOp], attrs: FileAttrs | None, after: FileAttrs | None, fh: bytes | None) -> _Opened:
    """What an OPEN's COMPOUND gave, from the general decoder's results (``fh``: the file's handle, when
    the OPEN was by it and has no GETFH after it)."""
    ok = result_of(res, c.OP_OPEN)
    if fh is None:
        fh = bytes(result_of(res, c.OP_GETFH).object)
    read = next(((r.res.data, bool(r.res.eof)) for r in res if r.opnum == c.OP_READ), None)
    return _Opened(fh, ok.stateid, ok.cinfo, int(ok.rflags), ok.delegation, _granted(res), attrs, after, read)


def _without_read(ops: list[Any]) -> list[Any]:
    """An OPEN's COMPOUND ``ops`` without the READ of the file's first bytes."""
    return [op for op in ops if type(op) is not READ4args]


class OwnerTraffic:
    """The OPENs and CLOSEs of each open owner on their way to the server. One owner's OPEN of a
    file it has open already moves that open state's seqid on: a CLOSE of the earlier seqid that the
    OPEN overtook would end nothing (NFS4ERR_OLD_STATEID) and the server would keep an open we
    believe closed. So an OPEN waits for its owner's CLOSEs on their way, and CLOSEs wait for their
    owner's OPENs on the way (which may carry the open state on: the CLOSE is then dropped)."""

    def __init__(self) -> None:
        self.opens_on_way: dict[bytes, int] = {}  # owner -> its OPENs on their way
        self.closes_on_way: dict[bytes, int] = {}  # owner -> its CLOSEs on their way
        # set when an OPEN or a batch of CLOSEs on its way is answered; made when somebody waits
        self._settled: trio.Event | None = None

    def is_opening(self, owner: bytes) -> bool:
        return self.opens_on_way.get(owner, 0) > 0

    async def settled(self) -> None:
        """Until an OPEN or a batch of CLOSEs on its way is answered."""
        if self._settled is None:
            self._settled = trio.Event()
        await self._settled.wait()

    def settle(self) -> None:
        """An OPEN or a batch of CLOSEs on its way was answered: wake whoever waits for that."""
        settled, self._settled = self._settled, None
        if settled is not None:
            settled.set()

    def opening(self, owner: bytes) -> _Opening:
        """``async with``: an OPEN of ``owner``'s on its way (after its CLOSEs on their way)."""
        return _Opening(self, owner)

    def closing(self, owners: Iterable[bytes]) -> _Closing:
        """``async with``: CLOSEs of ``owners`` on their way."""
        return _Closing(self, collections.Counter(owners))


class _Opening:
    __slots__ = ("owner", "traffic")

    def __init__(self, traffic: OwnerTraffic, owner: bytes) -> None:
        self.traffic, self.owner = traffic, owner

    async def __aenter__(self) -> None:
        t, owner = self.traffic, self.owner
        while t.closes_on_way.get(owner):
            await t.settled()
        t.opens_on_way[owner] = t.opens_on_way.get(owner, 0) + 1

    async def __aexit__(self, *exc: object) -> None:
        t = self.traffic
        t.opens_on_way[self.owner] -= 1
        t.settle()


class _Closing:
    __slots__ = ("counted", "traffic")

    def __init__(self, traffic: OwnerTraffic, counted: collections.Counter[bytes]) -> None:
        self.traffic, self.counted = traffic, counted

    async def __aenter__(self) -> None:
        closing = self.traffic.closes_on_way
        for owner, n in self.counted.items():
            closing[owner] = closing.get(owner, 0) + n

    async def __aexit__(self, *exc: object) -> None:
        closing = self.traffic.closes_on_way
        for owner, n in self.counted.items():
            closing[owner] -= n
        self.traffic.settle()


class _Closes:
    """CLOSEs taken from the queue to go in one COMPOUND: the opens, their operations, for each
    operation the open of ``batch`` it is for, and whether every open has PUTFH, CLOSE and nothing else."""

    __slots__ = ("batch", "cred", "only_closes", "ops", "whose")

    def __init__(self, cred: Credential) -> None:
        self.cred = cred
        self.batch: list[OpenFile] = []
        self.ops: list[Any] = []
        self.whose: list[int] = []
        self.only_closes = True


class Opens(Delegations):
    """OPEN, CLOSE, and the opens they keep. Families it uses, given this object's COMPOUND runner:
    ``names`` (LOOKUP, GETATTR, SETATTR, ...: an OPEN's GETATTR, a truncating open's SETATTR) and
    ``byte_range_locks`` (LOCK, LOCKU, ...: the locks a CLOSE lets go, or a lost open loses)."""

    def __init__(self, client: ClientID) -> None:
        super().__init__(client)
        self.names = Names(self)
        self.byte_range_locks = ByteRangeLocks(self)
        self._opens_made = itertools.count(1)
        self._closing: collections.deque[tuple[OpenFile, Credential]] = collections.deque()
        self._close_sender: trio.Event | None = None  # set when the sender of _closing is done
        self._close_due = trio.Event()  # set when the sender of _closing is to wait no longer
        self._close_nursery: trio.Nursery | None = None  # where the sender of _closing runs
        # OPENs and CLOSEs of one open owner do not pass each other on the way to the server
        self._owners = OwnerTraffic()
        # queued CLOSEs an OPEN carried the open state on from: only their locks are let go
        self._superseded: set[int] = set()

    def open_owner(self, cred: Credential) -> bytes:
        user = cred.uid if cred.uid is not None else "none"
        if self.owner_per_open:
            return f"open-{user}-{next(self._opens_made)}".encode()
        return f"open-{user}".encode()

    async def open(
        self, dir_fh: bytes, name: str, cred: Credential, *, access: int = c.OPEN4_SHARE_ACCESS_READ,
        create: bool = False, exclusive: bool = False, truncate: bool = False, mode: int = 0o644,
        check: int = 0, path: str | None = None, dir_attrs: bool = False, file: bytes | None = None,
        read: int = 0,
    ) -> OpenFile:
        """OPEN by name (CLAIM_NULL), creating if asked; O_EXCL uses EXCLUSIVE4_1 with a verifier.
        ``check``: ACCESS bits to ask about in the same COMPOUND (``OpenFile.granted``).
        ``read``: the file's first bytes, this many at most (:meth:`first_read_most`), read in the same
        COMPOUND (``OpenFile.first_read``; see :meth:`_open_after_closes`).
        ``dir_attrs``: the directory's attributes right after the OPEN, from the same COMPOUND
        (``OpenFile.dir_attrs``: PUTFH dir, SAVEFH, OPEN ... GETATTR, RESTOREFH, GETATTR).
        ``file``: the handle of the file ``name`` is known to lead to (the mount's inode): the owner's
        CLOSE of it that waits does not go in front of the OPEN, as with :meth:`open_fh`."""
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
        shape: CompoundShape | None = None
        variables: tuple[Any, ...] = ()  # (the shape's variable arguments)
        ops: list[Any]
        if create and exclusive and dir_attrs and not check:
            shape, variables = CREATE_EXCLUSIVE_SHAPE, (dir_fh, args)
            ops = shape.ops(*variables)
        elif create and not exclusive and dir_attrs and check:
            shape, variables = CREATE_ACCESS_SHAPE, (dir_fh, args, check)
            ops = shape.ops(*variables)
        else:
            ops = [PUTFH4args(dir_fh), *([SAVEFH4args()] if dir_attrs else []), args, GETFH4args()]
            if check:
                ops.append(ACCESS4args(check))
            if create and exclusive:
                # the server may keep the exclusive create's verifier in the file's times (RFC 8881
                # 18.16.4; NFS-Ganesha does): they are set to its "now" in the same COMPOUND
                ops.append(_TIMES_TO_NOW)
            ops.append(GETATTR4args(STAT_BITMAP))
            if read:
                ops.append(READ4args(CURRENT_STATEID, 0, read))
            if dir_attrs:
                ops += [RESTOREFH4args(), GETATTR4args(STAT_BITMAP)]
        async with self._owners.opening(owner):
            got = await self._open_after_closes(ops, cred, owner, path or name, shape, variables, file=file)
            of = OpenFile(got.fh, got.stateid, access, owner, got.attrs,
                          cred=cred, dir_change=got.cinfo, dir_attrs=got.after, granted=got.granted,
                          may_notify_lock=bool(got.rflags & c.OPEN4_RESULT_MAY_NOTIFY_LOCK), first_read=got.read)
            self._continued(of)
        if of.attrs is None:
            of.attrs = await self.names.getattr(of.fh, cred, path=path or name)
        self.took_delegation(of, got.delegation)
        if truncate and not create and of.attrs is not None and of.attrs.size:
            of.attrs = await self.names.setattr(of.fh, cred, stateid=of.stateid, size=0, path=path)
        self.opens[id(of)] = of
        return of

    def first_read_most(self) -> int:
        """The most a READ in an OPEN's COMPOUND may ask for (``read`` of :meth:`open` and
        :meth:`open_fh`): the OPEN's reply, with the data, is kept in the server's reply cache, which
        holds the session's ca_maxresponsesize_cached; 0 when that leaves no room."""
        session = self.client.session
        most = session.max_response_size_cached - _OPEN_REPLY_ROOM if session is not None else 0
        return max(0, min(most, self.maxread))

    async def _open_after_closes(self, ops: list[Any], cred: Credential, owner: bytes, path: str | None,
                                 shape: CompoundShape | None, variables: tuple[Any, ...],
                                 fh: bytes | None = None, file: bytes | None = None) -> _Opened:
        """:meth:`_open_with_closes`; an OPEN with a READ of the file's first bytes after it (with the
        open's stateid: the current stateid, RFC 8881 16.2.3.1.2) that the server would not run for the
        size of its reply (NFS4ERR_REP_TOO_BIG_TO_CACHE: the OPEN did not run) goes again without it.
        A READ that fails after the OPEN leaves the file open, with nothing read
        (:meth:`_run_open`)."""
        try:
            return await self._open_with_closes(ops, cred, owner, path, shape, variables, fh, file)
        except NFS4Error as e:
            if e.status not in _READ_TOO_BIG or not any(type(op) is READ4args for op in ops):
                raise
            log.info("%s: the OPEN goes again without its READ: %s", path, e)
        return await self._open_with_closes(_without_read(ops), cred, owner, path, shape, variables, fh, file)

    async def _open_with_closes(self, ops: list[Any], cred: Credential, owner: bytes, path: str | None,
                                shape: CompoundShape | None, variables: tuple[Any, ...],
                                fh: bytes | None = None, file: bytes | None = None) -> _Opened:
        """Run the OPEN COMPOUND ``ops`` (of ``shape``, made of ``variables``, if given) of ``owner``
        (by the file handle ``fh``, if given; of the file ``file`` is the handle of, if known),
        whose OPEN is on its way (:meth:`_run_open`), with the queued CLOSEs that may go now in front
        of it (:meth:`_take_closes`: of ``cred``, within the session's operations and request size):
        SEQUENCE, PUTFH, CLOSE, PUTFH, CLOSE ..., then the OPEN's operations. They save the COMPOUND
        they would have gone in. A COMPOUND stops at its first failure (RFC 8881 section 16.2.3): when
        it stops at a CLOSE, the OPEN did not run; that failure is
        handled as :meth:`_close_some` handles it, and the OPEN goes again alone, with the same
        arguments (an exclusive create's verifier too). When the OPEN fails, the CLOSEs in front of
        it went, and its failure is the caller's, as :meth:`_run_open` gives it."""
        session = self.client.session
        closes = None
        if self._closing and session is not None:
            room = min(session.max_operations - 1 - len(ops), 2 * _RIDING_CLOSES,
                       (session.max_request_size - _OPEN_SIZE) // _RIDING_OP_SIZE)
            if room > 1:
                closes = self._take_closes(cred, room, owner, fh or file)
        if closes is None:
            return await self._run_open(ops, cred, path, shape, fh=fh)
        riding = riding_shape(shape, len(closes.batch)) if shape is not None and closes.only_closes else None
        both = riding.ops(*closes.ops, *variables) if riding is not None else [*closes.ops, *ops]
        async with self._owners.closing(of.owner for of in closes.batch):
            got = await self._run_open(both, cred, path, riding, closes, fh)
        if got is None:
            got = await self._run_open(ops, cred, path, shape, fh=fh)
        return got

    @overload
    async def _run_open(self, ops: list[Any], cred: Credential, path: str | None, shape: CompoundShape | None = None,
                        closes: None = None, fh: bytes | None = None) -> _Opened: ...

    @overload
    async def _run_open(self, ops: list[Any], cred: Credential, path: str | None, shape: CompoundShape | None,
                        closes: _Closes, fh: bytes | None = None) -> _Opened | None: ...

    async def _run_open(self, ops: list[Any], cred: Credential, path: str | None, shape: CompoundShape | None = None,
                        closes: _Closes | None = None, fh: bytes | None = None) -> _Opened | None:
        """Run an OPEN COMPOUND (of ``shape`` if given): what it gave, with the file's attributes (its
        GETATTR after the OPEN) and the directory's (a GETATTR after RESTOREFH, when the COMPOUND has
        one). A failure after the OPEN and its GETFH (setting the times an exclusive create used)
        leaves the file open, and what the results up to there hold is returned. ``closes``: the
        CLOSEs whose operations lead ``ops``; a reply that stops at one of them is theirs
        (:meth:`_closes_failed`): None, the OPEN did not run. ``fh``: the file's handle, for an OPEN by
        it (CLAIM_FH, no GETFH). A READ of the file's first bytes after the OPEN gives its data (a
        view of the reply) and eof; one that fails leaves the file open, with nothing read."""
        getattrs = [i for i, op in enumerate(ops) if isinstance(op, GETATTR4args)]
        reads = [op.count for op in ops if type(op) is READ4args]
        hints = ReplyHints(ddp_sizes=reads) if reads else NO_HINTS
        at_file = getattrs[0]
        at_dir = getattrs[1] if len(getattrs) > 1 else None
        attrs: list[FileAttrs | None] = [None, None]
        shaped: list[_Opened] = []

        def check(res: list[ResOp]) -> None:
            attrs[0] = _open_attrs(res, at_file)
            attrs[1] = _open_attrs(res, at_dir) if at_dir is not None else None

        def prepared(values: tuple[Any, ...]) -> None:
            # (the reply of success, no delegation in it: the OPEN's (stateid, cinfo, rflags), the file
            # handle, the access granted if asked, the file's attributes and the directory's)
            (stateid, cinfo, rflags), fh, *rest = values
            granted = rest.pop(0) if len(rest) > 2 else None
            shaped.append(_Opened(fh, stateid, cinfo, rflags, (c.OPEN_DELEGATE_NONE, None), granted, rest[0], rest[1]))

        try:
            res = await self.client.compound(ops, cred, hints, check=check, shape=shape,
                                             prepared=prepared if shape is not None else None)
        except BaseException as e:
            if closes is not None:  # (they may not have gone: they go again, and one that did finds its state gone)
                self._queue_again(closes.batch, closes.cred)
            if isinstance(e, ReplyError):
                raise e.located(None, path) from None
            raise
        if shaped:
            return shaped[-1]
        if res.status == c.NFS4_OK:
            return _opened(res.resarray, attrs[0], attrs[1], fh)
        if closes is not None and len(res.resarray) <= len(closes.ops):
            self._closes_failed(closes, res.status, len(res.resarray),
                                res.resarray[-1].opnum if res.resarray else None)
            return None
        done = res.resarray[:-1]
        if res.resarray and res.resarray[-1].opnum == c.OP_READ:  # (all before it went: the file is open)
            log.info("%s: the READ after the OPEN: %s", path, NFS4Error(res.status, c.OP_READ, path))
            return _opened(done, _open_attrs(done, at_file), None, fh)
        if closes is not None and res.status == c.NFS4ERR_REP_TOO_BIG_TO_CACHE and \
                not any(r.opnum == c.OP_OPEN for r in done):
            return None  # (the CLOSEs went; the OPEN did not run, and goes again alone)
        if any(r.opnum == c.OP_GETFH for r in done):
            log.info("%s: after the OPEN: %s", path, NFS4Error(res.status, res.resarray[-1].opnum, path))
            return _opened(done, attrs[0], None, None)
        failed = res.resarray[-1] if res.resarray else None
        raise NFS4Error(res.status, failed.opnum if failed else None, path)

    async def open_fh(self, fh: bytes, cred: Credential, access: int = c.OPEN4_SHARE_ACCESS_READ,
                      path: str | None = None, check: int = 0, read: int = 0) -> OpenFile:
        """OPEN an already looked-up file (CLAIM_FH). A read delegation we hold goes back first when
        the open is for writing (:meth:`prepare_open`). ``check``, ``read``: as :meth:`open`. The CLOSEs that
        wait go in front of it as in front of :meth:`open`'s, but the owner's CLOSE of this file: the
        OPEN carries that open state on (:meth:`_continued`), and it is not sent."""
        await self.prepare_open(fh, access)
        owner = self.open_owner(cred)
        clientid = self.client.identity.clientid if self.client.identity else 0
        args = OPEN4args(0, self.share_access(access), c.OPEN4_SHARE_DENY_NONE,
                         open_owner4(clientid, owner), (c.OPEN4_NOCREATE, None), (c.CLAIM_FH, None))
        ops: list[Any] = [PUTFH4args(fh), args]
        if check:
            ops.append(ACCESS4args(check))
        ops.append(GETATTR4args(STAT_BITMAP))
        if read:
            ops.append(READ4args(CURRENT_STATEID, 0, read))
        async with self._owners.opening(owner):
            got = await self._open_after_closes(ops, cred, owner, path, None, (), fh)
            of = OpenFile(fh, got.stateid, access, owner, got.attrs, cred=cred, granted=got.granted,
                          may_notify_lock=bool(got.rflags & c.OPEN4_RESULT_MAY_NOTIFY_LOCK), first_read=got.read)
            self._continued(of)
        self.took_delegation(of, got.delegation)
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
            self.byte_range_locks.forget_locks(of)
            return
        of.closed = True
        self.opens.pop(id(of), None)
        release = self.byte_range_locks.release_ops(of)
        self.byte_range_locks.forget_locks(of)
        if of.local:
            return  # made under a delegation: the server never saw it
        for hook in self.close_hooks:
            try:
                await hook(of.fh, cred)
            except OSError as e:  # (a layout's I/O failed: the data went, or goes, through the MDS)
                log.warning("before CLOSE: %s", e)
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
            self.byte_range_locks.forget_locks(of)
            return
        of.closed = True
        self.opens.pop(id(of), None)
        if of.local:
            self.byte_range_locks.forget_locks(of)
            return
        self._closing.append((of, cred))
        self._close_nursery = nursery
        self._send_soon()
        if len(self._closing) >= CLOSES_PER_COMPOUND or self.locks.stateid_of_open(of):
            self._close_due.set()

    async def flush_closes(self) -> None:
        """Send every CLOSE that :meth:`close_later` holds, and wait for their replies (of those gone
        in front of an OPEN too)."""
        while True:
            self._close_due.set()
            while self._close_sender is not None:
                await self._close_sender.wait()
            await self._send_queued()
            if not any(self._owners.closes_on_way.values()):
                return
            await self._owners.settled()

    async def _send_closes(self) -> None:
        try:
            with trio.move_on_after(CLOSE_GATHER):
                await self._close_due.wait()
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
        queue (:meth:`_take_closes`), all with the credential of the first that may go."""
        session = self.client.session
        room = session.max_operations - 1 if session is not None else 2  # (SEQUENCE takes one)
        owners = self._owners
        first = next(cr for of, cr in self._closing if not owners.is_opening(of.owner))
        closes = self._take_closes(first, room)
        if closes is None:
            return
        shape = closes_shape(len(closes.batch)) if closes.only_closes else None
        try:
            async with owners.closing(of.owner for of in closes.batch):
                res = await self.client.compound(closes.ops, first, NO_HINTS, shape=shape,
                                                 prepared=_closed if shape is not None else None)
        except Exception as e:  # (nobody waits for these: a failure must not end the caller's nursery)
            # the session is gone (and the opens with it), a bad reply, an RPC-level refusal
            log.info("CLOSE of %d open(s): %s", len(closes.batch), e)
            return
        if res.status != c.NFS4_OK:
            self._closes_failed(closes, res.status, len(res.resarray), res.resarray[-1].opnum if res.resarray else None)

    def _take_closes(self, cred: Credential, room: int, opening: bytes | None = None,
                     fh: bytes | None = None) -> _Closes | None:
        """The operations of CLOSEs from the queue (PUTFH, [LOCKU, FREE_STATEID ...], CLOSE, PUTFH,
        CLOSE ...), in order, at most ``room`` operations, all with ``cred``, none of an owner whose
        OPEN is on its way (but ``opening``'s own OPEN, which they go in front of: ``opening`` is
        then that OPEN's owner, with no other OPEN on its way; and only PUTFH, CLOSE: a CLOSE that
        lets locks go, or an open's locks alone, go in a COMPOUND of CLOSEs, that nothing
        cancels; nor a CLOSE of ``opening``'s open of the file ``fh`` the OPEN is by: that OPEN
        carries its open state on, and the CLOSE is not sent); the others stay queued. Of an open whose state an OPEN carried on, only the locks
        are let go. None: none may go."""
        owners = self._owners
        who = (cred.uid, cred.gid, cred.gids)
        closes = _Closes(cred)
        batch, ops, whose = closes.batch, closes.ops, closes.whose
        kept: collections.deque[tuple[OpenFile, Credential]] = collections.deque()
        alone = opening is not None and owners.opens_on_way.get(opening, 0) <= 1
        full = False
        while self._closing:
            of, cr = self._closing.popleft()
            if (full or (cr.uid, cr.gid, cr.gids) != who
                    or (owners.is_opening(of.owner) and not (alone and of.owner == opening))):
                kept.append((of, cr))
                continue
            release = self.byte_range_locks.release_ops(of)
            if opening is not None and (release or id(of) in self._superseded
                                        or (of.fh == fh and of.owner == opening)):
                kept.append((of, cr))
                continue
            if id(of) in self._superseded:
                self._superseded.discard(id(of))
                these = [PUTFH4args(of.fh), *release] if release else []
            else:
                these = [PUTFH4args(of.fh), *release, CLOSE4args(0, of.stateid)]
            if len(ops) + len(these) > room and (batch or opening is not None):
                kept.append((of, cr))
                full = True
                continue
            self.byte_range_locks.forget_locks(of)
            if not these:
                continue
            if len(these) != 2 or type(these[1]) is not CLOSE4args:
                closes.only_closes = False
            whose += [len(batch)] * len(these)
            batch.append(of)
            ops += these
            full = len(batch) >= CLOSES_PER_COMPOUND
        self._closing = kept
        return closes if batch else None

    def _closes_failed(self, closes: _Closes, status: int, results: int, opnum: int | None) -> None:
        """The COMPOUND of ``closes`` stopped at its operation ``results - 1`` (of number ``opnum``)
        with ``status``: those before it went, those after it go back to the queue, at its front."""
        if not results:  # (SEQUENCE itself failed)
            log.warning("CLOSE of %d open(s): %s", len(closes.batch), NFS4Error(status, c.OP_SEQUENCE))
            return
        failed = closes.whose[min(results, len(closes.whose)) - 1]  # the open whose operation failed
        if status not in CLOSE_GONE:
            log.warning("CLOSE of an open: %s", NFS4Error(status, opnum))
        self._queue_again(closes.batch[failed + 1:], closes.cred)

    def _queue_again(self, batch: list[OpenFile], cred: Credential) -> None:
        """The CLOSEs of ``batch`` (with ``cred``) go back to the front of the queue, to go soon."""
        if batch:
            self._closing.extendleft(reversed([(of, cred) for of in batch]))
            self._send_soon()

    def _send_soon(self) -> None:
        """The queued CLOSEs go soon: a sender is started if none runs (it waits CLOSE_GATHER)."""
        if self._close_sender is None and self._closing and self._close_nursery is not None:
            self._close_sender = trio.Event()
            self._close_due = trio.Event()
            try:
                self._close_nursery.start_soon(self._send_closes)
            except RuntimeError:  # (the nursery is closing: flush_closes sends what waits)
                self._close_sender = None

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
        self.byte_range_locks.lose_locks(of, "the open they stood on was lost on the server and made again")

    async def release_all(self) -> None:
        """Unlock and close everything still open, best effort (before the client ID goes: a server
        keeps what we leave until our lease runs out, and other clients wait for those locks)."""
        for of in list(self.opens.values()):
            try:
                await self.close(of, of.cred or self.client.machine_cred)
            except Exception as e:  # (the session may be gone already: nothing is left to release)
                log.info("releasing an open at the end: %s", e)
        await self.flush_closes()

