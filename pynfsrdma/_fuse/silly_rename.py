"""Files unlinked (or renamed over) while open, as the Linux client keeps them: the name is renamed
to a hidden ``.nfsXXXX`` first, so that the open file's data stays reachable on the server, and that
name is removed when the file's last FUSE handle is released."""

from __future__ import annotations

import errno
import itertools
import logging
from collections.abc import Callable

import trio

from .._client.nfs4 import NFSv4
from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.types import change_info4
from .._rpc.auth import Credential
from .inodes import Inode, InodeTable

log = logging.getLogger(__name__)

SILLY_PREFIX = ".nfs"
SILLY_WAIT = 2.0  # seconds a rmdir waits for the last close of files unlinked while open in it
SILLY_POLL = 0.02
# modified_dir(parent, name, cinfo, present, node): the caches learn that our operation added
# (``present``) or removed ``name`` in ``parent``
ModifiedDir = Callable[[Inode, str, change_info4 | None, bool, Inode | None], object]


class SillyRenames:
    """The hidden names of a mount's files unlinked while open (kept in ``Inode.silly``)."""

    def __init__(self, nfs: NFSv4, inodes: InodeTable, modified_dir: ModifiedDir) -> None:
        self.nfs = nfs
        self.inodes = inodes
        self.modified_dir = modified_dir
        self.serial = itertools.count(1)
        self.removed = 0  # hidden names removed so far (see gone_from)

    async def open_target(self, dir_fh: bytes, name: str, cred: Credential) -> Inode | None:
        """The inode of ``name`` if some FUSE handle has it open (only asked when anything is open)."""
        if not any(n.opens for n in self.inodes):
            return None
        try:
            _, attrs = await self.nfs.names.lookup(dir_fh, name, cred)
        except NFS4Error as e:
            if e.errno == errno.ENOENT:
                return None
            raise
        node = self.inodes.get(self.inodes.ino_for(attrs))
        return node if node is not None and node.opens and attrs.type == c.NF4REG else None

    async def hide(self, parent: Inode, name: str, node: Inode, cred: Credential) -> None:
        """Rename ``name`` (leading to the open file ``node``) to a hidden name in ``parent``."""
        silly = f"{SILLY_PREFIX}{node.attrs.fileid & 0xFFFFFFFFFFFF:012x}{next(self.serial):08x}"
        renamed = await self.nfs.directories.rename(parent.fh, name, parent.fh, silly, cred)
        self.modified_dir(parent, name, renamed.source, False, None)
        self.modified_dir(parent, silly, renamed.target, True, node)
        node.silly.append((parent.fh, silly))
        node.stale()

    async def gone_from(self, dir_fh: bytes, removed: int) -> bool:
        """Wait (a little) until no hidden name of ours is left in directory ``dir_fh``; whether there
        were any since :attr:`removed` was ``removed`` (one removed meanwhile counts: its REMOVE may
        have reached the server after the caller's)."""
        pending = [node for node in self.inodes if any(d == dir_fh for d, _ in node.silly)]
        if not pending:
            return self.removed != removed
        with trio.move_on_after(SILLY_WAIT):
            while any(any(d == dir_fh for d, _ in node.silly) for node in pending):
                await trio.sleep(SILLY_POLL)
        return True

    async def remove(self, node: Inode, cred: Credential) -> None:
        """The file's last handle is gone: its hidden names go."""
        while node.silly:
            dir_fh, name = node.silly[-1]
            try:
                await self.nfs.directories.remove(dir_fh, name, cred)
            except NFS4Error as e:
                log.info("removing %s: %s", name, e)
            finally:
                node.silly.pop()  # only now: a rmdir waiting in gone_from goes on once the name is gone
                self.removed += 1
