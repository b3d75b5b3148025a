"""NFS4ERR_STALE on the mount: the server no longer has a file or directory (another client removed
it). The kernel's entries that led to it go before the ESTALE is answered, so that the kernel, which
looks the path up again on ESTALE, asks the server for those names too.
"""

from __future__ import annotations

from collections.abc import Mapping

from .cache import NameCache
from .inodes import InodeTable
from .opens import DropEntry, FileHandle
from .readdir import DirHandle

# the operations whose first argument is a file handle (the others': an inode)
HANDLE_OPERATIONS = frozenset({"read", "write", "flush", "fsync", "release", "readdir", "releasedir", "fsyncdir"})


class StaleHandles:
    """The stale files of ``inodes``: ``files`` and ``dirs`` are the FUSE handles open on them,
    ``drop_entry(parent, name)`` drops the kernel's entry of a name."""

    def __init__(self, inodes: InodeTable, names: NameCache, files: Mapping[int, FileHandle],
                 dirs: Mapping[int, DirHandle], drop_entry: DropEntry) -> None:
        self.inodes = inodes
        self.names = names
        self.files = files
        self.dirs = dirs
        self._drop_entry = drop_entry

    async def gone(self, operation: str, arg: int) -> None:
        """The server no longer has the file or directory ``operation`` was about (NFS4ERR_STALE:
        another client removed it; ``arg`` is the operation's first argument, an inode or a file
        handle). The kernel's entry that led to it goes before the ESTALE is answered, so that the
        kernel, which looks the path up again on ESTALE, asks the server for that name too."""
        if operation in HANDLE_OPERATIONS:
            h = self.files.get(arg) or self.dirs.get(arg)
            node = h.inode if h is not None else None
        else:
            node = self.inodes.get(arg)
        for pino, name in node.names if node is not None else ():
            self.inodes.unnamed(pino, name)
            self.names.drop(pino, name)
            parent = self.inodes.get(pino)
            if parent is not None:
                parent.stale()
            await self._drop_entry(pino, name)
