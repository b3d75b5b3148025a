"""The FUSE low-level interface: what the operations layer implements and every channel serves.

A channel (libfuse through pyfuse3 in :mod:`.via_pyfuse3`, or the FUSE kernel protocol spoken on
/dev/fuse directly) reads the kernel's requests, calls the :class:`Operations` method of the same
name with these plain values, and turns what it returns (or the :class:`FUSEError` it raises) into
the kernel's reply. Nothing here does I/O or knows about NFS; the operations layer knows nothing of
the channel beyond :class:`Kernel`, the notifications it may send back.

Names follow the kernel's protocol (``include/uapi/linux/fuse.h``) where it has one: a node is
an inode number (``FUSE_ROOT_ID`` is the mount's root), a file handle is the number the operations
layer handed back at open, ``lock_owner`` is the kernel's opaque owner of POSIX locks.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any, Protocol

from .._client.read_sink import PayloadSink
from .kernel.records import EntryAttributes, EntryFields, FileInfo, FileLock, StatvfsData

ROOT_INODE = 1  # FUSE_ROOT_ID

# fuse_file_lock.type: the values of F_RDLCK, F_WRLCK and F_UNLCK (fcntl.h)
F_RDLCK = 0
F_WRLCK = 1
F_UNLCK = 2
OFFSET_MAX = (1 << 63) - 1  # the end of a POSIX lock that runs to the end of the file


class FUSEError(Exception):
    """Answer the kernel's request with this errno (the caller of the system call sees it)."""

    __slots__ = ("errno",)

    def __init__(self, errno_: int) -> None:
        super().__init__(errno_)
        self.errno = errno_

    def __str__(self) -> str:
        return os.strerror(self.errno)


@dataclass(slots=True)
class RequestContext:
    """Who made the request (fuse_in_header); pid 0 for the kernel's own requests."""

    uid: int = 0
    gid: int = 0
    pid: int = 0
    umask: int = 0


@dataclass(slots=True)
class SetattrFields:
    """Which attributes a SETATTR changes (fuse_setattr_in.valid). ``*_now``: set that time to the
    server's "now" (utimensat's UTIME_NOW) instead of the value given; ``kill_suidgid``: the kernel
    asks for the set-user/group-ID bits to be cleared (a write or truncate by a non-owner)."""

    update_atime: bool = False
    update_mtime: bool = False
    update_ctime: bool = False
    update_mode: bool = False
    update_uid: bool = False
    update_gid: bool = False
    update_size: bool = False
    update_atime_now: bool = False
    update_mtime_now: bool = False
    kill_suidgid: bool = False


class ReaddirToken(Protocol):
    """Where a readdir puts its entries, in order."""

    def add(self, name: bytes, attrs: EntryAttributes, next_id: int) -> bool:
        """One entry, with its attributes (readdirplus: the kernel counts a lookup of it) and the
        offset to go on from after it. False: the kernel's buffer is full and the entry was not
        taken (it is asked for again from ``next_id`` of the entry before)."""
        ...

    def add_fields(self, name: bytes, fields: EntryFields, next_id: int) -> bool:
        """:meth:`add` with the attributes as :data:`EntryFields`."""
        ...


class Kernel(Protocol):
    """Notifications to the kernel (fuse_notify_*), sent by the channel. They may block until the
    kernel is done with requests of ours: call them where that cannot deadlock (a task of their own)."""

    async def invalidate_inode(self, ino: int, attr_only: bool = False) -> None:
        """Drop the kernel's cached attributes of ``ino`` and, unless ``attr_only``, its cached data."""
        ...

    async def invalidate_entry(self, parent: int, name: bytes) -> None:
        """Drop the kernel's cached entry ``name`` in ``parent`` (positive or negative)."""
        ...

    async def notify_delete(self, parent: int, child: int, name: bytes) -> None:
        """``name`` in ``parent``, which was node ``child``, is gone (removed by another client): the
        kernel drops the entry if it still names ``child``, and tells inotify watchers."""
        ...


def supplementary_groups(pid: int) -> tuple[int, ...]:
    """The supplementary groups of process ``pid`` (``Groups:`` of /proc/PID/status); OSError if
    the process is gone."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"Groups:"):
                return tuple(sorted(int(g) for g in line.split()[1:]))
    return ()


def caller_ccache(pid: int, uid: int) -> str | None:
    """The Kerberos ticket cache process ``pid`` names in its environment (``KRB5CCNAME``), if it is
    a file cache that user ``uid`` owns (a process may not lend us another user's tickets); None
    otherwise, or if the process is gone."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for entry in env:
        if entry.startswith(b"KRB5CCNAME="):
            name = os.fsdecode(entry[len(b"KRB5CCNAME="):])
            path = name.removeprefix("FILE:")
            if ":" in path or not path.startswith("/"):
                return None  # (only file caches: their owner says whose they are)
            try:
                st = os.stat(path)
            except OSError:
                return None
            return f"FILE:{path}" if st.st_uid == uid else None
    return None


class Operations:
    """The operations a file system answers; each channel calls them. What is not implemented
    answers ENOSYS (the kernel then stops asking for most)."""

    kernel: Kernel | None = None  # set by the channel before the first request
    # The operations an interrupted caller (a signal, FUSE_INTERRUPT) may cancel: the channel then
    # cancels them (they see trio.Cancelled) and answers EINTR. Those not named run to completion
    # and answer as usual, which the kernel allows. By default only waiting for a lock, as a blocked
    # F_SETLKW must be cancellable: an operation that may send or wait for data (a read sends the
    # file's gathered writes first) must not be left half done by an interrupt unless it says so.
    interruptible: frozenset[str] = frozenset({"getlk", "setlk"})
    # The kinds of lock ("posix", "flock") the kernel keeps local to the mount although the file
    # system answers lock requests (nfs(5)'s local_lock=)
    local_locks: frozenset[str] = frozenset()
    # Whether the kernel is to gather writes in its page cache (FUSE_WRITEBACK_CACHE): the channel
    # asks for it at INIT and sets this to what the kernel agreed to
    writeback_cache: bool = False

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: RequestContext
    ) -> EntryAttributes | EntryFields:
        """``name`` in ``parent_inode``: its attributes, as an object or as :data:`EntryFields`
        (``st_ino`` 0: the name does not exist)."""
        raise FUSEError(errno.ENOSYS)

    async def forget(self, inode_list: list[tuple[int, int]]) -> None:
        return None

    async def getattr(self, inode: int, ctx: RequestContext) -> EntryAttributes | EntryFields:
        """``inode``'s attributes, as an object or as :data:`EntryFields`."""
        raise FUSEError(errno.ENOSYS)

    async def setattr(
        self, inode: int, attr: EntryAttributes, fields: SetattrFields, fh: int | None, ctx: RequestContext
    ) -> EntryAttributes:
        raise FUSEError(errno.ENOSYS)

    async def readlink(self, inode: int, ctx: RequestContext) -> bytes:
        raise FUSEError(errno.ENOSYS)

    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: RequestContext
    ) -> EntryAttributes:
        raise FUSEError(errno.ENOSYS)

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: RequestContext) -> EntryAttributes:
        raise FUSEError(errno.ENOSYS)

    async def unlink(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        raise FUSEError(errno.ENOSYS)

    async def rmdir(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        raise FUSEError(errno.ENOSYS)

    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: RequestContext
    ) -> EntryAttributes:
        raise FUSEError(errno.ENOSYS)

    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: RequestContext,
    ) -> None:
        raise FUSEError(errno.ENOSYS)

    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: RequestContext
    ) -> EntryAttributes:
        raise FUSEError(errno.ENOSYS)

    async def open(self, inode: int, flags: int, ctx: RequestContext) -> FileInfo:
        raise FUSEError(errno.ENOSYS)

    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: RequestContext
    ) -> tuple[FileInfo, EntryAttributes]:
        raise FUSEError(errno.ENOSYS)

    async def read(self, fh: int, off: int, size: int) -> Any:
        """The bytes read (a bytes-like object, or a list of them in order; shorter than ``size`` at
        the end of the file)."""
        raise FUSEError(errno.ENOSYS)

    async def read_into(self, fh: int, off: int, size: int, sink: PayloadSink) -> Any:
        """:meth:`read`, given ``sink``, a pipe for this request's reply, that the data may be spliced
        into: a :class:`~pynfsrdma._transport.base.SplicedPayload` in it is returned then. By default
        the data is read as usual."""
        return await self.read(fh, off, size)

    async def write(self, fh: int, off: int, buf: Any) -> int:
        """``buf`` is a bytes-like object the operations layer may keep (the channel does not
        reuse its memory while it is referenced)."""
        raise FUSEError(errno.ENOSYS)

    async def flush(self, fh: int, lock_owner: int = 0) -> None:
        """close(2) of a descriptor of the open file: report write errors; release the POSIX locks
        of ``lock_owner`` (0: none given)."""
        raise FUSEError(errno.ENOSYS)

    async def release(self, fh: int, lock_owner: int = 0, flock_unlock: bool = False) -> None:
        """The last descriptor of the open file is gone (``flock_unlock``: release its flock lock)."""
        return None

    async def fsync(self, fh: int, datasync: bool) -> None:
        raise FUSEError(errno.ENOSYS)

    async def opendir(self, inode: int, ctx: RequestContext) -> int:
        raise FUSEError(errno.ENOSYS)

    async def readdir(self, fh: int, start_id: int, token: ReaddirToken) -> None:
        raise FUSEError(errno.ENOSYS)

    async def releasedir(self, fh: int) -> None:
        return None

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        raise FUSEError(errno.ENOSYS)

    async def statfs(self, ctx: RequestContext) -> StatvfsData:
        raise FUSEError(errno.ENOSYS)

    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: RequestContext) -> None:
        raise FUSEError(errno.ENOSYS)

    async def getxattr(self, inode: int, name: bytes, ctx: RequestContext) -> bytes:
        raise FUSEError(errno.ENOSYS)

    async def listxattr(self, inode: int, ctx: RequestContext) -> list[bytes]:
        raise FUSEError(errno.ENOSYS)

    async def removexattr(self, inode: int, name: bytes, ctx: RequestContext) -> None:
        raise FUSEError(errno.ENOSYS)

    async def access(self, inode: int, mode: int, ctx: RequestContext) -> bool:
        raise FUSEError(errno.ENOSYS)

    # -- operations only the native channel carries -----------------------------------------------
    async def getlk(self, fh: int, lock_owner: int, lock: FileLock, ctx: RequestContext) -> FileLock:
        """The first lock that would conflict with ``lock`` (type F_UNLCK: none)."""
        raise FUSEError(errno.ENOSYS)

    async def setlk(
        self, fh: int, lock_owner: int, lock: FileLock, sleep: bool, flock: bool, ctx: RequestContext
    ) -> None:
        """Take (or with F_UNLCK, release) ``lock``; ``sleep``: wait until it can be had (the wait
        is cancelled when the caller is interrupted); ``flock``: a whole-file flock(2) lock of the
        open file rather than a POSIX lock of ``lock_owner``. EAGAIN when held by another."""
        raise FUSEError(errno.ENOSYS)

    async def fallocate(self, fh: int, mode: int, offset: int, length: int) -> None:
        raise FUSEError(errno.ENOSYS)

    async def lseek(self, fh: int, offset: int, whence: int) -> int:
        """SEEK_DATA/SEEK_HOLE (the kernel answers the other whences itself)."""
        raise FUSEError(errno.ENOSYS)

    async def copy_file_range(
        self, fh_in: int, off_in: int, fh_out: int, off_out: int, length: int, flags: int
    ) -> int:
        raise FUSEError(errno.ENOSYS)
