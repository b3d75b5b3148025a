"""The RPC-over-RDMA credit gate of a requester (RFC 8166 section 3.3.1), sans-I/O.

Each call in flight uses one of the responder's receive buffers, so a requester never has more
calls outstanding than the credit limit the responder granted. The limit starts at 1 (nothing has
been granted before the first reply) and each reply's ``rdma_credit`` replaces it. A grant of 0
would leave no way to send anything again; it is taken as 1, as Linux does. A grant larger than
what we asked for is capped at what we asked for (``requested``, the receive buffers we keep
posted for replies).

The gate holds opaque tokens: callers that wait for a credit queue in order and are admitted
first-come, first-served. A credit is given back when the call's reply arrives (not when the
call is abandoned: the responder still uses its buffer until it replies) or when the call never
reached the wire.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class CreditGate(Generic[T]):
    __slots__ = ("_waiting", "granted", "in_flight", "peak_in_flight", "requested")

    def __init__(self, requested: int) -> None:
        if requested < 1:
            raise ValueError("ask for at least one credit")
        self.requested = requested
        self.granted = 1
        self.in_flight = 0
        self.peak_in_flight = 0  # the most calls ever in flight at once (never above a grant)
        self._waiting: deque[T] = deque()

    def rdma_credit(self) -> int:
        """The value to put in each call's ``rdma_credit``: what we ask for."""
        return self.requested

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def acquire(self, token: T) -> bool:
        """True: the call may go now (it holds a credit). False: it is queued behind others."""
        if not self._waiting and self.in_flight < self.granted:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            return True
        self._waiting.append(token)
        return False

    def cancel(self, token: T) -> bool:
        """Take a queued call out of the queue (it gave up before getting a credit)."""
        try:
            self._waiting.remove(token)
        except ValueError:
            return False
        return True

    def release(self) -> list[T]:
        """A call's credit comes back without a new grant (it never reached the wire)."""
        if self.in_flight <= 0:
            raise RuntimeError("credit released that was never acquired")
        self.in_flight -= 1
        return self._admit()

    def reply_received(self, rdma_credit: int) -> list[T]:
        """A reply came: its call's credit comes back and the limit becomes the new grant.

        Returns the queued tokens admitted now, in order; each of them holds a credit.
        """
        if self.in_flight <= 0:
            raise RuntimeError("reply received with no call in flight")
        self.in_flight -= 1
        return self.update_grant(rdma_credit)

    def update_grant(self, rdma_credit: int) -> list[T]:
        self.granted = min(max(rdma_credit, 1), self.requested)
        return self._admit()

    def reset(self) -> list[T]:
        """A new connection: nothing in flight, limit back to 1. Returns the tokens admitted."""
        self.in_flight = 0
        self.granted = 1
        return self._admit()

    def drain(self) -> list[T]:
        """The connection is gone: every queued call, to be woken and failed (none is admitted)."""
        out = list(self._waiting)
        self._waiting.clear()
        return out

    def _admit(self) -> list[T]:
        out = []
        while self._waiting and self.in_flight < self.granted:
            self.in_flight += 1
            out.append(self._waiting.popleft())
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        return out


__all__ = ["CreditGate"]
