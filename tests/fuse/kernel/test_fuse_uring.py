"""A FUSE-over-io_uring ring entry as data (``_fuse/kernel/uring.py``), with entries filled here as
``fs/fuse/dev_uring.c`` fills them: ``fuse_in_header`` in the header's in_out, the opcode's first
argument in op_in, the other arguments in the payload buffer and their size in
``fuse_uring_ent_in_out``. A request is decoded where it lies, its payload not moved; a reply is
split into the header and the payload buffer; sizes that do not agree are refused."""

from __future__ import annotations

import mmap
import os
import struct

import pytest

from pynfsrdma._fuse.kernel import abi, replies, uring
from pynfsrdma._fuse.kernel import requests as rq

UNIQUE, NODE = 0x2468, 7
PAYLOAD = 1 << 20


def entry() -> tuple[mmap.mmap, memoryview]:
    m = mmap.mmap(-1, uring.entry_size(PAYLOAD))
    return m, memoryview(m)


def fill(view: memoryview, opcode: int, first: bytes, rest: bytes) -> None:
    """What the kernel writes for a request whose first argument is ``first`` and the others ``rest``."""
    total = abi.IN_HEADER.size + len(first) + len(rest)
    view[: abi.IN_HEADER.size] = abi.IN_HEADER.pack(total, opcode, UNIQUE, NODE, 0, 0, 1, 0, 0)
    view[uring.OP_IN_OFFSET : uring.OP_IN_OFFSET + len(first)] = first
    view[uring.PAYLOAD_OFFSET : uring.PAYLOAD_OFFSET + len(rest)] = rest
    abi.URING_ENT_IN_OUT.pack_into(view, uring.ENT_IN_OUT_OFFSET, 0, UNIQUE, len(rest), 0, 0)


def test_the_layouts_are_the_kernels() -> None:
    assert abi.URING_REQ_HEADER_SIZE == 288
    assert abi.URING_ENT_IN_OUT.size == 32
    assert abi.URING_CMD_REQ.size == 24
    assert uring.commit(1, UNIQUE) == struct.pack("=QQH6x", 0, UNIQUE, 1)
    assert uring.register(3) == struct.pack("=QQH6x", 0, 0, 3)
    assert uring.payload_size(1 << 20, 256) == 1 << 20
    assert uring.payload_size(4096, 0) == abi.FUSE_MIN_READ_BUFFER


def test_a_write_is_decoded_where_its_data_lies() -> None:
    m, view = entry()
    data = os.urandom(300_000)
    fill(view, abi.FUSE_WRITE, abi.WRITE_IN.pack(9, 4096, len(data), 0, 0, 0, 0), data)
    start, length, commit_id = uring.gather(view)
    assert (length, commit_id) == (abi.IN_HEADER.size + abi.WRITE_IN.size + len(data), UNIQUE)
    assert start + abi.IN_HEADER.size + abi.WRITE_IN.size == uring.PAYLOAD_OFFSET
    req = rq.decode(m, length, view, None, start)
    assert isinstance(req, rq.Write)
    assert (req.unique, req.nodeid, req.fh, req.offset, req.size) == (UNIQUE, NODE, 9, 4096, len(data))
    assert bytes(req.data) == data
    # the data is a view of the payload buffer itself, not a copy
    view[uring.PAYLOAD_OFFSET] ^= 0xFF
    assert req.data[0] == view[uring.PAYLOAD_OFFSET]
    req.data.release()


def test_a_lookup_has_no_first_argument_and_its_name_in_the_payload() -> None:
    m, view = entry()
    fill(view, abi.FUSE_LOOKUP, b"", b"name\0")
    start, length, _ = uring.gather(view)
    req = rq.decode(m, length, view, None, start)
    assert isinstance(req, rq.Named) and req.name == b"name"


def test_sizes_that_do_not_agree_are_refused() -> None:
    _, view = entry()
    fill(view, abi.FUSE_LOOKUP, b"", b"name\0")
    abi.URING_ENT_IN_OUT.pack_into(view, uring.ENT_IN_OUT_OFFSET, 0, UNIQUE, 1000, 0, 0)  # more than the total
    with pytest.raises(rq.MalformedRequest) as e:
        uring.gather(view)
    assert (e.value.unique, e.value.opcode) == (UNIQUE, abi.FUSE_LOOKUP)
    fill(view, abi.FUSE_WRITE, bytes(abi.FUSE_URING_OP_IN_OUT_SZ + 8), b"")  # a first argument too large
    with pytest.raises(rq.MalformedRequest):
        uring.gather(view)


def test_a_reply_is_split_into_header_and_payload() -> None:
    _, view = entry()
    data = os.urandom(5000)
    for reply in (replies.data(UNIQUE, data), replies.data_parts(UNIQUE, [data[:1000], memoryview(data)[1000:]]),
                  b"".join(bytes(p) for p in replies.data(UNIQUE, data))):
        assert uring.place_reply(reply, view) == len(data)
        assert abi.OUT_HEADER.unpack_from(view, 0) == (abi.OUT_HEADER.size + len(data), 0, UNIQUE)
        assert bytes(view[uring.PAYLOAD_OFFSET : uring.PAYLOAD_OFFSET + len(data)]) == data
        assert abi.URING_ENT_IN_OUT.unpack_from(view, uring.ENT_IN_OUT_OFFSET)[2] == len(data)
    assert uring.place_reply(replies.error(UNIQUE, 2), view) == 0
    assert abi.OUT_HEADER.unpack_from(view, 0) == (abi.OUT_HEADER.size, -2, UNIQUE)
    with pytest.raises(ValueError, match="more than"):
        uring.place_reply(replies.data(UNIQUE, bytes(PAYLOAD + 1)), view)
