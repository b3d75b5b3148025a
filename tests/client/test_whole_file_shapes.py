"""The prepared COMPOUNDs of whole small files (``_client/whole_files.py``: a file read whole by name,
a range by name, a range by name learning the handle, a range of a held file by handle, a file
written whole, a file created empty): a shape encodes the bytes the general encoder makes (WRITE's
data referenced, not copied), and its decoder takes only the reply of success, giving what the
general decoder and the caller's parse give, a READ's data as a view of the received message; every
other reply (a failure, a delegation granted, every change the reply fuzzer's mutator makes) goes the
general way, or, for a READ's data the transport's decoder refuses, is the same XdrError. Against
Ganesha: cat_file, a ranged cat_file, a file opened "rb" and pipe_file through the shapes."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from shape_spy import shapes_taken
from strategies import LEAN

from pynfsrdma._client import whole_files as wf
from pynfsrdma._client.api import Client
from pynfsrdma._client.open_state import ANONYMOUS_STATEID, CURRENT_STATEID
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
)
from pynfsrdma._proto.nfs4.compound_shapes import CompoundShape
from pynfsrdma._proto.nfs4.types import (
    GETATTR4resok,
    GETFH4resok,
    OPEN4args,
    OPEN4resok,
    READ4args,
    READ4resok,
    SEQUENCE4args,
    SEQUENCE4resok,
    WRITE4args,
    WRITE4resok,
    change_info4,
    nfsace4,
    open_owner4,
    open_read_delegation4,
    stateid4,
)
from pynfsrdma._rpc.auth import auth_sys
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.mutations import ALL, ReplyMutator, Rule
from pynfsrdma._testbed.rdma_responder import serve_rdma
from pynfsrdma._transport.rdma.soft import SoftProvider
from pynfsrdma._xdr import Packer, Unpacker, XdrError
from pynfsrdma.fsspec import NFSFileSystem

SESSION = bytes(range(16))
XID = 0x52
FH = b"\x07" * 28
NEW_FH = b"\x09" * 30
DATA = bytes(range(256)) * 5 + b"xyz"  # (a length that needs padding)
SEQ = ResOp(c.OP_SEQUENCE, 0, SEQUENCE4resok(SESSION, 5, 2, 63, 63, 0))
OPEN_STATEID = stateid4(1, b"o" * 12)
OPENED = (OPEN_STATEID, change_info4(True, 3, 4), 4)  # (what a shape gives of an OPEN: stateid, cinfo, rflags)
OWNER = open_owner4(0x1234, b"once-0-1-2")
CREATE = (c.OPEN4_CREATE, (c.UNCHECKED4, wf._created_or_truncated(0o644)))
WROTE = WRITE4resok(len(DATA), c.FILE_SYNC4, b"v" * 8)


def opening(name: str = "a", owner: Any = OWNER, how: Any = CREATE, access: int = c.OPEN4_SHARE_ACCESS_WRITE
            ) -> OPEN4args:
    return OPEN4args(0, access, c.OPEN4_SHARE_DENY_NONE, owner, how, (c.CLAIM_NULL, name))


def reading(offset: int = 0, count: int = 4096) -> READ4args:
    return READ4args(ANONYMOUS_STATEID, offset, count)


def opened(delegation: Any = (c.OPEN_DELEGATE_NONE, None)) -> ResOp:
    return ResOp(c.OP_OPEN, 0, OPEN4resok(OPEN_STATEID, change_info4(True, 3, 4), 4, [0, 2], delegation))


READ = ResOp(c.OP_READ, 0, READ4resok(True, DATA))
PUTFH, LOOKUP = ResOp(c.OP_PUTFH, 0), ResOp(c.OP_LOOKUP, 0)
GETFH = ResOp(c.OP_GETFH, 0, GETFH4resok(NEW_FH))
SIZE = ResOp(c.OP_GETATTR, 0, GETATTR4resok(encode_fattr4({c.FATTR4_SIZE: 99_999})))
CLOSED = ResOp(c.OP_CLOSE, 0, stateid4(2, b"o" * 12))

# each shape: its operations for a call, its reply of success, and the value the caller reads (as
# WholeFiles's parse makes it from the general way's results, and its take from the shape's values)
SHAPES: dict[str, tuple[CompoundShape, list[Any], list[ResOp], Any]] = {
    "read_named": (wf.READ_NAMED_SHAPE, wf.READ_NAMED_SHAPE.ops(FH, "a", reading()),
                   [SEQ, PUTFH, LOOKUP, GETFH, SIZE, READ], (NEW_FH, 99_999, DATA, True)),
    "read_range_named": (wf.READ_RANGE_NAMED_SHAPE, wf.READ_RANGE_NAMED_SHAPE.ops(FH, "a", reading()),
                         [SEQ, PUTFH, LOOKUP, READ], (DATA, True)),
    "read_range_and_fh": (wf.READ_RANGE_AND_FH_SHAPE, wf.READ_RANGE_AND_FH_SHAPE.ops(FH, "a", reading()),
                          [SEQ, PUTFH, LOOKUP, GETFH, READ], (NEW_FH, DATA, True)),
    "read_held": (wf.READ_HELD_SHAPE, wf.READ_HELD_SHAPE.ops(FH, reading()), [SEQ, PUTFH, READ], (DATA, True)),
    "write_named": (wf.WRITE_NAMED_SHAPE,
                    wf.WRITE_NAMED_SHAPE.ops(FH, opening(), WRITE4args(CURRENT_STATEID, 0, c.FILE_SYNC4, DATA)),
                    [SEQ, PUTFH, opened(), GETFH, ResOp(c.OP_WRITE, 0, WROTE), CLOSED],
                    (OPENED, NEW_FH, (len(DATA), c.FILE_SYNC4, b"v" * 8))),
    "create_named": (wf.CREATE_NAMED_SHAPE, wf.CREATE_NAMED_SHAPE.ops(FH, opening()),
                     [SEQ, PUTFH, opened(), GETFH, CLOSED], (OPENED, NEW_FH)),
    # (no delegation, saying why: what NFS-Ganesha answers an OPEN that wants none)
    "write_named, none wanted": (
        wf.WRITE_NAMED_SHAPE,
        wf.WRITE_NAMED_SHAPE.ops(FH, opening(), WRITE4args(CURRENT_STATEID, 0, c.FILE_SYNC4, DATA)),
        [SEQ, PUTFH, opened((c.OPEN_DELEGATE_NONE_EXT, (c.WND4_NOT_WANTED, None))), GETFH,
         ResOp(c.OP_WRITE, 0, WROTE), CLOSED],
        (OPENED, NEW_FH, (len(DATA), c.FILE_SYNC4, b"v" * 8))),
    "create_named, contention": (
        wf.CREATE_NAMED_SHAPE, wf.CREATE_NAMED_SHAPE.ops(FH, opening()),
        [SEQ, PUTFH, opened((c.OPEN_DELEGATE_NONE_EXT, (c.WND4_CONTENTION, True))), GETFH, CLOSED],
        (OPENED, NEW_FH)),
}


def sequence(seqid: int = 5, slot: int = 2, cachethis: bool = False) -> SEQUENCE4args:
    return SEQUENCE4args(SESSION, seqid, slot, slot, cachethis)


def body(results: list[ResOp], status: int | None = None) -> bytes:
    p = Packer()
    encode_compound_res(p, COMPOUND4res(results[-1].status if status is None else status, "", results))
    return p.getvalue()


def flat(value: Any) -> tuple[Any, ...]:
    """A value the caller reads, the READ's (data, eof) laid flat, its data as bytes."""
    out: list[Any] = []
    for v in value:
        if isinstance(v, tuple):
            out += flat(v)
        elif isinstance(v, memoryview):
            out.append(bytes(v))
        else:
            out.append(v)
    return tuple(out)


def parse(results: list[ResOp]) -> tuple[Any, ...]:
    """What the caller reads of the general way's results (the shape's operations, in order)."""
    out: list[Any] = []
    for r in results:
        if r.opnum == c.OP_GETFH:
            out.append(bytes(r.res.object))
        elif r.opnum == c.OP_GETATTR:
            out.append(wf._size_at(r.res.obj_attributes.attr_vals, 0, len(r.res.obj_attributes.attr_vals))[0])
        elif r.opnum == c.OP_READ:
            out += [bytes(r.res.data), bool(r.res.eof)]
        elif r.opnum == c.OP_OPEN:
            out += [r.res.stateid, r.res.cinfo, r.res.rflags]
        elif r.opnum == c.OP_WRITE:
            out += [r.res.count, r.res.committed, bytes(r.res.writeverf)]
    return tuple(out)


def general(ops: list[Any], data: bytes, start: int = 0) -> tuple[str, Any]:
    """What the general way makes of ``data``: ("ok", (SEQUENCE's result, the value)), else why not."""
    try:
        u = Unpacker(data, start)
        res = decode_compound_res(u)
        u.done()
        check_compound_res([sequence(), *ops], res)
        if res.status != c.NFS4_OK:
            return "failed", res.status
        value = parse(res.resarray[1:])
    except XdrError as e:
        return "error", str(e)
    return "ok", (res.resarray[0].res, value)


def prepared(shape: CompoundShape, data: bytes, start: int = 0, ops: Any = None) -> tuple[str, Any] | None:
    """What the shape makes of ``data``: None (left to the general way, untouched), ("ok", ...) as
    :func:`general` says it, or ("error", the XdrError's message)."""
    u = Unpacker(data, start)
    if ops is None:
        ops = next(o for sh, o, _, _ in SHAPES.values() if sh is shape)
    try:
        got = shape.decode(u, ops)
    except XdrError as e:
        return "error", str(e)
    if got is None:
        assert u.pos == start, "a reply the shape does not take is left where it was"
        return None
    assert u.pos == u.end
    seq, values = got
    return "ok", (seq, flat(values))


# -- the call ---------------------------------------------------------------------------------------
@LEAN
@given(fh=st.binary(max_size=c.NFS4_FHSIZE), name=st.text(min_size=1, max_size=40),
       seqid=st.integers(0, 2**32 - 1), slot=st.integers(0, 2**32 - 1), cachethis=st.booleans(),
       minor=st.sampled_from((1, 2)), offset=st.integers(0, 2**64 - 1), count=st.integers(0, 2**32 - 1),
       sid=st.integers(0, 2**32 - 1), data=st.binary(max_size=2000), owner=st.binary(max_size=64),
       clientid=st.integers(0, 2**64 - 1), mode=st.integers(0, 0o7777), access=st.integers(0, 2**32 - 1))
def test_a_whole_file_shape_encodes_the_bytes_of_the_general_encoder(
        fh: bytes, name: str, seqid: int, slot: int, cachethis: bool, minor: int, offset: int, count: int,
        sid: int, data: bytes, owner: bytes, clientid: int, mode: int, access: int) -> None:
    read = READ4args(stateid4(sid, b"s" * 12), offset, count)
    how = (c.OPEN4_CREATE, (c.UNCHECKED4, wf._created_or_truncated(mode)))
    open_args = opening(name, open_owner4(clientid, owner), how, access)
    write = WRITE4args(stateid4(sid, b"w" * 12), offset, c.FILE_SYNC4, data)
    for shape, ops in ((wf.READ_NAMED_SHAPE, wf.READ_NAMED_SHAPE.ops(fh, name, read)),
                       (wf.READ_RANGE_NAMED_SHAPE, wf.READ_RANGE_NAMED_SHAPE.ops(fh, name, read)),
                       (wf.READ_RANGE_AND_FH_SHAPE, wf.READ_RANGE_AND_FH_SHAPE.ops(fh, name, read)),
                       (wf.READ_HELD_SHAPE, wf.READ_HELD_SHAPE.ops(fh, read)),
                       (wf.WRITE_NAMED_SHAPE, wf.WRITE_NAMED_SHAPE.ops(fh, open_args, write)),
                       (wf.CREATE_NAMED_SHAPE, wf.CREATE_NAMED_SHAPE.ops(fh, open_args))):
        args = COMPOUND4args("", minor, [sequence(seqid, slot, cachethis), *ops])
        general_p, shaped_p = Packer(), Packer()
        encode_compound_args(general_p, args)
        shape.encode(shaped_p, args)
        assert shaped_p.getvalue() == general_p.getvalue()
        assert [s.position for s in shaped_p.bulk_segments] == [s.position for s in general_p.bulk_segments]


def test_a_writes_data_is_referenced_not_copied() -> None:
    data = bytearray(b"d" * 8192)
    ops = wf.WRITE_NAMED_SHAPE.ops(FH, opening(), WRITE4args(CURRENT_STATEID, 0, c.FILE_SYNC4, data))
    p = Packer()
    wf.WRITE_NAMED_SHAPE.encode(p, COMPOUND4args("", 1, [sequence(), *ops]))
    (segment,) = p.bulk_segments
    assert segment.data.obj is data  # (the caller's buffer itself, by reference)
    data[0] = ord("D")
    assert p.getvalue().count(b"D" + b"d" * 8191) == 1


@pytest.mark.parametrize("why, op", [
    ("an exclusive create", opening(how=(c.OPEN4_CREATE, (c.GUARDED4, wf._created_or_truncated(0o600))))),
    ("an owner past NFS4_OPAQUE_LIMIT", opening(owner=open_owner4(1, b"x" * (c.NFS4_OPAQUE_LIMIT + 1)))),
    ("an access out of range", opening(access=1 << 32)),
])
def test_other_opens_are_encoded_by_the_general_encoder(why: str, op: OPEN4args) -> None:
    args = COMPOUND4args("", 1, [sequence(), *wf.CREATE_NAMED_SHAPE.ops(FH, op)])
    outcomes = []
    for encode in (encode_compound_args, wf.CREATE_NAMED_SHAPE.encode):
        p = Packer()
        try:
            encode(p, args)
            outcomes.append(p.getvalue())
        except XdrError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1], why


# -- the reply --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shapes_reply_of_success_gives_what_the_general_way_gives(name: str) -> None:
    shape, ops, results, value = SHAPES[name]
    data = body(results)
    got = prepared(shape, data)
    assert got == ("ok", (SEQ.res, flat(value)))
    assert general(ops, data) == got
    assert prepared(shape, body(results[:-1])) is None  # (one result fewer)
    failed = [*results[:-1], ResOp(results[-1].opnum, c.NFS4ERR_IO)]
    assert prepared(shape, body(failed)) is None  # (the last operation failed)


@pytest.mark.parametrize("name", ["read_named", "read_range_named", "read_range_and_fh", "read_held"])
def test_a_reads_data_is_a_view_of_the_received_message(name: str) -> None:
    shape, _, results, _ = SHAPES[name]
    received = bytearray(body(results))
    got = shape.decode(Unpacker(received), SHAPES[name][1])
    assert got is not None
    data, eof = got[1][-1]
    assert isinstance(data, memoryview) and data.obj is received and eof is True
    assert bytes(data) == DATA


def test_an_open_that_grants_a_delegation_goes_the_general_way() -> None:
    deleg = (c.OPEN_DELEGATE_READ, open_read_delegation4(stateid4(1, b"d" * 12), False,
                                                         nfsace4(0, 0, 0, "OWNER@")))
    shape, ops, results, _ = SHAPES["write_named"]
    data = body([results[0], results[1], opened(deleg), *results[3:]])
    assert prepared(shape, data) is None
    assert general(ops, data)[0] == "ok"


def test_a_reads_data_cut_short_is_the_general_decoders_error() -> None:
    shape, ops, results, _ = SHAPES["read_held"]
    data = body(results)
    for end in (len(data) - 4, len(data) - 100):
        cut = data[:end]
        want = general(ops, cut)
        assert want[0] == "error"
        assert prepared(shape, cut) == want
    assert prepared(shape, data + b"\0\0\0\0") == general(ops, data + b"\0\0\0\0") == (
        "error", "4 bytes of trailing garbage")


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
    the prepared decoder gives what the general way gives (its result, or a READ's data's error), or
    leaves the reply to it."""
    shape, ops, results, _ = SHAPES[name]
    record = _record(body(results))
    sites = ReplyMutator().sites(record, [c.OP_SEQUENCE, *(op.OPNUM for op in ops)])
    assert {s.mutation for s in sites} >= {m for m in ALL if m.value in (
        "header", "length", "truncate", "trailing", "status")}
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
                want = general(ops, data, start)
                got = prepared(shape, data, start)
                compared += 1
                if got is not None:
                    taken += 1
                    assert got == want, site.name
    assert compared > 50 and 0 < taken < compared


# -- against the server -----------------------------------------------------------------------------
def test_whole_files_through_the_shapes_against_the_server(ganesha: Ganesha, export_path: ExportPath,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call's reply is one its shape takes (counted by a spy on the decoder, which it calls)."""
    names = {id(getattr(wf, n)): n for n in dir(wf) if n.endswith("_SHAPE")}
    taken = shapes_taken(monkeypatch, names)
    local = export_path.local
    fs = NFSFileSystem(host=ganesha.host, port=ganesha.port)
    root = export_path.remote
    payload = bytes(range(256)) * 20 + b"tail"
    for _ in range(3):  # (again and again: the slots' sequence ids move on)
        fs.pipe_file(f"{root}/w", payload)
        assert (local / "w").read_bytes() == payload
        assert fs.cat_file(f"{root}/w") == payload
        assert fs.cat_file(f"{root}/w", 100, 4196) == payload[100:4196]
    fs.pipe_file(f"{root}/empty", b"")
    assert (local / "empty").read_bytes() == b"" and fs.cat_file(f"{root}/empty") == b""
    with fs.open(f"{root}/w", "rb", block_size=1024, cache_type="none") as f:
        f.seek(2000)
        assert f.read(3000) == payload[2000:5000]
        assert f.read(10_000) == payload[5000:]
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{root}/missing")
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{root}/missing", 0, 10)
    assert {n: taken.count(n) for n in set(taken)} == {
        "WRITE_NAMED_SHAPE": 3, "CREATE_NAMED_SHAPE": 1, "READ_NAMED_SHAPE": 4, "READ_RANGE_NAMED_SHAPE": 3,
        "READ_RANGE_AND_FH_SHAPE": 1, "READ_HELD_SHAPE": 1}


async def test_whole_files_through_the_shapes_over_rpc_over_rdma(ganesha: Ganesha, export_path: ExportPath,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Over RPC-over-RDMA (the software provider, the testbed's responder) a READ's data comes in a
    Write chunk: the shapes take it as the transport's decoder gives it."""
    taken: list[str] = []
    decode = CompoundShape.decode

    def counted(shape: CompoundShape, u: Unpacker, ops: Any = ()) -> Any:
        got = decode(shape, u, ops)
        if got is not None and shape in (wf.READ_NAMED_SHAPE, wf.READ_RANGE_NAMED_SHAPE, wf.WRITE_NAMED_SHAPE):
            taken.append("read" if shape is not wf.WRITE_NAMED_SHAPE else "write")
        return got

    monkeypatch.setattr(CompoundShape, "decode", counted)
    payload = bytes(range(251)) * 80  # 20,080 bytes: past the inline threshold
    async with trio.open_nursery() as nursery:
        r = await serve_rdma(nursery, SoftProvider(), "127.0.0.1", 0, ganesha.host, ganesha.port)
        try:
            url = f"nfs://127.0.0.1:{r.port}{export_path.remote}?proto=rdma&provider=soft"
            async with Client.connect(url) as nfs:
                await nfs.write_file("/w", payload)
                assert (export_path.local / "w").read_bytes() == payload
                assert await nfs.read_bytes("/w") == payload
                assert await nfs.read_bytes("/w", 1000, 12_000) == payload[1000:13_000]
            assert r.stats.rdma_write_bytes >= len(payload) + 12_000  # (the READs' data placed in Write chunks)
        finally:
            await r.aclose()
            nursery.cancel_scope.cancel()
    assert sorted(taken) == ["read", "read", "write"]
