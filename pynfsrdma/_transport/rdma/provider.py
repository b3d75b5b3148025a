"""The verbs-provider interface: what RPC-over-RDMA needs from an RDMA stack, and nothing of RPC.

One :class:`Connection` is one reliable-connected queue pair with its completion handling, made
by a :class:`Provider` through the connection manager (connect / listen+accept, each side
carrying private data: RFC 8797's message travels there). It offers:

* memory registration: :meth:`Connection.register` gives a :class:`MemoryRegion` whose
  ``handle`` (the rkey / steering tag) and ``address`` the peer uses in RDMA segments, with access
  rights; :meth:`Connection.invalidate` (local invalidation) and :meth:`Connection.deregister`;
* memory windows (``supports_windows``): :meth:`Connection.bind` gives a handle of its own over
  part of a registration, without registering anything, for one I/O: the peer reaches those bytes
  only, and only until the window is invalidated (by the peer's Send With Invalidate or locally).
  Windows are type 2: one released goes back to the connection's pool and is bound again for a
  later I/O with a new key in the low 8 bits of its handle, so the handle an earlier I/O offered
  never reaches the memory of a later one;
* two-sided operations: :meth:`Connection.post_recv` (a registered receive buffer),
  :meth:`Connection.receive` (the next Receive completion), :meth:`Connection.send_region` (a
  registered send buffer, the way RPC-over-RDMA sends) and :meth:`Connection.send` (buffers
  gathered as they lie), each optionally Send With Invalidate of a peer region;
* remote invalidation (RFC 8797's "I" bit): ``supports_remote_invalidation`` on the provider and
  its connections says that this stack can both send a Send With Invalidate and take one (its
  registrations can be invalidated by the peer; the Receive completion names the handle). Only
  then may RPC-over-RDMA advertise it;
* one-sided operations against the peer's registered memory: :meth:`Connection.rdma_read`,
  :meth:`Connection.rdma_write`; and :meth:`Connection.send_region_after_writes`, RDMA Writes and
  the Send behind them posted as one chain whose Send alone is signaled (an RPC reply with its
  Write chunks, as a server sends it).

Every ``async`` method returns when its work completion arrived, so callers are trio code that
awaits completions. Faults follow hardware: a remote access error, a Send that found no posted
Receive (RNR, taken as fatal) or a Send larger than the posted buffer fail the operation *and*
the connection; every later operation raises the same fault.

A pyverbs provider implements the same calls over librdmacm and libibverbs, waiting on the CQ
completion channel's and the CM event channel's file descriptors with ``trio.lowlevel.wait_readable``
(never blocking the event loop); the software provider (:mod:`.soft`) emulates it over a stream
socket for machines without RDMA.
"""

from __future__ import annotations

import abc
import ctypes
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import trio

from ..base import TransportError

Buffer = bytes | bytearray | memoryview


class Access(enum.IntFlag):
    LOCAL_WRITE = 1  # the local HCA may write it (receive buffers, RDMA Read sinks)
    REMOTE_WRITE = 2  # the peer may RDMA Write it (Write chunks, Reply chunk)
    REMOTE_READ = 4  # the peer may RDMA Read it (Read chunks)
    BIND = 8  # memory windows may be bound over it (Connection.bind)


class ProviderError(TransportError):
    """A fault of the RDMA connection (the queue pair is in the error state)."""


class RemoteAccessError(ProviderError):
    """An RDMA Read/Write named unregistered, out-of-bounds, invalidated or forbidden memory."""


class ReceiverNotReady(ProviderError):
    """A Send arrived with no Receive posted (RNR retries exhausted, taken as fatal)."""


class LengthError(ProviderError):
    """A Send was larger than the Receive buffer posted for it."""


class NoRdmaDevice(ProviderError):
    """RDMA was asked for and this machine has no RDMA device."""


@dataclass(slots=True, eq=False)
class MemoryRegion:
    """Registered memory: ``handle`` (rkey) and ``address`` go into RDMA segments."""

    handle: int
    address: int
    buffer: memoryview
    access: Access
    valid: bool = True
    window: bool = False  # a memory window bound over a registration (Connection.bind)

    @property
    def length(self) -> int:
        return self.buffer.nbytes

    def contains(self, address: int, length: int) -> bool:
        return self.address <= address and address + length <= self.address + self.buffer.nbytes


@dataclass(slots=True)
class ProviderCounters:
    """What a connection asked of its stack, for tests and benchmarks (totals since it was made).

    A registration pins memory and asks the kernel for a mapping, the most expensive verb there is;
    ``bytes_copied`` counts what the provider itself copied in user space to carry out an operation
    (gathering a Send's pieces), which the caller never sees.
    """

    registrations: int = 0  # memory registrations made
    deregistrations: int = 0  # memory registrations released
    binds: int = 0  # memory windows bound over registered memory (no registration)
    windows_allocated: int = 0  # memory windows allocated (a pool re-binds them: none after warm-up)
    bytes_copied: int = 0  # bytes copied by the provider in user space
    bytes_placed: int = 0  # RDMA Read/Write bytes moved straight between this process's memory
    #                        and the peer's, as a NIC's DMA does (the software provider on one host)
    bytes_mapped: int = 0  # of those, bytes copied through a mapping of the peer's shared arena
    bytes_lent: int = 0  # RDMA Write bytes the peer lent instead (left in its arena, not copied)
    device_ns: int = 0  # the software provider: this thread's CPU time carrying out the peer's
    #                     RDMA Reads and Writes of our memory (checks, copies, loans), the work a
    #                     NIC's DMA engine does without the host's CPU
    sends: int = 0  # Sends posted
    posts: int = 0  # work-request lists posted to the send queue (doorbells): a Send with the
    #                 Bind MW requests of its call's windows chained in front is one
    frame_writes: int = 0  # the software provider: gathered writes of frames to its socket (a
    #                        system call and a wake-up of the peer each); acknowledgements ride
    #                        along with the next frame instead of costing one of their own
    frame_reads: int = 0  # the software provider: reads of its socket (system calls), those that
    #                       found nothing to read included


@dataclass(slots=True)
class Received:
    """A Receive completion: ``data`` is the part of the posted buffer the Send filled."""

    region: MemoryRegion
    byte_len: int
    invalidated: int | None = None  # the rkey a Send With Invalidate invalidated
    data: memoryview = field(init=False)

    def __post_init__(self) -> None:
        self.data = self.region.buffer[: self.byte_len]


def registrable(buffer: Buffer, access: Access) -> memoryview:
    """``buffer`` as bytes, to be registered with ``access`` (every provider's :meth:`Connection.register`
    starts here): writable access needs a writable buffer (ValueError)."""
    view = memoryview(buffer).cast("B")
    if access & (Access.LOCAL_WRITE | Access.REMOTE_WRITE) and view.readonly:
        raise ValueError("writable access needs a writable buffer")
    return view


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer``."""

    _fields_ = [
        ("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p),
    ]  # fmt: skip


_python_api = ctypes.PyDLL(None)  # function objects of our own: their argtypes are ours alone
_get_buffer = _python_api.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_release_buffer = _python_api.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]


class PinnedBuffer:
    """The address of a Python buffer, held (PyObject_GetBuffer) until :meth:`release`: what a
    provider registers stays where it is while the device may reach it."""

    def __init__(self, view: memoryview) -> None:
        self._pb: _PyBuffer | None = _PyBuffer()
        if _get_buffer(view, ctypes.byref(self._pb), 0) != 0:
            raise ValueError("cannot take the address of a buffer")
        self.address = int(self._pb.buf or 0)
        self.length = int(self._pb.len)

    def release(self) -> None:
        if self._pb is not None:
            _release_buffer(ctypes.byref(self._pb))
            self._pb = None


def buffer_address(view: memoryview) -> int:
    """The address of the first byte of ``view`` in this process."""
    pin = PinnedBuffer(view)
    pin.release()
    return pin.address


@dataclass(frozen=True)
class RdmaWrite:
    """One RDMA Write of a chain: ``data`` (gathered) into the peer's region ``handle`` at ``address``."""

    data: Sequence[Buffer]
    handle: int
    address: int


class Connection(abc.ABC):
    """One reliable-connected queue pair."""

    supports_remote_invalidation: bool  # Send With Invalidate, both ways
    supports_windows: bool  # bind() gives memory windows over registered memory
    peer_private_data: bytes
    peer: str
    counters: ProviderCounters

    @abc.abstractmethod
    def register(self, buffer: Buffer, access: Access) -> MemoryRegion:
        """Register memory; writable access needs a writable buffer."""

    @abc.abstractmethod
    def bind(self, region: MemoryRegion, offset: int, length: int, access: Access) -> MemoryRegion:
        """A memory window over ``length`` bytes of ``region`` (registered with BIND) at
        ``offset``: a handle of its own through which the peer reaches those bytes only, with
        ``access`` (REMOTE_READ and/or REMOTE_WRITE), made without a registration. The peer's Send
        With Invalidate retires it, :meth:`invalidate` does locally, :meth:`deregister` releases
        it (the region stays registered). Only when ``supports_windows``."""

    @abc.abstractmethod
    def invalidate(self, region: MemoryRegion) -> None:
        """Local invalidation: the peer can no longer reach the region through its handle."""

    @abc.abstractmethod
    def deregister(self, region: MemoryRegion) -> None:
        """Release a registration (invalidating it first if it is still valid: a region the
        peer invalidated with Send With Invalidate is released without a second invalidation)."""

    def allow_lending(self, region: MemoryRegion) -> None:
        """Let the peer's RDMA Write into ``region`` be *lent* where the provider can do so (the
        software provider on one host, from the peer's shared arena): its bytes stay where the
        peer has them, :meth:`borrowed` hands them over in place of the region's, and the Send
        behind the Write completes on the peer only once every view of them is gone (until then
        the peer leaves them untouched, as it leaves any memory of an operation not completed).
        A provider that places all data in the region itself does nothing."""
        return None

    def borrowed(self, handle: int) -> memoryview | None:
        """The bytes the peer's RDMA Write lent for the region ``handle`` (read-only, from the
        region's first byte), taken once; None when they were placed in the region itself."""
        return None

    @abc.abstractmethod
    def post_recv(self, region: MemoryRegion) -> None:
        """Post a receive buffer (a region with LOCAL_WRITE); one Send fills one buffer."""

    @abc.abstractmethod
    async def receive(self) -> Received:
        """The next Receive completion, in the order the peer's Sends were made."""

    async def send(self, data: Sequence[Buffer], invalidate: int | None = None) -> None:
        """Send the buffers as one message (gathered); with ``invalidate``, Send With Invalidate
        of the peer's region with that handle (only when ``supports_remote_invalidation``). The
        pieces are copied (``counters.bytes_copied``) into memory registered for this one Send;
        :meth:`send_region` sends from a buffer registered once, with neither."""
        payload = bytearray().join(data)
        self.counters.bytes_copied += len(payload)
        region = self.register(payload, Access.LOCAL_WRITE)
        try:
            await self.send_region(region, len(payload), invalidate)
        finally:
            self.deregister(region)

    @abc.abstractmethod
    async def send_region(self, region: MemoryRegion, length: int, invalidate: int | None = None) -> None:
        """Send the first ``length`` bytes of a registered region as one message, without a copy or
        a registration (send buffers registered once); the region may be written again when this
        returns. ``invalidate`` as in :meth:`send`."""

    @abc.abstractmethod
    async def rdma_read(
        self, sink: MemoryRegion, sink_offset: int, handle: int, address: int, length: int
    ) -> None:
        """Copy ``length`` bytes of the peer's region ``handle`` at ``address`` into ``sink``."""

    @abc.abstractmethod
    async def rdma_write(self, data: Sequence[Buffer], handle: int, address: int) -> None:
        """Place the buffers (gathered) into the peer's region ``handle`` at ``address``."""

    async def send_region_after_writes(
        self, writes: Sequence[RdmaWrite], region: MemoryRegion, length: int, invalidate: int | None = None
    ) -> None:
        """The ``writes``, then :meth:`send_region` of ``region``: a chain in which only the Send is
        signaled. A reliable connection executes it in order, so the Send's completion says that
        every Write of the chain has landed (the Writes' memory may be reused when this returns),
        and a Write that fails fails the chain. This default waits for each Write in turn."""
        for w in writes:
            await self.rdma_write(w.data, w.handle, w.address)
        await self.send_region(region, length, invalidate)

    @abc.abstractmethod
    def fail(self, err: BaseException) -> None:
        """Put the queue pair in the error state now, as a fatal fault does: pending operations
        (a :meth:`receive` waiting included) and later ones raise ``err``."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Disconnect; pending and later operations raise ``ConnectionLost`` (_transport/base.py)."""


PrivateDataReply = bytes | Callable[[bytes], bytes]


class Listener(abc.ABC):
    port: int

    @abc.abstractmethod
    async def accept(self) -> Connection:
        """The next connection; its ``peer_private_data`` is the connect request's."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...


class Provider(abc.ABC):
    name: ClassVar[str]
    supports_remote_invalidation: bool  # as Connection's: known before connecting (to advertise)

    @abc.abstractmethod
    async def connect(
        self, nursery: trio.Nursery, host: str, port: int, private_data: bytes = b""
    ) -> Connection:
        """Connect; the connection's background work runs in ``nursery``."""

    @abc.abstractmethod
    async def listen(
        self, nursery: trio.Nursery, host: str, port: int, private_data: PrivateDataReply = b""
    ) -> Listener:
        """Listen; ``private_data`` (or its result for the request's private data) goes in each accept."""


__all__ = [
    "Access",
    "Connection",
    "LengthError",
    "Listener",
    "MemoryRegion",
    "NoRdmaDevice",
    "PinnedBuffer",
    "PrivateDataReply",
    "Provider",
    "ProviderCounters",
    "ProviderError",
    "RdmaWrite",
    "Received",
    "ReceiverNotReady",
    "RemoteAccessError",
    "buffer_address",
]
