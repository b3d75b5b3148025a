"""The pyfuse3 channel: libfuse (through pyfuse3) reads the kernel's requests and the low-level
operations (:mod:`.lowlevel`) answer them.

pyfuse3 carries no lock, fallocate, lseek or copy_file_range requests (the kernel then keeps
fcntl and flock locks local to the mount), turns a "set the time to now" into the local clock, and
copies every READ reply and WRITE payload. It stays as the fallback channel (``-o channel=pyfuse3``)
and as a reference for the benchmarks.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Any

import pyfuse3

from .._trio_compat import run_sync_abandoning
from .fusermount import open_descriptors, socket_below
from .lowlevel import (
    EntryAttributes,
    EntryFields,
    FileInfo,
    FUSEError,
    Operations,
    RequestContext,
    SetattrFields,
)

log = logging.getLogger(__name__)

# pyfuse3's workers kept idle at least (its default is 1). A worker that takes a request while no
# other is waiting starts another; one that finds more than this many waiting ends. With one kept, a
# request answered after a round trip to the server (create, flush) overlapping one answered at once
# (a release) started a task and ended one for every file tar extracted.
WORKERS_KEPT = 4


def _entry(a: EntryAttributes) -> pyfuse3.EntryAttributes:
    e = pyfuse3.EntryAttributes()
    e.st_ino = a.st_ino
    e.generation = a.generation
    e.entry_timeout = a.entry_timeout
    e.attr_timeout = a.attr_timeout
    e.st_mode = a.st_mode
    e.st_nlink = a.st_nlink
    e.st_uid = a.st_uid
    e.st_gid = a.st_gid
    e.st_rdev = a.st_rdev
    e.st_size = a.st_size
    e.st_blksize = a.st_blksize
    e.st_blocks = a.st_blocks
    e.st_atime_ns = a.st_atime_ns
    e.st_mtime_ns = a.st_mtime_ns
    e.st_ctime_ns = a.st_ctime_ns
    return e


def _attrs(e: pyfuse3.EntryAttributes) -> EntryAttributes:
    return EntryAttributes(
        st_ino=e.st_ino,
        st_mode=e.st_mode,
        st_uid=e.st_uid,
        st_gid=e.st_gid,
        st_size=e.st_size,
        st_atime_ns=e.st_atime_ns,
        st_mtime_ns=e.st_mtime_ns,
        st_ctime_ns=e.st_ctime_ns,
    )


def _ctx(c: pyfuse3.RequestContext) -> RequestContext:
    return RequestContext(c.uid, c.gid, c.pid, c.umask)


def _info(fi: FileInfo) -> pyfuse3.FileInfo:
    return pyfuse3.FileInfo(fh=fi.fh, keep_cache=fi.keep_cache, direct_io=fi.direct_io, nonseekable=fi.nonseekable)


class _Token:
    __slots__ = ("token",)

    def __init__(self, token: pyfuse3.ReaddirToken) -> None:
        self.token = token

    def add(self, name: bytes, attrs: EntryAttributes, next_id: int) -> bool:
        return bool(pyfuse3.readdir_reply(self.token, name, _entry(attrs), next_id))

    def add_fields(self, name: bytes, fields: EntryFields, next_id: int) -> bool:
        return self.add(name, EntryAttributes(*fields), next_id)


class _Kernel:
    """Notifications through libfuse, each in a thread that a cancelled caller leaves behind: the
    kernel may wait for a request of ours on that inode (or in that directory) before it takes one."""

    async def invalidate_inode(self, ino: int, attr_only: bool = False) -> None:
        try:
            await run_sync_abandoning(pyfuse3.invalidate_inode, ino, attr_only)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EBADF, errno.ENOTCONN):
                log.info("invalidate_inode(%d, attr_only=%s): %s", ino, attr_only, e)

    async def invalidate_entry(self, parent: int, name: bytes) -> None:
        try:
            await run_sync_abandoning(pyfuse3.invalidate_entry, parent, name)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EBADF, errno.ENOTCONN):
                log.info("invalidate_entry(%d, %r): %s", parent, name, e)

    async def notify_delete(self, parent: int, child: int, name: bytes) -> None:
        try:
            await run_sync_abandoning(pyfuse3.invalidate_entry, parent, name, child)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EBADF, errno.ENOTCONN):
                log.info("notify_delete(%d, %d, %r): %s", parent, child, name, e)


class _Adapter(pyfuse3.Operations):
    """pyfuse3's operations, each handed to the low-level operations with plain values."""

    enable_writeback_cache = False
    supports_dot_lookup = True

    def __init__(self, ops: Operations) -> None:
        super().__init__()
        self.ops = ops
        self.enable_writeback_cache = ops.writeback_cache  # (pyfuse3 asks for it when the kernel offers it)

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any) -> Any:
        try:
            a = await self.ops.lookup(parent_inode, name, _ctx(ctx))
            return _entry(EntryAttributes(*a) if isinstance(a, tuple) else a)
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def forget(self, inode_list: Any) -> None:
        await self.ops.forget(list(inode_list))

    async def getattr(self, inode: int, ctx: Any) -> Any:
        try:
            a = await self.ops.getattr(inode, _ctx(ctx))
            return _entry(EntryAttributes(*a) if isinstance(a, tuple) else a)
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def setattr(self, inode: int, attr: Any, fields: Any, fh: Any, ctx: Any) -> Any:
        f = SetattrFields(
            update_atime=fields.update_atime,
            update_mtime=fields.update_mtime,
            update_ctime=fields.update_ctime,
            update_mode=fields.update_mode,
            update_uid=fields.update_uid,
            update_gid=fields.update_gid,
            update_size=fields.update_size,
        )
        try:
            return _entry(await self.ops.setattr(inode, _attrs(attr), f, fh, _ctx(ctx)))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def readlink(self, inode: int, ctx: Any) -> bytes:
        try:
            return await self.ops.readlink(inode, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: Any) -> Any:
        try:
            return _entry(await self.ops.mknod(parent_inode, name, mode, rdev, _ctx(ctx)))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Any) -> Any:
        try:
            return _entry(await self.ops.mkdir(parent_inode, name, mode, _ctx(ctx)))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        try:
            await self.ops.unlink(parent_inode, name, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        try:
            await self.ops.rmdir(parent_inode, name, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def symlink(self, parent_inode: int, name: bytes, target: bytes, ctx: Any) -> Any:
        try:
            return _entry(await self.ops.symlink(parent_inode, name, target, _ctx(ctx)))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def rename(
        self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes, flags: int, ctx: Any
    ) -> None:
        try:
            await self.ops.rename(parent_inode_old, name_old, parent_inode_new, name_new, flags, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx: Any) -> Any:
        try:
            return _entry(await self.ops.link(inode, new_parent_inode, new_name, _ctx(ctx)))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def open(self, inode: int, flags: int, ctx: Any) -> Any:
        try:
            return _info(await self.ops.open(inode, flags, _ctx(ctx)))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: Any) -> Any:
        try:
            fi, attrs = await self.ops.create(parent_inode, name, mode, flags, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None
        return _info(fi), _entry(attrs)

    async def read(self, fh: int, off: int, size: int) -> Any:
        try:
            data = await self.ops.read(fh, off, size)
            return b"".join(data) if isinstance(data, list) else data  # (pyfuse3 takes one buffer)
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        try:
            return await self.ops.write(fh, off, buf)
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def flush(self, fh: int) -> None:
        try:
            await self.ops.flush(fh)
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def release(self, fh: int) -> None:
        try:
            await self.ops.release(fh)
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def fsync(self, fh: int, datasync: bool) -> None:
        try:
            await self.ops.fsync(fh, datasync)
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def opendir(self, inode: int, ctx: Any) -> int:
        try:
            return await self.ops.opendir(inode, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        try:
            await self.ops.readdir(fh, start_id, _Token(token))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def releasedir(self, fh: int) -> None:
        try:
            await self.ops.releasedir(fh)
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        try:
            await self.ops.fsyncdir(fh, datasync)
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def statfs(self, ctx: Any) -> Any:
        try:
            s = await self.ops.statfs(_ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None
        out = pyfuse3.StatvfsData()
        for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
                  "f_namemax"):
            setattr(out, k, getattr(s, k))
        return out

    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: Any) -> None:
        try:
            await self.ops.setxattr(inode, name, value, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def getxattr(self, inode: int, name: bytes, ctx: Any) -> bytes:
        try:
            return await self.ops.getxattr(inode, name, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def listxattr(self, inode: int, ctx: Any) -> Any:
        try:
            return await self.ops.listxattr(inode, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def removexattr(self, inode: int, name: bytes, ctx: Any) -> None:
        try:
            await self.ops.removexattr(inode, name, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def access(self, inode: int, mode: int, ctx: Any) -> bool:
        try:
            return await self.ops.access(inode, mode, _ctx(ctx))
        except FUSEError as e:
            raise pyfuse3.FUSEError(e.errno) from None


class Pyfuse3Channel:
    """Mount with libfuse and serve ``ops`` until unmounted or :meth:`terminate` is called."""

    name = "pyfuse3"

    def __init__(self, ops: Operations, mountpoint: str, options: set[str]) -> None:
        self.ops = ops
        self.mountpoint = mountpoint
        self.options = options
        self._adapter = _Adapter(ops)
        ops.kernel = _Kernel()

    def mount(self) -> None:
        """Mount (OSError naming why not). The socket libfuse leaves to fusermount3 for auto_unmount
        goes below the connection's descriptor (:func:`.fusermount.socket_below` says why)."""
        spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        before = open_descriptors()
        try:
            pyfuse3.init(self._adapter, self.mountpoint, self.options)
        except RuntimeError as e:
            os.close(spare)
            raise OSError(errno.EIO, str(e)) from e
        socket_below(spare, open_descriptors() - before)

    async def serve(self) -> None:
        logging.getLogger("pyfuse3").setLevel(max(logging.INFO, logging.getLogger().getEffectiveLevel()))
        await pyfuse3.main(min_tasks=WORKERS_KEPT)

    def terminate(self) -> None:
        pyfuse3.terminate()

    def close(self) -> None:
        pyfuse3.close(unmount=True)
