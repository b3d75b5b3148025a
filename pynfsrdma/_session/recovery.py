"""Requests in the client ID's sessions, and the state's recovery when a session or the client ID is
lost (RFC 8881 sections 2.10.13, 8.4): ``await recovery.compound(ops, cred, hints)`` runs a COMPOUND and acts
on what :mod:`.sequence` decides (send again after a pause, a new session, a new client ID whose
reclaim hooks reclaim the state in the grace period); recovery is single-flight; a lost trunked
session is replaced on a path of its group. The SEQ4_STATUS flags SEQUENCE carries are acted on
here too, as :func:`.sequence.flag_actions` says (reclaim, revoked state, the back channel)."""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import COMPOUND4res
from .._proto.nfs4.compound_shapes import CompoundShape
from .._proto.nfs4.types import RECLAIM_COMPLETE4args
from .._rpc.auth import Credential
from .._transport.base import NO_HINTS, ReplyHints, TransportError
from .client_state import ClientState
from .create_session import Establishment, status_name
from .errors import SessionError
from .sequence import CLIENT_LOST, Act, Finished, FlagAction, Request, SessionGone, finishes, flag_actions
from .session import Check, Prepared, Session, SessionLost

log = logging.getLogger(__name__)

Hooks = Callable[[], Awaitable[None]]  # the owner's hooks run (reclaim, revoked state)


class CompoundCall(Protocol):
    """What runs a COMPOUND in the client ID's sessions (:meth:`Recovery.compound`)."""

    def __call__(self, ops: Sequence[Any], cred: Credential, hints: ReplyHints = NO_HINTS, *, payload: int = 0,
                 check: Check | None = None, _recovering: bool = False, shape: CompoundShape | None = None,
                 prepared: Prepared | None = None) -> Awaitable[COMPOUND4res]: ...


class _SingleFlight:
    """A lock whose holding is an attribute (``held``), looked at by every request without a call: held
    from its taking until its release finds no task waiting for it (trio hands it to the first one)."""

    __slots__ = ("_lock", "held")

    def __init__(self) -> None:
        self._lock = trio.Lock()
        self.held = False

    async def __aenter__(self) -> None:
        await self._lock.acquire()
        self.held = True

    async def __aexit__(self, *_: object) -> None:
        self._lock.release()
        self.held = self._lock.locked()  # (released to a task waiting for it: held for that task)


class Recovery:
    """COMPOUNDs in the current sessions of ``state``, and their recovery: new sessions and client
    IDs made by ``establishment``; ``reclaim`` runs the reclaim hooks (in the grace period of a new
    client ID), ``revoked`` the hooks of revoked state."""

    def __init__(self, state: ClientState, establishment: Establishment, reclaim: Hooks, revoked: Hooks) -> None:
        self.state = state
        self.establishment = establishment
        self.reclaim = reclaim
        self.revoked = revoked
        self.generation = 0  # bumped each time a session or client ID is replaced
        self.lock = _SingleFlight()  # recovery is single-flight

    async def new_client_id(self, *, reclaim: bool) -> None:
        """EXCHANGE_ID and CREATE_SESSION on a live path; with ``reclaim``, the reclaim hooks run in
        the grace period; then RECLAIM_COMPLETE."""
        await self.establishment.establish()
        if reclaim:
            self.state.in_grace = True
            await self.reclaim()
        res = await self.compound([RECLAIM_COMPLETE4args(False)], self.state.machine_cred, NO_HINTS, _recovering=True)
        st = res.resarray[-1].status if res.resarray else res.status
        if st not in (c.NFS4_OK, c.NFS4ERR_COMPLETE_ALREADY):
            raise NFS4Error(st, c.OP_RECLAIM_COMPLETE)
        self.state.in_grace = False

    async def compound(self, ops: Sequence[Any], cred: Credential, hints: ReplyHints = NO_HINTS, *, payload: int = 0,
                       check: Check | None = None, _recovering: bool = False, shape: CompoundShape | None = None,
                       prepared: Prepared | None = None) -> COMPOUND4res:
        """Run ``ops`` in the session; retries DELAY/GRACE and recovers lost sessions. Its callers (the
        client ID's ``compound``, which is this method itself, and the lease keeper).

        The reply's ``resarray`` holds the results of ``ops`` (SEQUENCE's is removed); the caller
        checks the statuses of its operations. ``check``, ``shape``, ``prepared``: see :meth:`Session.compound`.
        """
        request: Request | None = None  # (its tries, one after another, each in a session: made at the first need)
        deadline: float | None = None  # a soft request's: from its first send, DELAY and GRACE pauses counted
        while True:
            if self.state.closed:
                raise SessionError("the client is shut down", errno.ESHUTDOWN)
            if not _recovering and self.lock.held:
                async with self.lock:
                    pass  # wait for the recovery in progress to finish
            # (the one session, as most mounts have it, or the trunked session of the path chosen)
            session = self._session_for(payload) if self.state.trunked_sessions else self.state.session
            if session is None:
                raise SessionError("no session")
            generation = self.generation
            first = deadline is None
            if first and not session.policy.hard:  # (the first send's own, which the session takes after a slot)
                deadline = session.policy.deadline(session.now())
            elif deadline is not None and session.now() >= deadline:
                raise SessionError(f"no answer within {session.policy.budget:g} s (soft: the session was being "
                                   "recovered)", errno.ETIMEDOUT)
            try:
                res = await session.compound(ops, cred, hints, payload=payload, check=check,
                                             deadline=None if first else deadline, shape=shape, prepared=prepared)
            except SessionLost as e:
                if request is None:
                    request = Request(recovering=_recovering)
                lost = request.feed(SessionGone(e.status, trunked=session.group != 0))
                if lost.act is Act.FAIL:
                    raise SessionError(f"the session was lost and could not be recovered ({e})") from e
                if lost.act is Act.NEW_TRUNKED_SESSION:
                    await self._recover_trunked(session)
                else:
                    await self._recover(generation, e.status)
                continue
            if finishes(res.status):  # (the machine's DONE, whatever came before)
                return res
            if request is None:
                request = Request(recovering=_recovering)
            decision = request.feed(Finished(res.status,
                                             time_left=None if deadline is None else deadline - session.now()))
            if decision.act is Act.RESEND:
                await trio.sleep(decision.wait)
                continue
            if decision.act is Act.NEW_CLIENT:
                await self._recover(generation, res.status)
                continue
            return res


    def _session_for(self, payload: int) -> Session | None:
        """The session of the path a request of ``payload`` bytes would best go over."""
        if not self.state.trunked_sessions:
            return self.state.session
        path = self.state.paths.choose(payload)
        s = self.state.trunked_sessions.get(path.group) if path is not None and path.group else None
        return s if s is not None and s.dead is None else self.state.session

    async def _recover_trunked(self, lost: Session) -> None:
        """Replace a lost trunked session on a live path of its group (or give the group up until
        one of its paths is bound again)."""
        async with self.lock:
            if self.state.trunked_sessions.get(lost.group) is not lost:
                return  # replaced already
            self.state.recoveries += 1
            log.warning("recovering trunked session group %d from %s", lost.group, status_name(lost.dead or 0))
            path = self.state.paths.choose(group=lost.group)
            try:
                if path is None:
                    raise TransportError("no live path", f"group {lost.group}")
                await self.establishment.open_trunked_session(path, lost.group)
            except (OSError, TransportError, NFS4Error) as e:
                log.info("trunked session of group %d not replaced now: %s", lost.group, e)
                del self.state.trunked_sessions[lost.group]

    async def _recover(self, generation: int, status: int) -> None:
        """Replace the session (or the client ID and session) once for all who saw it fail."""
        async with self.lock:
            if self.generation != generation:
                return  # somebody else recovered already
            if self.state.stopping:
                # the file system is unmounted: what was lost needs no new session, and a new
                # client ID would take the place of a client made since under our owner (a mount
                # made again on the same mount point) and take its state away
                raise SessionError(f"the session was lost while shutting down ({status_name(status)})", errno.ESHUTDOWN)
            self.state.recoveries += 1
            log.warning("recovering from %s", status_name(status))
            path = await self.state.live_path()
            if status in CLIENT_LOST:
                await self.new_client_id(reclaim=True)
            else:
                try:
                    await self.establishment.create_session(path)
                except NFS4Error as e:
                    if e.status not in CLIENT_LOST:
                        raise
                    await self.new_client_id(reclaim=True)
            self.generation += 1

    async def act_on_status_flags(self, flags: int) -> None:
        """Do what SEQUENCE's sr_status_flags ``flags`` ask (:func:`.sequence.flag_actions`)."""
        self.state.status_flags_seen |= flags
        for action in flag_actions(flags):
            if action is FlagAction.RECLAIM:
                log.warning("the server asks us to reclaim our state")
                await self._recover(self.generation, c.NFS4ERR_STALE_CLIENTID)
            elif action is FlagAction.STATE_REVOKED:
                log.warning("the server revoked some of our state (flags %#x)", flags)
                await self.revoked()
            elif action is FlagAction.BIND_BACKCHANNEL:
                await self.establishment.bind_backchannel()
            elif action is FlagAction.LEASE_MOVED:
                log.warning("the server says our lease moved (migration is not supported)")
