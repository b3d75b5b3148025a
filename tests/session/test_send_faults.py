"""The decisions on a send that brought no reply to use (_session/sequence.py's on_fault), for every fault,
every combination of the request's circumstances, and every count up to past its limit."""

from __future__ import annotations

import itertools

import pytest

from pynfsrdma._session.sequence import MAX_REFUSED, MAX_VIOLATIONS, Act, Fault, Faults, on_fault

BOOLS = (False, True)
CASES = list(itertools.product(
    Fault, BOOLS, BOOLS, BOOLS, range(MAX_VIOLATIONS + 2), range(MAX_REFUSED + 2)
))


@pytest.mark.parametrize("fault,pinned,failing_fast,past_deadline,violations,refused", CASES)
def test_every_fault_in_every_circumstance(
    fault: Fault, pinned: bool, failing_fast: bool, past_deadline: bool, violations: int, refused: int
) -> None:
    faults = Faults(violations, refused)
    then = on_fault(fault, pinned=pinned, failing_fast=failing_fast, past_deadline=past_deadline, faults=faults).act
    counted = fault is Fault.BAD_REPLY or (fault is Fault.VIOLATION and not pinned)
    assert faults.violations == violations + counted
    assert faults.refused == refused + (fault is Fault.REFUSED and not pinned)
    if fault is Fault.BAD_REPLY:
        # a reply that is not one: resent (on a new connection) until the limit, never past it
        broke = pinned or violations + 1 > MAX_VIOLATIONS
        assert then is (Act.PROTOCOL_ERROR if broke else Act.RESEND)
    elif pinned:
        assert then is Act.RAISE  # a pinned request has its one path: the fault is the caller's
    elif fault is Fault.VIOLATION and violations + 1 > MAX_VIOLATIONS:
        assert then is Act.PROTOCOL_ERROR
    elif fault is Fault.REFUSED and refused + 1 > MAX_REFUSED:
        assert then is Act.REFUSED
    elif failing_fast and fault is not Fault.TIMEOUT:
        # (a timeout's failing fast is seen where the next send would start)
        assert then is Act.UNREACHABLE
    else:
        assert then is (Act.GIVE_UP if past_deadline else Act.RESEND)


def test_a_request_whose_replies_keep_breaking_the_protocol_fails_after_the_limit() -> None:
    faults = Faults()
    thens = [on_fault(Fault.BAD_REPLY, pinned=False, failing_fast=False, past_deadline=False, faults=faults).act
             for _ in range(MAX_VIOLATIONS + 1)]
    assert thens == [Act.RESEND] * MAX_VIOLATIONS + [Act.PROTOCOL_ERROR]


def test_connections_ending_on_violations_and_bad_replies_count_together() -> None:
    faults = Faults()
    kinds = [Fault.VIOLATION, Fault.BAD_REPLY] * MAX_VIOLATIONS
    thens = [on_fault(k, pinned=False, failing_fast=False, past_deadline=False, faults=faults).act for k in kinds]
    assert thens[:MAX_VIOLATIONS] == [Act.RESEND] * MAX_VIOLATIONS
    assert thens[MAX_VIOLATIONS] is Act.PROTOCOL_ERROR


def test_lost_connections_and_timeouts_are_resent_until_the_deadline() -> None:
    faults = Faults()
    for _ in range(100):
        for fault in (Fault.LOST, Fault.TIMEOUT):
            assert on_fault(fault, pinned=False, failing_fast=False, past_deadline=False, faults=faults).act is Act.RESEND
    assert faults == Faults()
    assert on_fault(Fault.LOST, pinned=False, failing_fast=False, past_deadline=True, faults=faults).act is Act.GIVE_UP
