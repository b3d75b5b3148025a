"""The FUSE file system: the low-level operations (:mod:`.lowlevel`), each answered by one NFSv4.1 COMPOUND where possible.

- Inodes are NFS fileids (:mod:`.inodes`); attribute and name caching follow the actimeo family
  (:mod:`.cache`); the kernel is told the same timeouts (``attr_timeout``/``entry_timeout``).
- Credentials: AUTH_SYS with the calling process's uid, gid and supplementary groups, so the
  server enforces permissions per user (``squash_uid=`` sends everything as one user).
- Opens (:mod:`.opens`): one NFS OPEN per (file, open owner), shared by the FUSE handles on it and
  CLOSEd with the last of them. Close-to-open: every open revalidates the change attribute and keeps
  the kernel's page cache only if it did not move.
- Locks (:mod:`.posix_locks`) and the NFSv4.2 operations (:mod:`.nfs42`) go to their modules.
- Writes are gathered per open by the open-file engine (:mod:`..client.open_file`) and committed on
  flush, fsync and release.
- Sequential reads of an open file are read ahead in rsize READs, several in flight (:mod:`.readahead`);
  not for O_DIRECT opens, whose reads go to the server as they come.
- Unlinking or renaming over an open file renames it to ``.nfsXXXX`` first (as the Linux client
  does); the name is removed when the file is released (:mod:`.silly_rename`).
- Extended attributes (``vers=4.2`` mounts of a file system whose server reports ``xattr_support``):
  the "user." namespace, through the NFSv4.2 operations of RFC 8276 (GETXATTR, SETXATTR, LISTXATTRS,
  REMOVEXATTR); other namespaces give ENOTSUP, as on the Linux client. Otherwise (NFSv4.1, or a
  server without them: NFS-Ganesha 4.3's VFS) nothing is sent: ENOSYS makes the kernel answer
  ENOTSUP and stop asking (which also spares a getxattr of security.capability on every write).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import functools
import gc
import itertools
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import cachetools
import trio

from .._client.attributes import FTYPE_TO_IFMT, NOW, FileAttrs
from .._client.dir_pages import DirReader
from .._client.nfs4 import NFSv4, OpenFile
from .._client.open_file import read_range, with_reopens
from .._client.security import UserCredentials
from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.types import change_info4
from .._rpc.auth import Credential, auth_sys
from .cache import NEGATIVE, READ_AHEAD_DIRS, AttrTimeouts, Listing, NameCache, NameReadAhead
from .caller import is_opening
from .inodes import OWN, ROOT_INODE, Inode, InodeTable
from .lowlevel import (
    EntryAttributes,
    FileInfo,
    FileLock,
    FUSEError,
    Operations,
    ReaddirToken,
    RequestContext,
    SetattrFields,
    StatvfsData,
    caller_ccache,
    supplementary_groups,
)
from .nfs42 import NFS42Files
from .opens import FileHandle, Opens, SharedOpen, access_mask, share_access
from .options import LOOKUPCACHE_NONE, REMOUNT_CHANGES, MountOptions
from .posix_locks import PosixLocks
from .readahead import Extent, assemble
from .silly_rename import SillyRenames

XATTR_USER_PREFIX = b"user."  # the namespace RFC 8276 carries (its names go without the prefix)
log = logging.getLogger(__name__)

BLOCK_SIZE = 4096
NAME_MAX = 255  # the longest name, in bytes (Linux's; NFS-Ganesha reports 1024 and refuses past 255)
GROUPS_TTL = 2.0  # seconds a process's supplementary groups are remembered
# the entries a listing starts with, and the offset to go on from after each (the kernel's next
# request then starts there; NFS reserves READDIR cookies 1 and 2, so none of its entries has them)
DOT_ENTRIES = ((1, b"."), (2, b".."))
# the operations whose first argument is a file handle (the others': an inode)
HANDLE_OPERATIONS = frozenset({"read", "write", "flush", "fsync", "release", "readdir", "releasedir", "fsyncdir"})
GONE_NOTIFY_WAIT = 0.2  # seconds an answer waits for the kernel to drop an entry (see gone)
# attribute changes that may wait with a file's gathered data (setattr_fattr4 keywords; see _defer_setattr)
DEFERRABLE_SETATTR = frozenset({"mode", "atime_ns", "mtime_ns"})
# The daemon keeps tens of thousands of long-lived objects (inodes and their attributes) and makes
# them by the thousand (a listing, an untar): with CPython's default thresholds (a young collection
# every 700 allocations) the cyclic collector took about a fifth of an ``ls -l``'s CPU; with these, a
# young collection every 50,000, next to nothing (garbage in cycles lingers a little longer)
GC_THRESHOLD = (50_000, 20, 20)
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def fuse_errors(fn: F) -> F:
    """NFS and session errors become the errno the kernel passes on."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except FUSEError:
            raise
        except NFS4Error as e:
            if e.status == c.NFS4ERR_STALE and args:
                await args[0].gone(fn.__name__, args[1])
            raise FUSEError(e.errno or errno.EIO) from None
        except OSError as e:
            log.info("%s: %s", fn.__name__, e)
            raise FUSEError(e.errno or errno.EIO) from None
        except Exception:
            log.exception("%s failed", fn.__name__)
            raise FUSEError(errno.EIO) from None

    return cast(F, wrapper)


def _name(name: bytes) -> str:
    """A name from the kernel, as the client layer takes it (ENAMETOOLONG past NAME_MAX, before any
    cache could answer for it)."""
    if len(name) > NAME_MAX:
        raise FUSEError(errno.ENAMETOOLONG)
    return os.fsdecode(name)


@dataclass(eq=False)
class DirHandle:
    inode: Inode
    cred: Credential
    pages: DirReader


class NFSOperations(Operations):

    def __init__(
        self, nfs: NFSv4, root_fh: bytes, root_attrs: FileAttrs, opts: MountOptions, nursery: trio.Nursery,
        users: UserCredentials | None = None,
    ) -> None:
        super().__init__()
        self.nfs = nfs
        # each caller's credential under the mount's flavour (Kerberos: from the caller's own tickets)
        self.users = users
        self.opts = opts
        self.nursery = nursery
        self.local_locks = opts.local_locks
        # every name a caller reaches is checked for that caller by the server (the kernel keeps none)
        self._each_name_checked = opts.server_checks_each_name()
        self.timeouts = AttrTimeouts.from_options(opts)
        self.entry_timeout = self._entry_timeout()
        self.inodes = InodeTable(root_fh, root_attrs, self.timeouts, trio.current_time())
        self.names = NameCache(opts.acdirmax if opts.lookupcache != LOOKUPCACHE_NONE else 0)
        # directories whose names are read ahead of their LOOKUPs (cache.NameReadAhead), the oldest first
        self._names_ahead: dict[int, NameReadAhead] = {}
        self._kernel_checks = opts.kernel_checks_permissions()
        self.dirs: dict[int, DirHandle] = {}
        self._ids = itertools.count(1)  # FUSE handle numbers, of files and directories
        self._callers: cachetools.TTLCache[tuple[int, int, int], Credential] = cachetools.TTLCache(
            maxsize=4096, ttl=GROUPS_TTL
        )
        self._squash = (
            auth_sys(opts.squash_uid, opts.squash_gid or 0, ()) if opts.squash_uid is not None else None
        )
        self.invalidations = 0
        # what the caches answered and what they asked (pynfsrdma stats): see cache_counts
        self.counts: collections.Counter[str] = collections.Counter()
        self.opens = Opens(
            nfs, opts, nursery, self.inodes, self.names, self.counts, self._ids, self._invalidate,
            self._drop_entry, self._delegated,
        )
        self.files = self.opens.files  # FUSE file handles (:class:`.opens.FileHandle`)
        self.locks = PosixLocks(nfs, self.opens, self._invalidate)
        self.nfs42 = NFS42Files(nfs, self.inodes, self.opens)
        self.silly = SillyRenames(nfs, self.inodes, self._modified_dir)
        gc.set_threshold(*GC_THRESHOLD)  # (the mount daemon's process: see GC_THRESHOLD)
        # delegations: opens and attributes served locally while the server lets us (not with noac)
        nfs.want_delegations = not opts.noac
        nfs.delegation_return_hooks.append(self._delegation_returning)

    def _entry_timeout(self) -> float:
        """How long the kernel keeps a name it looked up: never with lookupcache=none, nor where the
        server checks each caller's way to each name (``MountOptions.server_checks_each_name``): the
        kernel then asks us again, and we the server, as the caller."""
        if self.opts.lookupcache == LOOKUPCACHE_NONE or self._each_name_checked:
            return 0.0
        return self.opts.acdirmin

    def reconfigure(self, new: MountOptions) -> None:
        """Take what a remount changes (``options.REMOUNT_CHANGES``: read-only, the attribute cache's
        timeouts) from ``new``. The kernel is told to drop the attributes it keeps, so that the new
        timeouts hold from now on."""
        for name in REMOUNT_CHANGES:
            setattr(self.opts, name, getattr(new, name))
        self.timeouts = AttrTimeouts.from_options(self.opts)
        self.entry_timeout = self._entry_timeout()
        self.nfs.want_delegations = not self.opts.noac
        for ino in self.inodes.retime(self.timeouts):
            self.nursery.start_soon(self._invalidate, ino, True)

    # -- helpers --------------------------------------------------------------------------------------
    def cred(self, ctx: RequestContext) -> Credential:
        """The caller's credential: AUTH_SYS with its uid, gid and supplementary groups, or under
        Kerberos its own (from the ticket cache its KRB5CCNAME names, else its default one)."""
        if self._squash is not None:
            return self._squash
        key = (ctx.pid, ctx.uid, ctx.gid)
        cred = self._callers.get(key)
        if cred is None:
            try:
                groups = supplementary_groups(ctx.pid)
            except (OSError, RuntimeError, ValueError):
                groups = ()  # the process is gone (or a kernel request): its groups do not matter
            users = self.users
            if users is None or not users.flavor.gss:
                cred = auth_sys(ctx.uid, ctx.gid, groups)
            else:
                cred = users.get(ctx.uid, ctx.gid, groups, caller_ccache(ctx.pid, ctx.uid) if ctx.pid else None)
            self._callers[key] = cred
        return cred

    def _inode(self, ino: int) -> Inode:
        node = self.inodes.get(ino)
        if node is None:
            raise FUSEError(errno.ESTALE)
        return node

    def _now(self) -> float:
        return trio.current_time()

    def _entry(self, node: Inode, now: float | None = None) -> EntryAttributes:
        """The kernel's entry for ``node``; ``now``: the time its attributes were just learned at
        (a listing's page), else the clock is read."""
        a = node.attrs
        e = EntryAttributes()  # (st_rdev is 0 unless set)
        e.st_ino = node.ino
        e.generation = node.generation
        e.entry_timeout = self.entry_timeout
        if self._delegated(node):
            e.attr_timeout = node.timeo
        else:
            e.attr_timeout = self.inodes.ttl(node, self._now() if now is None else now)
        e.st_mode = FTYPE_TO_IFMT.get(a.type, 0) | a.mode  # (a.st_mode, without the property call)
        e.st_nlink = a.nlink - len(node.silly) if node.silly else a.nlink  # (unlinked while open: 0)
        e.st_uid = a.uid
        e.st_gid = a.gid
        if a.type in (c.NF4BLK, c.NF4CHR):
            e.st_rdev = os.makedev(*a.rdev)
        e.st_size = self.inodes.size(node)
        e.st_blksize = BLOCK_SIZE
        e.st_blocks = (a.used + 511) // 512
        e.st_atime_ns = a.atime_ns
        e.st_mtime_ns = a.mtime_ns
        e.st_ctime_ns = a.ctime_ns
        return e

    @staticmethod
    def _negative() -> EntryAttributes:
        """The name does not exist. The kernel keeps no note of that (entry_timeout 0): a later
        lookup comes to us, and one for an open() asks the server (see lookup)."""
        return EntryAttributes()

    def _learn(self, fh: bytes, attrs: FileAttrs, asked: int | None, lookup: bool = True) -> Inode:
        node, changed = self.inodes.learn(fh, attrs, self._now(), lookup, asked=asked)
        if changed:
            self._changed(node)
        return node

    def _changed(self, node: Inode) -> None:
        """The server's copy moved under us: drop the kernel's cached data (not while we write it)."""
        node.drop_readahead()
        if node.is_reg and not any(s.writer is not None for s in node.shared.values()):
            self.invalidations += 1
            ino = node.ino
            self.nursery.start_soon(self._invalidate, ino)

    def cache_counts(self) -> dict[str, int]:
        """attr_hits: getattr answered from the attribute cache (or a delegation); attr_revalidations:
        answered after a GETATTR; lookups_cached: absent names answered without a LOOKUP;
        lookups_read_ahead: names answered from their directory's entries read ahead (READDIR);
        lookups_sent; invalidations: the kernel told to drop a file's cached data; stale_names: names
        another client removed or renamed, found at an open; reopens: opens made again after the
        server lost them."""
        names = ("attr_hits", "attr_revalidations", "lookups_cached", "lookups_read_ahead", "lookups_sent",
                 "stale_names")
        return {**{n: self.counts[n] for n in names}, "invalidations": self.invalidations, "reopens": self.opens.reopens}

    async def _invalidate(self, ino: int, attr_only: bool = False) -> None:
        if self.kernel is not None:
            await self.kernel.invalidate_inode(ino, attr_only)

    def _modified_dir(
        self, parent: Inode, name: str, cinfo: change_info4 | None, present: bool, node: Inode | None = None
    ) -> Inode | None:
        """Our operation added (``present``: now leading to ``node`` if given) or removed ``name`` in
        ``parent``, and the server says how the directory's change attribute moved (``cinfo``): its
        attributes and the name's cache entry are stale, its listing follows, or ends (cache.Listing).
        The file the name led to before has one link less and a new ctime: its attributes are stale
        too. Returns that file, if we know it. (:meth:`_dir_after` may then take the directory's
        attributes the operation brought back.)"""
        parent.stale()
        self.names.drop(parent.ino, name)
        self._names_ahead.pop(parent.ino, None)
        listing = parent.listing
        if listing is not None and (
            cinfo is None or not listing.changed(cinfo.before, cinfo.after, name, present, self._now())
        ):
            parent.listing = None
        before = self.inodes.unnamed(parent.ino, name)
        if before is not None and before is not node:
            before.stale()
        if node is not None:
            self.inodes.named(node, parent.ino, name)
        return before

    def _dir_after(self, parent: Inode, cinfo: change_info4 | None, attrs: FileAttrs | None, asked: int) -> None:
        """After :meth:`_modified_dir`: ``attrs``, the directory's attributes from a GETATTR in our
        operation's own COMPOUND (``asked``: from ``InodeTable.changing``), are taken when they show
        the change attribute the server's change_info4 gives as "after" (nothing changed the
        directory between our operation and that GETATTR). The kernel's next look at the directory
        (with default_permissions: its permission check before the next create there) is then
        answered without a GETATTR; otherwise the next look asks the server. (Whether the server
        calls the change_info4 atomic does not matter here: the GETATTR ran after our operation,
        and its answer is the directory as the server has it. NFS-Ganesha calls none atomic.)"""
        if attrs is not None and cinfo is not None and attrs.change == cinfo.after:
            self.inodes.changed_by_us(parent, attrs, self._now(), asked)

    def _listed(self, node: Inode) -> None:
        """``node`` is a directory we just made: we know all its names (none)."""
        if self.opts.negative_names and node.is_dir:
            node.listing = Listing(node.attrs.change, float("-inf"), set())

    async def _sync_inode(self, node: Inode) -> None:
        await self.opens.sync(node)

    # -- delegations ----------------------------------------------------------------------------------
    def _delegated(self, node: Inode) -> bool:
        """Whether ``node``'s cached attributes are current because we hold a delegation on the file
        (nobody else can change it) and nothing of ours made them stale."""
        return node.fetched != float("-inf") and node.fh in self.nfs.delegations

    async def _delegation_returning(self, fh: bytes) -> None:
        """Before a delegation goes back: the file's gathered writes reach the server, and what we
        cached under the delegation must be revalidated from now on."""
        for node in list(self.inodes):
            if node.fh != fh:
                continue
            for s in list(node.shared.values()):
                if s.writer is not None:
                    await s.writer.flush()  # (sends what is gathered, then commits)
            node.stale()
            self.nursery.start_soon(self._invalidate, node.ino, True)

    def _check_rw(self) -> None:
        if self.opts.ro:
            raise FUSEError(errno.EROFS)

    # -- names ----------------------------------------------------------------------------------------
    @fuse_errors
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: RequestContext
    ) -> EntryAttributes:
        parent = self._inode(parent_inode)
        n = _name(name)
        cred = self.cred(ctx)
        if n == ".":
            parent.lookups += 1
            return self._entry(parent)
        if n == "..":
            asked = self.inodes.asking()
            fh, attrs = await self.nfs.lookupp(parent.fh, cred)
            return self._entry(self._learn(fh, attrs, asked))
        now = self._now()
        # Names that exist are not answered from here: the kernel keeps them itself (entry_timeout),
        # and asks again when its entry expired or when a name led to a file or directory the server
        # no longer has (ESTALE: it looks every name of the path up again, and must reach the server).
        if (
            self.inodes.fresh(parent, now)
            and self.names.get(parent.ino, n, parent.attrs.change) == NEGATIVE
            and not is_opening(ctx.pid)
        ):
            self.counts["lookups_cached"] += 1
            return self._negative()
        listing = parent.listing
        if listing is not None and listing.absent(n, now, self.opts.acdirmin) and not is_opening(ctx.pid):
            self.counts["lookups_cached"] += 1
            return self._negative()
        if self._each_name_checked and self.inodes.fresh(parent, now):
            # the kernel keeps no name (entry timeout 0): a name we know is answered from here to a
            # caller the server lets search the directory (a caller it does not is sent to it)
            known = self.names.get(parent.ino, n, parent.attrs.change)
            node = self.inodes.get(known) if known is not None and known != NEGATIVE else None
            if node is not None and await self._may_search(parent, cred):
                node.lookups += 1
                self.counts["lookups_cached"] += 1
                return self._entry(node)
        if self.opts.lookupcache != LOOKUPCACHE_NONE and self.timeouts.regmin > 0 and not self.opts.noac:
            ahead = await self._named_ahead(parent, n, cred)
            if ahead is not None:
                self.counts["lookups_read_ahead"] += 1
                return self._entry(ahead)
        self.counts["lookups_sent"] += 1
        asked = self.inodes.asking()
        try:
            fh, attrs = await self.nfs.lookup(parent.fh, n, cred)
        except NFS4Error as e:
            if e.status == c.NFS4ERR_STALE:
                # the directory is gone (another client removed it): so is every name in it. (An
                # ESTALE here would reach the caller: the kernel retries no failed lookup of a
                # mkdir, create or rename.)
                await self.gone("lookup", parent_inode)
                return self._negative()
            if e.errno == errno.ENOENT:
                if self.opts.negative_names and self.inodes.fresh(parent, now):
                    self.names.put(parent.ino, n, NEGATIVE, parent.attrs.change)
                return self._negative()
            raise
        node = self._learn(fh, attrs, asked)
        self.inodes.named(node, parent.ino, n)
        if self.inodes.fresh(parent, now):
            self.names.put(parent.ino, n, node.ino, parent.attrs.change)
        return self._entry(node)

    async def _named_ahead(self, parent: Inode, name: str, cred: Credential) -> Inode | None:
        """``name``, answered from ``parent``'s entries read ahead (cache.NameReadAhead; the next page
        is read first when the directory's LOOKUPs call for it), learned as its LOOKUP's answer
        would have been when the page was read; None: its LOOKUP goes to the server. (An open of
        the name goes to the server by that name, as every open does: a name another client
        removed or renamed since the page is found there, and its next lookup asks the server.)"""
        ahead = self._names_ahead.get(parent.ino)
        if ahead is None:
            if len(self._names_ahead) >= READ_AHEAD_DIRS:
                del self._names_ahead[next(iter(self._names_ahead))]
            ahead = self._names_ahead[parent.ino] = NameReadAhead()
        if name not in ahead.entries and ahead.wants_page():
            await self._read_page_ahead(parent, ahead, cred)
        now = self._now()
        hit = ahead.take(name, parent.attrs.change, now, self.timeouts) if self.inodes.fresh(parent, now) else None
        # (a file we hold attributes of already is asked for: they may be newer than the page's)
        if (hit is None or self.inodes.get(self.inodes.ino_for(hit[1])) is not None
                or not (self._kernel_checks or await self._may_search(parent, cred))):
            ahead.needed_lookup()
            return None
        fh, attrs, when, asked, _ = hit
        if self.inodes.get(self.inodes.ino_for(attrs)) is not None:  # (learned while ACCESS was on its way)
            ahead.needed_lookup()
            return None
        node, _ = self.inodes.learn(fh, attrs, when, True, asked=asked)
        self.inodes.named(node, parent.ino, name)
        if self._each_name_checked:  # (the kernel keeps no name: it asks again, and the cache answers)
            self.names.put(parent.ino, name, node.ino, parent.attrs.change)
        return node

    async def _read_page_ahead(self, parent: Inode, ahead: NameReadAhead, cred: Credential) -> None:
        """Read ``parent``'s next page of entries ahead, with its attributes after it; a directory
        the caller may not read (or whose cookie the server no longer takes) is read no further."""
        ahead.reading = True
        try:
            asked, dir_asked = self.inodes.asking(), self.inodes.asking(parent)
            try:
                entries, verifier, eof, dir_attrs = await self.nfs.readdir_plus_and_attrs(
                    parent.fh, cred, ahead.cookie, ahead.verifier
                )
            except NFS4Error as e:
                log.debug("names of directory %d not read ahead: %s", parent.ino, e)
                ahead.eof = True
                return
            now = self._now()
            if self.inodes.refresh(parent, dir_attrs, now, asked=dir_asked):
                self._changed(parent)
            change = dir_attrs.change
            ahead.page(
                {os.fsdecode(name): (fh, attrs, now, asked, change)
                 for name, _, fh, attrs in entries if fh is not None and attrs is not None},
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
            granted = await self.nfs.access(parent.fh, c.ACCESS4_LOOKUP, cred)
            if parent.granted is None:
                parent.granted = {}
            parent.granted[key] = granted
        return bool(granted & c.ACCESS4_LOOKUP)

    async def forget(self, inode_list: Any) -> None:
        for ino, n in inode_list:
            self.inodes.forget(ino, n)

    # -- attributes -----------------------------------------------------------------------------------
    @fuse_errors
    async def getattr(self, inode: int, ctx: RequestContext) -> EntryAttributes:
        node = self._inode(inode)
        if not self._projected(node):
            await self._sync_inode(node)
        if not self.inodes.fresh(node, self._now()) and not self._delegated(node):
            self.counts["attr_revalidations"] += 1
            cred = self.cred(ctx) if ctx.pid else self._any_cred(node)
            asked = self.inodes.asking(node)
            attrs = await self.nfs.getattr(node.fh, cred)
            if self.inodes.refresh(node, attrs, self._now(), asked=asked):
                self._changed(node)
        else:
            self.counts["attr_hits"] += 1
        return self._entry(node)

    def _any_cred(self, node: Inode) -> Credential:
        for s in node.shared.values():
            return s.cred
        return self.nfs.client.machine_cred

    @fuse_errors
    async def setattr(
        self,
        inode: int,
        attr: EntryAttributes,
        fields: SetattrFields,
        fh: int | None,
        ctx: RequestContext,
    ) -> EntryAttributes:
        self._check_rw()
        node = self._inode(inode)
        cred = self.cred(ctx)
        kw: dict[str, Any] = {}
        if fields.update_mode:
            kw["mode"] = attr.st_mode & 0o7777
        if fields.update_uid:
            kw["uid"] = attr.st_uid
        if fields.update_gid:
            kw["gid"] = attr.st_gid
        if fields.update_atime:
            kw["atime_ns"] = NOW if fields.update_atime_now else attr.st_atime_ns
        if fields.update_mtime:
            kw["mtime_ns"] = NOW if fields.update_mtime_now else attr.st_mtime_ns
        if kw and not fields.update_size:
            if self._setattr_changes_nothing(node, kw, cred) or self._defer_setattr(node, kw, cred):
                return self._entry(node)
            if self._kills_setid_for_a_write(node, kw, cred):
                return self._entry(node)
            attrs = await self._write_and_setattr(node, cred, kw)
            if attrs is not None:
                return self._entry(node)
        stateid = None
        await self._sync_inode(node)  # gathered writes go first: a later WRITE would undo times or size
        # truncate(2) by name: no open checked the right to write, and a server lets a file's owner
        # change its size whatever the mode (NFS servers' owner override); ACCESS asks, as the
        # Linux client's permission check does
        if (
            fields.update_size
            and fh is None
            and not await self.nfs.access(node.fh, c.ACCESS4_MODIFY, cred) & c.ACCESS4_MODIFY
        ):
            raise FUSEError(errno.EACCES)
        if fields.update_size:
            kw["size"] = attr.st_size
            h = self.files.get(fh) if fh is not None else None
            shared = (
                h.shared
                if h is not None
                else next((s for s in node.shared.values() if s.of.access & c.OPEN4_SHARE_ACCESS_WRITE), None)
            )
            if shared is not None:
                stateid = shared.of.stateid
        if not kw:
            return await self.getattr(inode, ctx)
        log.debug("setattr ino=%d fh=%s %s", inode, fh, kw)
        asked = self.inodes.asking(node)
        attrs = await self.nfs.setattr(node.fh, cred, stateid=stateid, **kw)
        self._attrs_after_setattr(node, attrs, asked)
        if fields.update_size:
            node.data_change = attrs.change  # the kernel truncated its page cache itself
            node.drop_readahead()
        return self._entry(node)

    def _attrs_after_setattr(self, node: Inode, attrs: FileAttrs, asked: int | None) -> None:
        now = self._now()
        self.inodes.refresh(node, attrs, now, asked=asked)
        if node.fetched != now:
            return  # (a write of ours may have come after them)
        for s in node.shared.values():  # newer than what the last WRITE brought back
            w = s.writer
            if w is not None and w.post_attrs is not None and not w.unsent:
                w.post_attrs = (attrs, now)

    def _setattr_changes_nothing(self, node: Inode, kw: dict[str, Any], cred: Credential) -> bool:
        """A chmod/chown to what the file has already (``tar`` as root does both after every file):
        nothing to send, when our attributes are fresh and the caller owns the file (so the server
        could not refuse it: an owner may always chmod, and chown to the owner and group the file has).
        Not with set-user/group-ID bits (the kernel may clear them on the way), nor times (those
        set "now", or ctime moves)."""
        a = node.attrs
        if not kw.keys() <= {"mode", "uid", "gid"} or cred.uid != a.uid:
            return False
        if "mode" in kw and (kw["mode"] != a.mode or kw["mode"] & (stat.S_ISUID | stat.S_ISGID)):
            return False
        if kw.get("uid", a.uid) != a.uid or kw.get("gid", a.gid) != a.gid:
            return False
        return self.inodes.fresh(node, self._now()) or self._delegated(node)

    def _kills_setid_for_a_write(self, node: Inode, kw: dict[str, Any], cred: Credential) -> bool:
        """The kernel clears the set-user/group-ID bits before a write by someone other than the
        owner (with no FUSE killpriv support it sends a chmod, as the writer): the server refuses
        that chmod to a non-owner, and clears the bits itself when the WRITE comes. Nothing is sent;
        the attributes are asked again at the next look."""
        a = node.attrs
        setid = a.mode & (stat.S_ISUID | stat.S_ISGID)
        if kw.keys() != {"mode"} or not setid or cred.uid in (0, a.uid):
            return False
        if kw["mode"] != a.mode & ~setid & 0o7777:
            return False
        node.attrs = dataclasses.replace(a, mode=kw["mode"])
        node.stale()
        return True

    def _defer_setattr(self, node: Inode, kw: dict[str, Any], cred: Credential) -> bool:
        """Times and mode set by the file's owner while the file's one open holds data not yet sent
        (``tar``: write, utimensat, fchown, fchmod, close) wait with the data and go after it in its
        COMPOUND (:meth:`FileWriter.defer_setattr`); the kernel is answered with the attributes as
        they will be. The owner may always set them, so the server has no reason to refuse (a refusal
        is reported by close or fsync, as a failed WRITE is). Not with set-user/group-ID bits (the
        server may clear them)."""
        a = node.attrs
        if not kw.keys() <= DEFERRABLE_SETATTR or cred.uid != a.uid or len(node.shared) != 1:
            return False
        if NOW in kw.values():
            return False  # (the server's "now" is when the SETATTR reaches it)
        if kw.get("mode", 0) & (stat.S_ISUID | stat.S_ISGID):
            return False
        shared: SharedOpen = next(iter(node.shared.values()))
        w, sc = shared.writer, shared.cred
        if (
            w is None
            or (sc.uid, sc.gid, sc.gids) != (cred.uid, cred.gid, cred.gids)
            or not w.defer_setattr(kw)
        ):
            return False
        node.attrs = dataclasses.replace(a, size=max(a.size, w.gathered_end), **kw)
        if self._projected(node):
            node.fetched = self._now()  # (see getattr)
        return True

    @staticmethod
    def _projected(node: Inode) -> bool:
        """Whether ``node.attrs`` are what the server will hold once the data gathered for it and the
        attribute changes kept after that data are sent: the times were set explicitly after the
        last write (so neither the mtime nor the size depends on the server), by the file's one open.
        ``tar``'s chown makes the kernel ask for the attributes first (to clear set-user-ID bits):
        they are answered from here, and the data waits for the close."""
        if len(node.shared) != 1:
            return False
        w = next(iter(node.shared.values())).writer
        return w is not None and "mtime_ns" in w.setattrs

    async def _write_and_setattr(self, node: Inode, cred: Credential, kw: dict[str, Any]) -> FileAttrs | None:
        """Gathered data that fits in one WRITE goes FILE_SYNC in the SETATTR's own COMPOUND (PUTFH,
        WRITE, SETATTR, GETATTR): ``tar``'s write then utimensat take one round trip, and the close
        has nothing left to send. None when there is no such data, or when the WRITE did not go in
        full (the data is gathered again and the usual way sends it, then the SETATTR)."""
        busy = [s for s in node.shared.values() if s.writer is not None and s.writer.unsent]
        if len(busy) != 1:
            return None
        shared = busy[0]
        w = shared.writer
        sc = shared.cred
        if w is None or (sc.uid, sc.gid, sc.gids) != (cred.uid, cred.gid, cred.gids):
            return None
        attrs = await w.write_with_setattr(kw)
        if attrs is None:
            return None
        self._attrs_after_setattr(node, attrs, OWN)
        return attrs

    @fuse_errors
    async def readlink(self, inode: int, ctx: RequestContext) -> bytes:
        node = self._inode(inode)
        return await self.nfs.readlink(node.fh, self.cred(ctx))

    @fuse_errors
    async def access(self, inode: int, mode: int, ctx: RequestContext) -> bool:
        node = self._inode(inode)
        if mode == os.F_OK:
            return True
        want = 0
        if mode & os.R_OK:
            want |= c.ACCESS4_READ
        if mode & os.W_OK:
            want |= c.ACCESS4_MODIFY | (c.ACCESS4_DELETE if node.is_dir else c.ACCESS4_EXTEND)
            if self.opts.ro:
                return False
        if mode & os.X_OK:
            want |= c.ACCESS4_LOOKUP if node.is_dir else c.ACCESS4_EXECUTE
        granted = await self.nfs.access(node.fh, want, self.cred(ctx))
        return granted & want == want

    # -- extended attributes --------------------------------------------------------------------------
    def _xattr_name(self, name: bytes) -> str:
        """The RFC 8276 name of a "user." extended attribute (ENOSYS: the kernel stops asking when the
        server has none; ENOTSUP for the other namespaces, which NFS does not carry)."""
        if not self.nfs.xattr_support:
            raise FUSEError(errno.ENOSYS)
        if not name.startswith(XATTR_USER_PREFIX) or len(name) == len(XATTR_USER_PREFIX):
            raise FUSEError(errno.ENOTSUP)
        return os.fsdecode(name[len(XATTR_USER_PREFIX) :])

    @fuse_errors
    async def getxattr(self, inode: int, name: bytes, ctx: RequestContext) -> bytes:
        key = self._xattr_name(name)
        return await self.nfs.getxattr(self._inode(inode).fh, key, self.cred(ctx))

    @fuse_errors
    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: RequestContext) -> None:
        key = self._xattr_name(name)
        self._check_rw()
        node = self._inode(inode)
        await self.nfs.setxattr(node.fh, key, value, self.cred(ctx))
        node.stale()  # (its ctime and change attribute moved)

    @fuse_errors
    async def listxattr(self, inode: int, ctx: RequestContext) -> list[bytes]:
        if not self.nfs.xattr_support:
            raise FUSEError(errno.ENOSYS)
        names = await self.nfs.listxattrs(self._inode(inode).fh, self.cred(ctx))
        return [XATTR_USER_PREFIX + os.fsencode(n) for n in names]

    @fuse_errors
    async def removexattr(self, inode: int, name: bytes, ctx: RequestContext) -> None:
        key = self._xattr_name(name)
        self._check_rw()
        node = self._inode(inode)
        await self.nfs.removexattr(node.fh, key, self.cred(ctx))
        node.stale()

    @fuse_errors
    async def statfs(self, ctx: RequestContext) -> StatvfsData:
        fs = await self.nfs.statfs(self.inodes.root.fh, self.cred(ctx))
        s = StatvfsData()
        s.f_bsize = BLOCK_SIZE
        s.f_frsize = BLOCK_SIZE
        s.f_blocks = fs.space_total // BLOCK_SIZE
        s.f_bfree = fs.space_free // BLOCK_SIZE
        s.f_bavail = fs.space_avail // BLOCK_SIZE
        s.f_files = fs.files_total
        s.f_ffree = fs.files_free
        s.f_favail = fs.files_avail
        s.f_namemax = min(fs.maxname, NAME_MAX) if fs.maxname else NAME_MAX
        return s

    # -- creating and removing ------------------------------------------------------------------------
    async def _create(
        self, parent_inode: int, name: bytes, ftype: int, ctx: RequestContext, **kw: Any
    ) -> EntryAttributes:
        self._check_rw()
        parent = self._inode(parent_inode)
        n = _name(name)
        with self.inodes.changing(parent) as dir_asked:
            asked = self.inodes.asking()
            fh, attrs, cinfo, dir_attrs = await self.nfs.create(
                parent.fh, n, ftype, self.cred(ctx), dir_attrs=True, **kw
            )
            node = self._learn(fh, attrs, asked)
            self._modified_dir(parent, n, cinfo, True, node)
            self._dir_after(parent, cinfo, dir_attrs, dir_asked)
        if ftype == c.NF4DIR:
            self._listed(node)
        return self._entry(node)

    @fuse_errors
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: RequestContext
    ) -> EntryAttributes:
        return await self._create(parent_inode, name, c.NF4DIR, ctx, mode=mode & 0o7777)

    @fuse_errors
    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: RequestContext
    ) -> EntryAttributes:
        return await self._create(parent_inode, name, c.NF4LNK, ctx, mode=0o777, linkdata=target)

    @fuse_errors
    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: RequestContext
    ) -> EntryAttributes:
        fmt = stat.S_IFMT(mode)
        perm = mode & 0o7777
        if fmt == stat.S_IFREG:
            fi, entry = await self._open_create(parent_inode, name, perm, os.O_WRONLY | os.O_CREAT, ctx)
            await self.release(fi.fh)
            return entry
        types = {
            stat.S_IFIFO: c.NF4FIFO,
            stat.S_IFSOCK: c.NF4SOCK,
            stat.S_IFCHR: c.NF4CHR,
            stat.S_IFBLK: c.NF4BLK,
        }
        if fmt not in types:
            raise FUSEError(errno.EINVAL)
        return await self._create(
            parent_inode, name, types[fmt], ctx, mode=perm, rdev=(os.major(rdev), os.minor(rdev))
        )

    @fuse_errors
    async def unlink(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        self._check_rw()
        parent = self._inode(parent_inode)
        n = _name(name)
        cred = self.cred(ctx)
        target = await self.silly.open_target(parent.fh, n, cred)
        if target is not None:
            await self.silly.hide(parent, n, target, cred)
            return
        with self.inodes.changing(parent) as dir_asked:
            cinfo, dir_attrs = await self.nfs.remove(parent.fh, n, cred, dir_attrs=True)
            self._modified_dir(parent, n, cinfo, False)
            self._dir_after(parent, cinfo, dir_attrs, dir_asked)

    @fuse_errors
    async def rmdir(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        """A directory whose only entries are hidden names of files unlinked while open (.nfsXXXX)
        is empty to its user: their last close comes to us a moment after close(2) returned (FUSE's
        RELEASE does not hold it), and the removal waits for them that long."""
        self._check_rw()
        parent = self._inode(parent_inode)
        n = _name(name)
        cred = self.cred(ctx)
        with self.inodes.changing(parent) as dir_asked:
            try:
                cinfo, dir_attrs = await self.nfs.remove(parent.fh, n, cred, dir_attrs=True)
            except NFS4Error as e:
                target = self.inodes.by_name(parent.ino, n)
                if e.status != c.NFS4ERR_NOTEMPTY or target is None or not await self.silly.gone_from(target.fh):
                    raise
                cinfo, dir_attrs = await self.nfs.remove(parent.fh, n, cred, dir_attrs=True)
            self._modified_dir(parent, n, cinfo, False)
            self._dir_after(parent, cinfo, dir_attrs, dir_asked)

    @fuse_errors
    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: RequestContext,
    ) -> None:
        if flags:
            raise FUSEError(errno.EINVAL)  # NFSv4 RENAME can neither exchange nor refuse to replace
        self._check_rw()
        src, dst = self._inode(parent_inode_old), self._inode(parent_inode_new)
        old, new = _name(name_old), _name(name_new)
        cred = self.cred(ctx)
        target = await self.silly.open_target(dst.fh, new, cred)
        if target is not None:
            await self.silly.hide(dst, new, target, cred)
        with self.inodes.changing(src) as src_asked, self._changing_other(dst, src) as dst_asked:
            r = await self.nfs.rename(src.fh, old, dst.fh, new, cred, dir_attrs=True)
            moved = self._modified_dir(src, old, r.source, False)
            self._modified_dir(dst, new, r.target, True, moved)
            if dst is src:
                # (one directory: its change attribute moved once, from the source's "before" to the
                # target's "after")
                self._dir_after(src, r.target, r.target_attrs, src_asked)
            else:
                self._dir_after(src, r.source, r.source_attrs, src_asked)
                self._dir_after(dst, r.target, r.target_attrs, dst_asked)

    def _changing_other(self, node: Inode, other: Inode) -> contextlib.AbstractContextManager[int]:
        """``InodeTable.changing`` of ``node`` unless it is ``other``, whose is taken already."""
        return contextlib.nullcontext(0) if node is other else self.inodes.changing(node)

    @fuse_errors
    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: RequestContext
    ) -> EntryAttributes:
        self._check_rw()
        node = self._inode(inode)
        parent = self._inode(new_parent_inode)
        n = _name(new_name)
        asked = self.inodes.asking(node)
        with self.inodes.changing(parent) as dir_asked:
            attrs, cinfo, dir_attrs = await self.nfs.link(node.fh, parent.fh, n, self.cred(ctx), dir_attrs=True)
            node = self._learn(node.fh, attrs, asked)
            self._modified_dir(parent, n, cinfo, True, node)
            self._dir_after(parent, cinfo, dir_attrs, dir_asked)
        return self._entry(node)

    # -- open files (:mod:`.opens`) -------------------------------------------------------------------
    @fuse_errors
    async def open(self, inode: int, flags: int, ctx: RequestContext) -> FileInfo:
        """``O_TRUNC`` needs the right to write, as on a local file system."""
        node = self._inode(inode)
        access = share_access(flags)
        if flags & os.O_TRUNC:
            access |= c.OPEN4_SHARE_ACCESS_WRITE
        if access & c.OPEN4_SHARE_ACCESS_WRITE:
            self._check_rw()
        return await self.opens.open(node, flags, access, self.cred(ctx))

    async def _read_state(self, h: FileHandle, of: OpenFile, off: int, size: int) -> tuple[Any, bool]:
        """One READ; when the server lost the open behind it, open again and repeat."""
        return await with_reopens(
            of, functools.partial(self.opens.reopen, h.inode, h.shared),
            lambda: self.nfs.read(of, h.inode.fh, off, size, h.cred),
        )

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

    async def _drop_entry(self, parent: int, name: str) -> None:
        """The kernel's entry for ``name`` in ``parent`` goes (bounded: the kernel takes the
        directory's lock for it, which a request of its own might hold; then the notification goes
        on after our answer)."""
        if self.kernel is not None:
            with trio.move_on_after(GONE_NOTIFY_WAIT):
                await self.kernel.invalidate_entry(parent, os.fsencode(name))

    async def _open_create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: RequestContext
    ) -> tuple[FileInfo, EntryAttributes]:
        self._check_rw()
        parent = self._inode(parent_inode)
        n = _name(name)
        cred = self.cred(ctx)
        access = share_access(flags)
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
                of.attrs = await self.nfs.getattr(of.fh, cred)
            node = self._learn(of.fh, of.attrs, asked)
            cinfo = of.dir_change
            if cinfo is None or cinfo.before == cinfo.after:  # it was there already: the caller's right to open it
                self.opens.granted(node, of, want)
            self._modified_dir(parent, n, cinfo, True, node)
            self._dir_after(parent, cinfo, of.dir_attrs, dir_asked)
        shared = self.opens.adopt(node, of, cred)
        keep = await self.opens.close_to_open(node, None, asked)
        return self.opens.handle(node, shared, access, cred, keep, flags), self._entry(node)

    @fuse_errors
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: RequestContext
    ) -> tuple[FileInfo, EntryAttributes]:
        return await self._open_create(parent_inode, name, mode, flags, ctx)

    def _file(self, fh: int) -> FileHandle:
        return self.opens.file(fh)

    @fuse_errors
    async def read(self, fh: int, off: int, size: int) -> Any:
        h = self._file(fh)
        node = h.inode
        await self._sync_inode(node)  # our own gathered writes are read back from the server
        ra = h.readahead
        if ra is not None:
            # as far ahead as the READs that fill the session's live paths reach, or the mount's window
            ra.max_window = max(self.opens.readahead_window, self._io_window() * self.nfs.maxread)
            cover, new = ra.request(off, size, node.attrs.size)
            for e in new:
                h.fetching.add(e)
                self.nursery.start_soon(self._read_ahead, h, e)
            if cover:
                for e in cover:
                    await e.done.wait()
                data = assemble(cover, off, size)
                if data is not None:
                    return data  # a slice of a reply's view when one READ holds it: no copy
                ra.drop()  # a READ ahead failed or came back short: read it here (and see why)
        return await self._read_direct(h, off, size)

    async def _read_ahead(self, h: FileHandle, e: Extent) -> None:
        try:
            data, eof = await self.nfs.read(h.shared.of, h.inode.fh, e.offset, e.size, h.cred)
        except Exception as exc:  # the reader's own READ then sees (and reports) it
            e.finish(error=exc)
        else:
            e.finish(data, eof)
        finally:
            e.done.set()
            h.fetching.discard(e)

    def _io_window(self) -> int:
        """READs to keep in flight: as many as fill the session's live paths."""
        return self.nfs.io_window(self.nfs.maxread)

    async def _read_direct(self, h: FileHandle, off: int, size: int) -> Any:
        of = h.shared.of
        views, _ = await read_range(
            lambda o, n: self._read_state(h, of, o, n), off, size, self.nfs.maxread, self._io_window
        )
        if len(views) == 1:
            return views[0]  # a view of the reply: no copy on the way to the kernel
        return b"".join(views)  # (several READs, or none)

    @fuse_errors
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self._file(fh)
        w = h.shared.writer
        if w is None or not h.access & c.OPEN4_SHARE_ACCESS_WRITE:
            raise FUSEError(errno.EBADF)
        h.written = True
        node = h.inode
        if h.append:
            off = await self._end_for_append(node, off, h.cred)
        node.drop_readahead()
        self.inodes.wrote(node, off + len(buf))  # (before the kernel hears of it: attributes asked until now are older)
        await w.write(off, buf)
        node.stale()
        return len(buf)

    async def _end_for_append(self, node: Inode, off: int, cred: Credential) -> int:
        """Where a write to a file opened O_APPEND goes: the end of the file as the server has it
        with our writes on top. The kernel appends at the size it holds, which another client's
        appends since it last asked (at the open, or as the attribute cache allows, as the Linux
        client revalidates before an append) have left behind: the write goes to the end instead,
        and the kernel is made to drop its cached pages and size of the file."""
        if not self.inodes.fresh(node, self._now()) and not self._delegated(node):
            await self._sync_inode(node)
            asked = self.inodes.asking(node)
            attrs = await self.nfs.getattr(node.fh, cred)
            self.inodes.refresh(node, attrs, self._now(), asked=asked)
        end = self.inodes.size(node)
        if end != off:
            log.debug("append to inode %d at %d, where the kernel had %d", node.ino, end, off)
            self.nursery.start_soon(self._invalidate, node.ino)
        return end

    @fuse_errors
    async def flush(self, fh: int, lock_owner: int = 0) -> None:
        h = self._file(fh)
        log.debug("flush fh=%d ino=%d written=%s", fh, h.inode.ino, h.written)
        try:
            if h.written and h.shared.writer is not None:
                await h.shared.writer.flush()  # close(2) reports write errors, and the data is stable
        finally:
            await self.locks.unlock_posix(h, lock_owner)

    @fuse_errors
    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self._file(fh)
        if h.shared.writer is not None:
            await h.shared.writer.flush()

    @fuse_errors
    async def release(self, fh: int, lock_owner: int = 0, flock_unlock: bool = False) -> None:
        h = self.files.get(fh)
        if h is None:
            return
        if flock_unlock:
            try:
                await self.locks.unlock_flock(h, fh)
            except (OSError, NFS4Error) as err:
                log.info("releasing the flock lock of fh=%d: %s", fh, err)
        node = h.inode
        try:
            await self.opens.release(fh, h)
        finally:
            if node.opens == 0:
                await self.silly.remove(node, h.cred)
            self.inodes.drop_if_unused(node)

    # -- NFSv4.2 file operations (vers=4.2; :mod:`.nfs42`) -------------------------------------------
    @fuse_errors
    async def fallocate(self, fh: int, mode: int, offset: int, length: int) -> None:
        await self.nfs42.fallocate(self._file(fh), mode, offset, length)

    @fuse_errors
    async def lseek(self, fh: int, offset: int, whence: int) -> int:
        return await self.nfs42.lseek(self._file(fh), offset, whence)

    @fuse_errors
    async def copy_file_range(
        self, fh_in: int, off_in: int, fh_out: int, off_out: int, length: int, flags: int
    ) -> int:
        return await self.nfs42.copy_file_range(self._file(fh_in), off_in, self._file(fh_out), off_out, length)

    # -- byte-range and flock locks (:mod:`.posix_locks`) --------------------------------------------
    @fuse_errors
    async def getlk(self, fh: int, lock_owner: int, lock: FileLock, ctx: RequestContext) -> FileLock:
        return await self.locks.getlk(self._file(fh), lock_owner, lock)

    @fuse_errors
    async def setlk(
        self, fh: int, lock_owner: int, lock: FileLock, sleep: bool, flock: bool, ctx: RequestContext
    ) -> None:
        await self.locks.setlk(self._file(fh), fh, lock_owner, lock, sleep, flock)

    # -- directories ----------------------------------------------------------------------------------
    @fuse_errors
    async def opendir(self, inode: int, ctx: RequestContext) -> int:
        """Close-to-open for a directory: the name the kernel reached it by is looked up again (the
        directory may have been removed or renamed by another client: ESTALE then makes the kernel
        look the path up again, instead of a listing of the old directory or an ESTALE from it)."""
        node = self._inode(inode)
        if not node.is_dir:
            raise FUSEError(errno.ENOTDIR)
        named = await self.opens.sole_name(node, self.cred(ctx))
        if named is not None:
            parent, name = named
            asked = self.inodes.asking()
            try:
                fh, attrs = await self.nfs.lookup(parent.fh, name, self.cred(ctx))
            except NFS4Error as e:
                if e.errno not in (errno.ENOENT, errno.ESTALE, errno.ENOTDIR):
                    raise
                raise self.opens.name_moved(node, parent, name) from None
            if fh != node.fh:
                raise self.opens.name_moved(node, parent, name)
            if self.inodes.refresh(node, attrs, self._now(), asked=asked):
                self._changed(node)
        node.opens += 1
        fid = next(self._ids)
        cred = self.cred(ctx)
        self.dirs[fid] = DirHandle(node, cred, DirReader(self.nfs, node.fh, cred, self.nursery, self.inodes.asking))
        return fid

    @fuse_errors
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
            if start_id < off and not token.add(dot, self._entry(self._dot_node(h.inode, dot)), off):
                return
        cookie = start_id if start_id > DOT_ENTRIES[-1][0] else 0
        learn = self.inodes.learn
        named = self.inodes.named
        reply = token.add
        entry = self._entry
        dir_ino = h.inode.ino
        while True:
            page, start = await h.pages.page_after(cookie)
            assert page.result is not None
            entries, _, eof = page.result
            now = self._now()
            asked = page.asked
            for i in range(start, len(entries)):
                name, next_cookie, fh_, attrs = entries[i]
                if fh_ is None or attrs is None:  # the server gave no handle: look it up
                    asked = self.inodes.asking()
                    try:
                        fh_, attrs = await self.nfs.lookup(
                            h.inode.fh, str(name, "utf-8", "surrogateescape"), h.cred
                        )
                    except NFS4Error as err:
                        if err.errno not in (errno.ENOENT, errno.ESTALE):
                            raise
                        cookie = next_cookie  # removed since the READDIR: not listed, the rest is
                        continue
                    now = self._now()
                else:
                    asked = page.asked
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

    async def releasedir(self, fh: int) -> None:
        h = self.dirs.pop(fh, None)
        if h is not None:
            h.pages.close()
            h.inode.opens -= 1
            self.inodes.drop_if_unused(h.inode)

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        return None  # directory operations are synchronous on the server already

    # -- end ------------------------------------------------------------------------------------------
    async def shutdown(self) -> None:
        """At unmount: write, commit and close every open, remove silly-renamed names."""
        for fid in list(self.files):
            try:
                await self.release(fid)
            except FUSEError as e:
                log.warning("closing an open file at unmount: %s", os.strerror(e.errno))
        for fid in list(self.dirs):
            await self.releasedir(fid)
        await self.nfs.flush_closes()
        await self.nfs.return_delegations()

    def root_inode(self) -> int:
        return ROOT_INODE
