"""The FUSE file system: the low-level operations (:mod:`.lowlevel`), each answered by one NFSv4.1 COMPOUND where possible.

- Inodes are NFS fileids (:mod:`.inodes`); attribute and name caching follow the actimeo family
  (:mod:`.cache`); the kernel is told the same timeouts (``attr_timeout``/``entry_timeout``).
- Credentials: AUTH_SYS with the calling process's uid, gid and supplementary groups, so the
  server enforces permissions per user (``squash_uid=`` sends everything as one user).
- Opens (:mod:`.opens`): one NFS OPEN per (file, open owner), shared by the FUSE handles on it and
  CLOSEd with the last of them. Close-to-open: every open revalidates the change attribute and keeps
  the kernel's page cache only if it did not move.
- Each family of operations is answered by a module of its own, which NFSOperations hands it to:
  LOOKUP (:mod:`.lookup`), SETATTR (:mod:`.setattr`), READ and WRITE (:mod:`.read_write`), open
  directories (:mod:`.readdir`), extended attributes (:mod:`.xattrs`), locks (:mod:`.posix_locks`)
  and the NFSv4.2 operations (:mod:`.nfs42`); what our own operation's change_info4 means for its
  directory is :mod:`.change_info`. NFSOperations keeps what they share: inodes, caches, credentials.
- Writes are gathered per open by the open-file engine (:mod:`.._client.open_file`) and committed on
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
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import trio

from .._client.attributes import FTYPE_TO_IFMT, FileAttrs
from .._client.nfs4 import HeldFile, NFSv4
from .._client.read_sink import PayloadSink
from .._client.security import UserCredentials
from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential, auth_sys
from .cache import AttrTimeouts, NameCache, NameReadAhead, TimedMap
from .change_info import DirectoryChanges
from .inodes import ROOT_INODE, STALE, Inode, InodeTable
from .lookup import Lookups
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
from .opens import FileHandle, Opens, access_mask, share_access
from .options import LOOKUPCACHE_NONE, REMOUNT_CHANGES, MountOptions
from .posix_locks import PosixLocks
from .read_write import FileData
from .readdir import Directories
from .setattr import Setattrs, projected
from .silly_rename import SillyRenames
from .writeback_cache import KernelFiles, KernelInode
from .xattrs import Xattrs

log = logging.getLogger(__name__)

BLOCK_SIZE = 4096
NAME_MAX = 255  # the longest name, in bytes (Linux's; NFS-Ganesha reports 1024 and refuses past 255)
GROUPS_TTL = 2.0  # seconds a process's supplementary groups are remembered
# the operations whose first argument is a file handle (the others': an inode)
HANDLE_OPERATIONS = frozenset({"read", "write", "flush", "fsync", "release", "readdir", "releasedir", "fsyncdir"})
GONE_NOTIFY_WAIT = 0.2  # seconds an answer waits for the kernel to drop an entry (see gone)
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
        names_ahead: dict[int, NameReadAhead] = {}
        self._ids = itertools.count(1)  # FUSE handle numbers, of files and directories
        self._callers: TimedMap[tuple[int, int, int], Credential] = TimedMap(4096, GROUPS_TTL)
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
        self.opens.writeback_cache = opts.writeback_cache  # (asked for at INIT; the channel sets what was agreed)
        self.files = self.opens.files  # FUSE file handles (:class:`.opens.FileHandle`)
        self.locks = PosixLocks(nfs, self.opens, self._invalidate)
        self.nfs42 = NFS42Files(nfs, self.inodes, self.opens)
        self.changes = DirectoryChanges(self.inodes, self.names, opts, names_ahead)
        self.xattrs = Xattrs(nfs, self._inode, self.cred, self._check_rw)
        self.lookups = Lookups(
            nfs, self.inodes, self.names, self.counts, opts, self._each_name_checked, self._entry, self._learn,
            self.gone, names_ahead, self._changed,
        )
        self.silly = SillyRenames(nfs, self.inodes, self.changes.modified)
        self.setattrs = Setattrs(nfs, self.inodes, self.opens, self._delegated)
        self.data = FileData(nfs, self.inodes, self.opens, nursery, self._delegated, self._invalidate)
        self.directories = Directories(nfs, self.inodes, self.opens, nursery, self._ids, self._entry, self._changed)
        self.dirs = self.directories.dirs  # FUSE directory handles (:class:`.readdir.DirHandle`)
        self.kernel_files = KernelFiles(self.inodes, self._invalidate)  # (its mountpoint: set by the daemon)
        gc.set_threshold(*GC_THRESHOLD)  # (the mount daemon's process: see GC_THRESHOLD)
        # delegations: opens and attributes served locally while the server lets us (not with noac)
        nfs.want_delegations = not opts.noac
        nfs.delegation_return_hooks.append(self._delegation_returning)
        nfs.held_file = self._held_file

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
        delegated = self._delegated(node)
        if delegated:
            e.attr_timeout = node.timeo
        else:
            e.attr_timeout = self.inodes.ttl(node, trio.current_time() if now is None else now)
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
        if delegated:  # the times kept under an attribute delegation are newer
            atime, mtime = self.nfs.kept_times(node.fh)
            if atime is not None:
                e.st_atime_ns = atime
            if mtime is not None:
                e.st_mtime_ns = mtime
                e.st_ctime_ns = max(a.ctime_ns, mtime)
        if node.is_reg and self.opens.writeback_cache:
            node.shown(e.st_mtime_ns)
        return e

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
        server lost them; generations: files whose kernel inode was made again, as its size or mtime
        moved on the server (the writeback cache: see Opens.kernel_view_stale)."""
        names = ("attr_hits", "attr_revalidations", "lookups_cached", "lookups_read_ahead", "lookups_sent",
                 "stale_names", "generations")
        return {**{n: self.counts[n] for n in names}, "invalidations": self.invalidations, "reopens": self.opens.reopens}

    async def _invalidate(self, ino: int, attr_only: bool = False) -> None:
        if self.kernel is not None:
            await self.kernel.invalidate_inode(ino, attr_only)

    async def _sync_inode(self, node: Inode) -> None:
        await self.opens.sync(node)

    # -- delegations ----------------------------------------------------------------------------------
    def _delegated(self, node: Inode) -> bool:
        """Whether ``node``'s cached attributes are current because we hold a delegation on the file
        (nobody else can change it) and nothing of ours made them stale."""
        return node.fetched != STALE and node.fh in self.nfs.delegations

    async def _delegation_returning(self, fh: bytes) -> None:
        """Before a delegation goes back: the file's gathered writes reach the server, and what we
        cached under the delegation must be revalidated from now on. With the writeback cache, what
        the kernel holds of a file open here comes first (:meth:`_pull_kernel`): its dirty pages
        reach the server with ours, and the mtime the mount shows goes back with the delegation
        (under an attribute delegation, as the modify time kept), or is set on the server after
        the WRITEs that moved it there, so that every client sees the one the mount shows."""
        for node in list(self.inodes):
            if node.fh != fh:
                continue
            seen = await self._pull_kernel(node)
            for s in list(node.shared.values()):
                if s.writer is not None:
                    await s.writer.flush()  # (sends what is gathered, then commits)
            if seen is not None:
                await self._server_mtime_as_kernels(node, seen)
            node.stale()
            self.nursery.start_soon(self._invalidate, node.ino, True)

    async def _pull_kernel(self, node: Inode) -> KernelInode | None:
        """With the writeback cache, regular file ``node`` open here: the kernel's dirty pages of it
        written back to us, and the size and mtime its inode holds (see :mod:`.writeback_cache`);
        the mtime is the modify time kept under an attribute delegation. None otherwise."""
        if not self.writeback_cache or not node.is_reg or not node.opens:
            return None
        await self.kernel_files.write_back(node)
        return await self._kernel_inode(node)

    async def _kernel_inode(self, node: Inode) -> KernelInode | None:
        """With the writeback cache, regular file ``node`` open here: the size and mtime its kernel
        inode holds; the mtime is the modify time kept under an attribute delegation."""
        if not self.writeback_cache or not node.is_reg or not node.opens:
            return None
        seen = await self.kernel_files.stat(node)
        if seen is not None:
            self.nfs.note_write(node.fh, seen.mtime_ns)  # (only under a write attribute delegation)
        return seen

    async def _server_mtime_as_kernels(self, node: Inode, seen: KernelInode) -> None:
        """After the kernel's writes reached the server under a plain delegation: the server's mtime
        is when they came; the kernel's, which the mount shows while the file is open, is when they
        were written. The server is given the kernel's, as the kernel gives it at the close."""
        d = self.nfs.delegations.get(node.fh)
        if d is None or d.timestamps or seen.mtime_ns == node.attrs.mtime_ns:
            return
        writer = next((s for s in node.shared.values() if s.of.access & c.OPEN4_SHARE_ACCESS_WRITE), None)
        if writer is None:
            return
        asked = self.inodes.asking(node)
        try:
            attrs = await self.nfs.names.setattr(node.fh, writer.cred, stateid=writer.of.stateid, mtime_ns=seen.mtime_ns)
        except NFS4Error as e:
            log.info("the kernel's mtime of inode %d not set on the server: %s", node.ino, e)
            return
        self.inodes.refresh(node, attrs, trio.current_time(), asked=asked)
        node.kernel_learned()

    async def _held_file(self, fh: bytes) -> HeldFile | None:
        """What CB_GETATTR asks of a file we hold a write delegation of: its size as the writes made
        through us left it, and whether some of them have not been sent yet. With the writeback
        cache and the file open here, the size and mtime are those the kernel's inode holds (a
        stat through the mount: the server waits for the answer only briefly, so the dirty pages
        stay in the kernel), and the kernel's writes it has not sent us yet count as unsent."""
        for node in list(self.inodes):
            if node.fh == fh:
                seen = await self._kernel_inode(node)
                unsent = any(s.writer is not None and s.writer.unsent for s in node.shared.values())
                size = self.inodes.size(node)
                if seen is not None:
                    size = max(size, seen.size)
                    unsent = unsent or (seen.size, seen.mtime_ns) != node.kernel_view
                return HeldFile(size, unsent)
        return None

    def _check_rw(self) -> None:
        if self.opts.ro:
            raise FUSEError(errno.EROFS)

    # -- names (:mod:`.lookup`) ----------------------------------------------------------------------
    @fuse_errors
    async def lookup(self, parent_inode: int, name: bytes, ctx: RequestContext) -> EntryAttributes:
        parent = self._inode(parent_inode)
        return await self.lookups.lookup(parent, _name(name), ctx.pid, self.cred(ctx))

    async def forget(self, inode_list: Any) -> None:
        for ino, n in inode_list:
            self.inodes.forget(ino, n)

    # -- attributes -----------------------------------------------------------------------------------
    @property
    def writeback_cache(self) -> bool:
        """Whether the kernel gathers writes in its page cache (see :class:`.opens.Opens`)."""
        return self.opens.writeback_cache

    @writeback_cache.setter
    def writeback_cache(self, on: bool) -> None:
        self.opens.writeback_cache = on

    @fuse_errors
    async def getattr(self, inode: int, ctx: RequestContext) -> EntryAttributes:
        """With the writeback cache, a file whose size or mtime moved on the server and that is open
        nowhere here is answered ESTALE (the kernel keeps its own of both): the kernel then looks
        the path up again and makes a new inode from the server's attributes."""
        node = self._inode(inode)
        await self._revalidate(node, ctx)
        if ctx.pid and self.opens.kernel_view_stale(node):
            raise FUSEError(errno.ESTALE)
        return self._entry(node)

    async def _revalidate(self, node: Inode, ctx: RequestContext) -> None:
        kept = self._delegated(node) and self.nfs.keeps_times(node.fh)  # (size and times: ours to tell)
        if not projected(node) and not kept:
            await self._sync_inode(node)
        if not self.inodes.fresh(node, self._now()) and not self._delegated(node):
            self.counts["attr_revalidations"] += 1
            cred = self.cred(ctx) if ctx.pid else self._any_cred(node)
            asked = self.inodes.asking(node)
            attrs = await self.nfs.names.getattr(node.fh, cred)
            if self.inodes.refresh(node, attrs, self._now(), asked=asked):
                self._changed(node)
        else:
            self.counts["attr_hits"] += 1

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
        a = node.attrs
        known = node.kernel_view == (a.size, a.mtime_ns)
        if self._kernels_modify_time(node, fields):
            self.nfs.note_write(node.fh, attr.st_mtime_ns)
            node.attrs = dataclasses.replace(a, mtime_ns=attr.st_mtime_ns)
            if known:
                node.kernel_learned()
            return self._entry(node)
        if self._kernels_times_written_back(node, attr, fields):
            return self._entry(node)
        if fields.update_atime or fields.update_mtime:  # (set on the server: no kept time undoes them)
            self.nfs.forget_times(node.fh)
        if not await self.setattrs.setattr(node, attr, fields, fh, self.cred(ctx)):
            await self._revalidate(node, ctx)
        if known:  # (the kernel set them itself, or they did not move)
            node.kernel_learned()
        return self._entry(node)

    def _kernels_modify_time(self, node: Inode, fields: SetattrFields) -> bool:
        """Whether a SETATTR is the kernel's own mtime of a file it keeps in its writeback cache
        (``fuse_flush_times``, after writes it stamped: FATTR_MTIME, with FATTR_CTIME, and nothing
        else) while we hold a write attribute delegation on the file: that is the modify time the
        delegation keeps (RFC 9754), answered to CB_GETATTR and given back with it; nothing is sent."""
        others = (fields.update_atime, fields.update_mode, fields.update_uid, fields.update_gid, fields.update_size)
        return (
            self.writeback_cache and node.is_reg and fields.update_mtime and not fields.update_mtime_now
            and not any(others) and self.nfs.keeps_times(node.fh)
        )

    def _kernels_times_written_back(self, node: Inode, attr: EntryAttributes, fields: SetattrFields) -> bool:
        """Whether a SETATTR is the kernel writing back times of a file it keeps in its writeback
        cache that it did not stamp itself: nothing is sent, and the server's mtime stays the file's.
        The kernel writes an inode's mtime and ctime back (``fuse_write_inode`` ->
        ``fuse_flush_times``: FATTR_MTIME|FATTR_CTIME, no FATTR_MTIME_NOW) whenever the inode is
        dirty, also when only its ctime moved (``fuse_update_ctime`` after a rename, link or unlink),
        and with the mtime it holds: one we gave it, which may be older than the server's now
        (another client's write, or our own that went around the page cache). Sent, it would take
        the server's mtime back, and every other client would see the file change. As the Linux
        client, which sets no mtime on the server but the one a caller asks for, it is not sent
        when the mtime is one we gave the kernel, also when data of the file waits here (written
        around the page cache, which the kernel stamps no time for); a time a caller chose, or the
        kernel stamped at a write(2), is sent."""
        others = (fields.update_atime, fields.update_mode, fields.update_uid, fields.update_gid, fields.update_size)
        if (not self.writeback_cache or not node.is_reg or not fields.update_mtime or fields.update_mtime_now
                or any(others) or not node.may_hold(attr.st_mtime_ns)):
            return False
        log.debug("times of inode %d written back by the kernel: the server's kept", node.ino)
        return True

    @fuse_errors
    async def readlink(self, inode: int, ctx: RequestContext) -> bytes:
        node = self._inode(inode)
        return await self.nfs.directories.readlink(node.fh, self.cred(ctx))

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
        granted = await self.nfs.names.access(node.fh, want, self.cred(ctx))
        return granted & want == want

    # -- extended attributes (:mod:`.xattrs`) ---------------------------------------------------------
    @fuse_errors
    async def getxattr(self, inode: int, name: bytes, ctx: RequestContext) -> bytes:
        return await self.xattrs.getxattr(inode, name, ctx)

    @fuse_errors
    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: RequestContext) -> None:
        await self.xattrs.setxattr(inode, name, value, ctx)

    @fuse_errors
    async def listxattr(self, inode: int, ctx: RequestContext) -> list[bytes]:
        return await self.xattrs.listxattr(inode, ctx)

    @fuse_errors
    async def removexattr(self, inode: int, name: bytes, ctx: RequestContext) -> None:
        await self.xattrs.removexattr(inode, name, ctx)

    @fuse_errors
    async def statfs(self, ctx: RequestContext) -> StatvfsData:
        fs = await self.nfs.names.statfs(self.inodes.root.fh, self.cred(ctx))
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
            fh, attrs, cinfo, dir_attrs = await self.nfs.directories.create(
                parent.fh, n, ftype, self.cred(ctx), dir_attrs=True, **kw
            )
            node = self._learn(fh, attrs, asked)
            self.changes.modified(parent, n, cinfo, True, node)
            self.changes.after(parent, cinfo, dir_attrs, dir_asked)
        if ftype == c.NF4DIR:
            self.changes.listed(node)
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
            cinfo, dir_attrs = await self.nfs.directories.remove(parent.fh, n, cred, dir_attrs=True)
            self.changes.modified(parent, n, cinfo, False)
            self.changes.after(parent, cinfo, dir_attrs, dir_asked)

    @fuse_errors
    async def rmdir(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        """A directory whose only entries are hidden names of files unlinked while open (.nfsXXXX)
        is empty to its user: their last close comes to us a moment after close(2) returned (FUSE's
        RELEASE does not hold it), and the removal waits for them that long."""
        self._check_rw()
        parent = self._inode(parent_inode)
        n = _name(name)
        cred = self.cred(ctx)
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
            attrs, cinfo, dir_attrs = await self.nfs.directories.link(node.fh, parent.fh, n, self.cred(ctx), dir_attrs=True)
            node = self._learn(node.fh, attrs, asked)
            self.changes.modified(parent, n, cinfo, True, node)
            self.changes.after(parent, cinfo, dir_attrs, dir_asked)
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
        cred = self.cred(ctx)
        direct = self.writeback_cache and bool(flags & os.O_APPEND) and not self._appends_cached(node)
        if self._reads_to_write(access, flags, node):
            try:
                return await self.opens.open(node, flags, c.OPEN4_SHARE_ACCESS_BOTH, cred)
            except (FUSEError, NFS4Error) as e:
                if e.errno != errno.EACCES:
                    raise
            direct = True  # (the caller may write and not read: the kernel cannot fill partial pages)
        return await self.opens.open(node, flags, access, cred, direct)

    def _reads_to_write(self, access: int, flags: int, node: Inode | None) -> bool:
        """Whether an open for writing only is made for reading too: with the writeback cache the
        kernel reads the rest of a page a write covers in part (as the Linux client opens for
        reading as well). Where the server refuses the caller reading, the open is made for
        writing only and its writes bypass the page cache (FUSE's direct_io), as do O_APPEND
        opens, whose writes go to the end of the file as the server has it, unless
        :meth:`_appends_cached`."""
        if not self.writeback_cache or access != c.OPEN4_SHARE_ACCESS_WRITE:
            return False
        return not flags & os.O_APPEND or (node is not None and self._appends_cached(node))

    def _appends_cached(self, node: Inode) -> bool:
        """Whether O_APPEND writes to ``node`` go through the kernel's writeback cache: while we hold
        a write delegation on it, no other client changes the file, so the size the kernel
        appends at (checked at the open: see :meth:`.opens.Opens.kernel_view_stale`) is the file's,
        and the kernel stamps the mtime of each write as it does for the others (a write around its
        page cache leaves the mtime it shows behind until the file is opened again)."""
        return self.nfs.delegation_for(node.fh, c.OPEN4_SHARE_ACCESS_WRITE) is not None

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
        """An open that may create the file; with the writeback cache, one for writing only is made
        for reading too where the server allows it (see _reads_to_write)."""
        access = share_access(flags)
        direct = self.writeback_cache and bool(flags & os.O_APPEND)  # (no delegation yet: see _appends_cached)
        if self._reads_to_write(access, flags, None):
            try:
                return await self._open_create_as(parent_inode, name, mode, flags, ctx, c.OPEN4_SHARE_ACCESS_BOTH)
            except (FUSEError, NFS4Error) as e:
                if e.errno != errno.EACCES:
                    raise
            direct = True
        return await self._open_create_as(parent_inode, name, mode, flags, ctx, access, direct)

    async def _open_create_as(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: RequestContext, access: int,
        direct: bool = False,
    ) -> tuple[FileInfo, EntryAttributes]:
        self._check_rw()
        parent = self._inode(parent_inode)
        n = _name(name)
        cred = self.cred(ctx)
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

    @fuse_errors
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: RequestContext
    ) -> tuple[FileInfo, EntryAttributes]:
        return await self._open_create(parent_inode, name, mode, flags, ctx)

    def _file(self, fh: int) -> FileHandle:
        return self.opens.file(fh)

    @fuse_errors
    async def read(self, fh: int, off: int, size: int, sink: PayloadSink | None = None) -> Any:
        h = self._file(fh)
        self.nfs.note_read(h.inode.fh, time.time_ns())  # (the access time, under an attribute delegation)
        return await self.data.read(h, off, size, sink)

    async def read_into(self, fh: int, off: int, size: int, sink: PayloadSink) -> Any:
        return await self.read(fh, off, size, sink)

    @fuse_errors
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self._file(fh)
        if h.direct or not self.writeback_cache:  # (else the kernel stamped it at the write(2): see setattr)
            self.nfs.note_write(h.inode.fh, time.time_ns())  # (the modify time, under an attribute delegation)
        return await self.data.write(h, off, buf)

    @fuse_errors
    async def flush(self, fh: int, lock_owner: int = 0) -> None:
        h = self._file(fh)
        log.debug("flush fh=%d ino=%d written=%s", fh, h.inode.ino, h.written)
        try:
            if self.writeback_cache:
                # the kernel wrote the file's dirty pages back before FLUSH, through any handle of it
                await self.opens.commit(h.inode)
            elif h.written and h.shared.writer is not None:
                await h.shared.writer.flush()  # close(2) reports write errors, and the data is stable
        finally:
            await self.locks.unlock_posix(h, lock_owner)

    @fuse_errors
    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self._file(fh)
        if self.writeback_cache:
            await self.opens.commit(h.inode)  # (written back through any handle of the file)
        elif h.shared.writer is not None:
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

    # -- directories (:mod:`.readdir`) --------------------------------------------------------------
    @fuse_errors
    async def opendir(self, inode: int, ctx: RequestContext) -> int:
        return await self.directories.opendir(self._inode(inode), self.cred(ctx))

    @fuse_errors
    async def readdir(self, fh: int, start_id: int, token: ReaddirToken) -> None:
        await self.directories.readdir(fh, start_id, token)

    async def releasedir(self, fh: int) -> None:
        self.directories.releasedir(fh)

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
