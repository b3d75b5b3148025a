"""The client ID and its sessions: EXCHANGE_ID, CREATE_SESSION, lease renewal, recovery, shutdown.

:class:`ClientID` is what the layers above talk to: ``await client.compound(ops, cred)`` runs a
COMPOUND in the current session and hides the session's life from them:

* NFS4ERR_DELAY and NFS4ERR_GRACE on an operation: the request is sent again (a new request,
  since the server finished the old one with that error) after a growing pause;
* BADSESSION / DEADSESSION / CONN_NOT_BOUND: a new session on the same client ID, then the
  request again;
* STALE_CLIENTID / EXPIRED (the server restarted or our lease ran out): a new client ID and a new
  session; the registered reclaim hook reclaims open state during the grace period; then
  RECLAIM_COMPLETE; then the request again.

Recovery is single-flight: concurrent requests that hit the same loss wait for one recovery.

Client ID trunking (RFC 8881 section 2.10.5): an address of another instance of the same server
(same server owner major id and scope, another minor id) cannot carry our first session, but our
client ID is valid there, so it gets a session of its own (:meth:`ClientID.open_trunked_session`).
Each path belongs to one session (``Path.group``: 0 for the first session, 1, 2 ... for the
others, one per minor id); each request picks the least loaded live path of all and runs in that
path's session, taking a slot of that session, and a resend after a lost connection stays within
that session's paths (same slot and sequence id: exactly once). Recovery is per session: a lost
trunked session is replaced on a path of its group; a lost client ID replaces the first session and
then every trunked one.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from ..errors import NFS4Error, ProtocolError
from ..proto.nfs4 import const as c
from ..proto.nfs4.compound import (
    COMPOUND4args,
    COMPOUND4res,
    check_compound_res,
    decode_compound_res,
    encode_compound_args,
)
from ..proto.nfs4.types import (
    BIND_CONN_TO_SESSION4args,
    CREATE_SESSION4args,
    DESTROY_CLIENTID4args,
    DESTROY_SESSION4args,
    EXCHANGE_ID4args,
    EXCHANGE_ID4resok,
    RECLAIM_COMPLETE4args,
    channel_attrs4,
    client_owner4,
    nfs_impl_id4,
    nfstime4,
)
from ..proto.rpc import auth_flavor
from ..rpc.auth import AUTH_NONE_CRED, Credential, auth_sys
from ..rpc.errors import RpcReplyError
from ..rpc.gss_auth import GssCredential
from ..transport.base import NO_HINTS, ProtocolViolation, ReplyHints, TransportError
from ..xdr import XdrError
from .backchannel import Backchannel
from .errors import NotNFSv41Server, ServerUnreachable, SessionError
from .io_window import io_window
from .path_set import NoPathError, Path, PathSet
from .sequence import CLIENT_LOST, Act, Attempts, on_compound
from .session import COMPOUND_ROOM, Check, RetryPolicy, Session, SessionLost, main_op

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
    max_operations: int = 16
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


@dataclass
class _Recovery:
    generation: int = 0  # bumped each time a session or client ID is replaced
    lock: trio.Lock = field(default_factory=trio.Lock)


REVOKED_FLAGS = (
    c.SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED
    | c.SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED
    | c.SEQ4_STATUS_ADMIN_STATE_REVOKED
    | c.SEQ4_STATUS_RECALLABLE_STATE_REVOKED
)

ReclaimHook = Callable[["ClientID"], Awaitable[None]]


class ClientID:
    """An NFSv4.1 client ID with its current session, over a set of paths."""

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
        self._recovery = _Recovery()
        self._closed = False
        self.stopping = False  # set by the owner once nothing of ours needs the state any longer
        self.recoveries = 0

    @property
    def server(self) -> str:
        """The server's address as the first path names it (for messages)."""
        return self.paths.paths[0].address if self.paths.paths else "the server"

    # -- setting up ---------------------------------------------------------------------------------------
    async def start(self, path: Path, timeout: float = 15.0) -> None:
        """Connect the first path, then EXCHANGE_ID, CREATE_SESSION and RECLAIM_COMPLETE. A reply
        that breaks the protocol closes the connection, and all that is done again on a new one
        (START_ATTEMPTS times at most)."""
        try:
            with trio.fail_after(timeout):
                await self.paths.add(path, connect=False)
                for attempt in range(1, START_ATTEMPTS + 1):
                    try:
                        await self.paths.connect(path)  # raises a clear TransportError when unreachable
                        await self._establish(reclaim=False)
                        break
                    except (ProtocolError, ProtocolViolation) as e:
                        if attempt == START_ATTEMPTS:
                            raise
                        log.info("%s: %s; connecting again", path.address, e)
                        await self.paths.disconnect(path)
        except trio.TooSlowError as e:
            raise ServerUnreachable(f"{path.address}: no NFSv4.1 answer within {timeout:g} s") from e
        self._nursery.start_soon(self.paths.keep_alive, path)
        self._nursery.start_soon(self._renew_lease)
        self._nursery.start_soon(self._watch_status_flags)

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
            raise NotNFSv41Server(f"{path.address}: EXCHANGE_ID got no answer ({_st(res.status)})")
        if r.status != c.NFS4_OK:
            raise NFS4Error(r.status, c.OP_EXCHANGE_ID)
        ok: EXCHANGE_ID4resok = r.res
        return ok

    async def _live_path(self) -> Path:
        """A live path of the first session, waiting for one (a soft mount: ``timeo`` at most)."""
        try:
            return await self.paths.wait_live(
                None if self.policy.hard else trio.current_time() + self.policy.timeo, group=0
            )
        except NoPathError as e:
            raise ServerUnreachable(str(e)) from e

    async def _establish(self, *, reclaim: bool) -> None:
        """EXCHANGE_ID and CREATE_SESSION on a live path; with ``reclaim``, run the reclaim hooks."""
        path = await self._live_path()
        ok = await self.exchange_id(path)
        so = ok.eir_server_owner
        self.identity = ServerIdentity(
            ok.eir_clientid, bytes(so.so_major_id), so.so_minor_id, bytes(ok.eir_server_scope),
            ok.eir_server_impl_id[0].nii_name if ok.eir_server_impl_id else "", ok.eir_flags,
        )
        self._sequenceid = ok.eir_sequenceid
        await self._create_session(path)
        if self.trunked_sessions:  # a new client ID: the trunked sessions went with the old one
            await self._renew_trunked_sessions()
        if reclaim:
            self.in_grace = True
            for hook in self.reclaim_hooks:
                await hook(self)
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

    async def _create_session(self, path: Path) -> None:
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

    # -- requests ---------------------------------------------------------------------------------------
    async def compound(
        self,
        ops: Sequence[Any],
        cred: Credential,
        hints: ReplyHints = NO_HINTS,
        *,
        payload: int = 0,
        check: Check | None = None,
        _recovering: bool = False,
    ) -> COMPOUND4res:
        """Run ``ops`` in the session; retries DELAY/GRACE and recovers lost sessions.

        The reply's ``resarray`` holds the results of ``ops`` (SEQUENCE's is removed); the caller
        checks the statuses of its operations. ``check``: see :meth:`Session.compound`.
        """
        attempts = Attempts()
        lost = 0
        while True:
            if self._closed:
                raise SessionError("the client is shut down", errno.ESHUTDOWN)
            if not _recovering and self._recovery.lock.locked():
                async with self._recovery.lock:
                    pass  # wait for the recovery in progress to finish
            session = self._session_for(payload)
            if session is None:
                raise SessionError("no session")
            generation = self._recovery.generation
            try:
                res = await session.compound(ops, cred, hints, payload=payload, check=check)
            except SessionLost as e:
                lost += 1
                if _recovering or lost > 3:
                    raise SessionError(f"the session was lost and could not be recovered ({e})") from e
                if session.group != 0 and e.status not in CLIENT_LOST:
                    await self._recover_trunked(session)
                else:
                    await self._recover(generation, e.status)
                continue
            decision = on_compound(res.status, recovering=_recovering, attempts=attempts)
            if decision.act is Act.RESEND:
                await trio.sleep(decision.wait)
                continue
            if decision.act is Act.NEW_CLIENT:
                await self._recover(generation, res.status)
                continue
            return res

    def io_window(self, io_size: int) -> int:
        """READs or WRITEs of ``io_size`` bytes one transfer keeps in flight now: enough to fill
        every live path, within the sessions' slots (:func:`.io_window.io_window`)."""
        sessions = [self.session, *self.trunked_sessions.values()]
        slots = sum(s.table.limit for s in sessions if s is not None and s.dead is None)
        return io_window(self.paths.live(), io_size, slots or self.options.max_requests, trio.current_time())

    def _session_for(self, payload: int) -> Session | None:
        """The session of the path a request of ``payload`` bytes would best go over."""
        if not self.trunked_sessions:
            return self.session
        path = self.paths.choose(payload)
        s = self.trunked_sessions.get(path.group) if path is not None and path.group else None
        return s if s is not None and s.dead is None else self.session

    async def _recover_trunked(self, lost: Session) -> None:
        """Replace a lost trunked session on a live path of its group (or give the group up until
        one of its paths is bound again)."""
        async with self._recovery.lock:
            if self.trunked_sessions.get(lost.group) is not lost:
                return  # replaced already
            self.recoveries += 1
            log.warning("recovering trunked session group %d from %s", lost.group, _st(lost.dead or 0))
            path = self.paths.choose(group=lost.group)
            try:
                if path is None:
                    raise TransportError("no live path", f"group {lost.group}")
                await self.open_trunked_session(path, lost.group)
            except (OSError, TransportError, NFS4Error) as e:
                log.info("trunked session of group %d not replaced now: %s", lost.group, e)
                del self.trunked_sessions[lost.group]

    async def _recover(self, generation: int, status: int) -> None:
        """Replace the session (or the client ID and session) once for all who saw it fail."""
        async with self._recovery.lock:
            if self._recovery.generation != generation:
                return  # somebody else recovered already
            if self.stopping:
                # the file system is unmounted: what was lost needs no new session, and a new
                # client ID would take the place of a client made since under our owner (a mount
                # made again on the same mount point) and take its state away
                raise SessionError(f"the session was lost while shutting down ({_st(status)})", errno.ESHUTDOWN)
            self.recoveries += 1
            log.warning("recovering from %s", _st(status))
            path = await self._live_path()
            if status in CLIENT_LOST:
                await self._establish(reclaim=True)
            else:
                try:
                    await self._create_session(path)
                except NFS4Error as e:
                    if e.status not in CLIENT_LOST:
                        raise
                    await self._establish(reclaim=True)
            self._recovery.generation += 1

    async def _renew_lease(self) -> None:
        """Keep the lease alive with a lone SEQUENCE when no other request renewed it."""
        while not self._closed:
            s = self.session
            interval = max(1.0, self.lease_time / 3)
            if s is None:
                await trio.sleep(interval)
                continue
            idle = trio.current_time() - s.last_renewal
            if idle < interval:
                await trio.sleep(interval - idle)
                continue
            try:
                await self.compound([], self.machine_cred)
            except (OSError, TransportError, NFS4Error) as e:
                log.info("lease renewal failed: %s", e)
                await trio.sleep(1.0)

    async def _watch_status_flags(self) -> None:
        """Act on the SEQ4_STATUS flags SEQUENCE replies carry (RFC 8881 section 18.46.3)."""
        while not self._closed:
            s = self.session
            if s is None:
                await trio.sleep(1.0)
                continue
            with trio.move_on_after(1.0):  # the session may be replaced meanwhile
                await s.flags_event.wait()
            flags, s.status_flags = s.status_flags, 0
            if s.flags_event.is_set():
                s.flags_event = trio.Event()
            if flags:
                try:
                    await self.act_on_status_flags(flags)
                except (OSError, TransportError, NFS4Error) as e:
                    log.warning("acting on SEQUENCE status flags %#x failed: %s", flags, e)

    async def act_on_status_flags(self, flags: int) -> None:
        self.status_flags_seen |= flags
        if flags & c.SEQ4_STATUS_RESTART_RECLAIM_NEEDED:
            log.warning("the server asks us to reclaim our state")
            await self._recover(self._recovery.generation, c.NFS4ERR_STALE_CLIENTID)
        if flags & REVOKED_FLAGS:
            log.warning("the server revoked some of our state (flags %#x)", flags & REVOKED_FLAGS)
            for hook in self.state_revoked_hooks:
                await hook(self)
        if flags & (c.SEQ4_STATUS_CB_PATH_DOWN | c.SEQ4_STATUS_CB_PATH_DOWN_SESSION):
            await self.bind_backchannel()
        if flags & c.SEQ4_STATUS_LEASE_MOVED:
            log.warning("the server says our lease moved (migration is not supported)")

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
            log.warning("%s: could not bind the backchannel: %s", path.address, _st(st))

    # -- shutting down --------------------------------------------------------------------------------------
    async def forget(self, cred: Credential) -> None:
        """Destroy ``cred``'s RPCSEC_GSS context on the server (RPCSEC_GSS_DESTROY on a live path),
        if it has one: at the end of a mount, before the session goes."""
        if not isinstance(cred, GssCredential):
            return
        path = self.paths.choose(group=0)
        if path is not None and path.rpc is not None:
            await cred.destroy(path.rpc)

    async def shutdown(self, timeout: float | None = None) -> None:
        """DESTROY_SESSION and DESTROY_CLIENTID (best effort, within ``timeout`` seconds: 5 by
        default), then close every path."""
        if self._closed:
            return
        self._closed = True
        with trio.move_on_after(5 if timeout is None else timeout):
            for group, trunked in list(self.trunked_sessions.items()):
                tpath = self.paths.choose(group=group)
                if tpath is not None:
                    try:
                        await self.raw_compound(tpath, [DESTROY_SESSION4args(trunked.sessionid)], timeout=3)
                    except (OSError, TransportError, NFS4Error, RpcReplyError) as e:
                        log.info("trunked session not destroyed: %s", e)
            path = self.paths.choose(group=0)
            if path is not None and self.session is not None and self.identity is not None:
                try:
                    await self.raw_compound(path, [DESTROY_SESSION4args(self.session.sessionid)], timeout=3)
                    await self.raw_compound(path, [DESTROY_CLIENTID4args(self.identity.clientid)], timeout=3)
                    await self.forget(self.machine_cred)
                except (OSError, TransportError, NFS4Error, RpcReplyError) as e:
                    log.info("clean shutdown incomplete: %s", e)
        await self.paths.aclose()


def _st(status: int) -> str:
    try:
        return c.nfsstat4(status).name
    except ValueError:
        return str(status)


__all__ = ["AUTH_NONE_CRED", "ClientID", "ServerIdentity", "SessionOptions"]
