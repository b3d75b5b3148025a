"""A TCP proxy for one path to a server, with faults you can switch at run time.

Used in-process from trio code::

    proxy = Proxy("127.0.0.2", 20490, "127.0.0.1", 20490)
    await nursery.start(proxy.run)
    proxy.cut()          # reset every connection (both ends see a reset), reset new ones at once
    proxy.stall()        # black hole: read nothing, forward nothing, both directions
    proxy.delay(50)      # every chunk arrives 50 ms after it was read (latency, not a rate limit)
    proxy.throttle(100)  # at most 100 KB/s (1 KB = 1000 bytes) in each direction, over all connections
    proxy.restore()      # back to forwarding as is; stalled bytes then flow on
    proxy.stop()

or as a process of its own, driven over a unix socket with JSON lines (see :mod:`.control`)::

    python -m pynfsrdma._testbed.proxy --listen 127.0.0.2:20490 --target 127.0.0.1:20490 --control p.sock
"""

from __future__ import annotations

import argparse
import signal
import socket
import struct
import sys
from dataclasses import asdict, dataclass
from typing import Any

import trio

from .faults import Fault, Mode, TokenBucket, apply_command
from .listener import accept_until_cancelled, host_port, listen
from .proxy_control import serve_control

__all__ = ["Proxy", "ProxyStats", "main", "reset_socket"]

CHUNK = 256 * 1024
QUEUE_CHUNKS = 32
_LINGER_ZERO = struct.pack("ii", 1, 0)


def reset_socket(sock: trio.socket.SocketType) -> None:
    """Close ``sock`` with SO_LINGER 0, so the peer sees a reset (RST) instead of an orderly close."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
    except OSError:
        pass
    sock.close()


@dataclass
class ProxyStats:
    """Counters of one proxy. ``to_server`` is client -> server, ``to_client`` the replies."""

    bytes_to_server: int = 0
    bytes_to_client: int = 0
    chunks_to_server: int = 0
    chunks_to_client: int = 0
    connections_accepted: int = 0
    connections_active: int = 0
    connections_reset: int = 0  # reset by a cut (or refused while cut)
    connections_failed: int = 0  # the target refused or a side broke
    connections_closed: int = 0  # ended by an orderly close of both directions

    def to_json(self) -> dict[str, int]:
        return asdict(self)


_EOF = object()


class _Connection:
    """One client connection and its upstream connection."""

    def __init__(self, client: trio.SocketStream) -> None:
        self.client = client
        self.server: trio.SocketStream | None = None
        self.scope = trio.CancelScope()
        self.was_reset = False

    def reset(self) -> None:
        if self.was_reset:
            return
        self.was_reset = True
        self.scope.cancel()
        reset_socket(self.client.socket)
        if self.server is not None:
            reset_socket(self.server.socket)


class Proxy:
    """Forwards TCP connections from ``listen_host:listen_port`` to ``target_host:target_port``.

    ``listen_port`` 0 picks a free port; :attr:`port` tells which once :meth:`run` has started.
    All fault methods are plain (non-async) calls and take effect at once.
    """

    def __init__(
        self,
        listen_host: str,
        listen_port: int,
        target_host: str,
        target_port: int,
        *,
        name: str | None = None,
    ) -> None:
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.target_host = target_host
        self.target_port = target_port
        self.name = name or f"{listen_host}:{listen_port}"
        self.stats = ProxyStats()
        self._fault = Fault()
        self._changed = trio.Event()
        self._connections: set[_Connection] = set()
        self._buckets: dict[str, TokenBucket] = {}
        self._scope: trio.CancelScope | None = None
        self._listener: trio.SocketListener | None = None

    # -- where it is --------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return self.listen_host

    @property
    def port(self) -> int:
        return self.listen_port

    @property
    def fault(self) -> Fault:
        return self._fault

    def describe(self) -> dict[str, Any]:
        return {
            "address": self.listen_host,
            "port": self.listen_port,
            "target": f"{self.target_host}:{self.target_port}",
            "fault": self._fault.to_json(),
            "fault_text": self._fault.describe(),
            "stats": self.stats.to_json(),
        }

    # -- faults -------------------------------------------------------------------------------------
    def cut(self) -> None:
        """Reset every current connection and every new one until :meth:`restore`."""
        self.apply("cut")

    def stall(self) -> None:
        """Stop reading and forwarding in both directions, for current and new connections."""
        self.apply("stall")

    def delay(self, ms: float) -> None:
        """Deliver every chunk ``ms`` milliseconds after it was read (0 removes the delay)."""
        self.apply("delay", ms)

    def throttle(self, kbps: float) -> None:
        """Limit each direction to ``kbps`` kilobytes (1000 bytes) per second (0 removes the limit)."""
        self.apply("throttle", kbps)

    def restore(self) -> None:
        """Clear every fault: forward as is (bytes held by a stall flow on)."""
        self.apply("restore")

    def apply(self, command: str, value: float | None = None) -> Fault:
        """Apply a fault command by name (``cut``, ``stall``, ``delay``, ``throttle``, ``restore``)."""
        self.set_fault(apply_command(self._fault, command, value))
        return self._fault

    def set_fault(self, fault: Fault) -> None:
        old, self._fault = self._fault, fault
        if fault.throttle_kbps != old.throttle_kbps:
            self._buckets = {}
            if fault.throttle_kbps is not None:
                rate = fault.throttle_kbps * 1000
                self._buckets = {"to_server": TokenBucket(rate), "to_client": TokenBucket(rate)}
        if fault.mode is Mode.CUT:
            for conn in list(self._connections):
                if not conn.was_reset:
                    self.stats.connections_reset += 1
                    conn.reset()
        self._changed.set()
        self._changed = trio.Event()

    async def _gate(self) -> None:
        """Wait while the path is stalled."""
        while self._fault.mode is Mode.STALL:
            await self._changed.wait()

    # -- running ------------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[Proxy] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and forward until cancelled or :meth:`stop` is called."""
        listener = await listen(self.listen_host, self.listen_port)
        self._listener = listener
        self.listen_port = listener.socket.getsockname()[1]
        self._scope = trio.CancelScope()
        await accept_until_cancelled(listener, self._scope, self._accepted, task_status, self)

    def _accepted(self, client: trio.SocketStream, nursery: trio.Nursery) -> None:
        self.stats.connections_accepted += 1
        if self._fault.mode is Mode.CUT:
            self.stats.connections_reset += 1
            reset_socket(client.socket)
            return
        nursery.start_soon(self._serve_connection, client)

    def stop(self) -> None:
        """Stop listening and drop every connection."""
        if self._scope is not None:
            self._scope.cancel()

    async def _serve_connection(self, client: trio.SocketStream) -> None:
        conn = _Connection(client)
        self._connections.add(conn)
        self.stats.connections_active += 1
        try:
            with conn.scope:
                await self._gate()
                try:
                    conn.server = await trio.open_tcp_stream(self.target_host, self.target_port)
                except OSError:
                    self.stats.connections_failed += 1
                    conn.reset()
                    return
                if conn.was_reset:  # cut while connecting
                    reset_socket(conn.server.socket)
                    return
                async with trio.open_nursery() as nursery:
                    for direction, src, dst in (
                        ("to_server", client, conn.server),
                        ("to_client", conn.server, client),
                    ):
                        send, recv = trio.open_memory_channel[Any](QUEUE_CHUNKS)
                        nursery.start_soon(self._read_side, conn, direction, src, send)
                        nursery.start_soon(self._write_side, conn, direction, dst, recv)
            if not conn.was_reset:
                self.stats.connections_closed += 1
        finally:
            self._connections.discard(conn)
            self.stats.connections_active -= 1
            if not conn.was_reset:
                with trio.CancelScope(shield=True):
                    await client.aclose()
                    if conn.server is not None:
                        await conn.server.aclose()

    def _broken(self, conn: _Connection) -> None:
        """One side failed (reset, closed): pass the reset on to the other side."""
        if not conn.was_reset:
            self.stats.connections_failed += 1
            conn.reset()

    async def _read_side(
        self,
        conn: _Connection,
        direction: str,
        src: trio.SocketStream,
        queue: trio.MemorySendChannel[Any],
    ) -> None:
        async with queue:
            try:
                while True:
                    await self._gate()
                    data = await src.receive_some(CHUNK)
                    if not data:
                        await queue.send(_EOF)
                        return
                    due = trio.current_time() + self._fault.delay_ms / 1000
                    await queue.send((due, data))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self._broken(conn)

    async def _write_side(
        self,
        conn: _Connection,
        direction: str,
        dst: trio.SocketStream,
        queue: trio.MemoryReceiveChannel[Any],
    ) -> None:
        async with queue:
            try:
                async for item in queue:
                    if item is _EOF:
                        await self._gate()
                        await dst.send_eof()
                        return
                    due, data = item
                    await trio.sleep_until(due)
                    view = memoryview(data)
                    while view:
                        await self._gate()
                        bucket = self._buckets.get(direction)
                        piece = view[: bucket.chunk] if bucket is not None else view
                        if bucket is not None:
                            wait = bucket.reserve(len(piece), trio.current_time())
                            if wait > 0:
                                await trio.sleep(wait)
                                await self._gate()
                        await dst.send_all(piece)
                        self._count(direction, len(piece))
                        view = view[len(piece) :]
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self._broken(conn)

    def _count(self, direction: str, n: int) -> None:
        if direction == "to_server":
            self.stats.bytes_to_server += n
            self.stats.chunks_to_server += 1
        else:
            self.stats.bytes_to_client += n
            self.stats.chunks_to_client += 1


# -- a proxy as a process of its own -------------------------------------------------------------------


async def _run_process(listen: tuple[str, int], target: tuple[str, int], control: str | None) -> None:
    proxy = Proxy(listen[0], listen[1], target[0], target[1])
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            if control is not None:
                await nursery.start(serve_control, control, proxy)
            print(f"proxy {proxy.listen_host}:{proxy.port} -> {target[0]}:{target[1]} ready", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pynfsrdma._testbed.proxy",
        description="A TCP proxy for one path with fault controls (cut, stall, delay, throttle, restore).",
    )
    parser.add_argument("--listen", type=host_port, required=True, metavar="HOST:PORT")
    parser.add_argument("--target", type=host_port, required=True, metavar="HOST:PORT")
    parser.add_argument("--control", metavar="SOCKET", help="unix socket for JSON-line fault commands")
    args = parser.parse_args(argv)
    failed = False
    try:
        trio.run(_run_process, args.listen, args.target, args.control)
    except* OSError as group:
        for exc in group.exceptions:
            print(f"proxy: {exc}", file=sys.stderr)
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
