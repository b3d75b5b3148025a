"""Reused receive buffers: a READ reply's buffer is received into again only once nothing refers to it."""

from __future__ import annotations

import socket
import struct

import trio

from pynfsrdma.transport.tcp import POOL_MIN_FRAGMENT, BufferPool, TcpTransport

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


def test_a_full_pool_hands_out_plain_buffers_and_replaces_unused_ones() -> None:
    pool = BufferPool(max_bytes=2 * BIG)
    held = [pool.get(BIG), pool.get(BIG)]
    extra = pool.get(BIG)  # both pooled buffers are in use and the pool is full
    assert all(extra.obj is not h.obj for h in held)
    assert pool.bytes == 2 * BIG and len(pool.buffers) == 2
    del held[0], extra
    bigger = pool.get(2 * BIG - 1)  # the unused one is too small: replaced, the bound kept
    assert pool.bytes <= 2 * BIG
    assert bigger.nbytes == 2 * BIG - 1


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
