"""A software verbs provider: an emulated reliable-connected queue pair over a stream socket.

For machines without RDMA (this project's CI). It behaves like the hardware where RPC-over-RDMA
can tell the difference:

* the connection manager exchange carries private data both ways (connect request at most 56
  bytes, accept at most 196, as with InfiniBand's CM through librdmacm);
* registered regions have a random 32-bit handle (rkey) and an address; the *target* checks
  each RDMA Read/Write: unknown or invalidated handle, bytes outside the region, or missing
  access right fail the operation on the initiator and break the connection on both sides;
* a Send that finds no posted Receive (RNR) or a Receive buffer too small breaks the connection;
* Send With Invalidate invalidates the target's region and reports its handle in the Receive
  completion (as with fast-registered memory: only a region registered for remote access can be
  named; an unknown handle or a receive buffer breaks the connection; a region already invalid
  stays invalid and is counted in ``double_invalidations``);
* memory windows (:meth:`SoftConnection.bind`): a handle of its own over part of a region
  registered with BIND, no registration; the target checks a window's bounds and rights as a
  region's, and once invalidated (locally or by Send With Invalidate) or released it is gone. As
  type 2 windows, a released window goes back to a pool and is bound again with the next key: its
  handle is the window's index (24 bits) and a key (8 bits) that changes with every bind, so an
  earlier handle of the same window is refused (``counters.windows_allocated`` counts the windows
  the pool had to make);
* it counts what tests need to see leaks and double work: :attr:`SoftConnection.registrations`
  (alive now), ``local_invalidations``, ``remote_invalidations``, ``double_invalidations``, and
  what the connection cost in ``counters`` (a :class:`~.provider.ProviderCounters`: registrations
  made and released, bytes copied, Sends). :meth:`SoftConnection.send` costs what it costs a
  device: its pieces are gathered (copied) into memory registered for that Send, while
  :meth:`SoftConnection.send_region` sends from a registered buffer as it lies;
* operations are ordered as on one RC queue pair: RDMA Writes land before a later Send is seen.
  :meth:`SoftConnection.send_region_after_writes` goes out as one chain in one system call: its
  Writes are unsignaled (the target acknowledges none of them) and the Send's acknowledgement
  completes them all; :meth:`SoftConnection.post_send_region_after_writes` posts the same chain
  without waiting for it and reports its completion through a callback (as a server polls its
  send completions instead of waiting on each); while :attr:`SoftConnection.hold_posts` is set, posted
  chains and RDMA Reads wait in the send queue (at most :data:`_HELD_MAX`) until the holder rings
  (:meth:`SoftConnection.ring`) or another frame goes out, and then go with it: one system call and
  one wake-up of the peer for all of them, as one doorbell rings for a list of work requests;
* on one host, RDMA Read and Write data do not cross the socket: as a NIC's DMA, the target copies
  it once, straight between the initiator's memory and its own region (:mod:`.cross_memory`), after
  the same checks of handle, bounds, rights and invalidation, in the same order of operations. The
  initiator sends only where its bytes lie, and keeps them where they are until the target's
  acknowledgement (memory a peer may still be copying is never given back, even when the operation
  is cancelled or the connection fails). Each side proves at connect time that it can reach the
  other's memory (a token read at its address in the peer's process); otherwise, or with
  ``SoftProvider(one_host=False)``, the data goes over the socket. A listener's side may keep the
  memory its peers reach in a shared arena (:meth:`SoftProvider.shared_buffer`, announced to each
  peer with an ARENA frame after CONNECT_REP): a peer that maps it copies what lies there with a
  plain memory copy instead of ``process_vm_*`` (``counters.bytes_mapped``). An RDMA Write
  whose bytes lie in that arena, into a region whose owner allows it (:meth:`SoftConnection.allow_lending`:
  the transport's READ sinks), is not even copied: its bytes are *lent* where they lie
  (``counters.bytes_lent``, read-only views), and the Send behind it completes on the peer only
  once no view of them is left, so that the peer uses that memory again only then (a NIC's DMA
  costs the target's CPU nothing; the copy would have charged it for the NIC's work). The
  target's checks of handle, bounds, rights and invalidation are made first, as for a copy.

Wire format between the two emulated HCAs (never seen by anything else): a 24-byte frame header
``op, flags, reserved, id, handle, address, length`` followed by ``length`` bytes for the
operations that carry data. Placed directly, an RDMA Write carries the (address, length) of each
of the initiator's pieces instead of the data, and an RDMA Read the address and length of its sink.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
import secrets
import socket
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

from ..base import ConnectionLost, ConnectRefused, ProtocolViolation, TransportError
from ..gathered_send import IOV_MAX, advance, send_now, send_rest
from . import cross_memory
from .provider import (
    Access,
    Buffer,
    Connection,
    LengthError,
    Listener,
    MemoryRegion,
    PinnedBuffer,
    PrivateDataReply,
    Provider,
    ProviderCounters,
    ProviderError,
    RdmaWrite,
    Received,
    ReceiverNotReady,
    RemoteAccessError,
    registrable,
)

CM_REQ_PRIVATE_DATA_MAX: Final = 56
CM_REP_PRIVATE_DATA_MAX: Final = 196

_FRAME: Final = struct.Struct(">BBHIIQI")
_SPAN: Final = struct.Struct(">QQ")  # address, length: where an initiator's bytes lie
_SPANS_MAX: Final = 1 << 16  # the most spans one RDMA Write may name
_FRAMES_PER_TURN: Final = 16  # frames taken in a row before the receive loop lets other tasks run
_RECEIVED_SIZE: Final = 1 << 16  # the receive buffer: a read from the socket takes the frames it has
_HELD_MAX: Final = 16  # posts held back (SoftConnection.hold_posts) before they go out anyway


class _Op(enum.IntEnum):
    CONNECT_REQ = 1
    CONNECT_REP = 2
    SEND = 3
    SEND_ACK = 4
    READ_REQ = 5
    READ_RESP = 6
    WRITE = 7
    WRITE_ACK = 8
    FATAL = 9
    REACH = 10  # the connector can reach the acceptor's memory (sent once, after CONNECT_REP)
    ARENA = 11  # the acceptor's shared arena: ``id`` its memfd, ``handle`` its pages, at ``address``


class _Fatal(enum.IntEnum):
    REMOTE_ACCESS = 1
    RNR = 2
    LENGTH = 3
    PROTOCOL = 4


_FATAL_CLASS: Final = {
    _Fatal.REMOTE_ACCESS: RemoteAccessError,
    _Fatal.RNR: ReceiverNotReady,
    _Fatal.LENGTH: LengthError,
    _Fatal.PROTOCOL: ProtocolViolation,
}
_F_INVALIDATE: Final = 1  # SEND: Send With Invalidate of ``handle``
_F_DIRECT: Final = 2  # WRITE, READ_REQ, READ_RESP: placed directly, the frame carries spans
_F_UNSIGNALED: Final = 4  # WRITE: no acknowledgement (a Send behind it in its chain completes it);
#                           SEND: none at all (send_region_unsignaled)
_F_ONE_HOST: Final = 1  # CONNECT_*: ``handle`` is the sender's PID, ``id`` a token at ``address``
_F_REACHES: Final = 2  # CONNECT_REP: the acceptor reached the connector's token


# the access rights checked on every operation, as plain ints: an enum.IntFlag operator is a
# Python call (and an enum member made for its result) each time
_LOCAL_WRITE: Final = int(Access.LOCAL_WRITE)
_REMOTE_WRITE: Final = int(Access.REMOTE_WRITE)
_REMOTE: Final = int(Access.REMOTE_READ | Access.REMOTE_WRITE)
_BIND: Final = int(Access.BIND)

Completion = Callable[[BaseException | None], None]


class _Pending:
    __slots__ = ("abandoned", "done", "error", "on_done", "pins", "sink")

    def __init__(
        self,
        sink: memoryview | None = None,
        pins: list[PinnedBuffer] | None = None,
        on_done: Completion | None = None,
    ) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None
        self.sink = sink
        self.pins = pins or []  # our memory the peer copies from or into until it acknowledges
        self.abandoned = on_done is not None  # no caller waits: the acknowledgement releases
        self.on_done = on_done  # called once, with None at the completion or the connection's fault

    def release(self) -> None:
        for pin in self.pins:
            pin.release()
        self.pins = []

    def finish(self, error: BaseException | None) -> None:
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            on_done(error)


class _Lending:
    """The RDMA Writes lent since the peer's last Send: that Send's acknowledgement waits until no
    view of their bytes is left."""

    __slots__ = ("handles", "out", "wr_id")

    def __init__(self) -> None:
        self.handles: list[int] = []  # the regions lent for
        self.out = 0  # loans whose bytes someone still holds
        self.wr_id: int | None = None  # the Send whose acknowledgement waits for them


class _Loans:
    """RDMA Writes lent instead of copied (:meth:`SoftConnection.allow_lending`): a Write whose
    bytes lie in the peer's shared arena, into a region its owner allows it for, starting at the
    region's first byte, leaves them where they are; the owner takes a read-only view of them
    (:meth:`SoftConnection.borrowed`), and the acknowledgement of the Send behind the Write
    waits until no view of them is left (:attr:`acked`; a view may die in any thread)."""

    def __init__(self, counters: ProviderCounters) -> None:
        self.lendable: set[int] = set()  # region handles
        self.lent: dict[int, memoryview] = {}  # region handle -> the bytes lent for it, not taken
        self._lending: _Lending | None = None  # the loans since the peer's last Send
        self._counters = counters
        self.acked: deque[int] = deque()  # Sends whose acknowledgement no loan holds back any more

    def forget(self, handle: int) -> None:
        """Region ``handle`` is released: a loan for it never taken goes back with it."""
        self.lendable.discard(handle)
        self.lent.pop(handle, None)

    def write(
        self, peer: cross_memory.PeerMemory | None, regions: dict[int, MemoryRegion], handle: int, address: int,
        spans: list[tuple[int, int]], unsignaled: int,
    ) -> bool:  # fmt: skip
        """Lend an RDMA Write (checked already) into lendable region ``handle``; False where its
        bytes are to be copied (a signaled Write completes at once; a second Write into the region
        first settles the bytes lent for it)."""
        region = regions.get(handle)
        if handle in self.lent:
            self.settle(handle, region)
            return False
        if not unsignaled or len(spans) != 1 or region is None or address != region.address or peer is None:
            return False
        lending = self._lending or _Lending()
        view = peer.lend(*spans[0], lambda: self._returned(lending))
        if view is None:
            return False
        self._lending = lending
        lending.handles.append(handle)
        lending.out += 1
        self.lent[handle] = view
        self._counters.bytes_lent += view.nbytes
        return True

    def settle(self, handle: int, region: MemoryRegion | None) -> None:
        """Copy the bytes lent for region ``handle`` into the region, and give them back."""
        view = self.lent.pop(handle, None)
        if view is not None and region is not None:
            region.buffer[: view.nbytes] = view
            self._counters.bytes_placed += view.nbytes

    def at_send(self, wr_id: int | None, regions: dict[int, MemoryRegion]) -> bool:
        """The peer's Send ``wr_id`` arrived (None: unsignaled, its loans are settled at once);
        True when its acknowledgement waits for loans."""
        lending, self._lending = self._lending, None
        if lending is None:
            return False
        if wr_id is None:
            for handle in lending.handles:
                self.settle(handle, regions.get(handle))
            return False
        lending.wr_id = wr_id
        return lending.out > 0

    def _returned(self, lending: _Lending) -> None:
        lending.out -= 1
        if not lending.out and lending.wr_id is not None:
            self.acked.append(lending.wr_id)

    def take_acks(self, acks: list[bytes]) -> list[bytes]:
        """``acks`` (frames), with the acknowledgements of :attr:`acked` added."""
        while self.acked:
            acks.append(_FRAME.pack(_Op.SEND_ACK, 0, 0, self.acked.popleft(), 0, 0, 0))
        return acks


class _HeldPosts:
    """Posted operations held back while :attr:`SoftConnection.hold_posts` is set (at most
    :data:`_HELD_MAX`): their frames go out in front of the next frame sent."""

    __slots__ = ("count", "frames")

    def __init__(self) -> None:
        self.frames: list[Buffer] = []
        self.count = 0

    def hold(self, frames: list[Buffer]) -> bool:
        """Hold one post's ``frames``; False when enough are held already (it goes out now)."""
        if self.count >= _HELD_MAX:
            return False
        self.frames += frames
        self.count += 1
        return True

    def before(self, bufs: list[Buffer]) -> list[Buffer]:
        """``bufs`` behind the frames held, which go out with them (in the order posted)."""
        if not self.frames:
            return bufs
        held, self.frames, self.count = self.frames, [], 0
        return held + bufs


class _Completions:
    """The Receive completions of a queue pair in the order they came, and last the fault that
    broke it; one already there is taken with no trip through the scheduler."""

    def __init__(self) -> None:
        self._items: deque[Received | BaseException] = deque()
        self._waiters = trio.lowlevel.ParkingLot()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Received | BaseException) -> None:
        self._items.append(item)
        if self._waiters:
            self._waiters.unpark()

    async def get(self) -> Received | BaseException:
        while not self._items:
            await self._waiters.park()
        return self._items.popleft()


class _Handles:
    """The handles of a connection's regions: a random 32-bit one for each registration, and for
    a window its index (24 bits) in a pool of windows and a key (8 bits) that changes with every
    bind of it."""

    def __init__(self, regions: dict[int, MemoryRegion], counters: ProviderCounters) -> None:
        self._regions = regions
        self._counters = counters
        self._window_keys: dict[int, int] = {}  # window index -> the key of its last bind
        self.free_windows: list[int] = []  # indices of released windows, to bind again

    def new(self) -> int:
        handle = secrets.randbits(32) or 1
        while handle in self._regions or handle >> 8 in self._window_keys:
            handle = secrets.randbits(32) or 1
        return handle

    def window(self) -> int:
        """A window from the pool (a new one when the pool is empty), bound with its next key."""
        if self.free_windows:
            index = self.free_windows.pop()
        else:
            index = secrets.randbits(24) or 1
            while index in self._window_keys or any(h >> 8 == index for h in self._regions):
                index = secrets.randbits(24) or 1
            self._counters.windows_allocated += 1
        key = (self._window_keys.get(index, 0) + 1) & 0xFF
        self._window_keys[index] = key
        return index << 8 | key


class _ReceivedBytes:
    """The bytes a connection's socket gave and no frame took yet: one read takes whatever the
    socket has (a frame's header, its spans or the inline message behind it, often the next
    frames), and headers and spans are unpacked where they lie; only data longer than a quarter
    of the buffer is read straight into its memory. ``before_wait`` runs when the socket has
    nothing (True: it sent something, look again first)."""

    def __init__(
        self, sock: socket.socket, peer: str, before_wait: Callable[[], Awaitable[bool]], counters: ProviderCounters
    ) -> None:
        self._sock = sock
        self._peer = peer
        self._before_wait = before_wait
        self._counters = counters
        self.buffer = bytearray(_RECEIVED_SIZE)
        self._view = memoryview(self.buffer)
        self.start = self.end = 0  # what no frame took yet: ``buffer[start:end]``

    async def fill(self, need: int) -> bool:
        """Have at least ``need`` bytes (at most :data:`_RECEIVED_SIZE`) in the buffer; True if it
        had to wait for bytes."""
        buf, start, end, waited = self.buffer, self.start, self.end, False
        if start == end:
            self.start = self.end = start = end = 0
        elif start + need > len(buf):  # the few bytes of a frame begun go to the front
            buf[: end - start] = buf[start:end]
            self.start, self.end = start, end = 0, end - start
        while end - start < need:
            k, w = await self._recv(self._view[end:])
            waited |= w
            end += k
            self.end = end
        return waited

    async def _recv(self, view: memoryview) -> tuple[int, bool]:
        """One read from the socket into ``view``, waiting for bytes when it has none: (how many,
        whether it waited)."""
        waited = False
        while True:
            self._counters.frame_reads += 1
            try:
                k = self._sock.recv_into(view)
            except BlockingIOError:
                if not await self._before_wait():
                    await trio.lowlevel.wait_readable(self._sock)
                    waited = True
                continue
            if k == 0:
                raise ConnectionLost("peer closed the connection", self._peer)
            return k, waited

    async def take(self, n: int) -> memoryview:
        """The next ``n`` bytes of the stream (at most :data:`_RECEIVED_SIZE`), where they lie in
        the buffer: read before the next read from the socket."""
        if self.end - self.start < n:
            await self.fill(n)
        start = self.start
        self.start = start + n
        return self._view[start : start + n]

    async def recv_exactly(self, view: memoryview) -> bool:
        """Fill ``view`` from the stream: what the buffer holds of it, then from the socket
        straight into ``view`` (a short rest through the buffer, with what follows it); True if
        it had to wait for bytes."""
        got, n, waited = 0, view.nbytes, False
        start = self.start
        k = min(self.end - start, n)
        if k:
            view[:k] = self._view[start : start + k]
            self.start = start + k
            got = k
        if got < n and n - got <= _RECEIVED_SIZE // 4:
            waited = await self.fill(n - got)
            start = self.start
            view[got:] = self._view[start : start + n - got]
            self.start = start + n - got
            return waited
        while got < n:
            k, w = await self._recv(view[got:] if got else view)
            waited |= w
            got += k
        return waited


class _HostToken:
    """A random word at a fixed address of this process: a peer that reads it there through
    :func:`.cross_memory.reaches` has shown that it can reach our memory."""

    def __init__(self) -> None:
        self._cell = ctypes.c_uint32(secrets.randbits(32))

    def fields(self) -> tuple[int, int, int]:
        """(token, PID, address) for a CONNECT frame's ``id``, ``handle`` and ``address``."""
        return self._cell.value, os.getpid(), ctypes.addressof(self._cell)


def _reached(flags: int, token: int, pid: int, address: int) -> int | None:
    """The peer's PID when its CONNECT frame offered a token that we read at its address."""
    if flags & _F_ONE_HOST and cross_memory.reaches(pid, address, bytes(ctypes.c_uint32(token))):
        return pid
    return None


def _byte_views(*groups: Sequence[Buffer]) -> tuple[list[memoryview], int]:
    """The non-empty buffers of ``groups`` as byte views, in order, and how many bytes they hold."""
    views = []
    size = 0
    for group in groups:
        for b in group:
            v = memoryview(b).cast("B")
            if v.nbytes:
                views.append(v)
                size += v.nbytes
    return views, size


def _target(
    regions: dict[int, MemoryRegion], handle: int, address: int, length: int, right: Access
) -> memoryview | None:
    """The bytes of region ``handle`` an operation of the peer's reaches, None when it may not."""
    r = regions.get(handle)
    if r is None or not r.valid or not int(r.access) & int(right) or not r.contains(address, length):
        return None
    start = address - r.address
    return r.buffer[start : start + length]


def _sink_view(sink: MemoryRegion, sink_offset: int, length: int) -> memoryview:
    if not sink.valid or not int(sink.access) & _LOCAL_WRITE:
        raise ValueError("RDMA Read sinks must be registered with LOCAL_WRITE")
    if sink_offset < 0 or sink_offset + length > sink.length:
        raise ValueError("RDMA Read sink too small")
    return sink.buffer[sink_offset : sink_offset + length]


async def _recv_exactly(sock: trio.socket.SocketType, view: memoryview) -> None:
    got = 0
    n = view.nbytes
    while got < n:
        k = await sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionLost("peer closed the connection")
        got += k


async def _send_all(sock: trio.socket.SocketType, bufs: Sequence[Buffer]) -> None:
    """Send the buffers as they lie, gathered by ``sendmsg`` (a frame's header and its data in one
    system call)."""
    views = [v for v in (memoryview(b).cast("B") for b in bufs) if v.nbytes]
    while views:
        advance(views, await sock.sendmsg(views[:IOV_MAX]))


class SoftConnection(Connection):
    """One emulated RC queue pair (use :class:`SoftProvider` to make one)."""

    supports_remote_invalidation = True
    supports_windows = True  # memory windows are emulated as handles over a registration

    local_invalidations: int  # regions we invalidated (invalidate, or deregister of a valid one)
    remote_invalidations: int  # our regions the peer invalidated with Send With Invalidate
    double_invalidations: int  # invalidations (local or remote) of a region already invalid

    reaches_peer: bool  # as the target, we copy RDMA data straight from/into the peer's memory
    peer_reaches: bool  # as the initiator, we send where our bytes lie, not the bytes

    def __init__(
        self,
        sock: trio.socket.SocketType,
        peer: str,
        peer_private_data: bytes,
        token: _HostToken | None = None,
        peer_pid: int | None = None,
        peer_reaches: bool = False,
    ) -> None:
        # the frames go through the socket itself (non-blocking), as the TCP transport's records
        # do: trio waits only when the socket cannot take or give bytes now, with no trip through
        # the scheduler for each system call that succeeds
        self._sock = socket.socket(sock.family, sock.type, sock.proto, fileno=sock.detach())
        self._sock.setblocking(False)
        self.peer = peer
        self.counters = ProviderCounters()
        self._rx = _ReceivedBytes(self._sock, peer, self._acks_before_wait, self.counters)
        self.peer_private_data = peer_private_data
        self._token = token  # kept while the connection lives: the peer may still read it
        self._peer = cross_memory.PeerMemory(peer_pid) if peer_pid is not None else None
        self.reaches_peer = peer_pid is not None
        self.peer_reaches = peer_reaches
        self._stranded: list[PinnedBuffer] = []  # memory the peer may have been copying when we failed
        self._regions: dict[int, MemoryRegion] = {}
        self._next_address = secrets.randbits(32) << 16
        self._recvs: deque[MemoryRegion] = deque()
        self._completions = _Completions()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 1
        self._send_lock = trio.Lock()
        # acknowledgements (of Sends, signaled Writes, directly placed Reads) not sent yet: they go
        # out in front of the next frame any task sends, or before the receive loop waits
        self._acks: list[bytes] = []
        self.hold_posts = False  # posts are held back (_HeldPosts) until ring() or the next frame
        self._held = _HeldPosts()
        self._error: BaseException | None = None
        self._closed = False
        self.local_invalidations = 0
        self.remote_invalidations = 0
        self.double_invalidations = 0
        self._loans = _Loans(self.counters)
        self._handles = _Handles(self._regions, self.counters)

    @property
    def registrations(self) -> int:
        """How many regions are registered now (valid or not)."""
        return len(self._regions)

    # -- memory ---------------------------------------------------------------------------------
    def register(self, buffer: Buffer, access: Access) -> MemoryRegion:
        view = registrable(buffer, access)
        handle = self._handles.new()
        address = self._next_address
        self._next_address += (view.nbytes + 0xFFF) & ~0xFFF or 0x1000
        region = MemoryRegion(handle, address, view, access)
        self._regions[handle] = region
        self.counters.registrations += 1
        return region

    def bind(self, region: MemoryRegion, offset: int, length: int, access: Access) -> MemoryRegion:
        if self._error is not None:  # the queue pair failed: every operation fails
            raise self._error
        if not self.supports_windows:
            raise ProviderError("this connection has no memory windows", self.peer)
        if self._regions.get(region.handle) is not region or not region.valid or region.window:
            raise ValueError("windows are bound over a valid registration")
        if not int(region.access) & _BIND or int(access) & ~_REMOTE:
            raise ValueError("windows need a registration made with BIND, and give remote access only")
        if int(access) & _REMOTE_WRITE and not int(region.access) & _LOCAL_WRITE:
            raise ValueError("a writable window needs a registration with LOCAL_WRITE")
        if offset < 0 or length <= 0 or offset + length > region.buffer.nbytes:
            raise ValueError(f"a window of {length} bytes at {offset} is outside the {region.length}-byte region")
        handle = self._handles.window()
        window = MemoryRegion(
            handle, region.address + offset, region.buffer[offset : offset + length], access, window=True
        )
        self._regions[handle] = window
        self.counters.binds += 1
        return window

    def invalidate(self, region: MemoryRegion) -> None:
        if region.valid:
            self.local_invalidations += 1
        elif self._error is None:  # a failed queue pair invalidated everything itself
            self.double_invalidations += 1
        region.valid = False

    def deregister(self, region: MemoryRegion) -> None:
        if self._loans.lendable:
            self._loans.forget(region.handle)
        if region.valid and self._error is None:
            self.local_invalidations += 1
        region.valid = False
        if self._regions.get(region.handle) is not region:
            return
        del self._regions[region.handle]
        if region.window:
            self._handles.free_windows.append(region.handle >> 8)  # invalid now: bound again later
        else:
            self.counters.deregistrations += 1

    def allow_lending(self, region: MemoryRegion) -> None:
        if self._peer is not None:  # (:class:`_Loans`)
            self._loans.lendable.add(region.handle)

    def borrowed(self, handle: int) -> memoryview | None:
        return self._loans.lent.pop(handle, None) if self._loans.lent else None

    # -- operations -----------------------------------------------------------------------------
    def post_recv(self, region: MemoryRegion) -> None:
        if self._error is not None:  # the queue pair failed: every operation fails
            raise self._error
        if not region.valid or region.handle not in self._regions or not int(region.access) & _LOCAL_WRITE:
            raise ValueError("receive buffers must be registered with LOCAL_WRITE")
        self._recvs.append(region)

    async def receive(self) -> Received:
        if self._error is not None and not self._completions:
            raise self._error
        item = await self._completions.get()
        if isinstance(item, BaseException):
            raise item
        return item

    async def send_region(self, region: MemoryRegion, length: int, invalidate: int | None = None) -> None:
        if self._error is not None:  # a failed queue pair invalidated every region: its fault first
            await trio.lowlevel.checkpoint()
            raise self._error
        flags = self._send_flags(region, length, invalidate)
        await self._request(_Op.SEND, flags, invalidate or 0, 0, length, [region.buffer[:length]])

    async def send_region_unsignaled(self, region: MemoryRegion, length: int, invalidate: int | None = None) -> None:
        """:meth:`send_region` unsignaled, as xprtrdma posts most Sends: no acknowledgement, no wait
        (the bytes are in the socket on return); a Send the target cannot take still breaks it."""
        if self._error is not None:
            await trio.lowlevel.checkpoint()
            raise self._error
        flags = self._send_flags(region, length, invalidate) | _F_UNSIGNALED
        self.counters.posts += 1
        await self._frame(_Op.SEND, flags, 0, invalidate or 0, 0, length, [region.buffer[:length]])

    def _send_flags(self, region: MemoryRegion, length: int, invalidate: int | None) -> int:
        """A Send of ``length`` bytes of ``region`` checked and counted: its frame's flags."""
        if self._regions.get(region.handle) is not region or not region.valid:
            raise ValueError("send buffers must be registered")
        if not 0 <= length <= region.buffer.nbytes:
            raise ValueError(f"a {length}-byte Send from a {region.length}-byte region")
        self.counters.sends += 1
        return 0 if invalidate is None else _F_INVALIDATE

    async def post_rdma_read(
        self, sink: MemoryRegion, sink_offset: int, handle: int, address: int, length: int, on_done: Completion
    ) -> None:
        """:meth:`rdma_read` without waiting for it: returns once the request is on its way;
        ``on_done(None)`` runs when the data is in the sink (in the pass of the receive loop that
        took the response, as a server polls its completions), ``on_done(error)`` when the
        connection fails first; until then the sink may still be written. Raises (and never calls
        ``on_done``) when the request could not be posted."""
        if self._error is not None:  # a failed queue pair invalidated every region: its fault first
            await trio.lowlevel.checkpoint()
            raise self._error
        view = _sink_view(sink, sink_offset, length)
        if self.peer_reaches:  # the target writes into the sink itself
            pin = PinnedBuffer(view)
            span = _SPAN.pack(pin.address, length)
            await self._post(_Op.READ_REQ, _F_DIRECT, handle, address, len(span), [span], _Pending(None, [pin], on_done))
            return
        await self._post(_Op.READ_REQ, 0, handle, address, length, (), _Pending(view, None, on_done))

    async def rdma_read(
        self, sink: MemoryRegion, sink_offset: int, handle: int, address: int, length: int
    ) -> None:
        view = _sink_view(sink, sink_offset, length)
        if self.peer_reaches:  # the target writes into the sink itself
            pin = PinnedBuffer(view)
            span = _SPAN.pack(pin.address, length)
            await self._request(_Op.READ_REQ, _F_DIRECT, handle, address, len(span), [span], pins=[pin])
            return
        await self._request(_Op.READ_REQ, 0, handle, address, length, (), view)

    async def send_region_after_writes(
        self, writes: Sequence[RdmaWrite], region: MemoryRegion, length: int, invalidate: int | None = None
    ) -> None:
        if self._error is not None:
            await trio.lowlevel.checkpoint()
            raise self._error
        frames, pins, flags = self._chain(writes, region, length, invalidate)
        await self._request(
            _Op.SEND, flags, invalidate or 0, 0, length, [region.buffer[:length]], pins=pins, before=frames
        )

    async def post_send_region_after_writes(
        self,
        writes: Sequence[RdmaWrite],
        region: MemoryRegion,
        length: int,
        invalidate: int | None,
        on_done: Completion,
    ) -> None:
        """:meth:`send_region_after_writes` without waiting for its completion: returns once the
        chain is on its way; ``on_done(None)`` runs when the Send completes (the region and the
        Writes' memory are ours again), ``on_done(error)`` when the connection fails first. Until
        then the region and the Writes' memory stay untouched. Raises (and never calls
        ``on_done``) when the chain could not be posted."""
        if self._error is not None:
            await trio.lowlevel.checkpoint()
            raise self._error
        frames, pins, flags = self._chain(writes, region, length, invalidate)
        pending = _Pending(None, pins, on_done)
        await self._post(_Op.SEND, flags, invalidate or 0, 0, length, [region.buffer[:length]], pending, frames)

    async def _post(
        self,
        op: _Op,
        flags: int,
        handle: int,
        address: int,
        length: int,
        data: Sequence[Buffer],
        pending: _Pending,
        before: Sequence[Buffer] = (),
    ) -> None:
        """Post one operation whose completion ``pending.on_done`` reports, without waiting for it."""
        self.counters.posts += 1
        wr_id = self._next_id
        self._next_id = (wr_id + 1) & 0xFFFFFFFF or 1
        self._pending[wr_id] = pending
        held = self.hold_posts and self._error is None  # held back: sent with the next frame
        if held and self._held.hold([*before, _FRAME.pack(op, flags, 0, wr_id, handle, address, length), *data]):
            return
        try:
            await self._frame(op, flags, wr_id, handle, address, length, data, before)
        except BaseException:
            if pending.on_done is not None:  # not sent: nothing of it reaches the peer
                pending.on_done = None
                self._pending.pop(wr_id, None)
                pending.release()
            raise

    def _chain(
        self, writes: Sequence[RdmaWrite], region: MemoryRegion, length: int, invalidate: int | None
    ) -> tuple[list[Buffer], list[PinnedBuffer], int]:
        """The frames of ``writes`` chained before a Send of ``region``, their pins, the Send's flags."""
        flags = self._send_flags(region, length, invalidate)
        frames: list[Buffer] = []
        pins: list[PinnedBuffer] = []  # the Writes' memory, until the Send's acknowledgement
        for w in writes:  # one post for the chain (counted by the caller)
            if self.peer_reaches and len(w.data) <= _SPANS_MAX:
                placed = [PinnedBuffer(v) for v in (memoryview(b).cast("B") for b in w.data) if v.nbytes]
                pins += placed
                spans = b"".join(_SPAN.pack(p.address, p.length) for p in placed)
                direct = _F_DIRECT | _F_UNSIGNALED
                frames += [_FRAME.pack(_Op.WRITE, direct, 0, 0, w.handle, w.address, len(spans)), spans]
            else:
                n = sum(memoryview(b).nbytes for b in w.data)
                frames += [_FRAME.pack(_Op.WRITE, _F_UNSIGNALED, 0, 0, w.handle, w.address, n), *w.data]
        return frames, pins, flags

    async def rdma_write(self, data: Sequence[Buffer], handle: int, address: int) -> None:
        if self.peer_reaches and len(data) <= _SPANS_MAX:  # the target copies from where they lie
            pins = [PinnedBuffer(v) for v in (memoryview(b).cast("B") for b in data) if v.nbytes]
            spans = b"".join(_SPAN.pack(p.address, p.length) for p in pins)
            await self._request(_Op.WRITE, _F_DIRECT, handle, address, len(spans), [spans], pins=pins)
            return
        n = sum(memoryview(b).nbytes for b in data)
        await self._request(_Op.WRITE, 0, handle, address, n, data)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.fail(ConnectionLost("connection closed", self.peer))
        trio.lowlevel.notify_closing(self._sock)
        self._sock.close()
        await trio.lowlevel.checkpoint()

    # -- internals ------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    async def _request(
        self,
        op: _Op,
        flags: int,
        handle: int,
        address: int,
        length: int,
        data: Sequence[Buffer],
        sink: memoryview | None = None,
        pins: list[PinnedBuffer] | None = None,
        before: Sequence[Buffer] = (),
    ) -> None:
        """Post one operation (``before``: the frames of unsignaled operations chained in front of
        it, sent with it) and wait for its completion."""
        if self._error is not None:
            for pin in pins or ():
                pin.release()
            await trio.lowlevel.checkpoint()  # a failed queue pair still yields to the scheduler
            raise self._error
        self.counters.posts += 1  # one work request (a window is bound without one here)
        wr_id = self._next_id
        self._next_id = (wr_id + 1) & 0xFFFFFFFF or 1
        pending = _Pending(sink, pins)
        self._pending[wr_id] = pending
        sent = False  # the whole frame went out: the peer may act on it
        try:
            await self._frame(op, flags, wr_id, handle, address, length, data, before)
            sent = True
            await pending.done.wait()
        finally:
            if sent and pending.pins and not pending.done.is_set():
                pending.abandoned = True  # the peer may still copy: its acknowledgement releases
            else:
                self._pending.pop(wr_id, None)
                pending.release()
        if pending.error is not None:
            raise pending.error

    def _complete(self, wr_id: int) -> None:
        """The peer acknowledged operation ``wr_id``: it no longer reaches the operation's memory."""
        pending = self._pending.get(wr_id)
        if pending is None:
            return
        pending.done.set()
        if pending.abandoned:
            del self._pending[wr_id]
            pending.release()
            pending.finish(None)

    async def _frame(
        self,
        op: _Op,
        flags: int,
        wr_id: int,
        handle: int,
        address: int,
        length: int,
        data: Sequence[Buffer] = (),
        before: Sequence[Buffer] = (),
    ) -> None:
        if self._error is not None:  # the queue pair failed: every operation fails
            raise self._error
        await self._send_frames([*before, _FRAME.pack(op, flags, 0, wr_id, handle, address, length), *data])

    def _acknowledge(self, op: _Op, flags: int, wr_id: int) -> None:
        """Queue the acknowledgement of the peer's operation ``wr_id``: it rides in front of the
        next frame this side sends (one system call and one wake-up of the peer fewer), or goes
        alone before the receive loop waits for the socket (:meth:`_flush_acks`)."""
        self._acks.append(_FRAME.pack(op, flags, 0, wr_id, 0, 0, 0))

    async def _acks_before_wait(self) -> bool:
        """Before the receive loop waits for the socket: the queued acknowledgements go out (the
        peer may be waiting for them); True if there were any."""
        if self._acks or self._loans.acked or self._held.frames:
            await self._flush_acks()
            return True
        return False

    async def _flush_acks(self) -> None:
        """Send the acknowledgements still queued, after one turn in which a frame of another task
        may take them along."""
        await trio.lowlevel.checkpoint()
        await self.ring()

    async def ring(self) -> None:
        """Send what is queued now: the posts held back (:attr:`hold_posts`), acknowledgements."""
        if (self._acks or self._loans.acked or self._held.frames) and self._error is None:
            await self._send_frames([])

    async def _send_frames(self, bufs: list[Buffer]) -> None:
        """Send ``bufs`` behind the queued acknowledgements and the posts held back, taken at the
        moment they go out."""
        self.counters.frame_writes += 1
        try:
            if not self._send_lock.locked():  # no frame half sent: this one may go at once
                acks, self._acks = self._loans.take_acks(self._acks), []
                views, size = _byte_views(acks, self._held.before(bufs))
                views = send_now(self._sock, views)
                if not views:
                    return
                async with self._send_lock:  # the rest when the socket takes it, ahead of any other
                    await send_rest(self._sock, views, sum(v.nbytes for v in views) < size)
                return
            async with self._send_lock:
                self._check()
                acks, self._acks = self._loans.take_acks(self._acks), []
                views, _ = _byte_views(acks, self._held.before(bufs))
                await send_rest(self._sock, views)
        except (OSError, trio.ClosedResourceError) as e:
            err = ConnectionLost(f"send failed: {e}", self.peer)
            self.fail(err)
            raise err from e

    def fail(self, err: BaseException) -> None:
        """Break the queue pair: pending and later operations raise ``err``."""
        if self._error is not None:
            return
        self._error = err
        self._held = _HeldPosts()  # never sent: their operations fail below
        for p in self._pending.values():
            # the peer may be copying from or into that memory at this moment: never given back
            self._stranded += p.pins
            p.pins = []
            p.error = err
            p.done.set()
            p.finish(err)
        self._completions.put(err)
        for r in self._regions.values():
            r.valid = False

    async def _fatal(self, kind: _Fatal, reason: str) -> None:
        """Tell the peer its operation broke the queue pair, and break ours."""
        msg = reason.encode()
        try:
            async with self._send_lock:
                frame = _FRAME.pack(_Op.FATAL, kind, 0, 0, 0, 0, len(msg))
                await send_rest(self._sock, [memoryview(frame), memoryview(msg)])
        except (OSError, trio.ClosedResourceError):
            pass
        self.fail(_FATAL_CLASS[kind](f"local: {reason}", self.peer))

    async def run(self) -> None:
        """Process frames from the peer until the connection ends (runs in the nursery)."""
        size = _FRAME.size
        rx = self._rx
        in_a_row = 0  # frames taken without waiting for the socket
        try:
            # the owner posts its receives in the turn in which connect or accept gave it the
            # connection (a server's before it accepts): the peer's first Send must find them
            await trio.lowlevel.checkpoint()
            while self._error is None:
                if rx.end - rx.start < size and await rx.fill(size):
                    in_a_row = 0
                elif in_a_row >= _FRAMES_PER_TURN:  # a peer that never pauses starves no one
                    await self._flush_acks()
                    in_a_row = 0
                in_a_row += 1
                start = rx.start
                rx.start = start + size
                op, flags, _, wr_id, handle, address, length = _FRAME.unpack_from(rx.buffer, start)
                await self._dispatch(op, flags, wr_id, handle, address, length)
        except (TransportError, OSError) as e:
            if self._error is None:
                self.fail(e if isinstance(e, TransportError) else ConnectionLost(str(e), self.peer))
        except trio.ClosedResourceError:
            self.fail(ConnectionLost("connection closed", self.peer))

    async def _skip(self, length: int) -> None:
        await self._rx.recv_exactly(memoryview(bytearray(length)))

    async def _spans(self, length: int) -> list[tuple[int, int]]:
        """The (address, length) spans of a directly placed operation's frame."""
        if length % _SPAN.size or length > _SPANS_MAX * _SPAN.size or self._peer is None:
            raise ProtocolViolation("a directly placed operation this connection did not agree to", self.peer)
        if length <= _RECEIVED_SIZE:
            return list(_SPAN.iter_unpack(await self._rx.take(length)))
        data = bytearray(length)
        await self._rx.recv_exactly(memoryview(data))
        return list(_SPAN.iter_unpack(data))

    async def _place(self, into_peer: bool, spans: list[tuple[int, int]], view: memoryview) -> bool:
        """Copy between our region's ``view`` and the initiator's memory, as the NIC's DMA does;
        False when the initiator named memory it does not have (the queue pair then breaks)."""
        assert self._peer is not None
        try:
            if into_peer:
                self._peer.write_to(spans, view)
            else:
                self._peer.read_from(spans, view)
        except OSError as e:
            await self._fatal(_Fatal.PROTOCOL, f"the initiator's memory cannot be reached: {e}")
            return False
        self.counters.bytes_placed += view.nbytes
        self.counters.bytes_mapped = self._peer.bytes_mapped
        return True

    async def _on_send(self, flags: int, wr_id: int, handle: int, length: int) -> None:
        """A Send: into the next Receive posted (a fatal error without one, or too small), With
        Invalidate retiring the region it names."""
        if not self._recvs:
            await self._skip(length)
            await self._fatal(_Fatal.RNR, "Send arrived with no Receive posted")
            return
        region = self._recvs.popleft()
        if length > region.buffer.nbytes or not region.valid:
            await self._skip(length)
            await self._fatal(_Fatal.LENGTH, f"{length}-byte Send for a {region.length}-byte Receive")
            return
        await self._rx.recv_exactly(region.buffer[:length])
        invalidated = None
        if flags & _F_INVALIDATE:
            target = self._regions.get(handle)
            if target is None or not int(target.access) & _REMOTE:
                await self._fatal(
                    _Fatal.REMOTE_ACCESS, f"Send With Invalidate of unknown handle {handle:#x}"
                )
                return
            if target.valid:
                self.remote_invalidations += 1
            else:
                self.double_invalidations += 1
            target.valid = False
            invalidated = handle
        held = self._loans.at_send(None if flags & _F_UNSIGNALED else wr_id, self._regions)
        self._completions.put(Received(region, length, invalidated))
        if not flags & _F_UNSIGNALED and not held:
            self._acknowledge(_Op.SEND_ACK, 0, wr_id)

    async def _direct(self, read: bool, flags: int, wr_id: int, handle: int, address: int, length: int) -> None:
        """An RDMA Write (or Read) the peer placed straight into (or takes straight out of) our
        region: the spans it names checked against the region's rkey, bounds and access, then the
        acknowledgement (a Write's only when signaled). What it costs from its spans on is the
        device's work (``counters.device_ns``)."""
        spans = await self._spans(length)
        start = time.thread_time_ns()
        total = 0
        for _, n in spans:
            total += n
        view = _target(self._regions, handle, address, total, Access.REMOTE_READ if read else Access.REMOTE_WRITE)
        if view is None:
            what = "RDMA Read of" if read else "RDMA Write to"
            await self._fatal(_Fatal.REMOTE_ACCESS, f"{what} {handle:#x}@{address:#x}+{total}")
            return
        if not read and handle in self._loans.lendable:
            lent = self._loans.write(self._peer, self._regions, handle, address, spans, flags & _F_UNSIGNALED)
            view = view[:0] if lent else view
        if view.nbytes and not await self._place(read, spans, view):
            return
        if read:
            self._acknowledge(_Op.READ_RESP, _F_DIRECT, wr_id)
        elif not flags & _F_UNSIGNALED:
            self._acknowledge(_Op.WRITE_ACK, 0, wr_id)
        self.counters.device_ns += time.thread_time_ns() - start

    async def _dispatch(
        self, op: int, flags: int, wr_id: int, handle: int, address: int, length: int
    ) -> None:
        if op == _Op.SEND:
            await self._on_send(flags, wr_id, handle, length)
        elif op in (_Op.WRITE, _Op.READ_REQ) and flags & _F_DIRECT:
            await self._direct(op == _Op.READ_REQ, flags, wr_id, handle, address, length)
        elif op == _Op.WRITE:
            view = _target(self._regions, handle, address, length, Access.REMOTE_WRITE)
            if view is None:
                await self._skip(length)
                await self._fatal(_Fatal.REMOTE_ACCESS, f"RDMA Write to {handle:#x}@{address:#x}+{length}")
                return
            self._loans.settle(handle, self._regions.get(handle))
            await self._rx.recv_exactly(view)
            if not flags & _F_UNSIGNALED:
                self._acknowledge(_Op.WRITE_ACK, 0, wr_id)
        elif op == _Op.READ_REQ:
            view = _target(self._regions, handle, address, length, Access.REMOTE_READ)
            if view is None:
                await self._fatal(_Fatal.REMOTE_ACCESS, f"RDMA Read of {handle:#x}@{address:#x}+{length}")
                return
            await self._frame(_Op.READ_RESP, 0, wr_id, 0, 0, length, [view])
        elif op == _Op.READ_RESP and flags & _F_DIRECT:
            self._complete(wr_id)
        elif op == _Op.READ_RESP:
            pending = self._pending.get(wr_id)
            if pending is None:  # the reader gave up (cancelled): drop the data
                await self._skip(length)
                return
            if pending.sink is None or pending.sink.nbytes != length:
                raise ProtocolViolation("unexpected RDMA Read response", self.peer)
            await self._rx.recv_exactly(pending.sink)
            self._complete(wr_id)
        elif op in (_Op.SEND_ACK, _Op.WRITE_ACK):
            self._complete(wr_id)
        elif op == _Op.REACH:
            self.peer_reaches = True
        elif op == _Op.ARENA:  # spans in it are copied through our mapping of it
            self._peer is None or self._peer.map_arena(wr_id, address, handle << 12)
        elif op == _Op.FATAL:
            reason = bytearray(min(length, 4096))
            await self._rx.recv_exactly(memoryview(reason))
            try:
                cls = _FATAL_CLASS[_Fatal(flags)]
            except ValueError:
                cls = ProtocolViolation
            self.fail(cls(f"remote: {reason.decode(errors='replace')}", self.peer))
        else:
            raise ProtocolViolation(f"unknown soft-RDMA operation {op}", self.peer)


def _no_delay(sock: trio.socket.SocketType) -> None:
    """Frames go out at once: Nagle's algorithm would hold a frame header back until the peer's
    delayed acknowledgement (tens of milliseconds per operation on loopback)."""
    sock.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)


async def _read_cm(sock: trio.socket.SocketType, expect: _Op) -> tuple[bytes, int, int | None]:
    """A CONNECT frame: its private data, its flags, and the sender's PID if we reached its token."""
    hdr = bytearray(_FRAME.size)
    await _recv_exactly(sock, memoryview(hdr))
    op, flags, _, token, pid, address, length = _FRAME.unpack(hdr)
    if op != expect or length > CM_REP_PRIVATE_DATA_MAX:
        raise ProtocolViolation(f"expected {expect.name}, got operation {op}")
    data = bytearray(length)
    await _recv_exactly(sock, memoryview(data))
    return bytes(data), flags, _reached(flags, token, pid, address)


def _cm_frame(op: _Op, flags: int, token: _HostToken | None, private_data: bytes) -> list[Buffer]:
    value, pid, address = token.fields() if token is not None else (0, 0, 0)
    if token is not None:
        flags |= _F_ONE_HOST
    return [_FRAME.pack(op, flags, 0, value, pid, address, len(private_data)), private_data]


class SoftListener(Listener):
    def __init__(
        self,
        sock: trio.socket.SocketType,
        nursery: trio.Nursery,
        private_data: PrivateDataReply,
        one_host: bool = True,
        arena: cross_memory.SharedArena | None = None,
    ) -> None:
        self._sock = sock
        self._nursery = nursery
        self._private_data = private_data
        self._one_host = one_host
        self._arena = arena
        self.port = sock.getsockname()[1]

    async def accept(self) -> Connection:
        while True:
            sock, addr = await self._sock.accept()
            try:
                _no_delay(sock)
                req, _, peer_pid = await _read_cm(sock, _Op.CONNECT_REQ)
                rep = self._private_data(req) if callable(self._private_data) else self._private_data
                if len(rep) > CM_REP_PRIVATE_DATA_MAX:
                    raise ValueError(f"accept private data is limited to {CM_REP_PRIVATE_DATA_MAX} bytes")
                if not self._one_host:
                    peer_pid = None
                token = _HostToken() if self._one_host else None
                reaches = _F_REACHES if peer_pid is not None else 0
                frames = _cm_frame(_Op.CONNECT_REP, reaches, token, rep)
                if self._arena is not None:  # ahead of any frame that names memory in it
                    a = self._arena
                    frames.append(_FRAME.pack(_Op.ARENA, 0, 0, a.fd, a.size >> 12, a.address, 0))
                await _send_all(sock, frames)
            except (TransportError, OSError):
                sock.close()  # a connect attempt that died half-way: wait for the next one
                continue
            # the connector says with a REACH frame whether it reaches us (run() takes it)
            conn = SoftConnection(sock, f"{addr[0]}:{addr[1]}", req, token, peer_pid)
            self._nursery.start_soon(conn.run)
            return conn

    async def aclose(self) -> None:
        self._sock.close()
        await trio.lowlevel.checkpoint()


class SoftProvider(Provider):
    """Emulated RDMA over TCP (loopback in tests). ``windows=False`` makes connections without
    memory windows, as a siw device's: every chunk is then registered for its call.
    ``one_host=False`` sends RDMA Read and Write data over the socket even when the peer's memory
    can be reached."""

    name = "soft"
    supports_remote_invalidation = True  # Send With Invalidate is emulated both ways

    def __init__(self, windows: bool = True, one_host: bool = True) -> None:
        self.windows = windows
        self.one_host = one_host
        self._arena: cross_memory.SharedArena | None = None

    def shared_buffer(self, n: int) -> memoryview | None:
        """``n`` bytes a listener's peers on this host copy to and from with a plain memory copy
        (they map them: :class:`~.cross_memory.SharedArena`) instead of ``process_vm_*``; memory
        a server keeps for its RDMA Read sinks and RDMA Write sources. None without one here."""
        return self._arena.take(n) if self._arena is not None else None

    async def connect(
        self, nursery: trio.Nursery, host: str, port: int, private_data: bytes = b""
    ) -> Connection:
        if len(private_data) > CM_REQ_PRIVATE_DATA_MAX:
            raise ValueError(f"connect private data is limited to {CM_REQ_PRIVATE_DATA_MAX} bytes")
        sock = trio.socket.socket()
        try:
            _no_delay(sock)
            await sock.connect((host, port))
        except OSError as e:
            sock.close()
            if e.errno == errno.ECONNREFUSED:
                raise ConnectRefused(str(e), f"{host}:{port}") from e
            raise ConnectionLost(str(e), f"{host}:{port}") from e
        token = _HostToken() if self.one_host else None
        try:
            await _send_all(sock, _cm_frame(_Op.CONNECT_REQ, 0, token, private_data))
            rep, flags, peer_pid = await _read_cm(sock, _Op.CONNECT_REP)
            if not self.one_host:
                peer_pid = None
            if peer_pid is not None:
                await _send_all(sock, [_FRAME.pack(_Op.REACH, 0, 0, 0, 0, 0, 0)])
        except BaseException:
            sock.close()
            raise
        conn = SoftConnection(sock, f"{host}:{port}", rep, token, peer_pid, bool(flags & _F_REACHES))
        conn.supports_windows = self.windows
        nursery.start_soon(conn.run)
        return conn

    async def listen(
        self, nursery: trio.Nursery, host: str, port: int, private_data: PrivateDataReply = b""
    ) -> Listener:
        sock = trio.socket.socket()
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
        await sock.bind((host, port))
        sock.listen(16)
        if self.one_host and self._arena is None:
            self._arena = cross_memory.SharedArena()
        return SoftListener(sock, nursery, private_data, self.one_host, self._arena)


__all__ = [
    "CM_REP_PRIVATE_DATA_MAX",
    "CM_REQ_PRIVATE_DATA_MAX",
    "ProviderError",
    "SoftConnection",
    "SoftListener",
    "SoftProvider",
]
