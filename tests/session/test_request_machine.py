"""The request machine (_session/sequence.py's Request), without I/O: a session lost under a request in
every circumstance, and each kind of event fed to one request taken to the table of its kind, with
what the request met so far kept across its events."""

from __future__ import annotations

import itertools

import pytest

from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._session.sequence import (
    CLIENT_LOST,
    MAX_CLIENT_LOST,
    MAX_SESSION_LOST,
    MAX_VIOLATIONS,
    SESSION_LOST,
    Act,
    Attempts,
    Failed,
    Fault,
    Finished,
    Replied,
    Request,
    SessionGone,
    on_lost,
)

BOOLS = (False, True)


@pytest.mark.parametrize("status,trunked,recovering,before", list(itertools.product(
    sorted(SESSION_LOST | CLIENT_LOST), BOOLS, BOOLS, range(MAX_SESSION_LOST + 2))))
def test_every_lost_session_in_every_circumstance(status: int, trunked: bool, recovering: bool, before: int) -> None:
    a = Attempts(sessions_lost=before)
    d = on_lost(status, trunked=trunked, recovering=recovering, attempts=a)
    assert a.sessions_lost == before + 1 and d.status == status
    if recovering or before + 1 > MAX_SESSION_LOST:
        # a recovery's own request does not start another; nor does a request recover forever
        assert d.act is Act.FAIL
    elif trunked and status not in CLIENT_LOST:
        assert d.act is Act.NEW_TRUNKED_SESSION  # replaced on a path of its group
    else:
        assert d.act is Act.NEW_SESSION  # (the client ID's too when the status says it went)


def test_a_request_recovers_its_session_three_times_then_fails() -> None:
    r = Request()
    acts = [r.feed(SessionGone(c.NFS4ERR_BADSESSION)).act for _ in range(MAX_SESSION_LOST + 1)]
    assert acts == [Act.NEW_SESSION] * MAX_SESSION_LOST + [Act.FAIL]


def test_a_request_remembers_its_faults_across_its_sends() -> None:
    r = Request()
    acts = [r.feed(Failed(kind)).act for kind in [Fault.VIOLATION, Fault.BAD_REPLY] * MAX_VIOLATIONS]
    assert acts[:MAX_VIOLATIONS] == [Act.RESEND] * MAX_VIOLATIONS and acts[MAX_VIOLATIONS] is Act.PROTOCOL_ERROR
    assert Request(pinned=True).feed(Failed(Fault.LOST)).act is Act.RAISE  # a probe's path is its only one
    assert Request().feed(Failed(Fault.LOST, failing_fast=True)).act is Act.UNREACHABLE
    assert Request().feed(Failed(Fault.TIMEOUT, past_deadline=True)).act is Act.GIVE_UP


def test_a_request_remembers_its_replies_across_its_sends() -> None:
    r = Request(idempotent=True)
    # a step back after an interrupted request, then the reply cached for that one: a false retry
    assert r.feed(Replied(c.NFS4ERR_SEQ_MISORDERED, c.NFS4ERR_SEQ_MISORDERED, 1, True)).act is Act.STEP_BACK
    assert r.feed(Replied(c.NFS4_OK, c.NFS4_OK, 2, False, foreign=True)).act is Act.AGAIN
    # without the step back the same reply breaks the protocol
    assert Request().feed(Replied(c.NFS4_OK, c.NFS4_OK, 1, False, foreign=True)).act is Act.VIOLATION
    # an idempotent request's resend that found no cached reply runs anew; another's does not
    uncached = Replied(c.NFS4ERR_RETRY_UNCACHED_REP, c.NFS4ERR_RETRY_UNCACHED_REP, 2, False)
    assert Request(idempotent=True).feed(uncached).act is Act.AGAIN
    assert Request(idempotent=False).feed(uncached).act is Act.FAIL
    assert Request().feed(Replied(c.NFS4_OK, c.NFS4ERR_NOENT, 1, False)).act is Act.DONE


@pytest.mark.parametrize("status", sorted(CLIENT_LOST))
def test_a_request_finished_with_its_client_id_lost_recovers_it_a_limited_number_of_times(status: int) -> None:
    r = Request()
    acts = [r.feed(Finished(status)).act for _ in range(MAX_CLIENT_LOST + 1)]
    assert acts == [Act.NEW_CLIENT] * MAX_CLIENT_LOST + [Act.DONE]
    assert Request(recovering=True).feed(Finished(status)).act is Act.DONE
    d = Request().feed(Finished(c.NFS4ERR_DELAY))
    assert d.act is Act.RESEND and d.wait > 0
