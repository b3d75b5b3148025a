"""A stat answered by the server while a write of the same file is handed to the mount must not be
cached: the server's size from before the write would later be given to the kernel as current, and
the kernel would cut the file short (reads near the end then find end of file: fio's verify pass
with several jobs on one file saw it). The path is slowed down so that the GETATTR is surely still on
its way when the write comes."""

from __future__ import annotations

import os

import trio

from pynfsrdma._testbed.ganesha import ExportPath

PIECE = 4096
DELAY_MS = 150  # each way: a round trip takes about 0.3 s


async def test_size_from_a_getattr_older_than_a_write_is_not_kept(
    proxied_paths, mount_url, export_path: ExportPath
) -> None:
    paths = await proxied_paths(count=1)
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}"
    m = await trio.to_thread.run_sync(mount_url, url, "hard")
    name = m.path / "growing"
    fd = await trio.to_thread.run_sync(lambda: os.open(name, os.O_WRONLY | os.O_CREAT, 0o644))
    try:
        await trio.to_thread.run_sync(os.pwrite, fd, b"a" * PIECE, 0)
        await trio.to_thread.run_sync(os.fsync, fd)
        paths[0].delay(DELAY_MS)
        sizes: list[int] = []

        async def stat_once() -> None:
            st = await trio.to_thread.run_sync(os.stat, name)
            sizes.append(st.st_size)

        async with trio.open_nursery() as n:
            n.start_soon(stat_once)  # its GETATTR goes out, and takes a round trip ...
            await trio.sleep(DELAY_MS / 1000 / 2)
            # ... while the file grows: the mount gathers the write and answers at once
            await trio.to_thread.run_sync(os.pwrite, fd, b"b" * PIECE, PIECE)
        assert sizes[0] in (PIECE, 2 * PIECE)  # (whichever the kernel kept of that reply)

        # the kernel asks again (the write made its attributes old): the answer is the grown file
        assert (await trio.to_thread.run_sync(os.stat, name)).st_size == 2 * PIECE
        assert (await trio.to_thread.run_sync(os.fstat, fd)).st_size == 2 * PIECE
        paths[0].restore()
        data = await trio.to_thread.run_sync(lambda: name.read_bytes())
        assert data == b"a" * PIECE + b"b" * PIECE
    finally:
        paths[0].restore()
        await trio.to_thread.run_sync(os.close, fd)
        rc = await trio.to_thread.run_sync(m.unmount)
    assert rc == 0, m.log.read_text()[-3000:]
    assert (export_path.local / "growing").read_bytes() == b"a" * PIECE + b"b" * PIECE
