"""A do-nothing file system: the ceiling of FUSE (and of a FUSE channel on trio) on this machine.

    python bench/null_fuse.py MOUNTPOINT [--size BYTES] [--files N] [--channel native|pyfuse3]
                              [--io-uring|--no-io-uring]

It serves, with no I/O behind them:
- ``zero``: a file of SIZE bytes of zeros (each read is a slice of one zero buffer: no copy);
- ``sink``: a file that accepts every write and keeps nothing (its size stays 0);
- ``dir/``: a directory of N empty files ``f0000000`` ... with attributes (readdir is readdirplus);
- ``scratch/``: a directory where files, directories and symlinks can be made (``tar x``): their
  names and attributes are kept in memory, their data is not (a write only moves the size).

Reads, writes and listings through it cost what FUSE itself costs, which is what a real file system
mounted the same way cannot beat. It answers the low-level interface the pynfsrdma mount answers
(``pynfsrdma._fuse.lowlevel``), through the channel ``--channel`` names. Like the pynfsrdma mount, it raises the mount's read_ahead_kb to
1024 (FUSE's largest request), so that buffered reads are compared under the same kernel setting.
Runs in the foreground until unmounted (``fusermount3 -u MOUNTPOINT``) or sent SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import stat
import sys
import time
from typing import Any

import trio

from pynfsrdma._fuse.channel import CHANNELS, DEFAULT_CHANNEL, Channel, open_channel
from pynfsrdma._fuse.kernel.uring import IO_URING_DEFAULT
from pynfsrdma._fuse.lowlevel import (
    ROOT_INODE,
    EntryAttributes,
    FileInfo,
    FUSEError,
    Operations,
    ReaddirToken,
    RequestContext,
    SetattrFields,
)
from pynfsrdma._fuse.mount_daemon import set_read_ahead
from pynfsrdma._trio_compat import run_sync_abandoning

ROOT = ROOT_INODE
ZERO, SINK, DIR, SCRATCH = ROOT + 1, ROOT + 2, ROOT + 3, ROOT + 4
FIRST_FILE = 100
FIRST_MADE = 1 << 40  # inodes of what is made in scratch/
MAX_REQUEST = 1 << 20
ZEROS = memoryview(bytes(MAX_REQUEST))
TIMEOUT = 3600.0  # the kernel may cache everything: nothing ever changes


class NullOperations(Operations):
    def __init__(self, size: int, files: int) -> None:
        super().__init__()
        self.size = size
        self.files = files
        self.now = time.time_ns()
        self.written = 0
        # scratch/: inode -> attributes, directory inode -> {name: inode}, symlink inode -> target
        self.made: dict[int, EntryAttributes] = {SCRATCH: self._attr(SCRATCH)}
        self.children: dict[int, dict[bytes, int]] = {SCRATCH: {}}
        self.links: dict[int, bytes] = {}
        self.next_ino = FIRST_MADE

    def _attr(self, ino: int) -> EntryAttributes:
        e = EntryAttributes()
        e.st_ino = ino
        e.entry_timeout = TIMEOUT
        e.attr_timeout = TIMEOUT
        if ino in (ROOT, DIR, SCRATCH):
            e.st_mode = stat.S_IFDIR | 0o755
            e.st_nlink = 2
        else:
            e.st_mode = stat.S_IFREG | 0o644
            e.st_nlink = 1
            e.st_size = self.size if ino == ZERO else 0
        e.st_blksize = 4096
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = self.now
        return e

    def _valid(self, ino: int) -> bool:
        return (
            ino in (ROOT, ZERO, SINK, DIR) or FIRST_FILE <= ino < FIRST_FILE + self.files or ino in self.made
        )

    async def getattr(self, inode: int, ctx: RequestContext | None = None) -> EntryAttributes:
        made = self.made.get(inode)
        if made is not None:
            return made
        if not self._valid(inode):
            raise FUSEError(errno.ENOENT)
        return self._attr(inode)

    async def setattr(self, inode: int, attr: EntryAttributes, fields: SetattrFields, fh: int | None, ctx: RequestContext) -> EntryAttributes:
        e = self.made.get(inode)
        if e is None:
            return await self.getattr(inode)  # truncating the sink (O_TRUNC) changes nothing
        if fields.update_mode:
            e.st_mode = stat.S_IFMT(e.st_mode) | stat.S_IMODE(attr.st_mode)
        if fields.update_uid:
            e.st_uid = attr.st_uid
        if fields.update_gid:
            e.st_gid = attr.st_gid
        if fields.update_size:
            e.st_size = attr.st_size
        if fields.update_atime:
            e.st_atime_ns = attr.st_atime_ns
        if fields.update_mtime:
            e.st_mtime_ns = attr.st_mtime_ns
        return e

    # -- scratch/: what is made there is kept (names and attributes only) --------------------------
    def _make(self, parent: int, name: bytes, mode: int, ctx: RequestContext) -> EntryAttributes:
        entries = self.children.get(parent)
        if entries is None:
            raise FUSEError(errno.EROFS)  # (only scratch/ and what is made in it)
        if name in entries:
            raise FUSEError(errno.EEXIST)
        ino, self.next_ino = self.next_ino, self.next_ino + 1
        e = EntryAttributes()
        e.st_ino = ino
        e.entry_timeout = e.attr_timeout = TIMEOUT
        e.st_mode = mode
        e.st_nlink = 2 if stat.S_ISDIR(mode) else 1
        e.st_uid, e.st_gid = ctx.uid, ctx.gid
        e.st_blksize = 4096
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = time.time_ns()
        self.made[ino] = e
        entries[name] = ino
        if stat.S_ISDIR(mode):
            self.children[ino] = {}
        return e

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: RequestContext) -> EntryAttributes:
        return self._make(parent_inode, name, stat.S_IFDIR | stat.S_IMODE(mode), ctx)

    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: RequestContext
    ) -> tuple[FileInfo, EntryAttributes]:
        e = self._make(parent_inode, name, stat.S_IFREG | stat.S_IMODE(mode), ctx)
        return FileInfo(fh=e.st_ino), e

    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: RequestContext
    ) -> EntryAttributes:
        e = self._make(parent_inode, name, stat.S_IFLNK | 0o777, ctx)
        self.links[e.st_ino] = target
        e.st_size = len(target)
        return e

    async def readlink(self, inode: int, ctx: RequestContext) -> bytes:
        if inode not in self.links:
            raise FUSEError(errno.EINVAL)
        return self.links[inode]

    async def lookup(self, parent_inode: int, name: bytes, ctx: RequestContext | None = None) -> EntryAttributes:
        entries = self.children.get(parent_inode)
        if entries is not None:
            ino = entries.get(name)
            if ino is None:
                raise FUSEError(errno.ENOENT)
            return self.made[ino]
        if parent_inode == ROOT:
            ino = {b"zero": ZERO, b"sink": SINK, b"dir": DIR, b"scratch": SCRATCH}.get(name)
        elif parent_inode == DIR and name.startswith(b"f") and name[1:].isdigit():
            i = int(name[1:])
            ino = FIRST_FILE + i if i < self.files else None
        else:
            ino = None
        if ino is None:
            raise FUSEError(errno.ENOENT)
        return self._attr(ino)

    async def opendir(self, inode: int, ctx: RequestContext) -> int:
        if inode not in (ROOT, DIR) and inode not in self.children:
            raise FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh: int, start_id: int, token: ReaddirToken) -> None:
        if fh == ROOT:
            names = [(b"zero", ZERO), (b"sink", SINK), (b"dir", DIR), (b"scratch", SCRATCH)]
            for i in range(start_id, len(names)):
                name, ino = names[i]
                if not token.add(name, self._attr(ino), i + 1):
                    return
            return
        if fh in self.children:
            made = list(self.children[fh].items())
            for i in range(start_id, len(made)):
                name, ino = made[i]
                if not token.add(name, self.made[ino], i + 1):
                    return
            return
        for i in range(start_id, self.files):
            if not token.add(b"f%07d" % i, self._attr(FIRST_FILE + i), i + 1):
                return

    async def open(self, inode: int, flags: int, ctx: RequestContext) -> FileInfo:
        if not self._valid(inode) or inode in (ROOT, DIR) or inode in self.children:
            isdir = inode in (ROOT, DIR) or inode in self.children
            raise FUSEError(errno.EISDIR if isdir else errno.ENOENT)
        return FileInfo(fh=inode, keep_cache=False)

    async def read(self, fh: int, off: int, size: int) -> Any:
        end = min(off + size, self.size if fh == ZERO else 0)
        if end <= off:
            return b""
        return ZEROS[: end - off]

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self.written += len(buf)
        e = self.made.get(fh)
        if e is not None:
            e.st_size = max(e.st_size, off + len(buf))
        return len(buf)

    async def flush(self, fh: int, lock_owner: int = 0) -> None:
        return None

    async def fsync(self, fh: int, datasync: bool) -> None:
        return None

    async def release(self, fh: int, lock_owner: int = 0, flock_unlock: bool = False) -> None:
        return None

    async def releasedir(self, fh: int) -> None:
        return None


async def raise_read_ahead_once_up(mountpoint: str, rsize: int) -> None:
    """As the mount does: once the kernel's INIT is answered (a stat(2) waits for it), raise read_ahead_kb."""
    try:
        await run_sync_abandoning(os.stat, mountpoint)
    except OSError:
        return
    set_read_ahead(mountpoint, rsize)


async def serve(channel: Channel, mountpoint: str) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def on_signal() -> None:
                async for _ in signals:
                    channel.terminate()
                    return

            nursery.start_soon(on_signal)
            nursery.start_soon(raise_read_ahead_once_up, mountpoint, MAX_REQUEST)
            await channel.serve()
            nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="null_fuse.py", description=__doc__.split("\n")[0])
    p.add_argument("mountpoint")
    p.add_argument("--size", type=int, default=1 << 30, help="bytes of the zero file (default 1 GiB)")
    p.add_argument("--files", type=int, default=10_000, help="entries of dir/ (default 10000)")
    p.add_argument("--channel", choices=CHANNELS, default=DEFAULT_CHANNEL, help="the FUSE channel")
    p.add_argument("--io-uring", action=argparse.BooleanOptionalAction, default=IO_URING_DEFAULT,
                   help="the native channel takes requests by FUSE over io_uring where the kernel offers it "
                        "(as the mount's -o io_uring / noio_uring)")
    a = p.parse_args(argv)
    mp = os.path.abspath(a.mountpoint)
    ops = NullOperations(a.size, a.files)
    channel = open_channel(a.channel, ops, mp, {"fsname=null", "subtype=null", "auto_unmount"}, io_uring=a.io_uring)
    channel.mount()
    try:
        trio.run(serve, channel, mp)
    finally:
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
