"""The memory behind a call's chunks, registered once and reached through memory windows.

A registration pins memory and asks the kernel for a mapping, the most expensive verb there is.
Where the provider binds memory windows (``Connection.supports_windows``: type 2 windows on the
device, or the software provider), what the responder reaches is a window bound for one call over
memory registered once, as Linux's xprtrdma does with FRWR (a pool of regions re-armed per I/O):

* **Read chunks** (WRITE data): the caller's buffer is registered whole the first time a call
  names it and kept registered while the caller holds it (a cache keyed by the buffer object,
  for immutable ``bytes`` and for :class:`~pynfsrdma._transport.base.StableBuffer`, the FUSE
  channel's request buffers that WRITE payloads arrive in: a registration holds an export of the
  buffer, which would keep a caller from resizing a plain ``bytearray``; an object only the cache
  still refers to is released at the next call, so that the cache never keeps a caller's memory
  alive). Each call binds a window over exactly the payload's bytes. A StableBuffer is told how
  many references the cache holds (``cached_refs``), so that its owner still sees when the last
  view of a payload is gone.
* **Write chunks and the Reply chunk** (READ data, large replies): sinks (:class:`WriteChunkSink`)
  come from a pool of registered buffers, one size class per power of two. Each call binds a
  window over the bytes it offers. The caller gets a view made for it of the sink the data was
  placed in (no copy); the sink is used again once no view of it is left (its reference count is
  back to what the pool alone holds, as the FUSE request buffers do).

The guarantee: the responder reaches only the bytes of a call in flight. A window names one
call's bytes and nothing else of the registration, and it is invalidated at the reply (by the
responder's Send With Invalidate, or locally with ``deregister``) or when the caller gives up
(``abandon``): an RDMA access through its handle after that fails, as on hardware. The
registrations under the windows have no remote access rights of their own: their memory can be
reached only through a window.

What stays registered between calls is bounded (``pinned_limit`` bytes): the least recently used
idle sources and free sinks are released first; a call that would go past the bound with every
cached registration in use gets registrations of its own for that call.

Where the provider has no windows (siw), every chunk is registered for its call and deregistered
at its reply: the guarantee holds, at the cost of a registration per chunk. Sinks still come from
the pool (the same size classes and reference counts, within ``pinned_limit``), so that a READ's
registration pins memory already there instead of a new zero-filled buffer's fresh pages. A cache
of plain registrations cannot keep the guarantee there: a region registered with remote access is
reachable through its rkey until it is deregistered, and siw offers user space nothing that
retires or changes that rkey while keeping the pages pinned (no memory windows, no fast
registration, no ``rereg_mr``). So on siw no registration the responder could reach outlives its
call (``tests/rdma/test_transport.py`` checks that a late RDMA Read and Write through a call's
handles fail, with windows and without).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from ..base import StableBuffer
from .provider import Access, Connection, MemoryRegion, buffer_address

DEFAULT_PINNED_LIMIT: Final = 256 << 20
MIN_SINK: Final = 4096


class WriteChunkSink(bytearray):
    """A buffer registered for the responder to RDMA-Write one DDP item (or the reply) into.

    A plain bytearray with a type of its own, so that a caller can tell that the view it got is
    the memory the data was placed in (no copy in between)."""


@dataclass(slots=True, eq=False)
class _Source:
    obj: bytes | StableBuffer
    region: MemoryRegion
    address: int  # where obj's first byte lies in this process (a registration holds it there)
    in_flight: int = 0
    idle_refs: int = 0
    held: int = 0  # references the cache holds (the registration's and its own)

    def __del__(self) -> None:
        # the cache's references go with this object (however the cache ends: released, or the
        # connection dropped): the owner of a StableBuffer counts them no longer
        obj = self.obj
        if type(obj) is not bytes:  # a StableBuffer (no global looked up: also at exit)
            obj.cached_refs -= self.held  # type: ignore[union-attr]

    def referenced(self) -> bool:
        """Someone besides the cache (the caller) still holds the bytes."""
        return sys.getrefcount(self.obj) > self.idle_refs


@dataclass(slots=True, eq=False)
class _Sink:
    data: WriteChunkSink
    region: MemoryRegion | None  # None without windows: registered for each call (Lease.regions)
    idle_refs: int = 0

    def referenced(self) -> bool:
        """A view of the sink handed to a caller is still alive."""
        return sys.getrefcount(self.data) > self.idle_refs


@dataclass(slots=True, eq=False)
class Lease:
    """What one call holds: the regions the responder reaches (windows or registrations of the
    call's own) and, for windows, the cached memory under them."""

    regions: list[MemoryRegion] = field(default_factory=list)
    sources: list[_Source] = field(default_factory=list)
    sinks: list[_Sink] = field(default_factory=list)


def _size_class(n: int) -> int:
    return max(MIN_SINK, 1 << (n - 1).bit_length())


class ChunkMemory:
    """Chunk memory of one connection (see the module docstring)."""

    def __init__(self, conn: Connection, pinned_limit: int = DEFAULT_PINNED_LIMIT) -> None:
        self.conn = conn
        self.windows = conn.supports_windows
        self.pinned_limit = pinned_limit
        self._sources: OrderedDict[int, _Source] = OrderedDict()  # id(obj) -> source, LRU first
        self._free: dict[int, list[_Sink]] = {}  # size class -> free sinks
        self._lent: list[_Sink] = []  # sinks whose views are with callers (or in flight)
        self.pinned = 0  # bytes kept between calls (sources and sinks; without windows, sink memory)

    @property
    def resting_registrations(self) -> int:
        """Registrations kept between calls."""
        sinks = [*self._lent, *(s for free in self._free.values() for s in free)]
        return len(self._sources) + sum(1 for s in sinks if s.region is not None)

    @property
    def kept_sinks(self) -> int:
        """Sinks the pool holds (free, or lent to a call or a caller)."""
        return len(self._lent) + sum(len(v) for v in self._free.values())

    @property
    def pinned_sources(self) -> int:
        """Bytes of callers' WRITE data kept registered."""
        return sum(len(s.obj) for s in self._sources.values())

    # -- Read chunks ------------------------------------------------------------------------------
    def source(self, data: memoryview, lease: Lease) -> MemoryRegion:
        """A region the responder RDMA-Reads ``data`` from, held by ``lease``."""
        obj = data.obj
        if not self.windows or not (type(obj) is bytes or isinstance(obj, StableBuffer)) or data.nbytes == 0:
            return self._own(lease, data, Access.REMOTE_READ)
        self._sweep()
        src = self._sources.get(id(obj))
        if src is None or src.obj is not obj:
            size = len(obj)
            if not self._make_room(size):
                return self._own(lease, data, Access.REMOTE_READ)
            before = sys.getrefcount(obj)
            region = self.conn.register(obj, Access.BIND)
            src = _Source(obj, region, buffer_address(memoryview(obj)))
            src.held = sys.getrefcount(obj) - before  # the registration's and the cache's
            src.idle_refs = src.held + 1  # (and getrefcount's argument)
            if isinstance(obj, StableBuffer):
                obj.cached_refs += src.held
            self._sources[id(obj)] = src
            self.pinned += size
        self._sources.move_to_end(id(obj))
        offset = buffer_address(data) - src.address
        window = self.conn.bind(src.region, offset, data.nbytes, Access.REMOTE_READ)
        src.in_flight += 1
        lease.sources.append(src)
        lease.regions.append(window)
        return window

    # -- Write chunks, Reply chunk ------------------------------------------------------------------
    def sink(self, length: int, lease: Lease) -> tuple[MemoryRegion, memoryview]:
        """A region the responder RDMA-Writes up to ``length`` bytes into, held by ``lease``, and
        the view of its memory the reply's data is cut from."""
        if not self.windows:
            # the sink's memory comes from the pool (no allocation, no fresh pages to fault in and
            # zero), its registration is the call's own: deregistered at the reply
            sink = self._take_sink(_size_class(length), register=False)
            if sink is None:
                region = self._own(lease, WriteChunkSink(length), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
                return region, region.buffer
            region = self._own(
                lease, memoryview(sink.data)[:length], Access.LOCAL_WRITE | Access.REMOTE_WRITE
            )
            lease.sinks.append(sink)
            return region, memoryview(sink.data)[:length]  # a view of its own: see _Sink.referenced
        sink = self._take_sink(_size_class(length))
        if sink is None:
            region = self._own(lease, WriteChunkSink(length), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
            return region, region.buffer
        assert sink.region is not None  # registered with BIND: windows are bound over it
        window = self.conn.bind(sink.region, 0, length, Access.REMOTE_WRITE)
        lease.sinks.append(sink)
        lease.regions.append(window)
        return window, memoryview(sink.data)[:length]  # a view of its own: see _Sink.referenced

    def _take_sink(self, size: int, register: bool = True) -> _Sink | None:
        free = self._free.get(size)
        if not free:  # only then are the lent sinks looked at: a READ does not scan them all
            self._collect()
            free = self._free.get(size)
        if free:
            sink = free.pop()
        else:
            if not self._make_room(size):
                return None
            data = WriteChunkSink(size)
            sink = _Sink(
                data, self.conn.register(data, Access.LOCAL_WRITE | Access.BIND) if register else None
            )
            del data  # the sink alone holds it now: what it holds idle is measured below
            self.pinned += size
            sink.idle_refs = sys.getrefcount(sink.data)
        self._lent.append(sink)
        return sink

    def _collect(self) -> None:
        """Sinks no caller holds a view of any more go back to the free lists."""
        still = []
        for sink in self._lent:
            if sink.referenced():
                still.append(sink)
            else:
                self._free.setdefault(len(sink.data), []).append(sink)
        self._lent = still

    def _sweep(self) -> None:
        """Release the sources their callers dropped: a cached registration must not keep a
        caller's memory alive once the caller is done with it."""
        for key in [k for k, s in self._sources.items() if not s.in_flight and not s.referenced()]:
            self._drop_source(key)

    def _drop_source(self, key: int) -> None:
        src = self._sources.pop(key)
        self.conn.deregister(src.region)
        self.pinned -= len(src.obj)

    # -- the bound on what stays pinned ------------------------------------------------------------
    def _make_room(self, size: int) -> bool:
        """Release idle registrations until ``size`` more bytes fit the bound; False if they
        cannot (the call then registers its own memory)."""
        if self.pinned + size <= self.pinned_limit:
            return True
        self._collect()
        for free in self._free.values():
            while free and self.pinned + size > self.pinned_limit:
                sink = free.pop()
                if sink.region is not None:
                    self.conn.deregister(sink.region)
                self.pinned -= len(sink.data)
        for key in [k for k, s in self._sources.items() if not s.in_flight]:
            if self.pinned + size <= self.pinned_limit:
                break
            self._drop_source(key)
        return self.pinned + size <= self.pinned_limit

    # -- per call -------------------------------------------------------------------------------
    def _own(self, lease: Lease, buffer: bytes | bytearray | memoryview, access: Access) -> MemoryRegion:
        region = self.conn.register(buffer, access)
        lease.regions.append(region)
        return region

    def release(self, lease: Lease) -> None:
        """At the reply (or when the call failed): the windows and the call's own registrations
        are released (one the responder invalidated is released as it is); cached memory stays."""
        for r in lease.regions:
            self.conn.deregister(r)
        lease.regions.clear()
        for src in lease.sources:
            src.in_flight -= 1
        lease.sources.clear()
        lease.sinks.clear()  # back to the pool once the caller's views are gone (_collect)

    def invalidate(self, lease: Lease) -> None:
        """The caller gave up: the responder can no longer reach the call's memory."""
        for r in lease.regions:
            self.conn.invalidate(r)

