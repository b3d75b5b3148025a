"""A TCP proxy between an RPC client and server that handles whole records: what the testbed's
record-level proxies (the trunking advertiser, the mutating proxy) share.

A subclass says what becomes of each record: :meth:`RecordProxy.to_server` for a call,
:meth:`RecordProxy.to_client` for a reply, each returning the bytes to send on, record marks
included (:func:`frame` makes one record of bytes). A connection either side closes is closed on
the other; a record a hook cannot read ends its connection.
"""

from __future__ import annotations

import signal
import struct
from collections.abc import AsyncIterator
from typing import Any

import trio

from .._proto.rpc import RM_LAST_FRAGMENT, RM_LENGTH_MASK
from .._xdr import XdrError
from .listener import RelayEnds, accept_until_cancelled

__all__ = ["RecordProxy", "frame", "records", "serve_until_signalled"]

_MARK = struct.Struct(">I")
READ_CHUNK = 256 * 1024


def frame(record: bytes) -> bytes:
    """``record`` as one last fragment."""
    return _MARK.pack(RM_LAST_FRAGMENT | len(record)) + record


async def records(stream: trio.SocketStream) -> AsyncIterator[bytes]:
    """Whole RPC records (fragments joined) from a record-marked stream, until it ends."""
    buf = bytearray()
    fragments: list[bytes] = []
    while True:
        while len(buf) >= _MARK.size:
            (mark,) = _MARK.unpack_from(buf)
            n = mark & RM_LENGTH_MASK
            if len(buf) < _MARK.size + n:
                break
            fragments.append(bytes(buf[_MARK.size : _MARK.size + n]))
            del buf[: _MARK.size + n]
            if mark & RM_LAST_FRAGMENT:
                yield b"".join(fragments)
                fragments = []
        data = await stream.receive_some(READ_CHUNK)
        if not data:
            return
        buf += data


class RecordProxy(RelayEnds):
    """Forwards ``listen_host:listen_port`` (0: any free port, known once :meth:`run` started) to
    ``target_host:target_port``, record by record."""

    def __init__(self, listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
        super().__init__(listen_host, listen_port, target_host, target_port)
        self.connections = 0
        self._scope: trio.CancelScope | None = None

    # -- what a subclass decides ------------------------------------------------------------------------
    def connection_state(self) -> Any:
        """What one connection keeps between its records (handed to the hooks)."""
        return None

    def to_server(self, state: Any, record: bytes) -> bytes:
        """The bytes to send the server for a call ``record`` (framed)."""
        return frame(record)

    def to_client(self, state: Any, record: bytes) -> bytes:
        """The bytes to send the client for a reply ``record`` (framed)."""
        return frame(record)

    # -- running ------------------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        listener = await self.listen()
        self._scope = trio.CancelScope()
        await accept_until_cancelled(listener, self._scope, self._accepted, task_status, self)

    def _accepted(self, client: trio.SocketStream, nursery: trio.Nursery) -> None:
        self.connections += 1
        nursery.start_soon(self._serve, client)

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def _serve(self, client: trio.SocketStream) -> None:
        try:
            server = await trio.open_tcp_stream(self.target_host, self.target_port)
        except OSError:
            await client.aclose()
            return
        state = self.connection_state()
        try:
            async with trio.open_nursery() as nursery:

                async def pump(src: trio.SocketStream, dst: trio.SocketStream, to_server: bool) -> None:
                    hook = self.to_server if to_server else self.to_client
                    try:
                        async for record in records(src):
                            await dst.send_all(hook(state, record))
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, XdrError):
                        pass
                    nursery.cancel_scope.cancel()

                nursery.start_soon(pump, client, server, True)
                nursery.start_soon(pump, server, client, False)
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()
                await server.aclose()


async def serve_until_signalled(proxy: RecordProxy, ready: str) -> None:
    """Run ``proxy`` as a process of its own: print ``ready`` (``{port}`` filled in) once it
    listens, and stop at SIGTERM or SIGINT."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            print(ready.format(port=proxy.port), flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break
