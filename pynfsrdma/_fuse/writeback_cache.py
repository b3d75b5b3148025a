"""What the kernel's writeback cache holds of an open file and the daemon does not.

With FUSE_WRITEBACK_CACHE the kernel keeps a regular file's size, mtime and ctime itself and takes
none of them from the attributes we answer (fs/fuse/inode.c: ``fuse_get_cache_mask``). A write(2)
lands in its page cache and stamps the inode's mtime with the kernel's clock (``file_update_time``);
the dirty pages reach us as WRITE requests later (writeback, fsync, close), and the mtime as a
SETATTR of FATTR_MTIME|FATTR_CTIME when the inode is written (``fuse_flush_times``). Until then a
holder of a delegation that answers for the file (CB_GETATTR, the return of the delegation) must
ask the kernel first:

- the dirty pages: FUSE_NOTIFY_INVAL_INODE of the whole file makes the kernel write each dirty
  page back before it drops it (``invalidate_inode_pages2_range`` calls ``launder_folio``), as
  WRITE requests served while the notification is under way;
- the size and mtime the mount shows: a stat of the file through the mount (the kernel answers
  from its inode, or asks us and puts its own size and times over our answer).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from .._trio_compat import run_sync_abandoning
from .inodes import ROOT_INODE, Inode, InodeTable

log = logging.getLogger(__name__)

STAT_WAIT = 5.0  # seconds a stat through the mount may take before we answer without it
MAX_DEPTH = 4096  # directories between a file and the mount's root, at most


@dataclass(frozen=True, slots=True)
class KernelInode:
    """The size and mtime of a file as the kernel's inode holds them."""

    size: int
    mtime_ns: int


def path_of(inodes: InodeTable, node: Inode) -> str | None:
    """A path of ``node`` below the mount's root, by the names the kernel reached it by (None: no
    name leads to it from the root)."""
    parts: list[str] = []
    while node.ino != ROOT_INODE:
        if not node.names or len(parts) > MAX_DEPTH:
            return None
        parent, name = node.names[-1]
        parts.append(name)
        up = inodes.get(parent)
        if up is None:
            return None
        node = up
    return "/".join(reversed(parts))


class KernelFiles:
    """The kernel's side of the mount's open files, for the writeback cache: ``invalidate`` tells
    the kernel to drop an inode's cached data; ``mountpoint`` is where the mount is, once it is."""

    def __init__(self, inodes: InodeTable, invalidate: Callable[[int, bool], Awaitable[None]]) -> None:
        self.inodes = inodes
        self.invalidate = invalidate
        self.mountpoint: str | None = None

    async def write_back(self, node: Inode) -> None:
        """The dirty pages of regular file ``node`` written back to us (and its cached pages dropped)."""
        await self.invalidate(node.ino, False)

    async def stat(self, node: Inode) -> KernelInode | None:
        """The size and mtime the kernel holds of ``node`` (None when no name of it could be
        stat'ed through the mount)."""
        rel = path_of(self.inodes, node)
        if self.mountpoint is None or rel is None:
            return None
        path = os.path.join(self.mountpoint, rel)
        st: os.stat_result | None = None
        with trio.move_on_after(STAT_WAIT):
            try:
                st = await run_sync_abandoning(os.lstat, path)
            except OSError as e:
                log.info("stat of %s through the mount: %s", path, e)
        if st is None or st.st_ino != node.ino:  # (the name leads elsewhere now)
            return None
        return KernelInode(st.st_size, st.st_mtime_ns)
