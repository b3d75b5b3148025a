"""The mount's NFSv4.2 file operations (RFC 7862; ``vers=4.2``): fallocate(2) as ALLOCATE and
DEALLOCATE, lseek(2)'s SEEK_DATA and SEEK_HOLE as SEEK, copy_file_range(2) as COPY or CLONE.
Where the server (or an NFSv4.1 session) has none, ENOSYS: the kernel falls back and stops asking."""

from __future__ import annotations

import errno
import os

import trio

from .._client.nfs4 import NFSv4
from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .inodes import InodeTable
from .lowlevel import FUSEError
from .opens import FileHandle, Opens

# fallocate(2)'s modes (linux/falloc.h)
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02


def v42_missing(e: NFS4Error) -> Exception:
    """A server (or a 4.1 session) without the operation: ENOSYS, on which the kernel falls back
    and asks no more; any other error as it is."""
    if e.status == c.NFS4ERR_NOTSUPP:
        return FUSEError(errno.ENOSYS)
    return e


class NFS42Files:
    """fallocate, lseek and copy_file_range on a mount's open files (``opens``)."""

    def __init__(self, nfs: NFSv4, inodes: InodeTable, opens: Opens) -> None:
        self.nfs = nfs
        self.inodes = inodes
        self.opens = opens

    async def fallocate(self, h: FileHandle, mode: int, offset: int, length: int) -> None:
        """Mode 0 is ALLOCATE; a punched hole (PUNCH_HOLE with KEEP_SIZE) is DEALLOCATE; other modes
        are not carried (EOPNOTSUPP)."""
        if not h.access & c.OPEN4_SHARE_ACCESS_WRITE:
            raise FUSEError(errno.EBADF)
        punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
        if mode not in (0, punch):
            raise FUSEError(errno.EOPNOTSUPP)
        node = h.inode
        await self.opens.sync(node)  # (gathered writes land before the range changes)
        asked = self.inodes.asking(node)
        try:
            if mode:
                attrs = await self.nfs.nfs42.deallocate(h.shared.of, offset, length, h.cred)
            else:
                attrs = await self.nfs.nfs42.allocate(h.shared.of, offset, length, h.cred)
        except NFS4Error as e:
            raise v42_missing(e) from None
        self.inodes.refresh(node, attrs, trio.current_time(), asked=asked)
        node.data_change = attrs.change  # (the kernel dropped the punched pages itself)
        node.drop_readahead()

    async def lseek(self, h: FileHandle, offset: int, whence: int) -> int:
        """SEEK_DATA and SEEK_HOLE by SEEK (ENXIO past the end, or for data when none follows)."""
        if whence not in (os.SEEK_DATA, os.SEEK_HOLE):
            raise FUSEError(errno.EINVAL)
        await self.opens.sync(h.inode)
        what = c.NFS4_CONTENT_DATA if whence == os.SEEK_DATA else c.NFS4_CONTENT_HOLE
        try:
            return await self.nfs.nfs42.seek(h.shared.of, offset, what, h.cred)
        except NFS4Error as e:
            raise v42_missing(e) from None

    async def copy_file_range(self, src: FileHandle, off_in: int, dst: FileHandle, off_out: int, length: int) -> int:
        """COPY within the server (the data does not come to us), else CLONE."""
        if not dst.access & c.OPEN4_SHARE_ACCESS_WRITE or not src.access & c.OPEN4_SHARE_ACCESS_READ:
            raise FUSEError(errno.EBADF)
        await self.opens.commit(src.inode)  # (the server copies what it has on its disk)
        await self.opens.sync(dst.inode)
        node = dst.inode
        asked = self.inodes.asking(node)
        self.inodes.wrote(node)  # (attributes asked from now until the reply may not show the copy)
        try:
            n = await self.nfs.nfs42.copy(src.shared.of, dst.shared.of, off_in, off_out, length, dst.cred)
        except NFS4Error as e:
            if e.status != c.NFS4ERR_NOTSUPP:
                raise
            try:
                attrs = await self.nfs.nfs42.clone(src.shared.of, dst.shared.of, off_in, off_out, length, dst.cred)
            except NFS4Error as e2:
                raise v42_missing(e2) from None
            self.inodes.refresh(node, attrs, trio.current_time(), asked=asked)
            n = length
        finally:
            self.inodes.wrote(node)
        node.stale()
        node.drop_readahead()
        return n
