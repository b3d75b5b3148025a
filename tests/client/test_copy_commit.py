"""The decisions on a COPY's reply and the COMMIT after it (_client/copy_commit.py), for every count
(none, some), every stable_how4, the COMMIT's verifier the COPY's or another, every count of verifier
changes up to past the limit."""

from __future__ import annotations

import itertools

import pytest

from pynfsrdma._client.copy_commit import COPY_ATTEMPTS, CopyThen, on_commit, on_copy_reply
from pynfsrdma._proto.nfs4 import const as c

HOW = (c.UNSTABLE4, c.DATA_SYNC4, c.FILE_SYNC4)


@pytest.mark.parametrize("count,committed", list(itertools.product((0, 1, 1 << 20), HOW)))
def test_every_reply(count: int, committed: int) -> None:
    then = on_copy_reply(count, committed)
    if count == 0:
        assert then is CopyThen.END_OF_SOURCE  # whatever it says of how nothing was committed
    elif committed == c.UNSTABLE4:
        assert then is CopyThen.COMMIT
    else:
        assert then is CopyThen.COPIED


@pytest.mark.parametrize("same,changes", list(itertools.product((False, True), range(COPY_ATTEMPTS + 1))))
def test_every_commit(same: bool, changes: int) -> None:
    then = on_commit(same, changes=changes)
    if same:
        assert then is CopyThen.COPIED
    elif changes + 1 < COPY_ATTEMPTS:
        assert then is CopyThen.COPY_AGAIN
    else:
        assert then is CopyThen.FAIL


def test_a_verifier_that_keeps_changing_is_copied_again_copy_attempts_minus_one_times_then_fails() -> None:
    assert [on_commit(False, changes=n) for n in range(COPY_ATTEMPTS)] == (
        [CopyThen.COPY_AGAIN] * (COPY_ATTEMPTS - 1) + [CopyThen.FAIL]
    )
