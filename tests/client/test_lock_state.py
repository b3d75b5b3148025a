"""The lock bookkeeping without I/O (_client/locks.py): ranges as POSIX and the server keep them, NFS and
POSIX ranges and types, lock stateids as the server moves them on, lock owners by key and by name."""

from __future__ import annotations

import errno
import fcntl
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynfsrdma._client.locks import (
    OFFSET_MAX,
    TO_EOF,
    LockConflict,
    LockDenied,
    LockLost,
    LockRanges,
    LockTable,
    newer,
    nfs_lock_type,
    nfs_range,
    posix_lock_type,
    posix_range,
)
from pynfsrdma._client.nfs4 import OpenFile
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.types import LOCK4denied, lock_owner4, stateid4

R, W = c.READ_LT, c.WRITE_LT


def test_posix_and_nfs_ranges_convert_both_ways() -> None:
    assert nfs_range(0, OFFSET_MAX) == (0, TO_EOF)  # F_SETLK with l_len 0: the whole file, however it grows
    assert nfs_range(100, OFFSET_MAX) == (100, TO_EOF)
    assert nfs_range(10, 19) == (10, 10)
    assert nfs_range(5, 5) == (5, 1)
    assert posix_range(0, TO_EOF) == (0, OFFSET_MAX)
    assert posix_range(10, 10) == (10, 19)
    assert posix_range(1 << 62, 1 << 63) == (1 << 62, OFFSET_MAX)  # past what POSIX can say: to its end
    for bad in ((-1, 5), (10, 9)):
        with pytest.raises(ValueError):
            nfs_range(*bad)


@given(st.integers(0, OFFSET_MAX), st.integers(0, OFFSET_MAX))
def test_a_posix_range_survives_the_trip_through_nfs(a: int, b: int) -> None:
    start, end = min(a, b), max(a, b)
    assert posix_range(*nfs_range(start, end)) == (start, end)


def test_lock_types() -> None:
    assert nfs_lock_type(fcntl.F_RDLCK) == R and nfs_lock_type(fcntl.F_WRLCK) == W
    assert posix_lock_type(c.READW_LT) == fcntl.F_RDLCK and posix_lock_type(c.WRITEW_LT) == fcntl.F_WRLCK
    with pytest.raises(ValueError):
        nfs_lock_type(fcntl.F_UNLCK)


def test_ranges_merge_split_and_change_type_as_posix_locks_do() -> None:
    r = LockRanges()
    r.add(0, 10, R)
    r.add(10, 10, c.READW_LT)  # adjacent, same type: one range (the blocking form is the same lock)
    assert list(r) == [(0, 20, R)]
    r.add(5, 5, W)  # an upgrade of the middle splits the read lock
    assert list(r) == [(0, 5, R), (5, 5, W), (10, 10, R)]
    r.add(5, 5, R)  # and the downgrade joins it again
    assert list(r) == [(0, 20, R)]
    r.add(100, TO_EOF, W)
    r.remove(150, 10)  # an unlock inside a lock to end of file leaves two
    assert list(r) == [(0, 20, R), (100, 50, W), (160, TO_EOF, W)]
    assert not r.covered_by(0, 20) and r.covered_by(0, TO_EOF)
    held, gaps = r.within(10, 145)  # what is held under 10..154 and what is not
    assert held == [(10, 10, R), (100, 50, W)]
    assert gaps == [(20, 80), (150, 5)]
    assert r.within(170, TO_EOF) == ([(170, TO_EOF, W)], [])
    r.remove(0, TO_EOF)
    assert not r and list(r) == []
    with pytest.raises(ValueError):
        r.add(0, 0, W)  # NFS has no lock of length 0 (the server says NFS4ERR_INVAL)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.integers(1, 12), st.sampled_from([R, W])),
                max_size=30))
def test_ranges_hold_what_a_byte_by_byte_model_holds(ops: list[tuple[bool, int, int, int]]) -> None:
    r = LockRanges()
    model: dict[int, int] = {}
    for lock, offset, length, t in ops:
        if lock:
            r.add(offset, length, t)
            model.update(dict.fromkeys(range(offset, offset + length), t))
        else:
            r.remove(offset, length)
            for b in range(offset, offset + length):
                model.pop(b, None)
    seen: dict[int, int] = {}
    previous_end, previous_type = -1, 0
    for offset, length, t in r:
        assert offset > previous_end or t != previous_type  # neighbours of one type are merged
        seen.update(dict.fromkeys(range(offset, offset + length), t))
        previous_end, previous_type = offset + length, t
    assert seen == model


def test_a_lock_state_keeps_the_newest_stateid_the_server_returned() -> None:
    table = LockTable()
    of = OpenFile(b"fh", stateid4(1, b"open--------"), c.OPEN4_SHARE_ACCESS_BOTH, b"o")
    s = table.state(of, "key")
    assert s.locker(7) == (True, s.locker(7)[1]) and s.locker(7)[1].open_stateid == of.stateid
    assert s.locker(7)[1].lock_owner == lock_owner4(7, s.owner.name)
    s.granted(stateid4(1, b"lock--------"), 0, 10, W)
    s.took(stateid4(3, b"lock--------"))
    s.took(stateid4(2, b"lock--------"))  # a late reply: not taken
    assert s.stateid == stateid4(3, b"lock--------")
    assert s.locker(7) == (False, s.locker(7)[1]) and s.locker(7)[1].lock_stateid == s.stateid
    assert newer(1, 0xFFFFFFFF) and not newer(0xFFFFFFFF, 1)  # seqids wrap
    s.lose("the server restarted")
    assert s.stateid is None
    with pytest.raises(LockLost) as ei:
        s.check("/f")
    assert ei.value.errno == errno.EIO and ei.value.filename == "/f"


def test_owners_by_key_and_name_and_forgotten_with_their_last_state() -> None:
    table = LockTable()
    of1 = OpenFile(b"f1", stateid4(1, bytes(12)), c.OPEN4_SHARE_ACCESS_READ, b"o")
    of2 = OpenFile(b"f2", stateid4(1, bytes(12)), c.OPEN4_SHARE_ACCESS_READ, b"o")
    a1, a2, b1 = table.state(of1, 1), table.state(of2, 1), table.state(of1, 2)
    assert table.state(of1, 1) is a1 and table.get(of2, 1) is a2 and table.get(of2, 2) is None
    assert a1.owner is a2.owner and a1.owner.name != b1.owner.name  # one owner per key, on every file
    assert table.owner_by_name(a1.owner.name) is a1.owner
    assert table.owner_name(3) not in (a1.owner.name, b1.owner.name)  # (a key that holds nothing)
    assert table.of_open(of1) == [a1, b1] and len(table) == 3
    assert not table.stateid_of_open(of1)  # (no LOCK answered yet)
    b1.stateid = stateid4(1, b"lock--------")
    assert table.stateid_of_open(of1) and not table.stateid_of_open(of2)
    table.forget(a1)
    assert table.of_open(of1) == [b1] and table.of_open(of2) == [a2]
    assert table.owner_by_name(a2.owner.name) is a2.owner  # still has a state on f2
    table.forget(a2)
    table.forget(a2)  # (twice: nothing more happens)
    assert table.owner_by_name(a1.owner.name) is None and table.owner_name(1) != a1.owner.name
    assert table.all() == [b1] and table.of_open(of2) == [] and not table.stateid_of_open(of2)
    table.forget(b1)
    assert table.of_open(of1) == [] and not table.stateid_of_open(of1) and len(table) == 0


def test_lock_denied_is_eagain_and_carries_the_conflict() -> None:
    owner = lock_owner4(5, b"them")
    conflict = LockConflict.from_denied(LOCK4denied(10, 0, c.WRITEW_LT, owner))
    assert conflict == LockConflict(10, TO_EOF, W, owner)  # (a length of 0 reads as "to end of file")
    assert conflict.end == OFFSET_MAX and conflict.posix_type == fcntl.F_WRLCK
    e = LockDenied(conflict, path="/f")
    assert isinstance(e, BlockingIOError) and e.errno == errno.EAGAIN and e.status == c.NFS4ERR_DENIED
    assert str(e) == "/f: Resource temporarily unavailable (NFS4ERR_DENIED)"
    back = pickle.loads(pickle.dumps(e))
    assert isinstance(back, LockDenied) and back.conflict == conflict and back.path == "/f"
