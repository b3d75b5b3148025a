"""A soft mount's policy, without I/O: each request's time to be answered, failing at once after one
went unanswered, a probe every timeo, and back to waiting once a reply comes. A hard mount never
gives up and never fails fast."""

from __future__ import annotations

from pynfsrdma._session.session import FAIL, PROBE, SEND, RetryPolicy


def test_a_soft_request_has_timeo_times_retrans_plus_one() -> None:
    p = RetryPolicy(timeo=5, retrans=2, hard=False)
    assert p.budget == 15 and p.deadline(100.0) == 115.0
    assert RetryPolicy(timeo=5, retrans=2, hard=True).deadline(100.0) is None


def test_after_one_went_unanswered_the_others_fail_at_once_until_a_reply() -> None:
    p = RetryPolicy(timeo=2, retrans=1, hard=False)
    assert p.admit(0.0) == SEND and not p.failing_fast
    p.gave_up(10.0)
    assert p.failing_fast
    assert p.admit(10.0) == FAIL and p.admit(11.9) == FAIL  # (the queued and following calls of a cp)
    p.answered()
    assert not p.failing_fast and p.admit(12.0) == SEND


def test_one_probe_every_timeo_while_failing() -> None:
    p = RetryPolicy(timeo=2, retrans=1, hard=False)
    p.gave_up(10.0)
    assert p.admit(12.0) == PROBE  # a timeo later: one request goes with its whole time
    assert p.admit(12.1) == FAIL  # (one at a time)
    p.probed()
    p.gave_up(16.0)  # the probe went unanswered too: the next one a timeo after it
    assert p.admit(17.0) == FAIL and p.admit(18.0) == PROBE
    p.probed()
    p.answered()  # it was answered
    assert p.admit(18.1) == SEND


def test_a_hard_mount_never_fails_fast() -> None:
    p = RetryPolicy(timeo=2, retrans=1, hard=True)
    p.gave_up(10.0)
    assert not p.failing_fast and p.admit(10.0) == SEND
