"""The proxies' fault state and token bucket, without sockets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynfsrdma._testbed.faults import (
    Fault,
    FaultCommandError,
    Mode,
    TokenBucket,
    apply_command,
    parse_fault_words,
)


def test_commands_change_one_aspect_and_restore_clears_all() -> None:
    f = apply_command(Fault(), "delay", 30)
    f = apply_command(f, "throttle", 100)
    f = apply_command(f, "stall")
    assert f == Fault(Mode.STALL, 30.0, 100.0)
    assert f.describe() == "stall, delay 30 ms, throttle 100 KB/s"
    f = apply_command(f, "cut")
    assert f.mode is Mode.CUT and f.delay_ms == 30.0
    assert apply_command(f, "restore") == Fault()
    assert Fault().is_clear and Fault().describe() == "ok"


def test_zero_removes_delay_and_throttle() -> None:
    f = apply_command(apply_command(Fault(), "throttle", 5), "delay", 5)
    f = apply_command(apply_command(f, "throttle", 0), "delay", 0)
    assert f.is_clear


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["cut"], ("cut", None)),
        (["STALL"], ("stall", None)),
        (["delay", "12.5"], ("delay", 12.5)),
        (["throttle", "64"], ("throttle", 64.0)),
        (["restore"], ("restore", None)),
    ],
)
def test_parse_fault_words(words: list[str], expected: tuple[str, float | None]) -> None:
    assert parse_fault_words(words) == expected


@pytest.mark.parametrize(
    ("words", "message"),
    [
        ([], "missing fault"),
        (["explode"], "unknown fault"),
        (["delay"], "delay takes a number"),
        (["cut", "3"], "cut takes no argument"),
        (["delay", "soon"], "not a number"),
        (["throttle", "-1"], ">= 0"),
        (["delay", "inf"], "finite"),
    ],
)
def test_parse_fault_words_rejects(words: list[str], message: str) -> None:
    with pytest.raises(FaultCommandError, match=message):
        parse_fault_words(words)


def test_token_bucket_burst_then_rate() -> None:
    bucket = TokenBucket(rate=1000, burst=500)
    assert bucket.reserve(500, now=0.0) == 0.0  # the burst goes at once
    assert bucket.reserve(250, now=0.0) == pytest.approx(0.25)  # then it waits for the rate
    assert bucket.reserve(250, now=0.25) == pytest.approx(0.25)  # debt of the earlier reservation
    assert bucket.reserve(100, now=10.0) == 0.0  # refilled (up to the burst only)
    assert bucket.tokens == pytest.approx(400)


def test_token_bucket_rejects_zero_rate() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0)


@given(
    rate=st.floats(min_value=100, max_value=1e7),
    sizes=st.lists(st.integers(min_value=1, max_value=100_000), min_size=1, max_size=50),
)
def test_token_bucket_never_exceeds_burst_plus_rate(rate: float, sizes: list[int]) -> None:
    """A sender that waits as told has sent at most burst + rate * elapsed bytes at any time."""
    bucket = TokenBucket(rate)
    now, sent = 0.0, 0
    for n in sizes:
        now += bucket.reserve(n, now)
        sent += n
        assert sent <= bucket.burst + rate * now + 1e-6 * sent
