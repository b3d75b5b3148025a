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

:class:`ClientID` is made of a module per part of that life: ``create_session`` (EXCHANGE_ID,
CREATE_SESSION, RECLAIM_COMPLETE, BIND_CONN_TO_SESSION, the trunked sessions), ``recovery`` (the
request loop and the recovery of lost sessions and client IDs, the SEQ4_STATUS flags acted on) and
``lease`` (renewal, the flags watched); here it is started and shut down.
"""

from __future__ import annotations

import logging

import trio

from .._errors import NFS4Error, ProtocolError
from .._proto.nfs4.types import DESTROY_CLIENTID4args, DESTROY_SESSION4args
from .._rpc.auth import AUTH_NONE_CRED, Credential
from .._rpc.errors import RpcReplyError
from .._rpc.gss_auth import GssCredential
from .._transport.base import ProtocolViolation, TransportError
from .create_session import (
    CB_PROGRAM,
    START_ATTEMPTS,
    ReclaimHook,
    ServerIdentity,
    SessionOptions,
    default_owner_id,
)
from .errors import ServerUnreachable
from .io_window import io_window
from .lease import Lease
from .path_set import Path

log = logging.getLogger(__name__)


class ClientID(Lease):
    """An NFSv4.1 client ID with its current session, over a set of paths."""

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
                        await self.establish(reclaim=False)
                        break
                    except (ProtocolError, ProtocolViolation) as e:
                        if attempt == START_ATTEMPTS:
                            raise
                        log.info("%s: %s; connecting again", path.address, e)
                        await self.paths.disconnect(path)
        except trio.TooSlowError as e:
            raise ServerUnreachable(f"{path.address}: no NFSv4.1 answer within {timeout:g} s") from e
        self.nursery.start_soon(self.paths.keep_alive, path)
        self.nursery.start_soon(self.renew_lease)
        self.nursery.start_soon(self.watch_status_flags)


    def io_window(self, io_size: int) -> int:
        """READs or WRITEs of ``io_size`` bytes one transfer keeps in flight now: enough to fill
        every live path, within the sessions' slots (:func:`.io_window.io_window`)."""
        sessions = [self.session, *self.trunked_sessions.values()]
        slots = sum(s.table.limit for s in sessions if s is not None and s.dead is None)
        return io_window(self.paths.live(), io_size, slots or self.options.max_requests, trio.current_time())


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


__all__ = ["AUTH_NONE_CRED", "CB_PROGRAM", "ClientID", "ReclaimHook", "ServerIdentity", "SessionOptions",
           "default_owner_id"]
