"""Running COMPOUNDs on file handles: :class:`Compounds` turns a failed operation into an
:class:`~pynfsrdma._errors.NFS4Error` carrying its status and operation, parses results inside the
session's checks (:meth:`Compounds.query`: a reply it cannot use is a protocol violation like a
malformed one, and every error of a reply names the path it was about), and chooses the stateid I/O
goes with (:meth:`Compounds.run_with_open`, sending again as ``lost_state`` decides). The state the
operations of the other modules share is made here."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

from .._errors import NFS4Error, ProtocolError, ReplyError
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import ResOp, result_of
from .._proto.nfs4.compound_shapes import CompoundShape
from .._proto.nfs4.types import stateid4
from .._rpc.auth import Credential
from .._session.client_id import ClientID
from .._transport.base import ReplyHints
from .attributes import FileAttrs, time_create_ns
from .locks import LockTable
from .lost_state import Then, on_stateid_error
from .open_state import ANONYMOUS_STATEID, Delegation, OpenFile, current

log = logging.getLogger(__name__)

T = TypeVar("T")

VERIFIER_SIZE = 8


class Compounds:
    """The COMPOUNDs of file-handle operations over a :class:`ClientID`'s session, and the state they share."""

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
        # called with a file handle before its CLOSE (pNFS: layouts committed and returned)
        self.close_hooks: list[Callable[[bytes, Credential], Awaitable[None]]] = []
        self.supported_attrs: frozenset[int] = frozenset()  # the export's (learned by mount)
        # ask for delegated timestamps too (RFC 9754): the server supports time_deleg_* (learned by mount)
        self.deleg_timestamps = False
        # timestamps: attribute delegations granted; times_returned: DELEGRETURNs that gave times back;
        # getattr_ms: the longest a CB_GETATTR took us to answer (a server waits only briefly: nfsd
        # about 30 ms, then recalls the delegation)
        self.delegation_counts = {"granted": 0, "recalled": 0, "returned": 0, "local_opens": 0, "getattrs": 0,
                                  "getattr_ms": 0, "timestamps": 0, "times_returned": 0}
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
        # pNFS (learned by mount): fs_layout_types of the export (None: not said) and layout_blksize
        self.layout_types: list[int] | None = None
        self.layout_blksize = 0
        # the NFSv4.2 operations the server said it does not support: not sent again
        self.unsupported: set[int] = set()

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
        if check is None:
            return await self.query(ops, cred, _results, hints, payload=payload, path=path, recovering=recovering)
        checked = check

        def parse(results: list[ResOp]) -> list[ResOp]:
            checked(results)
            return results

        return await self.query(ops, cred, parse, hints, payload=payload, path=path, recovering=recovering)

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
        shape: CompoundShape | None = None,
        take: Callable[[tuple[Any, ...]], T] | None = None,
    ) -> T:
        """As :meth:`run`, returning ``parse(results)``, which runs inside the session's checks: what
        it raises for results it cannot use (XdrError for malformed attributes) is a protocol
        violation, as a malformed reply is. ``shape``: the prepared COMPOUND ``ops`` are (made by its
        :meth:`~.compound_shapes.CompoundShape.ops`); a reply of success its decoder takes gives
        ``take(what it decoded)``, the same value ``parse`` makes of the results."""
        out: list[T] = []

        def check(results: list[ResOp]) -> None:
            out.append(parse(results))

        prepared = None
        if shape is not None:
            assert take is not None

            def prepared(values: tuple[Any, ...]) -> None:
                out.append(take(values))

        # (the one coroutine between the families and the client ID: run comes through here)
        try:
            res = await self.client.compound(
                ops, cred, hints if hints is not None else NO_HINTS, payload=payload, check=check,
                _recovering=recovering, shape=shape, prepared=prepared,
            )
        except ReplyError as e:
            raise e.located(None, path) from None
        if res.status != c.NFS4_OK:
            failed = res.resarray[-1] if res.resarray else None
            raise NFS4Error(res.status, failed.opnum if failed else None, path)
        return out[-1] if out else parse(res.resarray)  # (a client ID that took no check: parsed here)

    def io_window(self, io_size: int) -> int:
        """READs or WRITEs of ``io_size`` bytes a transfer keeps in flight now: it grows with the
        live paths and their bandwidth-delay products, within the session's slots."""
        return self.client.io_window(io_size)

    def per_compound(self) -> int:
        """Operations of one kind a COMPOUND can hold after its SEQUENCE and PUTFH."""
        session = self.client.session
        return max(1, (session.max_operations if session is not None else 3) - 2)

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
        if check is None:
            return await self.query_with_open(of, build, cred, _results, hints, payload=payload,
                                              lock_owner=lock_owner, path=path)
        checked = check

        def parse(results: list[ResOp]) -> list[ResOp]:
            checked(results)
            return results

        return await self.query_with_open(of, build, cred, parse, hints, payload=payload, lock_owner=lock_owner,
                                          path=path)

    async def query_with_open(
        self,
        of: OpenFile | None,
        build: Callable[[stateid4], list[Any]],
        cred: Credential,
        parse: Callable[[list[ResOp]], T],
        hints: ReplyHints | None = None,
        *,
        payload: int = 0,
        lock_owner: Hashable | None = None,
        path: str | None = None,
        shape: CompoundShape | None = None,
        take: Callable[[tuple[Any, ...]], T] | None = None,
    ) -> T:
        """As :meth:`run_with_open`, returning ``parse(results)``; ``shape``, ``take``: as
        :meth:`query` (``build`` then makes the shape's operations)."""
        while True:
            stateid = self.io_stateid(of, lock_owner, path)
            try:
                return await self.query(build(current(stateid)), cred, parse, hints, payload=payload, path=path,
                                        shape=shape, take=take)
            except NFS4Error as e:
                replaced = of is not None and not of.closed and self.io_stateid(of, lock_owner, path) != stateid
                if on_stateid_error(e.status, replaced=replaced, reopens=0, can_reopen=False) is not Then.RESEND:
                    raise
                log.info("%s with a stateid replaced meanwhile (reclaimed): sending it again", e.name)


def _results(res: list[ResOp]) -> list[ResOp]:
    """The results as they are (what :meth:`Compounds.run` returns)."""
    return res


def last_attrs(res: list[ResOp]) -> FileAttrs:
    """The attributes of a COMPOUND's last GETATTR."""
    return FileAttrs.from_fattr4(result_of(res, c.OP_GETATTR).obj_attributes)


def created_ns(res: list[ResOp]) -> int | None:
    """The time_create of a COMPOUND's last GETATTR (None when the server sent none)."""
    return time_create_ns(result_of(res, c.OP_GETATTR).obj_attributes)


def fh_attrs(res: list[ResOp]) -> tuple[bytes, FileAttrs]:
    """The file handle and attributes of a COMPOUND that ends with GETFH and GETATTR."""
    return bytes(result_of(res, c.OP_GETFH).object), last_attrs(res)


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
    """The cookies of one listing paged by cookie (READDIR, LISTXATTRS), page after page: one seen
    before (a server going round in circles) is a protocol violation, not a listing that never ends."""

    __slots__ = ("op", "path", "seen", "server")

    def __init__(self, server: str, path: str | None, op: int = c.OP_READDIR) -> None:
        self.server = server
        self.path = path
        self.op = op
        self.seen: set[int] = set()

    def check(self, cookies: Iterable[int]) -> None:
        seen = self.seen
        for k in cookies:
            if k in seen:
                raise ProtocolError(f"cookie {k} repeated in a listing", self.server, self.op, self.path)
            seen.add(k)


NO_HINTS = ReplyHints()
