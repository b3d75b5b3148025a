"""The RFC 8166 transport header: round trips, exact wire bytes, refused and malformed headers."""

import struct

import pytest

from pynfsrdma._proto.rpcrdma import (
    ERR_CHUNK,
    ERR_VERS,
    RDMA_DONE,
    RDMA_ERROR,
    RDMA_MSG,
    RDMA_MSGP,
    RDMA_NOMSG,
    RPCRDMA_HDRLEN_MIN,
    RpcRdmaError,
    RpcRdmaUnsupportedProc,
    RpcRdmaVersionError,
    decode_rdma_msg,
    encode_rdma_msg,
    header_size,
    make_error,
    make_msg,
    rpc_rdma_errvers,
    xdr_rdma_segment,
    xdr_read_chunk,
    xdr_write_chunk,
)
from pynfsrdma._xdr import XdrError


def words(*ws: int) -> bytes:
    return b"".join(struct.pack(">I", w) for w in ws)


def test_empty_msg_is_28_bytes_on_the_wire():
    wire = encode_rdma_msg(make_msg(0x01020304, 32)).getvalue()
    assert wire == words(0x01020304, 1, 32, 0, 0, 0, 0)
    assert len(wire) == RPCRDMA_HDRLEN_MIN == header_size(0, [], None)


def test_all_chunk_lists_exact_bytes_and_round_trip():
    seg = xdr_rdma_segment(0xAA, 4096, 0x1_0000_0000)
    msg = make_msg(
        7,
        8,
        RDMA_MSG,
        reads=[xdr_read_chunk(100, seg), xdr_read_chunk(100, xdr_rdma_segment(0xAB, 12, 16))],
        writes=[xdr_write_chunk([seg]), xdr_write_chunk([])],
        reply=xdr_write_chunk([xdr_rdma_segment(0xCC, 2048, 8)]),
    )
    wire = encode_rdma_msg(msg).getvalue() + b"PAYLOAD!"
    expect = words(7, 1, 8, 0)
    expect += words(1, 100, 0xAA, 4096, 1, 0) + words(1, 100, 0xAB, 12, 0, 16) + words(0)
    expect += words(1, 1, 0xAA, 4096, 1, 0) + words(1, 0) + words(0)
    expect += words(1, 1, 0xCC, 2048, 0, 8)
    assert wire[:-8] == expect
    assert len(expect) == header_size(2, [1, 0], 1)
    got, off = decode_rdma_msg(wire)
    assert wire[off:] == b"PAYLOAD!"
    assert got == msg
    assert got.proc == RDMA_MSG
    assert got.chunks.rdma_writes[0].total_length == 4096


def test_nomsg_round_trip():
    msg = make_msg(9, 1, RDMA_NOMSG, reads=[xdr_read_chunk(0, xdr_rdma_segment(1, 2, 3))])
    got, _ = decode_rdma_msg(encode_rdma_msg(msg).getvalue())
    assert got.proc == RDMA_NOMSG and got == msg


def test_errors_round_trip():
    w = encode_rdma_msg(make_error(5, 0, ERR_VERS)).getvalue()
    assert w == words(5, 1, 0, 4, 1, 1, 1)
    got, _ = decode_rdma_msg(w)
    assert got.rdma_body == (RDMA_ERROR, (ERR_VERS, rpc_rdma_errvers(1, 1)))
    got, _ = decode_rdma_msg(encode_rdma_msg(make_error(5, 0, ERR_CHUNK)).getvalue())
    assert got.rdma_body == (RDMA_ERROR, (ERR_CHUNK, None))
    with pytest.raises(RpcRdmaError):
        _ = got.chunks


def test_other_version_is_a_version_error_with_the_xid():
    with pytest.raises(RpcRdmaVersionError) as ei:
        decode_rdma_msg(words(77, 2, 1, 0, 0, 0, 0))
    assert ei.value.xid == 77 and ei.value.vers == 2


@pytest.mark.parametrize("proc,body", [(RDMA_MSGP, words(4, 1024, 0, 0, 0)), (RDMA_DONE, b"")])
def test_msgp_and_done_are_recognised_and_refused(proc, body):
    with pytest.raises(RpcRdmaUnsupportedProc) as ei:
        decode_rdma_msg(words(3, 1, 1, proc) + body)
    assert ei.value.proc == proc and ei.value.xid == 3


@pytest.mark.parametrize(
    "wire",
    [
        b"",
        words(1, 1, 1),  # no proc
        words(1, 1, 1, 9, 0, 0, 0),  # unknown proc
        words(1, 1, 1, 0, 0, 0),  # reply chunk missing
        words(1, 1, 1, 0, 2, 0, 0, 0),  # bad boolean in the read list
        words(1, 1, 1, 0, 1, 5, 1),  # truncated read segment
        words(1, 1, 1, 0, 0, 1, 0x40000000),  # write chunk count beyond the buffer
        words(1, 1, 1, 4, 3),  # unknown error code
        words(1, 1, 1, 4, 1, 1),  # truncated ERR_VERS
    ],
)
def test_malformed_headers_raise_one_typed_error(wire):
    with pytest.raises(RpcRdmaError) as ei:
        decode_rdma_msg(wire)
    assert isinstance(ei.value, XdrError)


def test_long_hostile_read_list_ends_with_the_buffer():
    entry = words(1, 0, 1, 1, 0, 0)
    with pytest.raises(RpcRdmaError):
        decode_rdma_msg(words(1, 1, 1, 0) + entry * 1000)
