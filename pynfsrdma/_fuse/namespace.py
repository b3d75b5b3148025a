"""Changes to the names in the mount's directories: CREATE (mkdir, symlink, mknod), an OPEN that
creates, REMOVE (unlink, rmdir), RENAME and LINK. Each keeps its directory's cached names and
attributes in step with the change_info4 of the reply (:mod:`.change_info`); unlinking or renaming
over a file open here hides it first (:mod:`.silly_rename`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from .._client.attributes import FileAttrs
from .._client.nfs4 import NFSv4
from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential
from .change_info import DirectoryChanges
from .inodes import Inode, InodeTable
from .lowlevel import EntryAttributes, FileInfo
from .opens import Opens, access_mask, share_access
from .silly_rename import SillyRenames

Learn = Callable[[bytes, FileAttrs, "int | None"], Inode]  # a file's handle and attributes taken in
Entry = Callable[[Inode], EntryAttributes]  # the kernel's entry for a file


class Namespace:
    """The name changes in the directories of ``inodes``: ``learn(fh, attrs, asked)`` takes in what
    a reply says of a file, ``entry(node)`` is the kernel's entry for it."""

    def __init__(
        self, nfs: NFSv4, inodes: InodeTable, changes: DirectoryChanges, silly: SillyRenames, opens: Opens,
        learn: Learn, entry: Entry,
    ) -> None:
        self.nfs = nfs
        self.inodes = inodes
        self.changes = changes
        self.silly = silly
        self.opens = opens
        self._learn = learn
        self._entry = entry

    async def create(self, parent: Inode, n: str, ftype: int, cred: Credential, **kw: Any) -> EntryAttributes:
        with self.inodes.changing(parent) as dir_asked:
            asked = self.inodes.asking()
            fh, attrs, cinfo, dir_attrs = await self.nfs.directories.create(
                parent.fh, n, ftype, cred, dir_attrs=True, **kw
            )
            node = self._learn(fh, attrs, asked)
            self.changes.modified(parent, n, cinfo, True, node)
            self.changes.after(parent, cinfo, dir_attrs, dir_asked)
        if ftype == c.NF4DIR:
            self.changes.listed(node)
        return self._entry(node)

    async def unlink(self, parent: Inode, n: str, cred: Credential) -> None:
        target = await self.silly.open_target(parent.fh, n, cred)
        if target is not None:
            await self.silly.hide(parent, n, target, cred)
            return
        with self.inodes.changing(parent) as dir_asked:
            cinfo, dir_attrs = await self.nfs.directories.remove(parent.fh, n, cred, dir_attrs=True)
            self.changes.modified(parent, n, cinfo, False)
            self.changes.after(parent, cinfo, dir_attrs, dir_asked)

    async def rmdir(self, parent: Inode, n: str, cred: Credential) -> None:
        """A directory whose only entries are hidden names of files unlinked while open (.nfsXXXX)
        is empty to its user: their last close comes to us a moment after close(2) returned (FUSE's
        RELEASE does not hold it), and the removal waits for them that long."""
        removed = self.silly.removed
        with self.inodes.changing(parent) as dir_asked:
            try:
                cinfo, dir_attrs = await self.nfs.directories.remove(parent.fh, n, cred, dir_attrs=True)
            except NFS4Error as e:
                target = self.inodes.by_name(parent.ino, n)
                if e.status != c.NFS4ERR_NOTEMPTY or target is None or not await self.silly.gone_from(target.fh, removed):
                    raise
                cinfo, dir_attrs = await self.nfs.directories.remove(parent.fh, n, cred, dir_attrs=True)
            self.changes.modified(parent, n, cinfo, False)
            self.changes.after(parent, cinfo, dir_attrs, dir_asked)

    async def rename(self, src: Inode, old: str, dst: Inode, new: str, cred: Credential) -> None:
        target = await self.silly.open_target(dst.fh, new, cred)
        if target is not None:
            await self.silly.hide(dst, new, target, cred)
        with self.inodes.changing(src) as src_asked, self._changing_other(dst, src) as dst_asked:
            r = await self.nfs.directories.rename(src.fh, old, dst.fh, new, cred, dir_attrs=True)
            moved = self.changes.modified(src, old, r.source, False)
            self.changes.modified(dst, new, r.target, True, moved)
            if dst is src:
                # (one directory: its change attribute moved once, from the source's "before" to the
                # target's "after")
                self.changes.after(src, r.target, r.target_attrs, src_asked)
            else:
                self.changes.after(src, r.source, r.source_attrs, src_asked)
                self.changes.after(dst, r.target, r.target_attrs, dst_asked)

    def _changing_other(self, node: Inode, other: Inode) -> contextlib.AbstractContextManager[int]:
        """``InodeTable.changing`` of ``node`` unless it is ``other``, whose is taken already."""
        return contextlib.nullcontext(0) if node is other else self.inodes.changing(node)

    async def link(self, node: Inode, parent: Inode, n: str, cred: Credential) -> EntryAttributes:
        asked = self.inodes.asking(node)
        with self.inodes.changing(parent) as dir_asked:
            attrs, cinfo, dir_attrs = await self.nfs.directories.link(node.fh, parent.fh, n, cred, dir_attrs=True)
            node = self._learn(node.fh, attrs, asked)
            self.changes.modified(parent, n, cinfo, True, node)
            self.changes.after(parent, cinfo, dir_attrs, dir_asked)
        return self._entry(node)

    async def open_create(
        self, parent: Inode, n: str, cred: Credential, mode: int, flags: int, access: int, direct: bool
    ) -> tuple[FileInfo, EntryAttributes]:
        """An OPEN of ``n`` in ``parent`` that may create the file, for ``access``; the FUSE handle
        made for it (``direct``: its I/O bypasses the kernel's page cache) and the kernel's entry."""
        exclusive = bool(flags & os.O_EXCL)
        want = 0 if exclusive else access_mask(access)  # (an exclusive create made the file: no check)
        with self.inodes.changing(parent) as dir_asked:
            asked = self.inodes.asking()
            of = await self.nfs.open(
                parent.fh,
                n,
                cred,
                access=access,
                create=True,
                exclusive=exclusive,
                truncate=bool(flags & os.O_TRUNC),
                mode=mode & 0o7777,
                check=want,
                dir_attrs=True,
            )
            if of.attrs is None:
                of.attrs = await self.nfs.names.getattr(of.fh, cred)
            node = self._learn(of.fh, of.attrs, asked)
            cinfo = of.dir_change
            if cinfo is None or cinfo.before == cinfo.after:  # it was there already: the caller's right to open it
                self.opens.granted(node, of, want)
            self.changes.modified(parent, n, cinfo, True, node)
            self.changes.after(parent, cinfo, of.dir_attrs, dir_asked)
        shared = self.opens.adopt(node, of, cred)
        keep = await self.opens.close_to_open(node, None, asked)
        return self.opens.handle(node, shared, share_access(flags), cred, keep, flags, direct), self._entry(node)
