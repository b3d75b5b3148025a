"""Requests in the client ID's sessions, and the state's recovery when a session or the client ID is
lost (RFC 8881 sections 2.10.13, 8.4): ``await client.compound(ops, cred)`` runs a COMPOUND and acts
on what :mod:`.sequence` decides (send again after a pause, a new session, a new client ID whose
reclaim hooks reclaim the state in the grace period); recovery is single-flight; a lost trunked
session is replaced on a path of its group. The SEQ4_STATUS flags SEQUENCE carries are acted on
here too (reclaim, revoked state, the back channel)."""

from __future__ import annotations

import errno
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import COMPOUND4res
from .._rpc.auth import Credential
from .._transport.base import NO_HINTS, ReplyHints, TransportError
from .create_session import Establishment, status_name
from .errors import SessionError
from .sequence import CLIENT_LOST, Act, Attempts, on_compound
from .session import Check, Session, SessionLost

if TYPE_CHECKING:
    from .client_id import ClientID

log = logging.getLogger(__name__)


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


class Recovery(Establishment):
    """COMPOUNDs in the current sessions, and their recovery."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recovery = _Recovery()

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
        deadline: float | None = None  # a soft request's: from its first send, DELAY and GRACE pauses counted
        while True:
            if self.closed:
                raise SessionError("the client is shut down", errno.ESHUTDOWN)
            if not _recovering and self._recovery.lock.locked():
                async with self._recovery.lock:
                    pass  # wait for the recovery in progress to finish
            session = self._session_for(payload)
            if session is None:
                raise SessionError("no session")
            generation = self._recovery.generation
            first = deadline is None
            if first and not session.policy.hard:  # (the first send's own, which the session takes after a slot)
                deadline = session.policy.deadline(trio.current_time())
            elif deadline is not None and trio.current_time() >= deadline:
                raise SessionError(f"no answer within {session.policy.budget:g} s (soft: the session was being "
                                   "recovered)", errno.ETIMEDOUT)
            try:
                res = await session.compound(ops, cred, hints, payload=payload, check=check,
                                             deadline=None if first else deadline)
            except SessionLost as e:
                lost += 1
                if _recovering or lost > 3:
                    raise SessionError(f"the session was lost and could not be recovered ({e})") from e
                if session.group != 0 and e.status not in CLIENT_LOST:
                    await self._recover_trunked(session)
                else:
                    await self._recover(generation, e.status)
                continue
            decision = on_compound(res.status, recovering=_recovering, attempts=attempts,
                                   time_left=None if deadline is None else deadline - trio.current_time())
            if decision.act is Act.RESEND:
                await trio.sleep(decision.wait)
                continue
            if decision.act is Act.NEW_CLIENT:
                await self._recover(generation, res.status)
                continue
            return res


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
            log.warning("recovering trunked session group %d from %s", lost.group, status_name(lost.dead or 0))
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
                raise SessionError(f"the session was lost while shutting down ({status_name(status)})", errno.ESHUTDOWN)
            self.recoveries += 1
            log.warning("recovering from %s", status_name(status))
            path = await self.live_path()
            if status in CLIENT_LOST:
                await self.establish(reclaim=True)
            else:
                try:
                    await self.create_session(path)
                except NFS4Error as e:
                    if e.status not in CLIENT_LOST:
                        raise
                    await self.establish(reclaim=True)
            self._recovery.generation += 1

    async def act_on_status_flags(self, flags: int) -> None:
        self.status_flags_seen |= flags
        if flags & c.SEQ4_STATUS_RESTART_RECLAIM_NEEDED:
            log.warning("the server asks us to reclaim our state")
            await self._recover(self._recovery.generation, c.NFS4ERR_STALE_CLIENTID)
        if flags & REVOKED_FLAGS:
            log.warning("the server revoked some of our state (flags %#x)", flags & REVOKED_FLAGS)
            for hook in self.state_revoked_hooks:
                await hook(cast("ClientID", self))
        if flags & (c.SEQ4_STATUS_CB_PATH_DOWN | c.SEQ4_STATUS_CB_PATH_DOWN_SESSION):
            await self.bind_backchannel()
        if flags & c.SEQ4_STATUS_LEASE_MOVED:
            log.warning("the server says our lease moved (migration is not supported)")

