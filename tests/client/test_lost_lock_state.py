"""The decisions on a LOCK the server refused (_client/lost_lock_state.py), for every NFSv4 status,
denied or not, every count of attempts up to past the limit, stateid replaced or not, ranges held or
not, sent with a lock stateid or with the open's."""

from __future__ import annotations

import itertools

import pytest

from pynfsrdma._client.lost_lock_state import LOCK_ATTEMPTS, LockThen, on_lock_error
from pynfsrdma._proto.nfs4 import const as c

BOOLS = (False, True)
GONE = {c.NFS4ERR_STALE_STATEID, c.NFS4ERR_BAD_STATEID, c.NFS4ERR_EXPIRED, c.NFS4ERR_ADMIN_REVOKED}


@pytest.mark.parametrize("status", [int(s) for s in c.nfsstat4])
def test_every_status(status: int) -> None:
    for denied, attempts, replaced, holds, has_stateid in itertools.product(
        BOOLS, range(1, LOCK_ATTEMPTS + 2), BOOLS, BOOLS, BOOLS
    ):
        then = on_lock_error(status, denied=denied, attempts=attempts, replaced=replaced, holds_ranges=holds,
                             has_lock_stateid=has_stateid)
        if denied or status not in GONE or attempts >= LOCK_ATTEMPTS:
            expected = LockThen.FAIL  # a conflict, another error, or asked often enough
        elif replaced:
            expected = LockThen.RESEND  # reclaimed while it waited: again with the new stateid
        elif holds:
            expected = LockThen.LOSE  # the locks it held went with the state: never taken again silently
        elif has_stateid:
            expected = LockThen.NEW_LOCK_OWNER  # an empty lock state gone: the owner introduced again
        else:
            expected = LockThen.FAIL  # sent with the open's stateid: the open is gone
        assert then is expected, (denied, attempts, replaced, holds, has_stateid)


def test_a_lock_state_the_server_keeps_losing_is_asked_for_at_most_lock_attempts_times() -> None:
    thens = [on_lock_error(c.NFS4ERR_EXPIRED, denied=False, attempts=n, replaced=False, holds_ranges=False,
                           has_lock_stateid=True) for n in range(1, LOCK_ATTEMPTS + 1)]
    assert thens == [LockThen.NEW_LOCK_OWNER] * (LOCK_ATTEMPTS - 1) + [LockThen.FAIL]


def test_a_denied_lock_is_never_retried_here_whatever_else_holds() -> None:
    for replaced, holds, has_stateid in itertools.product(BOOLS, BOOLS, BOOLS):
        assert on_lock_error(c.NFS4ERR_DENIED, denied=True, attempts=1, replaced=replaced, holds_ranges=holds,
                             has_lock_stateid=has_stateid) is LockThen.FAIL
