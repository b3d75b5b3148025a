"""The SCSI layout (RFC 8154) in the block layouts' I/O shell: picked when the export hands it out,
its unit found by its designator, this client ID's reservation key registered before the first I/O
and taken off when the client ends, extents written as the block layout writes them, and a
LAYOUTCOMMIT of file ranges; a unit not here, or one that refuses the registration: the I/O through
the metadata server, and no error.

``ScsiServer`` stands at the edge of the layer below with what nfsd answers (one BASE volume with an
NAA designator, the key made of the client ID, INVALID_DATA extents for a new file); the "device" is a
regular file, and the registration ioctl (a SCSI command a file cannot take) is replaced below the
I/O edge by a recorder."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import trio

from pynfsrdma._client import block_devices
from pynfsrdma._client.block_layout import INVALID_DATA
from pynfsrdma._client.block_layouts import BlockLayouts
from pynfsrdma._client.layout_ops import LayoutOps
from pynfsrdma._client.layouts import RW
from pynfsrdma._client.open_state import OpenFile
from pynfsrdma._proto.nfs4 import const as c
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
NAA = bytes.fromhex("6001405abcdef0123456789abcdef012")
KEY = 0x6563_1A2B_0000_0003
MiB = 1 << 20
CRED = auth_sys(0, 0)


class ScsiServer:
    """nfsd at the edge of the layer below: an export that hands out the SCSI and block layouts."""

    layout_types = [c.LAYOUT4_BLOCK_VOLUME, c.LAYOUT4_SCSI]

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    async def layoutget(self, fh: bytes, stateid: stateid4, layout_type: int, iomode: int, offset: int,
                        length: int, minlength: int, cred: Any) -> tuple[LAYOUTGET4resok, int]:
        self.sent.append(("LAYOUTGET", layout_type))
        body = pnfs_scsi_layout4([pnfs_block_extent4(DEV, 0, 4 * MiB, MiB, INVALID_DATA)])
        return LAYOUTGET4resok(False, stateid4(1, b"L" * 12), [layout4(
            0, 4 * MiB, RW, layout_content4(c.LAYOUT4_SCSI, pnfs_scsi_layout4.XDR.encode(body)))]), 0

    async def getdeviceinfo(self, deviceid: bytes, layout_type: int, cred: Any) -> device_addr4:
        self.sent.append(("GETDEVICEINFO", layout_type))
        base = pnfs_scsi_base_volume_info4(1, 3, NAA, KEY)
        return device_addr4(c.LAYOUT4_SCSI, pnfs_scsi_deviceaddr4.XDR.encode(
            pnfs_scsi_deviceaddr4([(c.pnfs_scsi_volume_type4.PNFS_SCSI_VOLUME_BASE, base)])))

    async def layoutcommit(self, fh: bytes, stateid: stateid4, offset: int, length: int, last_write: int,
                           layout_type: int, body: bytes, cred: Any) -> int | None:
        ranges = pnfs_scsi_layoutupdate4.XDR.decode(body).slu_commit_list
        self.sent.append(("LAYOUTCOMMIT", layout_type, [(r.sr_file_offset, r.sr_length) for r in ranges], last_write))
        return None

    async def layoutreturn(self, fh: bytes, stateid: stateid4, layout_type: int, iomode: int, offset: int,
                           length: int, cred: Any) -> stateid4 | None:
        self.sent.append(("LAYOUTRETURN", layout_type))
        return None


def unit(tmp_path: Path) -> str:
    path = tmp_path / "sdx"
    path.write_bytes(bytes(8 * MiB))
    return str(path)


def open_file() -> OpenFile:
    return cast(OpenFile, SimpleNamespace(fh=FH, stateid=stateid4(1, b"O" * 12)))


@pytest.fixture
def registrations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    done: list[tuple[str, str, int]] = []
    monkeypatch.setattr(block_devices, "pr_register", lambda path, key: done.append(("register", path, key)))
    monkeypatch.setattr(block_devices, "pr_unregister", lambda path, key: done.append(("unregister", path, key)))
    return done


async def test_written_by_the_scsi_layout_after_the_key_is_registered(
        tmp_path: Path, registrations: list[tuple[str, str, int]]) -> None:
    path = unit(tmp_path)
    server = ScsiServer()
    data = os.urandom(8192 + 100)
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, server), nursery)
        asked: list[tuple[int, int, bytes]] = []

        def find(code_set: int, designator_type: int, designator: bytes) -> tuple[str, int]:
            asked.append((code_set, designator_type, designator))
            assert registrations == []  # (found first, registered next)
            return path, 8 * MiB

        layouts.find_designator = find
        assert await layouts.write(open_file(), 4096, data, CRED)
        # the key registered before the write reached the unit: the unit holds the data now
        assert registrations == [("register", path, KEY)]
        assert asked == [(1, 3, NAA)]
        with open(path, "rb") as f:
            f.seek(MiB + 4096)
            assert f.read(len(data)) == data
        await layouts.commit(FH, CRED)
        # a second write does not register again
        assert await layouts.write(open_file(), 0, b"x" * 4096, CRED)
        assert registrations == [("register", path, KEY)]
        report, rows = layouts.report(), layouts.device_rows()
        layouts.close()
    assert server.sent[:3] == [("LAYOUTGET", c.LAYOUT4_SCSI), ("GETDEVICEINFO", c.LAYOUT4_SCSI),
                               ("LAYOUTCOMMIT", c.LAYOUT4_SCSI, [(4096, 12288)], 4096 + len(data) - 1)]
    assert report["layout"] == "scsi" and report["devices"] == [path]
    assert [(r["address"], r["transport"], r["verification"]) for r in rows] == [(path, "scsi layout", "designator")]
    # the client ends: its key is taken off the unit
    assert registrations[-1] == ("unregister", path, KEY)


async def test_a_unit_that_refuses_the_registration_sends_the_io_through_the_metadata_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = unit(tmp_path)

    def refuse(path: str, key: int) -> None:
        raise OSError(errno.EBADE, "Invalid exchange")  # (sd: a reservation conflict)

    monkeypatch.setattr(block_devices, "pr_register", refuse)
    server = ScsiServer()
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, server), nursery)
        layouts.find_designator = lambda *designator: (path, 8 * MiB)
        assert not await layouts.write(open_file(), 0, b"y" * 4096, CRED)
        assert await layouts.read(open_file(), FH, 0, 4096, CRED) is None
    assert [r for r in layouts.reasons if "refused the registration of our reservation key" in r]
    assert layouts.volumes[DEV] is None and layouts.keys == {}
    with open(path, "rb") as f:
        assert f.read() == bytes(8 * MiB)  # nothing reached the unit


async def test_a_unit_not_here_sends_the_io_through_the_metadata_server(
        registrations: list[tuple[str, str, int]]) -> None:
    server = ScsiServer()
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, server), nursery)
        layouts.find_designator = lambda *designator: None
        assert not await layouts.write(open_file(), 0, b"z" * 4096, CRED)
    assert registrations == []
    assert ("GETDEVICEINFO", c.LAYOUT4_SCSI) in server.sent
    # what stats shows: why the I/O went through the metadata server
    assert [r for r in layouts.reasons if r.startswith(f"no SCSI device here has the designator {NAA.hex()}")]


async def test_a_new_client_id_takes_the_old_key_off_and_asks_for_the_device_again(
        tmp_path: Path, registrations: list[tuple[str, str, int]]) -> None:
    path = unit(tmp_path)
    server = ScsiServer()
    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, server), nursery)
        layouts.find_designator = lambda *designator: (path, 8 * MiB)
        assert await layouts.write(open_file(), 0, b"a" * 4096, CRED)
        layouts.forget_all()
        assert registrations == [("register", path, KEY), ("unregister", path, KEY)]
        assert DEV not in layouts.volumes
        layouts.close()
    assert registrations == [("register", path, KEY), ("unregister", path, KEY)]


async def test_an_export_without_the_scsi_layout_keeps_the_block_layout() -> None:
    class BlockOnly(ScsiServer):
        layout_types = [c.LAYOUT4_BLOCK_VOLUME]

    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, BlockOnly()), nursery)
        layouts._pick()
    assert layouts.layout_type == c.LAYOUT4_BLOCK_VOLUME and layouts.report()["layout"] == "block"


async def test_after_a_device_error_the_key_is_registered_again(
        tmp_path: Path, registrations: list[tuple[str, str, int]]) -> None:
    # a fenced client: the server preempted its key and the unit answers its I/O with a reservation
    # conflict (sd: EBADE); the next GETDEVICEINFO registers the key again before any I/O
    path = unit(tmp_path)

    class Fenced(ScsiServer):
        async def layouterror(self, *args: Any) -> bool:
            return False

    async with trio.open_nursery() as nursery:
        layouts = BlockLayouts(cast(LayoutOps, Fenced()), nursery)
        layouts.find_designator = lambda *designator: (path, 8 * MiB)
        assert await layouts.write(open_file(), 0, b"a" * 4096, CRED)
        dev = layouts.devices[path]

        async def conflict(buf: memoryview, offset: int) -> None:
            raise OSError(errno.EBADE, "Invalid exchange")

        dev.write_from = conflict  # type: ignore[method-assign]
        assert not await layouts.write(open_file(), 4096, b"b" * 4096, CRED)
        await layouts.closing(FH, CRED)
        del dev.write_from
        assert await layouts.write(open_file(), 8192, b"c" * 4096, CRED)
        layouts.close()
    assert registrations[:2] == [("register", path, KEY), ("register", path, KEY)]
