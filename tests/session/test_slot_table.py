"""The slot table's rules, without any I/O (RFC 8881 section 2.10.6)."""

from __future__ import annotations

import pytest

from pynfsrdma._session.slot_table import Arrival, SlotTable, arrival


def test_slots_are_handed_out_lowest_first_and_bounded() -> None:
    t = SlotTable(3)
    slots = [t.try_acquire() for _ in range(4)]
    assert [s.slotid if s else None for s in slots] == [0, 1, 2, None]
    t.release(slots[1], completed=True)
    again = t.try_acquire()
    assert again is not None and again.slotid == 1


def test_the_highest_slot_in_use_follows_the_slots_taken_and_released() -> None:
    t = SlotTable(4)
    assert t.highest_in_use == -1
    a, b = t.take(), t.take()
    c = t.try_acquire()
    assert a is not None and b is not None and c is not None
    assert t.highest_in_use == 2
    t.release(c, completed=True)
    assert t.highest_in_use == 1
    t.release(a, completed=False)
    assert t.highest_in_use == 1
    again = t.take()  # (the slot freed last comes first: slot 0)
    assert again is not None and again.slotid == 0 and t.highest_in_use == 1
    t.release(b, completed=True)
    assert t.highest_in_use == 0
    t.release(again, completed=True)
    assert t.highest_in_use == -1


def test_sequence_ids_advance_per_slot_and_wrap_past_zero() -> None:
    t = SlotTable(2)
    s = t.try_acquire()
    assert s is not None
    assert t.begin(s) == 1
    t.release(s, completed=True)
    s = t.try_acquire()
    assert s is not None and t.begin(s) == 2
    s.seqid = 0xFFFFFFFF
    assert t.begin(s) == 1  # 0 is skipped on wrap-around


def test_an_interrupted_slot_never_reuses_its_sequence_id() -> None:
    t = SlotTable(1)
    s = t.try_acquire()
    assert s is not None
    first = t.begin(s)
    t.release(s, completed=False)  # the reply never came: the server may have cached it
    s = t.try_acquire()
    assert s is not None and s.interrupted
    second = t.begin(s)
    assert second == first + 1  # a new request must not be answered from the old cached reply
    # the server says SEQ_MISORDERED: it never saw `first`, so the new request goes with it
    assert t.misordered(s) is True
    assert t.begin(s) == first
    # a second SEQ_MISORDERED is not explained by an interruption
    assert t.misordered(s) is False


def test_target_highest_slotid_shrinks_and_grows_the_usable_table() -> None:
    t = SlotTable(8)
    t.update_from_server(highest_slotid=7, target_highest_slotid=1)
    got = [t.try_acquire() for _ in range(3)]
    assert [g.slotid if g else None for g in got] == [0, 1, None]
    t.update_from_server(highest_slotid=7, target_highest_slotid=3)
    more = t.try_acquire()
    assert more is not None and more.slotid == 2
    # the server cannot grow us past what CREATE_SESSION granted
    t.update_from_server(highest_slotid=100, target_highest_slotid=100)
    assert t.limit == 8


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError):
        SlotTable(0)


def test_reads_of_extended_attributes_are_not_kept_in_the_reply_cache() -> None:
    """GETXATTR and LISTXATTRS only read (a value may be 64 KiB: the Linux nfsd refused to cache one
    with NFS4ERR_REP_TOO_BIG_TO_CACHE), so they go with sa_cachethis false; changes are cached."""
    from pynfsrdma._proto.nfs4.types import (
        GETXATTR4args,
        LISTXATTRS4args,
        PUTFH4args,
        REMOVEXATTR4args,
        SETXATTR4args,
    )
    from pynfsrdma._session.session import is_idempotent

    fh = PUTFH4args(b"fh")
    assert is_idempotent([fh, GETXATTR4args("k")])
    assert is_idempotent([fh, LISTXATTRS4args(0, 4096)])
    assert not is_idempotent([fh, SETXATTR4args(0, "k", b"v")])
    assert not is_idempotent([fh, REMOVEXATTR4args("k")])


def test_a_refused_request_gives_its_sequence_id_back() -> None:
    table = SlotTable(2)
    slot = table.try_acquire()
    assert slot is not None
    first = table.begin(slot)
    table.refused(slot)  # BADSLOT: the server never counted it
    assert table.begin(slot) == first
    table.refused(slot)
    table.release(slot, completed=True)
    again = table.try_acquire()
    assert again is slot and table.begin(again) == first


@pytest.mark.parametrize(
    ("last", "cached", "seqid", "expected"),
    [
        (0, False, 1, Arrival.NEW),
        (5, True, 6, Arrival.NEW),
        (5, True, 5, Arrival.RETRY),
        (5, False, 5, Arrival.MISORDERED),  # a retry of a request whose reply we did not keep
        (5, True, 7, Arrival.MISORDERED),
        (5, True, 4, Arrival.MISORDERED),
        (0xFFFFFFFF, True, 0, Arrival.NEW),  # the sequence id wraps
        (0xFFFFFFFF, True, 0xFFFFFFFF, Arrival.RETRY),
    ],
)
def test_a_back_channel_request_is_new_a_retry_or_misordered(last: int, cached: bool, seqid: int,
                                                              expected: Arrival) -> None:
    assert arrival(last, cached, seqid) is expected
