"""A request cancelled while in flight leaves its slot in a known state: the next request on that
slot is neither misordered nor answered with the cancelled request's cached reply."""

from __future__ import annotations

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._testbed.ganesha import ExportPath


async def test_cancelled_call_then_the_slot_is_reused_safely(proxied_paths, export_path: ExportPath) -> None:
    paths = await proxied_paths(count=1)
    proxy = paths[0]
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}"
    async with Client.connect(url) as nfs:
        (export_path.local / "big").write_bytes(b"x" * 12345)
        session = nfs.clientid.session
        assert session is not None
        proxy.delay(500)  # each direction: the call arrives after ~0.5 s, its reply after ~1 s
        with trio.move_on_after(0.75):  # the server has executed the MKDIR; its reply is on the way
            await nfs.mkdir("/a")
        slot0 = session.table.slots[0]
        assert slot0.interrupted  # fate unknown to us: the slot must not reuse the sequence id
        proxy.restore()
        # the next requests take slot 0 again with the next sequence id; each gets its own reply
        await nfs.mkdir("/b")
        assert (await nfs.stat("/b")).is_dir
        assert (await nfs.stat("/big")).size == 12345
        assert not slot0.interrupted
        assert (export_path.local / "a").is_dir()  # the cancelled MKDIR did run on the server
        names = sorted(await nfs.listdir("/"))
        assert names == ["a", "b", "big"]
