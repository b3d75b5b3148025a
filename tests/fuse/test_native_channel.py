"""The native channel with the real kernel: an in-memory file system (low-level operations) mounted
through /dev/fuse in this process, used from threads and child processes as any program uses a mount.

What pyfuse3 cannot carry is checked here: READ replies written from the operation's own buffer and
WRITE payloads handed over in the buffer the kernel wrote them to (no copy), "set the time to now",
the kill-suid/sgid flag, O_TRUNC at open, locks (fcntl, flock, a blocked F_SETLKW interrupted by a
signal), FLUSH's lock owner and RELEASE's flock flag, fallocate, lseek, copy_file_range, and the
notifications that drop the kernel's caches. Mounting by mount(2), through fusermount3, and the
auto_unmount of a daemon killed with SIGKILL."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

from pynfsrdma._fuse.devfuse import NativeChannel
from pynfsrdma._fuse.lowlevel import (
    F_UNLCK,
    ROOT_INODE,
    EntryAttributes,
    FileInfo,
    FileLock,
    FUSEError,
    Operations,
    ReaddirToken,
    RequestContext,
    SetattrFields,
    StatvfsData,
)
from pynfsrdma._trio_compat import run_sync_abandoning

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
# whether mounted() asks for FUSE over io_uring (tests/fuse/test_io_uring.py runs tests of this file
# with it and the kernel's switch on; here, requests come by /dev/fuse whatever the switch says)
IO_URING = False
NOBODY = 65534
T = TypeVar("T")


@dataclass
class Node:
    ino: int
    mode: int
    data: bytearray = field(default_factory=bytearray)
    children: dict[bytes, int] = field(default_factory=dict)
    target: bytes = b""
    xattrs: dict[bytes, bytes] = field(default_factory=dict)
    uid: int = 0
    gid: int = 0
    nlink: int = 1
    mtime_ns: int = 0
    atime_ns: int = 0
    direct: bool = False  # opened with FOPEN_DIRECT_IO
    keep_cache: bool = False  # opened with FOPEN_KEEP_CACHE
    snapshot: bytes | None = None  # what reads return views of, until the next write


@dataclass
class Lock:
    owner: int
    start: int
    end: int
    type: int
    pid: int
    flock: bool


class MemOps(Operations):
    """An in-memory file system that records what it was asked."""

    def __init__(self, timeout: float = 0.0) -> None:
        self.timeout = timeout
        self.nodes = {ROOT_INODE: Node(ROOT_INODE, stat.S_IFDIR | 0o755, nlink=2)}
        self.next_ino = ROOT_INODE + 1
        self.files: dict[int, int] = {}  # fh -> ino
        self.next_fh = 1
        self.calls: list[tuple[Any, ...]] = []
        self.read_views: list[memoryview] = []
        self.writes: list[Any] = []  # what write() was handed
        self.channel: NativeChannel | None = None
        self.held_by_pool: list[bool] = []  # for each write: the payload lies in a request buffer
        self.locks: dict[int, list[Lock]] = {}
        self.lock_changed = trio.lowlevel.ParkingLot()
        self.cancelled: list[str] = []

    # -- helpers -----------------------------------------------------------------------------------------
    def entry(self, n: Node) -> EntryAttributes:
        return EntryAttributes(
            st_ino=n.ino, entry_timeout=self.timeout, attr_timeout=self.timeout, st_mode=n.mode,
            st_nlink=n.nlink, st_uid=n.uid, st_gid=n.gid, st_size=len(n.target) if stat.S_ISLNK(n.mode) else len(n.data),
            st_blksize=4096, st_blocks=(len(n.data) + 511) // 512, st_atime_ns=n.atime_ns, st_mtime_ns=n.mtime_ns,
            st_ctime_ns=n.mtime_ns,
        )

    def node(self, ino: int) -> Node:
        n = self.nodes.get(ino)
        if n is None:
            raise FUSEError(errno.ENOENT)
        return n

    def child(self, parent: int, name: bytes) -> Node:
        ino = self.node(parent).children.get(name)
        if ino is None:
            raise FUSEError(errno.ENOENT)
        return self.nodes[ino]

    def make(self, parent: int, name: bytes, mode: int, ctx: RequestContext) -> Node:
        p = self.node(parent)
        if name in p.children:
            raise FUSEError(errno.EEXIST)
        n = Node(self.next_ino, mode, uid=ctx.uid, gid=ctx.gid, nlink=2 if stat.S_ISDIR(mode) else 1,
                 mtime_ns=time.time_ns(), direct=name.startswith(b"direct"))
        self.next_ino += 1
        self.nodes[n.ino] = n
        p.children[name] = n.ino
        return n

    def add_file(self, name: bytes, data: bytes = b"", parent: int = ROOT_INODE) -> Node:
        n = self.make(parent, name, stat.S_IFREG | 0o644, RequestContext())
        n.data[:] = data
        return n

    def add_dir(self, name: bytes, parent: int = ROOT_INODE) -> Node:
        return self.make(parent, name, stat.S_IFDIR | 0o755, RequestContext())

    # -- the operations ------------------------------------------------------------------------------------
    async def lookup(self, parent_inode: int, name: bytes, ctx: RequestContext) -> EntryAttributes:
        self.calls.append(("lookup", name))
        return self.entry(self.child(parent_inode, name))

    async def getattr(self, inode: int, ctx: RequestContext) -> EntryAttributes:
        return self.entry(self.node(inode))

    async def setattr(
        self, inode: int, attr: EntryAttributes, fields: SetattrFields, fh: int | None, ctx: RequestContext
    ) -> EntryAttributes:
        self.calls.append(("setattr", inode, fields, fh))
        n = self.node(inode)
        if fields.update_mode:
            n.mode = stat.S_IFMT(n.mode) | stat.S_IMODE(attr.st_mode)
        if fields.update_uid:
            n.uid = attr.st_uid
        if fields.update_gid:
            n.gid = attr.st_gid
        if fields.kill_suidgid:
            n.mode &= ~(stat.S_ISUID | stat.S_ISGID)
        if fields.update_size:
            del n.data[attr.st_size :]
            n.data.extend(bytes(attr.st_size - len(n.data)))
            n.snapshot = None
        if fields.update_mtime:
            n.mtime_ns = attr.st_mtime_ns
        if fields.update_atime:
            n.atime_ns = attr.st_atime_ns
        return self.entry(n)

    async def readlink(self, inode: int, ctx: RequestContext) -> bytes:
        return self.node(inode).target

    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: RequestContext) -> EntryAttributes:
        self.calls.append(("mknod", name, mode, ctx.umask))
        return self.entry(self.make(parent_inode, name, mode, ctx))

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: RequestContext) -> EntryAttributes:
        self.calls.append(("mkdir", name, mode, ctx.umask))
        return self.entry(self.make(parent_inode, name, mode, ctx))

    async def unlink(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        n = self.child(parent_inode, name)
        del self.node(parent_inode).children[name]
        n.nlink -= 1

    async def rmdir(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        if self.child(parent_inode, name).children:
            raise FUSEError(errno.ENOTEMPTY)
        del self.node(parent_inode).children[name]

    async def symlink(self, parent_inode: int, name: bytes, target: bytes, ctx: RequestContext) -> EntryAttributes:
        n = self.make(parent_inode, name, stat.S_IFLNK | 0o777, ctx)
        n.target = target
        return self.entry(n)

    async def rename(
        self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes, flags: int,
        ctx: RequestContext,
    ) -> None:
        ino = self.child(parent_inode_old, name_old).ino
        del self.node(parent_inode_old).children[name_old]
        self.node(parent_inode_new).children[name_new] = ino

    async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx: RequestContext) -> EntryAttributes:
        n = self.node(inode)
        self.node(new_parent_inode).children[new_name] = inode
        n.nlink += 1
        return self.entry(n)

    async def open(self, inode: int, flags: int, ctx: RequestContext) -> FileInfo:
        self.calls.append(("open", inode, flags))
        n = self.node(inode)
        if flags & os.O_TRUNC:
            n.data.clear()
            n.snapshot = None
        fh, self.next_fh = self.next_fh, self.next_fh + 1
        self.files[fh] = inode
        return FileInfo(fh=fh, keep_cache=n.keep_cache, direct_io=n.direct)

    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: RequestContext
    ) -> tuple[FileInfo, EntryAttributes]:
        self.calls.append(("create", name, mode, flags, ctx.umask))
        n = self.make(parent_inode, name, mode, ctx)
        fh, self.next_fh = self.next_fh, self.next_fh + 1
        self.files[fh] = n.ino
        return FileInfo(fh=fh, keep_cache=False, direct_io=n.direct), self.entry(n)

    async def read(self, fh: int, off: int, size: int) -> Any:
        n = self.nodes[self.files[fh]]
        self.calls.append(("read", fh, off, size))
        if n.snapshot is None:
            n.snapshot = bytes(n.data)
        view = memoryview(n.snapshot)[off : off + size]
        self.read_views.append(view)
        return view

    async def write(self, fh: int, off: int, buf: Any) -> int:
        n = self.nodes[self.files[fh]]
        self.writes.append(buf)
        if self.channel is not None and isinstance(buf, memoryview):
            self.held_by_pool.append(self.channel.buffers.holds(buf))
        end = off + len(buf)
        if end > len(n.data):
            n.data.extend(bytes(end - len(n.data)))
        n.data[off:end] = buf
        n.snapshot = None
        return len(buf)

    async def flush(self, fh: int, lock_owner: int = 0) -> None:
        self.calls.append(("flush", fh, lock_owner))
        ino = self.files[fh]
        self._unlock(ino, lambda lk: not lk.flock and lk.owner == lock_owner)

    async def release(self, fh: int, lock_owner: int = 0, flock_unlock: bool = False) -> None:
        self.calls.append(("release", fh, lock_owner, flock_unlock))
        ino = self.files.pop(fh)
        if flock_unlock:
            self._unlock(ino, lambda lk: lk.flock and lk.owner == lock_owner)

    async def fsync(self, fh: int, datasync: bool) -> None:
        self.calls.append(("fsync", fh, datasync))

    async def opendir(self, inode: int, ctx: RequestContext) -> int:
        if not stat.S_ISDIR(self.node(inode).mode):
            raise FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh: int, start_id: int, token: ReaddirToken) -> None:
        names = sorted(self.node(fh).children.items())
        for i in range(start_id, len(names)):
            name, ino = names[i]
            if not token.add(name, self.entry(self.nodes[ino]), i + 1):
                return

    async def statfs(self, ctx: RequestContext) -> StatvfsData:
        return StatvfsData(f_bsize=4096, f_frsize=4096, f_blocks=1000, f_bfree=600, f_bavail=500, f_files=77,
                           f_ffree=55, f_favail=55, f_namemax=255)

    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: RequestContext) -> None:
        self.node(inode).xattrs[name] = value

    async def getxattr(self, inode: int, name: bytes, ctx: RequestContext) -> bytes:
        try:
            return self.node(inode).xattrs[name]
        except KeyError:
            raise FUSEError(errno.ENODATA) from None

    async def listxattr(self, inode: int, ctx: RequestContext) -> list[bytes]:
        return sorted(self.node(inode).xattrs)

    async def removexattr(self, inode: int, name: bytes, ctx: RequestContext) -> None:
        self.node(inode).xattrs.pop(name)

    async def access(self, inode: int, mode: int, ctx: RequestContext) -> bool:
        return True

    # -- locks ----------------------------------------------------------------------------------------------
    def _conflict(self, ino: int, owner: int, lock: FileLock, flock: bool) -> Lock | None:
        for lk in self.locks.get(ino, []):
            if lk.flock != flock or lk.owner == owner:
                continue
            if lk.start <= lock.end and lock.start <= lk.end and 1 in (lk.type, lock.type):  # F_WRLCK
                return lk
        return None

    def _unlock(self, ino: int, which: Callable[[Lock], bool]) -> None:
        held = self.locks.get(ino, [])
        self.locks[ino] = [lk for lk in held if not which(lk)]
        self.lock_changed.unpark_all()

    async def getlk(self, fh: int, lock_owner: int, lock: FileLock, ctx: RequestContext) -> FileLock:
        self.calls.append(("getlk", fh, lock_owner, lock))
        lk = self._conflict(self.files[fh], lock_owner, lock, False)
        if lk is None:
            return FileLock(lock.start, lock.end, F_UNLCK, 0)
        return FileLock(lk.start, lk.end, lk.type, lk.pid)

    async def setlk(
        self, fh: int, lock_owner: int, lock: FileLock, sleep: bool, flock: bool, ctx: RequestContext
    ) -> None:
        self.calls.append(("setlk", fh, lock_owner, lock, sleep, flock))
        ino = self.files[fh]
        if lock.type == F_UNLCK:
            self._unlock(ino, lambda lk: lk.owner == lock_owner and lk.flock == flock)
            return
        try:
            while self._conflict(ino, lock_owner, lock, flock) is not None:
                if not sleep:
                    raise FUSEError(errno.EAGAIN)
                await self.lock_changed.park()
        except trio.Cancelled:
            self.cancelled.append("setlk")
            raise
        self.locks.setdefault(ino, []).append(Lock(lock_owner, lock.start, lock.end, lock.type, lock.pid, flock))

    # -- the rest of the native-only requests --------------------------------------------------------------
    async def fallocate(self, fh: int, mode: int, offset: int, length: int) -> None:
        self.calls.append(("fallocate", fh, mode, offset, length))
        n = self.nodes[self.files[fh]]
        if offset + length > len(n.data):
            n.data.extend(bytes(offset + length - len(n.data)))
            n.snapshot = None

    async def lseek(self, fh: int, offset: int, whence: int) -> int:
        self.calls.append(("lseek", fh, offset, whence))
        n = self.nodes[self.files[fh]]
        if offset >= len(n.data):
            raise FUSEError(errno.ENXIO)
        return offset if whence == os.SEEK_DATA else len(n.data)

    async def copy_file_range(
        self, fh_in: int, off_in: int, fh_out: int, off_out: int, length: int, flags: int
    ) -> int:
        self.calls.append(("copy_file_range", fh_in, off_in, fh_out, off_out, length))
        src = self.nodes[self.files[fh_in]]
        data = src.data[off_in : off_in + length]
        await self.write(fh_out, off_out, bytes(data))
        del self.writes[-1]
        return len(data)

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == name]


async def io(fn: Callable[..., T], *args: Any) -> T:
    """A system call on the mount, from a thread (this thread answers the mount). So is every
    subprocess started while a file of the mount is open here: the child closes its copy of it
    before it runs anything, which needs an answer from this thread."""
    return await trio.to_thread.run_sync(fn, *args)


@asynccontextmanager
async def mounted(ops: MemOps, where: Path, options: frozenset[str] = frozenset()) -> AsyncIterator[NativeChannel]:
    where.mkdir()
    channel = NativeChannel(ops, str(where), {"fsname=memfs", "subtype=memfs", *options}, io_uring=IO_URING)
    ops.channel = channel
    channel.mount()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.serve)
            await io(os.stat, where)
            try:
                yield channel
            finally:
                await io(subprocess.run, ["fusermount3", "-u", str(where)])  # serve() ends
    finally:
        channel.close()


def is_mounted(path: Path) -> str | None:
    """The file system type of the mount on ``path``, or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == str(path):
                return fields[fields.index("-") + 1]
    return None


async def test_read_replies_are_written_from_the_operations_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = MemOps()
    ops.add_file(b"f", os.urandom(3 * MIB + 123))
    written: list[list[Any]] = []
    real_writev = os.writev

    def spy(fd: int, buffers: list[Any]) -> int:
        written.append(list(buffers))
        return real_writev(fd, buffers)

    monkeypatch.setattr(os, "writev", spy)
    async with mounted(ops, tmp_path / "m"):
        data = await io((tmp_path / "m" / "f").read_bytes)
        assert data == bytes(ops.nodes[2].data)
        fd = await io(os.open, tmp_path / "m" / "f", os.O_RDONLY | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, MIB)
            assert await io(os.preadv, fd, [buf], MIB) == MIB
            assert buf[:] == data[MIB : 2 * MIB]
        finally:
            await io(os.close, fd)
    # every READ's data went to the kernel as the very object the operation returned: no copy
    sent = [iov[1] for iov in written if len(iov) == 2]
    assert len(sent) == len(ops.of("read")) >= 4
    assert all(any(s is v for v in ops.read_views) for s in sent)
    assert max(size for _, _, _, size in ops.of("read")) == MIB  # (max_pages: 1 MiB requests)


async def test_write_payloads_arrive_in_the_buffer_the_kernel_wrote_them_to(tmp_path: Path) -> None:
    ops = MemOps()
    ops.add_file(b"f")
    payload = os.urandom(4 * MIB)
    async with mounted(ops, tmp_path / "m") as channel:
        fd = await io(os.open, tmp_path / "m" / "f", os.O_WRONLY | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, len(payload))  # (page aligned, as O_DIRECT wants)
            buf[:] = payload
            assert await io(os.pwrite, fd, buf, 0) == len(payload)
            assert await io(os.pwrite, fd, buf[: 4096], len(payload)) == 4096
        finally:
            await io(os.close, fd)
        big = [w for w in ops.writes if len(w) == MIB]
        assert len(big) == 4  # 1 MiB WRITEs
        # each a view of the request buffer the kernel copied it into: not copied again
        assert all(isinstance(w, memoryview) for w in big) and ops.held_by_pool.count(True) == 4
        assert channel.buffers.lent == 4  # kept by the operations: not reused meanwhile
        small = ops.writes[-1]
        assert type(small) is bytes and len(small) == 4096  # a small one is copied out (it would pin 1 MiB)
        ops.writes.clear()
        del big
        assert channel.buffers.lent == 0
    assert bytes(ops.nodes[2].data) == payload + payload[:4096]


async def test_setattr_time_now_kill_suidgid_and_size(tmp_path: Path) -> None:
    ops = MemOps()
    ops.add_file(b"f", b"0123456789")
    async with mounted(ops, tmp_path / "m"):
        p = tmp_path / "m" / "f"
        await io(os.utime, p, None)  # utimensat(UTIME_NOW)
        await io(lambda: os.utime(p, ns=(1_000_000_001, 2_000_000_002)))
        await io(os.chmod, p, 0o6755)
        await io(os.chown, p, 1000, 1000)
        await io(os.truncate, p, 3)
    (_, _, now, _), (_, _, given, _), (_, _, mode, _), (_, _, owner, _), (_, _, size, _) = ops.of("setattr")
    assert now.update_atime and now.update_atime_now and now.update_mtime and now.update_mtime_now
    assert given.update_atime and not given.update_atime_now and not given.update_mtime_now
    assert mode.update_mode and not mode.kill_suidgid
    assert owner.update_uid and owner.update_gid and owner.kill_suidgid  # (HANDLE_KILLPRIV_V2: ours to clear)
    assert size.update_size
    n = ops.nodes[2]
    assert (n.atime_ns, n.mtime_ns) == (1_000_000_001, 2_000_000_002)
    assert stat.S_IMODE(n.mode) == 0o755 and len(n.data) == 3


async def test_o_trunc_comes_with_the_open_and_file_info_flags_are_honoured(tmp_path: Path) -> None:
    ops = MemOps()
    ops.add_file(b"f", b"old contents")
    ops.add_file(b"direct", b"x" * 10000)
    async with mounted(ops, tmp_path / "m"):
        fd = await io(os.open, tmp_path / "m" / "f", os.O_WRONLY | os.O_TRUNC)
        await io(os.close, fd)
        fd = await io(os.open, tmp_path / "m" / "direct", os.O_RDONLY)
        try:
            assert await io(os.pread, fd, 100, 5) == b"x" * 100
        finally:
            await io(os.close, fd)
    (_, _, flags), _ = ops.of("open")
    assert flags & os.O_TRUNC and not ops.of("setattr")  # atomic O_TRUNC: no separate truncate
    assert ops.of("read") == [("read", 2, 5, 100)]  # FOPEN_DIRECT_IO: the caller's size, no page cache


async def test_readdirplus_fills_the_kernels_entries(tmp_path: Path) -> None:
    ops = MemOps(timeout=60.0)
    d = ops.add_dir(b"d")
    names = [f"entry-{i:05d}-{'x' * (i % 50)}" for i in range(2000)]
    for name in names:
        ops.add_file(name.encode(), parent=d.ino)
    async with mounted(ops, tmp_path / "m"):
        listed = await io(os.listdir, tmp_path / "m" / "d")
        lookups = len(ops.of("lookup"))
        sizes = await io(lambda: [os.lstat(tmp_path / "m" / "d" / n).st_size for n in listed])
    assert sorted(listed) == sorted(names) and sizes == [0] * len(names)
    assert len(ops.of("lookup")) == lookups  # every entry came with its attributes


async def test_posix_locks_flock_flush_and_release(tmp_path: Path) -> None:
    ops = MemOps()
    ops.add_file(b"f", b"data")
    script = (
        "import fcntl, os, struct, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError as e:\n    print('busy', e.errno)\n"
        "res = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0))\n"
        "t, _, start, length, pid = struct.unpack('hhqqi', res)\nprint('getlk', t, start, length, pid)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError as e:\n    print('flock busy', e.errno)\n"
    )
    async with mounted(ops, tmp_path / "m") as channel:
        assert channel.agreed is not None and channel.agreed.flags & 0b10  # FUSE_POSIX_LOCKS granted
        p = tmp_path / "m" / "f"
        fd = await io(os.open, p, os.O_RDWR)
        await io(fcntl.lockf, fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
        await io(fcntl.flock, fd, fcntl.LOCK_EX)
        other = await io(
            lambda: subprocess.run([sys.executable, "-c", script, str(p)], capture_output=True, text=True, timeout=30)
        )
        await io(os.close, fd)
    assert other.stdout.split("\n")[:3] == [
        f"busy {errno.EAGAIN}", f"getlk {fcntl.F_WRLCK} 0 10 {os.getpid()}", f"flock busy {errno.EWOULDBLOCK}",
    ], other.stderr
    ours = [c for c in ops.of("setlk") if c[3].type != F_UNLCK][:2]
    assert [(c[3].start, c[3].end, c[4], c[5]) for c in ours] == [(0, 9, False, False), (0, (1 << 63) - 1, True, True)]
    assert ops.of("getlk")
    # close(2): FLUSH with the POSIX lock owner (its locks go), RELEASE with the flock flag
    flush_owner = [c[2] for c in ops.of("flush")][-1]
    assert flush_owner == ours[0][2] != 0
    assert ops.of("release")[-1][3] is True
    assert ops.locks[2] == []


async def test_a_blocked_setlkw_is_interrupted_by_a_signal(tmp_path: Path) -> None:
    ops = MemOps()
    ops.add_file(b"f")
    script = (
        "import fcntl, os, signal, sys\n"
        "class Stop(Exception): pass\n"
        "def stop(*_): raise Stop\n"
        "signal.signal(signal.SIGUSR1, stop)\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX)\nexcept Stop:\n    print('interrupted'); sys.exit(3)\n"
        "print('locked')\n"
    )
    async with mounted(ops, tmp_path / "m"):
        p = tmp_path / "m" / "f"
        fd = await io(os.open, p, os.O_RDWR)
        await io(fcntl.lockf, fd, fcntl.LOCK_EX)
        # (started from a thread: a child closes the mount's files inherited from the fork before it
        # runs anything, which waits for this thread's answers)
        proc = await io(lambda: subprocess.Popen([sys.executable, "-c", script, str(p)], stdout=subprocess.PIPE, text=True))
        with trio.fail_after(20):
            while not [c for c in ops.of("setlk") if c[4] and c[3].pid == proc.pid]:  # its F_SETLKW waits
                await trio.sleep(0.02)
        proc.send_signal(signal.SIGUSR1)
        out, _ = await io(proc.communicate)
        await io(os.close, fd)
    assert (proc.returncode, out.strip()) == (3, "interrupted")
    assert ops.cancelled == ["setlk"]


async def test_fallocate_lseek_copy_file_range(tmp_path: Path) -> None:
    ops = MemOps()
    ops.add_file(b"a", b"abcdefghij" * 100)
    ops.add_file(b"b")
    async with mounted(ops, tmp_path / "m"):
        fa = await io(os.open, tmp_path / "m" / "a", os.O_RDWR)
        fb = await io(os.open, tmp_path / "m" / "b", os.O_RDWR)
        try:
            await io(os.posix_fallocate, fb, 0, 8192)
            assert await io(os.lseek, fa, 5, os.SEEK_DATA) == 5
            assert await io(os.lseek, fa, 5, os.SEEK_HOLE) == 1000
            assert await io(lambda: os.copy_file_range(fa, fb, 300, 10, 20)) == 300
        finally:
            await io(os.close, fa)
            await io(os.close, fb)
    assert [c[2:] for c in ops.of("fallocate")] == [(0, 0, 8192)]
    assert [c[2:] for c in ops.of("lseek")] == [(5, os.SEEK_DATA), (5, os.SEEK_HOLE)]
    assert [c[2:] for c in ops.of("copy_file_range")] == [(10, 2, 20, 300)]
    assert bytes(ops.nodes[3].data[20:320]) == bytes(ops.nodes[2].data[10:310])


async def test_notifications_drop_what_the_kernel_keeps(tmp_path: Path) -> None:
    ops = MemOps(timeout=3600.0)
    f = ops.add_file(b"f", b"abc")
    f.keep_cache = True
    g = ops.add_file(b"g", b"abc")
    d = ops.add_dir(b"d")
    ops.add_file(b"x", parent=d.ino)
    y = ops.add_file(b"y", parent=d.ino)
    async with mounted(ops, tmp_path / "m"):
        m = tmp_path / "m"
        assert ops.kernel is not None
        # data: the kernel keeps the pages (keep_cache) until told
        assert await io((m / "f").read_bytes) == b"abc"
        f.data[:] = b"xyz"
        f.snapshot = None
        assert await io((m / "f").read_bytes) == b"abc"
        await ops.kernel.invalidate_inode(f.ino, attr_only=True)
        assert await io((m / "f").read_bytes) == b"abc"  # the attributes only
        await ops.kernel.invalidate_inode(f.ino)
        assert await io((m / "f").read_bytes) == b"xyz"
        # attributes
        assert (await io(os.stat, m / "g")).st_size == 3
        g.data[:] = b"abcdefg"
        assert (await io(os.stat, m / "g")).st_size == 3
        await ops.kernel.invalidate_inode(g.ino, attr_only=True)
        assert (await io(os.stat, m / "g")).st_size == 7
        # names
        await io(os.stat, m / "d" / "x")
        await io(os.stat, m / "d" / "y")
        del d.children[b"x"], d.children[b"y"]
        await io(os.stat, m / "d" / "x")  # the kernel still has the entries
        await ops.kernel.invalidate_entry(d.ino, b"x")
        await ops.kernel.notify_delete(d.ino, y.ino, b"y")  # type: ignore[attr-defined]
        for name in ("x", "y"):
            with pytest.raises(FileNotFoundError):
                await io(os.stat, m / "d" / name)
        await ops.kernel.invalidate_inode(12345)  # an inode the kernel does not have: nothing happens
        await ops.kernel.invalidate_entry(d.ino, b"never-seen")


async def test_the_other_requests(tmp_path: Path) -> None:
    ops = MemOps()
    async with mounted(ops, tmp_path / "m"):
        m = tmp_path / "m"
        old = os.umask(0o022)
        try:
            await io(os.mkdir, m / "d", 0o777)
            await io(lambda: (m / "d" / "f").write_bytes(b"hello"))
            await io(os.mkfifo, m / "d" / "fifo", 0o666)
        finally:
            os.umask(old)
        assert [(c[2], c[3]) for c in ops.of("mkdir")] == [(stat.S_IFDIR | 0o755, 0o022)]
        assert ops.of("create")[0][2] == stat.S_IFREG | 0o644 and ops.of("create")[0][4] == 0o022
        assert ops.of("mknod")[0][2] == stat.S_IFIFO | 0o644
        await io(os.symlink, "f", m / "d" / "s")
        assert await io(os.readlink, m / "d" / "s") == "f"
        await io(os.link, m / "d" / "f", m / "d" / "hard")
        assert (await io(os.stat, m / "d" / "hard")).st_nlink == 2
        await io(os.rename, m / "d" / "hard", m / "renamed")
        assert await io((m / "renamed").read_bytes) == b"hello"
        await io(os.setxattr, m / "renamed", "user.k", b"v" * 100)
        assert await io(os.getxattr, m / "renamed", "user.k") == b"v" * 100
        assert await io(os.listxattr, m / "renamed") == ["user.k"]
        await io(os.removexattr, m / "renamed", "user.k")
        with pytest.raises(OSError) as e:
            await io(os.getxattr, m / "renamed", "user.k")
        assert e.value.errno == errno.ENODATA
        st = await io(os.statvfs, m)
        assert (st.f_blocks, st.f_bfree, st.f_bavail, st.f_files, st.f_ffree, st.f_namemax) == (1000, 600, 500, 77, 55, 255)
        fd = await io(os.open, m / "renamed", os.O_RDWR)
        await io(os.fdatasync, fd)
        await io(os.close, fd)
        assert ops.of("fsync")[-1][2] is True
        await io(os.unlink, m / "renamed")
        for name in ("f", "s", "fifo"):
            await io(os.unlink, m / "d" / name)
        await io(os.rmdir, m / "d")
        assert await io(os.listdir, m) == []


async def test_mount_syscall_without_auto_unmount_fusermount3_with_it(tmp_path: Path) -> None:
    async with mounted(MemOps(), tmp_path / "a"):
        assert is_mounted(tmp_path / "a") == "fuse.memfs"
        helpers = await io(subprocess.run, ["pgrep", "-f", f"fusermount3.*{tmp_path / 'a'}"], subprocess.PIPE)
        assert helpers.returncode == 1  # mount(2): no fusermount3
    assert is_mounted(tmp_path / "a") is None
    async with mounted(MemOps(), tmp_path / "b", frozenset({"auto_unmount", "ro"})):
        assert is_mounted(tmp_path / "b") == "fuse.memfs"
        helpers = await io(subprocess.run, ["pgrep", "-f", f"fusermount3.*{tmp_path / 'b'}"], subprocess.PIPE)
        assert helpers.returncode == 0  # fusermount3 stays, to unmount if we die
        with pytest.raises(OSError) as e:
            await io(os.mkdir, tmp_path / "b" / "x")
        assert e.value.errno == errno.EROFS
    assert is_mounted(tmp_path / "b") is None
    await trio.sleep(0.2)
    helpers = await io(subprocess.run, ["pgrep", "-f", f"fusermount3.*{tmp_path / 'b'}"], subprocess.PIPE)
    assert helpers.returncode == 1  # and is gone with the clean unmount


def test_a_daemon_killed_with_sigkill_leaves_no_mount(tmp_path: Path) -> None:
    mnt = tmp_path / "m"
    mnt.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "null_fuse.py"), str(mnt), "--channel", "native", "--files", "10"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while is_mounted(mnt) is None:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert len(os.listdir(mnt / "dir")) == 10
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while is_mounted(mnt) is not None:
            assert time.monotonic() < deadline, "the mount outlived its daemon"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)


def test_a_user_mounts_through_fusermount3() -> None:
    """A user who is not root mounts through the set-user-ID fusermount3, which passes the connection
    back over _FUSE_COMMFD, and unmounts with ``fusermount3 -u``. On this machine /dev/fuse is root's
    alone (mode 0600), so the test runs in a mount namespace of its own where a device node open to
    all stands in for it."""
    work = Path(tempfile.mkdtemp(prefix="native-user-"))
    try:
        os.chmod(work, 0o755)
        script = f"""
            mknod -m 666 {work}/fuse c 10 229
            mount --bind {work}/fuse /dev/fuse
            mkdir {work}/mnt && chown {NOBODY}:{NOBODY} {work}/mnt
            as_user() {{ setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "$@"; }}
            as_user {sys.executable} {REPO}/bench/null_fuse.py {work}/mnt --channel native --files 10 &
            daemon=$!
            for _ in $(seq 200); do grep -q " {work}/mnt " /proc/self/mountinfo && break; sleep 0.05; done
            grep " {work}/mnt " /proc/self/mountinfo
            echo "entries $(as_user ls {work}/mnt/dir | wc -l)"
            as_user fusermount3 -u {work}/mnt
            wait $daemon
            echo "daemon exit $?"
            grep -q " {work}/mnt " /proc/self/mountinfo && echo still-mounted || echo unmounted
        """
        r = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "bash", "-euc", script],
            capture_output=True, text=True, timeout=60,
        )
        assert r.returncode == 0, r.stderr
        mountinfo, entries, status, after = r.stdout.strip().splitlines()
        assert f"fuse.null null rw,user_id={NOBODY},group_id={NOBODY}" in mountinfo, mountinfo
        assert (entries, status, after) == ("entries 10", "daemon exit 0", "unmounted"), r.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _connection(where: Path) -> str:
    """The FUSE connection number of the mount on ``where`` (the minor of its device, from
    /proc/self/mountinfo: a stat(2) would wait for the mount)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == str(where):
                return fields[2].split(":")[1]
    raise AssertionError(f"{where} is not mounted")


async def _abort(where: Path) -> None:
    """Abort the FUSE connection of the mount on ``where``: every request waiting for it ends. (The
    commands run from a thread: their child closes our open files of the mount, which this loop
    answers.)"""
    conn = _connection(where)
    ctl = Path("/sys/fs/fuse/connections")
    mounted_here = not (ctl / conn).exists()
    if mounted_here:
        await io(subprocess.run, ["mount", "-t", "fusectl", "fusectl", str(ctl)])
    try:
        (ctl / conn / "abort").write_text("1")
    finally:
        if mounted_here:
            await io(subprocess.run, ["umount", str(ctl)])


async def answered_within(seconds: float, where: Path, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the mount from a thread; when the mount does not answer in ``seconds`` (a
    deadlock), its connection is aborted, which ends the call, and the test fails."""
    try:
        with trio.fail_after(seconds):
            return await run_sync_abandoning(fn, *args)
    except trio.TooSlowError:
        await _abort(where)
        raise AssertionError(f"{fn.__name__} on {where} got no answer in {seconds} s: the mount deadlocked") from None


class NotifyingOps(MemOps):
    """A LOOKUP of ``drop-*`` in a directory first awaits the kernel's dropping of another entry of
    that directory (INVAL_ENTRY: the kernel takes the directory's lock, which it holds for the
    LOOKUP until answered); a READ of ``f`` first awaits the kernel's dropping of ``f``'s pages
    (INVAL_INODE: the kernel locks the pages, which it holds for the READs in flight until
    answered)."""

    async def lookup(self, parent_inode: int, name: bytes, ctx: RequestContext) -> EntryAttributes:
        if name.startswith(b"drop-"):
            assert self.kernel is not None
            await self.kernel.invalidate_entry(parent_inode, b"other")
        return await super().lookup(parent_inode, name, ctx)

    async def read(self, fh: int, off: int, size: int) -> Any:
        assert self.kernel is not None
        if off == 0 and not self.of("read"):
            await self.kernel.invalidate_inode(self.files[fh])
        return await super().read(fh, off, size)


async def test_an_operation_awaiting_a_notification_the_kernel_holds_up_for_it_is_answered(tmp_path: Path) -> None:
    ops = NotifyingOps(timeout=3600.0)
    d = ops.add_dir(b"d")
    ops.add_file(b"other", parent=d.ino)
    ops.add_file(b"drop-me", b"x", parent=d.ino)
    data = os.urandom(4 << 20)
    ops.add_file(b"f", data)
    m = tmp_path / "m"
    async with mounted(ops, m):
        await io(os.stat, m / "d" / "other")  # the kernel keeps this entry (for an hour)
        lookups = len(ops.of("lookup"))
        assert (await answered_within(30, m, os.stat, m / "d" / "drop-me")).st_size == 1
        await answered_within(30, m, os.rename, m / "d" / "drop-me", m / "d" / "drop-too")
        await answered_within(30, m, os.stat, m / "d" / "drop-too")
        # the notification goes to the kernel once the LOOKUP was answered (the thread left with it
        # writes it after the reply, on a busy host a little later): "other" is asked again
        with trio.fail_after(30):
            while ("lookup", b"other") not in ops.of("lookup")[lookups:]:
                await io(os.stat, m / "d" / "other")
                await trio.sleep(0.05)
        # a READ (the kernel reads ahead: several in flight, their pages locked) awaiting INVAL_INODE
        assert await answered_within(60, m, (m / "f").read_bytes) == data
