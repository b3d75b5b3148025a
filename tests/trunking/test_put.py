"""``Client.put`` (a local file to NFS) over trunked paths: a pipeline that reads the next block of the
local file while the WRITEs of the blocks before it are in flight, over every path of the session;
a put whose server goes away mid-way raises, and never returns as if the whole file were copied.

The paths are proxies in front of the trunking advertiser (the trunking fixtures), whose byte
counters say what each carried.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest
import trio

from pynfsrdma._client.api import Client
from pynfsrdma._session.path_set import PathState

MiB = 1 << 20


async def all_up(nfs: Client, count: int) -> None:
    assert nfs.trunking is not None
    with trio.fail_after(15):
        await nfs.trunking.settled.wait()
        while len([p for p in nfs.trunking.paths.paths if p.state is PathState.UP]) < count:
            await nfs.trunking.paths.wait_changed()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_a_put_over_four_paths_uses_every_one(advertised, export_path, tmp_path: Path) -> None:
    adv = await advertised(4)
    src = tmp_path / "src"
    src.write_bytes(os.urandom(48 * MiB + 12345))
    size = src.stat().st_size
    seen: list[int] = []
    async with Client.connect(adv.url(export_path.remote), timeo=30, hard=True) as nfs:
        await all_up(nfs, 4)
        before = [p.stats.bytes_to_server for p in adv.paths]
        assert await nfs.put(str(src), "/put-4", seen.append) == size
        carried = [p.stats.bytes_to_server - b for p, b in zip(adv.paths, before, strict=True)]
    assert seen == sorted(seen) and seen[-1] == size
    assert sum(carried) >= size
    # every path carried a real part of the file (an equal share is a quarter of it)
    assert min(carried) >= size // 16, carried
    assert sha((export_path.local / "put-4").read_bytes()) == sha(src.read_bytes())


async def test_the_next_block_is_read_while_the_writes_before_it_are_unanswered(
    advertised, export_path, tmp_path: Path
) -> None:
    """The local file is a FIFO fed block by block (its size, 0, says nothing: put reads to its end).
    Once the first block's WRITE went out, the path stalls: that WRITE stays unanswered, and put goes on
    reading the blocks after it (their WRITEs go out behind the first) instead of waiting for the
    answer; meanwhile the feeding is not held up by put's reads. Restored, the put ends with the file
    intact."""
    adv = await advertised(1)
    wsize = 64 * 1024
    blocks = [os.urandom(wsize) for _ in range(8)]  # more than the pipe holds (64 KiB) beyond the first
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    async with Client.connect(adv.url(export_path.remote), timeo=30, hard=True, wsize=wsize) as nfs:
        await all_up(nfs, 1)
        fed: list[int] = []
        result: list[int] = []

        async def put() -> None:
            result.append(await nfs.put(str(fifo), "/from-fifo"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(put)

            def open_and_feed_the_first() -> int:
                fd = os.open(fifo, os.O_WRONLY)  # (once put has opened it)
                os.write(fd, blocks[0])
                return fd

            fd = await trio.to_thread.run_sync(open_and_feed_the_first)
            try:
                with trio.fail_after(10):  # the first block's WRITE goes out on the path
                    while adv.paths[0].stats.bytes_to_server < wsize:
                        await trio.sleep(0.005)
                adv.paths[0].stall()
                os.set_blocking(fd, False)
                with trio.move_on_after(10):
                    for i, block in enumerate(blocks[1:], 1):
                        view = memoryview(block)
                        while view.nbytes:
                            try:
                                view = view[os.write(fd, view) :]
                            except BlockingIOError:
                                await trio.sleep(0.005)
                        fed.append(i)
                assert fed == list(range(1, len(blocks))), (
                    f"put read {len(fed)} blocks beyond the first while its WRITE was unanswered"
                )
                assert not result  # (the stalled path answered nothing: put is not over)
                adv.paths[0].restore()
            finally:
                os.close(fd)
    assert result == [len(blocks) * wsize]
    assert sha((export_path.local / "from-fifo").read_bytes()) == sha(b"".join(blocks))


@pytest.mark.parametrize("fault", ["cut", "stall"])
async def test_a_put_whose_server_goes_away_mid_way_raises(
    advertised, export_path, tmp_path: Path, fault: str
) -> None:
    """A soft mount (timeo 1 s, one retransmission): the only path is cut (connections reset, new ones
    refused) or stalled once 4 MiB went over it. put raises an OSError naming why; what the server
    holds is shorter than the source, and put never returned as if it were whole."""
    adv = await advertised(1)
    src = tmp_path / "src"
    data = os.urandom(64 * MiB)
    src.write_bytes(data)
    seen: list[int] = []
    async with Client.connect(adv.url(export_path.remote), timeo=1, retrans=1) as nfs:
        await all_up(nfs, 1)
        start = adv.paths[0].stats.bytes_to_server

        async def fault_mid_way() -> None:
            while adv.paths[0].stats.bytes_to_server - start < 4 * MiB:
                await trio.sleep(0.002)
            adv.paths[0].apply(fault)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fault_mid_way)
            with pytest.raises(OSError) as ei, trio.fail_after(60):
                await nfs.put(str(src), "/cut-short", seen.append)
        adv.paths[0].restore()
    err = ei.value
    # what the user sees: EIO, "127.0.0.2:PORT: no answer within 2 s (soft mount: failing at once ...)"
    assert err.errno == errno.EIO, repr(err)
    assert adv.address(0) in str(err) and "no answer" in str(err)
    on_server = (export_path.local / "cut-short").read_bytes()
    assert 0 < len(on_server) < len(data)  # what went before the fault, and not all of it
