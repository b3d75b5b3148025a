"""The decisions on a request whose stateid the server refused (_client/lost_state.py), for every
NFSv4 status, stateid replaced or not, every count of reopens up to past the limit."""

from __future__ import annotations

import itertools

import pytest

from pynfsrdma._client.lost_state import MAX_REOPENS, Then, on_stateid_error
from pynfsrdma._proto.nfs4 import const as c

BOOLS = (False, True)
GONE = {c.NFS4ERR_STALE_STATEID, c.NFS4ERR_BAD_STATEID, c.NFS4ERR_EXPIRED, c.NFS4ERR_ADMIN_REVOKED}
CASES = list(itertools.product(
    [int(s) for s in c.nfsstat4], BOOLS, range(MAX_REOPENS + 2), BOOLS
))


@pytest.mark.parametrize("status,replaced,reopens,can_reopen", CASES)
def test_every_status(status: int, replaced: bool, reopens: int, can_reopen: bool) -> None:
    then = on_stateid_error(status, replaced=replaced, reopens=reopens, can_reopen=can_reopen)
    if status in (c.NFS4ERR_STALE_STATEID, c.NFS4ERR_BAD_STATEID) and replaced:
        assert then is Then.RESEND  # reclaimed while it waited: again with the new stateid, no OPEN
    elif status in GONE and can_reopen and reopens < MAX_REOPENS:
        assert then is Then.REOPEN
    else:
        assert then is Then.FAIL


def test_an_open_the_server_keeps_losing_is_made_again_at_most_max_reopens_times() -> None:
    thens = [on_stateid_error(c.NFS4ERR_EXPIRED, replaced=False, reopens=n, can_reopen=True)
             for n in range(MAX_REOPENS + 1)]
    assert thens == [Then.REOPEN] * MAX_REOPENS + [Then.FAIL]
