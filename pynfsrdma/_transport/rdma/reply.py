"""Reply reassembly for an RPC-over-RDMA version 1 requester (RFC 8166 section 3.4-3.5).

A reply comes as a transport header plus either an inline Payload stream (RDMA_MSG) or nothing
inline and the Payload stream in the Reply chunk (RDMA_NOMSG). DDP-eligible items the responder
placed in Write chunks are missing from the Payload stream: their length word is there, their
data and roundup are not. :class:`RdmaReplyUnpacker` reads the stream and, on each ``bulk()``,
takes the next Write chunk's data: a view of the registered buffer the responder wrote into.

Which chunk an item of zero length leaves behind: RFC 8267 4.4 pairs Write chunks with READ
operations by position, so a READ that returns no data returns its chunk empty and the next READ
uses the next chunk. Linux's nfsd pairs chunks with the results that carry data (RFC 8166 3.4.6,
unused Write chunks: the next item is placed in the chunk left unconsumed), so the next READ's
data is in the *same* chunk and the last chunk comes back empty. The reply's Write list tells
them apart: a zero-length item consumes its chunk only when that chunk came back with nothing
written. (A COMPOUND stops at the first failed operation, so a READ without its data arm is the
last DDP item of a reply: it never shifts the chunks of another item.)
"""

from __future__ import annotations

from collections.abc import Sequence

from ..._proto.rpcrdma import (
    ERR_VERS,
    RDMA_ERROR,
    RDMA_MSG,
    RDMA_NOMSG,
    RpcRdmaError,
    rdma_msg,
    rpc_rdma_errcode,
    xdr_write_chunk,
)
from ..._xdr import Unpacker, XdrError, pad_len
from .chunks import CallPlan, Registration


class RdmaErrorReply(RpcRdmaError):
    """The responder answered RDMA_ERROR (ERR_VERS with its version range, or ERR_CHUNK)."""

    def __init__(self, xid: int, err: rpc_rdma_errcode, vers_low: int = 0, vers_high: int = 0) -> None:
        what = f"{err.name} (versions {vers_low}..{vers_high})" if err == ERR_VERS else err.name
        super().__init__(f"responder refused call {xid:#x}: {what}")
        self.xid = xid
        self.err = err
        self.vers_low = vers_low
        self.vers_high = vers_high


class RdmaReplyUnpacker(Unpacker):
    """An unpacker whose ``bulk()`` returns Write chunk data, in Write list order.

    ``write_chunks[i]`` is the data the responder wrote for the i-th DDP-eligible item (a view of
    the registered buffer, cut to the length it reported), or None when that item has no Write
    chunk (it is then inline). An item whose chunk came back with nothing written while its
    length word is not zero was returned inline by the responder.
    """

    __slots__ = ("_next_chunk", "write_chunks")

    def __init__(
        self,
        data: bytes | bytearray | memoryview,
        write_chunks: Sequence[memoryview | None] = (),
        pos: int = 0,
        end: int | None = None,
    ) -> None:
        super().__init__(data, pos, end)
        self.write_chunks = list(write_chunks)
        self._next_chunk = 0

    def carried(self) -> int:
        """The rest of the Payload stream and the data placed in the Write chunks not yet read: a
        READ's data counts as received as it does over TCP."""
        placed = self.remaining()
        for c in self.write_chunks[self._next_chunk :]:
            if c is not None:
                placed += c.nbytes
        return placed

    def bulk(self) -> memoryview:
        i = self._next_chunk
        chunk = self.write_chunks[i] if i < len(self.write_chunks) else None
        n = self.uint32()
        if n == 0:
            # consumed only when it came back unused (RFC 8267); else the next item's data is in
            # it (Linux's nfsd; see the module docstring)
            if i < len(self.write_chunks) and (chunk is None or chunk.nbytes == 0):
                self._next_chunk = i + 1
            return self.view[self.pos : self.pos]
        if i < len(self.write_chunks):
            self._next_chunk = i + 1
        if chunk is None or chunk.nbytes == 0:
            # no Write chunk for this item (or an empty one), or the responder chose to return
            # it inline: the data is in the Payload stream
            p = self.need(n + pad_len(n))
            return self.view[p : p + n]
        if n > chunk.nbytes:
            raise XdrError(f"DDP item of {n} bytes but only {chunk.nbytes} written to its Write chunk")
        return chunk[:n]


def _written(got: xdr_write_chunk, offered: Registration, offered_len: int, what: str) -> memoryview:
    """The bytes the responder wrote into one of our single-segment chunks."""
    if len(got.target) != 1:
        raise RpcRdmaError(f"{what}: {len(got.target)} segments returned, 1 offered")
    seg = got.target[0]
    if seg.handle != offered.handle or seg.length > min(offered_len, offered.buffer.nbytes):
        raise RpcRdmaError(f"{what}: segment {seg} does not match the one offered")
    return offered.buffer[: seg.length]


def reassemble_reply(
    hdr: rdma_msg, payload: memoryview, plan: CallPlan, regs: Sequence[Registration]
) -> RdmaReplyUnpacker:
    """The reply message of a call sent with ``plan``/``regs``, positioned at its XID.

    ``payload`` is what followed the transport header in the Receive buffer. Raises
    :class:`RdmaErrorReply` for RDMA_ERROR and :class:`RpcRdmaError` when the chunk lists do not
    match what the call offered.
    """
    proc, body = hdr.rdma_body
    if proc == RDMA_ERROR:
        err, arm = body
        if err == ERR_VERS:
            raise RdmaErrorReply(hdr.rdma_xid, rpc_rdma_errcode(err), arm.rdma_vers_low, arm.rdma_vers_high)
        raise RdmaErrorReply(hdr.rdma_xid, rpc_rdma_errcode(err))
    lists = hdr.chunks
    if lists.rdma_reads:
        raise RpcRdmaError("a reply carries a Read list")
    sinks = plan.write_sink_index()
    if len(lists.rdma_writes) > len(plan.write_chunks):
        raise RpcRdmaError(
            f"{len(lists.rdma_writes)} Write chunks returned, {len(plan.write_chunks)} offered"
        )
    chunks: list[memoryview | None] = []
    for i, got in enumerate(lists.rdma_writes):
        need_i = sinks.get(i)
        if need_i is None:
            if got.target:
                raise RpcRdmaError(f"Write chunk {i}: segments returned for an empty chunk")
            chunks.append(None)
        else:
            chunks.append(_written(got, regs[need_i], plan.needs[need_i].length, f"Write chunk {i}"))
    if proc == RDMA_MSG:
        return RdmaReplyUnpacker(payload, chunks)
    assert proc == RDMA_NOMSG
    reply_i = plan.reply_sink_index()
    if reply_i is None or lists.rdma_reply is None:
        raise RpcRdmaError("RDMA_NOMSG reply without a Reply chunk")
    body_view = _written(lists.rdma_reply, regs[reply_i], plan.needs[reply_i].length, "Reply chunk")
    return RdmaReplyUnpacker(body_view, chunks)


__all__ = ["RdmaErrorReply", "RdmaReplyUnpacker", "reassemble_reply"]
