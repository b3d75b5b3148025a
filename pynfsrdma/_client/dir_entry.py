"""What ``scandir`` yields: an entry of a directory listing, as ``os.DirEntry`` has it.

Its attributes came with the READDIR reply, so asking them costs nothing; a symbolic link's target was
looked up while listing (only links cost that), so ``is_dir()`` and ``stat()`` follow links as
``os.DirEntry``'s do.
"""

from __future__ import annotations

import errno
import os
import stat

from .attributes import FileAttrs


class DirEntry:
    """``name`` and ``path`` (the path given to scandir joined with the name), and the attributes."""

    __slots__ = ("_attrs", "_target", "name", "path")

    def __init__(self, name: str, path: str, attrs: FileAttrs, target: FileAttrs | None = None) -> None:
        self.name = name
        self.path = path
        self._attrs = attrs
        self._target = target  # a symlink's target (None: dangling, or not a link)

    def _of(self, follow_symlinks: bool) -> FileAttrs | None:
        if follow_symlinks and self._attrs.is_symlink:
            return self._target
        return self._attrs

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        a = self._of(follow_symlinks)
        return a is not None and a.is_dir

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        a = self._of(follow_symlinks)
        return a is not None and stat.S_ISREG(a.st_mode)

    def is_symlink(self) -> bool:
        return self._attrs.is_symlink

    def stat(self, *, follow_symlinks: bool = True) -> FileAttrs:
        """The attributes (of a link's target with ``follow_symlinks``; FileNotFoundError if it is
        dangling)."""
        a = self._of(follow_symlinks)
        if a is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self.path)
        return a

    def inode(self) -> int:
        return self._attrs.fileid

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"<DirEntry {self.name!r}>"


__all__ = ["DirEntry"]
