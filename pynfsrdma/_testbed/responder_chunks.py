"""Chunk handling of an RPC-over-RDMA version 1 responder (RFC 8166 section 3.4-3.5, 4.4).

For the test responder that sits in front of NFS-Ganesha (:mod:`.rdma_responder`). Sans-I/O like the
requester's :mod:`~pynfsrdma._transport.rdma.chunks`:

* :func:`parse_call` turns a received call header into the Read chunks to pull (RDMA Read),
* :func:`assemble_call` rebuilds the whole RPC call from the inline part and the pulled data,
* :func:`encode_reply` splits the RPC reply into what goes into the requester's Write chunks and
  Reply chunk (RDMA Writes) and what is sent inline, and builds the reply's transport header;
* :func:`choose_invalidation` picks the registration a Send With Invalidate of that reply
  retires, when the requester advertised remote invalidation (RFC 8797).

The only NFS knowledge needed is where the DDP-eligible items of a reply are: a
:data:`DdpLocator` (``reply bytes -> [(position, length), ...]`` of READ and READLINK data, in
COMPOUND order; position = offset of the data, just after its length word). The responder passes
one in; this module never parses NFS.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._proto.rpcrdma import (
    RDMA_MSG,
    RDMA_NOMSG,
    RpcRdmaError,
    header_size,
    make_msg,
    rdma_msg,
    rdma_proc,
    xdr_rdma_segment,
    xdr_write_chunk,
)
from .._xdr import pad_len

Buffer = bytes | bytearray | memoryview
DdpLocator = Callable[[memoryview], list[tuple[int, int]]]

_ZEROS = bytes(3)


class ChunkError(RpcRdmaError):
    """The call's chunks cannot be used as asked: answer RDMA_ERROR / ERR_CHUNK."""


@dataclass(slots=True)
class ReadChunk:
    """One Read chunk: the segments (in order) that share one position."""

    position: int
    segments: list[xdr_rdma_segment]

    @property
    def length(self) -> int:
        return sum(s.length for s in self.segments)


@dataclass(slots=True)
class ReceivedCall:
    xid: int
    credit: int
    proc: rdma_proc
    inline: memoryview
    reads: list[ReadChunk]
    writes: list[xdr_write_chunk]
    reply: xdr_write_chunk | None


def parse_call(hdr: rdma_msg, payload: memoryview) -> ReceivedCall:
    """The chunks of a received call. Read list entries with the same position are one chunk."""
    proc = hdr.proc
    if proc not in (RDMA_MSG, RDMA_NOMSG):
        raise ChunkError(f"{proc.name} is not a call")
    lists = hdr.chunks
    reads: list[ReadChunk] = []
    for rc in lists.rdma_reads:
        if reads and reads[-1].position == rc.position:
            reads[-1].segments.append(rc.target)
        elif reads and rc.position < reads[-1].position:
            raise ChunkError("Read list positions go backwards")
        else:
            reads.append(ReadChunk(rc.position, [rc.target]))
    if proc == RDMA_NOMSG and (len(reads) != 1 or reads[0].position != 0):
        raise ChunkError("RDMA_NOMSG call needs exactly one position-zero Read chunk")
    if proc == RDMA_MSG and any(r.position == 0 for r in reads):
        raise ChunkError("RDMA_MSG call with a position-zero Read chunk")
    return ReceivedCall(
        hdr.rdma_xid, hdr.rdma_credit, proc, payload, reads, lists.rdma_writes, lists.rdma_reply
    )


def assemble_call(call: ReceivedCall, pulled: Sequence[Buffer]) -> list[Buffer]:
    """The whole RPC call as buffers, given the data pulled for each Read chunk (in order).

    Each chunk's data goes at its position, followed by XDR roundup (the requester SHOULD NOT
    have sent roundup; if it did, and the length word before the position says so, it is cut).
    """
    if len(pulled) != len(call.reads):
        raise ChunkError(f"{len(call.reads)} Read chunks, {len(pulled)} pulled")
    if call.proc == RDMA_NOMSG:
        return [pulled[0]]
    inline = call.inline
    out: list[Buffer] = []
    ipos = 0  # offset in the inline Payload stream
    full = 0  # offset in the rebuilt XDR stream
    for chunk, data in zip(call.reads, pulled, strict=True):
        gap = chunk.position - full
        if gap < 0 or ipos + gap > inline.nbytes:
            raise ChunkError(f"Read chunk position {chunk.position} is outside the message")
        if gap:
            out.append(inline[ipos : ipos + gap])
        ipos += gap
        full += gap
        data = memoryview(data)
        if ipos >= 4:
            (declared,) = struct.unpack_from(">I", inline, ipos - 4)
            if data.nbytes == declared + pad_len(declared) and data.nbytes != declared:
                data = data[:declared]  # the requester included roundup
        out.append(data)
        full += data.nbytes
        pad = pad_len(data.nbytes)
        if pad:
            out.append(_ZEROS[:pad])
            full += pad
    if ipos < inline.nbytes:
        out.append(inline[ipos:])
    return out


@dataclass(slots=True)
class ReplyEncoding:
    """What the responder does with one reply: RDMA Writes, then a Send of header + inline."""

    header: rdma_msg
    rdma_writes: list[tuple[xdr_rdma_segment, memoryview]]  # (target segment, data) in order
    inline: list[memoryview]


def _fill(
    chunk: xdr_write_chunk, data: memoryview, writes: list[tuple[xdr_rdma_segment, memoryview]]
) -> xdr_write_chunk:
    """Place ``data`` across the chunk's segments; the returned chunk says what was written."""
    if data.nbytes > chunk.total_length:
        raise ChunkError(f"{data.nbytes} bytes do not fit a {chunk.total_length}-byte chunk")
    off = 0
    segs = []
    for s in chunk.target:
        take = min(s.length, data.nbytes - off)
        seg = xdr_rdma_segment(s.handle, take, s.offset)
        if take:
            writes.append((seg, data[off : off + take]))
        segs.append(seg)
        off += take
    return xdr_write_chunk(segs)


def encode_reply(
    call: ReceivedCall,
    reply: Buffer,
    ddp_items: Sequence[tuple[int, int]],
    send_threshold: int,
    credit: int,
) -> ReplyEncoding:
    """Encode an RPC reply for the requester of ``call``.

    The i-th DDP item goes into the i-th Write chunk when that chunk has segments (an empty
    chunk, or no chunk, keeps the item inline); its data and roundup leave the Payload stream,
    its length word stays. Unused Write chunks come back with zero lengths. The rest goes inline
    when it fits ``send_threshold`` (the requester's receive size), else into the Reply chunk
    (RDMA_NOMSG). Raises :class:`ChunkError` when a chunk is too small or no Reply chunk was
    offered for a reply that needs one.
    """
    view = memoryview(reply).cast("B")
    writes: list[tuple[xdr_rdma_segment, memoryview]] = []
    out_chunks: list[xdr_write_chunk] = []
    kept: list[memoryview] = []
    cursor = 0
    for i, wc in enumerate(call.writes):
        if i < len(ddp_items) and wc.target:
            pos, n = ddp_items[i]
            if pos < cursor or pos + n > view.nbytes:
                raise ChunkError(f"DDP item {i} at {pos}+{n} is outside the reply")
            out_chunks.append(_fill(wc, view[pos : pos + n], writes))
            kept.append(view[cursor:pos])
            cursor = pos + n + pad_len(n)
        else:
            out_chunks.append(xdr_write_chunk([xdr_rdma_segment(s.handle, 0, s.offset) for s in wc.target]))
    kept.append(view[cursor:])
    kept = [k for k in kept if k.nbytes]
    reduced = sum(k.nbytes for k in kept)
    w_shapes = [len(c.target) for c in out_chunks]
    r_shape = None if call.reply is None else len(call.reply.target)
    if header_size(0, w_shapes, r_shape) + reduced <= send_threshold:
        unused_reply = None
        if call.reply is not None:
            unused_reply = xdr_write_chunk(
                [xdr_rdma_segment(s.handle, 0, s.offset) for s in call.reply.target]
            )
        hdr = make_msg(call.xid, credit, RDMA_MSG, [], out_chunks, unused_reply)
        return ReplyEncoding(hdr, writes, kept)
    if call.reply is None:
        raise ChunkError(f"a {reduced}-byte reply needs a Reply chunk and none was offered")
    body = memoryview(b"".join(kept)) if len(kept) != 1 else kept[0]
    used = _fill(call.reply, body, writes)
    hdr = make_msg(call.xid, credit, RDMA_NOMSG, [], out_chunks, used)
    return ReplyEncoding(hdr, writes, [])


def choose_invalidation(header: rdma_msg) -> int | None:
    """The handle a reply with ``header`` may invalidate with Send With Invalidate, or None.

    One registration of the call the reply answers, named in the reply's own header: the Reply
    chunk's (used or not: the requester offered it for this call), else the first Write chunk
    that has a segment. Read chunks are not named in a reply, so they are left to the requester.
    """
    lists = header.chunks
    if lists.rdma_reply is not None and lists.rdma_reply.target:
        return lists.rdma_reply.target[0].handle
    for chunk in lists.rdma_writes:
        if chunk.target:
            return chunk.target[0].handle
    return None


__all__ = [
    "ChunkError",
    "DdpLocator",
    "ReadChunk",
    "ReceivedCall",
    "ReplyEncoding",
    "assemble_call",
    "choose_invalidation",
    "encode_reply",
    "parse_call",
]
