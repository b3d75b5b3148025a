"""The block layouts' I/O shell between files' opens: a file whose I/O went through the metadata server
(its layout recalled in the middle of a transfer, a WRITE through the server, a device error) asks for
a layout again at its next open, instead of going through the server for the rest of the client's life;
what was written by a layout lost with the client ID (a server restart) is sent again through the server.

Nothing here reaches a server: with nothing written by the layout and no layout held, a close sends
nothing, so the layout operations are never called."""

from __future__ import annotations

from typing import cast

import trio

from pynfsrdma._client.block_layout import CommitList, DeviceWrite
from pynfsrdma._client.block_layouts import BlockLayouts
from pynfsrdma._client.layout_ops import LayoutOps
from pynfsrdma._client.layouts import RW, AskLayout, ViaMDS
from pynfsrdma._rpc.auth import auth_sys

FH = b"file-handle"


async def test_a_file_refused_for_one_open_asks_for_a_layout_at_the_next() -> None:
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, None), nursery)
        layouts.cache.refuse(FH, "a WRITE went through the metadata server")
        assert layouts.cache.route(FH, 0, 4096, RW) == ViaMDS("a WRITE went through the metadata server")
        await layouts.closing(FH, auth_sys(0, 0))
        assert isinstance(layouts.cache.route(FH, 0, 4096, RW), AskLayout)
        assert layouts.counts == {}  # (nothing was sent)


async def test_writes_under_a_layout_lost_with_the_client_id_go_through_the_server_until_the_next_open() -> None:
    # a server restart: the client ID and its layouts are gone before the writes by the layout were
    # LAYOUTCOMMITted; they are sent again through the server (the file is "lost"), and so is the
    # rest of the file's I/O, until its next open asks for a layout again
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, None), nursery)
        layouts.commits[FH] = CommitList()
        layouts.commits[FH].add(DeviceWrite(b"D" * 16, 0, 1 << 20, 4096, 0, 4096, "zeros"))
        assert layouts.dirty(FH)
        layouts.forget_all()
        assert FH in layouts.lost and not layouts.dirty(FH)
        assert isinstance(layouts.cache.route(FH, 4096, 4096, RW), ViaMDS)
        assert layouts.counts["uncommitted_lost"] == 1
        await layouts.closing(FH, auth_sys(0, 0))
        assert isinstance(layouts.cache.route(FH, 4096, 4096, RW), AskLayout)
