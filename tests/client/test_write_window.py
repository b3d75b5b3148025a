"""The open-file engine's WRITEs in flight follow the session's window (NFSv4.io_window: it grows
with the live paths and their bandwidth-delay products), asked again as each WRITE goes out. A
stand-in for the NFSv4 layer below the engine answers WRITEs when the test says."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from pynfsrdma._client.open_file import FileWriter
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._rpc.auth import auth_sys

WSIZE = 1024
VERF = b"v" * 8


class OpenFile:
    fh = b"fh"
    stateid = None


class NFS:
    """WRITE and COMMIT as the engine calls them, each WRITE waiting for ``release`` (the NFSv4
    face's io_window, and its read_write family: this object too)."""

    def __init__(self, window: int) -> None:
        self.read_write = self
        self.window = window
        self.running = 0
        self.most = 0
        self.written: dict[int, bytes] = {}
        self.gate = trio.Event()

    def io_window(self, io_size: int) -> int:
        assert io_size == WSIZE
        return self.window

    def release(self) -> None:
        self.gate.set()
        self.gate = trio.Event()

    async def write(self, of: Any, offset: int, data: Any, cred: Any, stable: int, **_: Any) -> tuple[int, int, bytes]:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        self.written[offset] = bytes(data)
        return len(data), stable, VERF

    async def commit(self, fh: bytes, cred: Any, **_: Any) -> bytes:
        return VERF


async def test_writes_in_flight_follow_the_window_as_it_changes() -> None:
    nfs = NFS(window=3)
    data = bytes(range(256)) * (40 * WSIZE // 256)
    async with trio.open_nursery() as nursery:
        w = FileWriter(nfs, OpenFile(), auth_sys(0, 0), nursery, WSIZE, stable=c.FILE_SYNC4)  # type: ignore[arg-type]
        nursery.start_soon(w.write, 0, memoryview(data))
        await trio.testing.wait_all_tasks_blocked()
        assert nfs.running == 3
        nfs.window = 7  # paths came up: the next WRITE to go sees it
        nfs.release()
        await trio.testing.wait_all_tasks_blocked()
        assert nfs.running == 7
        nfs.window = 2  # and went: no more go out until fewer than 2 are in flight
        nfs.release()
        await trio.testing.wait_all_tasks_blocked()
        assert nfs.running == 2
        while w.plan.in_flight or w.unsent:
            nfs.release()
            await trio.testing.wait_all_tasks_blocked()
        await w.flush()
    assert b"".join(nfs.written[o] for o in sorted(nfs.written)) == data
    assert nfs.most == 7


async def test_a_fixed_number_in_flight_is_kept_to() -> None:
    nfs = NFS(window=30)
    async with trio.open_nursery() as nursery:
        w = FileWriter(nfs, OpenFile(), auth_sys(0, 0), nursery, WSIZE, window=4, stable=c.FILE_SYNC4)  # type: ignore[arg-type]
        nursery.start_soon(w.write, 0, memoryview(bytes(20 * WSIZE)))
        await trio.testing.wait_all_tasks_blocked()
        assert nfs.running == 4
        while w.plan.in_flight or w.unsent:
            nfs.release()
            await trio.testing.wait_all_tasks_blocked()
    assert nfs.most == 4 and len(nfs.written) == 20
