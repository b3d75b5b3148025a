"""Which live path a request goes on: the one expected to complete it first.

Each path keeps a :class:`Delivery`: the bytes its replies delivered, the rate those bytes came at
(the best delivery-rate sample of the last ``RATE_WINDOW`` seconds, as BBR measures it: the payload
answered on the path between a call's send and its reply, over the time since the last delivery
before the send, or since the send when nothing was in flight; counted from the send alone, a small
call sent just before a large reply arrived took that reply's bytes for its own short life, and a
20 MB/s link looked like 600) and its base round-trip
time (the smallest of the last ``RTT_WINDOW`` seconds, of calls without bulk data, so that neither
the queue a link builds up nor a call's own bytes are counted twice). Until a path has delivered anything its rate is a guess in proportion to its
FSLI4BX_READORDER, and so is it when the path has nothing in flight and its newest sample is older
than ``STALE_AFTER``: a path judged slow by an old sample would otherwise never be chosen again, and
never measured again, however fast its link has become since.

A sample is the path's capacity only when the path was busy over it: the call went out with
others in flight there. A call sent on an idle path (BBR's "application-limited" sample) measures
how little it was given, or how long it waited at a server busy with the other paths' queues, not
its link: such a sample may raise the estimate, never lower it. A path with nothing in flight and no
busy sample of the last ``RATE_WINDOW`` is taken at no less than ``FLOOR_SHARE`` of what the others
deliver (weighed by read order as the guess is), so that while the others have a queue it is tried
again at once, one call at a time, until a busy sample says what it carries. Without these, a path
whose one small or starved call had measured a few kB/s carried nothing for seconds while another
had 40 READs queued, and a 4-path read fell from 160 to 49 MB/s.

A request of ``payload`` bytes on a path is expected to complete after

    base RTT + (bytes already in flight there + CALL_BYTES per call in flight + payload) / rate

and :func:`choose_path` takes the path where that is least. A large read or write cut into rsize or
wsize calls is so spread over the paths in proportion to what each delivers: a faster path drains
its queue sooner and is chosen again sooner; no path waits for another's reply. A small call
(GETATTR, LOOKUP, OPEN) goes where the queue in front of it is shortest, counted in time. A path
whose rate changes, or that goes down, is seen at the next samples, within ``RATE_WINDOW``.

Nothing here does I/O: the caller passes times (any monotonic clock, seconds) and the paths' figures.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

__all__ = [
    "CALL_BYTES",
    "FLOOR_SHARE",
    "RATE_WINDOW",
    "SEED_RATE",
    "STALE_AFTER",
    "Candidate",
    "Delivery",
    "Mark",
    "choose_path",
    "expected_completion",
    "seed_rates",
]

RATE_WINDOW = 1.0  # seconds a delivery-rate sample counts
STALE_AFTER = 2 * RATE_WINDOW  # seconds after which an idle path's newest sample is guessed anew
RTT_WINDOW = 10.0  # seconds a base round-trip time counts
SEED_RATE = 50e6  # bytes/s taken for an unmeasured path of the highest read order
CALL_BYTES = 4096  # what a call in flight costs a path beyond its payload (headers, the server's work)
MIN_ELAPSED = 1e-6  # seconds: a sample over less is not taken
FLOOR_SHARE = 0.5  # of the others' rate: the least an idle path without a busy sample is taken for


Mark = tuple[int, float]  # (bytes delivered, when the last of them was) as a call is sent


@dataclass(slots=True)
class Delivery:
    """What one path has delivered, and how fast."""

    delivered: int = 0  # payload bytes of the calls answered on this path
    base_rtt: float = 0.0  # seconds; 0 until a call was answered
    _delivered_at: float = -math.inf  # when the last call was answered (or the first sent)
    _base_rtt_at: float = -math.inf
    _busy_sample_at: float = -math.inf  # when the newest sample over a busy interval was taken
    _samples: deque[tuple[float, float]] = field(default_factory=deque)  # (time, bytes/s), rates falling

    def mark(self, now: float, busy: bool) -> Mark:
        """What to keep with a call as it is sent at ``now``; ``busy``: other calls are in flight on
        the path (else the time its sample counts starts at this send, as BBR's does)."""
        if not busy or self._delivered_at == -math.inf:
            self._delivered_at = now
        return self.delivered, self._delivered_at

    def answered(self, mark: Mark, payload: int, sent_at: float, now: float, *, timed: bool = True) -> None:
        """A call sent at ``sent_at`` with ``mark`` (:meth:`mark`) was answered at ``now``;
        ``payload`` bytes of data went with it (a WRITE's data, a READ's reply). ``timed``: its time
        is a round trip, not work the server did on the storage (a COMMIT's, whose time says nothing
        of the path and, taken as its round trip, kept a path unused for RTT_WINDOW)."""
        delivered_then, since = mark
        self.delivered += payload
        if payload > 0:
            self._delivered_at = now
        elapsed = now - sent_at
        if elapsed < MIN_ELAPSED:
            return
        moved = self.delivered - delivered_then
        if moved > 0:
            rate = moved / (now - min(since, sent_at))
            if since < sent_at:  # others were in flight at the send: the path was busy throughout
                self._busy_sample_at = now
                self._add_sample(now, rate)
            elif not self._samples or rate > self._samples[0][1]:
                self._add_sample(now, rate)  # sent on an idle path: it only raises the estimate
        # the round trip is measured on calls without bulk data (SEQUENCE, GETATTR, COMMIT ...):
        # a READ's or WRITE's time is mostly its bytes on the link, which the rate counts already
        if timed and payload < CALL_BYTES and (
            elapsed <= self.base_rtt or now - self._base_rtt_at > RTT_WINDOW or self._base_rtt_at == -math.inf
        ):
            self.base_rtt, self._base_rtt_at = elapsed, now

    def _add_sample(self, now: float, rate: float) -> None:
        # a monotonic deque of falling rates: the front is the window's maximum
        samples = self._samples
        while samples and samples[-1][1] <= rate:
            samples.pop()
        samples.append((now, rate))
        self._expire(now)

    def _expire(self, now: float) -> None:
        # the newest sample stays past the window: a slow path answers seldom, and what it
        # delivered last is still the best guess of what it delivers
        samples = self._samples
        while len(samples) > 1 and now - samples[0][0] > RATE_WINDOW:
            samples.popleft()

    def rate(self, now: float) -> float | None:
        """Bytes per second the path delivered: the best sample of the last RATE_WINDOW seconds,
        else the last one (None: nothing measured since the connection was made)."""
        self._expire(now)
        return self._samples[0][1] if self._samples else None

    def stale(self, now: float) -> bool:
        """Whether the newest sample is older than STALE_AFTER (False: none, or a recent one)."""
        return bool(self._samples) and now - self._samples[-1][0] > STALE_AFTER

    def proven(self, now: float) -> bool:
        """Whether a sample over a busy interval was taken in the last RATE_WINDOW seconds."""
        return now - self._busy_sample_at <= RATE_WINDOW

    @property
    def measured(self) -> float | None:
        """The rate as last worked out (for reports: no clock needed)."""
        return self._samples[0][1] if self._samples else None

    def lost(self) -> None:
        """The path's connection ended: what was measured on it says nothing of the next one."""
        self._samples.clear()
        self.base_rtt, self._base_rtt_at = 0.0, -math.inf
        self._delivered_at = self._busy_sample_at = -math.inf


class Candidate(Protocol):
    """What :func:`choose_path` reads of a path."""

    @property
    def delivery(self) -> Delivery: ...

    @property
    def bytes_in_flight(self) -> int: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def order(self) -> int: ...


def expected_completion(path: Candidate, payload: int, rate: float) -> float:
    """Seconds until a request of ``payload`` bytes sent now on ``path`` is expected to be answered,
    the path delivering ``rate`` bytes per second."""
    queued = path.bytes_in_flight + CALL_BYTES * path.in_flight + payload
    return path.delivery.base_rtt + queued / rate


def seed_rates(paths: Sequence[Candidate], now: float) -> list[float]:
    """The rate taken for each path: its measured one, or a guess in proportion to its read order
    against the best measured rate of the others (SEED_RATE while none is measured) where nothing
    is measured or an idle path's measure is stale; an idle path without a busy sample of the last
    RATE_WINDOW is taken for at least FLOOR_SHARE of that guess."""
    measured = [
        None if p.in_flight == 0 and p.delivery.stale(now) else p.delivery.rate(now) for p in paths
    ]
    top = max((max(p.order, 0) for p in paths), default=0)
    rates: list[float] = []
    for i, (p, r) in enumerate(zip(paths, measured, strict=True)):
        others = [m for j, m in enumerate(measured) if j != i and m is not None]
        reference = max(others, default=r if r is not None else SEED_RATE)
        guess = reference * (1 + max(p.order, 0)) / (1 + top)
        if r is None:
            rates.append(guess)
        elif p.in_flight == 0 and not p.delivery.proven(now):
            rates.append(max(r, FLOOR_SHARE * guess))
        else:
            rates.append(r)
    return rates


P = TypeVar("P", bound=Candidate)


def choose_path(
    paths: Sequence[P], payload: int, now: float, avoid: P | None = None
) -> P | None:
    """The path of ``paths`` where a request of ``payload`` bytes is expected to complete first;
    ``avoid`` (the path a request just failed on) only when there is no other."""
    if len(paths) <= 1:
        return paths[0] if paths else None  # (nothing to weigh: one path is taken even when avoided)
    best: P | None = None
    best_time = math.inf
    for path, rate in zip(paths, seed_rates(paths, now), strict=True):
        if path is avoid and len(paths) > 1:
            continue
        t = expected_completion(path, payload, rate)
        if t < best_time:
            best, best_time = path, t
    return best
