"""LOOKUP on the mount: a name in a directory, answered from the caches where they may (a name known
absent, a listing we keep, a name known to a caller the server lets search), else by LOOKUP."""

from __future__ import annotations

import collections
import errno
import logging
from collections.abc import Awaitable, Callable

import trio

from .._client.attributes import RECORD_FILEID, RECORD_TYPE, AttrRecord, FileAttrs, file_attrs
from .._client.nfs4 import NFSv4
from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential
from .cache import NEGATIVE, READ_AHEAD_DIRS, NameCache, NameReadAhead
from .caller import is_opening
from .inodes import Inode, InodeTable
from .kernel.records import NEGATIVE_ENTRY
from .lowlevel import EntryFields
from .options import LOOKUPCACHE_NONE, MountOptions

log = logging.getLogger(__name__)


class Lookups:
    """The LOOKUPs of a mount whose nodes are ``inodes`` and names ``names``, counted in ``counts``;
    ``each_name_checked``: the server checks each caller's way to each name (the kernel keeps none);
    ``entry``, ``listed_fields`` and ``learn``: the kernel's entry for a node and for a file kept as
    listed (InodeTable.listed), and a node learned from a reply;
    ``gone``: what NFS4ERR_STALE means for the node an operation was about; ``names_ahead``: the
    entries of directories read ahead of their LOOKUPs (cache.NameReadAhead), the oldest first;
    ``changed``: what a directory's attributes that moved mean for what is cached of it."""

    def __init__(
        self, nfs: NFSv4, inodes: InodeTable, names: NameCache, counts: collections.Counter[str],
        opts: MountOptions, each_name_checked: bool,
        entry: Callable[[Inode, float | None], EntryFields],
        listed_fields: Callable[[int, AttrRecord, float | None], EntryFields],
        learn: Callable[[bytes, FileAttrs, int | None], Inode],
        gone: Callable[[str, int], Awaitable[None]],
        names_ahead: dict[int, NameReadAhead],
        changed: Callable[[Inode], None],
    ) -> None:
        self.nfs = nfs
        self.inodes = inodes
        self.names = names
        self.counts = counts
        self.opts = opts
        self.each_name_checked = each_name_checked
        self._entry = entry
        self._listed_fields = listed_fields
        self._learn = learn
        self._gone = gone
        self.names_ahead = names_ahead
        self._changed = changed
        self._kernel_checks = opts.kernel_checks_permissions()

    async def lookup(self, parent: Inode, n: str, pid: int, cred: Credential) -> EntryFields:
        """``n`` in ``parent``, for process ``pid`` with ``cred``: from the caches where they may
        answer, else by LOOKUP; a name that does not exist is NEGATIVE_ENTRY, which the kernel
        keeps no note of (entry_timeout 0): a later lookup comes to us, and one for an open() asks
        the server."""
        if n == ".":
            parent.lookups += 1
            return self._entry(parent, None)
        if n == "..":
            asked = self.inodes.asking()
            fh, attrs = await self.nfs.names.lookupp(parent.fh, cred)
            return self._entry(self._learn(fh, attrs, asked), None)
        now = trio.current_time()
        regenerated = self.inodes.by_name(parent.ino, n)
        if regenerated is not None and now < regenerated.regenerated and (
            self._kernel_checks or await self._may_search(parent, cred)
        ):
            # the OPEN by this name that made the kernel's inode go checked it a moment ago (Opens.regenerate)
            regenerated.lookups += 1
            self.counts["lookups_cached"] += 1
            return self._entry(regenerated, None)
        # Names that exist are not answered from here: the kernel keeps them itself (entry_timeout),
        # and asks again when its entry expired or when a name led to a file or directory the server
        # no longer has (ESTALE: it looks every name of the path up again, and must reach the server).
        fresh = self.inodes.fresh(parent, now)
        if (
            fresh
            and self.names.get(parent.ino, n, parent.attrs.change) == NEGATIVE
            and not is_opening(pid)
        ):
            self.counts["lookups_cached"] += 1
            return NEGATIVE_ENTRY
        listing = parent.listing
        if listing is not None and listing.absent(n, now, self.opts.acdirmin) and not is_opening(pid):
            self.counts["lookups_cached"] += 1
            return NEGATIVE_ENTRY
        if self.each_name_checked and fresh:
            # the kernel keeps no name (entry timeout 0): a name we know is answered from here to a
            # caller the server lets search the directory (a caller it does not is sent to it)
            known = self.names.get(parent.ino, n, parent.attrs.change)
            node = self.inodes.get(known) if known is not None and known != NEGATIVE else None
            if node is not None:
                if await self._may_search(parent, cred):
                    node.lookups += 1
                    self.counts["lookups_cached"] += 1
                    return self._entry(node, None)
                now = trio.current_time()  # (ACCESS may have been waited for)
                fresh = self.inodes.fresh(parent, now)
        if self.opts.lookupcache != LOOKUPCACHE_NONE and self.inodes.timeouts.regmin > 0 and not self.opts.noac:
            ahead = await self._named_ahead(parent, n, cred, now, fresh)
            if ahead is not None:
                self.counts["lookups_read_ahead"] += 1
                return ahead
        self.counts["lookups_sent"] += 1
        asked = self.inodes.asking()
        try:
            fh, attrs = await self.nfs.names.lookup(parent.fh, n, cred)
        except NFS4Error as e:
            if e.status == c.NFS4ERR_STALE:
                # the directory is gone (another client removed it): so is every name in it. (An
                # ESTALE here would reach the caller: the kernel retries no failed lookup of a
                # mkdir, create or rename.)
                await self._gone("lookup", parent.ino)
                return NEGATIVE_ENTRY
            if e.errno == errno.ENOENT:
                if self.opts.negative_names and self.inodes.fresh(parent, now):
                    self.names.put(parent.ino, n, NEGATIVE, parent.attrs.change)
                return NEGATIVE_ENTRY
            raise
        node = self._learn(fh, attrs, asked)
        self.inodes.named(node, parent.ino, n)
        if self.inodes.fresh(parent, now):
            self.names.put(parent.ino, n, node.ino, parent.attrs.change)
        return self._entry(node, None)

    async def _named_ahead(
        self, parent: Inode, name: str, cred: Credential, now: float, fresh: bool
    ) -> EntryFields | None:
        """The kernel's entry for ``name``, answered from ``parent``'s entries read ahead
        (cache.NameReadAhead; the next page is read first when the directory's LOOKUPs call for it)
        at ``now``, when ``parent``'s attributes were ``fresh`` (both read again only when a page or
        an ACCESS was waited for), learned as its
        LOOKUP's answer would have been when the page was read: a file we knew nothing of is kept as
        listed (InodeTable.listed), as a listing keeps it, until the kernel or the server needs its
        Inode; None: its LOOKUP goes to the server. (An open of
        the name goes to the server by that name, as every open does: a name another client
        removed or renamed since the page is found there, and its next lookup asks the server.)"""
        ahead = self.names_ahead.get(parent.ino)
        if ahead is None:
            if len(self.names_ahead) >= READ_AHEAD_DIRS:
                del self.names_ahead[next(iter(self.names_ahead))]
            ahead = self.names_ahead[parent.ino] = NameReadAhead()
        if not ahead.has(name, now, self.inodes.timeouts) and ahead.wants_page():
            await self._read_page_ahead(parent, ahead, cred)
            now = trio.current_time()
            fresh = self.inodes.fresh(parent, now)
        inodes = self.inodes
        hit = ahead.take(name, parent.attrs.change, now, inodes.timeouts) if fresh else None
        # (a file we hold attributes of already is asked for: they may be newer than the page's)
        if hit is None or inodes.get(inodes.ino_of(hit[1][RECORD_FILEID])) is not None:
            ahead.needed_lookup()
            return None
        fh, record, when, asked, _ = hit
        if not self._kernel_checks:
            if not await self._may_search(parent, cred) or inodes.get(inodes.ino_of(record[RECORD_FILEID])) is not None:
                ahead.needed_lookup()  # (or learned while ACCESS was on its way)
                return None
            now = trio.current_time()
        # (a delegated file's attributes are the Inode's to give: see NFSOperations._entry_fields)
        ino = 0 if fh in self.nfs.delegations else inodes.listed(fh, record, when, parent.ino, name)
        node = None
        if not ino:
            node, _ = inodes.learn(fh, file_attrs(record), when, True, asked=asked)
            inodes.named(node, parent.ino, name)
            ino = node.ino
        if self.each_name_checked:  # (the kernel keeps no name: it asks again, and the cache answers)
            self.names.put(parent.ino, name, ino, parent.attrs.change)
        if node is not None:
            return self._entry(node, now)
        left = when + inodes.timeouts.initial(record[RECORD_TYPE] == c.NF4DIR) - now
        return self._listed_fields(ino, record, left if left > 0 else 0.0)

    async def _read_page_ahead(self, parent: Inode, ahead: NameReadAhead, cred: Credential) -> None:
        """Read ``parent``'s next page of entries ahead, with its attributes after it; a directory
        the caller may not read (or whose cookie the server no longer takes) is read no further."""
        ahead.reading = True
        try:
            asked, dir_asked = self.inodes.asking(), self.inodes.asking(parent)
            try:
                entries, verifier, eof, dir_attrs = await self.nfs.directories.readdir_plus_and_attrs(
                    parent.fh, cred, ahead.cookie, ahead.verifier
                )
            except NFS4Error as e:
                log.debug("names of directory %d not read ahead: %s", parent.ino, e)
                ahead.cannot_read()
                return
            now = trio.current_time()
            if self.inodes.refresh(parent, dir_attrs, now, asked=dir_asked):
                self._changed(parent)
            change = dir_attrs.change
            ahead.page(
                {str(name, "utf-8", "surrogateescape"): (fh, record, now, asked, change)
                 for name, _, fh, record in entries if fh is not None and record is not None},
                entries[-1][1] if entries else ahead.cookie, verifier, eof,
            )
        finally:
            ahead.reading = False

    async def _may_search(self, parent: Inode, cred: Credential) -> bool:
        """Whether the server lets ``cred`` look names up in ``parent`` (ACCESS; its answer kept
        while the directory's attributes hold, one per user, as the Linux client keeps them)."""
        key = (cred.uid, cred.gid, cred.gids)
        granted = parent.granted.get(key) if parent.granted is not None else None
        if granted is None:
            granted = await self.nfs.names.access(parent.fh, c.ACCESS4_LOOKUP, cred)
            if parent.granted is None:
                parent.granted = {}
            parent.granted[key] = granted
        return bool(granted & c.ACCESS4_LOOKUP)
