"""The client's background work (open files' WRITEs and COMMITs, a stream's READs sent ahead) runs
in the nursery the connection owns, which the client hands out while it is connected."""

from __future__ import annotations

import pytest
import trio

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def test_the_client_hands_out_its_nursery_while_connected(ganesha: Ganesha, export_path: ExportPath) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"

    async def main() -> Client:
        async with Client.connect(url) as client:
            assert isinstance(client.nursery, trio.Nursery)
            async with await client.open("/f", "wb") as f:
                await f.write(b"x" * 300_000)
            async with await client.open("/f", "rb") as f:
                got = [len(v) async for _, v in f.iter_views()]  # (READs sent ahead in the client's nursery)
                assert sum(got) == 300_000
        return client

    closed = trio.run(main)
    assert (export_path.local / "f").read_bytes() == b"x" * 300_000
    with pytest.raises(ValueError, match=r"^the client is not connected$"):
        _ = closed.nursery
