"""The block layout's I/O edge on this machine: a volume's signature found on a "device" (a regular
file standing for one: CI cannot make loop devices), reads and writes with O_DIRECT at aligned
offsets, and the sysfs scan of whole devices."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from pynfsrdma._client import block_devices
from pynfsrdma._proto.nfs4.layout_block import pnfs_block_sig_component4

UUID = bytes.fromhex("00112233445566778899aabbccddeeff")
MiB = 1 << 20


def device(tmp_path: Path, name: str, at: int = 32, sig: bytes = UUID) -> tuple[str, int]:
    p = tmp_path / name
    b = bytearray(MiB)
    o = at if at >= 0 else MiB + at
    b[o:o + len(sig)] = sig
    p.write_bytes(b)
    return str(p), MiB


def test_the_device_with_the_signature_is_found_and_only_it(tmp_path: Path) -> None:
    xfs = device(tmp_path, "xfs")
    other = device(tmp_path, "other", sig=b"\x01" * 16)
    tail = device(tmp_path, "tail", at=-512, sig=b"END-SIGNATURE")
    assert block_devices.find([pnfs_block_sig_component4(32, UUID)], [other, xfs]) == xfs
    assert block_devices.find([pnfs_block_sig_component4(-512, b"END-SIGNATURE")], [xfs, tail]) == tail
    # every component must be there
    assert block_devices.find([pnfs_block_sig_component4(32, UUID), pnfs_block_sig_component4(0, b"X")],
                              [xfs]) is None
    # no device, or two copies of one volume: none chosen (the I/O goes through the metadata server)
    assert block_devices.find([pnfs_block_sig_component4(32, UUID)], [other]) is None
    copy = device(tmp_path, "copy")
    assert block_devices.find([pnfs_block_sig_component4(32, UUID)], [xfs, copy]) is None
    assert block_devices.find([pnfs_block_sig_component4(32, UUID)], [("/nonexistent/dev", MiB), xfs]) == xfs


async def test_aligned_reads_and_writes_with_o_direct(tmp_path: Path) -> None:
    path, _ = device(tmp_path, "dev")
    try:
        dev = block_devices.BlockDevice(path)
    except OSError as e:  # a file system without O_DIRECT (tmpfs) cannot stand in for a device
        pytest.fail(f"O_DIRECT on {tmp_path}: {e}")
    data = os.urandom(3 * 4096)
    buf = block_devices.aligned(len(data))
    memoryview(buf)[:len(data)] = data
    await dev.write_from(memoryview(buf)[:len(data)], 8192)
    await dev.sync()
    back = block_devices.aligned(4 * 4096)
    await dev.read_into(memoryview(back)[:4 * 4096], 4096)
    dev.close()
    assert bytes(back[:4096]) == bytes(4096)
    assert bytes(back[4096:4 * 4096]) == data
    assert Path(path).read_bytes()[8192:8192 + len(data)] == data
    await trio.lowlevel.checkpoint()


def test_the_sysfs_scan_lists_whole_devices_with_their_size(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    for name, size, part in (("loop0", 2048, False), ("vda", 100, False), ("vda1", 50, True), ("ram0", 0, False)):
        (sysfs / name).mkdir(parents=True)
        (sysfs / name / "size").write_text(f"{size}\n")
        if part:
            (sysfs / name / "partition").write_text("1\n")
    found = block_devices.candidates(sysfs)
    # only whole devices with a size, and only those /dev has
    expect = [(p, s) for p, s in (("/dev/loop0", 2048 * 512), ("/dev/vda", 100 * 512)) if os.path.exists(p)]
    assert found == expect


def _vpd83(*descriptors: tuple[int, int, int, bytes]) -> bytes:
    body = b"".join(bytes([cs, (assoc << 4) | typ, 0, len(d)]) + d for cs, assoc, typ, d in descriptors)
    return bytes([0, 0x83]) + len(body).to_bytes(2, "big") + body


NAA = bytes.fromhex("6001405abcdef0123456789abcdef012")


def _scsi_tree(tmp_path: Path) -> tuple[Path, Path]:
    """A sysfs and a /dev with: a virtio disk (no VPD page), a loop device, an sd disk whose unit has
    the NAA designator (beside a port designator), an sd disk of another unit, and a partition of the first."""
    sysfs, dev = tmp_path / "sys", tmp_path / "dev"
    dev.mkdir()
    units = {"vda": None, "loop0": None, "sda": _vpd83((1, 1, 3, bytes(16)), (1, 0, 3, NAA)),
             "sdb": _vpd83((1, 0, 3, bytes(range(16)))), "sda1": None}
    for name, page in units.items():
        (sysfs / name / "device").mkdir(parents=True)
        (sysfs / name / "size").write_text("2048\n")
        (dev / name).write_bytes(b"")
        if name == "sda1":
            (sysfs / name / "partition").write_text("1\n")
        if page is not None:
            (sysfs / name / "device" / "vpd_pg83").write_bytes(page)
    return sysfs, dev


def test_the_scsi_unit_is_found_by_its_designator_with_the_logical_units_association(tmp_path: Path) -> None:
    sysfs, dev = _scsi_tree(tmp_path)
    assert block_devices.find_designator(1, 3, NAA, sysfs, dev) == (str(dev / "sda"), 2048 * 512)
    assert block_devices.find_designator(1, 3, bytes(range(16)), sysfs, dev) == (str(dev / "sdb"), 2048 * 512)
    # a port's designator does not name the unit; another type or code set is another designator
    assert block_devices.find_designator(1, 3, bytes(16), sysfs, dev) is None
    assert block_devices.find_designator(1, 2, NAA, sysfs, dev) is None
    assert block_devices.find_designator(2, 3, NAA, sysfs, dev) is None


def test_a_broken_vpd_page_is_no_unit(tmp_path: Path) -> None:
    sysfs, dev = _scsi_tree(tmp_path)
    (sysfs / "sda" / "device" / "vpd_pg83").write_bytes(b"\x00\x80\x00")
    assert block_devices.find_designator(1, 3, NAA, sysfs, dev) is None


def test_a_device_that_refuses_the_registration_raises_oserror(tmp_path: Path) -> None:
    # a regular file takes no persistent reservation ioctl: the kernel answers ENOTTY
    path, _ = device(tmp_path, "notscsi")
    with pytest.raises(OSError):
        block_devices.pr_register(path, 0x1234)
