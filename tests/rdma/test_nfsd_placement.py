"""Replies as Linux's nfsd (6.1) sends them, with two READs in one COMPOUND.

The inline Payload streams below are the bytes a Debian 6.1 kernel nfsd sent our client in the
real-RDMA rig (``tests/vm``, step "extras"): the RPC reply header, SEQUENCE, PUTFH and two READ
results, with each READ's data *and its XDR roundup* left out of the stream where a Write chunk
took them (the length words stay). The Write lists are the ones nfsd returned. The sinks are
filled with what nfsd RDMA-wrote into them, and our reassembly must give every READ its data.

nfsd pairs Write chunks with the READ results that carry data (``svc_rdma_result_payload``
leaves its chunk cursor where it is for a zero-length result): a READ at end of file followed by
another READ puts the second READ's data in the *first* chunk and returns the second one unused.
"""

from __future__ import annotations

from fake_memory import FakeMemory

from pynfsrdma._proto import rpc
from pynfsrdma._proto.nfs4.compound import decode_compound_res
from pynfsrdma._proto.nfs4.const import NFS4_OK, OP_PUTFH, OP_READ, OP_SEQUENCE
from pynfsrdma._proto.private_data import InlineThresholds
from pynfsrdma._proto.rpcrdma import RDMA_MSG, make_msg, xdr_rdma_segment, xdr_write_chunk
from pynfsrdma._transport.base import ReplyHints
from pynfsrdma._transport.rdma.chunks import NeedKind, plan_call
from pynfsrdma._transport.rdma.reply import reassemble_reply
from pynfsrdma._xdr import Packer

V1 = InlineThresholds(1024, 1024)  # the rig's step runs with the version 1 defaults
FILE = bytes((i * 7 + (i >> 11)) & 0xFF for i in range(2 << 20))  # any content: it is placed as is

# READ(100000, 60003) and READ(1048583, 90001): both in their Write chunks; 60003 has one byte of
# roundup, which is not in the stream either
BOTH_PLACED = bytes.fromhex(
    "e2dde77d" "00000001" "00000000" "0000000000000000" "00000000"  # xid REPLY accepted verf SUCCESS
    "00000000" "00000000" "00000004"  # COMPOUND: NFS4_OK, empty tag, 4 results
    "00000035" "00000000" "0998026bbda8d4bc0200000000000000" "00000006" "00000000"  # SEQUENCE
    "0000001d" "0000001d" "00000000"
    "00000016" "00000000"  # PUTFH
    "00000019" "00000000" "00000000" "0000ea63"  # READ: eof false, 60003 bytes (data left out)
    "00000019" "00000000" "00000000" "00015f91"  # READ: eof false, 90001 bytes (data left out)
)  # fmt: skip

# READ(2 MiB = end of file, 50000) and READ(0, 40000): the first returns no data (eof true)
FIRST_AT_EOF = bytes.fromhex(
    "e2dde781" "00000001" "00000000" "0000000000000000" "00000000"
    "00000000" "00000000" "00000004"
    "00000035" "00000000" "0998026bbda8d4bc0200000000000000" "00000007" "00000000"
    "0000001d" "0000001d" "00000000"
    "00000016" "00000000"
    "00000019" "00000000" "00000001" "00000000"  # READ: eof true, 0 bytes
    "00000019" "00000000" "00000000" "00009c40"  # READ: eof false, 40000 bytes (data left out)
)  # fmt: skip


def small_call() -> Packer:
    """A call that goes inline (its content does not matter to the reply's chunks)."""
    p = Packer()
    for _ in range(30):
        p.uint32(0)
    return p


def nfsd_reply(memory: FakeMemory, spans: list[tuple[int, int]], placed: list[bytes], inline: bytes):
    """Plan the call as our transport does, then answer it as nfsd did: ``placed[i]`` is what
    nfsd RDMA-wrote into Write chunk i (b"" when it returned the chunk unused)."""
    call = small_call()
    plan = plan_call(call.segments(), [], ReplyHints(ddp_sizes=[n for _, n in spans]), V1)
    regs = memory.register_plan(plan)
    sinks = [r for r, n in zip(regs, plan.needs, strict=True) if n.kind is NeedKind.WRITE_SINK]
    assert len(sinks) == len(placed)
    writes = []
    for reg, data in zip(sinks, placed, strict=True):
        seg = xdr_rdma_segment(reg.handle, len(data), reg.offset)
        if data:
            memory.rdma_write(seg, memoryview(data))
        writes.append(xdr_write_chunk([seg]))
    hdr = make_msg(int.from_bytes(inline[:4], "big"), 64, RDMA_MSG, [], writes, None)
    return plan, regs, reassemble_reply(hdr, memoryview(inline), plan, regs)


def decode(u):
    u.uint32()  # xid
    assert u.uint32() == rpc.REPLY
    assert rpc.unpack_reply_header(u).accept == rpc.SUCCESS
    res = decode_compound_res(u)
    u.done()
    assert res.status == NFS4_OK
    assert [r.opnum for r in res.resarray] == [OP_SEQUENCE, OP_PUTFH, OP_READ, OP_READ]
    return res.resarray[2].res, res.resarray[3].res


def test_two_reads_each_in_its_write_chunk_with_roundup_left_out(memory):
    spans = [(100_000, 60_003), (1_048_583, 90_001)]
    a, b = (FILE[o : o + n] for o, n in spans)
    _, regs, u = nfsd_reply(memory, spans, [a, b], BOTH_PLACED)
    r1, r2 = decode(u)
    assert (bytes(r1.data), r1.eof) == (a, False)
    assert (bytes(r2.data), r2.eof) == (b, False)
    # each a view of the memory nfsd wrote into, not a copy
    assert r1.data.obj is regs[0].buffer.obj and r2.data.obj is regs[1].buffer.obj


def test_a_read_at_end_of_file_leaves_its_chunk_to_the_next_read(memory):
    spans = [(2 << 20, 50_000), (0, 40_000)]
    second = FILE[:40_000]
    # nfsd: the second READ's data went into the first chunk, the second came back unused
    plan, regs, u = nfsd_reply(memory, spans, [second, b""], FIRST_AT_EOF)
    assert plan.write_chunks[0] >= 40_000  # provisioned for the largest item it may receive
    r1, r2 = decode(u)
    assert (bytes(r1.data), r1.eof) == (b"", True)
    assert (bytes(r2.data), r2.eof) == (second, False)
    assert r2.data.obj is regs[0].buffer.obj


def test_the_same_reply_placed_by_position_as_rfc_8267_reads_the_same(memory):
    # a responder that pairs chunks with READs by position returns the first chunk unused
    spans = [(2 << 20, 50_000), (0, 40_000)]
    second = FILE[:40_000]
    _, regs, u = nfsd_reply(memory, spans, [b"", second], FIRST_AT_EOF)
    r1, r2 = decode(u)
    assert bytes(r1.data) == b"" and bytes(r2.data) == second
    assert r2.data.obj is regs[1].buffer.obj
