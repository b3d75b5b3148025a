"""The block and SCSI layouts' I/O edge: the machine's block devices, a volume's signature (block
layout) or its SCSI designator (SCSI layout) looked for on them, a SCSI layout's reservation key
registered on its unit and taken off again, and reads and writes of a device with O_DIRECT into
page-aligned buffers (anonymous mmaps), each in a worker thread (the syscalls block; the GIL is
released while they run).

Whole devices only (``/sys/class/block/NAME`` without a ``partition`` file): the block layout's
volumes are whole devices (nfsd refuses a file system on a partition). Reading block devices needs
the rights to (root, or the ``disk`` group): without them none is found and the I/O goes through the
metadata server."""

from __future__ import annotations

import fcntl
import mmap
import os
from collections.abc import Callable
from pathlib import Path

import trio

from .._proto import scsi
from .._proto.nfs4.layout_block import pnfs_block_sig_component4
from .block_volumes import SECTOR, signature_matches

SYS_BLOCK = Path("/sys/class/block")
DEV = Path("/dev")


def candidates(sys_block: Path = SYS_BLOCK, dev: Path = DEV) -> list[tuple[str, int]]:
    """The machine's whole block devices with a size: (path in ``dev``, size in bytes)."""
    out = []
    for d in sorted(sys_block.glob("*")):
        if (d / "partition").exists():
            continue
        try:
            size = int((d / "size").read_text()) * SECTOR
        except (OSError, ValueError):
            continue
        if size > 0 and (dev / d.name).exists():
            out.append((str(dev / d.name), size))
    return out


def find(components: list[pnfs_block_sig_component4], devices: list[tuple[str, int]]) -> tuple[str, int] | None:
    """The one device of ``devices`` that carries every signature component; None when none or more
    than one does (two copies of one volume: which one nfsd writes through is unknown)."""
    found = []
    for path, size in devices:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        def read(off: int, n: int, fd: int = fd) -> bytes:
            return os.pread(fd, n, off)

        try:
            if signature_matches(components, read, size):
                found.append((path, size))
        except OSError:
            pass
        finally:
            os.close(fd)
    return found[0] if len(found) == 1 else None


def find_designator(code_set: int, designator_type: int, designator: bytes,
                    sys_block: Path = SYS_BLOCK, dev: Path = DEV) -> tuple[str, int] | None:
    """The whole device whose logical unit has this designator (RFC 8154 2.3.1: its Device
    Identification VPD page, ``device/vpd_pg83`` in sysfs, lists it with the logical unit's
    association), as (path in /dev, size); None when no device here has it. Several paths to one
    unit (multipath) are one unit: the first, by name, is taken."""
    want = (code_set, scsi.ASSOCIATION_LOGICAL_UNIT, designator_type, bytes(designator))
    for path, size in candidates(sys_block, dev):
        try:
            page = (sys_block / Path(path).name / "device" / "vpd_pg83").read_bytes()
            found = scsi.designators(page)
        except (OSError, ValueError):
            continue  # not a SCSI device (a virtio disk, a loop device), or no page 0x83
        if any(tuple(d) == want for d in found):
            return path, size
    return None


def pr_register(path: str, key: int) -> None:
    """Register ``key`` on the unit at ``path`` (PERSISTENT RESERVE OUT, REGISTER AND IGNORE
    EXISTING KEY, through IOC_PR_REGISTER, as the kernel's SCSI layout client does); OSError if the
    device refuses it."""
    _pr(path, scsi.pr_registration(0, key, True))


def pr_unregister(path: str, key: int) -> None:
    """Take ``key`` off the unit at ``path`` (REGISTER with the new key 0)."""
    _pr(path, scsi.pr_registration(key, 0, False))


def _pr(path: str, arg: bytes) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, scsi.IOC_PR_REGISTER, arg)
    finally:
        os.close(fd)


def aligned(size: int) -> mmap.mmap:
    """A zeroed, page-aligned buffer (what O_DIRECT wants) of ``size`` bytes."""
    return mmap.mmap(-1, max(size, mmap.PAGESIZE))


class BlockDevice:
    """One device, opened once for reading and writing with O_DIRECT (the page cache would hide what
    the server's file system writes to the same device)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_DIRECT | os.O_CLOEXEC)
        self.limiter = trio.CapacityLimiter(4)

    async def read_into(self, buf: memoryview, offset: int) -> None:
        """Fill ``buf`` (aligned: offset, length and address) from ``offset`` of the device."""
        await self._whole(os.preadv, "read", buf, offset)

    async def write_from(self, buf: memoryview, offset: int) -> None:
        """Write ``buf`` (aligned) at ``offset`` of the device."""
        await self._whole(os.pwritev, "write", buf, offset)

    async def _whole(
        self, io: Callable[[int, list[memoryview], int], int], what: str, buf: memoryview, offset: int
    ) -> None:
        """``io`` (preadv or pwritev) of all of ``buf`` at ``offset``, in a worker thread."""
        def run() -> None:
            done = 0
            while done < buf.nbytes:
                n = io(self.fd, [buf[done:]], offset + done)
                if n <= 0:
                    raise OSError(f"{self.path}: short {what} at {offset + done}")
                done += n

        await trio.to_thread.run_sync(run, limiter=self.limiter)

    async def sync(self) -> None:
        """The device's write cache flushed (before LAYOUTCOMMIT makes the data the file's)."""
        await trio.to_thread.run_sync(os.fdatasync, self.fd, limiter=self.limiter)

    def close(self) -> None:
        os.close(self.fd)
