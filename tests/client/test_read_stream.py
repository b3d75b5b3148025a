"""The open-file engine's READ pipelines, without a server: a READ function that answers when the
test says, out of order, so that what starts when, and what is handed over in which order, shows.

:class:`ReadStream` (a streamed read: ``File.iter_views``) and :func:`read_range` keep READs in
flight as a pipeline: the next starts as soon as any is answered, not when a whole window is; the
replies come out in the file's order, as the very views the READs returned (no copy)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from pynfsrdma._client.open_file import ReadStream, read_range

MAXREAD = 4
DATA = bytes(range(256)) * 4  # 1024 bytes: 256 READs of 4


class Server:
    """READs of DATA[:size]: each waits until released (``answer``); ``short`` offsets answer with
    half of what was asked; ``fail`` offsets raise."""

    def __init__(self, size: int = len(DATA), auto: bool = False) -> None:
        self.size = size
        self.auto = auto
        self.started: list[tuple[int, int]] = []
        self.gates: dict[int, trio.Event] = {}
        self.answered: list[int] = []
        self.views: dict[int, memoryview] = {}
        self.short: set[int] = set()
        self.fail: set[int] = set()
        self.running = 0
        self.most = 0

    async def read(self, offset: int, count: int) -> tuple[memoryview, bool]:
        self.started.append((offset, count))
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            gate = self.gates.setdefault(offset, trio.Event())
            if self.auto:
                gate.set()
            await gate.wait()
            if offset in self.fail:
                raise OSError(5, "READ failed", str(offset))
            if offset in self.short:
                count //= 2
            view = memoryview(DATA)[offset : min(offset + count, self.size)]
            self.answered.append(offset)
            self.views[offset] = view
            return view, offset + count >= self.size
        finally:
            self.running -= 1

    def answer(self, offset: int) -> None:
        self.gates.setdefault(offset, trio.Event()).set()


async def drain(stream: ReadStream, out: list[Any]) -> None:
    while (view := await stream.next()) is not None:
        out.append(view)


async def test_the_next_read_starts_when_any_is_answered_and_replies_come_in_order() -> None:
    server = Server(size=10 * MAXREAD)
    out: list[Any] = []
    async with trio.open_nursery() as nursery:
        stream = ReadStream(server.read, 0, MAXREAD, 3, lambda: server.size, nursery)
        nursery.start_soon(drain, stream, out)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(o for o, _ in server.started) == [0, 4, 8]  # the window: 3
        server.answer(8)  # the third is answered first: it waits for the two before it ...
        await trio.testing.wait_all_tasks_blocked()
        assert out == [] and len(server.started) == 3  # ... and holds its place in the window
        server.answer(0)  # the first: handed over, and the next READ goes out at once
        await trio.testing.wait_all_tasks_blocked()
        assert len(out) == 1 and sorted(o for o, _ in server.started) == [0, 4, 8, 12]
        for offset in range(4, 10 * MAXREAD, MAXREAD):
            server.answer(offset)
            await trio.testing.wait_all_tasks_blocked()
    assert b"".join(out) == DATA[: 10 * MAXREAD]
    assert all(view is server.views[i * MAXREAD] for i, view in enumerate(out))  # the READs' own views
    assert server.most <= 3


async def test_a_whole_file_streams_with_reads_answered_in_any_order() -> None:
    server = Server(auto=True)
    out: list[Any] = []
    async with trio.open_nursery() as nursery:
        stream = ReadStream(server.read, 0, MAXREAD, 8, lambda: server.size, nursery)
        await drain(stream, out)
    assert b"".join(out) == DATA
    assert server.most <= 8
    assert max(o for o, _ in server.started) < len(DATA)  # none past the end once it was known


async def test_a_short_read_is_asked_on_ahead_of_those_after_it() -> None:
    server = Server(size=8 * MAXREAD, auto=True)
    server.short = {8}
    out: list[Any] = []
    async with trio.open_nursery() as nursery:
        await drain(ReadStream(server.read, 0, MAXREAD, 4, lambda: server.size, nursery), out)
    assert b"".join(out) == DATA[: 8 * MAXREAD]
    assert (10, 2) in server.started  # the half the short READ did not carry


async def test_the_stream_asks_past_the_known_size_one_read_at_a_time() -> None:
    server = Server(size=6 * MAXREAD, auto=True)
    known = 2 * MAXREAD  # the file grew since its size was learned
    out: list[Any] = []
    async with trio.open_nursery() as nursery:
        await drain(ReadStream(server.read, 2, MAXREAD, 8, lambda: known, nursery), out)
    assert b"".join(out) == DATA[2 : 6 * MAXREAD]
    assert server.most == 2  # (the READs up to the known end, then one at a time past it)


async def test_an_error_comes_in_its_place_and_ends_the_reads_after_it() -> None:
    server = Server(size=10 * MAXREAD)
    server.fail = {8}
    out: list[Any] = []
    async with trio.open_nursery() as nursery:
        stream = ReadStream(server.read, 0, MAXREAD, 4, lambda: server.size, nursery)
        for offset in (8, 12, 0, 4):
            server.answer(offset)
        with pytest.raises(OSError, match="READ failed"):
            await drain(stream, out)
        await trio.testing.wait_all_tasks_blocked()
    assert b"".join(out) == DATA[:8]  # what came before the error, in order
    assert server.running == 0  # the READs in flight after it were cancelled


async def test_the_window_is_asked_again_as_each_read_goes_out() -> None:
    server = Server(size=40 * MAXREAD)
    window = [2]
    out: list[Any] = []
    async with trio.open_nursery() as nursery:
        stream = ReadStream(server.read, 0, MAXREAD, lambda: window[0], server.size.__int__, nursery)
        nursery.start_soon(drain, stream, out)
        await trio.testing.wait_all_tasks_blocked()
        assert server.running == 2
        window[0] = 6  # another path came up
        server.answer(0)
        await trio.testing.wait_all_tasks_blocked()
        assert server.running == 6
        server.auto = True
        for offset, _ in list(server.started):
            server.answer(offset)
    assert b"".join(out) == DATA[: 40 * MAXREAD]


@pytest.mark.parametrize("window", [3, lambda: 3])
async def test_read_range_keeps_a_pipeline_of_window_reads(window: int | Callable[[], int]) -> None:
    server = Server(size=9 * MAXREAD)
    result: list[Any] = []

    async def reader() -> None:
        result.append(await read_range(server.read, 0, 9 * MAXREAD, MAXREAD, window))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert server.running == 3
        server.answer(4)  # any one answered: the next goes out
        await trio.testing.wait_all_tasks_blocked()
        assert server.running == 3 and len(server.started) == 4
        server.auto = True
        for offset, _ in list(server.started):
            server.answer(offset)
    views, eof = result[0]
    assert eof and b"".join(views) == DATA[: 9 * MAXREAD]
    assert server.most == 3
