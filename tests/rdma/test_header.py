"""The one-pass header codec (the requester's and the responder's) agrees with the generic RPC-over-RDMA codec, byte for
byte, and leaves every header it does not take to it (which names the fault)."""

from __future__ import annotations

import pytest

from pynfsrdma._proto.rpcrdma import (
    ERR_CHUNK,
    RDMA_ERROR,
    RDMA_MSG,
    RDMA_NOMSG,
    RPCRDMA_CHUNKS_MAX,
    RpcRdmaError,
    RpcRdmaVersionError,
    decode_rdma_msg,
    encode_rdma_msg,
    make_error,
    make_msg,
    xdr_rdma_segment,
    xdr_read_chunk,
    xdr_write_chunk,
)
from pynfsrdma._transport.rdma.header import pack_header, pack_header_into, read_header


def seg(i: int, length: int = 4096) -> xdr_rdma_segment:
    return xdr_rdma_segment(0x1000 + i, length, (i << 32) | 0xABC)


def as_tuple(s: xdr_rdma_segment) -> tuple[int, int, int]:
    return (s.handle, s.length, s.offset)


HEADERS = {
    "bare": make_msg(1, 32, RDMA_MSG),
    "read chunks": make_msg(2, 8, RDMA_MSG, [xdr_read_chunk(60, seg(1)), xdr_read_chunk(60, seg(2))]),
    "write chunks": make_msg(3, 32, RDMA_MSG, [], [xdr_write_chunk([seg(3), seg(4)]), xdr_write_chunk([])]),
    "reply chunk": make_msg(4, 1, RDMA_MSG, [], [xdr_write_chunk([seg(5)])], xdr_write_chunk([seg(6), seg(7)])),
    "nomsg": make_msg(5, 32, RDMA_NOMSG, [xdr_read_chunk(0, seg(8, 9000))], [], xdr_write_chunk([seg(9)])),
}


@pytest.mark.parametrize("name", HEADERS)
def test_one_pass_codec_agrees_with_the_generic_one(name):
    header = HEADERS[name]
    wire = encode_rdma_msg(header).getvalue()
    assert bytes(pack_header(header)) == wire
    got = read_header(memoryview(wire + b"payload"))
    assert got == decode_rdma_msg(wire + b"payload") == (header, len(wire))


@pytest.mark.parametrize(
    ("header", "reads", "writes", "reply"),
    [
        (make_msg(1, 32, RDMA_MSG), (), (), None),
        (make_msg(2, 8, RDMA_MSG, [xdr_read_chunk(60, seg(1)), xdr_read_chunk(60, seg(2))]),
         [(60, *as_tuple(seg(1))), (60, *as_tuple(seg(2)))], (), None),
        (make_msg(3, 32, RDMA_MSG, [], [xdr_write_chunk([seg(3)]), xdr_write_chunk([])]),
         (), [as_tuple(seg(3)), None], None),
        (make_msg(5, 32, RDMA_NOMSG, [xdr_read_chunk(0, seg(8, 9000))], [xdr_write_chunk([seg(4)])],
                  xdr_write_chunk([seg(9)])),
         [(0, *as_tuple(seg(8, 9000)))], [as_tuple(seg(4))], as_tuple(seg(9))),
    ],
)  # fmt: skip
def test_a_header_packed_into_a_send_buffer_is_the_generic_encoding(header, reads, writes, reply):
    buf = bytearray(b"\xff" * 512)
    proc = header.rdma_body[0]
    n = pack_header_into(buf, header.rdma_xid, header.rdma_credit, proc, reads, writes, reply)
    assert bytes(buf[:n]) == encode_rdma_msg(header).getvalue()


def word(n: int) -> bytes:
    return n.to_bytes(4, "big")


@pytest.mark.parametrize(
    "wire",
    [
        word(7) + word(2) + word(32) + word(RDMA_MSG) + word(0) * 3,  # version 2
        word(7) + word(1) + word(32) + word(RDMA_MSG) + word(2) + word(0) * 2,  # discriminator 2
        word(7) + word(1) + word(32) + word(RDMA_MSG) + word(0) + word(1) + word(17) + word(0) * 2,
        word(7) + word(1) + word(32) + word(RDMA_MSG) + word(0) * 2,  # ends early
        encode_rdma_msg(make_msg(7, 32, RDMA_MSG, [xdr_read_chunk(8, seg(i)) for i in range(RPCRDMA_CHUNKS_MAX)]))
        .getvalue()
        .replace(word(0) * 3, word(1) + word(8) + seg(99).handle.to_bytes(4, "big") + word(1) + bytes(8) + word(0) * 3),
    ],
    ids=["version 2", "bad discriminator", "17 segments", "truncated", "17 read chunks"],
)
def test_a_header_it_does_not_take_goes_to_the_generic_decoder(wire):
    assert read_header(memoryview(wire)) is None
    with pytest.raises(RpcRdmaError) as e:
        decode_rdma_msg(wire)
    if wire[4:8] == word(2):
        assert isinstance(e.value, RpcRdmaVersionError)


def test_an_error_message_is_left_to_the_generic_decoder():
    wire = encode_rdma_msg(make_error(7, 32, ERR_CHUNK)).getvalue()
    assert read_header(memoryview(wire)) is None
    assert decode_rdma_msg(wire)[0].proc == RDMA_ERROR
