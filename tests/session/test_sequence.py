"""The SEQUENCE core (_session/sequence.py), without I/O: every status SEQUENCE can come back with,
every COMPOUND status the client ID's loop acts on, every status flag."""

from __future__ import annotations

import pytest

from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._session.sequence import (
    CLIENT_LOST,
    MAX_BADSLOT,
    MAX_DELAY_WAIT,
    MAX_FALSE_RETRY,
    MAX_GRACE_WAIT,
    MAX_MISORDERED,
    MAX_UNCACHED,
    RETRY_LATER,
    SESSION_LOST,
    Act,
    Attempts,
    FlagAction,
    finishes,
    flag_actions,
    on_compound,
    on_sequence,
    settles,
)

SPECIAL = {
    c.NFS4_OK,
    c.NFS4ERR_DELAY,
    c.NFS4ERR_SEQ_MISORDERED,
    c.NFS4ERR_BADSLOT,
    c.NFS4ERR_SEQ_FALSE_RETRY,
    c.NFS4ERR_RETRY_UNCACHED_REP,
    *SESSION_LOST,
    *CLIENT_LOST,
}


def seq(status: int, compound: int = c.NFS4_OK, *, tries: int = 1, idempotent: bool = False,
        interrupted: bool = False, attempts: Attempts | None = None, foreign: bool = False) -> Act:
    return on_sequence(status, compound, tries=tries, idempotent=idempotent, interrupted=interrupted,
                       attempts=attempts or Attempts(), foreign=foreign).act


@pytest.mark.parametrize("status", sorted(int(s) for s in c.nfsstat4 if int(s) not in SPECIAL))
def test_any_other_sequence_status_fails_the_request(status: int) -> None:
    assert seq(status) is Act.FAIL


def test_ok_is_done_whatever_the_compound_says() -> None:
    assert seq(c.NFS4_OK) is Act.DONE
    assert seq(c.NFS4_OK, c.NFS4ERR_NOENT) is Act.DONE
    assert seq(c.NFS4_OK, c.NFS4ERR_RETRY_UNCACHED_REP) is Act.DONE  # (a first send: nothing to redo)


def test_delay_resends_the_same_request_ever_later_up_to_a_bound() -> None:
    a = Attempts()
    waits = [on_sequence(c.NFS4ERR_DELAY, c.NFS4ERR_DELAY, tries=1, idempotent=False, interrupted=False,
                         attempts=a) for _ in range(12)]
    assert all(d.act is Act.RESEND for d in waits)
    assert [d.wait for d in waits[:3]] == [0.05, 0.1, 0.2]
    assert waits[-1].wait == MAX_DELAY_WAIT


def test_an_uncached_reply_of_a_resent_idempotent_request_runs_it_again_a_few_times() -> None:
    a = Attempts()
    for _ in range(MAX_UNCACHED):
        assert seq(c.NFS4ERR_RETRY_UNCACHED_REP, tries=2, idempotent=True, attempts=a) is Act.AGAIN
    assert seq(c.NFS4ERR_RETRY_UNCACHED_REP, tries=2, idempotent=True, attempts=a) is Act.FAIL
    # a request that changes things is not run twice; nor one that was sent only once
    assert seq(c.NFS4ERR_RETRY_UNCACHED_REP, tries=2, idempotent=False) is Act.FAIL
    assert seq(c.NFS4ERR_RETRY_UNCACHED_REP, tries=1, idempotent=True) is Act.FAIL
    assert seq(c.NFS4_OK, c.NFS4ERR_RETRY_UNCACHED_REP, tries=2, idempotent=True) is Act.AGAIN


def test_misordered_steps_back_only_after_an_interrupted_request() -> None:
    a = Attempts()
    for _ in range(MAX_MISORDERED):
        assert seq(c.NFS4ERR_SEQ_MISORDERED, interrupted=True, attempts=a) is Act.STEP_BACK
    assert seq(c.NFS4ERR_SEQ_MISORDERED, interrupted=True, attempts=a) is Act.LOST
    assert seq(c.NFS4ERR_SEQ_MISORDERED, interrupted=False) is Act.LOST


def test_badslot_moves_down_a_few_times_then_fails() -> None:
    a = Attempts()
    for _ in range(MAX_BADSLOT):
        assert seq(c.NFS4ERR_BADSLOT, attempts=a) is Act.OTHER_SLOT
    assert seq(c.NFS4ERR_BADSLOT, attempts=a) is Act.FAIL


@pytest.mark.parametrize("status", sorted(SESSION_LOST))
def test_a_lost_session_is_replaced(status: int) -> None:
    assert seq(status) is Act.NEW_SESSION


@pytest.mark.parametrize("status", sorted(CLIENT_LOST))
def test_a_lost_client_id_is_replaced(status: int) -> None:
    assert seq(status) is Act.NEW_CLIENT


def test_a_false_retry_means_the_slot_disagrees_with_the_server() -> None:
    assert seq(c.NFS4ERR_SEQ_FALSE_RETRY) is Act.LOST


def stepped_back() -> Attempts:
    """The attempts of a request that was sent with its slot's interrupted sequence id after a
    SEQ_MISORDERED."""
    a = Attempts()
    assert seq(c.NFS4ERR_SEQ_MISORDERED, interrupted=True, attempts=a) is Act.STEP_BACK
    return a


# the replies that say the sequence id's cached reply belongs to another request: a server that
# detects false retries says so; one that does not answers with the other request's cached reply
# (SEQUENCE fine, the other results not ours), whatever that request's COMPOUND status was
CACHED_FOR_ANOTHER = [
    pytest.param(c.NFS4ERR_SEQ_FALSE_RETRY, c.NFS4ERR_SEQ_FALSE_RETRY, False, id="SEQ_FALSE_RETRY"),
    pytest.param(c.NFS4_OK, c.NFS4_OK, True, id="foreign-OK"),
    pytest.param(c.NFS4_OK, c.NFS4ERR_NOENT, True, id="foreign-NOENT"),
    pytest.param(c.NFS4_OK, c.NFS4ERR_RETRY_UNCACHED_REP, True, id="foreign-UNCACHED"),
]


@pytest.mark.parametrize("tries", [1, 2])
@pytest.mark.parametrize("idempotent", [False, True])
@pytest.mark.parametrize(("status", "compound", "foreign"), CACHED_FOR_ANOTHER)
def test_after_a_step_back_a_reply_cached_for_another_request_sends_it_again_as_a_new_one(
    status: int, compound: int, foreign: bool, idempotent: bool, tries: int
) -> None:
    # the interrupted request reached the server between the SEQ_MISORDERED and the step back's
    # send: this request was taken for its retry and not executed, so it goes on the next sequence
    # id, whatever it does, a few times at most
    a = stepped_back()
    for _ in range(MAX_FALSE_RETRY):
        d = on_sequence(status, compound, tries=tries, idempotent=idempotent, interrupted=False, attempts=a,
                        foreign=foreign)
        assert d.act is Act.AGAIN and d.status == c.NFS4ERR_SEQ_FALSE_RETRY
    assert a.false_retries == MAX_FALSE_RETRY
    # then, as without a step back
    assert seq(status, compound, tries=tries, idempotent=idempotent, attempts=a, foreign=foreign) is (
        Act.VIOLATION if foreign else Act.LOST)


@pytest.mark.parametrize("interrupted", [False, True])
@pytest.mark.parametrize("tries", [1, 2])
@pytest.mark.parametrize("idempotent", [False, True])
@pytest.mark.parametrize(("status", "compound", "foreign"), CACHED_FOR_ANOTHER)
def test_without_a_step_back_a_reply_cached_for_another_request_is_never_licence_to_run_it_again(
    status: int, compound: int, foreign: bool, idempotent: bool, tries: int, interrupted: bool
) -> None:
    # (a hostile or corrupted reply, or a slot whose bookkeeping went wrong): a reply that does not
    # answer the request breaks the protocol; a server's SEQ_FALSE_RETRY loses the session
    a = Attempts(uncached=1, delays=3, badslot=1)  # (other attempts do not count)
    for _ in range(MAX_FALSE_RETRY + 1):
        assert seq(status, compound, tries=tries, idempotent=idempotent, interrupted=interrupted, attempts=a,
                   foreign=foreign) is (Act.VIOLATION if foreign else Act.LOST)
    assert a.false_retries == 0


def test_compound_delay_and_grace_resend_after_a_pause_and_grace_ends_in_time() -> None:
    a = Attempts()
    d = on_compound(c.NFS4ERR_DELAY, recovering=False, attempts=a)
    assert d.act is Act.RESEND and d.wait == 0.1
    a = Attempts()
    waited = 0.0
    while True:
        d = on_compound(c.NFS4ERR_GRACE, recovering=False, attempts=a)
        if d.act is not Act.RESEND:
            break
        waited += d.wait
    assert d.act is Act.DONE and d.status == c.NFS4ERR_GRACE  # the caller gets the error
    assert MAX_GRACE_WAIT <= waited < MAX_GRACE_WAIT + 3


@pytest.mark.parametrize("status", [c.NFS4ERR_DELAY, c.NFS4ERR_GRACE])
def test_a_soft_request_pauses_for_the_server_only_within_its_time(status: int) -> None:
    """A soft request has ``time_left``: the server's DELAY and GRACE are waited out while that lasts
    (no more: a server saying DELAY forever holds a soft call no longer than its deadline); then the
    COMPOUND's status stands, and SEQUENCE's DELAY fails the request (its slot marked interrupted)."""
    a = Attempts()
    waited = 0.0
    while (d := on_compound(status, recovering=False, attempts=a, time_left=4.0 - waited)).act is Act.RESEND:
        waited += d.wait
    assert d.act is Act.DONE and d.status == status and 2.0 < waited < 4.0
    a = Attempts()
    waited = 0.0
    while (d := on_sequence(c.NFS4ERR_DELAY, c.NFS4ERR_DELAY, tries=1, idempotent=False, interrupted=False,
                            attempts=a, time_left=4.0 - waited)).act is Act.RESEND:
        waited += d.wait
    assert d.act is Act.OUT_OF_TIME and d.status == c.NFS4ERR_DELAY and 1.5 < waited < 4.0
    assert on_compound(status, recovering=False, attempts=Attempts(), time_left=None).act is Act.RESEND


@pytest.mark.parametrize("status", sorted(CLIENT_LOST))
def test_compound_client_lost_recovers_unless_recovering_and_not_forever(status: int) -> None:
    assert on_compound(status, recovering=True, attempts=Attempts()).act is Act.DONE
    a = Attempts()
    assert [on_compound(status, recovering=False, attempts=a).act for _ in range(4)] == [
        Act.NEW_CLIENT, Act.NEW_CLIENT, Act.NEW_CLIENT, Act.DONE]


@pytest.mark.parametrize(
    "status", sorted(int(s) for s in c.nfsstat4 if int(s) not in {c.NFS4ERR_DELAY, c.NFS4ERR_GRACE, *CLIENT_LOST})
)
def test_every_other_compound_status_stands(status: int) -> None:
    assert on_compound(status, recovering=False, attempts=Attempts()).act is Act.DONE


def test_every_status_flag_has_its_action() -> None:
    assert flag_actions(0) == []
    assert flag_actions(c.SEQ4_STATUS_RESTART_RECLAIM_NEEDED) == [FlagAction.RECLAIM]
    for bit in (c.SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED, c.SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED,
                c.SEQ4_STATUS_ADMIN_STATE_REVOKED, c.SEQ4_STATUS_RECALLABLE_STATE_REVOKED):
        assert flag_actions(bit) == [FlagAction.STATE_REVOKED]
    for bit in (c.SEQ4_STATUS_CB_PATH_DOWN, c.SEQ4_STATUS_CB_PATH_DOWN_SESSION):
        assert flag_actions(bit) == [FlagAction.BIND_BACKCHANNEL]
    assert flag_actions(c.SEQ4_STATUS_LEASE_MOVED) == [FlagAction.LEASE_MOVED]
    everything = (c.SEQ4_STATUS_RESTART_RECLAIM_NEEDED | c.SEQ4_STATUS_ADMIN_STATE_REVOKED
                  | c.SEQ4_STATUS_CB_PATH_DOWN | c.SEQ4_STATUS_LEASE_MOVED)
    assert flag_actions(everything) == list(FlagAction)
    # flags that ask nothing of us (informational: backchannel faults, devid changes)
    quiet = c.SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRING | c.SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRED | \
        c.SEQ4_STATUS_BACKCHANNEL_FAULT | c.SEQ4_STATUS_DEVID_CHANGED | c.SEQ4_STATUS_DEVID_DELETED
    assert flag_actions(quiet) == []


# RETRY_UNCACHED_REP, in SEQUENCE or in the COMPOUND's first operation after it
UNCACHED = [
    pytest.param(c.NFS4ERR_RETRY_UNCACHED_REP, c.NFS4ERR_RETRY_UNCACHED_REP, id="in-SEQUENCE"),
    pytest.param(c.NFS4_OK, c.NFS4ERR_RETRY_UNCACHED_REP, id="after-SEQUENCE"),
]


@pytest.mark.parametrize("tries", [1, 2, 3])
@pytest.mark.parametrize("idempotent", [False, True])
@pytest.mark.parametrize(("status", "compound"), UNCACHED)
def test_after_a_step_back_an_uncached_reply_to_a_request_sent_once_is_a_false_retry(
    status: int, compound: int, idempotent: bool, tries: int
) -> None:
    # the interrupted request (a READ, whose reply is not cached) reached the server first: a CLOSE
    # sent once with its sequence id was taken for its retry and not executed; it goes again on the
    # next sequence id, a few times at most, whatever its earlier sends under other sequence ids
    a = stepped_back()
    for _ in range(MAX_FALSE_RETRY):
        d = on_sequence(status, compound, tries=tries, idempotent=idempotent, interrupted=False, attempts=a,
                        resent=False)
        assert d.act is Act.AGAIN and d.status == c.NFS4ERR_SEQ_FALSE_RETRY
    assert a.false_retries == MAX_FALSE_RETRY
    # then as without a step back: only a resent idempotent request is run again
    want = Act.AGAIN if (tries > 1 and idempotent) else (Act.DONE if status == c.NFS4_OK else Act.FAIL)
    assert seq(status, compound, tries=tries, idempotent=idempotent, attempts=a) is want


@pytest.mark.parametrize("idempotent", [False, True])
@pytest.mark.parametrize(("status", "compound"), UNCACHED)
def test_an_uncached_reply_to_a_sequence_id_sent_twice_is_not_taken_for_a_false_retry(
    status: int, compound: int, idempotent: bool
) -> None:
    # sent twice with the stepped-back sequence id, the first send may be the one the server ran
    a = stepped_back()
    d = on_sequence(status, compound, tries=2, idempotent=idempotent, interrupted=False, attempts=a, resent=True)
    assert a.false_retries == 0
    assert d.act is (Act.AGAIN if idempotent else (Act.DONE if status == c.NFS4_OK else Act.FAIL))
    assert d.status != c.NFS4ERR_SEQ_FALSE_RETRY


def _attempts_seen() -> list[Attempts]:
    """What a request may have met before a reply: nothing, or each limit reached."""
    return [Attempts(), Attempts(misordered=MAX_MISORDERED, false_retries=0),
            Attempts(misordered=1, false_retries=MAX_FALSE_RETRY, uncached=MAX_UNCACHED, delays=9, badslot=MAX_BADSLOT,
                     client_lost=9, grace_waited=MAX_GRACE_WAIT, sessions_lost=9)]


STATUSES = sorted({int(s) for s in c.nfsstat4})


@pytest.mark.parametrize("compound", STATUSES)
def test_what_settles_a_reply_at_once_is_what_the_table_calls_done_whatever_came_before(compound: int) -> None:
    # the session skips the machine on a reply settles() settles: the table must agree for every
    # status, every try, and whatever the request met; and settle nothing it would act on
    for status in STATUSES:
        if not settles(status, compound):
            continue
        for attempts in _attempts_seen():
            for tries in (1, 2):
                for interrupted in (False, True):
                    for idempotent in (False, True):
                        d = on_sequence(status, compound, tries=tries, idempotent=idempotent, interrupted=interrupted,
                                        attempts=attempts, resent=tries > 1, time_left=0.0)
                        assert d.act is Act.DONE, (status, compound, attempts, tries)
    assert settles(c.NFS4_OK, compound) is (compound != c.NFS4ERR_RETRY_UNCACHED_REP)


@pytest.mark.parametrize("status", STATUSES)
def test_what_finishes_a_compound_at_once_is_what_the_table_calls_done_whatever_came_before(status: int) -> None:
    decided = [on_compound(status, recovering=recovering, attempts=attempts, time_left=time_left).act
               for recovering in (False, True) for attempts in _attempts_seen() for time_left in (None, 10.0)]
    if finishes(status):
        assert set(decided) == {Act.DONE}
    else:
        assert status in RETRY_LATER or status in CLIENT_LOST
        assert Act.DONE not in decided[:1]  # (a fresh request of no recovery acts on it)
