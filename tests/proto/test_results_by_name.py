"""A COMPOUND's results are read by the operation they answer, not by their place in the reply."""

from __future__ import annotations

import pytest

from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import ResOp, result_of, results_of


def test_the_result_of_an_operation_is_found_by_its_number() -> None:
    res = [ResOp(c.OP_PUTFH, c.NFS4_OK), ResOp(c.OP_OPEN, c.NFS4_OK, "open"), ResOp(c.OP_GETFH, c.NFS4_OK, "fh"),
           ResOp(c.OP_GETATTR, c.NFS4_OK, "stat"), ResOp(c.OP_GETATTR, c.NFS4_OK, "fs")]
    assert result_of(res, c.OP_OPEN) == "open"
    assert result_of(res, c.OP_GETFH) == "fh"
    assert result_of(res, c.OP_GETATTR) == "fs"  # the last of several
    assert results_of(res, c.OP_GETATTR) == ["stat", "fs"]
    assert results_of(res, c.OP_READ) == []


def test_a_reply_that_stopped_before_the_operation_has_no_result_of_it() -> None:
    res = [ResOp(c.OP_PUTFH, c.NFS4_OK), ResOp(c.OP_LOOKUP, c.NFS4ERR_NOENT)]
    with pytest.raises(LookupError):
        result_of(res, c.OP_GETFH)
