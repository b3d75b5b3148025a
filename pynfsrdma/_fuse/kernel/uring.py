"""FUSE over io_uring (``fs/fuse/dev_uring.c``) as data: where a request and its reply sit in a ring
entry's memory, and the commands that register an entry and commit its reply.

The kernel hands a request to a ring entry in two buffers: the header buffer
(``fuse_uring_req_header``: ``fuse_in_header``, the opcode's fixed argument, and
``fuse_uring_ent_in_out`` with the size of the rest) and the payload buffer (the other arguments:
a name, a WRITE's data). A reply goes back the same way: ``fuse_out_header`` in the header buffer,
the whole body in the payload buffer, its size in ``fuse_uring_ent_in_out``.

An entry here is one piece of memory: the header buffer at its start, the payload buffer from
:data:`PAYLOAD_OFFSET` on, and room just before the payload where :func:`gather` copies the
``fuse_in_header`` and the fixed argument (168 bytes at most), so that the request lies in one piece,
as /dev/fuse delivers it, and :func:`.requests.decode` reads it where it lies: the payload is not
copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import abi
from .init import PAGE_SIZE
from .requests import MalformedRequest

# whether the native channel asks for FUSE over io_uring unless told (-o io_uring / noio_uring): not
# by default, as the ring costs the daemon more CPU per request than /dev/fuse (README, Performance)
IO_URING_DEFAULT = False

OP_IN_OFFSET = abi.FUSE_URING_IN_OUT_HEADER_SZ
ENT_IN_OUT_OFFSET = abi.FUSE_URING_IN_OUT_HEADER_SZ + abi.FUSE_URING_OP_IN_OUT_SZ
PAYLOAD_OFFSET = PAGE_SIZE  # the payload buffer starts on a page of its own
GATHER_ROOM = abi.IN_HEADER.size + abi.FUSE_URING_OP_IN_OUT_SZ  # the most gather() puts before it
assert abi.URING_REQ_HEADER_SIZE + GATHER_ROOM <= PAYLOAD_OFFSET


def payload_size(max_write: int, max_pages: int) -> int:
    """The payload buffer the kernel asks each entry for (``fuse_uring_create``): room for the largest
    WRITE and the largest READ reply."""
    return max(abi.FUSE_MIN_READ_BUFFER, max_write, max_pages * PAGE_SIZE)


def entry_size(payload: int) -> int:
    """The memory of one entry whose payload buffer holds ``payload`` bytes."""
    return PAYLOAD_OFFSET + payload


def register(qid: int) -> bytes:
    """The command bytes of FUSE_IO_URING_CMD_REGISTER for queue ``qid``."""
    return abi.URING_CMD_REQ.pack(0, 0, qid)


def commit(qid: int, commit_id: int) -> bytes:
    """The command bytes of FUSE_IO_URING_CMD_COMMIT_AND_FETCH of the request ``commit_id``."""
    return abi.URING_CMD_REQ.pack(0, commit_id, qid)


def gather(entry: memoryview) -> tuple[int, int, int]:
    """Lay the request the kernel put in ``entry`` out in one piece, just before its payload:
    (where it starts in ``entry``, its length, its commit id). Raises MalformedRequest when the
    sizes the kernel wrote do not agree."""
    total, opcode, unique = abi.IN_HEADER.unpack_from(entry, 0)[:3]
    _flags, commit_id, payload, _pad, _reserved = abi.URING_ENT_IN_OUT.unpack_from(entry, ENT_IN_OUT_OFFSET)
    fixed = total - abi.IN_HEADER.size - payload
    if fixed < 0 or fixed > abi.FUSE_URING_OP_IN_OUT_SZ or PAYLOAD_OFFSET + payload > len(entry):
        raise MalformedRequest(f"ring entry: header says {total} bytes, payload {payload}", unique, opcode)
    start = PAYLOAD_OFFSET - fixed - abi.IN_HEADER.size
    entry[start : start + abi.IN_HEADER.size] = entry[: abi.IN_HEADER.size]
    entry[PAYLOAD_OFFSET - fixed : PAYLOAD_OFFSET] = entry[OP_IN_OFFSET : OP_IN_OFFSET + fixed]
    return start, total, commit_id


def place_reply(reply: bytes | Sequence[Any], entry: memoryview) -> int:
    """Put a reply as /dev/fuse takes it (``fuse_out_header`` and the body, in one piece or in
    parts) into ``entry``: the header in the header buffer, the body in the payload buffer. Returns
    the body's size; ValueError when it does not fit."""
    head = abi.OUT_HEADER.size
    if isinstance(reply, bytes):  # (most replies: a header and a fixed structure)
        size = len(reply) - head
        if PAYLOAD_OFFSET + size > len(entry):
            raise ValueError(f"a reply body of more than {len(entry) - PAYLOAD_OFFSET} bytes")
        entry[:head] = reply[:head]
        entry[PAYLOAD_OFFSET : PAYLOAD_OFFSET + size] = reply[head:]
        abi.URING_ENT_IN_OUT.pack_into(entry, ENT_IN_OUT_OFFSET, 0, 0, size, 0, 0)
        return size
    parts: Sequence[Any] = (reply,) if isinstance(reply, bytearray | memoryview) else reply
    placed = 0  # of the reply
    body = PAYLOAD_OFFSET
    room = len(entry)
    for p in parts:
        m = p if isinstance(p, memoryview) else memoryview(p)
        if m.format != "B" or m.ndim != 1:
            m = m.cast("B")
        if placed < head:
            n = min(head - placed, len(m))
            entry[placed : placed + n] = m[:n]
            placed += n
            m = m[n:]
        n = len(m)
        if n:
            if body + n > room:
                raise ValueError(f"a reply body of more than {room - PAYLOAD_OFFSET} bytes")
            entry[body : body + n] = m
            body += n
            placed += n
    size = body - PAYLOAD_OFFSET
    abi.URING_ENT_IN_OUT.pack_into(entry, ENT_IN_OUT_OFFSET, 0, 0, size, 0, 0)
    return size
