"""RPC records over TCP (RFC 5531 record marking) for the RPC-over-RDMA responder's side to the server.

The responder relays whole messages and needs none of the client transport's machinery (XIDs,
deadlines, splicing, staging of small records): a record goes out in one ``sendmsg`` of its mark
and its pieces as they lie (WRITE data straight from the RDMA Read sink), and comes in with
``recv_into`` straight into a buffer of its own, where the RDMA Writes of a READ reply take the
data from. Such buffers come from a free list by size class (a power of two): the caller gives a
buffer back (:meth:`RecordStream.give_back`) when nothing reaches it any more, so a steady stream
of 1 MiB replies reuses as many buffers as are in flight, with no allocation or zeroing per record.

The socket is non-blocking and used directly: trio waits only when it cannot take or give bytes.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

from .._proto.rpc import RM_LAST_FRAGMENT, RM_LENGTH_MASK
from .._transport.base import ConnectionLost, ConnectRefused, ProtocolViolation
from .._transport.gathered_send import send_now, send_rest

Buffer = bytes | bytearray | memoryview
RecordBuffer = bytearray | memoryview  # where a record is received (a bytearray, or shared memory)

_MARK: Final = struct.Struct(">I")
MIN_BUFFER: Final = 4096  # the smallest record buffer kept
MAX_RECORD: Final = 16 << 20  # a record larger than this ends the connection
_NONE: Final[RecordBuffer] = bytearray(0)  # before a record's first fragment


class RecordStream:
    """One TCP connection carrying RPC records (use :meth:`connect`)."""

    def __init__(
        self, sock: socket.socket, peer: str, allocate: Callable[[int], RecordBuffer] = bytearray
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self.peer = peer
        self._allocate = allocate  # a new record buffer of n bytes
        self._send_lock = trio.Lock()
        self._mark = bytearray(4)
        self._free: dict[int, list[RecordBuffer]] = {}
        self.buffers_made = 0  # record buffers allocated (not taken from the free list)
        # run when a receive finds the socket empty, before it waits for bytes
        self.before_wait: Callable[[], Awaitable[None]] | None = None

    @classmethod
    async def connect(
        cls, host: str, port: int, allocate: Callable[[int], RecordBuffer] = bytearray
    ) -> RecordStream:
        tsock = trio.socket.socket()
        try:
            tsock.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
            await tsock.connect((host, port))
        except OSError as e:
            tsock.close()
            cls_ = ConnectRefused if isinstance(e, ConnectionRefusedError) else ConnectionLost
            raise cls_(str(e), f"{host}:{port}") from e
        sock = socket.socket(tsock.family, tsock.type, tsock.proto, fileno=tsock.detach())
        return cls(sock, f"{host}:{port}", allocate)

    # -- sending --------------------------------------------------------------------------------
    async def send(self, pieces: Sequence[Buffer]) -> None:
        """One record of ``pieces`` (gathered, never joined). Records never interleave; once part
        of one went out, the rest goes even if the caller is cancelled."""
        views = [memoryview(p).cast("B") for p in pieces]
        total = sum(v.nbytes for v in views)
        views = [memoryview(_MARK.pack(RM_LAST_FRAGMENT | total)), *(v for v in views if v.nbytes)]
        if not self._send_lock.locked():
            views = send_now(self._sock, views)
            if not views:
                return
            async with self._send_lock:
                await send_rest(self._sock, views, started=sum(v.nbytes for v in views) < total + 4)
            return
        async with self._send_lock:
            await send_rest(self._sock, views)

    # -- receiving ------------------------------------------------------------------------------
    async def receive(self) -> tuple[memoryview, RecordBuffer]:
        """The next record and the buffer it lies in (give it back when done with the record)."""
        size, buf = 0, _NONE
        while True:
            await self._recv_into(memoryview(self._mark))
            (mark,) = _MARK.unpack(self._mark)
            n = mark & RM_LENGTH_MASK
            if size + n > MAX_RECORD:
                raise ProtocolViolation(f"a record of more than {MAX_RECORD} bytes", self.peer)
            if not size:
                buf = self.take(n)
            elif size + n > len(buf):  # a further fragment (rare): a larger buffer, once
                bigger = self.take(size + n)
                bigger[:size] = buf[:size]
                self.give_back(buf)
                buf = bigger
            await self._recv_into(memoryview(buf)[size : size + n])
            size += n
            if mark & RM_LAST_FRAGMENT:
                return memoryview(buf)[:size], buf

    async def _recv_into(self, view: memoryview) -> None:
        got, n = 0, view.nbytes
        while got < n:
            try:
                k = self._sock.recv_into(view[got:] if got else view, n - got)
            except BlockingIOError:
                if self.before_wait is not None:
                    await self.before_wait()
                await trio.lowlevel.wait_readable(self._sock)
                continue
            if k == 0:
                raise ConnectionLost("the server closed the connection", self.peer)
            got += k

    def take(self, n: int) -> RecordBuffer:
        size = max(MIN_BUFFER, 1 << (n - 1).bit_length()) if n else MIN_BUFFER
        free = self._free.get(size)
        if free:
            return free.pop()
        self.buffers_made += 1
        return self._allocate(size)

    def give_back(self, buf: RecordBuffer) -> None:
        self._free.setdefault(len(buf), []).append(buf)

    async def aclose(self) -> None:
        trio.lowlevel.notify_closing(self._sock)
        self._sock.close()
        await trio.lowlevel.checkpoint()


__all__ = ["RecordStream"]
