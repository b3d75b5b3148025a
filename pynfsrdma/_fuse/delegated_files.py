"""Files the mount holds a delegation on: what goes back with a delegation when it is returned, and
what CB_GETATTR is told of a file held under a write delegation. With the writeback cache, what the
kernel holds of a file open here comes first (:mod:`.writeback_cache`).
"""

from __future__ import annotations

import logging

import trio

from .._client.nfs4 import HeldFile, NFSv4
from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .inodes import Inode, InodeTable
from .opens import Invalidate, Opens
from .writeback_cache import KernelFiles, KernelInode

log = logging.getLogger(__name__)


class DelegatedFiles:
    """The delegated files of ``inodes`` (opens: ``opens``); ``invalidate(ino, attr_only)`` tells the
    kernel to drop what it keeps of a file."""

    def __init__(
        self, nfs: NFSv4, inodes: InodeTable, opens: Opens, nursery: trio.Nursery, kernel_files: KernelFiles,
        invalidate: Invalidate,
    ) -> None:
        self.nfs = nfs
        self.inodes = inodes
        self.opens = opens
        self.nursery = nursery
        self.kernel_files = kernel_files
        self._invalidate = invalidate

    @property
    def writeback_cache(self) -> bool:
        """Whether the kernel gathers writes in its page cache (see :class:`.opens.Opens`)."""
        return self.opens.writeback_cache

    async def returning(self, fh: bytes) -> None:
        """Before a delegation goes back: the file's gathered writes reach the server, and what we
        cached under the delegation must be revalidated from now on. With the writeback cache, what
        the kernel holds of a file open here comes first (:meth:`_pull_kernel`): its dirty pages
        reach the server with ours, and the mtime the mount shows goes back with the delegation
        (under an attribute delegation, as the modify time kept), or is set on the server after
        the WRITEs that moved it there, so that every client sees the one the mount shows."""
        for node in list(self.inodes):
            if node.fh != fh:
                continue
            seen = await self._pull_kernel(node)
            for s in list(node.shared.values()):
                if s.writer is not None:
                    await s.writer.flush()  # (sends what is gathered, then commits)
            if seen is not None:
                await self._server_mtime_as_kernels(node, seen)
            node.stale()
            self.nursery.start_soon(self._invalidate, node.ino, True)

    async def _pull_kernel(self, node: Inode) -> KernelInode | None:
        """With the writeback cache, regular file ``node`` open here: the kernel's dirty pages of it
        written back to us, and the size and mtime its inode holds (see :mod:`.writeback_cache`);
        the mtime is the modify time kept under an attribute delegation. None otherwise."""
        if not self.writeback_cache or not node.is_reg or not node.opens:
            return None
        await self.kernel_files.write_back(node)
        return await self._kernel_inode(node)

    async def _kernel_inode(self, node: Inode) -> KernelInode | None:
        """With the writeback cache, regular file ``node`` open here: the size and mtime its kernel
        inode holds; the mtime is the modify time kept under an attribute delegation."""
        if not self.writeback_cache or not node.is_reg or not node.opens:
            return None
        seen = await self.kernel_files.stat(node)
        if seen is not None:
            self.nfs.note_write(node.fh, seen.mtime_ns)  # (only under a write attribute delegation)
        return seen

    async def _server_mtime_as_kernels(self, node: Inode, seen: KernelInode) -> None:
        """After the kernel's writes reached the server under a plain delegation: the server's mtime
        is when they came; the kernel's, which the mount shows while the file is open, is when they
        were written. The server is given the kernel's, as the kernel gives it at the close."""
        d = self.nfs.delegations.get(node.fh)
        if d is None or d.timestamps or seen.mtime_ns == node.attrs.mtime_ns:
            return
        writer = next((s for s in node.shared.values() if s.of.access & c.OPEN4_SHARE_ACCESS_WRITE), None)
        if writer is None:
            return
        asked = self.inodes.asking(node)
        try:
            attrs = await self.nfs.names.setattr(node.fh, writer.cred, stateid=writer.of.stateid, mtime_ns=seen.mtime_ns)
        except NFS4Error as e:
            log.info("the kernel's mtime of inode %d not set on the server: %s", node.ino, e)
            return
        self.inodes.refresh(node, attrs, trio.current_time(), asked=asked)
        node.kernel_learned()

    async def held_file(self, fh: bytes) -> HeldFile | None:
        """What CB_GETATTR asks of a file we hold a write delegation of: its size as the writes made
        through us left it, and whether some of them have not been sent yet. With the writeback
        cache and the file open here, the size and mtime are those the kernel's inode holds (a
        stat through the mount: the server waits for the answer only briefly, so the dirty pages
        stay in the kernel), and the kernel's writes it has not sent us yet count as unsent."""
        for node in list(self.inodes):
            if node.fh == fh:
                seen = await self._kernel_inode(node)
                unsent = any(s.writer is not None and s.writer.unsent for s in node.shared.values())
                size = self.inodes.size(node)
                if seen is not None:
                    size = max(size, seen.size)
                    unsent = unsent or (seen.size, seen.mtime_ns) != node.kernel_view
                return HeldFile(size, unsent)
        return None
