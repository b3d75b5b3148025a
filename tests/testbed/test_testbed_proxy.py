"""The path proxy against a real echo server on loopback, and in front of a real NFS-Ganesha."""

from __future__ import annotations

import os
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from pynfsrdma._proto.nfs4.const import NFS4_PROGRAM, NFS_V4, NFSPROC4_NULL
from pynfsrdma._proto.rpc import (
    AUTH_NONE,
    MAX_AUTH_BYTES,
    REPLY,
    RM_LAST_FRAGMENT,
    RM_LENGTH_MASK,
    SUCCESS,
    pack_call_header,
    unpack_reply_header,
)
from pynfsrdma._testbed import Mode, ProxiedPaths, Proxy
from pynfsrdma._testbed.proxy import CHUNK
from pynfsrdma._xdr import Packer, Unpacker

PROXY_HOST = "127.0.0.9"  # away from the multipath addresses other tests use


class EchoServer:
    """Echoes every byte back; records how each connection ended."""

    def __init__(self) -> None:
        self.port = 0
        self.endings: list[str] = []

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                while data := await stream.receive_some(CHUNK):
                    await stream.send_all(data)
                await stream.send_eof()
                self.endings.append("eof")
        except trio.BrokenResourceError:
            self.endings.append("reset")

    async def start(self, nursery: trio.Nursery) -> EchoServer:
        listeners = await nursery.start(trio.serve_tcp, self.handle, 0)
        self.port = listeners[0].socket.getsockname()[1]
        return self


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.005)


async def receive_exactly(stream: trio.SocketStream, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = await stream.receive_some(n - len(data))
        assert chunk, "unexpected EOF"
        data += chunk
    return bytes(data)


async def send_and_receive(host: str, port: int) -> bytes:
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(b"x")
        return await stream.receive_some(10)


async def echo_and_proxy(nursery: trio.Nursery) -> tuple[EchoServer, Proxy]:
    echo = await EchoServer().start(nursery)
    proxy = Proxy(PROXY_HOST, 0, "127.0.0.1", echo.port)
    await nursery.start(proxy.run)
    return echo, proxy


async def test_forwards_bytes_faithfully_both_ways_and_counts_them() -> None:
    payload = os.urandom(3 * 1024 * 1024 + 17)
    async with trio.open_nursery() as nursery:
        echo, proxy = await echo_and_proxy(nursery)
        stream = await trio.open_tcp_stream(PROXY_HOST, proxy.port)
        received = bytearray()

        async def send() -> None:
            for i in range(0, len(payload), 100_000):
                await stream.send_all(payload[i : i + 100_000])
            await stream.send_eof()

        async def receive() -> None:
            while data := await stream.receive_some(CHUNK):
                received.extend(data)

        with trio.fail_after(20):
            async with trio.open_nursery() as inner:
                inner.start_soon(send)
                inner.start_soon(receive)
        await stream.aclose()
        assert received == payload  # the half-close travelled both ways too: receive() saw EOF
        await wait_until(lambda: proxy.stats.connections_active == 0)
        stats = proxy.stats
        assert (stats.bytes_to_server, stats.bytes_to_client) == (len(payload), len(payload))
        assert (stats.connections_accepted, stats.connections_closed, stats.connections_reset) == (1, 1, 0)
        assert echo.endings == ["eof"]
        nursery.cancel_scope.cancel()


async def test_cut_resets_current_connections_and_new_ones_until_restore() -> None:
    async with trio.open_nursery() as nursery:
        echo, proxy = await echo_and_proxy(nursery)
        first = await trio.open_tcp_stream(PROXY_HOST, proxy.port)
        await first.send_all(b"ping")
        assert await receive_exactly(first, 4) == b"ping"

        proxy.cut()
        assert proxy.fault.mode is Mode.CUT
        with pytest.raises(trio.BrokenResourceError) as reset:
            await first.receive_some(10)
        assert isinstance(reset.value.__cause__, ConnectionResetError)
        await wait_until(lambda: echo.endings == ["reset"])  # the server's side was reset too

        # A new connection is accepted and reset at once: the client sees the reset while connecting
        # or on its first read, depending on which comes first.
        with pytest.raises((trio.BrokenResourceError, ConnectionResetError, OSError)):
            await send_and_receive(PROXY_HOST, proxy.port)
        assert proxy.stats.connections_reset == 2

        proxy.restore()
        third = await trio.open_tcp_stream(PROXY_HOST, proxy.port)
        await third.send_all(b"again")
        assert await receive_exactly(third, 5) == b"again"
        for s in (first, third):
            await s.aclose()
        nursery.cancel_scope.cancel()


async def test_stall_forwards_nothing_until_restore() -> None:
    async with trio.open_nursery() as nursery:
        _echo, proxy = await echo_and_proxy(nursery)
        old = await trio.open_tcp_stream(PROXY_HOST, proxy.port)
        await old.send_all(b"warm")
        assert await receive_exactly(old, 4) == b"warm"
        before = proxy.stats.bytes_to_server

        proxy.stall()
        await old.send_all(b"held-1")
        new = await trio.open_tcp_stream(PROXY_HOST, proxy.port)  # the kernel still accepts
        await new.send_all(b"held-2")
        with trio.move_on_after(0.3) as window:
            await old.receive_some(10)
        assert window.cancelled_caught, "bytes came through a stalled path"
        with trio.move_on_after(0.05) as window:
            await new.receive_some(10)
        assert window.cancelled_caught
        assert proxy.stats.bytes_to_server == before

        proxy.restore()
        with trio.fail_after(5):
            assert await receive_exactly(old, 6) == b"held-1"
            assert await receive_exactly(new, 6) == b"held-2"
        await old.aclose()
        await new.aclose()
        nursery.cancel_scope.cancel()


async def test_delay_holds_each_chunk_and_keeps_order() -> None:
    async with trio.open_nursery() as nursery:
        _echo, proxy = await echo_and_proxy(nursery)
        stream = await trio.open_tcp_stream(PROXY_HOST, proxy.port)
        proxy.delay(300)
        for part in (b"one,", b"two,", b"three"):
            await stream.send_all(part)
            await trio.sleep(0.01)
        with trio.move_on_after(0.1) as window:
            await stream.receive_some(100)
        assert window.cancelled_caught, "a delayed chunk arrived at once"
        with trio.fail_after(10):
            assert await receive_exactly(stream, 13) == b"one,two,three"
        assert proxy.stats.chunks_to_server >= 1 and proxy.fault.delay_ms == 300
        proxy.restore()
        await stream.send_all(b"fast")
        assert await receive_exactly(stream, 4) == b"fast"
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_throttle_limits_throughput_and_keeps_data_intact() -> None:
    kbps = 200
    payload = os.urandom(1_000_000)
    async with trio.open_nursery() as nursery:
        _echo, proxy = await echo_and_proxy(nursery)
        stream = await trio.open_tcp_stream(PROXY_HOST, proxy.port)
        proxy.throttle(kbps)
        start = trio.current_time()
        await stream.send_all(payload)
        await trio.sleep(0.4)
        sent, elapsed = proxy.stats.bytes_to_server, trio.current_time() - start
        burst = max(kbps * 1000 / 20, 1500)
        # Waiting as the bucket says, no more than burst + rate * elapsed can have gone through.
        assert 0 < sent <= burst + kbps * 1000 * elapsed + burst
        proxy.restore()
        with trio.fail_after(10):
            assert await receive_exactly(stream, len(payload)) == payload
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_target_that_refuses_resets_the_client() -> None:
    with trio.socket.socket() as probe:  # a port nobody listens on
        await probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    async with trio.open_nursery() as nursery:
        proxy = Proxy(PROXY_HOST, 0, "127.0.0.1", dead_port)
        await nursery.start(proxy.run)
        with pytest.raises((trio.BrokenResourceError, ConnectionResetError, OSError)):
            await send_and_receive(PROXY_HOST, proxy.port)
        assert proxy.stats.connections_failed == 1
        nursery.cancel_scope.cancel()


# -- in front of NFS-Ganesha ----------------------------------------------------------------------------


async def rpc_null(host: str, port: int, xid: int) -> Any:
    """One ONC RPC NULL call to the NFSv4 program; returns the decoded reply header."""
    cred = Packer()
    cred.uint32(AUTH_NONE)
    cred.opaque(b"", MAX_AUTH_BYTES)
    p = Packer()
    pack_call_header(p, xid, NFS4_PROGRAM, NFS_V4, NFSPROC4_NULL, cred.getvalue())
    body = p.getvalue()
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(struct.pack(">I", RM_LAST_FRAGMENT | len(body)) + body)
        (mark,) = struct.unpack(">I", await receive_exactly(stream, 4))
        u = Unpacker(await receive_exactly(stream, mark & RM_LENGTH_MASK))
        assert (u.uint32(), u.uint32()) == (xid, REPLY)
        return unpack_reply_header(u)


@pytest.mark.ganesha
async def test_paths_reach_ganesha_and_a_cut_path_leaves_the_others(
    proxied_paths: Callable[..., Awaitable[ProxiedPaths]],
) -> None:
    paths = await proxied_paths(3)
    assert paths.addresses == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert all(url.endswith(f":{paths.port}/export") for url in paths.urls)
    with trio.fail_after(10):
        for i, address in enumerate(paths.addresses):
            assert (await rpc_null(address, paths.port, 100 + i)).accept == SUCCESS
        assert all(p.stats.connections_accepted == 1 for p in paths)

        paths.proxy("127.0.0.3").cut()
        with pytest.raises((trio.BrokenResourceError, OSError)):
            await rpc_null("127.0.0.3", paths.port, 200)
        assert (await rpc_null("127.0.0.2", paths.port, 201)).accept == SUCCESS
        paths.restore_all()
        assert (await rpc_null("127.0.0.3", paths.port, 202)).accept == SUCCESS
