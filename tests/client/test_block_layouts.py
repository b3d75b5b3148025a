"""The block layouts' I/O shell between files' opens: a file whose I/O went through the metadata server
(its layout recalled in the middle of a transfer, a WRITE through the server, a device error) asks for
a layout again at its next open, instead of going through the server for the rest of the client's life;
what was written by a layout lost with the client ID (a server restart) is sent again, by a new layout;
a layout granted before a LAYOUTCOMMIT keeps the blocks the file's layout wrote.

Nothing here reaches a server: with nothing written by the layout and no layout held, a close sends
nothing, so the layout operations are never called; where a LAYOUTGET is answered, ``LayoutGets``
stands at the edge of the layer below with the extents nfsd gave in the Debian 13 guest."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import trio

from pynfsrdma._client.block_layout import INVALID_DATA, READWRITE_DATA, CommitList, DeviceWrite
from pynfsrdma._client.block_layouts import BlockLayouts
from pynfsrdma._client.block_volumes import Volume
from pynfsrdma._client.layout_ops import LayoutOps
from pynfsrdma._client.layouts import RW, AskLayout, ByLayout, ViaMDS
from pynfsrdma._client.open_state import OpenFile
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.layout_block import pnfs_block_extent4, pnfs_block_layout4
from pynfsrdma._proto.nfs4.types import LAYOUTGET4resok, layout4, layout_content4, stateid4
from pynfsrdma._rpc.auth import auth_sys

FH = b"file-handle"
DEV = b"D" * 16


class LayoutGets:
    """The layer below, at its edge: LAYOUTGET answers the extents nfsd gave (and nothing else is sent)."""

    layout_types = None

    def __init__(self, *extents: tuple[int, int, int, int]) -> None:
        body = pnfs_block_layout4([pnfs_block_extent4(DEV, f, n, s, st) for f, n, s, st in extents])
        first, last = extents[0], extents[-1]
        self.res = LAYOUTGET4resok(False, stateid4(1, b"L" * 12), [layout4(
            first[0], last[0] + last[1] - first[0], RW,
            layout_content4(c.LAYOUT4_BLOCK_VOLUME, pnfs_block_layout4.XDR.encode(body)))])
        self.asked: list[tuple[int, int]] = []

    async def layoutget(self, fh: bytes, stateid: stateid4, layout_type: int, iomode: int, offset: int,
                        length: int, minlength: int, cred: Any) -> tuple[LAYOUTGET4resok, int]:
        self.asked.append((offset, length))
        return self.res, (16 << 20) + 777


async def test_a_file_refused_for_one_open_asks_for_a_layout_at_the_next() -> None:
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, None), nursery)
        layouts.cache.refuse(FH, "a WRITE went through the metadata server")
        assert layouts.cache.route(FH, 0, 4096, RW) == ViaMDS("a WRITE went through the metadata server")
        await layouts.closing(FH, auth_sys(0, 0))
        assert isinstance(layouts.cache.route(FH, 0, 4096, RW), AskLayout)
        assert layouts.counts == {}  # (nothing was sent)


async def test_writes_under_a_layout_lost_with_the_client_id_are_sent_again_by_a_new_layout() -> None:
    # a server restart: the client ID and its layouts are gone before the writes by the layout were
    # LAYOUTCOMMITted; the file is "lost" (its COMMIT goes to the server, whose verifier makes the
    # writer send those writes again) and asks for a new layout for them, which remembers none of
    # the blocks written under the old one
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, None), nursery)
        w = DeviceWrite(b"D" * 16, 0, 1 << 20, 4096, 0, 4096, "zeros")
        layouts.commits[FH] = CommitList()
        layouts.commits[FH].add(w)
        layouts.wrote[FH] = CommitList()
        layouts.wrote[FH].add(w)
        assert layouts.dirty(FH)
        layouts.forget_all()
        assert FH in layouts.lost and not layouts.dirty(FH) and FH not in layouts.wrote
        assert isinstance(layouts.cache.route(FH, 0, 4096, RW), AskLayout)
        assert layouts.counts["uncommitted_lost"] == 1


async def test_a_layout_granted_before_the_commit_reads_what_this_client_wrote_from_the_device() -> None:
    # the guest's restart step: blocks 258048..524288 written by one layout, then a LAYOUTGET from
    # 0 (before their LAYOUTCOMMIT) answered INVALID_DATA for them, as nfsd does; the segment kept
    # must say READWRITE_DATA there (read from the device, not as zeros), INVALID_DATA elsewhere
    async with trio.open_nursery() as nursery:
        ops = LayoutGets((0, 10485760, 98304, INVALID_DATA), (10485760, 6295552, 10584064, READWRITE_DATA))
        layouts = BlockLayouts(cast(LayoutOps, ops), nursery)
        layouts.volumes[DEV] = cast(Volume, object())  # (found on this machine before)
        layouts.wrote[FH] = CommitList()
        layouts.wrote[FH].add(DeviceWrite(DEV, 258048, 356352, 266240, 258048, 524288, "zeros"))
        of = cast(OpenFile, SimpleNamespace(fh=FH, stateid=stateid4(1, b"O" * 12)))
        seg = await layouts._layout(of, FH, 0, 4096, RW, auth_sys(0, 0))
        assert ops.asked == [(0, 16 << 20)]
        assert seg is not None
        assert [(e.file_offset, e.length, e.state) for e in seg.body] == [
            (0, 258048, INVALID_DATA), (258048, 266240, READWRITE_DATA), (524288, 10485760 - 524288, INVALID_DATA),
            (10485760, 6295552, READWRITE_DATA)]


class RestartedServer(LayoutGets):
    """A LAYOUTGET sent before a server restart, retried by the session after the recovery with the
    layout stateid of before: the recovery forgot the layouts and reclaimed the open under a new
    stateid meanwhile; the server knows only that one."""

    def __init__(self, layouts: BlockLayouts, of: Any, *extents: tuple[int, int, int, int]) -> None:
        super().__init__(*extents)
        self.layouts, self.of, self.sent = layouts, of, []

    async def layoutget(self, fh: bytes, stateid: stateid4, layout_type: int, iomode: int, offset: int,
                        length: int, minlength: int, cred: Any) -> tuple[LAYOUTGET4resok, int]:
        self.sent.append(stateid)
        if len(self.sent) == 1:
            self.layouts.forget_all()
            self.of.stateid = stateid4(1, b"R" * 12)
        if stateid != self.of.stateid:
            raise NFS4Error(c.NFS4ERR_BAD_STATEID, c.OP_LAYOUTGET)
        return await super().layoutget(fh, stateid, layout_type, iomode, offset, length, minlength, cred)


async def test_a_layoutget_caught_by_a_restart_asks_again_with_the_reclaimed_open() -> None:
    # the guest's restart step: the LAYOUTGET answered BAD_STATEID after the recovery, and the
    # file's I/O went through the metadata server for the rest of that open
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, None), nursery)
        of = SimpleNamespace(fh=FH, stateid=stateid4(1, b"O" * 12))
        ops = RestartedServer(layouts, of, (0, 16 << 20, 0, READWRITE_DATA))
        layouts.ops = cast(LayoutOps, ops)
        layouts.volumes[DEV] = cast(Volume, object())
        layouts.cache.granted(FH, stateid4(3, b"L" * 12), False, [])  # (held before the restart)
        seg = await layouts._layout(cast(OpenFile, of), FH, 0, 4096, RW, auth_sys(0, 0))
        assert ops.sent == [stateid4(3, b"L" * 12), stateid4(1, b"R" * 12)]
        assert seg is not None and seg.covers(0)
        assert isinstance(layouts.cache.route(FH, 0, 4096, RW), ByLayout)


async def test_two_partial_writes_into_one_unwritten_block_keep_each_others_bytes() -> None:
    # two WRITEs in flight share the first block of an INVALID_DATA extent: each pads its part of the
    # block, and the later one must pad with what the earlier one wrote, not with zeros
    async with trio.open_nursery() as nursery:
        ops = LayoutGets((0, 16 << 20, 98304, INVALID_DATA))
        layouts = BlockLayouts(cast(LayoutOps, ops), nursery)
        layouts.volumes[DEV] = cast(Volume, object())  # (found on this machine before)
        device = bytearray(b"\xee" * (98304 + (16 << 20)))  # (what was on the disk before: not the file's)

        async def device_io(deviceid: bytes, offset: int, view: memoryview, write: bool) -> None:
            await trio.sleep(0.01)  # (the device takes its time: both WRITEs are planned meanwhile)
            if write:
                device[offset:offset + view.nbytes] = view
            else:
                view[:] = device[offset:offset + view.nbytes]

        layouts._device_io = device_io  # type: ignore[method-assign]  # (the device, at the I/O edge)
        of = cast(OpenFile, SimpleNamespace(fh=FH, stateid=stateid4(1, b"O" * 12)))
        await layouts._layout(of, FH, 0, 4096, RW, auth_sys(0, 0))

        async def write(at: int, data: bytes) -> None:
            assert await layouts.write(of, at, data, auth_sys(0, 0))

        async with trio.open_nursery() as writers:
            writers.start_soon(write, 0, b"a" * 1000)
            writers.start_soon(write, 1000, b"b" * 1000)
        assert bytes(device[98304:98304 + 4096]) == b"a" * 1000 + b"b" * 1000 + bytes(2096)
        nursery.cancel_scope.cancel()
