"""Trunking verification (RFC 8881 sections 2.10.5 and 2.10.5.1): is a new address the same server?

The decision (:func:`decide`) is sans I/O: it compares what EXCHANGE_ID with our client owner said
on the new address with what it said on the first one.

- same ``so_major_id``, ``so_minor_id``, ``server_scope`` and client ID: **session trunking**;
  the connection is bound to our session with BIND_CONN_TO_SESSION;
- same major id and scope, another minor id, same client ID: **client ID trunking**: another
  instance of the server, where our client ID is valid but our session is not. The address gets a
  session of its own on our client ID (CREATE_SESSION there, :meth:`ClientID.open_trunked_session`),
  one per minor id, shared by every address with that minor id (``Path.group``); requests are
  spread over the paths of every session (see :mod:`pynfsrdma._session.client_id`). With another
  client ID as well, the address is not used (the stray client ID is destroyed);
- same major, minor and scope but a *new* client ID: NFS-Ganesha answers so through a second
  address of itself (see the platform notes). The address is accepted only if BIND_CONN_TO_SESSION
  of our existing session succeeds on it, which only the same server can do; the stray client ID
  is then destroyed (DESTROY_CLIENTID);
- anything else: another server. The address is not used and a warning names it, so that a
  replaced address in a multipath list cannot capture our traffic; a client ID it gave us is
  destroyed there.

:class:`Verifier` is the I/O shell: it runs as the :class:`~pynfsrdma._session.path_set.PathSet`'s
``on_connect`` hook, so every (re)connection of a path is verified or (re)bound before it carries
a request.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.types import BIND_CONN_TO_SESSION4args, DESTROY_CLIENTID4args, EXCHANGE_ID4resok
from .._rpc.errors import RpcReplyError
from .._session.client_id import ClientID, ServerIdentity
from .._session.errors import NotNFSv41Server
from .._session.path_set import Path, PathRejected
from .._transport.base import TransportError

__all__ = ["Observed", "Verdict", "Verifier", "decide", "observed_from"]

log = logging.getLogger(__name__)


class Verdict(enum.Enum):
    SESSION_TRUNKING = "session trunking"
    CLIENT_ID_TRUNKING = "client ID trunking"
    SAME_SERVER_NEW_CLIENTID = "same server owner, new client ID (bind to prove it)"
    OTHER_SERVER = "another server"


@dataclass(frozen=True, slots=True)
class Observed:
    """What EXCHANGE_ID answered on one address."""

    clientid: int
    major: bytes
    minor: int
    scope: bytes


def observed_from(ok: EXCHANGE_ID4resok) -> Observed:
    so = ok.eir_server_owner
    return Observed(ok.eir_clientid, bytes(so.so_major_id), so.so_minor_id, bytes(ok.eir_server_scope))


def decide(ours: ServerIdentity, new: Observed) -> Verdict:
    """How an address whose EXCHANGE_ID said ``new`` relates to the server we have a session with."""
    if new.major != ours.server_owner_major or new.scope != ours.server_scope:
        return Verdict.OTHER_SERVER
    if new.minor != ours.server_owner_minor:
        return Verdict.CLIENT_ID_TRUNKING
    if new.clientid != ours.clientid:
        return Verdict.SAME_SERVER_NEW_CLIENTID
    return Verdict.SESSION_TRUNKING


@dataclass
class VerificationRecord:
    address: str
    verdict: Verdict | None = None
    rtt: float = 0.0
    message: str = ""


class Verifier:
    """Verifies new paths and (re)binds every connection of a verified one to the session."""

    def __init__(self, client: ClientID, timeout: float = 5.0) -> None:
        self.client = client
        self.timeout = timeout
        self.verified: set[int] = set()  # id() of paths proven to lead to our server
        self.records: dict[str, VerificationRecord] = {}
        self.stray_clientids_destroyed = 0
        self.trunked_sessions_opened = 0

    async def on_connect(self, path: Path) -> None:
        """PathSet hook: a new connection of ``path``. Raises PathRejected for another server."""
        client = self.client
        if client.session is None:
            return  # the first path: ClientID.start sets the session up on it
        session = client.session_of(path.group)
        if session is not None and path.bound_session == session.sessionid:
            return
        if id(path) not in self.verified:
            await self.verify(path)
            return
        if session is None:  # a trunked group whose session was lost with no path to replace it on
            await self._open_trunked(path, path.group)
            return
        await self.bind(path)

    async def verify(self, path: Path) -> Verdict:
        client = self.client
        ours = client.identity
        session = client.session
        assert ours is not None and session is not None
        rpc = path.rpc
        assert rpc is not None
        rec = self.records.setdefault(path.address, VerificationRecord(path.address))
        try:
            with trio.fail_after(self.timeout):
                start = trio.current_time()
                await rpc.call(c.NFSPROC4_NULL, client.machine_cred, timeout=self.timeout)  # reachability, RTT
                rec.rtt = trio.current_time() - start  # (not the path's RTT: a cold first call)
                ok = await client.exchange_id(path)
        except trio.TooSlowError as e:
            raise TransportError(
                f"no answer to NULL and EXCHANGE_ID within {self.timeout:g} s", path.address
            ) from e
        except (RpcReplyError, NotNFSv41Server) as e:
            rec.message = f"not an NFSv4.1 server: {e}"
            log.warning("trunking candidate %s rejected: %s", path.address, rec.message)
            raise PathRejected(rec.message, path.address) from e
        new = observed_from(ok)
        verdict = decide(ours, new)
        rec.verdict = verdict
        if verdict is Verdict.SESSION_TRUNKING:
            await self.bind(path)
        elif verdict is Verdict.SAME_SERVER_NEW_CLIENTID:
            try:
                await self.bind(path)
            except (NFS4Error, PathRejected) as e:
                await self._destroy_clientid(path, new.clientid)
                rec.message = (
                    f"EXCHANGE_ID gave another client ID and our session cannot be bound there ({e})"
                )
                log.warning("%s is not used: %s", path.address, rec.message)
                raise PathRejected(rec.message, path.address) from e
            await self._destroy_clientid(path, new.clientid)
        elif verdict is Verdict.CLIENT_ID_TRUNKING:
            if new.clientid != ours.clientid:
                await self._destroy_clientid(path, new.clientid)
                rec.message = (
                    f"the server owner's minor id differs ({new.minor} != {ours.server_owner_minor}) "
                    "and EXCHANGE_ID gave another client ID: not used"
                )
                log.warning("%s is not used: %s", path.address, rec.message)
                raise PathRejected(rec.message, path.address)
            group = client.group_for_minor(new.minor)
            path.group = group
            if client.session_of(group) is None:
                await self._open_trunked(path, group, ok.eir_sequenceid)
            else:
                await self.bind(path)
        else:
            if new.clientid != ours.clientid:
                await self._destroy_clientid(path, new.clientid)
            rec.message = (
                f"it leads to another server (server owner {new.major!r}/{new.minor}, scope {new.scope!r}; "
                f"ours is {ours.server_owner_major!r}/{ours.server_owner_minor}, scope {ours.server_scope!r})"
            )
            log.warning("trunking candidate %s rejected: %s", path.address, rec.message)
            raise PathRejected(rec.message, path.address)
        self.verified.add(id(path))
        rec.message = "bound to the session" if path.group == 0 else f"bound to trunked session {path.group}"
        log.info("path %s verified (%s), rtt %.3f ms", path.address, verdict.value, rec.rtt * 1000)
        return verdict

    async def bind(self, path: Path) -> None:
        """BIND_CONN_TO_SESSION of our session on ``path``'s connection (fore channel, and back
        channel if the server wants it there)."""
        client = self.client
        session = client.session_of(path.group)
        assert session is not None
        res = await client.raw_compound(
            path,
            [BIND_CONN_TO_SESSION4args(session.sessionid, c.CDFC4_FORE_OR_BOTH, False)],
            timeout=self.timeout,
        )
        r = res.resarray[0] if res.resarray else None
        st = r.status if r is not None else res.status
        if st == c.NFS4_OK:
            path.bound_session = session.sessionid
            return
        if (
            st in (c.NFS4ERR_BADSESSION, c.NFS4ERR_DEADSESSION, c.NFS4ERR_STALE_CLIENTID)
            and id(path) in self.verified
        ):
            session.kill(st)  # our session is gone: the next request recovers it
            return
        raise NFS4Error(st, c.OP_BIND_CONN_TO_SESSION)

    async def _open_trunked(self, path: Path, group: int, sequenceid: int | None = None) -> None:
        try:
            await self.client.open_trunked_session(path, group, sequenceid)
        except NFS4Error as e:
            if e.status in (c.NFS4ERR_STALE_CLIENTID, c.NFS4ERR_EXPIRED) and self.client.session is not None:
                self.client.session.kill(e.status)  # our client ID is gone: the next request recovers
                raise TransportError(
                    f"client ID lost while opening a trunked session: {e}", path.address
                ) from e
            raise PathRejected(f"CREATE_SESSION on our client ID failed there: {e}", path.address) from e
        self.trunked_sessions_opened += 1

    async def _destroy_clientid(self, path: Path, clientid: int) -> None:
        try:
            res = await self.client.raw_compound(
                path, [DESTROY_CLIENTID4args(clientid)], timeout=self.timeout
            )
            st = res.resarray[0].status if res.resarray else res.status
            if st == c.NFS4_OK:
                self.stray_clientids_destroyed += 1
            else:
                log.info("%s: DESTROY_CLIENTID of the stray client ID: %s", path.address, c.nfsstat4(st).name)
        except (TransportError, OSError, RpcReplyError) as e:
            log.info("%s: could not destroy the stray client ID: %s", path.address, e)
