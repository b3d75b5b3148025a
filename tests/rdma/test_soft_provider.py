"""The software verbs provider: two endpoints over loopback TCP in one trio process.

Both ends share one host, so RDMA Read and Write data is placed directly (the target copies it
from or into the initiator's memory); the tests of access rules run both ways, with
``one_host=False`` as well (the data over the socket)."""

from __future__ import annotations

import cProfile
import os
import pstats
import re
import subprocess
import sys
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from pynfsrdma._transport.base import ConnectionLost, ConnectRefused
from pynfsrdma._transport.rdma import cross_memory
from pynfsrdma._transport.rdma.provider import (
    Access,
    LengthError,
    RdmaWrite,
    ReceiverNotReady,
    RemoteAccessError,
    buffer_address,
)
from pynfsrdma._transport.rdma.soft import SoftProvider

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
BOTH_WAYS = pytest.mark.parametrize("one_host", [True, False], ids=["placed", "over-the-socket"])


@asynccontextmanager
async def pair(client_pd=b"hello", server_pd=b"world", one_host=True):
    prov = SoftProvider(one_host=one_host)
    async with trio.open_nursery() as nursery:
        lst = await prov.listen(nursery, "127.0.0.1", 0, server_pd)
        async with trio.open_nursery() as inner:
            box = {}

            async def acc():
                box["s"] = await lst.accept()

            inner.start_soon(acc)
            c = await prov.connect(nursery, "127.0.0.1", lst.port, client_pd)
        s = box["s"]
        try:
            yield c, s
        finally:
            await c.aclose()
            await s.aclose()
            await lst.aclose()


@asynccontextmanager
async def peers_apart():
    """A connection between two providers of one host (as a client and a server process are): the
    serving side's provider, the client's connection and the server's."""
    prov = SoftProvider()
    async with trio.open_nursery() as nursery:
        lst = await prov.listen(nursery, "127.0.0.1", 0)
        async with trio.open_nursery() as inner:
            box = {}

            async def acc():
                box["s"] = await lst.accept()

            inner.start_soon(acc)
            c = await SoftProvider().connect(nursery, "127.0.0.1", lst.port)
        await trio.testing.wait_all_tasks_blocked()  # (each side has mapped the other's arena)
        s = box["s"]
        try:
            yield prov, c, s
        finally:
            await c.aclose()
            await s.aclose()
            await lst.aclose()


async def test_cm_private_data_both_ways_and_a_function_of_the_request():
    async with pair(b"\x01" * 56, lambda req: req[::-1] + b"!") as (c, s):
        assert s.peer_private_data == b"\x01" * 56
        assert c.peer_private_data == b"\x01" * 56 + b"!"


async def test_private_data_size_limits():
    prov = SoftProvider()
    async with trio.open_nursery() as n:
        with pytest.raises(ValueError):
            await prov.connect(n, "127.0.0.1", 1, b"x" * 57)


async def test_connect_refused():
    prov = SoftProvider()
    s = trio.socket.socket()
    await s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    async with trio.open_nursery() as n:
        with pytest.raises(ConnectRefused):
            await prov.connect(n, "127.0.0.1", port)


async def test_send_receive_gathered_and_in_order():
    async with pair() as (c, s):
        bufs = [s.register(bytearray(64), Access.LOCAL_WRITE) for _ in range(3)]
        for b in bufs:
            s.post_recv(b)
        await c.send([b"ab", memoryview(b"cd"), bytearray(b"e")])
        await c.send([b"second"])
        r1 = await s.receive()
        r2 = await s.receive()
        assert (bytes(r1.data), bytes(r2.data)) == (b"abcde", b"second")
        assert r1.region is bufs[0] and r1.invalidated is None


@BOTH_WAYS
async def test_rdma_write_and_read_against_registered_memory(one_host):
    async with pair(one_host=one_host) as (c, s):
        target = bytearray(100)
        region = s.register(target, Access.REMOTE_WRITE | Access.REMOTE_READ | Access.LOCAL_WRITE)
        await c.rdma_write([b"hello ", b"world"], region.handle, region.address + 10)
        assert bytes(target[10:21]) == b"hello world"
        sink = c.register(bytearray(11), Access.LOCAL_WRITE)
        await c.rdma_read(sink, 0, region.handle, region.address + 10, 11)
        assert bytes(sink.buffer) == b"hello world"
        assert s.counters.bytes_placed == (22 if one_host else 0)  # the target copied, as a DMA


@BOTH_WAYS
async def test_write_then_send_arrive_in_order(one_host):
    async with pair(one_host=one_host) as (c, s):
        target = bytearray(8)
        region = s.register(target, Access.REMOTE_WRITE)
        rb = s.register(bytearray(16), Access.LOCAL_WRITE)
        s.post_recv(rb)
        async with trio.open_nursery() as n:
            n.start_soon(c.rdma_write, [b"12345678"], region.handle, region.address)
            n.start_soon(c.send, [b"done"])
        r = await s.receive()
        assert bytes(r.data) == b"done" and bytes(target) == b"12345678"


@BOTH_WAYS
@pytest.mark.parametrize("case", ["unknown", "out_of_bounds", "invalidated", "no_right", "deregistered"])
async def test_bad_remote_access_fails_the_operation_and_the_connection(case, one_host):
    async with pair(one_host=one_host) as (c, s):
        buf = bytearray(32)
        access = Access.REMOTE_READ if case == "no_right" else Access.REMOTE_WRITE
        region = s.register(buf, access)
        handle, address, length = region.handle, region.address, 8
        if case == "unknown":
            handle ^= 0x5A5A
        elif case == "out_of_bounds":
            address += 30
        elif case == "invalidated":
            s.invalidate(region)
        elif case == "deregistered":
            s.deregister(region)
        with pytest.raises(RemoteAccessError):
            await c.rdma_write([b"x" * length], handle, address)
        assert buf == bytearray(32)  # nothing was written
        with pytest.raises(RemoteAccessError):
            await c.send([b"later"])  # the queue pair is in the error state
        with pytest.raises(RemoteAccessError):
            await s.receive()  # and so is the target's


@BOTH_WAYS
async def test_rdma_read_of_write_only_memory_fails(one_host):
    async with pair(one_host=one_host) as (c, s):
        region = s.register(bytearray(16), Access.REMOTE_WRITE)
        sink = c.register(bytearray(16), Access.LOCAL_WRITE)
        with pytest.raises(RemoteAccessError):
            await c.rdma_read(sink, 0, region.handle, region.address, 16)


async def test_send_without_posted_receive_is_fatal():
    async with pair() as (c, s):
        with pytest.raises(ReceiverNotReady):
            await c.send([b"nobody listens"])
        with pytest.raises(ReceiverNotReady):
            await s.receive()


async def test_send_larger_than_the_receive_buffer_is_fatal():
    async with pair() as (c, s):
        s.post_recv(s.register(bytearray(4), Access.LOCAL_WRITE))
        with pytest.raises(LengthError):
            await c.send([b"too long"])


@BOTH_WAYS
async def test_send_with_invalidate_reports_and_invalidates_the_region(one_host):
    async with pair(one_host=one_host) as (c, s):
        region = s.register(bytearray(16), Access.REMOTE_WRITE)
        s.post_recv(s.register(bytearray(16), Access.LOCAL_WRITE))
        await c.send([b"reply"], invalidate=region.handle)
        r = await s.receive()
        assert r.invalidated == region.handle and not region.valid
        with pytest.raises(RemoteAccessError):
            await c.rdma_write([b"x"], region.handle, region.address)


async def test_close_fails_pending_and_later_operations():
    async with pair() as (c, s):
        s.post_recv(s.register(bytearray(16), Access.LOCAL_WRITE))
        async with trio.open_nursery() as n:

            async def waiter():
                with pytest.raises(ConnectionLost):
                    await s.receive()

            n.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            await c.aclose()
        with pytest.raises(ConnectionLost):
            await c.send([b"x"])


async def test_registration_rules():
    async with pair() as (c, _s):
        with pytest.raises(ValueError):
            c.register(b"read-only bytes", Access.REMOTE_WRITE)
        ro = c.register(b"read-only bytes", Access.REMOTE_READ)
        with pytest.raises(ValueError):
            c.post_recv(ro)
        a, b = c.register(bytearray(10), RW), c.register(bytearray(10), RW)
        assert a.handle != b.handle and not a.contains(b.address, 1)


async def test_a_read_only_buffer_is_registered_for_reading_only():
    async with pair() as (c, _s):
        with pytest.raises(ValueError, match="writable access needs a writable buffer"):
            c.register(b"constant", Access.LOCAL_WRITE)
        with pytest.raises(ValueError, match="writable access needs a writable buffer"):
            c.register(memoryview(bytearray(8)).toreadonly(), Access.REMOTE_WRITE)
        assert c.registrations == 0  # nothing was left registered by the refusals
        region = c.register(b"constant", Access.REMOTE_READ)
        assert region.valid and bytes(region.buffer) == b"constant" and c.registrations == 1
        c.deregister(region)


@BOTH_WAYS
async def test_writes_chained_before_a_send_are_one_post_and_land_before_it(one_host):
    """A reply's RDMA Writes and its Send go out as one chain: one post, no acknowledgement of
    the Writes of their own, and when the Send completes (or is received) the Writes have landed."""
    async with pair(one_host=one_host) as (c, s):
        s.post_recv(s.register(bytearray(64), Access.LOCAL_WRITE))
        target = s.register(bytearray(16), Access.REMOTE_WRITE)
        out = c.register(bytearray(b"the reply" + b"." * 55), Access.LOCAL_WRITE)
        chunk = bytearray(b"placed")
        posts, sends = c.counters.posts, c.counters.sends
        await c.send_region_after_writes(
            [RdmaWrite([chunk[:3], chunk[3:]], target.handle, target.address),
             RdmaWrite([b"tail"], target.handle, target.address + 12)],
            out, 9,
        )  # fmt: skip
        assert (c.counters.posts - posts, c.counters.sends - sends) == (1, 1)
        assert bytes((await s.receive()).data) == b"the reply"
        assert bytes(target.buffer) == b"placed\0\0\0\0\0\0tail"
        assert c.counters.bytes_copied == 0


@BOTH_WAYS
async def test_a_posted_chain_returns_at_once_and_reports_its_completion(one_host):
    """post_send_region_after_writes does not wait for the Send's completion: it reports it
    through its callback (None), after the Writes have landed and the Send was received."""
    async with pair(one_host=one_host) as (c, s):
        s.post_recv(s.register(bytearray(64), Access.LOCAL_WRITE))
        target = s.register(bytearray(8), Access.REMOTE_WRITE)
        out = c.register(bytearray(b"the reply" + b"." * 55), Access.LOCAL_WRITE)
        seen: list[BaseException | None] = []
        done = trio.Event()

        def on_done(error: BaseException | None) -> None:
            seen.append(error)
            done.set()

        posts = c.counters.posts
        await c.post_send_region_after_writes(
            [RdmaWrite([b"placed"], target.handle, target.address)], out, 9, None, on_done
        )
        assert seen == []  # the peer has not acknowledged yet: nothing reported
        assert bytes((await s.receive()).data) == b"the reply"
        assert bytes(target.buffer) == b"placed\0\0"
        with trio.fail_after(10):
            await done.wait()
        assert seen == [None]
        assert c.counters.posts - posts == 1


async def test_posts_held_back_go_out_together_in_order_with_the_next_frame():
    """While ``hold_posts`` is set, posted chains wait in the send queue: none reaches the peer
    until ``ring`` (or the next frame that is not a held post), then all of them in one socket
    write, in the order posted, and each completes."""
    async with pair() as (c, s):
        for _ in range(6):
            s.post_recv(s.register(bytearray(64), Access.LOCAL_WRITE))
        targets = [s.register(bytearray(4), Access.REMOTE_WRITE) for _ in range(3)]
        outs = [c.register(bytearray(b"reply %d" % i), Access.LOCAL_WRITE) for i in range(3)]
        done: list[BaseException | None] = []
        writes = c.counters.frame_writes
        c.hold_posts = True
        for i, (t, out) in enumerate(zip(targets, outs, strict=True)):
            await c.post_send_region_after_writes(
                [RdmaWrite([b"w%d.." % i], t.handle, t.address)], out, 7, None, done.append
            )
        c.hold_posts = False
        assert c.counters.frame_writes == writes  # held: nothing sent yet
        await c.ring()
        assert c.counters.frame_writes == writes + 1
        with trio.fail_after(10):
            got = [bytes((await s.receive()).data) for _ in range(3)]
        assert got == [b"reply 0", b"reply 1", b"reply 2"]
        assert [bytes(t.buffer) for t in targets] == [b"w0..", b"w1..", b"w2.."]
        c.hold_posts = True
        await c.post_send_region_after_writes([], outs[0], 7, None, done.append)
        c.hold_posts = False
        await c.send_region(outs[1], 7)  # not a post: the held one goes first, in the same write
        with trio.fail_after(10):
            got = [bytes((await s.receive()).data) for _ in range(2)]
            while len(done) < 4:
                await trio.sleep(0.001)
        assert got == [b"reply 0", b"reply 1"]
        assert done == [None] * 4


async def test_a_posted_chain_the_peer_cannot_take_reports_the_fault_once():
    async with pair() as (c, _s):
        out = c.register(bytearray(16), Access.LOCAL_WRITE)  # the peer posted no Receive
        seen: list[BaseException | None] = []
        done = trio.Event()

        def on_done(error: BaseException | None) -> None:
            seen.append(error)
            done.set()

        await c.post_send_region_after_writes([], out, 4, None, on_done)
        with trio.fail_after(10):
            await done.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert len(seen) == 1 and isinstance(seen[0], ReceiverNotReady)


@BOTH_WAYS
async def test_a_chained_write_the_target_refuses_fails_the_chain_and_its_send(one_host):
    async with pair(one_host=one_host) as (c, s):
        s.post_recv(s.register(bytearray(64), Access.LOCAL_WRITE))
        target = s.register(bytearray(16), Access.REMOTE_READ)  # not writable
        out = c.register(bytearray(64), Access.LOCAL_WRITE)
        with pytest.raises(RemoteAccessError):
            await c.send_region_after_writes([RdmaWrite([b"x" * 4], target.handle, target.address)], out, 8)
        with pytest.raises(RemoteAccessError):
            await s.receive()  # the Send behind it never arrived
        assert bytes(target.buffer) == bytes(16)


class _RunSteps(trio.abc.Instrument):
    """Counts the steps the connections' receive loops take (each a trip through the scheduler)."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("SoftConnection.run"):
            self.steps += 1


async def test_frames_that_came_together_are_taken_in_a_row():
    """The receive loop takes the frames the socket holds one after the other, with no trip through
    the scheduler per frame (as the TCP transport takes its records): 16 Sends and their
    acknowledgements cost both loops fewer steps than there are Sends."""
    async with pair() as (c, s):
        for _ in range(16):
            s.post_recv(s.register(bytearray(16), Access.LOCAL_WRITE))
        counter = _RunSteps()
        trio.lowlevel.add_instrument(counter)
        try:
            async with trio.open_nursery() as nursery:
                for i in range(16):
                    nursery.start_soon(c.send, [b"send %02d" % i])
        finally:
            trio.lowlevel.remove_instrument(counter)
        got = sorted([bytes((await s.receive()).data) for _ in range(16)])
        assert got == [b"send %02d" % i for i in range(16)]
        assert counter.steps < 16, counter.steps


async def test_send_region_sends_a_registered_buffer_as_it_lies_and_fails_with_the_connection():
    async with pair() as (c, s):
        s.post_recv(s.register(bytearray(64), Access.LOCAL_WRITE))
        buf = c.register(bytearray(b"registered once" + b"." * 49), Access.LOCAL_WRITE)
        before = c.counters.registrations
        await c.send_region(buf, 15)
        assert bytes((await s.receive()).data) == b"registered once"
        assert c.counters.registrations == before and c.counters.bytes_copied == 0
        with pytest.raises(ValueError, match="a 65-byte Send from a 64-byte region"):
            await c.send_region(buf, 65)
        other = c.register(bytearray(8), Access.LOCAL_WRITE)
        c.deregister(other)
        with pytest.raises(ValueError, match="send buffers must be registered"):
            await c.send_region(other, 8)
        await c.aclose()
        # a failed connection answers with its own fault, whatever became of its regions
        with pytest.raises(ConnectionLost):
            await c.send_region(buf, 15)


@BOTH_WAYS
async def test_a_window_reaches_its_bytes_only_and_only_until_invalidated(one_host):
    async with pair(one_host=one_host) as (c, s):
        mem = bytearray(8192)
        base = c.register(mem, Access.LOCAL_WRITE | Access.BIND)
        with pytest.raises(RemoteAccessError):  # the registration itself gives no remote access
            await s.rdma_write([b"x"], base.handle, base.address)
    async with pair(one_host=one_host) as (c, s):
        mem = bytearray(8192)
        base = c.register(mem, Access.LOCAL_WRITE | Access.BIND)
        w = c.bind(base, 4096, 100, Access.REMOTE_WRITE)
        assert c.counters.binds == 1 and c.counters.registrations == 1
        await s.rdma_write([b"y" * 100], w.handle, w.address)
        assert mem[4096:4196] == b"y" * 100 and mem[4196] == 0
        with pytest.raises(RemoteAccessError):  # one byte past the window
            await s.rdma_write([b"z"], w.handle, w.address + 100)
    async with pair(one_host=one_host) as (c, s):
        mem = bytearray(8192)
        base = c.register(mem, Access.LOCAL_WRITE | Access.BIND)
        w = c.bind(base, 0, 100, Access.REMOTE_WRITE)
        c.invalidate(w)
        with pytest.raises(RemoteAccessError):
            await s.rdma_write([b"late"], w.handle, w.address)
        assert bytes(mem[:4]) == b"\0\0\0\0"


async def test_a_released_window_is_bound_again_and_its_old_handle_is_refused():
    """Type 2 windows from a pool: the window a released I/O had is bound for the next one with a
    new key (the handle's low 8 bits); the handle the first I/O offered no longer reaches anything,
    although the same window is bound over the same memory again."""
    async with pair() as (c, s):
        mem = bytearray(8192)
        base = c.register(mem, Access.LOCAL_WRITE | Access.BIND)
        first = c.bind(base, 0, 100, Access.REMOTE_WRITE)
        await s.rdma_write([b"a" * 100], first.handle, first.address)
        c.deregister(first)  # the I/O is over: the window goes back to the pool
        again = c.bind(base, 0, 100, Access.REMOTE_WRITE)
        assert again.handle >> 8 == first.handle >> 8 and again.handle != first.handle
        assert c.counters.windows_allocated == 1 and c.counters.binds == 2
        await s.rdma_write([b"b" * 100], again.handle, again.address)
        assert mem[:100] == b"b" * 100
        with pytest.raises(RemoteAccessError):
            await s.rdma_write([b"late"], first.handle, first.address)
        assert mem[:100] == b"b" * 100


def _bytes_sent(port: int) -> int:
    """What the kernel's TCP sent so far on the connections to and from ``port`` (ss -ti)."""
    out = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( sport = :{port} or dport = :{port} )"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return sum(int(n) for n in re.findall(r"bytes_sent:(\d+)", out))


@BOTH_WAYS
async def test_on_one_host_rdma_data_does_not_cross_the_socket(one_host):
    """As a NIC's DMA: 8 MiB RDMA Written and 8 MiB RDMA Read between two connections of one host
    are copied once by the target, straight between the two memories; only the frames that say
    where go over the socket. With one_host=False every byte crosses it."""
    size = 8 << 20
    prov = SoftProvider(one_host=one_host)
    async with trio.open_nursery() as nursery:
        lst = await prov.listen(nursery, "127.0.0.1", 0)
        box = {}

        async def acc():
            box["s"] = await lst.accept()

        nursery.start_soon(acc)
        c = await prov.connect(nursery, "127.0.0.1", lst.port)
        await trio.testing.wait_all_tasks_blocked()
        s = box["s"]
        assert (c.reaches_peer, c.peer_reaches, s.reaches_peer, s.peer_reaches) == (one_host,) * 4
        mem = bytearray(size)
        region = s.register(mem, RW)
        data = os.urandom(size)
        sent = _bytes_sent(lst.port)
        await c.rdma_write([memoryview(data)[:100], memoryview(data)[100:]], region.handle, region.address)
        sink = c.register(bytearray(size), Access.LOCAL_WRITE)
        await c.rdma_read(sink, 0, region.handle, region.address, size)
        on_the_wire = _bytes_sent(lst.port) - sent
        assert mem == data and sink.buffer == data
        if one_host:
            assert on_the_wire < 1024 and s.counters.bytes_placed == 2 * size
        else:
            assert on_the_wire >= 2 * size and s.counters.bytes_placed == 0
        for conn in (c, s):
            await conn.aclose()
        await lst.aclose()


def test_a_peer_is_reached_only_through_the_token_it_showed():
    token = bytearray(os.urandom(4))
    address = buffer_address(memoryview(token))
    assert cross_memory.reaches(os.getpid(), address, bytes(token))
    assert not cross_memory.reaches(os.getpid(), address, bytes(b ^ 0xFF for b in token))
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert not cross_memory.reaches(dead.pid, address, bytes(token))  # no such process any more


async def test_acknowledgements_ride_with_the_next_frame():
    """An acknowledgement costs no write of its own when a frame follows: 16 calls answered by 16
    replies, as a server answers, take the server about one socket write per reply (without the
    change, 16 acknowledgements of their own as well), and every Send still completes."""
    async with pair() as (c, s):
        for _ in range(16):
            s.post_recv(s.register(bytearray(16), Access.LOCAL_WRITE))
            c.post_recv(c.register(bytearray(16), Access.LOCAL_WRITE))
        before = s.counters.frame_writes

        async def serve() -> None:
            for _ in range(16):
                got = bytes((await s.receive()).data)
                await s.send([b"re " + got])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            for i in range(16):
                nursery.start_soon(c.send, [b"call %02d" % i])
        got = sorted([bytes((await c.receive()).data) for _ in range(16)])
        assert got == [b"re call %02d" % i for i in range(16)]
        writes = s.counters.frame_writes - before
        assert 16 <= writes <= 20, writes


@BOTH_WAYS
async def test_a_posted_rdma_read_reports_its_completion_with_the_data_in_the_sink(one_host):
    """post_rdma_read returns once the request is out; its callback runs once, with None, when
    the data is in the sink; a Read the target refuses reports the connection's fault once."""
    async with pair(one_host=one_host) as (c, s):
        source = s.register(bytearray(b"pulled by the server"), Access.REMOTE_READ)
        sink = c.register(bytearray(32), Access.LOCAL_WRITE)
        seen: list[BaseException | None] = []
        done = trio.Event()

        def on_done(error: BaseException | None) -> None:
            seen.append(error)
            done.set()

        await c.post_rdma_read(sink, 4, source.handle, source.address, 20, on_done)
        assert seen == []
        with trio.fail_after(10):
            await done.wait()
        assert seen == [None]
        assert bytes(sink.buffer[4:24]) == b"pulled by the server"
        done = trio.Event()
        await c.post_rdma_read(sink, 0, source.handle ^ 1, source.address, 4, on_done)
        with trio.fail_after(10):
            await done.wait()
        await trio.sleep(0.05)
        assert len(seen) == 2 and isinstance(seen[1], RemoteAccessError)
        with pytest.raises(RemoteAccessError):
            await c.post_rdma_read(sink, 0, source.handle, source.address, 4, on_done)
        assert len(seen) == 2


async def test_an_unsignaled_send_costs_the_target_no_acknowledgement():
    """send_region_unsignaled asks for no completion: the target takes 16 such Sends without
    writing a frame back (16 acknowledgements for signaled ones), the sender's buffer may be
    written again as soon as each returns, and With Invalidate still retires the region named."""
    async with pair() as (c, s):
        for _ in range(32):
            s.post_recv(s.register(bytearray(16), Access.LOCAL_WRITE))
        buf = c.register(bytearray(16), Access.LOCAL_WRITE)
        before = s.counters.frame_writes
        for i in range(16):
            buf.buffer[:7] = b"call %02d" % i
            await c.send_region_unsignaled(buf, 7)
        got = [bytes((await s.receive()).data) for _ in range(16)]
        assert got == [b"call %02d" % i for i in range(16)]
        await trio.testing.wait_all_tasks_blocked()
        assert s.counters.frame_writes == before
        for _ in range(16):
            await c.send_region(buf, 7)
            await s.receive()
        assert s.counters.frame_writes - before == 16
        region = c.register(bytearray(8), Access.REMOTE_WRITE)
        c.post_recv(c.register(bytearray(16), Access.LOCAL_WRITE))
        await s.send_region_unsignaled(s.register(bytearray(b"reply"), Access.LOCAL_WRITE), 5, region.handle)
        r = await c.receive()
        assert (bytes(r.data), r.invalidated, region.valid) == (b"reply", region.handle, False)


async def test_an_unsignaled_send_the_target_cannot_take_breaks_the_connection():
    async with pair() as (c, s):
        buf = c.register(bytearray(b"nobody listens"), Access.LOCAL_WRITE)
        await c.send_region_unsignaled(buf, 14)  # no completion: the post itself succeeds
        with pytest.raises(ReceiverNotReady):
            await s.receive()
        with trio.fail_after(10):
            while True:  # the target's fault reaches this side as the connection's
                try:
                    await c.send_region_unsignaled(buf, 14)
                except ReceiverNotReady:
                    break
                await trio.sleep(0.01)


async def test_access_checks_make_no_enum_operator_calls():
    """The rights checked on every bind, Receive, Send With Invalidate and RDMA access are plain int
    operations: cProfile sees no enum.IntFlag operator (each a Python call) in a bound window's
    RDMA Write and Read, a Receive posted and a Send With Invalidate taken."""
    async with pair() as (c, s):
        mem = bytearray(8192)
        base = c.register(mem, Access.LOCAL_WRITE | Access.BIND)
        recv = c.register(bytearray(16), Access.LOCAL_WRITE)
        out = s.register(bytearray(b"reply"), Access.LOCAL_WRITE)
        sink = s.register(bytearray(100), Access.LOCAL_WRITE)
        rights = Access.REMOTE_WRITE | Access.REMOTE_READ
        profile = cProfile.Profile()
        profile.enable()
        try:
            w = c.bind(base, 0, 100, rights)
            await s.rdma_write([b"y" * 100], w.handle, w.address)
            await s.rdma_read(sink, 0, w.handle, w.address, 100)
            c.post_recv(recv)
            await s.send_region(out, 5, w.handle)
            got = await c.receive()
        finally:
            profile.disable()
        assert got.invalidated == w.handle and bytes(sink.buffer) == b"y" * 100
        enum_calls = [fn for (file, _line, fn) in pstats.Stats(profile).stats if file.endswith("enum.py")]
        assert enum_calls == [], enum_calls


async def test_a_listeners_shared_memory_is_copied_through_a_mapping_and_other_memory_is_not():
    """Memory the serving side takes from its provider's shared arena is reached by its peer
    through a mapping of its own (a memory copy, counted in bytes_mapped); other memory of the
    same side through process_vm_* (counted in bytes_placed only). Both land the same bytes."""
    async with peers_apart() as (prov, c, s):
        shared = prov.shared_buffer(8192)
        assert shared is not None and shared.nbytes == 8192
        plain = bytearray(8192)
        target = c.register(bytearray(8192), Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
        shared[:] = b"s" * 8192
        await s.rdma_write([shared[:4096]], target.handle, target.address)
        assert (c.counters.bytes_placed, c.counters.bytes_mapped) == (4096, 4096)
        plain[:] = b"p" * 8192
        await s.rdma_write([plain[:4096]], target.handle, target.address + 4096)
        assert (c.counters.bytes_placed, c.counters.bytes_mapped) == (8192, 4096)
        assert bytes(target.buffer) == b"s" * 4096 + b"p" * 4096
        sink = s.register(shared, Access.LOCAL_WRITE)
        await s.rdma_read(sink, 0, target.handle, target.address, 8192)
        assert bytes(shared) == b"s" * 4096 + b"p" * 4096
        assert (c.counters.bytes_placed, c.counters.bytes_mapped) == (16384, 12288)


def test_a_shared_arena_is_mapped_only_by_a_process_that_reaches_its_owner():
    arena = cross_memory.SharedArena(1 << 20)
    view = arena.take(10)
    assert view is not None and view.nbytes == 4096  # whole pages
    view[:5] = b"arena"
    mine = cross_memory.PeerMemory(os.getpid())
    assert mine.map_arena(arena.fd, arena.address, arena.size)
    got = bytearray(5)
    mine.read_from([(arena.address, 5)], memoryview(got))
    assert got == b"arena" and mine.bytes_mapped == 5
    assert arena.take(arena.size) is None  # used up: the caller's own memory then
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert not cross_memory.PeerMemory(dead.pid).map_arena(arena.fd, arena.address, arena.size)


def test_a_peers_arena_is_mapped_no_further_than_its_memfd_and_only_when_sealed():
    """A size announced past the memfd's end is cut to the memfd's real size, and a memfd
    that could still shrink is not mapped: either would fault (SIGBUS) on access instead of
    raising. Spans the mapping does not hold go through process_vm_* and land the same."""
    arena = cross_memory.SharedArena(1 << 20)
    with pytest.raises(PermissionError):
        os.ftruncate(arena.fd, 4096)  # sealed: its owner cannot shrink it either
    view = arena.take(1 << 20)
    assert view is not None
    view[-5:] = b"tail!"
    mine = cross_memory.PeerMemory(os.getpid())
    assert mine.map_arena(arena.fd, arena.address, 64 << 20)
    end = arena.address + (1 << 20)
    got = bytearray(5)
    mine.read_from([(end - 5, 5)], memoryview(got))
    assert got == b"tail!" and mine.bytes_mapped == 5
    outside = bytearray(b"x" * 4096)
    got = bytearray(4096)
    mine.read_from([(buffer_address(outside), 4096)], memoryview(got))
    assert got == outside and mine.bytes_mapped == 5  # not through the mapping
    plain = os.memfd_create("unsealed", os.MFD_CLOEXEC)
    try:
        os.ftruncate(plain, 1 << 20)
        assert not cross_memory.PeerMemory(os.getpid()).map_arena(plain, arena.address, 1 << 20)
    finally:
        os.close(plain)
    past_the_end = (
        "import os\n"
        "from pynfsrdma._transport.rdma import cross_memory\n"
        "arena = cross_memory.SharedArena(1 << 20)\n"
        "mine = cross_memory.PeerMemory(os.getpid())\n"
        "assert mine.map_arena(arena.fd, arena.address, 64 << 20)\n"
        "try:\n"
        "    mine.read_from([(arena.address + (2 << 20), 5)], memoryview(bytearray(5)))\n"
        "except OSError:\n"
        "    pass\n"
        "print('mapped', mine.bytes_mapped)\n"
    )
    done = subprocess.run([sys.executable, "-c", past_the_end], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.split()) == (0, ["mapped", "0"]), done  # a fault: -SIGBUS


async def test_a_write_from_the_peers_arena_is_lent_and_its_send_completes_when_let_go_of():
    """Into a region its owner allows lending for, an RDMA Write whose bytes lie in the peer's
    shared arena is not copied: the owner borrows a read-only view of them (the region's own
    memory stays untouched), and the Send chained behind the Write completes on the peer only
    once that view is gone (its acknowledgement rides with the owner's next frame). The region's
    handle is checked as for a copy: once released, a Write through it fails."""
    async with peers_apart() as (prov, c, s):
        shared = prov.shared_buffer(8192)
        assert shared is not None
        shared[:] = b"L" * 8192
        target = c.register(bytearray(4096), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
        c.allow_lending(target)
        for _ in range(3):
            c.post_recv(c.register(bytearray(64), Access.LOCAL_WRITE))
            s.post_recv(s.register(bytearray(64), Access.LOCAL_WRITE))
        out = s.register(bytearray(b"reply"), Access.LOCAL_WRITE)
        done: list[BaseException | None] = []
        write = RdmaWrite([shared[:4096]], target.handle, target.address)
        await s.post_send_region_after_writes([write], out, 5, None, done.append)
        assert bytes((await c.receive()).data) == b"reply"
        lent = c.borrowed(target.handle)
        assert lent is not None and lent.readonly and bytes(lent) == b"L" * 4096
        assert c.borrowed(target.handle) is None  # taken once
        assert bytes(target.buffer) == bytes(4096)  # not copied
        assert (c.counters.bytes_lent, c.counters.bytes_placed) == (4096, 0)
        await c.send([b"next"])
        await s.receive()
        assert done == []  # a view of the bytes lives: the peer keeps them
        del lent
        await c.send([b"next"])
        await s.receive()
        assert done == [None]
        late = RdmaWrite([shared[4096:]], target.handle, target.address)
        c.deregister(target)  # its call is over: a Write through its handle now fails
        with pytest.raises(RemoteAccessError):
            await s.send_region_after_writes([late], out, 5)
