"""CB_LAYOUTRECALL in the middle of a transfer, in the order RFC 8881 12.5.5.1 and RFC 5663 2.3.x want:
the layout I/O in flight drained, a LAYOUTCOMMIT of what was written by the layout, then the
LAYOUTRETURN; I/O meanwhile through the metadata server, and a new layout asked for after the return.

``Nfsd`` stands at the edge of the layer below with what the Linux nfsd does (fs/nfsd/nfs4layouts.c):
it sends the recall again every 10 ms while it still holds a layout of the file the client answered
NFS4_OK for, takes NFS4ERR_NOMATCHING_LAYOUT for "nothing left" and forgets the layouts then, and a
LAYOUTCOMMIT of a layout it no longer holds is NFS4ERR_BADLAYOUT. The SCSI layout is used (the block
layout's I/O shell with a unit found by its designator); the "unit" is a regular file, its
registration ioctl replaced by a no-op below the I/O edge, and one device write is held in flight."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import trio
import trio.testing

from pynfsrdma._client import block_devices
from pynfsrdma._client.block_layout import INVALID_DATA
from pynfsrdma._client.block_layouts import VERIFIER, BlockLayouts
from pynfsrdma._client.layout_ops import LayoutOps
from pynfsrdma._client.layouts import ANY, NFS4_UINT64_MAX, RW, AskLayout
from pynfsrdma._client.open_state import OpenFile
from pynfsrdma._client.read_write import ReadWrite
from pynfsrdma._client.write_plan import WritePlan
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.callback import layoutrecall_file4
from pynfsrdma._proto.nfs4.compound import ResOp
from pynfsrdma._proto.nfs4.layout_block import pnfs_block_extent4
from pynfsrdma._proto.nfs4.layout_scsi import (
    pnfs_scsi_base_volume_info4,
    pnfs_scsi_deviceaddr4,
    pnfs_scsi_layout4,
    pnfs_scsi_layoutupdate4,
)
from pynfsrdma._proto.nfs4.types import LAYOUTGET4resok, device_addr4, layout4, layout_content4, stateid4
from pynfsrdma._rpc.auth import auth_sys

FH = b"file-handle"
DEV = b"S" * 16
OTHER = b"L" * 12
NAA = bytes.fromhex("6001405abcdef0123456789abcdef012")
MiB = 1 << 20
CRED = auth_sys(0, 0)
SCSI = c.LAYOUT4_SCSI


class Nfsd:
    """The metadata server: one file's layout state, and the ops it was sent, in order."""

    layout_types = [c.LAYOUT4_BLOCK_VOLUME, SCSI]

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.seqid = 0
        self.held = False
        self.recalls = 0
        self.answers: list[int] = []

    async def layoutget(self, fh: bytes, stateid: stateid4, layout_type: int, iomode: int, offset: int,
                        length: int, minlength: int, cred: Any) -> tuple[LAYOUTGET4resok, int]:
        self.sent.append(("LAYOUTGET", stateid.other))
        self.seqid += 1
        self.held = True
        body = pnfs_scsi_layout4([pnfs_block_extent4(DEV, 0, 4 * MiB, MiB, INVALID_DATA)])
        return LAYOUTGET4resok(False, stateid4(self.seqid, OTHER), [layout4(
            0, 4 * MiB, RW, layout_content4(SCSI, pnfs_scsi_layout4.XDR.encode(body)))]), 0

    async def getdeviceinfo(self, deviceid: bytes, layout_type: int, cred: Any) -> device_addr4:
        self.sent.append(("GETDEVICEINFO",))
        base = pnfs_scsi_base_volume_info4(1, 3, NAA, 0x1234)
        return device_addr4(SCSI, pnfs_scsi_deviceaddr4.XDR.encode(
            pnfs_scsi_deviceaddr4([(c.pnfs_scsi_volume_type4.PNFS_SCSI_VOLUME_BASE, base)])))

    async def layoutcommit(self, fh: bytes, stateid: stateid4, offset: int, length: int, last_write: int,
                           layout_type: int, body: bytes, cred: Any) -> int | None:
        if not self.held:
            self.sent.append(("LAYOUTCOMMIT", "NFS4ERR_BADLAYOUT"))
            raise NFS4Error(c.NFS4ERR_BADLAYOUT, c.OP_LAYOUTCOMMIT)
        ranges = pnfs_scsi_layoutupdate4.XDR.decode(body).slu_commit_list
        self.sent.append(("LAYOUTCOMMIT", [(r.sr_file_offset, r.sr_length) for r in ranges]))
        return None

    async def layoutreturn(self, fh: bytes, stateid: stateid4, layout_type: int, iomode: int, offset: int,
                           length: int, cred: Any) -> stateid4 | None:
        self.sent.append(("LAYOUTRETURN", stateid.seqid))
        self.held = False
        return None

    def recall(self, layouts: BlockLayouts) -> int:
        """One CB_LAYOUTRECALL of the whole file (the seqid bumped for the first, as nfsd does)."""
        if self.recalls == 0:
            self.seqid += 1
        self.recalls += 1
        args = SimpleNamespace(clora_type=SCSI, clora_iomode=ANY, clora_changed=True, clora_recall=(
            c.LAYOUTRECALL4_FILE, layoutrecall_file4(FH, 0, NFS4_UINT64_MAX, stateid4(self.seqid, OTHER))))
        status = layouts.on_recall(args)
        self.answers.append(status)
        if status == c.NFS4ERR_NOMATCHING_LAYOUT:
            self.held = False  # (nfsd4_cb_layout_release: every layout of the stateid forgotten)
        return status

    async def recalling(self, layouts: BlockLayouts, twice: trio.Event) -> None:
        """nfsd4_cb_layout_done: the recall sent again every 10 ms while a layout is held."""
        while self.held:
            self.recall(layouts)
            if self.recalls == 2:
                twice.set()
            await trio.sleep(0.01)
        twice.set()


@pytest.fixture
def no_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_devices, "pr_register", lambda path, key: None)
    monkeypatch.setattr(block_devices, "pr_unregister", lambda path, key: None)


async def test_a_recall_mid_transfer_drains_commits_then_returns(tmp_path: Path, no_registration: None) -> None:
    unit = tmp_path / "sdx"
    unit.write_bytes(bytes(8 * MiB))
    server = Nfsd()
    of = cast(OpenFile, SimpleNamespace(fh=FH, stateid=stateid4(1, b"O" * 12)))
    first, second = os.urandom(8192), os.urandom(8192)
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, server), nursery)
        layouts.find_designator = lambda code_set, designator_type, designator: (str(unit), 8 * MiB)
        assert await layouts.write(of, 0, first, CRED)
        # the next write's device I/O held in flight when the recall comes
        dev = layouts.devices[str(unit)]
        real_write = dev.write_from
        in_flight, go = trio.Event(), trio.Event()

        async def held_write(buf: memoryview, offset: int) -> None:
            in_flight.set()
            await go.wait()
            await real_write(buf, offset)

        dev.write_from = held_write  # type: ignore[method-assign]
        results: list[bool] = []

        async def write_second() -> None:
            results.append(await layouts.write(of, 8192, second, CRED))

        nursery.start_soon(write_second)
        await in_flight.wait()
        twice = trio.Event()
        nursery.start_soon(server.recalling, layouts, twice)
        await twice.wait()
        await trio.testing.wait_all_tasks_blocked()
        # nothing committed or returned while the write under the layout is in flight; a write of the
        # recalled range meanwhile goes through the metadata server
        assert [op[0] for op in server.sent] == ["LAYOUTGET", "GETDEVICEINFO"]

        async def write_third() -> None:
            results.append(await layouts.write(of, 16384, b"m" * 4096, CRED))

        nursery.start_soon(write_third)
        await trio.testing.wait_all_tasks_blocked()
        assert layouts.reasons["layout recalled"] == 1
        go.set()
        with trio.fail_after(10):
            while server.held:
                await trio.sleep(0.01)
            while layouts.cache.files.get(FH) is not None and layouts.cache.files[FH].recalls:
                await trio.sleep(0.01)
            while len(results) < 2:  # (the third's answer may come after the return)
                await trio.sleep(0.01)
        assert sorted(results) == [False, True]  # (the second by the layout, the third for the server)
        # the LAYOUTCOMMIT of both writes by the layout, then the return (of the recall's seqid)
        assert server.sent[2:] == [("LAYOUTCOMMIT", [(0, 16384)]), ("LAYOUTRETURN", 2)]
        # every recall while the return was under way was answered NFS4_OK ("it is coming")
        assert set(server.answers) == {c.NFS4_OK}
        assert FH not in layouts.lost and not layouts.dirty(FH)
        assert not any("BADLAYOUT" in why for why in layouts.reasons)
        # the file's next open asks for a new layout, with the open's stateid (the layout's went with
        # the return)
        await layouts.closing(FH, CRED)
        assert isinstance(layouts.cache.route(FH, 0, 4096, RW), AskLayout)
        assert await layouts.write(of, 0, b"n" * 4096, CRED)
        assert server.sent[-1] == ("LAYOUTGET", b"O" * 12)
        layouts.close()
    with open(unit, "rb") as f:
        f.seek(MiB)
        assert f.read(16384) == b"n" * 4096 + first[4096:] + second


async def test_a_recall_before_the_layoutget_reply_is_taken_in_is_delayed(tmp_path: Path,
                                                                          no_registration: None) -> None:
    """nfsd grants a layout and, a WRITE through it waiting for the file, recalls it at once: the
    recall can reach the client before the LAYOUTGET's reply. Answered "no matching layout", nfsd
    forgets the layout, the client writes by it anyway and its LAYOUTCOMMIT is refused (the Linux
    client then loses that write: it takes NFS4ERR_BADLAYOUT for success). Answered NFS4ERR_DELAY,
    the recall comes again once the layout is held, and the write by it is committed and returned."""
    unit = tmp_path / "sdx"
    unit.write_bytes(bytes(8 * MiB))
    server = Nfsd()
    of = cast(OpenFile, SimpleNamespace(fh=FH, stateid=stateid4(1, b"O" * 12)))
    data = os.urandom(8192)
    granted, reply = trio.Event(), trio.Event()
    grant = server.layoutget

    async def reply_late(*args: Any) -> tuple[LAYOUTGET4resok, int]:
        res = await grant(*args)
        granted.set()
        await reply.wait()
        return res

    server.layoutget = reply_late  # type: ignore[method-assign]
    results: list[bool] = []
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, server), nursery)
        layouts.find_designator = lambda code_set, designator_type, designator: (str(unit), 8 * MiB)

        async def write() -> None:
            results.append(await layouts.write(of, 0, data, CRED))

        nursery.start_soon(write)
        await granted.wait()
        assert server.recall(layouts) == c.NFS4ERR_DELAY
        assert server.held
        reply.set()
        twice = trio.Event()
        nursery.start_soon(server.recalling, layouts, twice)
        with trio.fail_after(10):
            while server.held or not results:
                await trio.sleep(0.01)
        assert results == [True]
        assert [op[0] for op in server.sent] == ["LAYOUTGET", "GETDEVICEINFO", "LAYOUTCOMMIT", "LAYOUTRETURN"]
        assert server.sent[2] == ("LAYOUTCOMMIT", [(0, 8192)])
        assert c.NFS4ERR_NOMATCHING_LAYOUT not in server.answers[:-1] and c.NFS4_OK in server.answers
        assert FH not in layouts.lost and not layouts.dirty(FH)
        layouts.close()
    with open(unit, "rb") as f:
        f.seek(MiB)
        assert f.read(8192) == data


NFSD_VERF = b"nfsd-v01"


class NfsdMds(Nfsd):
    """The same server as the COMPOUND runner of ``ReadWrite``: WRITE and COMMIT through it answered
    with its write verifier."""

    def __init__(self) -> None:
        super().__init__()
        self.client = SimpleNamespace(backchannel=SimpleNamespace(), reclaim_hooks=[])
        self.close_hooks: list[Any] = []
        self.maxread = 1 << 20

    async def run_with_open(self, of: Any, build: Any, cred: Any, *args: Any, **kw: Any) -> list[ResOp]:
        write = build(of.stateid)[-1]
        self.sent.append(("WRITE", write.offset))
        return [ResOp(c.OP_PUTFH, 0), ResOp(c.OP_WRITE, 0, SimpleNamespace(
            count=memoryview(write.data).nbytes, committed=c.UNSTABLE4, writeverf=NFSD_VERF))]

    async def query_with_open(self, of: Any, build: Any, cred: Any, parse: Any, *args: Any, **kw: Any) -> Any:
        return parse(await self.run_with_open(of, build, cred))

    async def run(self, ops: list[Any], cred: Any, path: str | None = None) -> list[ResOp]:
        self.sent.append(("COMMIT",))
        return [ResOp(c.OP_PUTFH, 0), ResOp(c.OP_COMMIT, 0, SimpleNamespace(writeverf=NFSD_VERF))]


async def test_what_the_recall_committed_is_not_sent_again_by_the_next_commit(
        tmp_path: Path, no_registration: None) -> None:
    # the writer's pieces: one by the layout (committed by the recall's LAYOUTCOMMIT), one through
    # nfsd after the recall; the COMMIT after them confirms both, and nothing is written twice
    unit = tmp_path / "sdx"
    unit.write_bytes(bytes(8 * MiB))
    server = NfsdMds()
    of = cast(OpenFile, SimpleNamespace(fh=FH, stateid=stateid4(1, b"O" * 12)))
    plan = WritePlan(1 << 20)
    async with trio.open_nursery() as nursery:
        rw = ReadWrite(cast(LayoutOps, server))
        layouts = rw.use_pnfs(nursery)
        layouts.find_designator = lambda code_set, designator_type, designator: (str(unit), 8 * MiB)
        for at in (0, 8192):
            if at:  # (the recall comes before the second piece: it goes through nfsd)
                assert server.recall(layouts) == c.NFS4_OK
            with trio.fail_after(10):
                _, committed, verf = await rw.write(of, at, b"w" * 8192, CRED)
            plan.answered(at, b"w" * 8192, committed, verf)
        pending = plan.commit_begins()
        assert [p.verifier for p in pending] == [VERIFIER, NFSD_VERF]
        verifiers = await rw.commit_verifiers(FH, CRED)
        assert plan.commit_answered(*verifiers) == []
        layouts.close()
    assert [op[0] for op in server.sent] == ["LAYOUTGET", "GETDEVICEINFO", "LAYOUTCOMMIT", "LAYOUTRETURN",
                                             "WRITE", "COMMIT"]
