"""The prepared COMPOUNDs (``compound_shapes.CompoundShape``) of the mount's LOOKUP and GETATTR, the
path API's stat and the mount's WRITE with its SETATTR and GETATTR: a shape encodes the bytes the
general encoder makes, and its decoder takes only the reply of success, giving what the general
decoder and the caller's parse give; every other reply (a failure, fewer results, another bitmap, a body cut short or running on, and every change the reply
fuzzer's mutator makes) it leaves to the general decoder, untouched, so that the caller gets the
result or the error it gets without a shape. Against Ganesha: a stat and a lookup through the shapes
give the file's attributes, a missing name the usual FileNotFoundError."""

from __future__ import annotations

import errno
import os
import struct
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from shape_spy import shapes_taken
from strategies import LEAN

from pynfsrdma._client.api import Client
from pynfsrdma._client.attributes import STAT_BITMAP, FileAttrs, setattr_fattr4
from pynfsrdma._client.compounds import fh_attrs, last_attrs
from pynfsrdma._client.names import (
    ACCESS_ATTRS_SHAPE,
    ACCESS_SHAPE,
    GETATTR_SHAPE,
    LOOKUP_ACCESS_SHAPE,
    LOOKUP_SHAPE,
)
from pynfsrdma._client.open_state import ANONYMOUS_STATEID
from pynfsrdma._client.opens import CREATE_ACCESS_SHAPE, CREATE_EXCLUSIVE_SHAPE, closes_shape
from pynfsrdma._client.read_write import WRITE_GETATTR_SHAPE, WRITE_SETATTR_GETATTR_SHAPE
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.attrs import encode_fattr4
from pynfsrdma._proto.nfs4.compound import (
    COMPOUND4args,
    COMPOUND4res,
    ResOp,
    check_compound_res,
    decode_compound_res,
    encode_compound_args,
    encode_compound_res,
    result_of,
)
from pynfsrdma._proto.nfs4.compound_shapes import CompoundShape
from pynfsrdma._proto.nfs4.types import (
    ACCESS4args,
    ACCESS4resok,
    CLOSE4args,
    GETATTR4args,
    GETATTR4resok,
    GETFH4args,
    GETFH4resok,
    LOOKUP4args,
    OPEN4args,
    OPEN4resok,
    PUTFH4args,
    SEQUENCE4args,
    SEQUENCE4resok,
    SETATTR4args,
    WRITE4args,
    WRITE4resok,
    change_info4,
    creatverfattr,
    fsid4,
    nfsace4,
    nfstime4,
    open_owner4,
    open_write_delegation4,
    specdata4,
    stateid4,
)
from pynfsrdma._rpc.auth import auth_sys
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.mutations import ALL, ReplyMutator, Rule
from pynfsrdma._xdr import Packer, Unpacker, XdrError

SESSION = bytes(range(16))
XID = 0x51
FH = b"\x07" * 28
NEW_FH = b"\x09" * 30
SEQ = ResOp(c.OP_SEQUENCE, 0, SEQUENCE4resok(SESSION, 5, 2, 63, 63, 0))
A_FILE = {
    c.FATTR4_TYPE: c.NF4REG, c.FATTR4_CHANGE: 7, c.FATTR4_SIZE: 4097, c.FATTR4_FSID: fsid4(1, 2),
    c.FATTR4_FILEID: 1234, c.FATTR4_MODE: 0o644, c.FATTR4_NUMLINKS: 1, c.FATTR4_OWNER: "1000",
    c.FATTR4_OWNER_GROUP: "0", c.FATTR4_RAWDEV: specdata4(0, 0), c.FATTR4_SPACE_USED: 8192,
    c.FATTR4_TIME_ACCESS: nfstime4(1_700_000_000, 1), c.FATTR4_TIME_METADATA: nfstime4(1_700_000_001, 2),
    c.FATTR4_TIME_MODIFY: nfstime4(-5, 3),
}
STAT = encode_fattr4(A_FILE)
assert STAT.attrmask == STAT_BITMAP  # (the reply of success answers the bitmap asked)


def sequence(seqid: int = 5, slot: int = 2, highest: int = 2, cachethis: bool = False) -> SEQUENCE4args:
    return SEQUENCE4args(SESSION, seqid, slot, highest, cachethis)


def lookup_results(fh: bytes = NEW_FH, attrs: Any = STAT) -> list[ResOp]:
    return [SEQ, ResOp(c.OP_PUTFH, 0), ResOp(c.OP_LOOKUP, 0), ResOp(c.OP_GETFH, 0, GETFH4resok(fh)),
            ResOp(c.OP_GETATTR, 0, GETATTR4resok(attrs))]


def getattr_results(attrs: Any = STAT) -> list[ResOp]:
    return [SEQ, ResOp(c.OP_PUTFH, 0), ResOp(c.OP_GETATTR, 0, GETATTR4resok(attrs))]


ACCESS = ResOp(c.OP_ACCESS, 0, ACCESS4resok(0x3F, 0x2D))


def granted(results: list[ResOp]) -> int:
    return int(result_of(results, c.OP_ACCESS).access)


DATA = bytes(range(256)) * 3 + b"ab"  # (a length that needs padding)
WRITING = WRITE4args(stateid4(3, b"w" * 12), 8192, c.FILE_SYNC4, DATA)
SETTING = SETATTR4args(ANONYMOUS_STATEID, setattr_fattr4(mode=0o600, uid=0, gid=0, atime_ns=5, mtime_ns=7))
WROTE = ResOp(c.OP_WRITE, 0, WRITE4resok(len(DATA), c.FILE_SYNC4, b"v" * 8))
SET = ResOp(c.OP_SETATTR, 0, SETTING.obj_attributes.attrmask)


OWNER = open_owner4(0x1234, b"open-0")
EXCLUSIVE = OPEN4args(0, c.OPEN4_SHARE_ACCESS_WRITE, c.OPEN4_SHARE_DENY_NONE, OWNER,
                      (c.OPEN4_CREATE, (c.EXCLUSIVE4_1, creatverfattr(b"v" * 8, setattr_fattr4(mode=0o600)))),
                      (c.CLAIM_NULL, "new"))
UNCHECKED = OPEN4args(0, c.OPEN4_SHARE_ACCESS_BOTH, c.OPEN4_SHARE_DENY_NONE, OWNER,
                      (c.OPEN4_CREATE, (c.UNCHECKED4, setattr_fattr4(mode=0o644))), (c.CLAIM_NULL, "new"))
OPENED = ResOp(c.OP_OPEN, 0, OPEN4resok(stateid4(1, b"o" * 12), change_info4(True, 3, 4), 4, [0, 2],
                                        (c.OPEN_DELEGATE_NONE_EXT, (c.WND4_NOT_WANTED, None))))
TIMES_SET = ResOp(c.OP_SETATTR, 0, [0, (1 << (c.FATTR4_TIME_ACCESS_SET - 32)) | (1 << (c.FATTR4_TIME_MODIFY_SET - 32))])
DIR_STAT = encode_fattr4({**A_FILE, c.FATTR4_TYPE: c.NF4DIR, c.FATTR4_FILEID: 2, c.FATTR4_MODE: 0o755})


def create_results(middle: ResOp) -> list[ResOp]:
    return [SEQ, ResOp(c.OP_PUTFH, 0), ResOp(c.OP_SAVEFH, 0), OPENED, ResOp(c.OP_GETFH, 0, GETFH4resok(NEW_FH)), middle,
            ResOp(c.OP_GETATTR, 0, GETATTR4resok(STAT)), ResOp(c.OP_RESTOREFH, 0),
            ResOp(c.OP_GETATTR, 0, GETATTR4resok(DIR_STAT))]


def opened_attrs(results: list[ResOp]) -> tuple[Any, ...]:
    ok = result_of(results, c.OP_OPEN)
    access = [granted(results)] if any(r.opnum == c.OP_ACCESS for r in results) else []
    attrs = [FileAttrs.from_fattr4(r.res.obj_attributes) for r in results if r.opnum == c.OP_GETATTR]
    return ((ok.stateid, ok.cinfo, ok.rflags), bytes(result_of(results, c.OP_GETFH).object), *access, *attrs)


def written_attrs(results: list[ResOp]) -> tuple[Any, ...]:
    ok = result_of(results, c.OP_WRITE)
    return (int(ok.count), int(ok.committed), bytes(ok.writeverf)), last_attrs(results)


CLOSES = closes_shape(3)
CLOSING = [x for i in range(3) for x in (PUTFH4args(bytes([i + 1]) * (20 + i)), CLOSE4args(0, stateid4(i, b"c" * 12)))]
CLOSED = [SEQ, *(r for i in range(3) for r in (ResOp(c.OP_PUTFH, 0), ResOp(c.OP_CLOSE, 0, stateid4(i + 1, b"c" * 12))))]


# each shape: its operations for a call, its reply of success, and what the general way's parse makes of
# that (the value the caller reads, as a tuple in the shape's order)
SHAPES: dict[str, tuple[CompoundShape, list[Any], list[ResOp], Any]] = {
    "lookup": (LOOKUP_SHAPE, LOOKUP_SHAPE.ops(FH, "a"), lookup_results(), fh_attrs),
    "getattr": (GETATTR_SHAPE, GETATTR_SHAPE.ops(FH), getattr_results(), lambda r: (last_attrs(r),)),
    "access": (ACCESS_SHAPE, ACCESS_SHAPE.ops(FH, 0x1F), [SEQ, ResOp(c.OP_PUTFH, 0), ACCESS],
               lambda r: (granted(r),)),
    "access_attrs": (ACCESS_ATTRS_SHAPE, ACCESS_ATTRS_SHAPE.ops(FH, 0x1F),
                     [SEQ, ResOp(c.OP_PUTFH, 0), ACCESS, ResOp(c.OP_GETATTR, 0, GETATTR4resok(STAT))],
                     lambda r: (granted(r), last_attrs(r))),
    "lookup_access": (LOOKUP_ACCESS_SHAPE, LOOKUP_ACCESS_SHAPE.ops(FH, "a", 0x1F), [*lookup_results()[:4], ACCESS,
                      ResOp(c.OP_GETATTR, 0, GETATTR4resok(STAT))],
                      lambda r: (bytes(result_of(r, c.OP_GETFH).object), granted(r), last_attrs(r))),
    "write_getattr": (WRITE_GETATTR_SHAPE, WRITE_GETATTR_SHAPE.ops(FH, WRITING),
                      [SEQ, ResOp(c.OP_PUTFH, 0), WROTE, ResOp(c.OP_GETATTR, 0, GETATTR4resok(STAT))], written_attrs),
    "write_setattr_getattr": (WRITE_SETATTR_GETATTR_SHAPE, WRITE_SETATTR_GETATTR_SHAPE.ops(FH, WRITING, SETTING),
                              [SEQ, ResOp(c.OP_PUTFH, 0), WROTE, SET, ResOp(c.OP_GETATTR, 0, GETATTR4resok(STAT))],
                              written_attrs),
    "create_exclusive": (CREATE_EXCLUSIVE_SHAPE, CREATE_EXCLUSIVE_SHAPE.ops(FH, EXCLUSIVE), create_results(TIMES_SET),
                         opened_attrs),
    "create_access": (CREATE_ACCESS_SHAPE, CREATE_ACCESS_SHAPE.ops(FH, UNCHECKED, 0x1F), create_results(ACCESS),
                      opened_attrs),
    "closes": (CLOSES, CLOSES.ops(*(x.object if isinstance(x, PUTFH4args) else x for x in CLOSING)), CLOSED,
               lambda r: ()),
}


def body(results: list[ResOp], status: int | None = None, tag: str = "") -> bytes:
    p = Packer()
    encode_compound_res(p, COMPOUND4res(results[-1].status if status is None else status, tag, results))
    return p.getvalue()


def general(shape: CompoundShape, ops: list[Any], data: bytes, start: int = 0, parse: Any = None) -> tuple[str, Any]:
    """What the general way makes of ``data`` (a COMPOUND4res from ``start``), as the session and
    the caller's parse do for a reply of success: ("ok", (SEQUENCE's result, the value)), else why not."""
    try:
        u = Unpacker(data, start)
        res = decode_compound_res(u)
        u.done()
        check_compound_res([sequence(), *ops], res)
        if res.status != c.NFS4_OK:
            return "failed", res.status
        results = res.resarray[1:]
        if parse is None:
            parse = fh_attrs if shape is LOOKUP_SHAPE else lambda r: (last_attrs(r),)
        value = parse(results)
    except XdrError as e:
        return "error", str(e)
    return "ok", (res.resarray[0].res, tuple(value))


def prepared(shape: CompoundShape, data: bytes, start: int = 0, ops: Any = ()) -> tuple[Any, int] | None:
    u = Unpacker(data, start)
    got = shape.decode(u, ops)
    if got is None:
        assert u.pos == start, "a reply the shape does not take is left where it was"
        return None
    assert u.pos == u.end
    return got, u.pos


# -- the call ---------------------------------------------------------------------------------------
@LEAN
@given(fh=st.binary(max_size=c.NFS4_FHSIZE), name=st.text(min_size=1, max_size=40),
       seqid=st.integers(0, 2**32 - 1), slot=st.integers(0, 2**32 - 1), cachethis=st.booleans(),
       minor=st.sampled_from((1, 2)), mask=st.integers(0, 2**32 - 1))
def test_a_shape_encodes_the_bytes_of_the_general_encoder(fh: bytes, name: str, seqid: int, slot: int,
                                                          cachethis: bool, minor: int, mask: int) -> None:
    for shape, ops in ((LOOKUP_SHAPE, LOOKUP_SHAPE.ops(fh, name)), (GETATTR_SHAPE, GETATTR_SHAPE.ops(fh)),
                       (ACCESS_SHAPE, ACCESS_SHAPE.ops(fh, mask)),
                       (ACCESS_ATTRS_SHAPE, ACCESS_ATTRS_SHAPE.ops(fh, mask)),
                       (LOOKUP_ACCESS_SHAPE, LOOKUP_ACCESS_SHAPE.ops(fh, name, mask)),
                       (WRITE_GETATTR_SHAPE, WRITE_GETATTR_SHAPE.ops(fh, WRITE4args(
                           stateid4(seqid, b"s" * 12), mask, c.UNSTABLE4, name.encode()))),
                       (WRITE_SETATTR_GETATTR_SHAPE, WRITE_SETATTR_GETATTR_SHAPE.ops(fh, WRITING, SETATTR4args(
                           stateid4(seqid, b"s" * 12), setattr_fattr4(mode=mask & 0o7777, uid=slot,
                                                                      mtime_ns=mask * 1000 + 1)))),
                       (CREATE_EXCLUSIVE_SHAPE, CREATE_EXCLUSIVE_SHAPE.ops(fh, OPEN4args(
                           seqid, c.OPEN4_SHARE_ACCESS_WRITE, 0, open_owner4(mask, fh), (c.OPEN4_CREATE, (
                               c.EXCLUSIVE4_1, creatverfattr(fh[:8].ljust(8, b"x"), setattr_fattr4(mode=mask & 0o7777)))),
                           (c.CLAIM_NULL, name)))),
                       (CREATE_ACCESS_SHAPE, CREATE_ACCESS_SHAPE.ops(fh, OPEN4args(
                           seqid, c.OPEN4_SHARE_ACCESS_BOTH, 0, open_owner4(mask, fh), (c.OPEN4_CREATE, (
                               c.UNCHECKED4, setattr_fattr4(mode=mask & 0o7777, size=0))), (c.CLAIM_NULL, name)),
                           mask)),
                       (closes_shape(2), closes_shape(2).ops(fh, CLOSE4args(seqid, stateid4(mask, b"s" * 12)), FH,
                                                             CLOSE4args(slot, stateid4(seqid, fh[:12].ljust(12, b"o")))))):
        args = COMPOUND4args("", minor, [sequence(seqid, slot, slot, cachethis), *ops])
        general_p, shaped_p = Packer(), Packer()
        encode_compound_args(general_p, args)
        shape.encode(shaped_p, args)
        assert shaped_p.getvalue() == general_p.getvalue()


@pytest.mark.parametrize("why, args", [
    ("a tag", COMPOUND4args("t", 1, [sequence(), *LOOKUP_SHAPE.ops(FH, "a")])),
    ("another GETATTR bitmap", COMPOUND4args("", 1, [sequence(), PUTFH4args(FH), LOOKUP4args("a"), GETFH4args(),
                                                      GETATTR4args([1 << c.FATTR4_SIZE])])),
    ("other operations", COMPOUND4args("", 1, [sequence(), PUTFH4args(FH), GETFH4args()])),
    ("a session id of 15 bytes", COMPOUND4args("", 1, [SEQUENCE4args(SESSION[:15], 1, 0, 0, False),
                                                        *LOOKUP_SHAPE.ops(FH, "a")])),
])
def test_other_calls_are_encoded_by_the_general_encoder(why: str, args: COMPOUND4args) -> None:
    outcomes = []
    for encode in (encode_compound_args, LOOKUP_SHAPE.encode):
        p = Packer()
        try:
            encode(p, args)
            outcomes.append(p.getvalue())
        except XdrError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1], why


def test_a_shapes_operations_are_made_of_exactly_its_variable_arguments() -> None:
    """Each variable operation gets one argument, in order, the fixed ones the shape's own; an
    argument too many or too few is refused, not dropped or left out."""
    ops = LOOKUP_ACCESS_SHAPE.ops(FH, "n", 7)
    assert [type(op) for op in ops] == [PUTFH4args, LOOKUP4args, GETFH4args, ACCESS4args, GETATTR4args]
    assert (ops[0].object, ops[1].objname, ops[3].access) == (FH, "n", 7)
    assert ops[2] is LOOKUP_ACCESS_SHAPE.fixed[2] and ops[4] is LOOKUP_ACCESS_SHAPE.fixed[4]
    for wrong in ((FH, "n"), (FH, "n", 7, 8)):
        with pytest.raises(TypeError, match="3 variable operations expected"):
            LOOKUP_ACCESS_SHAPE.ops(*wrong)


def test_an_access_mask_out_of_range_gets_the_general_encoders_error() -> None:
    args = COMPOUND4args("", 1, [sequence(), *ACCESS_SHAPE.ops(FH, 1 << 32)])
    with pytest.raises(XdrError, match="out of range") as general_error:
        encode_compound_args(Packer(), args)
    with pytest.raises(XdrError) as shaped_error:
        ACCESS_SHAPE.encode(Packer(), args)
    assert str(shaped_error.value) == str(general_error.value)


@pytest.mark.parametrize("why, setting", [
    ("a stateid's other of 11 bytes", SETATTR4args(stateid4(1, b"s" * 11), SETTING.obj_attributes)),
    ("attributes that are not a fattr4", SETATTR4args(ANONYMOUS_STATEID, None)),
    ("a seqid out of range", SETATTR4args(stateid4(1 << 32, b"s" * 12), SETTING.obj_attributes)),
])
def test_a_setattr_the_encoder_refuses_gets_the_general_encoders_error(why: str, setting: SETATTR4args) -> None:
    args = COMPOUND4args("", 1, [sequence(), *WRITE_SETATTR_GETATTR_SHAPE.ops(FH, WRITING, setting)])
    outcomes = []
    for encode in (encode_compound_args, WRITE_SETATTR_GETATTR_SHAPE.encode):
        try:
            encode(Packer(), args)
            outcomes.append("encoded")
        except Exception as e:  # (whatever the general encoder raises, the shape raises it too)
            outcomes.append(f"{type(e).__name__}: {e}")
    assert outcomes[0] == outcomes[1] != "encoded", why


def test_an_open_that_grants_a_delegation_goes_the_general_way() -> None:
    shape, ops, results, parse = SHAPES["create_exclusive"]
    granting = ResOp(c.OP_OPEN, 0, OPEN4resok(stateid4(1, b"o" * 12), change_info4(True, 3, 4), 4, [0, 2],
                                              (c.OPEN_DELEGATE_NONE, None)))
    assert prepared(shape, body([*results[:3], granting, *results[4:]]), ops=ops) is not None
    write = (c.OPEN_DELEGATE_WRITE, open_write_delegation4(
        stateid4(2, b"d" * 12), False, (c.NFS_LIMIT_SIZE, 1 << 20), nfsace4(c.ACE4_ACCESS_ALLOWED_ACE_TYPE, 0, 0, "")))
    delegated = ResOp(c.OP_OPEN, 0, OPEN4resok(stateid4(1, b"o" * 12), change_info4(True, 3, 4), 4, [0, 2], write))
    data = body([*results[:3], delegated, *results[4:]])
    assert prepared(shape, data, ops=ops) is None
    assert general(shape, ops, data, parse=parse)[0] == "ok"


def test_a_file_handle_too_long_gets_the_general_encoders_error() -> None:
    args = COMPOUND4args("", 1, [sequence(), *LOOKUP_SHAPE.ops(b"x" * (c.NFS4_FHSIZE + 1), "a")])
    with pytest.raises(XdrError, match="exceeds its bound") as general_error:
        encode_compound_args(Packer(), args)
    with pytest.raises(XdrError) as shaped_error:
        LOOKUP_SHAPE.encode(Packer(), args)
    assert str(shaped_error.value) == str(general_error.value)


# -- the reply --------------------------------------------------------------------------------------
def test_the_reply_of_success_decodes_straight_into_what_the_caller_reads() -> None:
    data = body(lookup_results())
    got = prepared(LOOKUP_SHAPE, data)
    assert got is not None
    (seq, (fh, attrs)), _ = got
    assert seq == SEQ.res
    assert fh == NEW_FH and isinstance(fh, bytes)
    assert attrs == FileAttrs(c.NF4REG, 0o644, 1, 1000, 0, 4097, 8192, (0, 0), (1, 2), 1234, 7,
                              1_700_000_000_000_000_001, -5 * 10**9 + 3, 1_700_000_001_000_000_002)
    assert general(LOOKUP_SHAPE, LOOKUP_SHAPE.ops(FH, "a"), data) == ("ok", (seq, (fh, attrs)))
    gdata = body(getattr_results())
    assert prepared(GETATTR_SHAPE, gdata) == ((SEQ.res, (attrs,)), len(gdata))
    assert general(GETATTR_SHAPE, GETATTR_SHAPE.ops(FH), gdata) == ("ok", (SEQ.res, (attrs,)))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shapes_reply_of_success_gives_what_the_general_way_gives(name: str) -> None:
    shape, ops, results, parse = SHAPES[name]
    data = body(results)
    got = prepared(shape, data, ops=ops)
    assert got is not None
    assert general(shape, ops, data, parse=parse) == ("ok", got[0])
    assert prepared(shape, body(results[:-1]), ops=ops) is None  # (one result fewer)
    failed = [*results[:-1], ResOp(results[-1].opnum, c.NFS4ERR_IO)]
    assert prepared(shape, body(failed), ops=ops) is None  # (the last operation failed)


def test_a_reply_inside_a_larger_buffer() -> None:
    data = b"\xff" * 12 + body(lookup_results())
    got = prepared(LOOKUP_SHAPE, data, 12)
    assert got is not None and got[1] == len(data)


def _long_fh() -> bytes:
    """The reply of success with a GETFH of NFS4_FHSIZE + 4 bytes (no encoder makes one)."""
    data = bytearray(body(lookup_results(fh=b"f" * c.NFS4_FHSIZE)))
    at = 3 * 4 + (2 * 4 + 16 + 5 * 4) + 2 * 8 + 2 * 4  # (the head, SEQUENCE's, PUTFH's, LOOKUP's, GETFH's status)
    assert struct.unpack_from(">I", data, at) == (c.NFS4_FHSIZE,)
    struct.pack_into(">I", data, at, c.NFS4_FHSIZE + 4)
    data[at + 4:at + 4] = b"ffff"
    return bytes(data)


OTHER_STAT = encode_fattr4({**A_FILE, c.FATTR4_MOUNTED_ON_FILEID: 3})
NO_FILEID = encode_fattr4({k: v for k, v in A_FILE.items() if k != c.FATTR4_FILEID})
SUCCESS = body(lookup_results())


@pytest.mark.parametrize("why, data", [
    ("the LOOKUP failed", body([SEQ, ResOp(c.OP_PUTFH, 0), ResOp(c.OP_LOOKUP, c.NFS4ERR_NOENT)])),
    ("SEQUENCE failed", body([ResOp(c.OP_SEQUENCE, c.NFS4ERR_BADSESSION)])),
    ("fewer results", body(lookup_results()[:4])),
    ("a status that is not its last result's", body(lookup_results(), status=c.NFS4ERR_IO)),
    ("another attribute bitmap", body(lookup_results(attrs=OTHER_STAT))),
    ("attributes without a fileid", body(lookup_results(attrs=NO_FILEID))),
    ("a file handle past NFS4_FHSIZE", _long_fh()),
    ("a tag", body(lookup_results(), tag="t")),
    ("results in another order", body([SEQ, ResOp(c.OP_PUTFH, 0), ResOp(c.OP_LOOKUP, 0),
                                       ResOp(c.OP_GETATTR, 0, GETATTR4resok(STAT)),
                                       ResOp(c.OP_GETFH, 0, GETFH4resok(NEW_FH))])),
    ("a byte after the reply", SUCCESS + b"\0\0\0\0"),
    ("a time's nseconds of a second", SUCCESS[:-4] + struct.pack(">I", 10**9)),
])
def test_replies_other_than_success_go_the_general_way(why: str, data: bytes) -> None:
    assert prepared(LOOKUP_SHAPE, data) is None, why
    assert general(LOOKUP_SHAPE, LOOKUP_SHAPE.ops(FH, "a"), data)[0] != "ok" or why in (
        "another attribute bitmap",  # (the general way decodes it: the prepared one was made for STAT_BITMAP)
        "attributes without a fileid", "a tag",
    )


def test_every_shorter_body_goes_the_general_way() -> None:
    for n in range(len(SUCCESS)):
        assert prepared(LOOKUP_SHAPE, SUCCESS[:n]) is None, n
        assert general(LOOKUP_SHAPE, LOOKUP_SHAPE.ops(FH, "a"), SUCCESS[:n])[0] == "error", n


def _record(data: bytes) -> bytes:
    p = Packer()
    rpcdef.pack_accepted_reply_header(p, XID)
    return p.getvalue() + data


def _call(ops: list[Any]) -> bytes:
    p = Packer()
    rpcdef.pack_call_header(p, XID, c.NFS4_PROGRAM, c.NFS_V4, c.NFSPROC4_COMPOUND, auth_sys(0, 0).encoded)
    encode_compound_args(p, COMPOUND4args("", 1, [sequence(), *ops]))
    return p.getvalue()


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_reply_fuzzers_changes_are_decoded_as_the_general_way_does_or_left_to_it(name: str) -> None:
    """bench/fuzz_replies.py's mutator, every place of the reply it can change, each several times:
    the prepared decoder gives what the general way gives, or leaves the reply to it."""
    shape, ops, results, parse = SHAPES[name]
    record = _record(body(results))
    sites = ReplyMutator().sites(record, [c.OP_SEQUENCE, *(op.OPNUM for op in ops)])
    has_attrs = any(r.opnum == c.OP_GETATTR for r in results)
    attributes = {m for m in ALL if m.value in ("nseconds", "value")} if has_attrs else set()
    assert {s.mutation for s in sites} >= {m for m in ALL if m.value in (
        "header", "length", "truncate", "trailing", "status")} | attributes
    taken = compared = 0
    for k, site in enumerate(sites):
        for seed in range(4):
            m = ReplyMutator(seed=k * 4 + seed, rules=[Rule(site.mutation, site=site.name)])
            m.call(_call(ops))
            for chunk in m.reply(record).chunks:
                (mark,) = struct.unpack_from(">I", chunk)
                data = chunk[4:4 + (mark & rpcdef.RM_LENGTH_MASK)]
                u = Unpacker(data)
                try:
                    if u.uint32() != XID or u.uint32() != rpcdef.REPLY:
                        continue
                    rpcdef.unpack_reply_header(u)
                except XdrError:
                    continue  # (the RPC layer's to refuse: the session never sees it)
                start = u.pos
                want = general(shape, ops, data, start, parse)
                got = prepared(shape, data, start, ops)
                compared += 1
                if got is not None:
                    taken += 1
                    assert want == ("ok", got[0]), site.name
    assert compared > 100 and 0 < taken < compared


# -- against the server -----------------------------------------------------------------------------
async def test_stat_and_lookup_through_the_shapes_against_the_server(ganesha: Ganesha,
                                                                   export_path: ExportPath) -> None:
    local = export_path.local
    (local / "f").write_bytes(b"x" * 5000)
    os.mkdir(local / "d")
    async with Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as client:
        st_f = await client.stat("f")
        st_d = await client.stat("d")
        for _ in range(3):  # (again and again: the slots' sequence ids move on)
            assert (await client.stat("f")).st_ino == st_f.st_ino
        with pytest.raises(FileNotFoundError) as e:
            await client.stat("missing")
        assert e.value.errno == errno.ENOENT
        fh, attrs = await client.nfs.names.lookup(client.root_fh, "f", client.cred)
        assert attrs == await client.nfs.names.getattr(fh, client.cred)
        assert attrs.size == 5000 and attrs.fileid == os.stat(local / "f").st_ino
        assert st_f.st_size == 5000 and st_f.st_ino == os.stat(local / "f").st_ino
        assert st_d.st_ino == os.stat(local / "d").st_ino
        everything = c.ACCESS4_READ | c.ACCESS4_MODIFY | c.ACCESS4_LOOKUP
        assert await client.nfs.names.access(fh, everything, client.cred) == c.ACCESS4_READ | c.ACCESS4_MODIFY
        assert await client.nfs.names.access_attrs(fh, c.ACCESS4_READ, client.cred) == (c.ACCESS4_READ, attrs)
        assert await client.nfs.names.lookup_access(client.root_fh, "f", c.ACCESS4_READ, client.cred) == (
            fh, c.ACCESS4_READ, attrs)
        with pytest.raises(FileNotFoundError):
            await client.nfs.names.lookup_access(client.root_fh, "missing", c.ACCESS4_READ, client.cred)


async def test_the_mounts_creates_and_writes_through_the_shapes_against_the_server(
        ganesha: Ganesha, export_path: ExportPath, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exclusive create, an unchecked one with its ACCESS, and a WRITE with (and without) a SETATTR
    and GETATTR: each reply is one its shape takes (a spy on the decoder counts them), and what the
    caller reads is what the server holds."""
    names = {id(s): n for n, s in (("create_exclusive", CREATE_EXCLUSIVE_SHAPE), ("create_access", CREATE_ACCESS_SHAPE),
                                   ("write_getattr", WRITE_GETATTR_SHAPE),
                                   ("write_setattr_getattr", WRITE_SETATTR_GETATTR_SHAPE))}
    taken = shapes_taken(monkeypatch, names)
    local = export_path.local
    async with Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as client:
        nfs, cred = client.nfs, client.cred
        of = await nfs.open(client.root_fh, "new", cred, access=c.OPEN4_SHARE_ACCESS_BOTH, create=True,
                            exclusive=True, mode=0o600, dir_attrs=True)
        assert of.attrs is not None and of.attrs.fileid == os.stat(local / "new").st_ino
        assert of.dir_attrs is not None and of.dir_attrs.fileid == os.stat(local).st_ino
        assert of.dir_change is not None and of.dir_change.before != of.dir_change.after
        count, _, _, attrs = await nfs.read_write.write_getattr(
            of, 0, DATA, cred, c.FILE_SYNC4, setattr_fattr4(mode=0o640, mtime_ns=1_600_000_000_000_000_007))
        assert count == len(DATA) and attrs.size == len(DATA) and attrs.mode == 0o640
        assert attrs.mtime_ns == 1_600_000_000_000_000_007 == os.stat(local / "new").st_mtime_ns
        count, _, _, attrs = await nfs.read_write.write_getattr(of, len(DATA), b"tail", cred)
        assert count == 4 and attrs.size == len(DATA) + 4
        assert (local / "new").read_bytes() == DATA + b"tail"
        await nfs.close(of, cred)
        with pytest.raises(FileExistsError):
            await nfs.open(client.root_fh, "new", cred, access=c.OPEN4_SHARE_ACCESS_BOTH, create=True,
                           exclusive=True, dir_attrs=True)
        again = await nfs.open(client.root_fh, "new", cred, access=c.OPEN4_SHARE_ACCESS_BOTH, create=True,
                               check=c.ACCESS4_READ | c.ACCESS4_MODIFY, dir_attrs=True)
        assert again.fh == of.fh and again.granted == c.ACCESS4_READ | c.ACCESS4_MODIFY
        assert again.dir_change is not None and again.dir_change.before == again.dir_change.after  # (it was there)
        await nfs.close(again, cred)
    assert sorted(taken) == ["create_access", "create_exclusive", "write_getattr", "write_setattr_getattr"]


async def test_closes_nobody_waits_for_go_in_their_shape_against_the_server(
        ganesha: Ganesha, export_path: ExportPath, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three opens closed without waiting (as the mount's releases close them) go in one COMPOUND of
    their prepared shape, and the server ends each open: a WRITE with its stateid is refused."""
    taken = shapes_taken(monkeypatch, {id(closes_shape(3)): "closes"})
    async with Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as client:
        nfs, cred = client.nfs, client.cred
        opened = [await nfs.open(client.root_fh, f"c{i}", cred, access=c.OPEN4_SHARE_ACCESS_BOTH, create=True)
                  for i in range(3)]
        async with trio.open_nursery() as nursery:
            for of in opened:
                nfs.close_later(of, cred, nursery)
            await nfs.flush_closes()
        for of in opened:
            with pytest.raises(NFS4Error) as e:
                await nfs.run([PUTFH4args(of.fh), WRITE4args(of.stateid, 0, c.FILE_SYNC4, b"x")], cred)
            assert e.value.status in (c.NFS4ERR_BAD_STATEID, c.NFS4ERR_OLD_STATEID)
    assert taken == ["closes"]
    assert [p.stat().st_size for p in sorted(export_path.local.glob("c?"))] == [0, 0, 0]
