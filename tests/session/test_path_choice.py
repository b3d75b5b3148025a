"""Choosing a path by expected completion time, without sockets: a small simulation of links (each a
queue with a rate and a round-trip time) that the chooser spreads a transfer over."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import pytest

from pynfsrdma._session.path_choice import (
    FLOOR_SHARE,
    RATE_WINDOW,
    SEED_RATE,
    STALE_AFTER,
    Delivery,
    Mark,
    choose_path,
    expected_completion,
    seed_rates,
)

MiB = 1 << 20
MB = 1e6


@dataclass(eq=False)
class Link:
    """A path over a simulated link: what the chooser reads, and the link's own queue."""

    rate: float  # bytes/s the link carries
    rtt: float = 0.0002
    order: int = 0
    delivery: Delivery = field(default_factory=Delivery)
    bytes_in_flight: int = 0
    in_flight: int = 0
    carried: int = 0
    busy_until: float = 0.0
    up: bool = True


def run(links: list[Link], total: int, size: int = MiB, window: int = 16,
        events: dict[float, tuple[int, str, float]] | None = None) -> float:
    """Move ``total`` bytes in calls of ``size``, ``window`` calls at most in flight, each sent on the
    path chosen when it goes out; ``events``: at a time, (link index, "rate"|"cut", value). Returns
    the time it took."""
    now = 0.0
    done: list[tuple[float, int, int, Mark, float]] = []  # (finish, seq, link index, mark, sent)
    seq = 0
    sent_bytes = 0
    pending_events = sorted((events or {}).items())

    def send() -> None:
        nonlocal seq, sent_bytes
        live = [x for x in links if x.up]
        path = choose_path(live, size, now)
        assert path is not None
        start = max(now, path.busy_until)
        path.busy_until = start + size / path.rate
        mark = path.delivery.mark(now, busy=path.bytes_in_flight > 0)
        path.bytes_in_flight += size
        path.in_flight += 1
        seq += 1
        heapq.heappush(done, (path.busy_until + path.rtt, seq, links.index(path), mark, now))
        sent_bytes += size

    while sent_bytes < total and len(done) < window:
        send()
    while done:
        finish, _, i, mark, sent = heapq.heappop(done)
        while pending_events and pending_events[0][0] <= finish:
            _, (j, what, value) = pending_events.pop(0)
            if what == "rate":
                links[j].rate = value
            else:
                links[j].up = False
                links[j].delivery.lost()
        now = finish
        link = links[i]
        link.bytes_in_flight -= size
        link.in_flight -= 1
        if not link.up:  # the call was lost with its path: it is sent again elsewhere
            sent_bytes -= size
        else:
            link.carried += size
            link.delivery.answered(mark, size, sent, now)
        while sent_bytes < total and len(done) < window:
            send()
    return now


def shares(links: list[Link]) -> list[float]:
    total = sum(x.carried for x in links)
    return [x.carried / total for x in links]


def within(got: list[float], want: list[float], tolerance: float = 0.25) -> bool:
    return all(abs(g - w) <= tolerance * w for g, w in zip(got, want, strict=True))


def test_equal_links_share_equally() -> None:
    links = [Link(40 * MB) for _ in range(4)]
    run(links, 256 * MiB)
    assert within(shares(links), [0.25] * 4)


@pytest.mark.parametrize("orders", [(0, 0, 0, 0), (200, 100, 50, 50), (50, 50, 100, 200)])
def test_bytes_follow_the_rates_whatever_the_read_order_said(orders: tuple[int, ...]) -> None:
    rates = [80 * MB, 40 * MB, 20 * MB, 20 * MB]
    links = [Link(r, order=o) for r, o in zip(rates, orders, strict=True)]
    took = run(links, 256 * MiB)
    assert within(shares(links), [r / sum(rates) for r in rates])
    assert 256 * MiB / took > 0.9 * sum(rates)  # the links were kept full (simulated time)


def test_a_slow_path_does_not_hold_back_a_fast_one() -> None:
    links = [Link(100 * MB, order=200), Link(1 * MB, order=2)]
    took = run(links, 128 * MiB)
    assert links[1].carried <= 2 * MiB
    assert 128 * MiB / took > 0.9 * 100 * MB


def test_a_slow_path_the_read_order_did_not_name_gets_only_the_first_calls() -> None:
    links = [Link(100 * MB), Link(1 * MB)]
    run(links, 256 * MiB)
    assert links[1].carried <= 8 * MiB  # half of the first window, before anything was measured


def test_the_share_moves_when_a_rate_changes() -> None:
    links = [Link(40 * MB), Link(40 * MB)]
    run(links, 512 * MiB, events={1.0: (0, "rate", 10 * MB)})
    # ~40 MB in the first second at 1:1, then 1:4 for the remaining ~490 MB
    first, second = shares(links)
    assert second > 2.5 * first


def test_a_path_an_old_sample_judged_slow_is_measured_again_when_idle() -> None:
    """A link that looked slow once (a stale, low sample) and carries its full rate now: with
    nothing in flight there, its old sample gives way to the read-order guess, so it gets a call,
    a new sample, and its share."""
    links = [Link(40 * MB), Link(40 * MB)]
    links[0].delivery.answered((0, -0.1), 4 * MB, -0.1, 0.0)  # 40 MB/s, just now
    links[1].delivery.answered((0, -10.0), 10_000, -10.0, -9.0)  # 10 kB/s, ten seconds ago
    assert links[1].delivery.stale(0.0) and not links[1].delivery.stale(-9.0 + STALE_AFTER / 2)
    run(links, 256 * MiB)
    assert within(shares(links), [0.5, 0.5])


def test_a_busy_path_keeps_its_measure_however_old() -> None:
    slow, fast = Link(1 * MB), Link(100 * MB)
    slow.delivery.answered((0, -10.0), MiB, -10.0, -9.0)
    fast.delivery.answered((0, 0.0), 10 * MiB, 0.0, 0.1)
    slow.bytes_in_flight, slow.in_flight = MiB, 1
    assert seed_rates([slow, fast], 0.1)[0] == pytest.approx(MiB)
    slow.bytes_in_flight, slow.in_flight = 0, 0
    assert seed_rates([slow, fast], 0.1)[0] == pytest.approx(fast.delivery.rate(0.1))


def test_a_cut_path_leaves_its_share_to_the_others() -> None:
    links = [Link(40 * MB), Link(40 * MB), Link(40 * MB)]
    run(links, 256 * MiB, events={0.5: (1, "cut", 0.0)})
    assert sum(x.carried for x in links) == 256 * MiB
    assert links[1].carried < 0.3 * 256 * MiB
    assert within(shares([links[0], links[2]]), [0.5, 0.5])


def test_small_calls_go_where_they_complete_first() -> None:
    fast, slow = Link(100 * MB), Link(10 * MB)
    fast.delivery.answered((0, 0.0), 4 * MiB, 1e-6, 0.04)  # sent with others in flight: busy samples
    slow.delivery.answered((0, 0.0), MiB, 1e-6, 0.1)
    now = 0.1
    assert choose_path([fast, slow], 0, now) is fast
    fast.bytes_in_flight, fast.in_flight = 16 * MiB, 16  # 0.17 s of queue there
    assert choose_path([fast, slow], 0, now) is slow
    assert choose_path([fast, slow], 4 * MiB, now) is fast  # 0.21 s there, 0.42 s on the slow one


def test_unmeasured_paths_are_weighted_by_read_order() -> None:
    a, b = Link(0, order=50), Link(0, order=200)
    assert seed_rates([a, b], 0.0) == pytest.approx([SEED_RATE * 51 / 201, SEED_RATE])
    assert choose_path([a, b], MiB, 0.0) is b
    b.bytes_in_flight = 4 * MiB  # 4 MiB ahead at 4x the rate: a is quicker now
    assert choose_path([a, b], MiB, 0.0) is a
    b.delivery.answered((0, 0.0), 10 * MiB, 0.0, 0.1)  # measured: ~105 MB/s; a's guess follows it
    assert seed_rates([a, b], 0.1)[0] == pytest.approx(b.delivery.rate(0.1) * 51 / 201)


def test_avoid_only_when_alone() -> None:
    a, b = Link(40 * MB), Link(10 * MB)
    assert choose_path([a, b], MiB, 0.0, avoid=a) is b
    assert choose_path([a], MiB, 0.0, avoid=a) is a
    assert choose_path([], MiB, 0.0) is None


def test_delivery_rate_is_the_windows_best_sample_and_base_rtt_its_least() -> None:
    d = Delivery()
    assert d.rate(0.0) is None
    m = d.mark(0.0, busy=False)
    d.answered(m, MiB, 0.0, 0.1)  # 10.5 MB/s
    assert d.rate(0.1) == pytest.approx(MiB / 0.1) and d.base_rtt == 0  # no round trip from bulk calls
    m = d.mark(0.2, busy=False)
    d.answered(m, 0, 0.2, 0.203)  # a small call: no rate sample, but a round trip
    assert d.base_rtt == pytest.approx(0.003) and d.rate(0.203) == pytest.approx(MiB / 0.1)
    d.answered(d.mark(0.25, busy=False), 0, 0.25, 0.252)
    d.answered(d.mark(0.26, busy=False), 0, 0.26, 0.265)
    assert d.base_rtt == pytest.approx(0.002)  # the least
    d.answered((d.delivered, 0.3), MiB, 0.3 + 1e-9, 0.5)  # slower (busy): the window still holds the better one
    assert d.rate(0.5) == pytest.approx(MiB / 0.1)
    assert d.rate(0.1 + RATE_WINDOW + 0.01) == pytest.approx(MiB / 0.2)  # the first one expired
    assert d.rate(0.5 + 10 * RATE_WINDOW) == pytest.approx(MiB / 0.2)  # the last one stays
    assert d.delivered == 2 * MiB
    d.lost()
    assert d.base_rtt == 0 and d.rate(0.5) is None


def test_a_commits_time_is_not_taken_for_the_round_trip() -> None:
    """A COMMIT's time is the server writing to its storage: taken as the path's round trip, the
    path looked far away for RTT_WINDOW and, a slow path not being chosen, was not measured again;
    a trunked read of 4 links left one unused."""
    d = Delivery()
    d.answered(d.mark(0.0, busy=False), 0, 0.0, 0.4, timed=False)  # COMMIT: 0.4 s of fsync on the server
    assert d.base_rtt == 0
    d.answered(d.mark(0.5, busy=False), 0, 0.5, 0.502)
    assert d.base_rtt == pytest.approx(0.002)
    d.answered(d.mark(0.6, busy=False), 0, 0.6, 0.9, timed=False)
    assert d.base_rtt == pytest.approx(0.002)


def test_expected_completion_counts_queue_calls_and_round_trip() -> None:
    p = Link(10 * MB)
    p.delivery.answered((0, 0.0), 0, 0.0, 0.002)
    p.bytes_in_flight, p.in_flight = 1_000_000, 2
    assert expected_completion(p, 1_000_000, 10 * MB) == pytest.approx(0.002 + (2_000_000 + 2 * 4096) / 10e6)


def test_a_small_call_answered_just_after_a_large_reply_does_not_take_its_bytes_for_its_own() -> None:
    """A GETATTR sent while a 1 MiB READ was nearly through a 20 MB/s link, and answered just after
    it, saw 1 MiB delivered in its 1.2 ms: 870 MB/s, the best sample of the second, and the path was
    given far more than its share. The sample counts from the last delivery before the send."""
    d = Delivery()
    read = d.mark(0.0, busy=False)
    getattr_ = d.mark(0.0510, busy=True)
    d.answered(read, MiB, 0.0, 0.0520)
    d.answered(getattr_, 0, 0.0510, 0.0522)
    assert d.rate(0.06) == pytest.approx(MiB / 0.0522, rel=0.01)  # 20 MB/s, not MiB / 1.2 ms
    # pipelined READs: each one's sample is the link's rate
    t = 0.0522
    marks = [d.mark(t, busy=True) for _ in range(3)]
    for i, m in enumerate(marks):
        d.answered(m, MiB, t, t + 0.0524 * (i + 1))
    assert d.rate(t + 0.2) == pytest.approx(20e6, rel=0.05)


def test_the_first_call_after_an_idle_spell_counts_from_its_send() -> None:
    d = Delivery()
    d.answered(d.mark(0.0, busy=False), MiB, 0.0, 0.05)
    d.answered(d.mark(5.0, busy=False), MiB, 5.0, 5.05)  # five idle seconds are not the link's
    assert d.rate(5.05) == pytest.approx(MiB / 0.05)


def busy_sample(d: Delivery, rate: float, at: float, payload: int = MiB) -> None:
    """``d`` delivered ``payload`` at ``rate`` by ``at``, a call sent with others in flight."""
    took = payload / rate
    d.answered((d.delivered, at - took), payload, at - took + 1e-9, at)


def idle_sample(d: Delivery, rate: float, at: float, payload: int = MiB) -> None:
    """``d`` delivered ``payload`` at ``rate`` by ``at``, a call sent on the idle path."""
    d.answered(d.mark(at - payload / rate, busy=False), payload, at - payload / rate, at)


NOW = 10.0


def four_links(queued: tuple[int, ...], last: str, order: int = 0, last_rate: float = 4_000) -> list[Link]:
    """Three links of 40 MB/s measured busy just now, with ``queued`` calls of 1 MiB in flight on
    each of the four; the last one measured at ``last_rate`` 0.5 s ago ("idle": by a call sent on
    it idle, "busy": with others in flight, "old busy": so, but 1.5 s ago, "none": not at all); its
    read order ``order``, the others' 200 when it is given one."""
    links = [Link(40 * MB, order=200 if order else 0) for _ in range(3)] + [Link(40 * MB, order=order)]
    for x in links[:3]:
        busy_sample(x.delivery, 40 * MB, NOW - 0.01)
    if last == "idle":
        idle_sample(links[3].delivery, last_rate, NOW - 0.5, payload=4096)
    elif last == "busy":
        busy_sample(links[3].delivery, last_rate, NOW - 0.5, payload=4096)
    elif last == "old busy":  # older than RATE_WINDOW, not yet STALE_AFTER
        busy_sample(links[3].delivery, last_rate, NOW - (RATE_WINDOW + STALE_AFTER) / 2, payload=4096)
    for x, n in zip(links, queued, strict=True):
        x.in_flight, x.bytes_in_flight = n, n * MiB
    return links


def test_which_path_a_call_goes_to() -> None:
    """A table of situations and the path chosen (3: the last link), for READs of 1 MiB and 128 KiB
    and calls without data. A path that measured a few kB/s on the one small call it was given while
    idle (or that waited at a server busy with the other paths' 40 READs) carried nothing until that
    sample was 2 s old; the read fell to 49 MB/s."""
    for payload in (MiB, 128 << 10, 0):
        situations(payload)


def situations(payload: int) -> None:
    table: list[tuple[tuple[int, ...], str, int, float, int | str]] = [
        # others have a queue, the last is idle: it is tried at once, whatever its idle sample said
        ((4, 4, 4, 0), "idle", 0, 4_000, 3),
        ((1, 1, 1, 0), "idle", 0, 4_000, 3),
        ((40, 0, 0, 0), "idle", 0, 4_000, "not 0"),
        # nobody has a queue: the measured paths first
        ((0, 0, 0, 0), "idle", 0, 4_000, "not 3"),
        # a probe in flight there already: its low idle sample holds until a busy one replaces it
        ((1, 1, 1, 1), "idle", 0, 4_000, "not 3"),
        # a busy sample of the last second says the link is slow: it is believed (a call without
        # data still goes there: nothing is queued in front of it)
        ((4, 4, 4, 0), "busy", 0, 4_000, "not 3" if payload else 3),
        # ... but not when it is older than RATE_WINDOW and the path idle: tried again at once
        ((4, 4, 4, 0), "old busy", 0, 4_000, 3),
        # the read order names the last link far slower than the others: no probe of data
        ((4, 4, 4, 0), "idle", 2, 4_000, "not 3" if payload else 3),
        # never measured, idle, others queued: the read-order guess sends it the call
        ((4, 4, 4, 0), "none", 0, 0, 3),
    ]
    for queued, last, order, last_rate, want in table:
        links = four_links(queued, last, order, last_rate)
        got = links.index(choose_path(links, payload, NOW))  # type: ignore[arg-type]
        situation = (queued, last, order, last_rate, payload)
        if isinstance(want, int):
            assert got == want, situation
        else:
            assert got != int(want.split()[1]), situation


def test_a_sample_taken_while_idle_does_not_lower_the_estimate() -> None:
    d = Delivery()
    busy_sample(d, 40 * MB, 1.0)
    idle_sample(d, 40_000, 1.5, payload=4096)  # one small call, answered slowly
    assert d.rate(1.6) == pytest.approx(40 * MB)
    assert d.rate(1.0 + 3 * RATE_WINDOW) == pytest.approx(40 * MB)  # not when the busy one expires either
    idle_sample(d, 80 * MB, 5.0)  # an idle sample above it raises it
    assert d.rate(5.0) == pytest.approx(80 * MB)
    assert not d.proven(5.0) and d.proven(1.0 + RATE_WINDOW)
    busy_sample(d, 20 * MB, 6.0)
    assert d.proven(6.0) and d.rate(6.0 + 2 * RATE_WINDOW) == pytest.approx(20 * MB)


def test_an_idle_path_without_a_busy_sample_counts_at_half_the_others() -> None:
    links = four_links((4, 4, 4, 0), "idle")
    rates = seed_rates(links, NOW)
    assert rates[:3] == pytest.approx([40 * MB] * 3)
    assert rates[3] == pytest.approx(FLOOR_SHARE * 40 * MB)
    links[3].in_flight, links[3].bytes_in_flight = 1, 4096  # its probe in flight: its own figure
    assert seed_rates(links, NOW)[3] == pytest.approx(4_000)
    links = four_links((4, 4, 4, 0), "idle", order=50)
    assert seed_rates(links, NOW)[3] == pytest.approx(FLOOR_SHARE * 40 * MB * 51 / 201)


def test_a_path_a_starved_call_measured_slow_gets_its_share_at_once() -> None:
    """Four links of 40 MB/s; one had measured 4 kB/s on a call sent while it was idle, just
    before the read began. It must carry its quarter of the read, not wait for the sample to go
    stale (2 s: longer than the read)."""
    links = [Link(40 * MB) for _ in range(4)]
    for x in links[:3]:
        busy_sample(x.delivery, 40 * MB, 0.0)
    idle_sample(links[3].delivery, 4_000, 0.0, payload=4096)
    took = run(links, 256 * MiB, window=16)
    assert within(shares(links), [0.25] * 4)
    assert 256 * MiB / took > 0.9 * 160 * MB
