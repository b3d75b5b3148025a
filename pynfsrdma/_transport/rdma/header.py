"""The RPC-over-RDMA version 1 transport header of RDMA_MSG and RDMA_NOMSG messages in one pass
of ``struct``, for both ends (the requester's calls and replies, the testbed responder's).

The generic codec (:func:`~pynfsrdma._proto.rpcrdma.decode_rdma_msg` and
:func:`~pynfsrdma._proto.rpcrdma.encode_rdma_msg`) walks its compiled XDR types: about 40 function
calls to decode a header and 28 to encode one, for every call and every reply. :func:`read_header`
decodes a well-formed version 1 RDMA_MSG or RDMA_NOMSG header into the same
:class:`~pynfsrdma._proto.rpcrdma.rdma_msg` with a few unpacks and leaves anything else (another
version, RDMA_ERROR, a bad discriminator, lists beyond the bounds, a header that ends early) to the
generic decoder, which names the fault; :func:`pack_header` encodes a header byte for byte as the
generic encoder does, and :func:`pack_header_into` encodes the same bytes straight into a send
buffer from the chunks' numbers, with no header object built first.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from ..._proto.rpcrdma import (
    RDMA_MSG,
    RDMA_NOMSG,
    RPCRDMA_CHUNKS_MAX,
    RPCRDMA_SEGMENT_LENGTH_MAX,
    RPCRDMA_SEGMENTS_MAX,
    RPCRDMA_VERSION,
    rdma_msg,
    rpc_rdma_header,
    xdr_rdma_segment,
    xdr_read_chunk,
    xdr_write_chunk,
)

_HEAD: Final = struct.Struct(">IIII")  # xid, vers, credit, proc
_WORD = struct.Struct(">I")
_READ_ENTRY = struct.Struct(">IIIIQ")  # present, position, handle, length, offset
_SEGMENT = struct.Struct(">IIQ")  # handle, length, offset
_CHUNK_HEAD = struct.Struct(">II")  # present, segment count
_ONE_SEGMENT = struct.Struct(">IIIIQ")  # present, segment count, handle, length, offset
_PRESENT, _ABSENT = 1, 0  # an XDR optional-data discriminator


def _segments(data: memoryview, pos: int) -> tuple[list[xdr_rdma_segment], int] | None:
    (count,) = _WORD.unpack_from(data, pos)
    if count > RPCRDMA_SEGMENTS_MAX:
        return None
    pos += 4
    segs = []
    for handle, length, offset in _SEGMENT.iter_unpack(data[pos : pos + count * _SEGMENT.size]):
        if length > RPCRDMA_SEGMENT_LENGTH_MAX:
            return None
        segs.append(xdr_rdma_segment(handle, length, offset))
    if len(segs) != count:
        return None
    return segs, pos + count * _SEGMENT.size


def read_header(data: memoryview) -> tuple[rdma_msg, int] | None:
    """The header of a version 1 RDMA_MSG or RDMA_NOMSG message and where its Payload stream
    starts, as :func:`~pynfsrdma._proto.rpcrdma.decode_rdma_msg` returns them, in one pass; None
    for anything else (another version or message type, a malformed or out-of-bounds list):
    the generic decoder then says what is wrong."""
    try:
        xid, vers, credit, proc = _HEAD.unpack_from(data)
        if vers != RPCRDMA_VERSION or proc not in (RDMA_MSG, RDMA_NOMSG):
            return None
        pos = _HEAD.size
        reads: list[xdr_read_chunk] = []
        while True:
            (present,) = _WORD.unpack_from(data, pos)
            if present == _ABSENT:
                pos += 4
                break
            if present != _PRESENT or len(reads) == RPCRDMA_CHUNKS_MAX:
                return None
            _, position, handle, length, offset = _READ_ENTRY.unpack_from(data, pos)
            if length > RPCRDMA_SEGMENT_LENGTH_MAX:
                return None
            reads.append(xdr_read_chunk(position, xdr_rdma_segment(handle, length, offset)))
            pos += _READ_ENTRY.size
        writes: list[xdr_write_chunk] = []
        while True:
            (present,) = _WORD.unpack_from(data, pos)
            pos += 4
            if present == _ABSENT:
                break
            if present != _PRESENT or len(writes) == RPCRDMA_CHUNKS_MAX:
                return None
            got = _segments(data, pos)
            if got is None:
                return None
            writes.append(xdr_write_chunk(got[0]))
            pos = got[1]
        (present,) = _WORD.unpack_from(data, pos)
        pos += 4
        reply = None
        if present == _PRESENT:
            got = _segments(data, pos)
            if got is None:
                return None
            reply, pos = xdr_write_chunk(got[0]), got[1]
        elif present != _ABSENT:
            return None
    except struct.error:  # the header ends early
        return None
    body = (RDMA_MSG if proc == RDMA_MSG else RDMA_NOMSG, rpc_rdma_header(reads, writes, reply))
    return rdma_msg(xid, vers, credit, body), pos


def _pack_segments(out: bytearray, segs: list[xdr_rdma_segment]) -> None:
    out += _WORD.pack(len(segs))
    for s in segs:
        out += _SEGMENT.pack(s.handle, s.length, s.offset)


def pack_header(header: rdma_msg) -> bytearray:
    """An RDMA_MSG or RDMA_NOMSG header encoded, byte for byte as
    :func:`~pynfsrdma._proto.rpcrdma.encode_rdma_msg` does, in one pass."""
    proc, lists = header.rdma_body
    out = bytearray(_HEAD.pack(header.rdma_xid, header.rdma_vers, header.rdma_credit, proc))
    for rc in lists.rdma_reads:
        t = rc.target
        out += _READ_ENTRY.pack(_PRESENT, rc.position, t.handle, t.length, t.offset)
    out += _WORD.pack(_ABSENT)
    for wc in lists.rdma_writes:
        out += _WORD.pack(_PRESENT)
        _pack_segments(out, wc.target)
    out += _WORD.pack(_ABSENT)
    if lists.rdma_reply is None:
        out += _WORD.pack(_ABSENT)
    else:
        out += _WORD.pack(_PRESENT)
        _pack_segments(out, lists.rdma_reply.target)
    return out


Segment = tuple[int, int, int]
"""An RDMA segment's handle, length and offset."""

ReadEntry = tuple[int, int, int, int]
"""A Read list entry's position, handle, length and offset."""


def pack_header_into(
    buf: bytearray | memoryview,
    xid: int,
    credit: int,
    proc: int,
    reads: Sequence[ReadEntry] = (),
    writes: Sequence[Segment | None] = (),
    reply: Segment | None = None,
) -> int:
    """An RDMA_MSG or RDMA_NOMSG header written at the start of ``buf``, byte for byte as
    :func:`pack_header` encodes it; its length. Each Write chunk and the Reply chunk carry one
    segment (a requester's chunks), a Write chunk of None none (an empty chunk)."""
    _HEAD.pack_into(buf, 0, xid, RPCRDMA_VERSION, credit, proc)
    pos = _HEAD.size
    for position, handle, length, offset in reads:
        _READ_ENTRY.pack_into(buf, pos, _PRESENT, position, handle, length, offset)
        pos += _READ_ENTRY.size
    _WORD.pack_into(buf, pos, _ABSENT)
    pos += 4
    for seg in writes:
        if seg is None:
            _CHUNK_HEAD.pack_into(buf, pos, _PRESENT, 0)
            pos += _CHUNK_HEAD.size
        else:
            _ONE_SEGMENT.pack_into(buf, pos, _PRESENT, 1, *seg)
            pos += _ONE_SEGMENT.size
    _WORD.pack_into(buf, pos, _ABSENT)
    pos += 4
    if reply is None:
        _WORD.pack_into(buf, pos, _ABSENT)
        return pos + 4
    _ONE_SEGMENT.pack_into(buf, pos, _PRESENT, 1, *reply)
    return pos + _ONE_SEGMENT.size


__all__ = ["ReadEntry", "Segment", "pack_header", "pack_header_into", "read_header"]
