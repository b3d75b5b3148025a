"""Held: a free trio.Lock is taken without yielding to the scheduler; a held one is waited for."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pynfsrdma._lock import Held


def test_a_free_lock_is_taken_without_a_trip_through_the_scheduler() -> None:
    async def main() -> None:
        lock = trio.Lock()
        with trio.CancelScope() as scope:
            scope.cancel()
            # no checkpoint: a cancelled scope is not noticed (``async with lock`` raises Cancelled here)
            async with Held(lock):
                assert lock.locked()
            assert not lock.locked()
        assert not scope.cancelled_caught

    trio.run(main)


def test_a_held_lock_is_waited_for_and_handed_over_in_turn() -> None:
    async def main() -> None:
        lock = trio.Lock()
        order: list[str] = []

        async def waiter(name: str) -> None:
            async with Held(lock):
                order.append(name)

        async with trio.open_nursery() as nursery:
            await lock.acquire()
            nursery.start_soon(waiter, "first")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(waiter, "second")
            await trio.testing.wait_all_tasks_blocked()
            assert order == []  # both wait
            lock.release()
        assert order == ["first", "second"] and not lock.locked()

    trio.run(main)


def test_the_lock_is_released_when_the_block_raises() -> None:
    async def main() -> None:
        lock = trio.Lock()
        with pytest.raises(ValueError):
            async with Held(lock):
                raise ValueError("inside")
        assert not lock.locked()

    trio.run(main)
