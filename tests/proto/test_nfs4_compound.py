"""COMPOUND and CB_COMPOUND: hand-computed encodings from RFC 8881's XDR, the op tables, zero-copy data."""

from __future__ import annotations

import pytest

from pynfsrdma._proto.nfs4.attrs import bitmap4_from
from pynfsrdma._proto.nfs4.callback import (
    CB_ARGS_BY_OPNUM,
    CB_COMPOUND4args,
    CB_COMPOUND4res,
    CB_RECALL4args,
    CB_SEQUENCE4args,
    CB_SEQUENCE4resok,
    decode_cb_compound_args,
    decode_cb_compound_res,
    encode_cb_compound_args,
    encode_cb_compound_res,
    nfs_cb_resop4,
)
from pynfsrdma._proto.nfs4.compound import (
    ARGS_BY_OPNUM,
    ARGS_CLASSES,
    COMPOUND4args,
    COMPOUND4res,
    ResOp,
    decode_compound_args,
    decode_compound_res,
    encode_compound_args,
    encode_compound_res,
    nfs_argop4,
    nfs_resop4,
)
from pynfsrdma._proto.nfs4.const import (
    CLAIM_NULL,
    FATTR4_MODE,
    FATTR4_SIZE,
    FATTR4_TYPE,
    NF4LNK,
    NFS4_OK,
    NFS4ERR_ACCESS,
    NFS4ERR_DENIED,
    NFS4ERR_NOENT,
    NFS4ERR_OP_ILLEGAL,
    OP_CB_RECALL,
    OP_CB_SEQUENCE,
    OP_GETATTR,
    OP_ILLEGAL,
    OP_LOCK,
    OP_LOCKT,
    OP_LOOKUP,
    OP_PUTFH,
    OP_READ,
    OP_SEQUENCE,
    OP_SETATTR,
    SEQ4_STATUS_CB_PATH_DOWN,
    SP4_NONE,
    UNSTABLE4,
    WRITE_LT,
    nfs_cb_opnum4,
    nfs_opnum4,
)
from pynfsrdma._proto.nfs4.types import (
    EXCHANGE_ID4args,
    GETATTR4args,
    LOCK4denied,
    PUTROOTFH4args,
    READ4resok,
    SEQUENCE4args,
    SEQUENCE4resok,
    WRITE4args,
    client_owner4,
    createtype4,
    lock_owner4,
    open_claim4,
    stateid4,
)
from pynfsrdma._xdr import Packer, Unpacker, XdrError

SID = bytes(range(16))


def w(*words: int) -> bytes:
    """XDR words, big-endian."""
    return b"".join(x.to_bytes(4, "big") for x in words)


def test_sequence_putrootfh_getattr_call_bytes() -> None:
    args = COMPOUND4args(
        "",
        1,
        [
            SEQUENCE4args(SID, 5, 2, 7, True),
            PUTROOTFH4args(),
            GETATTR4args(bitmap4_from([FATTR4_TYPE, FATTR4_SIZE, FATTR4_MODE])),
        ],
    )
    expected = (
        w(0, 1, 3)  # tag "", minorversion 1, three operations
        + w(53) + SID + w(5, 2, 7, 1)  # OP_SEQUENCE: sessionid, sequenceid, slotid, highest, cachethis
        + w(24)  # OP_PUTROOTFH (no arguments)
        + w(9, 2, 0x12, 0x2)  # OP_GETATTR: bitmap4 of 2 words, type|size in word 0, mode in word 1
    )  # fmt: skip
    p = Packer()
    encode_compound_args(p, args)
    assert p.getvalue() == expected
    u = Unpacker(expected)
    assert decode_compound_args(u) == args
    u.done()


def test_reply_bytes_decode_to_resops() -> None:
    data = (
        w(NFS4ERR_NOENT) + w(2) + b"ab\0\0" + w(3)
        + w(53, 0) + SID + w(5, 2, 7, 7, SEQ4_STATUS_CB_PATH_DOWN)
        + w(22, 0)  # PUTFH ok
        + w(15, 2)  # LOOKUP NFS4ERR_NOENT: no data
    )  # fmt: skip
    u = Unpacker(data)
    res = decode_compound_res(u)
    u.done()
    assert res.status == NFS4ERR_NOENT and res.tag == "ab"
    assert res.resarray == [
        ResOp(OP_SEQUENCE, NFS4_OK, SEQUENCE4resok(SID, 5, 2, 7, 7, SEQ4_STATUS_CB_PATH_DOWN)),
        ResOp(OP_PUTFH, NFS4_OK, None),
        ResOp(OP_LOOKUP, NFS4ERR_NOENT, None),
    ]
    p = Packer()
    encode_compound_res(p, res)
    assert p.getvalue() == data


def test_lock_denied_and_lockt_denied_carry_lock4denied() -> None:
    owner = lock_owner4(0x1122334455667788, b"own")
    denied = LOCK4denied(0, 0xFFFFFFFFFFFFFFFF, WRITE_LT, owner)
    body = w(0, 0, 0xFFFFFFFF, 0xFFFFFFFF, 2, 0x11223344, 0x55667788, 3) + b"own\0"
    for op in (OP_LOCK, OP_LOCKT):
        data = w(op, NFS4ERR_DENIED) + body
        assert nfs_resop4.decode(data) == ResOp(op, NFS4ERR_DENIED, denied)
        assert nfs_resop4.encode(ResOp(op, NFS4ERR_DENIED, denied)) == data
    # LOCKT success has no data; other LOCK errors neither
    assert nfs_resop4.decode(w(OP_LOCKT, 0)) == ResOp(OP_LOCKT, 0, None)
    assert nfs_resop4.decode(w(OP_LOCK, NFS4ERR_ACCESS)) == ResOp(OP_LOCK, NFS4ERR_ACCESS, None)


def test_setattr_result_carries_attrsset_whatever_the_status() -> None:
    assert nfs_resop4.decode(w(OP_SETATTR, NFS4ERR_ACCESS, 0)) == ResOp(OP_SETATTR, NFS4ERR_ACCESS, [])
    assert nfs_resop4.decode(w(OP_SETATTR, 0, 1, 0x10)) == ResOp(OP_SETATTR, 0, [0x10])
    with pytest.raises(XdrError):
        nfs_resop4.decode(w(OP_SETATTR, 0))  # the bitmap is not optional


def test_illegal_result() -> None:
    data = w(OP_ILLEGAL, NFS4ERR_OP_ILLEGAL)
    assert nfs_resop4.decode(data) == ResOp(OP_ILLEGAL, NFS4ERR_OP_ILLEGAL, None)


def test_read_data_is_a_view_of_the_reply_buffer() -> None:
    buf = bytearray(w(0, 0, 1) + w(OP_READ, 0, 1, 5) + b"hello\0\0\0")
    res = COMPOUND4res.XDR.decode(buf)
    data = res.resarray[0].res.data
    assert isinstance(data, memoryview) and data == b"hello"
    assert data.obj is buf  # no copy: the caller hands this view on (to FUSE, to the user)
    assert res.resarray[0].res == READ4resok(True, b"hello")


def test_write_data_is_referenced_not_copied() -> None:
    payload = bytearray(b"x" * 4096)
    args = COMPOUND4args("", 1, [WRITE4args(stateid4(1, bytes(12)), 8192, UNSTABLE4, payload)])
    p = Packer()
    encode_compound_args(p, args)
    # tag, minorversion, count, opnum, stateid (4 + 12), offset (8), stable, length word
    header = 4 + 4 + 4 + 4 + 16 + 8 + 4 + 4
    (seg,) = p.bulk_segments
    assert seg.position == header
    assert seg.data.obj is payload
    segments = p.segments()
    assert any(isinstance(s, memoryview) and s.obj is payload for s in segments)
    assert decode_compound_args(Unpacker(p.getvalue())) == args


def test_union_golden_bytes() -> None:
    assert open_claim4.encode((CLAIM_NULL, "f")) == w(0, 1) + b"f\0\0\0"
    assert createtype4.encode((NF4LNK, b"target")) == w(5, 6) + b"target\0\0"
    assert createtype4.decode(w(5, 6) + b"target\0\0") == (NF4LNK, b"target")


def test_exchange_id_args_bytes() -> None:
    args = EXCHANGE_ID4args(client_owner4(b"\x01" * 8, b"id"), 0x00010000, (SP4_NONE, None), [])
    assert EXCHANGE_ID4args.XDR.encode(args) == b"\x01" * 8 + w(2) + b"id\0\0" + w(0x00010000, 0, 0)


def test_every_operation_has_args_and_result_codecs() -> None:
    assert set(ARGS_BY_OPNUM) == {int(m) for m in nfs_opnum4}
    assert set(nfs_resop4.results) == {int(m) for m in nfs_opnum4}
    assert len(ARGS_CLASSES) == len(ARGS_BY_OPNUM)  # no two classes share an OPNUM
    assert set(CB_ARGS_BY_OPNUM) == {int(m) for m in nfs_cb_opnum4}
    assert set(nfs_cb_resop4.results) == {int(m) for m in nfs_cb_opnum4}


def test_encoding_errors_are_xdr_errors() -> None:
    with pytest.raises(XdrError):
        nfs_argop4.encode(object())  # not an operation
    with pytest.raises(XdrError):
        nfs_resop4.encode(ResOp(OP_GETATTR, 0, None))  # GETATTR4resok missing
    with pytest.raises(XdrError):
        nfs_resop4.encode(ResOp(0x7FFF, 0, None))  # no such operation
    with pytest.raises(XdrError):
        SEQUENCE4args.XDR.encode(SEQUENCE4args(b"short", 1, 0, 0, False))  # sessionid4 is 16 bytes


def test_unknown_operation_in_a_call_is_an_xdr_error() -> None:
    data = w(0, 1, 1, 9999)
    with pytest.raises(XdrError):
        decode_compound_args(Unpacker(data))


def test_callback_compound_bytes() -> None:
    args = CB_COMPOUND4args(
        "",
        1,
        0,
        [
            CB_SEQUENCE4args(SID, 1, 0, 0, False, []),
            CB_RECALL4args(stateid4(3, b"O" * 12), False, b"FH"),
        ],
    )
    expected = (
        w(0, 1, 0, 2)
        + w(OP_CB_SEQUENCE) + SID + w(1, 0, 0, 0, 0)
        + w(OP_CB_RECALL, 3) + b"O" * 12 + w(0, 2) + b"FH\0\0"
    )  # fmt: skip
    p = Packer()
    encode_cb_compound_args(p, args)
    assert p.getvalue() == expected
    assert decode_cb_compound_args(Unpacker(expected)) == args

    res = CB_COMPOUND4res(
        0,
        "",
        [ResOp(OP_CB_SEQUENCE, 0, CB_SEQUENCE4resok(SID, 1, 0, 0, 0)), ResOp(OP_CB_RECALL, 0, None)],
    )
    expected_res = w(0, 0, 2) + w(OP_CB_SEQUENCE, 0) + SID + w(1, 0, 0, 0) + w(OP_CB_RECALL, 0)
    p = Packer()
    encode_cb_compound_res(p, res)
    assert p.getvalue() == expected_res
    assert decode_cb_compound_res(Unpacker(expected_res)) == res


def test_boolean_outside_true_false_is_rejected_inside_fixed_size_runs() -> None:
    # sa_cachethis is the last of a run of fixed-size fields that the struct codec reads in one go
    good = SID + w(5, 2, 7, 1)
    assert SEQUENCE4args.XDR.decode(good).sa_cachethis is True
    with pytest.raises(XdrError):
        SEQUENCE4args.XDR.decode(SID + w(5, 2, 7, 2))
