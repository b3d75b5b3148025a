"""Opens of one file through the path API are independent: closing one leaves the others working.

One open owner's OPENs of one file are one open state on the server (RFC 8881 9.1.1), so with one
owner for all of them the first CLOSE would end the state the others read with. Each API open has
an open owner of its own. And I/O carries seqid 0 ("the current one", RFC 8881 8.2.2), so an
OPEN that moves a stateid on cannot make READs already sent with it stale.
"""

from __future__ import annotations

import os

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


async def test_closing_one_open_leaves_the_others_of_the_same_file_working(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    data = os.urandom(300_000)
    (export_path.local / "f").write_bytes(data)
    async with Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        first = await nfs.open("/f")
        second = await nfs.open("/f")
        writer = await nfs.open("/f", "r+")
        await first.close()
        assert await second.pread(0, len(data)) == data  # its open state outlived the other's CLOSE
        await writer.pwrite(0, b"new")
        await writer.close()
        assert await second.pread(0, 3) == b"new"
        await second.close()


async def test_parallel_whole_file_reads_of_one_file(ganesha: Ganesha, export_path: ExportPath) -> None:
    data = os.urandom(2 * 1024 * 1024 + 7)
    (export_path.local / "g").write_bytes(data)
    got: list[bytes] = []
    async with Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}", rsize=65536) as nfs:

        async def one() -> None:
            got.append(await nfs.read_file("/g"))

        async with trio.open_nursery() as n:
            for _ in range(6):
                n.start_soon(one)
    assert got == [data] * 6
