"""Taking a trio.Lock without a trip through the scheduler when it is free."""

from __future__ import annotations

import trio


class Held:
    """``async with Held(lock):`` holds ``lock`` like ``async with lock:``, but a free lock is taken at
    once. ``trio.Lock.acquire`` yields to the scheduler even then (a checkpoint): one more turn of the
    event loop, an epoll_wait, for each lock a FUSE request or an RPC takes on its way."""

    __slots__ = ("lock",)

    def __init__(self, lock: trio.Lock) -> None:
        self.lock = lock

    async def __aenter__(self) -> None:
        try:
            self.lock.acquire_nowait()
        except trio.WouldBlock:
            await self.lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()


__all__ = ["Held"]
