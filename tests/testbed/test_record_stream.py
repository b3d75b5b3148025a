"""The responder's record stream to the server, over a real socket pair: records go out as one
mark and their pieces, fragments come back as one record, and record buffers are reused."""

from __future__ import annotations

import socket
import struct

import pytest
import trio
import trio.testing

from pynfsrdma._proto.rpc import RM_LAST_FRAGMENT
from pynfsrdma._testbed.record_stream import RecordStream
from pynfsrdma._transport.base import ConnectionLost, ProtocolViolation


def mark(n: int, last: bool = True) -> bytes:
    return struct.pack(">I", (RM_LAST_FRAGMENT if last else 0) | n)


def recv_all(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        out += sock.recv(n - len(out))
    return out


async def test_a_record_goes_out_as_its_mark_and_its_pieces():
    a, b = socket.socketpair()
    stream = RecordStream(a, "pair")
    payload = bytearray(b"x" * 300_000)  # more than the socket buffer takes at once
    got: list[bytes] = []

    async def reader() -> None:
        b.setblocking(True)
        got.append(await trio.to_thread.run_sync(recv_all, b, 4 + 4 + 300_000))

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await stream.send([b"head", memoryview(payload)])
    assert got == [mark(300_004) + b"head" + bytes(payload)]
    await stream.aclose()
    b.close()


async def test_fragments_come_back_as_one_record_and_buffers_are_reused():
    a, b = socket.socketpair()
    stream = RecordStream(a, "pair")
    b.sendall(mark(5, last=False) + b"hello" + mark(6) + b" world")
    view, record = await stream.receive()
    assert bytes(view) == b"hello world"
    stream.give_back(record)
    made = stream.buffers_made
    for i in range(5):
        b.sendall(mark(3000) + bytes([i]) * 3000)
        view, record = await stream.receive()
        assert bytes(view) == bytes([i]) * 3000
        stream.give_back(record)
    assert stream.buffers_made == made  # the same 4 KiB buffer each time
    await stream.aclose()
    b.close()


async def test_a_record_beyond_the_bound_or_a_closed_peer_ends_the_stream():
    a, b = socket.socketpair()
    stream = RecordStream(a, "pair")
    b.sendall(mark(0x7FFFFFFF))
    with pytest.raises(ProtocolViolation):
        await stream.receive()
    b.close()
    a2, b2 = socket.socketpair()
    stream2 = RecordStream(a2, "pair")
    b2.sendall(mark(10) + b"short")
    b2.close()
    with pytest.raises(ConnectionLost):
        await stream2.receive()
    await stream.aclose()
    await stream2.aclose()


async def test_before_wait_runs_only_when_a_receive_finds_the_socket_empty():
    """Records already in the socket are taken without it; a receive that must wait for bytes
    runs it first (the responder sends the replies it held back there)."""
    a, b = socket.socketpair()
    stream = RecordStream(a, "pair")
    waits: list[int] = []

    async def before_wait() -> None:
        waits.append(1)

    stream.before_wait = before_wait
    b.sendall(mark(3) + b"one" + mark(3) + b"two")
    assert [bytes((await stream.receive())[0]) for _ in range(2)] == [b"one", b"two"]
    assert waits == []
    async with trio.open_nursery() as n:
        n.start_soon(stream.receive)
        await trio.testing.wait_all_tasks_blocked()
        assert waits == [1]
        b.sendall(mark(5) + b"three")
    await stream.aclose()
    b.close()
