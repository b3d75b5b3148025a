"""The RPC-over-RDMA version 1 transport header (RFC 8166, section 4 and its XDR in section 7).

Every RPC message sent over RDMA is preceded by this header: the XID repeated, the protocol
version, the credit value, the message type (``rdma_proc``) and the three chunk lists that tell the
peer where the parts of the message that do not travel inline are (the Read list, the Write list
and the Reply chunk).

The XDR linked lists of the RFC (``xdr_read_list``, ``xdr_write_list``) are Python lists here.
RDMA_MSGP and RDMA_DONE decode (so that they are recognised) but :func:`decode_rdma_msg` refuses
them with :class:`RpcRdmaUnsupportedProc`. Every malformed header raises :class:`RpcRdmaError`
(an :class:`~pynfsrdma._xdr.XdrError`).
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Final, TypeVar, dataclass_transform

from .._xdr import (
    Array,
    Bounded,
    Enum,
    LinkedList,
    Optional,
    Packer,
    Union,
    Unpacker,
    XdrError,
    struct_type,
    uint32,
    uint64,
    void,
    xdr_struct,
)

_C = TypeVar("_C", bound=type)


@dataclass_transform()
def _struct(cls: _C) -> _C:
    # xdr_struct makes a dataclass; this tells type checkers so (the XDR layer does not yet).
    return xdr_struct(cls)


RPCRDMA_VERSION: Final = 1
"""rdma_vers of RPC-over-RDMA version 1."""

RPCRDMA_V1_DEF_INLINE_SIZE: Final = 1024
"""Inline threshold of version 1 when nothing else was negotiated (RFC 8166 section 3.3.3)."""

RPCRDMA_HDRLEN_MIN: Final = 28
"""Length of the smallest header: xid, vers, credit, proc and three empty chunk lists."""

XDR_RDMA_SEGMENT_SIZE: Final = 16
"""Encoded size of one xdr_rdma_segment (handle, length, 64-bit offset)."""

# Bounds on what a peer's header may hold (RFC 8166 sets none): a larger value is refused where it is
# decoded. Each chunk of ours is one segment, and a call has one Write chunk per DDP-eligible item of
# its reply; the Linux client puts at most 16 segments in a header (RPCRDMA_MAX_HDR_SEGS).
RPCRDMA_CHUNKS_MAX: Final = 16
"""Chunks in a Read list or a Write list."""

RPCRDMA_SEGMENTS_MAX: Final = 16
"""Segments in one Write (or Reply) chunk."""

RPCRDMA_SEGMENT_LENGTH_MAX: Final = 16 << 20
"""Bytes in one segment: sixteen times the largest this client registers (a 1 MiB READ or WRITE)."""


class rdma_proc(enum.IntEnum):
    RDMA_MSG = 0  # an RPC call or reply, Payload stream inline
    RDMA_NOMSG = 1  # an RPC call or reply, Payload stream in a chunk
    RDMA_MSGP = 2  # obsolete (RFC 5666 padded message): refused
    RDMA_DONE = 3  # obsolete (RFC 5666 reply chunk release): refused
    RDMA_ERROR = 4  # an RPC-over-RDMA transport error


class rpc_rdma_errcode(enum.IntEnum):
    ERR_VERS = 1
    ERR_CHUNK = 2


RDMA_MSG: Final = rdma_proc.RDMA_MSG
RDMA_NOMSG: Final = rdma_proc.RDMA_NOMSG
RDMA_MSGP: Final = rdma_proc.RDMA_MSGP
RDMA_DONE: Final = rdma_proc.RDMA_DONE
RDMA_ERROR: Final = rdma_proc.RDMA_ERROR
ERR_VERS: Final = rpc_rdma_errcode.ERR_VERS
ERR_CHUNK: Final = rpc_rdma_errcode.ERR_CHUNK


class RpcRdmaError(XdrError):
    """A transport header that is malformed or that this implementation cannot accept."""


class RpcRdmaVersionError(RpcRdmaError):
    """rdma_vers is not 1: the Responder answers RDMA_ERROR / ERR_VERS (RFC 8166 section 4.5)."""

    def __init__(self, xid: int, vers: int) -> None:
        super().__init__(f"RPC-over-RDMA version {vers} is not supported")
        self.xid = xid
        self.vers = vers


class RpcRdmaUnsupportedProc(RpcRdmaError):
    """RDMA_MSGP or RDMA_DONE: valid in RFC 5666, not used by version 1 implementations."""

    def __init__(self, xid: int, proc: rdma_proc) -> None:
        super().__init__(f"{proc.name} is not supported")
        self.xid = xid
        self.proc = proc


segment_length = Bounded(uint32, RPCRDMA_SEGMENT_LENGTH_MAX, "RDMA segment length")


@_struct
class xdr_rdma_segment:
    handle: Annotated[int, uint32]  # the registered memory handle (rkey / steering tag)
    length: Annotated[int, segment_length]
    offset: Annotated[int, uint64]


@_struct
class xdr_read_chunk:
    position: Annotated[int, uint32]
    target: xdr_rdma_segment


@_struct
class xdr_write_chunk:
    target: Annotated[list[xdr_rdma_segment], Array(struct_type(xdr_rdma_segment), RPCRDMA_SEGMENTS_MAX)]

    @property
    def total_length(self) -> int:
        return sum(s.length for s in self.target)


xdr_read_list = LinkedList(struct_type(xdr_read_chunk), RPCRDMA_CHUNKS_MAX)
xdr_write_list = LinkedList(struct_type(xdr_write_chunk), RPCRDMA_CHUNKS_MAX)


@_struct
class rpc_rdma_header:
    rdma_reads: Annotated[list[xdr_read_chunk], xdr_read_list]
    rdma_writes: Annotated[list[xdr_write_chunk], xdr_write_list]
    rdma_reply: Annotated[xdr_write_chunk | None, Optional(struct_type(xdr_write_chunk))]


# RDMA_NOMSG carries the same three lists (RFC 8166: rpc_rdma_header_nomsg).
rpc_rdma_header_nomsg = rpc_rdma_header


@_struct
class rpc_rdma_header_padded:
    rdma_align: Annotated[int, uint32]
    rdma_thresh: Annotated[int, uint32]
    rdma_reads: Annotated[list[xdr_read_chunk], xdr_read_list]
    rdma_writes: Annotated[list[xdr_write_chunk], xdr_write_list]
    rdma_reply: Annotated[xdr_write_chunk | None, Optional(struct_type(xdr_write_chunk))]


@_struct
class rpc_rdma_errvers:
    rdma_vers_low: Annotated[int, uint32]
    rdma_vers_high: Annotated[int, uint32]


rpc_rdma_error = Union(
    Enum(rpc_rdma_errcode),
    {ERR_VERS: struct_type(rpc_rdma_errvers), ERR_CHUNK: void},
)

rpc_rdma_body = Union(
    Enum(rdma_proc),
    {
        RDMA_MSG: struct_type(rpc_rdma_header),
        RDMA_NOMSG: struct_type(rpc_rdma_header_nomsg),
        RDMA_MSGP: struct_type(rpc_rdma_header_padded),
        RDMA_DONE: void,
        RDMA_ERROR: rpc_rdma_error,
    },
)


@_struct
class rdma_msg:
    """The whole transport header; ``rdma_body`` is ``(rdma_proc, arm)``."""

    rdma_xid: Annotated[int, uint32]
    rdma_vers: Annotated[int, uint32]
    rdma_credit: Annotated[int, uint32]
    rdma_body: Annotated[tuple[int, Any], rpc_rdma_body]

    @property
    def proc(self) -> rdma_proc:
        return rdma_proc(self.rdma_body[0])

    @property
    def chunks(self) -> rpc_rdma_header:
        """The chunk lists of an RDMA_MSG or RDMA_NOMSG header."""
        proc, arm = self.rdma_body
        if proc not in (RDMA_MSG, RDMA_NOMSG):
            raise RpcRdmaError(f"{rdma_proc(proc).name} has no chunk lists")
        return arm


def make_msg(
    xid: int,
    credit: int,
    proc: rdma_proc = RDMA_MSG,
    reads: list[xdr_read_chunk] | None = None,
    writes: list[xdr_write_chunk] | None = None,
    reply: xdr_write_chunk | None = None,
) -> rdma_msg:
    """An RDMA_MSG or RDMA_NOMSG header."""
    if proc not in (RDMA_MSG, RDMA_NOMSG):
        raise ValueError("make_msg builds RDMA_MSG or RDMA_NOMSG headers")
    return rdma_msg(xid, RPCRDMA_VERSION, credit, (proc, rpc_rdma_header(reads or [], writes or [], reply)))


def make_error(xid: int, credit: int, err: rpc_rdma_errcode) -> rdma_msg:
    """An RDMA_ERROR header (ERR_VERS advertises version 1 as both low and high)."""
    arm: tuple[int, Any]
    if err == ERR_VERS:
        arm = (ERR_VERS, rpc_rdma_errvers(RPCRDMA_VERSION, RPCRDMA_VERSION))
    else:
        arm = (ERR_CHUNK, None)
    return rdma_msg(xid, RPCRDMA_VERSION, credit, (RDMA_ERROR, arm))


def header_size(read_segments: int, write_chunk_segments: list[int], reply_segments: int | None) -> int:
    """Encoded size of an RDMA_MSG/RDMA_NOMSG header with the given chunk shapes.

    ``reply_segments`` is None when there is no Reply chunk.
    """
    n = 16  # xid, vers, credit, proc
    n += read_segments * (4 + 4 + XDR_RDMA_SEGMENT_SIZE) + 4
    n += sum(4 + 4 + XDR_RDMA_SEGMENT_SIZE * k for k in write_chunk_segments) + 4
    n += 4 if reply_segments is None else 4 + 4 + XDR_RDMA_SEGMENT_SIZE * reply_segments
    return n


def encode_rdma_msg(msg: rdma_msg, p: Packer | None = None) -> Packer:
    """Encode a header into ``p`` (a new Packer by default); the Payload stream may follow it."""
    if p is None:
        p = Packer()
    struct_type(rdma_msg).pack(p, msg)
    return p


def decode_rdma_msg(data: bytes | bytearray | memoryview) -> tuple[rdma_msg, int]:
    """Decode the transport header at the start of a received message.

    Returns the header and the offset where the Payload stream starts. Raises
    :class:`RpcRdmaVersionError` for another rdma_vers (the body is then not decoded),
    :class:`RpcRdmaUnsupportedProc` for RDMA_MSGP and RDMA_DONE, and :class:`RpcRdmaError` for
    anything malformed.
    """
    u = Unpacker(data)
    try:
        xid = u.uint32()
        vers = u.uint32()
        credit = u.uint32()
        if vers != RPCRDMA_VERSION:
            raise RpcRdmaVersionError(xid, vers)
        body = rpc_rdma_body.unpack(u)
    except RpcRdmaError:
        raise
    except XdrError as e:
        raise RpcRdmaError(f"malformed RPC-over-RDMA header: {e}") from e
    proc = rdma_proc(body[0])
    if proc in (RDMA_MSGP, RDMA_DONE):
        raise RpcRdmaUnsupportedProc(xid, proc)
    return rdma_msg(xid, vers, credit, body), u.pos


__all__ = [
    "ERR_CHUNK",
    "ERR_VERS",
    "RDMA_DONE",
    "RDMA_ERROR",
    "RDMA_MSG",
    "RDMA_MSGP",
    "RDMA_NOMSG",
    "RPCRDMA_CHUNKS_MAX",
    "RPCRDMA_HDRLEN_MIN",
    "RPCRDMA_SEGMENTS_MAX",
    "RPCRDMA_SEGMENT_LENGTH_MAX",
    "RPCRDMA_V1_DEF_INLINE_SIZE",
    "RPCRDMA_VERSION",
    "XDR_RDMA_SEGMENT_SIZE",
    "RpcRdmaError",
    "RpcRdmaUnsupportedProc",
    "RpcRdmaVersionError",
    "decode_rdma_msg",
    "encode_rdma_msg",
    "header_size",
    "make_error",
    "make_msg",
    "rdma_msg",
    "rdma_proc",
    "rpc_rdma_errcode",
    "rpc_rdma_errvers",
    "rpc_rdma_header",
    "rpc_rdma_header_nomsg",
    "rpc_rdma_header_padded",
    "xdr_rdma_segment",
    "xdr_read_chunk",
    "xdr_read_list",
    "xdr_write_chunk",
    "xdr_write_list",
]
