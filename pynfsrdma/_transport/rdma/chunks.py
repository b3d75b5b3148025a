"""Marshalling decisions of an RPC-over-RDMA version 1 requester (RFC 8166 section 3.4-3.5,
RFC 8267 for NFSv4), as a pure function of the encoded call, its reply hints and the thresholds.

:func:`plan_call` never calls a provider. It names the memory the transport must register
(:class:`RegionNeed`: the caller's buffers that the responder reads, and buffers that it writes),
and once the transport has registered them, :meth:`CallPlan.header` builds the transport header.

The rules, in the order they are tried for the call (send direction):

1. The whole call fits the send threshold with its header: RDMA_MSG, everything inline (small
   WRITE payloads included; a copy into the Send is cheaper than a registration).
2. The call has bulk payloads (``Packer.bulk_segments``: WRITE data, SYMLINK data) and the rest
   fits: RDMA_MSG with one Read chunk per payload. The Read chunk's ``position`` is the payload's
   offset in the XDR stream (after its length word, which stays inline; RFC 8166 3.4.5). The
   chunk carries exactly the payload, without XDR roundup; the inline stream leaves out the
   payload *and* its roundup (RFC 8166 3.4.5.2), so what follows stays 4-byte aligned.
3. Otherwise RDMA_NOMSG with a position-zero Read chunk carrying the whole call: one segment per
   buffer of the encoded call (they are registered where they lie, no pull-up copy).

And for the reply (receive direction), from :class:`ReplyHints`:

* Each DDP-eligible reply item (READ data, READLINK data, in COMPOUND order; RFC 8267 4.1)
  comes inline while the reply still fits the receive threshold; otherwise it gets a Write chunk.
  Every item before the last one that needs a Write chunk gets a Write chunk too, with one
  segment: RFC 8267 4.4 lets an *empty* Write chunk (no segments) ask for an item inline, but
  Linux's nfsd refuses a Write chunk without segments (ERR_CHUNK). Items after it come inline.
* Each Write chunk is provisioned for the largest item that can land in it (RFC 8166 3.4.6,
  unused Write chunks): a responder that leaves a chunk unused (an item of zero length, as
  Linux's nfsd does) places the next item in it. So chunk i is as large as the largest of items
  i and after that have chunks.
* A Reply chunk is offered when ``max_reply`` (the non-DDP part, when it may be large) plus the
  inline items cannot be received inline. ``max_reply == 0`` means "small": at most
  ``small_reply`` bytes besides DDP items (512 by default), used to decide whether items fit.

The reply header echoes the Write list and Reply chunk, so their size counts against the
receive threshold too.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..._proto.private_data import InlineThresholds
from ..._proto.rpcrdma import (
    RDMA_MSG,
    RDMA_NOMSG,
    header_size,
    make_msg,
    rdma_msg,
    rdma_proc,
    xdr_rdma_segment,
    xdr_read_chunk,
    xdr_write_chunk,
)
from ..._xdr import BulkSegment, pad_len
from ..base import ReplyHints
from .header import ReadEntry, Segment, pack_header_into

Buffer = bytes | bytearray | memoryview

SMALL_REPLY: int = 512
"""Bytes a reply declared small (``max_reply == 0``) may hold besides its DDP items."""


class NeedKind(enum.Enum):
    READ_SOURCE = "read"  # the responder RDMA-Reads it (a Read chunk): register for remote read
    WRITE_SINK = "write"  # the responder RDMA-Writes a DDP item into it (a Write chunk)
    REPLY_SINK = "reply"  # the responder RDMA-Writes the reply into it (the Reply chunk)


@dataclass(slots=True)
class RegionNeed:
    """One memory region the transport registers for one call.

    READ_SOURCE: ``buffer`` is the caller's data, registered where it lies; ``position`` is the
    Read chunk's XDR position. WRITE_SINK: ``length`` bytes to allocate; ``item`` is the index of
    the DDP-eligible reply item. REPLY_SINK: ``length`` bytes to allocate.
    """

    kind: NeedKind
    length: int
    buffer: memoryview | None = None
    position: int = 0
    item: int = 0


@dataclass(slots=True)
class Registration:
    """What the transport tells the plan about a registered region (same order as the needs)."""

    handle: int  # the steering tag / rkey the responder uses
    offset: int  # the RDMA address of the region's first byte
    buffer: memoryview  # the registered memory (the sink the responder writes into)


@dataclass(slots=True)
class CallPlan:
    """How one call goes out and how its reply may come back."""

    proc: rdma_proc
    inline: list[Buffer]  # the Payload stream sent after the header (empty for RDMA_NOMSG)
    needs: list[RegionNeed]
    write_chunks: Sequence[int | None]  # per DDP item in order: Write chunk size, None = empty chunk
    reply_chunk: int  # Reply chunk size, 0 = none
    header_len: int
    inline_len: int = field(default=0)

    def header(self, xid: int, credit: int, regs: Sequence[Registration]) -> rdma_msg:
        """The transport header, given the registrations of :attr:`needs` (in the same order)."""
        if len(regs) != len(self.needs):
            raise ValueError(f"{len(self.needs)} regions needed, {len(regs)} registered")
        reads: list[xdr_read_chunk] = []
        writes: list[xdr_write_chunk] = [xdr_write_chunk([]) for _ in self.write_chunks]
        reply: xdr_write_chunk | None = None
        for need, reg in zip(self.needs, regs, strict=True):
            seg = xdr_rdma_segment(reg.handle, need.length, reg.offset)
            if need.kind is NeedKind.READ_SOURCE:
                reads.append(xdr_read_chunk(need.position, seg))
            elif need.kind is NeedKind.WRITE_SINK:
                writes[need.item] = xdr_write_chunk([seg])
            else:
                reply = xdr_write_chunk([seg])
        return make_msg(xid, credit, self.proc, reads, writes, reply)

    def pack_header_into(
        self, buf: bytearray | memoryview, xid: int, credit: int, regs: Sequence[Registration]
    ) -> int:
        """The transport header of :meth:`header` written at the start of ``buf`` (a send buffer),
        with no header object in between; its length."""
        if len(regs) != len(self.needs):
            raise ValueError(f"{len(self.needs)} regions needed, {len(regs)} registered")
        reads: list[ReadEntry] = []
        writes: list[Segment | None] = [None] * len(self.write_chunks)
        reply: Segment | None = None
        for need, reg in zip(self.needs, regs, strict=True):
            kind = need.kind
            if kind is NeedKind.READ_SOURCE:
                reads.append((need.position, reg.handle, need.length, reg.offset))
            elif kind is NeedKind.WRITE_SINK:
                writes[need.item] = (reg.handle, need.length, reg.offset)
            else:
                reply = (reg.handle, need.length, reg.offset)
        return pack_header_into(buf, xid, credit, self.proc, reads, writes, reply)

    def write_sink_index(self) -> dict[int, int]:
        """DDP item index -> index in :attr:`needs` of its Write chunk."""
        return {n.item: i for i, n in enumerate(self.needs) if n.kind is NeedKind.WRITE_SINK}

    def reply_sink_index(self) -> int | None:
        return next((i for i, n in enumerate(self.needs) if n.kind is NeedKind.REPLY_SINK), None)


def _xdr_len(n: int) -> int:
    return n + pad_len(n)


def plan_reply(
    hints: ReplyHints, recv_threshold: int, small_reply: int = SMALL_REPLY
) -> tuple[list[int | None], int]:
    """Write chunk sizes per DDP item (None, an empty chunk, is never chosen: see the module
    docstring), and the Reply chunk size (0: none)."""
    base = hints.max_reply or small_reply
    sizes = list(hints.ddp_sizes)
    # which items do not fit inline, taking each in order with the inline items before it
    last = -1  # the last item that needs a Write chunk
    inline_items = 0
    for i, size in enumerate(sizes):
        hdr = header_size(0, [1] * (last + 1), None)  # the reply header echoes our Write list
        if size == 0 or hdr + base + inline_items + 4 + _xdr_len(size) <= recv_threshold:
            inline_items += 4 + _xdr_len(size)
        else:
            last = i
            inline_items = 0  # the items before it get Write chunks too

    def inline_after(k: int) -> int:
        return sum(4 + _xdr_len(n) for n in sizes[k + 1 :])

    # items before the last chunked one have chunks too; make sure what stays inline still fits
    while last >= 0 and last + 1 < len(sizes):
        if header_size(0, [1] * (last + 1), None) + base + inline_after(last) <= recv_threshold:
            break
        last += 1
    chunks: list[int | None] = [max(sizes[i : last + 1]) for i in range(last + 1)]
    inline_items = inline_after(last)
    reply = 0
    hdr = header_size(0, [1] * len(chunks), None)
    if hints.max_reply and hdr + hints.max_reply + inline_items > recv_threshold:
        reply = _xdr_len(hints.max_reply + inline_items)
    return chunks, reply


def plan_call(
    segments: Sequence[Buffer],
    bulk: Sequence[BulkSegment],
    hints: ReplyHints,
    thresholds: InlineThresholds,
    small_reply: int = SMALL_REPLY,
) -> CallPlan:
    """Decide how a call encoded as ``segments`` (``Packer.segments()``) goes out.

    ``bulk`` is ``Packer.bulk_segments``; each payload must be one of ``segments`` (the packer
    keeps them as separate buffers).
    """
    write_chunks, reply_len, reply_needs, w_shapes, r_shape = _reply_side(
        tuple(hints.ddp_sizes), hints.max_reply, thresholds.recv, small_reply
    )
    total = 0
    for s in segments:
        total += memoryview(s).nbytes

    # 1. all inline
    hdr = header_size(0, w_shapes, r_shape)
    if hdr + total <= thresholds.send:
        return CallPlan(RDMA_MSG, list(segments), list(reply_needs), write_chunks, reply_len, hdr, total)

    # 2. Read chunks for the bulk payloads, the rest inline
    if bulk:
        hdr = header_size(len(bulk), w_shapes, r_shape)
        reduced = total
        for b in bulk:
            n = b.data.nbytes
            reduced -= n + pad_len(n)
        if hdr + reduced <= thresholds.send:
            inline = _reduce(segments, bulk)
            needs = [
                RegionNeed(NeedKind.READ_SOURCE, b.data.nbytes, buffer=b.data, position=b.position)
                for b in bulk
            ]
            return CallPlan(RDMA_MSG, inline, [*needs, *reply_needs], write_chunks, reply_len, hdr, reduced)

    # 3. the whole call in a position-zero Read chunk
    parts = [_bytes_view(s) for s in segments if memoryview(s).nbytes]
    hdr = header_size(len(parts), w_shapes, r_shape)
    if hdr > thresholds.send:
        raise ValueError(f"a {hdr}-byte transport header does not fit the {thresholds.send}-byte threshold")
    needs = [RegionNeed(NeedKind.READ_SOURCE, p.nbytes, buffer=p, position=0) for p in parts]
    return CallPlan(RDMA_NOMSG, [], [*needs, *reply_needs], write_chunks, reply_len, hdr, 0)


@functools.lru_cache(maxsize=64)
def _reply_side(
    ddp_sizes: tuple[int, ...], max_reply: int, recv_threshold: int, small_reply: int
) -> tuple[tuple[int | None, ...], int, tuple[RegionNeed, ...], list[int], int | None]:
    """The reply's half of a plan, worked out once per shape of reply (a mount sends few shapes:
    READs of its rsize, small replies): Write chunk sizes, Reply chunk size, the sinks they need
    (never changed by their users), and the chunk shapes that size the call's header."""
    write_chunks, reply_len = plan_reply(ReplyHints(list(ddp_sizes), max_reply), recv_threshold, small_reply)
    reply_needs = [
        RegionNeed(NeedKind.WRITE_SINK, size, item=i)
        for i, size in enumerate(write_chunks)
        if size is not None
    ]
    if reply_len:
        reply_needs.append(RegionNeed(NeedKind.REPLY_SINK, reply_len))
    w_shapes = [0 if c is None else 1 for c in write_chunks]
    return tuple(write_chunks), reply_len, tuple(reply_needs), w_shapes, 1 if reply_len else None


def _bytes_view(s: Buffer) -> memoryview:
    if isinstance(s, memoryview) and s.format == "B" and s.ndim == 1:
        return s  # keep the caller's view itself
    return memoryview(s).cast("B")


def _reduce(segments: Sequence[Buffer], bulk: Sequence[BulkSegment]) -> list[Buffer]:
    """The Payload stream without the bulk payloads and their XDR roundup."""
    skip = {id(b.data) for b in bulk}
    out: list[Buffer] = []
    strip = 0
    found = 0
    for s in segments:
        if id(s) in skip:
            strip = pad_len(memoryview(s).nbytes)
            found += 1
            continue
        if strip:
            s = memoryview(s)[strip:]  # the roundup of the payload just left out
            strip = 0
        if memoryview(s).nbytes:
            out.append(s)
    if len(skip) != len(bulk) or found != len(bulk):
        raise ValueError("bulk payloads must be segments of the encoded call")
    return out


__all__ = [
    "SMALL_REPLY",
    "CallPlan",
    "NeedKind",
    "RegionNeed",
    "Registration",
    "plan_call",
    "plan_reply",
]
