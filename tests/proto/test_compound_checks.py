"""A COMPOUND reply is checked against its request as RFC 8881 says replies are made: what a client
would otherwise do with a reply that breaks the rules is index a missing result, read the wrong
operation's fields, or take a short READ for the whole file."""

from __future__ import annotations

from typing import Any

import pytest

from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import (
    COMPOUND4res,
    CompoundMismatch,
    ResOp,
    check_compound_res,
    decode_compound_res,
    encode_compound_res,
)
from pynfsrdma._proto.nfs4.types import (
    GETATTR4args,
    GETATTR4resok,
    GETFH4args,
    GETFH4resok,
    LOOKUP4args,
    PUTFH4args,
    READ4args,
    READ4resok,
    READDIR4args,
    READDIR4resok,
    WRITE4args,
    WRITE4resok,
    dirlist4,
    entry4,
    fattr4,
    stateid4,
)
from pynfsrdma._xdr import Packer, Unpacker, XdrError

SID = stateid4(0, bytes(12))
LOOKUP_OPS = [PUTFH4args(b"fh"), LOOKUP4args("x"), GETFH4args(), GETATTR4args([1])]


def ok(*results: ResOp, status: int = c.NFS4_OK) -> COMPOUND4res:
    return COMPOUND4res(status, "", list(results))


def lookup_results() -> list[ResOp]:
    return [
        ResOp(c.OP_PUTFH, c.NFS4_OK),
        ResOp(c.OP_LOOKUP, c.NFS4_OK),
        ResOp(c.OP_GETFH, c.NFS4_OK, GETFH4resok(b"fh2")),
        ResOp(c.OP_GETATTR, c.NFS4_OK, GETATTR4resok(fattr4([], b""))),
    ]


def mismatch(ops: list[Any], res: COMPOUND4res, match: str) -> CompoundMismatch:
    with pytest.raises(CompoundMismatch, match=match) as e:
        check_compound_res(ops, res)
    return e.value


def test_a_whole_reply_passes() -> None:
    check_compound_res(LOOKUP_OPS, ok(*lookup_results()))


def test_a_failed_operation_ends_the_reply_with_its_status() -> None:
    r = lookup_results()[:2]
    r[1].status = c.NFS4ERR_NOENT
    check_compound_res(LOOKUP_OPS, ok(*r, status=c.NFS4ERR_NOENT))


def test_results_missing_from_a_successful_reply() -> None:
    # GETFH's result gone: the client would have read the file handle from GETATTR's place
    mismatch(LOOKUP_OPS, ok(*lookup_results()[:3]), "3 results for 4 operations")


def test_more_results_than_operations() -> None:
    mismatch(LOOKUP_OPS, ok(*lookup_results(), ResOp(c.OP_GETATTR, 0, None)), "5 results for 4")


def test_a_result_for_another_operation() -> None:
    r = lookup_results()
    r[2] = ResOp(c.OP_COMMIT, c.NFS4_OK, None)
    e = mismatch(LOOKUP_OPS, ok(*r), "result 2 is for operation 5, not 10")
    assert e.op == c.OP_GETFH


def test_op_illegal_may_answer_the_last_operation() -> None:
    r = [*lookup_results()[:1], ResOp(c.OP_ILLEGAL, c.NFS4ERR_OP_ILLEGAL)]
    check_compound_res(LOOKUP_OPS, ok(*r, status=c.NFS4ERR_OP_ILLEGAL))


def test_a_result_after_a_failure() -> None:
    r = lookup_results()
    r[1].status = c.NFS4ERR_NOENT
    mismatch(LOOKUP_OPS, ok(*r, status=c.NFS4ERR_NOENT), "after a failed operation")


def test_compound_status_is_the_last_results() -> None:
    mismatch(LOOKUP_OPS, ok(*lookup_results(), status=c.NFS4ERR_NOENT), "not that of its last result")
    r = lookup_results()[:2]
    r[1].status = c.NFS4ERR_NOENT
    mismatch(LOOKUP_OPS, ok(*r), "not that of its last result")


def test_unknown_statuses() -> None:
    """``nfsstat4(-1)``, as a user once saw an Input/output error called."""
    r = lookup_results()[:2]
    r[1].status = -1
    mismatch(LOOKUP_OPS, ok(*r, status=-1), "not an nfsstat4")
    mismatch(LOOKUP_OPS, ok(status=12345), "not an nfsstat4")
    mismatch(LOOKUP_OPS, ok(), "NFS4_OK with no results")


def read(asked: int, got: int, eof: bool = True) -> tuple[list[Any], COMPOUND4res]:
    ops = [PUTFH4args(b"fh"), READ4args(SID, 0, asked)]
    return ops, ok(ResOp(c.OP_PUTFH, 0), ResOp(c.OP_READ, 0, READ4resok(eof, memoryview(bytes(got)))))


def test_read_returns_at_most_what_was_asked() -> None:
    check_compound_res(*read(4096, 4096))
    check_compound_res(*read(4096, 10))
    e = mismatch(*read(4096, 4097), "4097 bytes of data for 4096 asked")
    assert e.op == c.OP_READ


def test_write_counts_at_most_what_was_sent() -> None:
    ops = [PUTFH4args(b"fh"), WRITE4args(SID, 0, c.UNSTABLE4, b"x" * 100)]

    def res(n: int) -> COMPOUND4res:
        return ok(ResOp(c.OP_PUTFH, 0), ResOp(c.OP_WRITE, 0, WRITE4resok(n, c.UNSTABLE4, bytes(8))))

    check_compound_res(ops, res(100))
    mismatch(ops, res(101), "101 bytes written of 100 sent")


def readdir(cookies: list[int], asked_cookie: int = 0, maxcount: int = 8192) -> tuple[list[Any], COMPOUND4res]:
    """A READDIR reply as it comes off the wire (encoded and decoded: its entries are a DirList)."""
    ops = [PUTFH4args(b"fh"), READDIR4args(asked_cookie, bytes(8), maxcount, maxcount, [])]
    entries = [entry4(k, f"n{k}", fattr4([], b"")) for k in cookies]
    res = ok(ResOp(c.OP_PUTFH, 0), ResOp(c.OP_READDIR, 0, READDIR4resok(bytes(8), dirlist4(entries, True))))
    p = Packer()
    encode_compound_res(p, res)
    return ops, decode_compound_res(Unpacker(p.getvalue()))


def test_readdir_cookies_are_never_repeated() -> None:
    check_compound_res(*readdir([3, 4, 5]))
    check_compound_res(*readdir([7, 8], asked_cookie=6))
    mismatch(*readdir([3, 4, 3]), "cookie 3 repeated")
    mismatch(*readdir([3, 0]), "cookie 0 repeated")  # (the start of the listing: it would go round again)
    mismatch(*readdir([7, 6], asked_cookie=6), "cookie 6 repeated")


def test_readdir_reply_fits_in_maxcount() -> None:
    _, res = readdir(list(range(3, 103)))
    size = 12 + len(res.resarray[1].res.reply.entries.data)
    check_compound_res(*readdir(list(range(3, 103)), maxcount=size))
    mismatch(*readdir(list(range(3, 103)), maxcount=size - 1), f"a reply of {size} bytes for a maxcount")


def test_a_malformed_result_names_its_operation() -> None:
    _, res = read(4096, 4096)
    p = Packer()
    encode_compound_res(p, res)
    data = p.getvalue()[:-100]  # READ's data cut short
    with pytest.raises(XdrError) as e:
        decode_compound_res(Unpacker(data))
    assert e.value.op == c.OP_READ  # type: ignore[attr-defined]
