"""Keeping the lease (RFC 8881 section 8.3): a lone SEQUENCE when no other request renewed it for a
third of the lease time, and the SEQ4_STATUS flags the replies carry watched and acted on."""

from __future__ import annotations

import logging

import trio

from .._errors import NFS4Error
from .._transport.base import NO_HINTS, TransportError
from .client_state import ClientState
from .recovery import Recovery

log = logging.getLogger(__name__)

RENEW_MAX = 60.0  # seconds an idle lease goes unrenewed at most, whatever lease time the server said


def renew_interval(lease_time: float) -> float:
    """Seconds between renewals of an idle lease: a third of the server's lease time, but at least a
    second and at most RENEW_MAX, so that a lease time from a reply (0, or 2**32 - 1 seconds: 136
    years) neither spins nor sizes a sleep. Renewing more often than the lease needs costs a SEQUENCE."""
    return min(RENEW_MAX, max(1.0, lease_time / 3))


class LeaseKeeper:
    """The lease of ``state``'s client ID renewed and the status flags watched, as long as the client
    lives: requests and the flags' actions go through ``recovery``."""

    def __init__(self, state: ClientState, recovery: Recovery) -> None:
        self.state = state
        self.recovery = recovery

    async def renew_lease(self) -> None:
        """Keep the lease alive with a lone SEQUENCE when no other request renewed it."""
        while not self.state.closed:
            s = self.state.session
            interval = renew_interval(self.state.lease_time)
            if s is None:
                await trio.sleep(interval)
                continue
            idle = trio.current_time() - s.last_renewal
            if idle < interval:
                # a second at most: the lease time learned meanwhile (the server's, after start) counts
                await trio.sleep(min(interval - idle, 1.0))
                continue
            try:
                await self.recovery.compound([], self.state.machine_cred, NO_HINTS)
            except (OSError, TransportError, NFS4Error) as e:
                log.info("lease renewal failed: %s", e)
                await trio.sleep(1.0)

    async def watch_status_flags(self) -> None:
        """Act on the SEQ4_STATUS flags SEQUENCE replies carry (RFC 8881 section 18.46.3)."""
        while not self.state.closed:
            s = self.state.session
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
                    await self.recovery.act_on_status_flags(flags)
                except (OSError, TransportError, NFS4Error) as e:
                    log.warning("acting on SEQUENCE status flags %#x failed: %s", flags, e)

