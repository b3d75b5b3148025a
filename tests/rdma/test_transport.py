"""RdmaTransport end to end over the software provider, against a small in-test responder.

The responder uses the responder side of the chunk code (parse_call, RDMA Reads, assemble_call,
encode_reply, RDMA Writes, Send) and a toy RPC program: op 1 checksums WRITE-like data, op 2
returns READ-like items, op 3 returns a large non-DDP reply.
"""

from __future__ import annotations

import zlib

import pytest
import trio
import trio.testing

from pynfsrdma._proto.private_data import ConnectPrivateData, negotiate
from pynfsrdma._proto.rpcrdma import decode_rdma_msg, encode_rdma_msg
from pynfsrdma._testbed.responder_chunks import assemble_call, encode_reply, parse_call
from pynfsrdma._transport.base import ConnectionLost, ReplyHints
from pynfsrdma._transport.rdma.provider import Access, Connection, RemoteAccessError
from pynfsrdma._transport.rdma.soft import SoftProvider
from pynfsrdma._transport.rdma.transport import RdmaTransport
from pynfsrdma._xdr import Packer, Unpacker

SERVER_PD = ConnectPrivateData(send_size=4096, recv_size=4096, remote_invalidation=False)


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


async def responder(conn: Connection, credits: int, seen: list | None = None) -> None:
    thr = negotiate(SERVER_PD, conn.peer_private_data)
    for _ in range(credits + 2):
        conn.post_recv(conn.register(bytearray(thr.recv), Access.LOCAL_WRITE))
    while True:
        rcv = await conn.receive()
        data = bytes(rcv.data)
        conn.post_recv(rcv.region)
        hdr, off = decode_rdma_msg(data)
        call = parse_call(hdr, memoryview(data)[off:])
        if seen is not None:  # for tests that reach into a call's chunks after its reply
            seen.append((conn, call))
        pulled = []
        for ch in call.reads:
            sink = conn.register(bytearray(ch.length), Access.LOCAL_WRITE)
            pos = 0
            for seg in ch.segments:
                await conn.rdma_read(sink, pos, seg.handle, seg.offset, seg.length)
                pos += seg.length
            pulled.append(sink.buffer)
        u = Unpacker(b"".join(bytes(b) for b in assemble_call(call, pulled)))
        xid = u.uint32()
        assert u.uint32() == 0  # CALL
        op = u.uint32()
        reply = Packer()
        reply.uint32(xid)
        reply.uint32(1)  # REPLY
        items = []
        if op == 1:
            payload = u.opaque()
            reply.uint32(len(payload))
            reply.uint32(zlib.crc32(payload))
        elif op == 2:
            for _ in range(u.uint32()):
                n = u.uint32()
                reply.uint32(n)  # a count field, as READ4resok has eof before its data
                reply.uint32(n)  # the data's length word: stays inline
                items.append((len(reply), n))
                reply.opaque_fixed(pattern(n, n & 0xFF), n)
        elif op == 3:
            for i in range(u.uint32()):
                reply.uint32(i)
        reply.uint32(0xE0F)
        enc = encode_reply(call, reply.getvalue(), items, thr.send, credit=credits)
        for seg, d in enc.rdma_writes:
            await conn.rdma_write([d], seg.handle, seg.offset)
        await conn.send([encode_rdma_msg(enc.header).getvalue(), *enc.inline])


async def with_transport(credits, body, seen=None, windows=True, one_host=True):
    prov = SoftProvider(windows=windows, one_host=one_host)
    async with trio.open_nursery() as nursery:
        lst = await prov.listen(nursery, "127.0.0.1", 0, SERVER_PD.encode())

        async def serve():
            conn = await lst.accept()
            try:
                await responder(conn, credits, seen)
            except (ConnectionLost, RemoteAccessError):
                pass  # the client closed after its last reply, or a test broke the queue pair

        nursery.start_soon(serve)
        t = await RdmaTransport.connect(prov, nursery, "127.0.0.1", lst.port, credits=8, inline_size=8192)
        assert (t.thresholds.send, t.thresholds.recv) == (4096, 4096)
        try:
            await body(t)
        finally:
            await t.aclose()
            await lst.aclose()
            nursery.cancel_scope.cancel()


def call(xid: int, op: int) -> Packer:
    p = Packer()
    p.uint32(xid)
    p.uint32(0)
    p.uint32(op)
    return p


async def test_write_payload_goes_by_read_chunk_and_arrives_intact():
    async def body(t):
        data = pattern(100_001, 3)
        p = call(1, 1)
        p.bulk(data)
        await t.send_call(1, p)
        u = await t.receive()
        assert (u.uint32(), u.uint32(), u.uint32(), u.uint32()) == (1, 1, len(data), zlib.crc32(data))

    await with_transport(4, body)


async def test_two_reads_land_in_write_chunks_zero_copy():
    async def body(t):
        p = call(2, 2)
        p.uint32(3)
        for n in (5000, 7001, 100):
            p.uint32(n)
        await t.send_call(2, p, ReplyHints([5000, 7001, 100]))
        u = await t.receive()
        assert (u.uint32(), u.uint32()) == (2, 1)
        views = []
        for n in (5000, 7001, 100):
            assert u.uint32() == n
            v = u.bulk()
            assert v == pattern(n, n & 0xFF)
            views.append(v)
        assert u.uint32() == 0xE0F
        u.done()
        assert isinstance(views[0].obj, bytearray) and isinstance(views[1].obj, bytearray)
        assert views[0].obj is not views[1].obj  # each in its own Write chunk sink
        assert isinstance(views[2].obj, bytes)  # the small one came inline

    await with_transport(4, body)


async def test_large_reply_comes_through_the_reply_chunk():
    async def body(t):
        p = call(3, 3)
        p.uint32(3000)
        await t.send_call(3, p, ReplyHints([], max_reply=12_100))
        u = await t.receive()
        assert (u.uint32(), u.uint32()) == (3, 1)
        assert [u.uint32() for _ in range(3000)] == list(range(3000))
        assert u.uint32() == 0xE0F

    await with_transport(4, body)


async def test_credits_limit_calls_in_flight_and_all_complete():
    async def body(t):
        peak = 0
        got = {}

        async def one(xid):
            nonlocal peak
            await t.send_call(xid, _small(xid))
            peak = max(peak, t.gate.in_flight)

        async with trio.open_nursery() as n:
            for xid in range(10, 30):
                n.start_soon(one, xid)
            for _ in range(20):
                u = await t.receive()
                got[u.uint32()] = True
        assert sorted(got) == list(range(10, 30))
        assert t.gate.granted == 2
        assert peak <= 2

    await with_transport(2, body)


def _small(xid: int) -> Packer:
    p = call(xid, 3)
    p.uint32(1)
    return p


@pytest.mark.parametrize("one_host", [True, False], ids=["placed", "over-the-socket"])
@pytest.mark.parametrize("windows", [True, False], ids=["windows", "no-windows"])
async def test_a_write_chunk_is_out_of_the_responders_reach_after_the_reply(windows, one_host):
    """With memory windows the sink stays registered for the next READs, yet the handle the call
    offered is dead; without (siw) the sink was registered for the call and is deregistered at its
    reply. Either way an RDMA Write through the handle after the reply fails, and the data the
    caller holds is intact: whether the data is placed straight into our memory (one host) or
    comes over the emulation's socket."""
    seen: list = []

    async def body(t):
        p = call(4, 2)
        p.uint32(1)
        p.uint32(9000)
        await t.send_call(4, p, ReplyHints([9000]))
        u = await t.receive()
        assert (u.uint32(), u.uint32(), u.uint32()) == (4, 1, 9000)
        view = u.bulk()
        assert view == pattern(9000, 9000 & 0xFF)
        conn, received = seen[-1]
        (seg,) = received.writes[0].target
        # with windows the sink is kept registered; without, nothing stays
        assert t.chunk_memory.resting_registrations == (1 if windows else 0)
        assert t.conn.counters.binds == (1 if windows else 0)
        assert t.conn.counters.bytes_placed == (9000 if one_host else 0)
        with pytest.raises(RemoteAccessError):
            await conn.rdma_write([b"late" * 10], seg.handle, seg.offset)
        assert view == pattern(9000, 9000 & 0xFF)

    await with_transport(4, body, seen, windows, one_host)


@pytest.mark.parametrize("one_host", [True, False], ids=["placed", "over-the-socket"])
@pytest.mark.parametrize("windows", [True, False], ids=["windows", "no-windows"])
async def test_a_read_chunk_is_out_of_the_responders_reach_after_the_reply(windows, one_host):
    """With memory windows the caller's bytes stay registered (cached for its next WRITE);
    without (siw) they are registered for each call. Either way an RDMA Read through the handle
    the call offered fails after the reply."""
    seen: list = []

    async def body(t):
        data = pattern(100_001, 5)
        for xid in (5, 6):
            p = call(xid, 1)
            p.bulk(memoryview(data)[xid:])
            await t.send_call(xid, p)
            u = await t.receive()
            assert (u.uint32(), u.uint32(), u.uint32()) == (xid, 1, len(data) - xid)
        if windows:
            assert t.conn.counters.binds == 2 and t.chunk_memory.resting_registrations == 1
        else:
            assert t.conn.counters.binds == 0 and t.chunk_memory.resting_registrations == 0
        assert t.conn.counters.bytes_placed == (2 * len(data) - 11 if one_host else 0)
        conn, received = seen[-1]
        (seg,) = received.reads[0].segments
        sink = conn.register(bytearray(seg.length), Access.LOCAL_WRITE)
        with pytest.raises(RemoteAccessError):
            await conn.rdma_read(sink, 0, seg.handle, seg.offset, seg.length)

    await with_transport(4, body, seen, windows, one_host)


@pytest.mark.parametrize("windows", [True, False], ids=["windows", "no-windows"])
async def test_read_sinks_reuse_their_memory_once_the_caller_dropped_the_data(windows):
    """Once the caller dropped the first READ's data, the second READ's lands in the same sink.
    With windows the sink stays registered (a window per call); without (siw) it is registered for
    each call and released at the reply, and nothing stays registered between calls."""

    async def body(t):
        seen_memory = []
        for xid in (7, 8):
            r0 = t.conn.counters.registrations
            p = call(xid, 2)
            p.uint32(1)
            p.uint32(9000)
            await t.send_call(xid, p, ReplyHints([9000]))
            u = await t.receive()
            assert (u.uint32(), u.uint32(), u.uint32()) == (xid, 1, 9000)
            view = u.bulk()
            assert view == pattern(9000, 9000 & 0xFF)
            seen_memory.append(id(view.obj))
            if windows:  # the sink's registration, made once
                assert t.conn.counters.registrations - r0 == (1 if xid == 7 else 0)
                assert t.chunk_memory.resting_registrations == 1
            else:  # the sink's registration, for this call
                assert t.conn.counters.registrations - r0 == 1
                assert t.chunk_memory.resting_registrations == 0
            del u, view  # the caller is done with the data: the sink goes back to the pool
        assert seen_memory[0] == seen_memory[1] and t.chunk_memory.kept_sinks == 1

    await with_transport(4, body, windows=windows)


class _TransportTasks(trio.abc.Instrument):
    """Counts the tasks the RDMA transport starts of its own."""

    def __init__(self) -> None:
        self.spawned: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if "RdmaTransport" in task.name:
            self.spawned.append(task.name)


async def test_replies_are_taken_in_the_receiving_task_with_no_task_of_the_transport():
    """The task that calls receive() (the RPC layer's receive loop) takes each reply from the
    provider's Receive completions itself: the transport starts no task to pass replies on."""
    counter = _TransportTasks()
    trio.lowlevel.add_instrument(counter)
    try:

        async def body(t: RdmaTransport) -> None:
            for xid in (7, 8):
                p = call(xid, 3)
                p.uint32(4)
                await t.send_call(xid, p)
                u = await t.receive()
                assert isinstance(u, Unpacker) and u.uint32() == xid

        await with_transport(4, body)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert counter.spawned == []


async def test_a_crash_of_the_transports_own_task_fails_a_waiting_receive():
    """A transport opened with a nursery of its own fails like a lost connection when a task there
    fails: the task waiting in receive() for a completion that will never come is woken."""
    prov = SoftProvider()
    async with trio.open_nursery() as nursery:
        lst = await prov.listen(nursery, "127.0.0.1", 0, SERVER_PD.encode())
        nursery.start_soon(lst.accept)
        t = await RdmaTransport.open(prov, "127.0.0.1", lst.port)
        try:

            async def boom() -> None:
                raise RuntimeError("a bug in a task of the transport")

            with trio.fail_after(10):
                async with trio.open_nursery() as inner:

                    async def waiter() -> None:
                        with pytest.raises(ConnectionLost, match="RDMA transport failed"):
                            await t.receive()

                    inner.start_soon(waiter)
                    await trio.testing.wait_all_tasks_blocked()
                    assert t._host is not None
                    t._host.nursery.start_soon(boom)
            with pytest.raises(ConnectionLost, match="RDMA transport failed"):
                await t.receive()  # and every later one
        finally:
            await t.aclose()
            await lst.aclose()
            nursery.cancel_scope.cancel()
