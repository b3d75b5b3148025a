"""Reused receive buffers: a READ reply's buffer is received into again only once nothing refers to it."""

from __future__ import annotations

import socket
import struct

import trio

from pynfsrdma._transport.tcp import POOL_MIN_FRAGMENT, RECORDS_BETWEEN_CHECKPOINTS, BufferPool, TcpTransport

BIG = 256 * 1024


def test_a_buffer_is_reused_only_when_no_view_of_it_is_left() -> None:
    pool = BufferPool(max_bytes=4 * BIG)
    a = pool.get(BIG)
    assert a.nbytes == BIG and not a.readonly
    a_id = id(a.obj)  # (the pool keeps it alive: the id stays its own)
    b = pool.get(BIG)
    assert id(b.obj) != a_id  # a is still held
    piece = a[10:20]  # a slice keeps the buffer referenced too
    del a
    c = pool.get(BIG - 100)
    assert id(c.obj) != a_id and c.obj is not b.obj
    del piece
    d = pool.get(BIG)
    assert id(d.obj) == a_id and d.nbytes == BIG  # nothing refers to it any more: received into again
    assert pool.reused == 1 and pool.allocated == 3


def test_a_full_pool_lets_go_of_the_longest_held_buffer_and_keeps_its_bound() -> None:
    pool = BufferPool(max_bytes=2 * BIG)
    first, second = pool.get(BIG), pool.get(BIG)
    first[:3] = b"abc"
    third = pool.get(BIG)  # both pooled buffers are in use: the oldest is no longer counted on
    assert pool.bytes == 2 * BIG and len(pool.buffers) == 2
    assert all(b is not first.obj for b in pool.buffers)
    third_id = id(third.obj)
    del third
    again = pool.get(BIG)
    assert id(again.obj) == third_id and again.obj is not second.obj
    assert first[:3] == b"abc"  # the one let go is still its holder's
    del second, again
    bigger = pool.get(2 * BIG)  # unused buffers make room for a bigger one
    assert pool.bytes == 2 * BIG and len(pool.buffers) == 1 and pool.buffers[0] is bigger.obj


async def test_replies_held_by_a_caller_are_not_overwritten_by_later_records() -> None:
    payloads = [bytes([i]) * (POOL_MIN_FRAGMENT + 1000 * i) for i in range(1, 7)]
    a, b = socket.socketpair()
    peer = trio.SocketStream(trio.socket.from_stdlib_socket(b))

    async def server() -> None:
        async with peer:
            for data in payloads:
                await peer.send_all(struct.pack(">I", 0x80000000 | len(data)) + data)

    t = TcpTransport(a, "peer")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server)
        kept = []
        for i, data in enumerate(payloads):
            u = await t.receive()
            view = u.view[u.pos : u.end]
            assert view == data
            if i % 2 == 0:
                kept.append((view, data))  # a caller holds on to every other reply
            del u, view
            for held, expected in kept:  # nothing held was written into
                assert held == expected
    assert t.pool.reused >= 2  # the replies let go of were received into again
    await t.aclose()


async def test_a_flood_of_records_lets_the_other_tasks_run_every_few_records() -> None:
    """Records that are all there when asked for are taken RECORDS_BETWEEN_CHECKPOINTS in a row, then
    the other tasks get a turn: not starved by a flood of replies, and not a turn per record."""
    n = 8 * RECORDS_BETWEEN_CHECKPOINTS
    a, b = socket.socketpair()
    b.sendall(b"".join(struct.pack(">I", 0x80000000 | 4) + struct.pack(">I", i) for i in range(n)))
    t = TcpTransport(a, "peer")
    turns = 0
    receiving = True

    async def other() -> None:
        nonlocal turns
        while receiving:
            turns += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        got = [struct.unpack(">I", bytes((await t.receive()).view[:4]))[0] for _ in range(n)]
        receiving = False
    assert got == list(range(n))
    assert n // RECORDS_BETWEEN_CHECKPOINTS - 1 <= turns <= n // RECORDS_BETWEEN_CHECKPOINTS + 1
    b.close()
    await t.aclose()
