"""Chunk decisions (RFC 8166 3.4-3.5, RFC 8267) and their round trip through a responder.

Calls go: plan_call -> header on the wire -> responder parse_call -> RDMA Reads -> assemble_call,
and the rebuilt call must be byte for byte what the requester encoded. Replies go: responder
encode_reply -> RDMA Writes into the requester's sinks -> reassemble_reply -> RdmaReplyUnpacker.
"""

from __future__ import annotations

import pytest
from fake_memory import FakeMemory

from pynfsrdma._proto.private_data import InlineThresholds
from pynfsrdma._proto.rpcrdma import (
    ERR_CHUNK,
    RDMA_MSG,
    RDMA_NOMSG,
    RpcRdmaError,
    decode_rdma_msg,
    encode_rdma_msg,
    header_size,
    make_error,
    make_msg,
    xdr_rdma_segment,
    xdr_write_chunk,
)
from pynfsrdma._testbed.responder_chunks import (
    ChunkError,
    assemble_call,
    encode_reply,
    parse_call,
)
from pynfsrdma._transport.base import NO_HINTS, ReplyHints
from pynfsrdma._transport.rdma.chunks import CallPlan, NeedKind, Registration, plan_call, plan_reply
from pynfsrdma._transport.rdma.reply import RdmaErrorReply, RdmaReplyUnpacker, reassemble_reply
from pynfsrdma._xdr import Packer, XdrError

T1K = InlineThresholds(1024, 1024)


def make_call(head_words: int, payloads: list[bytes], tail_words: int = 2) -> Packer:
    p = Packer()
    p.uint32(0xABCD0001)  # xid
    for i in range(head_words - 1):
        p.uint32(i)
    for data in payloads:
        p.bulk(data)
        p.uint32(0x7A11)
    for i in range(tail_words):
        p.uint32(0xEE00 + i)
    return p


def send_and_rebuild(memory: FakeMemory, call: Packer, hints=NO_HINTS, thr=T1K):
    """Requester plans and 'sends'; responder decodes and pulls. Returns (plan, regs, call seen)."""
    plan = plan_call(call.segments(), call.bulk_segments, hints, thr)
    regs = memory.register_plan(plan)
    hdr = plan.header(0xABCD0001, 32, regs)
    wire = encode_rdma_msg(hdr).getvalue() + b"".join(bytes(s) for s in plan.inline)
    assert len(wire) <= thr.send
    send_buffer = bytearray(b"\xff" * thr.send)  # what the transport sends: the header packed in place
    n = plan.pack_header_into(send_buffer, 0xABCD0001, 32, regs)
    assert send_buffer[:n] == encode_rdma_msg(hdr).getvalue()
    assert len(wire) == plan.header_len + plan.inline_len
    got, off = decode_rdma_msg(wire)
    rc = parse_call(got, memoryview(wire)[off:])
    pulled = [b"".join(memory.rdma_read(s) for s in chunk.segments) for chunk in rc.reads]
    rebuilt = b"".join(bytes(b) for b in assemble_call(rc, pulled))
    return plan, regs, rc, rebuilt


def test_small_call_goes_inline_with_no_chunks(memory):
    call = make_call(10, [b"x" * 100])
    plan, _, rc, rebuilt = send_and_rebuild(memory, call)
    assert plan.proc == RDMA_MSG and plan.needs == [] and rc.reads == []
    assert rebuilt == call.getvalue()


def test_just_under_and_over_the_send_threshold_without_bulk(memory):
    # header 28 + payload: 996 bytes fits a 1024-byte threshold, 1000 does not
    under = make_call(996 // 4 - 2, [])
    assert len(under) == 996
    plan, _, _, rebuilt = send_and_rebuild(memory, under)
    assert plan.proc == RDMA_MSG and plan.needs == [] and rebuilt == under.getvalue()
    over = make_call(1000 // 4 - 2, [])
    plan, _, rc, rebuilt = send_and_rebuild(memory, over)
    assert plan.proc == RDMA_NOMSG and plan.inline == []
    assert [c.position for c in rc.reads] == [0]
    assert rebuilt == over.getvalue()


@pytest.mark.parametrize("size", [4096, 4097, 4098, 4099, 70001])
def test_write_payload_becomes_a_read_chunk_at_its_position_without_roundup(memory, size):
    data = bytes(range(256)) * (size // 256) + b"q" * (size % 256)
    call = make_call(20, [data])
    plan, _regs, rc, rebuilt = send_and_rebuild(memory, call)
    assert plan.proc == RDMA_MSG
    (need,) = plan.needs
    assert need.kind is NeedKind.READ_SOURCE and need.length == size  # no roundup in the chunk
    assert need.buffer is call.bulk_segments[0].data  # registered where it lies: no copy
    assert need.position == call.bulk_segments[0].position == 80 + 4  # after the length word
    assert rc.reads[0].position == 84
    # inline = everything but the payload and its roundup; the length word stays
    assert plan.inline_len == len(call) - size - (-size & 3)
    inline = b"".join(bytes(s) for s in plan.inline)
    assert inline[80:84] == size.to_bytes(4, "big") and inline[84:88] == b"\0\0\x7a\x11"
    assert rebuilt == call.getvalue()


def test_two_write_payloads_positions_are_in_the_full_xdr_stream(memory):
    a, b = b"A" * 1001, b"B" * 2050
    call = make_call(3, [a, b])
    _plan, _, rc, rebuilt = send_and_rebuild(memory, call)
    assert [c.position for c in rc.reads] == [16, 16 + 1004 + 4 + 4]
    assert rebuilt == call.getvalue()


def test_small_write_payload_stays_inline_when_the_call_fits(memory):
    call = make_call(10, [b"z" * 600])  # bulk segment (>= 512) but the call fits 2048
    plan, _, _, rebuilt = send_and_rebuild(memory, call, thr=InlineThresholds(2048, 1024))
    assert plan.proc == RDMA_MSG and plan.needs == []
    assert rebuilt == call.getvalue()


def test_call_too_large_even_without_its_payload_goes_nomsg_zero_copy(memory):
    call = make_call(400, [b"W" * 8192])  # 1600 bytes of header words alone
    plan, _regs, rc, rebuilt = send_and_rebuild(memory, call)
    assert plan.proc == RDMA_NOMSG and len(rc.reads) == 1 and rc.reads[0].position == 0
    assert len(rc.reads[0].segments) == 3  # head, payload, tail: registered where they lie
    assert any(n.buffer is call.bulk_segments[0].data for n in plan.needs)
    assert rebuilt == call.getvalue()


PLAN_REPLY_TABLE = [
    # ddp sizes, max_reply, recv threshold -> write chunks, reply chunk
    ([], 0, 1024, [], 0),
    ([100], 0, 1024, [], 0),  # small READ: inline, no chunk sent at all
    ([0], 0, 1024, [], 0),
    ([4096], 0, 1024, [4096], 0),
    # no empty (segment-less) chunk keeps the order: Linux's nfsd refuses them (ERR_CHUNK); the
    # item before gets a real chunk, large enough for the next item (RFC 8166 3.4.6)
    ([100, 4096], 0, 1024, [4096, 4096], 0),
    ([4096, 100], 0, 1024, [4096], 0),  # items after the last chunked one stay inline
    ([4096, 8192], 0, 1024, [8192, 8192], 0),
    ([8192, 100, 4096, 50], 0, 1024, [8192, 4096, 4096], 0),
    ([4096], 0, 65536, [], 0),  # big receive buffers: inline
    ([], 8000, 1024, [], 8000),
    ([], 900, 1024, [], 0),
    ([4096], 8000, 1024, [4096], 8000),  # READ data in a Write chunk, the rest in the Reply chunk
]


@pytest.mark.parametrize("sizes,max_reply,recv,chunks,reply", PLAN_REPLY_TABLE)
def test_plan_reply_table(sizes, max_reply, recv, chunks, reply):
    assert plan_reply(ReplyHints(sizes, max_reply), recv) == (chunks, reply)


def test_reply_chunk_just_under_and_over_the_receive_threshold():
    fits = 1024 - header_size(0, [], None)
    assert plan_reply(ReplyHints([], fits), 1024) == ([], 0)
    assert plan_reply(ReplyHints([], fits + 1), 1024) == ([], fits + 1 + 3)


def test_read_item_just_under_and_over_the_receive_threshold():
    base = 512
    room = 1024 - 28 - base - 4
    assert plan_reply(ReplyHints([room]), 1024) == ([], 0)
    assert plan_reply(ReplyHints([room + 1]), 1024) == ([room + 1], 0)


def reply_message(items: list[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
    """An RPC-reply-like stream with DDP items, and where the items lie (the NFS locator's job)."""
    p = Packer()
    p.uint32(0xABCD0001)
    p.uint32(1)
    spots = []
    for data in items:
        p.uint32(0)  # eof-like word
        p.uint32(len(data))
        spots.append((len(p), len(data)))
        p.opaque_fixed(data, len(data))
    p.uint32(0x5EED)
    return p.getvalue(), spots


def read_reply(u: RdmaReplyUnpacker, n: int) -> list[memoryview]:
    assert u.uint32() == 0xABCD0001 and u.uint32() == 1
    out = []
    for _ in range(n):
        assert u.uint32() == 0
        out.append(u.bulk())
    assert u.uint32() == 0x5EED
    u.done()
    return out


def respond(memory: FakeMemory, plan: CallPlan, regs, items, recv=1024) -> RdmaReplyUnpacker:
    hdr = plan.header(0xABCD0001, 32, regs)
    wire = encode_rdma_msg(hdr).getvalue() + b"".join(bytes(s) for s in plan.inline)
    got, off = decode_rdma_msg(wire)
    rc = parse_call(got, memoryview(wire)[off:])
    reply, spots = reply_message(items)
    enc = encode_reply(rc, reply, spots, recv, credit=16)
    for seg, data in enc.rdma_writes:
        memory.rdma_write(seg, data)
    rwire = encode_rdma_msg(enc.header).getvalue() + b"".join(bytes(s) for s in enc.inline)
    assert len(rwire) <= recv
    rhdr, roff = decode_rdma_msg(rwire)
    assert rhdr.rdma_credit == 16
    return reassemble_reply(rhdr, memoryview(rwire)[roff:], plan, regs)


def test_two_reads_in_one_compound_land_in_their_write_chunks_zero_copy(memory):
    call = make_call(10, [])
    a, b = bytes(range(256)) * 16, b"\x5a" * 8191  # 4096 and 8191 (odd: roundup)
    plan = plan_call(call.segments(), [], ReplyHints([4096, 8192]), T1K)
    regs = memory.register_plan(plan)
    u = respond(memory, plan, regs, [a, b])
    got = read_reply(u, 2)
    assert got == [a, b]
    sinks = [r.buffer for r, n in zip(regs, plan.needs, strict=True) if n.kind is NeedKind.WRITE_SINK]
    for view, sink in zip(got, sinks, strict=True):
        assert view.obj is sink.obj  # a view of the registered buffer, not a copy


def test_a_reply_counts_what_its_write_chunks_brought_as_received(memory):
    """What a reply carried counts the READ data placed in Write chunks, as the same reply over TCP
    counts it in its stream: the session measures each path's delivery rate by it, and an RDMA path
    whose READs counted as their 80-odd inline bytes looked a thousand times slower than it is."""
    call = make_call(10, [])
    a, b = bytes(range(256)) * 16, b"\x5a" * 8191
    plan = plan_call(call.segments(), [], ReplyHints([4096, 8192]), T1K)
    regs = memory.register_plan(plan)
    u = respond(memory, plan, regs, [a, b])
    inline = u.remaining()
    assert inline < 100  # (the data is not in the stream)
    assert u.carried() == inline + len(a) + len(b)
    assert u.uint32() == 0xABCD0001 and u.uint32() == 1 and u.uint32() == 0
    u.bulk()
    assert u.carried() == u.remaining() + len(b)  # (what is read is no longer to come)
    u.uint32()
    u.bulk()
    assert u.carried() == u.remaining() == 4


def test_an_item_before_a_chunked_one_gets_a_chunk_too(memory):
    call = make_call(10, [])
    small, big = b"s" * 101, b"B" * 5000
    plan = plan_call(call.segments(), [], ReplyHints([200, 8192]), T1K)
    assert list(plan.write_chunks) == [8192, 8192]
    regs = memory.register_plan(plan)
    hdr = plan.header(1, 1, regs)
    assert [len(c.target) for c in hdr.chunks.rdma_writes] == [1, 1]  # no segment-less chunk
    u = respond(memory, plan, regs, [small, big])
    s, b = read_reply(u, 2)
    assert (s, b) == (small, big)
    assert s.obj is regs[0].buffer.obj and b.obj is regs[1].buffer.obj  # both placed, no copy


def test_responder_returns_the_item_of_an_empty_chunk_inline(memory):
    # another requester may send a segment-less Write chunk to ask for an item inline (RFC 8267
    # 4.4); our responder honours it and places the next item in the next chunk
    small, big = b"s" * 101, b"B" * 5000
    sink = memory.register(memoryview(bytearray(8192)))
    hdr = make_msg(
        1,
        1,
        RDMA_MSG,
        [],
        [xdr_write_chunk([]), xdr_write_chunk([xdr_rdma_segment(sink.handle, 8192, sink.offset)])],
    )
    rc = parse_call(hdr, memoryview(b""))
    reply, spots = reply_message([small, big])
    enc = encode_reply(rc, reply, spots, 1024, credit=1)
    assert [[s.length for s in c.target] for c in enc.header.chunks.rdma_writes] == [[], [5000]]
    for seg, data in enc.rdma_writes:
        memory.rdma_write(seg, data)
    inline = b"".join(bytes(k) for k in enc.inline)
    u = RdmaReplyUnpacker(inline, [None, sink.buffer[:5000]])
    assert read_reply(u, 2) == [small, big]


def test_responder_may_return_a_small_result_inline_despite_a_write_chunk():
    # the Write chunk came back with nothing written, the length word says 5: inline data
    stream = Packer()
    stream.uint32(5)
    stream.opaque_fixed(b"hello", 5)
    stream.uint32(9)
    u = RdmaReplyUnpacker(stream.getvalue(), [memoryview(bytearray(0))])
    assert u.bulk() == b"hello" and u.uint32() == 9
    u.done()


def test_zero_length_read_result(memory):
    plan = plan_call(make_call(4, []).segments(), [], ReplyHints([4096]), T1K)
    regs = memory.register_plan(plan)
    (v,) = read_reply(respond(memory, plan, regs, [b""]), 1)
    assert v == b""


def test_more_data_written_than_the_length_word_allows_is_refused():
    u = RdmaReplyUnpacker(b"\0\0\0\x10", [memoryview(b"x" * 8)])
    with pytest.raises(XdrError):
        u.bulk()


def test_large_reply_comes_in_the_reply_chunk(memory):
    plan = plan_call(make_call(4, []).segments(), [], ReplyHints([], 8000), T1K)
    assert plan.reply_chunk == 8000
    regs = memory.register_plan(plan)
    items = [b"i" * 3000, b"j" * 3001]  # no Write chunks offered: items in the reply stream
    u = respond(memory, plan, regs, items)
    got = read_reply(u, 2)
    assert got == items
    reply_sink = regs[plan.reply_sink_index()]
    assert got[0].obj is reply_sink.buffer.obj


def test_reply_chunk_offered_but_small_reply_comes_inline(memory):
    plan = plan_call(make_call(4, []).segments(), [], ReplyHints([], 8000), T1K)
    regs = memory.register_plan(plan)
    (v,) = read_reply(respond(memory, plan, regs, [b"tiny"]), 1)
    assert v == b"tiny"


def test_write_chunk_too_small_for_the_result_is_a_chunk_error(memory):
    plan = plan_call(make_call(4, []).segments(), [], ReplyHints([4096]), T1K)
    regs = memory.register_plan(plan)
    with pytest.raises(ChunkError):
        respond(memory, plan, regs, [b"x" * 4097])


def test_big_reply_without_a_reply_chunk_is_a_chunk_error(memory):
    plan = plan_call(make_call(4, []).segments(), [], ReplyHints([]), T1K)
    regs = memory.register_plan(plan)
    with pytest.raises(ChunkError):
        respond(memory, plan, regs, [b"x" * 2000])


def test_rdma_error_reply_raises(memory):
    plan = plan_call(make_call(4, []).segments(), [], ReplyHints([]), T1K)
    hdr, _ = decode_rdma_msg(encode_rdma_msg(make_error(7, 1, ERR_CHUNK)).getvalue())
    with pytest.raises(RdmaErrorReply) as ei:
        reassemble_reply(hdr, memoryview(b""), plan, [])
    assert ei.value.err == ERR_CHUNK and ei.value.xid == 7


def test_reply_naming_another_handle_is_refused(memory):
    plan = plan_call(make_call(4, []).segments(), [], ReplyHints([4096]), T1K)
    regs = memory.register_plan(plan)
    hdr = plan.header(1, 1, regs)
    hdr.chunks.rdma_writes[0] = xdr_write_chunk([xdr_rdma_segment(0xBAD, 10, 0)])
    with pytest.raises(RpcRdmaError):
        reassemble_reply(hdr, memoryview(b""), plan, regs)


def test_assemble_cuts_roundup_the_requester_included(memory):
    call = make_call(3, [b"R" * 1001])
    plan = plan_call(call.segments(), call.bulk_segments, ReplyHints(), InlineThresholds(1024, 1024))
    regs = memory.register_plan(plan)
    hdr = plan.header(1, 1, regs)
    hdr.chunks.rdma_reads[0].target.length = 1004  # roundup included
    wire = encode_rdma_msg(hdr).getvalue() + b"".join(bytes(s) for s in plan.inline)
    got, off = decode_rdma_msg(wire)
    rc = parse_call(got, memoryview(wire)[off:])
    rebuilt = b"".join(bytes(b) for b in assemble_call(rc, [b"R" * 1001 + b"\0\0\0"]))
    assert rebuilt == call.getvalue()


def test_registration_count_must_match_the_plan():
    plan = plan_call(make_call(4, []).segments(), [], ReplyHints([4096]), T1K)
    with pytest.raises(ValueError):
        plan.header(1, 1, [])
    with pytest.raises(ValueError):
        plan.pack_header_into(bytearray(1024), 1, 1, [])
    assert isinstance(Registration(1, 2, memoryview(b"")), Registration)
