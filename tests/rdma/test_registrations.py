"""What a large READ and WRITE cost the client's verbs provider, by its counters.

Client -> RdmaTransport -> software provider -> responder -> NFS-Ganesha, as in test_end_to_end.py.
After a warm-up transfer, a second one of the same size is measured on the client's connection:
memory registrations and deregistrations, and bytes the provider copied, per NFS call.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
from dataclasses import dataclass

import pytest
from test_end_to_end import data_of, rdma_url, responder, transport_of

from pynfsrdma._client.api import Client
from pynfsrdma._transport.rdma.provider import PinnedBuffer, ProviderCounters, buffer_address
from pynfsrdma._transport.rdma.transport import RdmaStats

MiB = 1 << 20
SIZE = 4 * MiB


@dataclass
class PerCall:
    calls: int
    registrations: int
    deregistrations: int
    bytes_copied: int
    binds: int
    windows_allocated: int
    posts: int
    chunks: int  # Read chunk segments, Write chunks and Reply chunks offered


def _per_call(c0: ProviderCounters, c1: ProviderCounters, s0: RdmaStats, s1: RdmaStats) -> PerCall:
    return PerCall(
        calls=s1.calls - s0.calls,
        registrations=c1.registrations - c0.registrations,
        deregistrations=c1.deregistrations - c0.deregistrations,
        bytes_copied=c1.bytes_copied - c0.bytes_copied,
        binds=c1.binds - c0.binds,
        windows_allocated=c1.windows_allocated - c0.windows_allocated,
        posts=c1.posts - c0.posts,
        chunks=(s1.read_chunk_segments + s1.write_chunks + s1.reply_chunks)
        - (s0.read_chunk_segments + s0.write_chunks + s0.reply_chunks),
    )


def _snapshot(t) -> tuple[ProviderCounters, RdmaStats]:
    c, s = t.conn.counters, t.stats
    return (
        dataclasses.replace(c),
        RdmaStats(**{k: getattr(s, k) for k in s.__slots__}),
    )


async def _write_then_read(nfs: Client, name: str, data: bytes) -> None:
    async with await nfs.open(name, "w") as f:
        await f.pwrite(0, data)
    async with await nfs.open(name, "r") as f:
        views, _ = await f.pread_views(0, len(data))
    h = hashlib.sha256()
    for v in views:
        h.update(v)
    assert h.digest() == hashlib.sha256(data).digest()


async def test_counters_follow_the_chunks_of_a_large_read_and_write(ganesha, export_path):
    data = data_of(SIZE, 7)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        t = transport_of(nfs)
        await _write_then_read(nfs, "/warm", data)  # warm-up
        c0, s0 = _snapshot(t)
        async with await nfs.open("/big", "w") as f:
            await f.pwrite(0, data)
        c1, s1 = _snapshot(t)
        async with await nfs.open("/big", "r") as f:
            views, _ = await f.pread_views(0, len(data))
        c2, s2 = _snapshot(t)
        assert b"".join(views) == data
        write, read = _per_call(c0, c1, s0, s1), _per_call(c1, c2, s1, s2)
        assert write.chunks > 0 and read.chunks > 0
        for what in (write, read):
            # after the warm-up: no registration at all, a memory window per chunk, no copy
            assert what.registrations == what.deregistrations == 0, what
            assert what.binds == what.chunks, what
            assert what.bytes_copied == 0, what
            # one work request on the send queue per call: its Send (the windows need none of their own)
            assert what.posts == what.calls, what
        assert t.stats.payload_bytes_copied == 0
        assert t.conn.registrations == t.resting_registrations
        # the windows come from a pool, bound again per call: never more of them than calls were
        # in flight at once (one chunk each), however many calls there were
        assert c2.windows_allocated <= t.gate.peak_in_flight < write.binds + read.binds


async def test_sends_come_from_buffers_registered_once(ganesha, export_path):
    small = data_of(1000, 3)  # a WRITE small enough to go inline with its call
    (export_path.local / "f").write_bytes(b"x" * 100)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        t = transport_of(nfs)
        await nfs.stat("/f")
        c0, s0 = _snapshot(t)
        for _ in range(20):
            async with await nfs.open("/f", "r+") as f:
                await f.pwrite(0, small)
        c1, s1 = _snapshot(t)
        assert (export_path.local / "f").read_bytes() == small
        calls = s1.calls - s0.calls
        assert calls >= 60 and c1.sends - c0.sends == calls
        # no registration and no copy in the provider for any of them: each call was marshalled
        # into a send buffer registered when the connection was made
        assert c1.registrations == c0.registrations and c1.bytes_copied == c0.bytes_copied
        assert s1.send_bytes_marshalled > s0.send_bytes_marshalled
        # the small WRITE's data went inline: marshalled into the send buffer with its call
        assert s1.payload_bytes_copied - s0.payload_bytes_copied == 20 * len(small)
        assert t.conn.registrations == t.resting_registrations == 2 * (32 + 2)


async def test_what_stays_pinned_is_bounded(ganesha, export_path):
    data = data_of(SIZE, 8)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path, pinned=2)) as nfs:
        t = transport_of(nfs)
        for name in ("/a", "/b"):
            await _write_then_read(nfs, name, data)
            # the 4 MiB source is over the bound: it is registered per call; 1 MiB sinks fit
            assert 0 < t.chunk_memory.pinned <= 2 * MiB
        assert t.conn.registrations == t.resting_registrations


async def test_pinned_0_registers_every_chunk_for_its_call(ganesha, export_path):
    data = data_of(SIZE, 9)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path, pinned=0)) as nfs:
        t = transport_of(nfs)
        await _write_then_read(nfs, "/warm", data)
        c0, s0 = _snapshot(t)
        await _write_then_read(nfs, "/big", data)
        c1, s1 = _snapshot(t)
        what = _per_call(c0, c1, s0, s1)
        assert what.registrations == what.deregistrations == what.chunks > 0 and what.binds == 0
        assert t.chunk_memory.pinned == 0


async def test_a_bad_pinned_value_is_one_clear_error(ganesha, export_path):
    async with responder(ganesha) as r:
        with pytest.raises(ValueError, match=r"^RDMA option pinned=-1 is below the minimum 0$"):
            await Client.connect(rdma_url(r, export_path, pinned=-1)).__aenter__()


async def test_the_cache_keeps_no_dropped_write_data_alive(ganesha, export_path):
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        t = transport_of(nfs)
        async with await nfs.open("/s", "w") as f:
            for i in range(6):
                await f.pwrite(i * MiB, data_of(MiB, 20 + i))  # a new bytes object each time
                # (each is kept by the write gathering until a COMMIT covers it)
                assert t.chunk_memory.pinned_sources <= (i + 1) * MiB
        # the close's COMMIT let go of them all: the next call releases every one of them
        async with await nfs.open("/t", "w") as f:
            await f.pwrite(0, data_of(MiB, 30))
            assert t.chunk_memory.pinned_sources == MiB
        assert (export_path.local / "s").read_bytes()[5 * MiB :] == data_of(MiB, 25)



def test_buffer_addresses_do_not_depend_on_other_users_of_the_python_api():
    """Another module's ctypes declaration of PyObject_GetBuffer (argtypes naming a structure of
    its own, as ctypes.pythonapi's shared function objects allow) leaves ours working."""

    class OtherPyBuffer(ctypes.Structure):
        _fields_ = [("buf", ctypes.c_void_p)]

    api = ctypes.pythonapi.PyObject_GetBuffer
    saved = api.argtypes
    api.argtypes = [ctypes.py_object, ctypes.POINTER(OtherPyBuffer), ctypes.c_int]
    try:
        data = data_of(4096, 1)
        view = memoryview(data)
        assert buffer_address(view[100:]) - buffer_address(view) == 100
        pin = PinnedBuffer(view[8:])
        assert pin.address == buffer_address(view) + 8 and pin.length == 4088
        pin.release()
    finally:
        api.argtypes = saved
