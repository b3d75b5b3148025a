"""LOOKUP on the mount: a name in a directory, answered from the caches where they may (a name known
absent, a listing we keep, a name known to a caller the server lets search), else by LOOKUP."""

from __future__ import annotations

import collections
import errno
from collections.abc import Awaitable, Callable

import trio

from .._client.attributes import FileAttrs
from .._client.nfs4 import NFSv4
from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential
from .cache import NEGATIVE, NameCache
from .caller import is_opening
from .inodes import Inode, InodeTable
from .lowlevel import EntryAttributes
from .options import MountOptions


def negative() -> EntryAttributes:
    """The name does not exist. The kernel keeps no note of that (entry_timeout 0): a later
    lookup comes to us, and one for an open() asks the server (see lookup)."""
    return EntryAttributes()


class Lookups:
    """The LOOKUPs of a mount whose nodes are ``inodes`` and names ``names``, counted in ``counts``;
    ``each_name_checked``: the server checks each caller's way to each name (the kernel keeps none);
    ``entry`` and ``learn``: the kernel's entry for a node, and a node learned from a reply;
    ``gone``: what NFS4ERR_STALE means for the node an operation was about."""

    def __init__(
        self, nfs: NFSv4, inodes: InodeTable, names: NameCache, counts: collections.Counter[str],
        opts: MountOptions, each_name_checked: bool,
        entry: Callable[[Inode, float | None], EntryAttributes],
        learn: Callable[[bytes, FileAttrs, int | None], Inode],
        gone: Callable[[str, int], Awaitable[None]],
    ) -> None:
        self.nfs = nfs
        self.inodes = inodes
        self.names = names
        self.counts = counts
        self.opts = opts
        self.each_name_checked = each_name_checked
        self._entry = entry
        self._learn = learn
        self._gone = gone

    async def lookup(self, parent: Inode, n: str, pid: int, cred: Credential) -> EntryAttributes:
        """``n`` in ``parent``, for process ``pid`` with ``cred``: from the caches where they may
        answer, else by LOOKUP; a name that does not exist is a negative entry."""
        if n == ".":
            parent.lookups += 1
            return self._entry(parent, None)
        if n == "..":
            asked = self.inodes.asking()
            fh, attrs = await self.nfs.lookupp(parent.fh, cred)
            return self._entry(self._learn(fh, attrs, asked), None)
        now = trio.current_time()
        # Names that exist are not answered from here: the kernel keeps them itself (entry_timeout),
        # and asks again when its entry expired or when a name led to a file or directory the server
        # no longer has (ESTALE: it looks every name of the path up again, and must reach the server).
        if (
            self.inodes.fresh(parent, now)
            and self.names.get(parent.ino, n, parent.attrs.change) == NEGATIVE
            and not is_opening(pid)
        ):
            self.counts["lookups_cached"] += 1
            return negative()
        listing = parent.listing
        if listing is not None and listing.absent(n, now, self.opts.acdirmin) and not is_opening(pid):
            self.counts["lookups_cached"] += 1
            return negative()
        if self.each_name_checked and self.inodes.fresh(parent, now):
            # the kernel keeps no name (entry timeout 0): a name we know is answered from here to a
            # caller the server lets search the directory (a caller it does not is sent to it)
            known = self.names.get(parent.ino, n, parent.attrs.change)
            node = self.inodes.get(known) if known is not None and known != NEGATIVE else None
            if node is not None and await self._may_search(parent, cred):
                node.lookups += 1
                self.counts["lookups_cached"] += 1
                return self._entry(node, None)
        self.counts["lookups_sent"] += 1
        asked = self.inodes.asking()
        try:
            fh, attrs = await self.nfs.lookup(parent.fh, n, cred)
        except NFS4Error as e:
            if e.status == c.NFS4ERR_STALE:
                # the directory is gone (another client removed it): so is every name in it. (An
                # ESTALE here would reach the caller: the kernel retries no failed lookup of a
                # mkdir, create or rename.)
                await self._gone("lookup", parent.ino)
                return negative()
            if e.errno == errno.ENOENT:
                if self.opts.negative_names and self.inodes.fresh(parent, now):
                    self.names.put(parent.ino, n, NEGATIVE, parent.attrs.change)
                return negative()
            raise
        node = self._learn(fh, attrs, asked)
        self.inodes.named(node, parent.ino, n)
        if self.inodes.fresh(parent, now):
            self.names.put(parent.ino, n, node.ino, parent.attrs.change)
        return self._entry(node, None)

    async def _may_search(self, parent: Inode, cred: Credential) -> bool:
        """Whether the server lets ``cred`` look names up in ``parent`` (ACCESS; its answer kept
        while the directory's attributes hold, one per user, as the Linux client keeps them)."""
        key = (cred.uid, cred.gid, cred.gids)
        granted = parent.granted.get(key) if parent.granted is not None else None
        if granted is None:
            granted = await self.nfs.access(parent.fh, c.ACCESS4_LOOKUP, cred)
            if parent.granted is None:
                parent.granted = {}
            parent.granted[key] = granted
        return bool(granted & c.ACCESS4_LOOKUP)
