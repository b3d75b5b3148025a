"""How many READs or WRITEs of one transfer to keep in flight: enough to fill every live path.

A path carries without a gap when, as one reply (or WRITE) finishes crossing its link, the next is
ready to follow it. So each live path wants

    max(1, ceil(rate x base RTT / io_size)) + BEHIND

calls: the calls its bandwidth-delay product holds (its delivery rate times its base round-trip
time, :mod:`.path_choice`'s figures, in calls of ``io_size``; at least the one on the link) plus
``BEHIND``: one the server is working on and one waiting for it, so that neither the server nor the
link waits for the client to answer the last reply with the next call. An unmeasured path counts
with the rate :func:`~.path_choice.seed_rates` guesses for it.

Calls go where they complete first (:func:`~.path_choice.choose_path`), so the window spreads over
the paths in proportion to their rates: a slow path's part of it must hold its ``BEHIND`` calls too,
or the fast paths take its part and leave it idle (links of 40, 40, 40 and 10 MB/s in a window of
12 left the slow one unused, and a tenth of the bandwidth with it). So the window is also at least
``BEHIND`` times the sum of the rates over the slowest one.

The window is the sum over the live paths, at least ``MIN_WINDOW`` (what one path to a fast server
wants for the client's and the server's work on consecutive calls to overlap), and at most the
session's slots less ``SPARE_SLOTS``, kept for the small calls (GETATTR, COMMIT, a lease's
SEQUENCE) that must not wait behind a transfer. It is asked again as each call goes out, so it
follows paths that come, go, or change their rate; a :class:`Windows` keeps each answer for
``KEPT_FOR`` seconds while the paths stay as they were, so that a transfer of many calls works it out once per that time, not per
call (the rates it reads are the best of ``RATE_WINDOW`` seconds and move little in a twentieth of
it).

Nothing here does I/O: the caller passes the paths, the slots and the time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .path_choice import RATE_WINDOW, Candidate, seed_rates

__all__ = ["BEHIND", "KEPT_FOR", "MIN_WINDOW", "SPARE_SLOTS", "Windows", "io_window"]

BEHIND = 2  # calls per path beyond its bandwidth-delay product: one at the server, one waiting
MIN_WINDOW = 8  # calls in flight at least (one path of a fast loopback)
SPARE_SLOTS = 4  # slots a transfer leaves to small calls
KEPT_FOR = RATE_WINDOW / 20  # seconds a window worked out stands (Windows)


def io_window(paths: Sequence[Candidate], io_size: int, slots: int, now: float) -> int:
    """READs or WRITEs of ``io_size`` bytes to keep in flight over the live ``paths`` of a session
    of ``slots`` slots (see the module's text); at least 1."""
    io_size = max(1, io_size)
    rates = seed_rates(paths, now)
    want = 0
    for path, rate in zip(paths, rates, strict=True):
        bdp = rate * path.delivery.base_rtt
        want += max(1, math.ceil(bdp / io_size)) + BEHIND
    if rates and min(rates) > 0:
        # calls spread in proportion to the rates: the slowest path's part holds BEHIND of them
        want = max(want, math.ceil(BEHIND * sum(rates) / min(rates)))
    return max(1, min(slots - SPARE_SLOTS, max(MIN_WINDOW, want)))


class Windows:
    """The windows worked out lately, by call size: each stands ``KEPT_FOR`` seconds after it was
    worked out, while the paths' count of changes stays what it was then (the caller passes the
    time and that count)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        # io_size: (window, until when it stands, the paths' changes then)
        self._kept: dict[int, tuple[int, float, int]] = {}

    def get(self, io_size: int, now: float, changes: int) -> int | None:
        """The window for calls of ``io_size`` bytes, if one still stands at ``now`` with the paths
        at ``changes``."""
        kept = self._kept.get(io_size)
        if kept is not None and now < kept[1] and changes == kept[2]:
            return kept[0]
        return None

    def keep(self, io_size: int, window: int, now: float, changes: int) -> int:
        """``window``, worked out at ``now`` for calls of ``io_size`` bytes with the paths at
        ``changes``, stands a while."""
        self._kept[io_size] = (window, now + KEPT_FOR, changes)
        return window
