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

:class:`ClientID` is its state (:class:`.client_state.ClientState`) and three parts over it, each
an object of its own: ``establishment`` (:mod:`.create_session`: EXCHANGE_ID, CREATE_SESSION,
BIND_CONN_TO_SESSION, the trunked sessions), ``recovery`` (:mod:`.recovery`: the request loop, the
recovery of lost sessions and client IDs with RECLAIM_COMPLETE, the SEQ4_STATUS flags acted on) and
``lease`` (:mod:`.lease`: renewal, the flags watched); here they are put together, started and shut
down.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import cached_property
from typing import Any

import trio

from .._errors import NFS4Error, ProtocolError
from .._proto.nfs4.compound import COMPOUND4res
from .._proto.nfs4.types import DESTROY_CLIENTID4args, DESTROY_SESSION4args, EXCHANGE_ID4resok
from .._rpc.auth import AUTH_NONE_CRED, Credential
from .._rpc.errors import RpcReplyError
from .._transport.base import ProtocolViolation, TransportError
from .client_state import ClientState, ServerIdentity, SessionOptions, default_owner_id
from .create_session import START_ATTEMPTS, Establishment
from .errors import ServerUnreachable
from .io_window import Windows, io_window
from .lease import LeaseKeeper
from .path_set import Path
from .recovery import CompoundCall, Recovery
from .session import Session

log = logging.getLogger(__name__)

ReclaimHook = Callable[["ClientID"], Awaitable[None]]  # (what ClientState.reclaim_hooks hold)


class ClientID(ClientState):
    """An NFSv4.1 client ID with its current session, over a set of paths."""

    # its parts, each made at its first use, over this one state
    @cached_property
    def establishment(self) -> Establishment:
        return Establishment(self)

    @cached_property
    def recovery(self) -> Recovery:
        return Recovery(self, self.establishment, self._reclaim, self._state_revoked)

    @cached_property
    def lease(self) -> LeaseKeeper:
        return LeaseKeeper(self, self.recovery)

    async def _reclaim(self) -> None:
        for hook in self.reclaim_hooks:
            await hook(self)

    async def _state_revoked(self) -> None:
        for hook in self.state_revoked_hooks:
            await hook(self)

    # -- requests -------------------------------------------------------------------------------------------
    @cached_property
    def compound(self) -> CompoundCall:
        """Run ``ops`` in the session; retries DELAY/GRACE and recovers lost sessions: the recovery's
        request loop itself (:meth:`.recovery.Recovery.compound`), with no coroutine between it and
        its callers: ``await client.compound(ops, cred, hints=NO_HINTS, *, payload=0, check=None)``."""
        return self.recovery.compound

    async def raw_compound(self, path: Path, ops: Sequence[Any], cred: Credential | None = None,
                           timeout: float | None = None) -> COMPOUND4res:
        """A COMPOUND with no SEQUENCE on ``path`` (EXCHANGE_ID, CREATE_SESSION, BIND_CONN_TO_SESSION...)."""
        return await self.establishment.raw_compound(path, ops, cred, timeout)

    async def exchange_id(self, path: Path) -> EXCHANGE_ID4resok:
        """EXCHANGE_ID on ``path`` with our owner (what the server there says of itself)."""
        return await self.establishment.exchange_id(path)

    async def open_trunked_session(self, path: Path, group: int, sequenceid: int | None = None) -> Session:
        """CREATE_SESSION on our client ID over ``path`` for the paths of ``group`` (client ID
        trunking: :meth:`.create_session.Establishment.open_trunked_session`)."""
        return await self.establishment.open_trunked_session(path, group, sequenceid)

    # -- setting up ---------------------------------------------------------------------------------------
    async def start(self, path: Path, timeout: float = 15.0) -> None:
        """Connect the first path, then EXCHANGE_ID, CREATE_SESSION and RECLAIM_COMPLETE. A reply
        that breaks the protocol closes the connection, and all that is done again on a new one
        (START_ATTEMPTS times at most)."""
        try:
            with trio.fail_after(timeout):
                self.paths.on_connect = self.establishment.bind_connection
                await self.paths.add(path, connect=False)
                for attempt in range(1, START_ATTEMPTS + 1):
                    try:
                        await self.paths.connect(path)  # raises a clear TransportError when unreachable
                        await self.recovery.new_client_id(reclaim=False)
                        break
                    except (ProtocolError, ProtocolViolation) as e:
                        if attempt == START_ATTEMPTS:
                            raise
                        log.info("%s: %s; connecting again", path.address, e)
                        await self.paths.disconnect(path)
        except trio.TooSlowError as e:
            raise ServerUnreachable(f"{path.address}: no NFSv4.1 answer within {timeout:g} s") from e
        self.nursery.start_soon(self.paths.keep_alive, path)
        self.nursery.start_soon(self.lease.renew_lease)
        self.nursery.start_soon(self.lease.watch_status_flags)


    @cached_property
    def windows(self) -> Windows:
        return Windows()

    def io_window(self, io_size: int) -> int:
        """READs or WRITEs of ``io_size`` bytes one transfer keeps in flight now: enough to fill
        every live path, within the sessions' slots (:func:`.io_window.io_window`; worked out
        again once the last answer's time is up: :class:`.io_window.Windows`)."""
        now, changes = trio.current_time(), self.paths.changes
        window = self.windows.get(io_size, now, changes)
        if window is not None:
            return window
        sessions = [self.session, *self.trunked_sessions.values()]
        slots = sum(s.table.limit for s in sessions if s is not None and s.dead is None)
        window = io_window(self.paths.live(), io_size, slots or self.options.max_requests, now)
        return self.windows.keep(io_size, window, now, changes)


    # -- shutting down --------------------------------------------------------------------------------------
    async def forget(self, cred: Credential) -> None:
        """Destroy ``cred``'s RPCSEC_GSS context on the server (RPCSEC_GSS_DESTROY on a live path),
        if it has one: at the end of a mount, before the session goes."""
        path = self.paths.choose(group=0)
        if path is not None and path.rpc is not None:
            await cred.destroy(path.rpc)

    async def shutdown(self, timeout: float | None = None) -> None:
        """DESTROY_SESSION and DESTROY_CLIENTID (best effort, within ``timeout`` seconds: 5 by
        default), then close every path."""
        if self.closed:
            return
        self.closed = True
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


__all__ = ["AUTH_NONE_CRED", "ClientID", "ReclaimHook", "ServerIdentity", "SessionOptions", "default_owner_id"]
