"""The open-file engine's planner (_client/write_plan.py), without I/O: what writes become, when a
COMMIT is due, what a changed write verifier sends again, and that payload bytes are never copied
on the way except where small writes are joined into one WRITE."""

from __future__ import annotations

import pytest

from pynfsrdma._client.write_plan import WritePlan
from pynfsrdma._proto.nfs4 import const as c

WSIZE = 1 << 20


def test_small_sequential_writes_gather_into_one_wsize_write() -> None:
    plan = WritePlan(WSIZE)
    piece = b"x" * 4096
    sends = [s for i in range(256) for s in plan.write(i * 4096, piece)]
    assert len(sends) == 1 and sends[0].offset == 0 and sends[0].size == WSIZE
    assert not plan.gathered_end and plan.bytes_accepted == WSIZE and plan.end == WSIZE


def test_a_write_that_does_not_follow_sends_what_was_gathered_first() -> None:
    plan = WritePlan(WSIZE)
    assert plan.write(0, b"a" * 10) == []
    sends = plan.write(100, b"b" * 10)
    assert [(s.offset, bytes(s.data)) for s in sends] == [(0, b"a" * 10)]
    assert plan.gathered_end == 110


def test_large_writes_go_by_reference_and_a_lone_piece_is_not_copied() -> None:
    plan = WritePlan(WSIZE)
    big = bytes(2 * WSIZE)
    (send,) = plan.write(0, big)
    assert send.data is big  # (the engine cuts it into wsize views of this very object)
    small = b"y" * 100
    plan.write(2 * WSIZE, small)
    assert plan.take_run().data is small
    plan.write(0, b"1")
    plan.write(1, b"2")
    assert plan.take_run().data == b"12"  # (several small pieces: joined, the one copy there is)


def test_unstable_data_is_kept_until_a_commit_and_a_changed_verifier_sends_it_again() -> None:
    plan = WritePlan(WSIZE, commit_window=3 * WSIZE)
    data = [bytes([i]) * WSIZE for i in range(3)]
    for i, d in enumerate(data):
        (send,) = plan.write(i * WSIZE, d)
        plan.write_started()
        plan.answered(send.offset, send.data, c.UNSTABLE4, b"v1" if i < 2 else b"v2")
        plan.write_ended()
    assert plan.commit_due and plan.dirty
    pending = plan.commit_begins()
    assert len(pending) == 3 and not plan.commit_due
    resend = plan.commit_answered(b"v2")  # the server restarted after the first two WRITEs
    assert [(s.offset, s.data) for s in resend] == [(0, data[0]), (WSIZE, data[1])]
    assert not plan.dirty


def test_a_failed_commit_keeps_its_pieces_for_the_next_and_stable_answers_need_none() -> None:
    plan = WritePlan(WSIZE)
    plan.answered(0, b"a", c.UNSTABLE4, b"v")
    plan.answered(1, b"b", c.FILE_SYNC4, b"v")
    plan.answered(2, b"c", c.DATA_SYNC4, b"v")
    assert plan.commit_begins()[0].data == b"a"
    plan.commit_failed()
    assert [p.data for p in plan.uncommitted] == [b"a"] and plan.uncommitted_bytes == 1


def test_a_small_file_goes_file_sync_with_its_attributes_and_the_times_set_after_its_data() -> None:
    plan = WritePlan(WSIZE)
    plan.write(0, b"hello")
    assert plan.defer({"mtime_ns": 5})
    changes, send = plan.take_setattrs()
    assert changes == {"mtime_ns": 5} and send is not None
    assert (send.stable, send.with_attrs, send.setattrs, bytes(send.data)) == (
        c.FILE_SYNC4, True, {"mtime_ns": 5}, b"hello")
    plan.write(0, b"again")
    final = plan.final_send()
    assert final is not None and final.stable == c.FILE_SYNC4 and final.with_attrs


def test_changes_wait_with_the_data_only_while_it_is_a_sole_run() -> None:
    plan = WritePlan(WSIZE)
    assert not plan.defer({"mode": 0o600})  # (no data)
    plan.write(0, b"x")
    plan.write_started()  # something else on its way
    assert not plan.defer({"mode": 0o600})
    plan.write_ended()
    assert plan.defer({"mode": 0o600})
    (first,) = plan.write(5, b"y")  # a write elsewhere: the gathered data goes on its own ...
    plan.write_started()
    changes, send = plan.take_setattrs()  # ... and the changes wait for it, then go by themselves
    assert bytes(first.data) == b"x" and changes == {"mode": 0o600} and send is None


def test_the_sole_run_taken_by_a_caller_comes_back_with_what_was_not_written() -> None:
    plan = WritePlan(WSIZE)
    plan.write(0, b"abcdef")
    sole = plan.take_sole()
    assert sole == (0, b"abcdef") and plan.held and plan.unsent
    plan.give_back((4, b"ef"))  # a short WRITE: two bytes left
    assert not plan.held and plan.gathered_end == 6 and plan.take_run().data == b"ef"
    assert plan.take_sole() is None  # (nothing gathered)


def test_the_plan_counts_its_writes_in_flight_and_refuses_an_end_without_a_start() -> None:
    plan = WritePlan(WSIZE)
    (send,) = plan.write(0, b"x" * WSIZE)
    plan.write_started()
    assert plan.in_flight == 1 and plan.unsent and not plan.sole_run()
    plan.answered(send.offset, send.data, c.FILE_SYNC4, b"v")
    plan.write_ended()
    assert plan.in_flight == 0 and not plan.dirty
    with pytest.raises(RuntimeError, match="a WRITE ended that never started"):
        plan.write_ended()
    assert plan.in_flight == 0
