"""The workload of a failover test: workers that create a file exclusively (create, write, close)
and rename it, again and again, until told to stop. These operations are not idempotent: one
executed twice fails with EEXIST or ENOENT (*repeated*), and one acknowledged but lost is missing
from the final tree or holds other bytes (*lost*). How long the operations in flight when a fault hit
took to finish after it is :func:`stall_times`.

Used by ``pynfsrdma failover-test`` (``_cli/failover.py``) and ``bench/bench_trunking.py``.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Sequence
from typing import Any

import trio

from .._client.api import Client

FILE_SIZE = 4096  # the bytes each created file holds: its own name, padded with dots


class CreateRename:
    """The workers' counts, errors and acknowledged renames; ``spans`` gets the (start, end) of each
    completed operation. :attr:`done` ends the workers."""

    def __init__(self, nfs: Client, work: str, spans: list[tuple[float, float]], file_size: int = FILE_SIZE) -> None:
        self.nfs = nfs
        self.work = work
        self.spans = spans
        self.file_size = file_size
        self.done = trio.Event()
        self.completed = 0
        self.repeated = 0
        self.errors: list[str] = []
        self.acknowledged: list[tuple[str, str]] = []  # (name created, name renamed to)

    def content(self, name: str) -> bytes:
        return name.encode().ljust(self.file_size, b".")

    async def op(self, coro: Awaitable[Any]) -> bool:
        start = trio.current_time()
        try:
            await coro
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOENT):
                self.repeated += 1
            self.errors.append(str(e))
            return False
        self.spans.append((start, trio.current_time()))
        self.completed += 1
        return True

    async def create(self, name: str) -> None:
        async with await self.nfs.open(name, "x") as f:
            await f.write(self.content(name))

    async def worker(self, w: int) -> None:
        k = 0
        while not self.done.is_set():
            tmp, final = f"{self.work}/t{w}-{k}", f"{self.work}/f{w}-{k}"
            if await self.op(self.create(tmp)) and await self.op(self.nfs.rename(tmp, final)):
                self.acknowledged.append((tmp, final))
            k += 1

    async def lost(self) -> int:
        """The acknowledged renames whose file is missing from the work directory or holds other bytes."""
        present = set(await self.nfs.listdir(self.work))
        lost = 0
        for tmp, final in self.acknowledged:
            name = final.rsplit("/", 1)[1]
            if name not in present or (await self.nfs.read_file(final)) != self.content(tmp):
                lost += 1
        return lost


def stall_times(spans: Sequence[tuple[float, float]], fault_times: Sequence[float]) -> list[float]:
    """For each fault, how long the longest operation in flight when it hit took to finish after it."""
    return [max((end - t for start, end in spans if start <= t < end), default=0.0) for t in fault_times]
