"""Establishing the client ID and its sessions (RFC 8881 sections 2.4, 2.10, 18.35, 18.36): EXCHANGE_ID,
CREATE_SESSION with the channel attributes we offer, RECLAIM_COMPLETE, BIND_CONN_TO_SESSION of each
(re)connected path, and the sessions of client ID trunking (2.10.5): one per server instance."""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import trio

from .._errors import NFS4Error, ProtocolError
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import (
    COMPOUND4args,
    COMPOUND4res,
    check_compound_res,
    decode_compound_res,
    encode_compound_args,
)
from .._proto.nfs4.types import (
    BIND_CONN_TO_SESSION4args,
    CREATE_SESSION4args,
    EXCHANGE_ID4args,
    EXCHANGE_ID4resok,
    RECLAIM_COMPLETE4args,
    channel_attrs4,
    client_owner4,
    nfs_impl_id4,
    nfstime4,
)
from .._proto.rpc import auth_flavor
from .._rpc.auth import Credential, auth_sys
from .._rpc.errors import RpcReplyError
from .._transport.base import NO_HINTS, ProtocolViolation, ReplyHints, TransportError
from .._xdr import XdrError
from .backchannel import Backchannel
from .errors import NotNFSv41Server, ServerUnreachable
from .path_set import NoPathError, Path, PathSet
from .session import COMPOUND_ROOM, Check, RetryPolicy, Session, main_op

if TYPE_CHECKING:
    from .client_id import ClientID

log = logging.getLogger(__name__)

CB_PROGRAM = 0x40000000  # the callback program number we ask the server to call back on
# tries at connecting and setting up the session when a reply to it broke the protocol
START_ATTEMPTS = 3
# what we offer the server for its callbacks: one slot (RFC 8881 section 18.36.3: it may not change it)
BACK_CHANNEL_SLOTS = 1
IMPL_DOMAIN = "pynfsrdma.invalid"


def default_owner_id(identity: str = "") -> bytes:
    """A client owner stable for this host and mount identity (RFC 8881 section 2.4)."""
    return f"pynfsrdma/{socket.gethostname()}/{identity}".encode()


def boot_verifier() -> bytes:
    """Changes on every client instance, so the server can tell a restarted client."""
    return os.urandom(8)


@dataclass(slots=True)
class SessionOptions:
    """What we ask CREATE_SESSION for."""

    rsize: int = 1 << 20
    wsize: int = 1 << 20
    max_requests: int = 64
    max_operations: int = 64
    back_channel: bool = True
    minorversion: int = c.NFS4_MINOR_VERSION_1  # of every COMPOUND (the session's, its callbacks')


@dataclass
class ServerIdentity:
    """What EXCHANGE_ID said about the server (compared when trunking)."""

    clientid: int
    server_owner_major: bytes
    server_owner_minor: int
    server_scope: bytes
    impl: str = ""
    flags: int = 0


ReclaimHook = Callable[["ClientID"], Awaitable[None]]


class Establishment:
    """The client ID, its sessions and paths: what EXCHANGE_ID and CREATE_SESSION make."""

    def __init__(
        self,
        nursery: trio.Nursery,
        owner_id: bytes | None = None,
        options: SessionOptions | None = None,
        policy: RetryPolicy | None = None,
        cred: Credential | None = None,
    ) -> None:
        self._nursery = nursery
        self.owner = client_owner4(boot_verifier(), owner_id or default_owner_id())
        self.options = options or SessionOptions()
        self.policy = policy or RetryPolicy()
        self.machine_cred = cred or auth_sys(0, 0)
        self.backchannel = Backchannel(self)
        self.backchannel.minorversion = self.options.minorversion
        self.paths = PathSet(
            nursery, c.NFS4_PROGRAM, c.NFS_V4, on_connect=self._on_connect,
            callback_handler=self.backchannel.handle_rpc,
        )
        # no reply is larger than the session we ask for allows (nor, once made, than it allows)
        self.paths.limit_records(self.options.rsize + COMPOUND_ROOM)
        self.identity: ServerIdentity | None = None
        self.session: Session | None = None  # the first session (group 0)
        self.trunked_sessions: dict[int, Session] = {}  # group -> session (client ID trunking)
        self.trunked_groups: dict[int, int] = {}  # server owner minor id -> group
        self.lease_time = 90
        self.reclaim_hooks: list[ReclaimHook] = []
        self.state_revoked_hooks: list[ReclaimHook] = []
        self.status_flags_seen = 0
        self.in_grace = False
        self._sequenceid = 0  # EXCHANGE_ID's eir_sequenceid, for CREATE_SESSION
        self.closed = False  # shut down: no request is sent any more
        self.stopping = False  # set by the owner once nothing of ours needs the state any longer
        self.recoveries = 0

    if TYPE_CHECKING:  # (the request loop: :meth:`.recovery.Recovery.compound`)
        async def compound(
            self, ops: Sequence[Any], cred: Credential, hints: ReplyHints = NO_HINTS, *, payload: int = 0,
            check: Check | None = None, _recovering: bool = False,
        ) -> COMPOUND4res: ...

    @property
    def server(self) -> str:
        """The server's address as the first path names it (for messages)."""
        return self.paths.paths[0].address if self.paths.paths else "the server"

    @property
    def nursery(self) -> trio.Nursery:
        """Where the client's background work runs (delegation returns, recalls): it lives as long
        as the client."""
        return self._nursery

    async def raw_compound(self, path: Path, ops: Sequence[Any], cred: Credential | None = None,
                            timeout: float | None = None) -> COMPOUND4res:
        """A COMPOUND with no SEQUENCE (EXCHANGE_ID, CREATE_SESSION, BIND_CONN_TO_SESSION...)."""
        rpc = path.rpc
        if rpc is None:
            raise TransportError("path is not connected", path.address)
        xid, p = rpc.start_call(c.NFSPROC4_COMPOUND, cred or self.machine_cred)
        encode_compound_args(p, COMPOUND4args("", self.options.minorversion, list(ops)))
        try:
            u = await rpc.call_packed(xid, p, NO_HINTS, timeout or self.policy.timeo)
        except RpcReplyError as e:
            if e.errno == errno.EPROTONOSUPPORT:
                raise NotNFSv41Server(f"{path.address} does not serve NFSv4.1: {e}") from e
            raise e.located(main_op(ops)) from None
        except ProtocolViolation as e:
            raise ProtocolError(str(e).removeprefix(f"{path.address}: "), path.address, main_op(ops)) from e
        self.policy.answered()
        try:
            res = decode_compound_res(u)
            u.done()
            if res.status == c.NFS4ERR_MINOR_VERS_MISMATCH:
                raise NotNFSv41Server(
                    f"{path.address} does not support NFSv4.{self.options.minorversion} (NFS4ERR_MINOR_VERS_MISMATCH)"
                )
            check_compound_res(ops, res)
        except XdrError as e:
            rpc.misbehaved("violation", f"{e}; the connection is closed")
            await rpc.aclose()  # (its framing can no longer be trusted: the path connects again)
            raise ProtocolError(str(e), path.address, getattr(e, "op", None) or main_op(ops)) from e
        return res

    async def exchange_id(self, path: Path) -> EXCHANGE_ID4resok:
        args = EXCHANGE_ID4args(
            eia_clientowner=self.owner,
            eia_flags=c.EXCHGID4_FLAG_SUPP_MOVED_REFER | c.EXCHGID4_FLAG_SUPP_MOVED_MIGR,
            eia_state_protect=(c.SP4_NONE, None),
            eia_client_impl_id=[nfs_impl_id4(IMPL_DOMAIN, "pynfsrdma", nfstime4(0, 0))],
        )
        res = await self.raw_compound(path, [args])
        r = res.resarray[0] if res.resarray else None
        if r is None or r.opnum != c.OP_EXCHANGE_ID:
            raise NotNFSv41Server(f"{path.address}: EXCHANGE_ID got no answer ({status_name(res.status)})")
        if r.status != c.NFS4_OK:
            raise NFS4Error(r.status, c.OP_EXCHANGE_ID)
        ok: EXCHANGE_ID4resok = r.res
        return ok

    async def live_path(self) -> Path:
        """A live path of the first session, waiting for one (a soft mount: ``timeo`` at most)."""
        try:
            return await self.paths.wait_live(
                None if self.policy.hard else trio.current_time() + self.policy.timeo, group=0
            )
        except NoPathError as e:
            raise ServerUnreachable(str(e)) from e

    async def establish(self, *, reclaim: bool) -> None:
        """EXCHANGE_ID and CREATE_SESSION on a live path; with ``reclaim``, run the reclaim hooks."""
        path = await self.live_path()
        ok = await self.exchange_id(path)
        so = ok.eir_server_owner
        self.identity = ServerIdentity(
            ok.eir_clientid, bytes(so.so_major_id), so.so_minor_id, bytes(ok.eir_server_scope),
            ok.eir_server_impl_id[0].nii_name if ok.eir_server_impl_id else "", ok.eir_flags,
        )
        self._sequenceid = ok.eir_sequenceid
        await self.create_session(path)
        if self.trunked_sessions:  # a new client ID: the trunked sessions went with the old one
            await self._renew_trunked_sessions()
        if reclaim:
            self.in_grace = True
            for hook in self.reclaim_hooks:
                await hook(cast("ClientID", self))
        await self._reclaim_complete()
        self.in_grace = False

    def _channels(self) -> tuple[channel_attrs4, channel_attrs4]:
        """The fore and back channel attributes we ask CREATE_SESSION for."""
        o = self.options
        room = COMPOUND_ROOM
        fore = channel_attrs4(0, o.wsize + room, o.rsize + room, room, o.max_operations, o.max_requests, [])
        back = channel_attrs4(0, 16 * 1024, 16 * 1024, 0, 8, BACK_CHANNEL_SLOTS, [])
        return fore, back

    def _new_session(self, ok: Any, path: Path, group: int, stats: Any = None) -> Session:
        """A Session for CREATE_SESSION's result: of what the server granted, no more than we asked
        for (slots, operations, sizes: a server may lower them, RFC 8881 section 18.36.3), and its
        connections refuse replies larger than it allows."""
        fore, _ = self._channels()
        fa = ok.csr_fore_chan_attrs
        session = Session(
            bytes(ok.csr_sessionid), max(1, min(fa.ca_maxrequests, fore.ca_maxrequests)), self.paths, self.policy,
            min(fa.ca_maxrequestsize, fore.ca_maxrequestsize), min(fa.ca_maxresponsesize, fore.ca_maxresponsesize),
            stats=stats, group=group, minorversion=self.options.minorversion,
            max_operations=max(2, min(fa.ca_maxoperations, fore.ca_maxoperations)),
        )
        self.paths.limit_records(max(session.max_response_size, COMPOUND_ROOM))
        if fa.ca_maxrequests > fore.ca_maxrequests:
            log.info("%s grants %d slots; %d are used, as asked", path.address, fa.ca_maxrequests,
                     fore.ca_maxrequests)
        return session

    async def create_session(self, path: Path) -> None:
        assert self.identity is not None
        o = self.options
        fore, back = self._channels()
        flags = c.CREATE_SESSION4_FLAG_CONN_BACK_CHAN if o.back_channel else 0
        args = CREATE_SESSION4args(
            csa_clientid=self.identity.clientid,
            csa_sequence=self._sequenceid,
            csa_flags=flags,
            csa_fore_chan_attrs=fore,
            csa_back_chan_attrs=back,
            csa_cb_program=CB_PROGRAM,
            csa_sec_parms=[(auth_flavor.AUTH_NONE, None)],
        )
        res = await self.raw_compound(path, [args])
        r = res.resarray[0] if res.resarray else None
        if r is None or r.status != c.NFS4_OK:
            raise NFS4Error(r.status if r else res.status, c.OP_CREATE_SESSION)
        ok = r.res
        self._sequenceid = (self._sequenceid + 1) & 0xFFFFFFFF
        fa = ok.csr_fore_chan_attrs
        old = self.session
        self.session = self._new_session(ok, path, 0)
        back_slots = min(ok.csr_back_chan_attrs.ca_maxrequests, back.ca_maxrequests)
        self.backchannel.reset(back_slots if ok.csr_flags & c.CREATE_SESSION4_FLAG_CONN_BACK_CHAN else 0)
        if old is not None:
            old.kill(c.NFS4ERR_BADSESSION)
        path.bound_session = self.session.sessionid
        log.info("session %s created on %s (%d slots)", self.session.sessionid.hex(), path.address, fa.ca_maxrequests)

    # -- client ID trunking ---------------------------------------------------------------------------
    def session_of(self, group: int) -> Session | None:
        """The session whose requests go over the paths of ``group`` (None: none yet)."""
        return self.session if group == 0 else self.trunked_sessions.get(group)

    def group_for_minor(self, minor: int) -> int:
        """The session group of the server instance with server owner minor id ``minor``."""
        if self.identity is not None and minor == self.identity.server_owner_minor:
            return 0
        return self.trunked_groups.setdefault(minor, len(self.trunked_groups) + 1)

    async def open_trunked_session(self, path: Path, group: int, sequenceid: int | None = None) -> Session:
        """CREATE_SESSION on our client ID over ``path`` (an address of another instance of the
        server: client ID trunking) for the paths of ``group``; replaces that group's session."""
        assert self.identity is not None and group != 0
        fore, back = self._channels()
        st: int = c.NFS4ERR_SEQ_MISORDERED
        ok = None
        # the client record's sequence: what EXCHANGE_ID said there, else what we count
        for seq in dict.fromkeys(x for x in (sequenceid, self._sequenceid) if x is not None):
            args = CREATE_SESSION4args(self.identity.clientid, seq, 0, fore, back, CB_PROGRAM,
                                       [(auth_flavor.AUTH_NONE, None)])
            res = await self.raw_compound(path, [args])
            r = res.resarray[0] if res.resarray else None
            st = r.status if r is not None else res.status
            if st == c.NFS4_OK and r is not None:
                ok = r.res
                self._sequenceid = (seq + 1) & 0xFFFFFFFF
                break
            if st != c.NFS4ERR_SEQ_MISORDERED:
                break
        if ok is None:
            raise NFS4Error(st, c.OP_CREATE_SESSION)
        session = self._new_session(ok, path, group, self.session.stats if self.session else None)
        old = self.trunked_sessions.get(group)
        self.trunked_sessions[group] = session
        if old is not None:
            old.kill(c.NFS4ERR_BADSESSION)
        path.group = group
        path.bound_session = session.sessionid
        log.info("trunked session %s (group %d) created on %s", session.sessionid.hex(), group, path.address)
        return session

    async def _renew_trunked_sessions(self) -> None:
        """After the first session was replaced (a new client ID, or a lost session): replace the
        trunked sessions on a live path of their group; a group with none gets one when a path
        of it is bound again (see the trunking verifier)."""
        for group, old in list(self.trunked_sessions.items()):
            old.kill(c.NFS4ERR_BADSESSION)
            path = self.paths.choose(group=group)
            try:
                if path is None:
                    raise TransportError("no live path", f"group {group}")
                await self.open_trunked_session(path, group)
            except (OSError, TransportError, NFS4Error) as e:
                log.info("trunked session of group %d not replaced now: %s", group, e)
                del self.trunked_sessions[group]

    async def _reclaim_complete(self) -> None:
        res = await self.compound([RECLAIM_COMPLETE4args(False)], self.machine_cred, _recovering=True)
        st = res.resarray[-1].status if res.resarray else res.status
        if st not in (c.NFS4_OK, c.NFS4ERR_COMPLETE_ALREADY):
            raise NFS4Error(st, c.OP_RECLAIM_COMPLETE)

    async def _on_connect(self, path: Path) -> None:
        """A (re)connected path: bind it to the current session, fore and back channel."""
        s = self.session_of(path.group)
        if s is None or path.bound_session == s.sessionid:
            return
        res = await self.raw_compound(
            path, [BIND_CONN_TO_SESSION4args(s.sessionid, c.CDFC4_FORE_OR_BOTH, False)]
        )
        r = res.resarray[0] if res.resarray else None
        st = r.status if r is not None else res.status
        if st == c.NFS4_OK:
            path.bound_session = s.sessionid
            return
        if st in (c.NFS4ERR_BADSESSION, c.NFS4ERR_DEADSESSION, c.NFS4ERR_STALE_CLIENTID):
            s.kill(st)  # the next request recovers
            return
        raise NFS4Error(st, c.OP_BIND_CONN_TO_SESSION)

    async def bind_backchannel(self) -> None:
        """The server has no backchannel for us: bind one of our live connections to it."""
        s = self.session
        path = self.paths.choose(group=0)
        if s is None or path is None:
            return
        res = await self.raw_compound(
            path, [BIND_CONN_TO_SESSION4args(s.sessionid, c.CDFC4_BACK_OR_BOTH, False)]
        )
        st = res.resarray[0].status if res.resarray else res.status
        if st != c.NFS4_OK:
            log.warning("%s: could not bind the backchannel: %s", path.address, status_name(st))


def status_name(status: int) -> str:
    try:
        return c.nfsstat4(status).name
    except ValueError:
        return str(status)
