"""Directories opened on the mount: OPENDIR's close-to-open check, READDIR as readdirplus (every
entry with its attributes, the next READDIRs sent ahead: :mod:`pynfsrdma._client.dir_pages`) and
their release."""

from __future__ import annotations

import errno
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import trio

from .._client.attributes import AttrRecord, file_attrs
from .._client.dir_pages import DirReader
from .._client.nfs4 import NFSv4
from .._errors import NFS4Error
from .._rpc.auth import Credential
from .inodes import Inode, InodeTable
from .lowlevel import EntryAttributes, EntryFields, FUSEError, ReaddirToken
from .opens import Opens

# the entries a listing starts with, and the offset to go on from after each (the kernel's next
# request then starts there; NFS reserves READDIR cookies 1 and 2, so none of its entries has them)
DOT_ENTRIES = ((1, b"."), (2, b".."))


@dataclass(eq=False)
class DirHandle:
    inode: Inode
    cred: Credential
    pages: DirReader


class Directories:
    """The open directories of a mount (``dirs``, by FUSE handle, numbered from ``ids`` as the open
    files are); ``entry``: the kernel's entry for a node (with the time its attributes were learned
    at); ``listed_fields``: the entry (as EntryFields) for a file listed and kept without an
    Inode (``InodeTable.listed``); ``changed``: a node's server copy moved under us."""

    def __init__(
        self, nfs: NFSv4, inodes: InodeTable, opens: Opens, nursery: trio.Nursery, ids: itertools.count[int],
        entry: Callable[[Inode, float | None], EntryAttributes],
        listed_fields: Callable[[int, AttrRecord], EntryFields], changed: Callable[[Inode], None],
    ) -> None:
        self.nfs = nfs
        self.inodes = inodes
        self.opens = opens
        self.nursery = nursery
        self.dirs: dict[int, DirHandle] = {}
        self._ids = ids
        self._entry = entry
        self._listed_fields = listed_fields
        self._changed = changed

    async def opendir(self, node: Inode, cred: Credential) -> int:
        """Close-to-open for a directory: the name the kernel reached it by is looked up again (the
        directory may have been removed or renamed by another client: ESTALE then makes the kernel
        look the path up again, instead of a listing of the old directory or an ESTALE from it)."""
        if not node.is_dir:
            raise FUSEError(errno.ENOTDIR)
        named = await self.opens.sole_name(node, cred)
        if named is not None:
            parent, name = named
            asked = self.inodes.asking()
            try:
                fh, attrs = await self.nfs.names.lookup(parent.fh, name, cred)
            except NFS4Error as e:
                if e.errno not in (errno.ENOENT, errno.ESTALE, errno.ENOTDIR):
                    raise
                raise self.opens.name_moved(node, parent, name) from None
            if fh != node.fh:
                raise self.opens.name_moved(node, parent, name)
            if self.inodes.refresh(node, attrs, trio.current_time(), asked=asked):
                self._changed(node)
        node.opens += 1
        fid = next(self._ids)
        self.dirs[fid] = DirHandle(node, cred, DirReader(self.nfs, node.fh, cred, self.nursery, self.inodes.asking))
        return fid

    async def readdir(self, fh: int, start_id: int, token: ReaddirToken) -> None:
        """Readdirplus: every entry with its attributes (the kernel then needs no LOOKUP or GETATTR
        for ``ls -l``). The READDIRs after the one being handed over are sent at once, so that the
        server reads on while we decode and the kernel takes entries; what the kernel asks for again
        comes from the entries we hold (each READDIR is sent once per listing). ``.`` and ``..``
        come first, at offsets 0 and 1 (NFS has no entries for them, and reserves cookies 1 and 2)."""
        h = self.dirs.get(fh)
        if h is None:
            raise FUSEError(errno.EBADF)
        for off, dot in DOT_ENTRIES:
            if start_id < off and not token.add(dot, self._entry(self._dot_node(h.inode, dot), None), off):
                return
        cookie = start_id if start_id > DOT_ENTRIES[-1][0] else 0
        learn = self.inodes.learn
        named = self.inodes.named
        listed = self.inodes.listed
        delegations = self.nfs.delegations
        reply = token.add
        reply_fields = token.add_fields
        entry = self._entry
        listed_fields = self._listed_fields
        dir_ino = h.inode.ino
        while True:
            page, start = await h.pages.page_after(cookie)
            assert page.result is not None
            entries, _, eof = page.result
            now = trio.current_time()
            asked = page.asked
            for i in range(start, len(entries)):
                name, next_cookie, fh_, record = entries[i]
                if fh_ is None or record is None:  # the server gave no handle: look it up
                    asked = self.inodes.asking()
                    try:
                        fh_, attrs = await self.nfs.names.lookup(
                            h.inode.fh, str(name, "utf-8", "surrogateescape"), h.cred
                        )
                    except NFS4Error as err:
                        if err.errno not in (errno.ENOENT, errno.ESTALE):
                            raise
                        cookie = next_cookie  # removed since the READDIR: not listed, the rest is
                        continue
                    now = trio.current_time()
                else:
                    asked = page.asked
                    if fh_ not in delegations:  # (its attributes are ours to give: see Operations._entry)
                        ino = listed(fh_, record, now, dir_ino, str(name, "utf-8", "surrogateescape"))
                        if ino:
                            if not reply_fields(name, listed_fields(ino, record), next_cookie):
                                self.inodes.forget(ino, 1)  # (the kernel did not get it)
                                h.pages.stopped_at(cookie, page, i)
                                return
                            cookie = next_cookie
                            continue
                    attrs = file_attrs(record)
                node, changed = learn(fh_, attrs, now, False, asked=asked)
                if changed:
                    self._changed(node)
                if not reply(name, entry(node, now), next_cookie):
                    self.inodes.drop_if_unused(node)
                    h.pages.stopped_at(cookie, page, i)  # (the kernel's next request starts after ``cookie``)
                    return
                node.lookups += 1
                named(node, dir_ino, str(name, "utf-8", "surrogateescape"))
                cookie = next_cookie
            if eof or start == len(entries):
                return

    def _dot_node(self, node: Inode, dot: bytes) -> Inode:
        """What ``.`` or ``..`` of directory ``node`` lead to, as far as we know (``..`` of a
        directory whose parent we never saw: the directory itself)."""
        key = self.inodes.name(node)
        if dot == b"." or key is None:
            return node
        return self.inodes.get(key[0]) or node

    def releasedir(self, fh: int) -> None:
        h = self.dirs.pop(fh, None)
        if h is not None:
            h.pages.close()
            h.inode.opens -= 1
            self.inodes.drop_if_unused(h.inode)
