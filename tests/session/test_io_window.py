"""How many READs or WRITEs a transfer keeps in flight: the window grows with the live paths and
their bandwidth-delay products, within the session's slots (no sockets: paths with figures)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from pynfsrdma._session.io_window import BEHIND, KEPT_FOR, MIN_WINDOW, SPARE_SLOTS, Windows, io_window
from pynfsrdma._session.path_choice import Delivery

MiB = 1 << 20
SLOTS = 64


@dataclass(eq=False)
class Figures:
    """A path as the rule reads it."""

    order: int = 0
    delivery: Delivery = field(default_factory=Delivery)
    bytes_in_flight: int = 0
    in_flight: int = 0


def measured(rate: float, rtt: float, t: float = 0.0) -> Figures:
    """A path that delivered at ``rate`` bytes/s while busy, with base round trip ``rtt``, as seen at
    ``t`` + 1."""
    p = Figures()
    d = p.delivery
    d.answered(d.mark(t, busy=False), 0, t, t + rtt)  # a small call: the round trip
    first = d.mark(t + 0.5, busy=False)
    second = d.mark(t + 0.5 + 1e-6, busy=True)  # two calls in flight: the path busy over the second
    d.answered(first, 2 * MiB, t + 0.5, t + 0.5 + 2.1 * MiB / rate)  # an idle start is a little slower
    d.answered(second, 2 * MiB, t + 0.5 + 1e-6, t + 0.5 + 4 * MiB / rate)
    return p


def test_one_path_of_a_fast_loopback_keeps_the_minimum() -> None:
    assert io_window([measured(600e6, 0.0002)], MiB, SLOTS, 1.0) == MIN_WINDOW


def test_the_window_grows_with_the_number_of_live_paths() -> None:
    windows = [io_window([measured(20e6, 0.0005) for _ in range(n)], MiB, SLOTS, 1.0) for n in range(1, 9)]
    assert windows == sorted(windows) and windows[-1] > windows[0]
    # each path: the one call its (small) bandwidth-delay product holds, and BEHIND
    assert windows[3] == 4 * (1 + BEHIND) and windows[7] == 8 * (1 + BEHIND)


def test_the_window_grows_with_the_bandwidth_delay_product() -> None:
    near = [measured(100e6, 0.001) for _ in range(2)]
    far = [measured(100e6, 0.050) for _ in range(2)]  # 5 MB in flight fill each link
    assert io_window(near, MiB, SLOTS, 1.0) == MIN_WINDOW
    assert io_window(far, MiB, SLOTS, 1.0) == 2 * (5 + BEHIND)  # ceil(5e6 / MiB) = 5
    # in smaller calls, more of them
    assert io_window(far, MiB // 4, SLOTS, 1.0) == 2 * (20 + BEHIND)


def test_the_window_stays_within_the_sessions_slots() -> None:
    far = [measured(1000e6, 0.100) for _ in range(4)]  # 100 MB per link
    assert io_window(far, MiB, SLOTS, 1.0) == SLOTS - SPARE_SLOTS
    assert io_window(far, MiB, 6, 1.0) == 6 - SPARE_SLOTS
    assert io_window(far, MiB, 1, 1.0) == 1  # a session of one slot still moves data


def test_unmeasured_paths_count_with_the_rate_guessed_for_them() -> None:
    fresh = [Figures(order=200) for _ in range(4)]
    assert io_window(fresh, MiB, SLOTS, 0.0) == 4 * (1 + BEHIND)
    assert io_window([], MiB, SLOTS, 0.0) == MIN_WINDOW


def test_a_path_that_goes_away_takes_its_calls_with_it() -> None:
    paths = [measured(40e6, 0.030) for _ in range(4)]  # 1.2 MB: 2 calls of 1 MiB each, +BEHIND
    assert io_window(paths, MiB, SLOTS, 1.0) == 4 * (2 + BEHIND)
    assert io_window(paths[:3], MiB, SLOTS, 1.0) == 3 * (2 + BEHIND)


@pytest.mark.parametrize("io_size", [0, -1])
def test_a_nonsense_call_size_is_taken_as_one_byte(io_size: int) -> None:
    assert io_window([measured(20e6, 0.001)], io_size, SLOTS, 1.0) == SLOTS - SPARE_SLOTS


def test_the_slowest_paths_part_of_the_window_keeps_it_busy() -> None:
    """Calls spread over the paths in proportion to their rates: links of 40, 40, 40 and 10 MB/s in
    a window of 12 (their bandwidth-delay products and BEHIND) gave the slow one none of it."""
    paths = [measured(40e6, 0.0005) for _ in range(3)] + [measured(10e6, 0.0005)]
    window = io_window(paths, MiB, SLOTS, 1.0)
    assert window * 10 / 130 >= BEHIND  # the slow link's share of it
    assert window == math.ceil(BEHIND * 130 / 10)
    unequal = [measured(r * 1e6, 0.0005) for r in (40, 20, 10, 10)]
    assert io_window(unequal, MiB, SLOTS, 1.0) == BEHIND * 80 / 10
    crawling = [measured(100e6, 0.0005), measured(0.1e6, 0.0005)]  # within the slots all the same
    assert io_window(crawling, MiB, SLOTS, 1.0) == SLOTS - SPARE_SLOTS


def test_a_window_stands_a_while_and_not_past_a_change_of_the_paths() -> None:
    windows = Windows()
    assert windows.get(MiB, 1.0, 0) is None
    assert windows.keep(MiB, 12, 1.0, 0) == 12
    assert windows.get(MiB, 1.0 + KEPT_FOR / 2, 0) == 12
    assert windows.get(MiB // 4, 1.0, 0) is None  # (another call size: its own window)
    assert windows.get(MiB, 1.0 + KEPT_FOR, 0) is None  # its time is up
    assert windows.get(MiB, 1.0, 1) is None  # a path came, went or changed state
