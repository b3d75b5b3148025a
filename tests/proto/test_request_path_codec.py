"""The codecs every request and reply goes through (``encode_compound_args``,
``decode_compound_res``, and the structs' integers packed in one ``struct`` call) give what the
generic codecs give: the same bytes, the same values, and for a bad value or a malformed reply the
same error (message and operation)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nfs4_catalog import XDR_TYPES
from strategies import LEAN, for_xdr

from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import (
    COMPOUND4args,
    COMPOUND4res,
    ResOp,
    decode_compound_res,
    encode_compound_args,
    encode_sequenced_args,
)
from pynfsrdma._proto.nfs4.types import GETATTR4args, PUTFH4args, SEQUENCE4args, SEQUENCE4resok
from pynfsrdma._xdr import (
    Bounded,
    Packer,
    StructType,
    Unpacker,
    XdrError,
    boolean,
    int32,
    int64,
    uint32,
    uint64,
)

WIDE = settings(LEAN, max_examples=60)


def _outcome(fn: Any) -> tuple[str, Any]:
    """What ``fn()`` came to: its value, or its XdrError's message and operation."""
    try:
        return "value", fn()
    except XdrError as e:
        return "error", (str(e), getattr(e, "op", None))


def _generic_decode(data: bytes) -> COMPOUND4res:
    u = Unpacker(data)
    res: COMPOUND4res = COMPOUND4res.XDR.unpack(u)
    u.done()
    return res


def _decode(data: bytes) -> COMPOUND4res:
    u = Unpacker(data)
    res = decode_compound_res(u)
    u.done()
    return res


@WIDE
@given(for_xdr(COMPOUND4args.XDR))
def test_a_compound_encodes_as_the_generic_codec_encodes_it(args: COMPOUND4args) -> None:
    p = Packer()
    encode_compound_args(p, args)
    assert p.getvalue() == COMPOUND4args.XDR.encode(args)


@WIDE
@given(for_xdr(COMPOUND4res.XDR), st.data())
def test_a_reply_decodes_as_the_generic_codec_decodes_it_whole_cut_or_damaged(res: COMPOUND4res, data: Any) -> None:
    wire = COMPOUND4res.XDR.encode(res)
    assert _decode(wire) == res
    cut = data.draw(st.integers(0, len(wire)))
    assert _outcome(lambda: _decode(wire[:cut])) == _outcome(lambda: _generic_decode(wire[:cut]))
    if wire:
        at = data.draw(st.integers(0, len(wire) - 1))
        damaged = bytearray(wire)
        damaged[at] ^= data.draw(st.integers(1, 255))
        assert _outcome(lambda: _decode(bytes(damaged))) == _outcome(lambda: _generic_decode(bytes(damaged)))


@WIDE
@given(for_xdr(COMPOUND4args.XDR), for_xdr(SEQUENCE4args.XDR))
def test_a_sequenced_compound_encodes_as_the_general_encoder_encodes_its_objects(args: COMPOUND4args,
                                                                                 seq: SEQUENCE4args) -> None:
    p = Packer()
    encode_sequenced_args(p, args.tag, args.minorversion, seq.sa_sessionid, seq.sa_sequenceid, seq.sa_slotid,
                          seq.sa_highest_slotid, seq.sa_cachethis, args.argarray)
    assert p.getvalue() == COMPOUND4args.XDR.encode(COMPOUND4args(args.tag, args.minorversion, [seq, *args.argarray]))


@pytest.mark.parametrize(("sessionid", "seqid", "slotid", "minorversion"), [
    (b"s" * 15, 1, 0, 1), (b"s" * 16, -1, 0, 1), (b"s" * 16, 1, 2**32, 1), (b"s" * 16, 1, 0, 2**32),
], ids=["short session id", "sequence id", "slot id", "minor version"])
def test_a_sequenced_compound_with_a_bad_value_gets_the_general_encoders_error(
        sessionid: bytes, seqid: int, slotid: int, minorversion: int) -> None:
    seq = SEQUENCE4args(sessionid, seqid, slotid, 0, False)
    with pytest.raises(XdrError) as general:
        encode_compound_args(Packer(), COMPOUND4args("", minorversion, [seq, PUTFH4args(b"f")]))
    with pytest.raises(XdrError) as sequenced:
        encode_sequenced_args(Packer(), "", minorversion, sessionid, seqid, slotid, 0, False, [PUTFH4args(b"f")])
    assert str(sequenced.value) == str(general.value)


def test_what_the_user_is_told_about_a_reply_with_an_unknown_operation_or_a_malformed_result() -> None:
    seq = ResOp(c.OP_SEQUENCE, c.NFS4_OK, SEQUENCE4resok(b"s" * 16, 1, 0, 7, 7, 0))
    wire = bytearray(COMPOUND4res.XDR.encode(COMPOUND4res(c.NFS4_OK, "", [seq])))
    unknown = bytearray(wire)
    unknown[12:16] = (9999).to_bytes(4, "big")  # (the result's operation number)
    with pytest.raises(XdrError, match=r"^bad nfs_resop4 discriminant 9999$"):
        _decode(bytes(unknown))
    with pytest.raises(XdrError, match=r"^truncated") as cut:
        _decode(bytes(wire[:-4]))
    assert cut.value.op == c.OP_SEQUENCE  # type: ignore[attr-defined]


def test_an_operation_that_is_no_arm_is_refused_by_name() -> None:
    with pytest.raises(XdrError, match=r"^SEQUENCE4resok is not an arm of this union$"):
        encode_compound_args(Packer(), COMPOUND4args("", 1, [SEQUENCE4resok(b"s" * 16, 1, 0, 7, 7, 0)]))


# -- the integers of a struct packed in one call ------------------------------------------------------------
def _field_by_field(xt: StructType, obj: Any) -> bytes:
    p = Packer()
    for name, t in xt.fields:
        t.pack(p, getattr(obj, name))
    return p.getvalue()


_INTS = (uint32, int32, uint64, int64, boolean)
_RUNS = {name: xt for name, xt in XDR_TYPES.items()
         if isinstance(xt, StructType)
         and sum(isinstance(t, Bounded) or t in _INTS for _, t in xt.fields) >= 2}


def test_the_catalog_has_structs_with_runs_of_integers() -> None:
    assert {"types.SEQUENCE4args", "types.READ4args", "types.SEQUENCE4resok"} <= set(_RUNS)


@pytest.mark.parametrize("name", sorted(_RUNS))
def test_a_struct_packs_as_its_fields_pack_one_by_one(name: str) -> None:
    xt = _RUNS[name]

    @WIDE
    @given(for_xdr(xt))
    def check(obj: Any) -> None:
        assert xt.encode(obj) == _field_by_field(xt, obj)

    check()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("sa_sequenceid", -1, "uint32 out of range: -1"),
    ("sa_slotid", 2**32, "uint32 out of range: 4294967296"),
    ("sa_highest_slotid", "7", "uint32 out of range: '7'"),
])
def test_a_bad_integer_in_a_run_is_named_as_alone(field: str, value: Any, message: str) -> None:
    args = SEQUENCE4args(b"s" * 16, 1, 0, 0, False)
    setattr(args, field, value)
    p = Packer()
    with pytest.raises(XdrError) as e:
        SEQUENCE4args.XDR.pack(p, args)
    assert str(e.value) == message


_BOUNDED = sorted((name, f) for name, xt in _RUNS.items() for f, t in xt.fields if isinstance(t, Bounded))


def test_the_catalog_has_bounded_integers_in_runs() -> None:
    assert _BOUNDED


@pytest.mark.parametrize(("name", "field"), _BOUNDED)
def test_a_bounded_integer_past_its_bound_is_refused_in_a_run(name: str, field: str) -> None:
    xt = _RUNS[name]
    t = dict(xt.fields)[field]
    assert isinstance(t, Bounded)

    @settings(LEAN, max_examples=3)
    @given(for_xdr(xt))
    def check(obj: Any) -> None:
        setattr(obj, field, t.maximum + 1)
        with pytest.raises(XdrError, match=f"^{t.what} {t.maximum + 1} exceeds its bound {t.maximum}$"):
            xt.encode(obj)

    check()


def test_a_request_of_the_mount_encodes_to_the_bytes_the_rfc_gives() -> None:
    # SEQUENCE + PUTFH + GETATTR: every field where RFC 8881's XDR puts it
    args = COMPOUND4args("", 1, [SEQUENCE4args(b"s" * 16, 5, 2, 3, True), PUTFH4args(b"fh"),
                                 GETATTR4args([0x1A, 0x2])])
    p = Packer()
    encode_compound_args(p, args)

    def u32(*vs: int) -> bytes:
        return b"".join(v.to_bytes(4, "big") for v in vs)

    assert p.getvalue() == (u32(0, 1, 3)  # tag "", minorversion, three operations
                            + u32(c.OP_SEQUENCE) + b"s" * 16 + u32(5, 2, 3, 1)
                            + u32(c.OP_PUTFH, 2) + b"fh\0\0"
                            + u32(c.OP_GETATTR, 2, 0x1A, 0x2))
