"""A READ reply's data spliced from a real TCP connection into a real pipe (the FUSE channel's reply
pipe), and every way it must not be: a reply the caller did not offer a pipe for, a length longer
than asked, a pipe too small for the data, a connection cut in the middle of the data. What the
caller sees each time is the whole reply (spliced or not) or the transport's usual error, and the
pipe never holds a part of a payload that could be taken for a reply."""

from __future__ import annotations

import fcntl
import os
import socket
from typing import Any

import pytest
import trio

from pynfsrdma._client.read_payload import locate_read_data
from pynfsrdma._fuse.reply_pipe import HEADER, ReplyPipe
from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import COMPOUND4res, ResOp, decode_compound_res, encode_compound_res
from pynfsrdma._proto.nfs4.types import READ4resok, SEQUENCE4resok
from pynfsrdma._transport.base import NEED_MORE, ConnectionLost, ReplyHints, SplicedPayload, SpliceRequest
from pynfsrdma._transport.tcp import SplicedUnpacker, TcpTransport
from pynfsrdma._xdr import Packer, Unpacker

XID = 0x5EED
SESSION = bytes(range(16))
KIB = 1 << 10


def read_reply(data: bytes, xid: int = XID, status: int = c.NFS4_OK) -> bytes:
    """A COMPOUND reply of SEQUENCE, PUTFH and READ carrying ``data`` (READ failing with ``status``)."""
    p = Packer()
    rpcdef.pack_accepted_reply_header(p, xid)
    results = [ResOp(c.OP_SEQUENCE, 0, SEQUENCE4resok(SESSION, 5, 2, 63, 63, 0)), ResOp(c.OP_PUTFH, 0)]
    results.append(ResOp(c.OP_READ, status, READ4resok(True, data) if status == c.NFS4_OK else None))
    encode_compound_res(p, COMPOUND4res(status, "", results))
    return p.getvalue()


def record(msg: bytes) -> bytes:
    return (rpcdef.RM_LAST_FRAGMENT | len(msg)).to_bytes(4, "big") + msg


def decode(u: Unpacker) -> tuple[int, Any]:
    """The XID and the READ's data of a reply as the client decodes it."""
    xid = u.uint32()
    assert u.uint32() == rpcdef.REPLY
    rpcdef.unpack_reply_header(u)
    res = decode_compound_res(u)
    u.done()
    return xid, res.resarray[-1].res.data


def pipe_bytes(pipe: ReplyPipe) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(pipe.r, 1 << 20)
        except BlockingIOError:
            return out
        out += chunk


class Peer:
    """Our transport on one end of a connected pair of TCP sockets on loopback; the server's end."""

    def __init__(self) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        self.server, _ = listener.accept()
        listener.close()
        self.transport = TcpTransport(client, "127.0.0.1:test")

    async def offer(self, pipe: ReplyPipe, max_length: int, xid: int = XID) -> None:
        """A call whose reply's data may go into ``pipe`` (the call's bytes are not looked at)."""
        hints = ReplyHints(ddp_sizes=[max_length], splice=SpliceRequest(pipe, locate_read_data, max_length))
        msg = Packer()
        msg.uint32(xid)
        await self.transport.send_call(xid, msg, hints)

    async def send(self, data: bytes) -> None:
        await trio.to_thread.run_sync(self.server.sendall, data)

    def close(self) -> None:
        self.server.close()
        self.transport.sock.close()


@pytest.fixture
def peer() -> Any:
    p = Peer()
    yield p
    p.close()


def test_the_locator_finds_the_data_and_needs_the_whole_head() -> None:
    data = os.urandom(3000)
    msg = read_reply(data)
    at, n = locate_read_data(memoryview(msg))  # type: ignore[misc]
    assert (n, msg[at : at + n]) == (3000, data)
    assert locate_read_data(memoryview(msg)[: at - 1]) == NEED_MORE
    assert locate_read_data(memoryview(read_reply(b"", status=c.NFS4ERR_IO))) is None
    err = Packer()
    rpcdef.pack_accepted_reply_header(err, XID, rpcdef.accept_stat.SYSTEM_ERR)
    assert locate_read_data(memoryview(err.getvalue())) is None


async def test_the_data_goes_into_the_pipe_after_its_header_and_the_reply_decodes_around_it(peer: Peer) -> None:
    data = os.urandom(256 * KIB + 3)  # (with XDR padding after it)
    pipe = ReplyPipe()
    pipe.unique = 77
    await peer.offer(pipe, len(data))
    await peer.send(record(read_reply(data)))
    u = await peer.transport.receive()
    assert isinstance(u, SplicedUnpacker)
    xid, got = decode(u)
    assert xid == XID and isinstance(got, SplicedPayload) and len(got) == len(data)
    assert pipe.holds(got)
    held = pipe_bytes(pipe)
    assert held[:HEADER] == (HEADER + len(data)).to_bytes(4, "little") + (0).to_bytes(4, "little") + (
        77).to_bytes(8, "little")
    assert held[HEADER:] == data
    t = peer.transport
    # what passed through our memory: the few bytes received with the reply's head, no more
    assert t.bytes_spliced + t.bytes_staged_to_pipe == len(data) and t.bytes_staged_to_pipe < 256


async def test_data_arriving_in_pieces_is_spliced_as_it_comes(peer: Peer) -> None:
    data = os.urandom(512 * KIB)
    pipe = ReplyPipe()
    await peer.offer(pipe, len(data))
    rec = record(read_reply(data))

    async def trickle() -> None:
        for i in range(0, len(rec), 48 * KIB):
            await peer.send(rec[i : i + 48 * KIB])
            await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trickle)
        u = await peer.transport.receive()
    _, got = decode(u)
    assert isinstance(got, SplicedPayload) and pipe.holds(got)
    assert pipe_bytes(pipe)[HEADER:] == data
    assert got.materialized is False


async def test_a_reply_without_an_offer_or_with_more_data_than_asked_is_received_as_usual(peer: Peer) -> None:
    data = os.urandom(64 * KIB)
    pipe = ReplyPipe()
    # another XID than the one offered: as usual (and the offer stays for its own reply)
    await peer.offer(pipe, len(data), xid=XID)
    await peer.send(record(read_reply(data, xid=XID + 1)))
    u = await peer.transport.receive()
    assert not isinstance(u, SplicedUnpacker)
    assert decode(u) == (XID + 1, data)
    # a hostile length: more than the READ asked for; received whole, for the decoder to refuse
    await peer.send(record(read_reply(data + data)))
    await peer.offer(pipe, len(data), xid=XID + 2)
    await peer.send(record(read_reply(data + data, xid=XID + 2)))
    u = await peer.transport.receive()
    assert decode(u) == (XID, data + data)
    u = await peer.transport.receive()
    assert decode(u) == (XID + 2, data + data)
    # an error status: no data to splice
    await peer.offer(pipe, len(data), xid=XID + 3)
    await peer.send(record(read_reply(b"", xid=XID + 3, status=c.NFS4ERR_IO)))
    u = await peer.transport.receive()
    assert not isinstance(u, SplicedUnpacker)
    assert peer.transport.bytes_spliced == 0 and pipe_bytes(pipe) == b""


async def test_an_abandoned_call_splices_nothing(peer: Peer) -> None:
    data = os.urandom(64 * KIB)
    pipe = ReplyPipe()
    await peer.offer(pipe, len(data))
    peer.transport.abandon(XID)
    await peer.send(record(read_reply(data)))
    u = await peer.transport.receive()
    assert decode(u) == (XID, data) and pipe_bytes(pipe) == b""


async def test_a_pipe_too_small_for_the_data_is_read_back_and_the_reply_received_whole(peer: Peer) -> None:
    data = os.urandom(1 << 20)
    pipe = ReplyPipe()
    fcntl.fcntl(pipe.w, fcntl.F_SETPIPE_SZ, 64 * KIB)
    await peer.offer(pipe, len(data))
    await peer.send(record(read_reply(data)))
    u = await peer.transport.receive()
    assert not isinstance(u, SplicedUnpacker)
    assert decode(u) == (XID, data)
    assert peer.transport.splice_fallbacks == 1 and peer.transport.bytes_spliced == 0
    assert pipe_bytes(pipe) == b""  # (nothing left that could go to the kernel)


async def test_a_connection_cut_in_the_middle_of_the_data_leaves_no_reply_in_the_pipe(peer: Peer) -> None:
    data = os.urandom(512 * KIB)
    pipe = ReplyPipe()
    await peer.offer(pipe, len(data))
    rec = record(read_reply(data))
    await peer.send(rec[: len(rec) // 2])
    peer.server.close()
    with pytest.raises(ConnectionLost):
        await peer.transport.receive()
    payload = SplicedPayload(pipe, pipe.fillings, len(data))
    assert not pipe.holds(payload)
    with pytest.raises(OSError):
        payload.materialize()
    # the next READ offered the same pipe starts from a clean one
    other = Peer()
    try:
        await other.offer(pipe, len(data))
        await other.send(record(read_reply(data)))
        _, got = decode(await other.transport.receive())
        assert isinstance(got, SplicedPayload) and pipe.holds(got)
        assert bytes(got.materialize()) == data and not pipe.holds(got)
    finally:
        other.close()
