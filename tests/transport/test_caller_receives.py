"""Over TCP the task that sent a call reads its own reply (leader/follower), on real loopback
sockets with scripted peers: the receive loop stays asleep while calls are made, the reading is
handed on when its reader's call ends (answered, cancelled, timed out), a cancellation inside a
record closes the connection instead of losing its framing, and the server's callbacks are served
whether or not a call waits."""

from __future__ import annotations

import functools
import socket
import struct

import pytest
import trio
from record_support import read_record

from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._rpc.auth import AUTH_NONE_CRED
from pynfsrdma._rpc.client import LOOP_IDLE, RpcConnection
from pynfsrdma._rpc.errors import RpcTimeout
from pynfsrdma._transport.base import ConnectionLost
from pynfsrdma._transport.tcp import TcpTransport
from pynfsrdma._xdr import Packer, Unpacker

PROG, VERS = 100003, 4


def xid_of(msg: bytes) -> int:
    return int(struct.unpack(">I", msg[:4])[0])


def reply(xid: int, body: bytes = b"") -> bytes:
    p = Packer()
    rpcdef.pack_accepted_reply_header(p, xid)
    msg = p.getvalue() + body
    return struct.pack(">I", 0x80000000 | len(msg)) + msg


async def accept_callback(xid: int, body: rpcdef.call_body, u: Unpacker) -> Packer:
    """A callback's answer: accepted, with no results."""
    p = Packer()
    rpcdef.pack_accepted_reply_header(p, xid)
    return p


async def serve(nursery: trio.Nursery, handler) -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, handler, listeners)
    return int(port)


async def connect(port: int, nursery: trio.Nursery, on_callback=None) -> RpcConnection:
    conn = RpcConnection(await TcpTransport.connect("127.0.0.1", port, timeout=5), PROG, VERS, on_callback)
    await nursery.start(conn.run)
    return conn


class LoopSteps(trio.abc.Instrument):
    """Counts the steps of the connection's receive loop task (RpcConnection.run)."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("RpcConnection.run"):
            self.steps += 1


async def test_the_caller_reads_its_own_reply_and_the_receive_loop_sleeps() -> None:
    """A call's reply is read by the task that made it: over 300 calls one after another the
    receive loop hardly runs (it wakes only to see whether calls have stopped), where a receive
    loop that reads every reply runs at least once per call."""
    calls = 300

    async def echo(stream: trio.SocketStream) -> None:
        while True:
            msg = await read_record(stream)
            await stream.send_all(reply(xid_of(msg), msg[-4:]))

    async with trio.open_nursery() as nursery:
        conn = await connect(await serve(nursery, echo), nursery)
        await conn.call(0, AUTH_NONE_CRED, timeout=5)
        steps = LoopSteps()
        trio.lowlevel.add_instrument(steps)
        try:
            for i in range(calls):
                u = await conn.call(0, AUTH_NONE_CRED, lambda p, i=i: p.uint32(i), timeout=5)
                assert u.uint32() == i  # (each caller got its own reply)
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert steps.steps < calls // 4, f"the receive loop ran {steps.steps} steps for {calls} calls"
        nursery.cancel_scope.cancel()


async def test_the_receive_loop_rests_without_waking_while_several_calls_are_out() -> None:
    """While several calls are out their callers read, and the receive loop rests without a
    timeout: over twenty LOOP_IDLE periods with eight calls out it runs a few steps, where a loop
    that woke every LOOP_IDLE to look would run one each. When the calls are answered it reads
    again (a callback the server sends afterwards is served)."""
    out, held = 8, 20 * LOOP_IDLE
    served = trio.Event()

    async def hold_then_answer(stream: trio.SocketStream) -> None:
        xids = [xid_of(await read_record(stream)) for _ in range(out)]
        await trio.sleep(held)
        for xid in xids:
            await stream.send_all(reply(xid))
        await trio.sleep(2 * LOOP_IDLE)
        p = Packer()
        rpcdef.pack_call_header(p, 77, 0x40000000, 1, 0, rpcdef.opaque_auth.XDR.encode(rpcdef.NULL_AUTH))
        msg = p.getvalue()
        await stream.send_all(struct.pack(">I", 0x80000000 | len(msg)) + msg)
        await read_record(stream)  # (the callback's reply)
        served.set()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        conn = await connect(await serve(nursery, hold_then_answer), nursery, accept_callback)
        await trio.sleep(2 * LOOP_IDLE)  # (the loop at rest)
        steps = LoopSteps()
        trio.lowlevel.add_instrument(steps)
        try:
            async with trio.open_nursery() as calls:
                for _ in range(out):
                    calls.start_soon(functools.partial(conn.call, 0, AUTH_NONE_CRED, timeout=5))
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert steps.steps <= 4, f"the receive loop ran {steps.steps} steps while {out} calls were out"
        with trio.fail_after(5):
            await served.wait()
        nursery.cancel_scope.cancel()


async def test_a_caller_waits_for_its_reply_before_asking_the_socket_for_it() -> None:
    """Right after a call goes out its reply cannot be in: the caller waits for the socket to have
    data and then receives, with no recv that finds nothing first. Over 300 calls one after
    another no recv comes back empty; every reply reaches its own caller."""
    calls = 300

    async def echo(stream: trio.SocketStream) -> None:
        while True:
            msg = await read_record(stream)
            await stream.send_all(reply(xid_of(msg), msg[-4:]))

    async with trio.open_nursery() as nursery:
        conn = await connect(await serve(nursery, echo), nursery)
        transport = conn.transport
        assert isinstance(transport, TcpTransport)
        before = transport.empty_receives
        for i in range(calls):
            u = await conn.call(0, AUTH_NONE_CRED, lambda p, i=i: p.uint32(i), timeout=5)
            assert u.uint32() == i
        assert transport.empty_receives - before == 0, f"{transport.empty_receives - before} empty recvs"
        nursery.cancel_scope.cancel()


async def test_a_cancelled_reader_hands_the_reading_on() -> None:
    """The first call reads for both; it is cancelled while it waits between records: the second
    call gets its reply (it reads next), nothing of the connection was lost, and it goes on."""
    both = trio.Event()
    a_gone = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        await read_record(stream)  # A's call: never answered
        b = await read_record(stream)
        both.set()
        await a_gone.wait()
        await stream.send_all(reply(xid_of(b), b"bbbb"))
        c = await read_record(stream)
        await stream.send_all(reply(xid_of(c), b"cccc"))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        conn = await connect(await serve(nursery, handler), nursery)
        got: list[bytes] = []

        async def call_a(scope_out: list[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                scope_out.append(scope)
                await conn.call(0, AUTH_NONE_CRED, timeout=30)
            a_gone.set()

        async def call_b() -> None:
            u = await conn.call(0, AUTH_NONE_CRED, timeout=30)
            got.append(bytes(u.opaque_fixed(4)))

        with trio.fail_after(10):
            scopes: list[trio.CancelScope] = []
            async with trio.open_nursery() as calls:
                calls.start_soon(call_a, scopes)
                await trio.sleep(0.05)  # (A sent first: it reads)
                calls.start_soon(call_b)
                await both.wait()
                scopes[0].cancel()
            assert got == [b"bbbb"]
            assert conn.alive
            u = await conn.call(0, AUTH_NONE_CRED, timeout=30)
            assert bytes(u.opaque_fixed(4)) == b"cccc"
        nursery.cancel_scope.cancel()


async def test_a_reader_cancelled_inside_a_record_closes_the_connection() -> None:
    """The reader is cancelled with half of a record read: the rest of the stream cannot be framed,
    so the connection is closed and the other call fails with ConnectionLost (its owner sends it
    again on a new connection), rather than reading the rest of that record as a new one."""
    half = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        a = await read_record(stream)
        await read_record(stream)
        whole = reply(xid_of(a), bytes(4000))
        await stream.send_all(whole[:2000])
        half.set()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        conn = await connect(await serve(nursery, handler), nursery)
        errors: list[BaseException] = []

        async def call_a(scopes: list[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                scopes.append(scope)
                await conn.call(0, AUTH_NONE_CRED, timeout=30)

        async def call_b() -> None:
            try:
                await conn.call(0, AUTH_NONE_CRED, timeout=30)
            except ConnectionLost as e:
                errors.append(e)

        with trio.fail_after(10):
            scopes: list[trio.CancelScope] = []
            async with trio.open_nursery() as calls:
                calls.start_soon(call_a, scopes)
                await trio.sleep(0.05)
                calls.start_soon(call_b)
                await half.wait()
                await trio.sleep(0.05)  # (A has the half record)
                scopes[0].cancel()
        assert len(errors) == 1
        assert not conn.alive
        nursery.cancel_scope.cancel()


async def test_a_readers_timeout_hands_the_reading_on() -> None:
    """The reader's call times out while another call waits: it fails with RpcTimeout at once (not
    when something next arrives), and the other call reads its own reply after it."""
    a_failed = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        await read_record(stream)  # A: never answered
        b = await read_record(stream)
        await a_failed.wait()
        await stream.send_all(reply(xid_of(b), b"bbbb"))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        conn = await connect(await serve(nursery, handler), nursery)
        got: list[bytes] = []

        async def call_a() -> None:
            with pytest.raises(RpcTimeout):
                await conn.call(0, AUTH_NONE_CRED, timeout=0.3)
            a_failed.set()

        async def call_b() -> None:
            u = await conn.call(0, AUTH_NONE_CRED, timeout=30)
            got.append(bytes(u.opaque_fixed(4)))

        with trio.fail_after(10):
            async with trio.open_nursery() as calls:
                calls.start_soon(call_a)
                await trio.sleep(0.05)
                calls.start_soon(call_b)
        assert got == [b"bbbb"]
        assert conn.alive
        nursery.cancel_scope.cancel()


async def test_a_connection_lost_under_its_reader_fails_every_call_and_ends_the_loop() -> None:
    """The server closes the connection while a caller reads: both calls fail with ConnectionLost
    and the receive loop ends (so that its owner reconnects)."""

    async def handler(stream: trio.SocketStream) -> None:
        await read_record(stream)
        await read_record(stream)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        port = await serve(nursery, handler)
        errors: list[BaseException] = []

        async def one() -> None:
            try:
                await conn.call(0, AUTH_NONE_CRED, timeout=30)
            except ConnectionLost as e:
                errors.append(e)

        with trio.fail_after(10):
            async with trio.open_nursery() as loop:
                conn = await connect(port, loop)
                async with trio.open_nursery() as calls:
                    calls.start_soon(one)
                    await trio.sleep(0.05)
                    calls.start_soon(one)
            # (here the receive loop, a task of `loop`, has ended)
        assert len(errors) == 2
        assert not conn.alive and not conn.receiving
        nursery.cancel_scope.cancel()


async def test_a_callback_is_served_while_no_call_waits() -> None:
    """The server calls us on an idle connection (nobody waits for a reply): the receive loop reads
    it and our answer goes back."""
    answered: list[int] = []
    done = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        first = await read_record(stream)
        await stream.send_all(reply(xid_of(first)))
        await trio.sleep(0.3)  # (the client makes no call meanwhile)
        call = Packer()
        rpcdef.pack_call_header(call, 77, 0x40000000, 1, 0, rpcdef.opaque_auth.XDR.encode(rpcdef.NULL_AUTH))
        msg = call.getvalue()
        await stream.send_all(struct.pack(">I", 0x80000000 | len(msg)) + msg)
        cb_reply = await read_record(stream)
        answered.append(xid_of(cb_reply))
        done.set()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        conn = await connect(await serve(nursery, handler), nursery, accept_callback)
        await conn.call(0, AUTH_NONE_CRED, timeout=5)
        with trio.fail_after(10):
            await done.wait()
        assert answered == [77]
        nursery.cancel_scope.cancel()


async def test_a_reader_stalled_inside_a_record_still_times_out() -> None:
    """The server stops in the middle of the reply the reader receives: the call fails with
    RpcTimeout when its time is up (the reader is stopped by closing the connection, the one way
    out of a half-received record), not whenever the server goes on."""

    async def handler(stream: trio.SocketStream) -> None:
        a = await read_record(stream)
        await stream.send_all(reply(xid_of(a), bytes(4000))[:2000])
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        conn = await connect(await serve(nursery, handler), nursery)
        with trio.fail_after(10), pytest.raises(RpcTimeout):
            await conn.call(0, AUTH_NONE_CRED, timeout=0.3)
        assert not conn.alive
        nursery.cancel_scope.cancel()
