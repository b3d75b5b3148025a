"""ONC RPC over TCP on real loopback sockets, with peers that misbehave."""

from __future__ import annotations

import socket
import struct

import pytest
import trio
from record_support import read_record

from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._rpc.auth import AUTH_NONE_CRED, auth_sys
from pynfsrdma._rpc.client import RpcConnection
from pynfsrdma._rpc.errors import RpcReplyError, RpcTimeout
from pynfsrdma._transport.base import ConnectionLost, ConnectRefused, ProtocolViolation
from pynfsrdma._transport.tcp import TcpTransport
from pynfsrdma._xdr import Packer, Unpacker

PROG, VERS = 100003, 4


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def reply(xid: int, body: bytes = b"", stat: int = rpcdef.SUCCESS) -> bytes:
    p = Packer()
    rpcdef.pack_accepted_reply_header(p, xid, stat)
    return p.getvalue() + body


def frame(msg: bytes, fragments: int = 1) -> bytes:
    """Record-mark ``msg``, split into ``fragments`` fragments."""
    out = b""
    step = max(1, -(-len(msg) // fragments))
    parts = [msg[i : i + step] for i in range(0, len(msg), step)] or [b""]
    for i, part in enumerate(parts):
        last = 0x80000000 if i == len(parts) - 1 else 0
        out += struct.pack(">I", last | len(part)) + part
    return out


class Server:
    """A scripted RPC peer: ``handler(stream)`` decides what the client gets."""

    def __init__(self, nursery: trio.Nursery, handler) -> None:
        self.port = free_port()
        self.handler = handler
        self.nursery = nursery

    async def start(self) -> Server:
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        self.nursery.start_soon(trio.serve_listeners, self.handler, listeners)
        return self


async def open_conn(port: int, nursery: trio.Nursery) -> RpcConnection:
    t = await TcpTransport.connect("127.0.0.1", port, timeout=5)
    conn = RpcConnection(t, PROG, VERS)
    await nursery.start(conn.run)
    return conn


async def test_replies_out_of_order_and_multi_fragment() -> None:
    async def handler(stream: trio.SocketStream) -> None:
        calls = [await read_record(stream) for _ in range(3)]
        xids = [struct.unpack(">I", c[:4])[0] for c in calls]
        for xid in reversed(xids):  # answer in reverse order, the last one in 5 fragments
            await stream.send_all(frame(reply(xid, struct.pack(">I", xid)), fragments=5 if xid == xids[0] else 1))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        got: dict[int, int] = {}

        async def one(i: int) -> None:
            xid, p = conn.start_call(1, auth_sys(1000, 1000, (1, 2)))
            p.uint32(i)
            u = await conn.call_packed(xid, p, timeout=5)
            got[i] = u.uint32() - xid

        async with trio.open_nursery() as n:
            for i in range(3):
                n.start_soon(one, i)
                await trio.sleep(0.01)
        assert got == {0: 0, 1: 0, 2: 0}
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(frame(reply(0xDEAD, b"junk")), id="reply-to-an-xid-never-sent"),
        pytest.param(frame(struct.pack(">II", 0xDEAD, 7)), id="neither-call-nor-reply"),
        pytest.param(frame(b"\0\0\0\1"), id="too-short-for-a-header"),
        pytest.param(frame(struct.pack(">III", 0xDEAD, 1, 9)), id="malformed-reply-header"),
    ],
)
async def test_a_message_no_server_sends_ends_the_connection(garbage: bytes) -> None:
    """The stream's framing can no longer be trusted: the calls waiting on it fail at once with
    ProtocolViolation (their owner sends them again on a new connection), not after their timeout."""

    async def handler(stream: trio.SocketStream) -> None:
        call = await read_record(stream)
        if garbage.endswith(struct.pack(">III", 0xDEAD, 1, 9)):  # a bad header on the call's own reply
            xid = call[:4]
            await stream.send_all(frame(xid + garbage[8:]))
        else:
            await stream.send_all(garbage)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        start = trio.current_time()
        with pytest.raises(ProtocolViolation):
            await conn.call(1, AUTH_NONE_CRED, timeout=5)
        assert trio.current_time() - start < 1
        assert not conn.alive
        nursery.cancel_scope.cancel()


async def test_a_late_reply_to_a_call_no_longer_waited_for_is_dropped() -> None:
    async def handler(stream: trio.SocketStream) -> None:
        late = await read_record(stream)
        await trio.sleep(0.3)  # past the first call's timeout
        await stream.send_all(frame(reply(struct.unpack(">I", late[:4])[0])))
        nxt = await read_record(stream)
        await stream.send_all(frame(reply(struct.unpack(">I", nxt[:4])[0], b"ok!!")))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        with pytest.raises(RpcTimeout):
            await conn.call(1, AUTH_NONE_CRED, timeout=0.1)
        await trio.sleep(0.4)
        u = await conn.call(1, AUTH_NONE_CRED, timeout=5)
        assert bytes(u.opaque_fixed(4)) == b"ok!!"
        assert conn.alive and conn.unmatched_replies == 1
        nursery.cancel_scope.cancel()


async def test_call_header_and_auth_sys_on_the_wire() -> None:
    seen: list[bytes] = []

    async def handler(stream: trio.SocketStream) -> None:
        msg = await read_record(stream)
        seen.append(msg)
        await stream.send_all(frame(reply(struct.unpack(">I", msg[:4])[0])))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        await conn.call(7, auth_sys(1234, 99, (5, 6)), timeout=5)
        u = Unpacker(seen[0])
        u.uint32()
        assert u.uint32() == rpcdef.CALL
        body = rpcdef.decode_call_body(u)
        assert (body.rpcvers, body.prog, body.vers, body.proc) == (2, PROG, VERS, 7)
        parms = rpcdef.decode_auth_sys(body.cred)
        assert (parms.uid, parms.gid, parms.gids) == (1234, 99, [5, 6])
        nursery.cancel_scope.cancel()


async def test_write_payload_goes_out_by_scatter_gather_intact() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, referenced, never joined by the sender
    received: list[bytes] = []

    async def handler(stream: trio.SocketStream) -> None:
        msg = await read_record(stream)
        received.append(msg)
        await stream.send_all(frame(reply(struct.unpack(">I", msg[:4])[0])))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        xid, p = conn.start_call(1, AUTH_NONE_CRED)
        p.bulk(payload)
        assert any(s is not None and memoryview(s).obj is payload for s in p.segments())  # by reference
        await conn.call_packed(xid, p, timeout=5)
        u = Unpacker(received[0], pos=len(received[0]) - len(payload) - 4)
        assert u.opaque() == payload
        nursery.cancel_scope.cancel()


async def test_reply_errors_are_typed() -> None:
    async def handler(stream: trio.SocketStream) -> None:
        msg = await read_record(stream)
        xid = struct.unpack(">I", msg[:4])[0]
        await stream.send_all(frame(reply(xid, struct.pack(">II", 2, 3), rpcdef.accept_stat.PROG_MISMATCH)))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        with pytest.raises(RpcReplyError, match=r"program version mismatch \(server supports 2\.\.3\)"):
            await conn.call(0, AUTH_NONE_CRED, timeout=5)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("kind", ["close-mid-record", "reset", "huge-length", "silence"])
async def test_transport_faults_fail_waiting_calls_with_typed_errors(kind: str) -> None:
    async def handler(stream: trio.SocketStream) -> None:
        await read_record(stream)
        if kind == "close-mid-record":
            await stream.send_all(struct.pack(">I", 0x80000000 | 100) + b"x" * 10)
            await stream.aclose()
        elif kind == "reset":
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            stream.socket.close()
        elif kind == "huge-length":
            await stream.send_all(struct.pack(">I", 0xFFFFFFFF) + b"HTTP/1.1 400")
        await trio.sleep_forever()

    expected = {
        "close-mid-record": ConnectionLost,
        "reset": ConnectionLost,
        "huge-length": ProtocolViolation,
        "silence": RpcTimeout,
    }[kind]
    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        with pytest.raises(expected):
            await conn.call(0, AUTH_NONE_CRED, timeout=1.0)
        if kind != "silence":
            assert not conn.alive
            with pytest.raises(expected):  # later calls fail at once with the same error
                await conn.call(0, AUTH_NONE_CRED, timeout=1.0)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        (b"", "closed by the server$"),  # between records
        (b"\x80\x00", "closed by the server in the middle of a record"),  # half a record mark
        (struct.pack(">I", 0x80000000 | 100) + b"x" * 10, "in the middle of a record"),
        (struct.pack(">I", 100) + b"y" * 100, "in the middle of a record"),  # a first fragment only
    ],
)
async def test_a_connection_closed_by_the_server_says_where_the_record_stopped(sent: bytes, message: str) -> None:
    """What the caller sees when the server goes away: a clean close between records, or one that
    cut a record (its mark, its body, or after a fragment that was not the last)."""

    async def handler(stream: trio.SocketStream) -> None:
        await read_record(stream)
        await stream.send_all(sent)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        with pytest.raises(ConnectionLost, match=message):
            await conn.call(0, AUTH_NONE_CRED, timeout=5.0)
        nursery.cancel_scope.cancel()


async def test_connection_refused_is_immediate_and_typed() -> None:
    port = free_port()
    with trio.fail_after(5):
        with pytest.raises(ConnectRefused, match=f"127.0.0.1:{port}"):
            await TcpTransport.connect("127.0.0.1", port, timeout=5)


async def test_callback_calls_on_the_same_connection_reach_the_handler() -> None:
    """The server calls us on our connection (NFSv4.1 backchannel); XIDs may collide with ours."""
    got: list[int] = []

    async def handler(stream: trio.SocketStream) -> None:
        msg = await read_record(stream)
        xid = struct.unpack(">I", msg[:4])[0]
        call = Packer()
        rpcdef.pack_call_header(call, xid, 0x40000000, 1, 0, rpcdef.opaque_auth.XDR.encode(rpcdef.NULL_AUTH))
        await stream.send_all(frame(call.getvalue()))  # a CALL with the same XID as our call
        cb_reply = await read_record(stream)
        got.append(struct.unpack(">II", cb_reply[:8])[1])
        await stream.send_all(frame(reply(xid)))
        await trio.sleep_forever()

    async def on_callback(xid: int, body: rpcdef.call_body, u: Unpacker) -> Packer:
        p = Packer()
        rpcdef.pack_accepted_reply_header(p, xid)
        return p

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        t = await TcpTransport.connect("127.0.0.1", srv.port)
        conn = RpcConnection(t, PROG, VERS, on_callback)
        await nursery.start(conn.run)
        await conn.call(0, AUTH_NONE_CRED, timeout=5)
        assert got == [rpcdef.REPLY]
        nursery.cancel_scope.cancel()


async def test_a_send_the_server_does_not_read_ends_at_the_calls_deadline() -> None:
    """A server that stops reading fills the socket's buffers: the call fails with RpcTimeout when its
    time is up, not whenever the server reads again, and the record left half sent closes the
    connection (its framing is broken)."""

    async def handler(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()  # reads nothing

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        xid, p = conn.start_call(1, AUTH_NONE_CRED)
        p.bulk(bytes(64 << 20))  # (more than loopback's buffers take)
        start = trio.current_time()
        with pytest.raises(RpcTimeout, match=r"not sent within 0\.5 s"):
            await conn.call_packed(xid, p, timeout=0.5)
        assert trio.current_time() - start < 1.5
        with trio.fail_after(2):
            while conn.alive:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_a_record_one_past_the_sessions_limit_ends_the_connection() -> None:
    """limit_records (a session's ca_maxresponsesize): a record of that size is received; one byte more
    is refused before anything is allocated for it."""
    limit = 4096

    async def handler(stream: trio.SocketStream) -> None:
        for extra in (0, 1):
            call = await read_record(stream)
            body = reply(struct.unpack(">I", call[:4])[0])
            await stream.send_all(frame(body + bytes(limit + extra - len(body))))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        srv = await Server(nursery, handler).start()
        conn = await open_conn(srv.port, nursery)
        conn.limit_replies(limit)
        u = await conn.call(1, AUTH_NONE_CRED, timeout=5)
        assert u.remaining() == limit - 24
        with pytest.raises(ProtocolViolation, match="record of 4097 bytes exceeds the limit of 4096"):
            await conn.call(1, AUTH_NONE_CRED, timeout=5)
        nursery.cancel_scope.cancel()
