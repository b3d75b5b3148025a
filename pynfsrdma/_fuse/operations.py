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
  directories (:mod:`.readdir`), CREATE, REMOVE, RENAME, LINK and the OPENs that create
  (:mod:`.namespace`), extended attributes (:mod:`.xattrs`), locks (:mod:`.posix_locks`), the
  NFSv4.2 operations (:mod:`.nfs42`), NFS4ERR_STALE (:mod:`.stale_handles`), and the delegated
  files' returns and CB_GETATTR (:mod:`.delegated_files`); what our own operation's change_info4
  means for its directory is :mod:`.change_info`. NFSOperations keeps what they share: inodes,
  caches, credentials.
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

from .._client.attributes import FTYPE_TO_IFMT, AttrRecord, FileAttrs
from .._client.nfs4 import NFSv4
from .._client.read_sink import PayloadSink
from .._client.security import UserCredentials
from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential, auth_sys
from .cache import AttrTimeouts, NameCache, NameReadAhead, TimedMap
from .change_info import DirectoryChanges
from .delegated_files import DelegatedFiles
from .inodes import ROOT_INODE, STALE, Inode, InodeTable
from .lookup import Lookups
from .lowlevel import (
    EntryAttributes,
    EntryFields,
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
from .namespace import Namespace
from .nfs42 import NFS42Files
from .opens import FileHandle, Opens, share_access
from .options import LOOKUPCACHE_NONE, REMOUNT_CHANGES, MountOptions
from .posix_locks import PosixLocks
from .read_write import FileData
from .readdir import Directories
from .setattr import Setattrs, mtime_alone, projected
from .silly_rename import SillyRenames
from .stale_handles import StaleHandles
from .writeback_cache import KernelFiles
from .xattrs import Xattrs

log = logging.getLogger(__name__)

BLOCK_SIZE = 4096
NAME_MAX = 255  # the longest name, in bytes (Linux's; NFS-Ganesha reports 1024 and refuses past 255)
GROUPS_TTL = 2.0  # seconds a process's supplementary groups are remembered
GONE_NOTIFY_WAIT = 0.2  # seconds an answer waits for the kernel to drop an entry (see gone)
# The daemon keeps tens of thousands of long-lived objects (inodes and their attributes) and makes
# them by the thousand (a listing, an untar): with CPython's default thresholds (a young collection
# every 700 allocations) the cyclic collector took about a fifth of an ``ls -l``'s CPU; with these, a
# young collection every 50,000, next to nothing (garbage in cycles lingers a little longer)
GC_THRESHOLD = (50_000, 20, 20)
_DEVICES = (c.NF4BLK, c.NF4CHR)
_NF4REG = c.NF4REG
_NF4DIR = c.NF4DIR
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
    return str(name, "utf-8", "surrogateescape")  # (as a listing decodes its names)


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
        self._clock = trio.lowlevel.current_clock()  # (the run's: its time is trio.current_time())
        self.inodes = InodeTable(root_fh, root_attrs, self.timeouts, self._now())
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
            nfs, self.inodes, self.names, self.counts, opts, self._each_name_checked, self._entry_fields, self._listed_fields, self._learn,
            self.gone, names_ahead, self._changed,
        )
        self.silly = SillyRenames(nfs, self.inodes, self.changes.modified)
        self.namespace = Namespace(nfs, self.inodes, self.changes, self.silly, self.opens, self._learn, self._entry)
        self.setattrs = Setattrs(nfs, self.inodes, self.opens, self._delegated)
        self.data = FileData(nfs, self.inodes, self.opens, nursery, self._delegated, self._invalidate)
        self.directories = Directories(
            nfs, self.inodes, self.opens, nursery, self._ids, self._entry, self._listed_fields, self._changed
        )
        self.dirs = self.directories.dirs  # FUSE directory handles (:class:`.readdir.DirHandle`)
        self.stale_handles = StaleHandles(self.inodes, self.names, self.files, self.dirs, self._drop_entry)
        self.kernel_files = KernelFiles(self.inodes, self._invalidate)  # (its mountpoint: set by the daemon)
        gc.set_threshold(*GC_THRESHOLD)  # (the mount daemon's process: see GC_THRESHOLD)
        # delegations: opens and attributes served locally while the server lets us (not with noac)
        nfs.want_delegations = not opts.noac
        self.delegated_files = DelegatedFiles(nfs, self.inodes, self.opens, nursery, self.kernel_files, self._invalidate)
        nfs.delegation_return_hooks.append(self.delegated_files.returning)
        nfs.held_file = self.delegated_files.held_file

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
        return self._clock.current_time()

    def _entry(self, node: Inode, now: float | None = None) -> EntryAttributes:
        """The kernel's entry for ``node`` as an object (:meth:`_entry_fields`)."""
        return EntryAttributes(*self._entry_fields(node, now))

    def _entry_fields(self, node: Inode, now: float | None = None) -> EntryFields:
        """The kernel's entry for ``node``, as :data:`EntryFields` (what a GETATTR or a LOOKUP
        packs); ``now``: the time its attributes were just learned at (a listing's page), else the
        clock is read."""
        a = node.attrs
        ftype = a.type
        # (no call for what a property or a line gives: a listing makes an entry for every name)
        delegated = self._delegated(node)
        attr_timeout = node.timeo if delegated else self.inodes.ttl(node, self._now() if now is None else now)
        atime, mtime, ctime = a.atime_ns, a.mtime_ns, a.ctime_ns
        if delegated:  # the times kept under an attribute delegation are newer
            kept_atime, kept_mtime = self.nfs.kept_times(node.fh)
            if kept_atime is not None:
                atime = kept_atime
            if kept_mtime is not None:
                mtime = kept_mtime
                ctime = max(ctime, kept_mtime)
        if ftype == _NF4REG and self.opens.writeback_cache:
            node.shown(mtime)
        return (
            node.ino, node.generation, self.entry_timeout, attr_timeout,
            FTYPE_TO_IFMT.get(ftype, 0) | a.mode,
            a.nlink - len(node.silly) if node.silly else a.nlink,  # (unlinked while open: 0)
            a.uid, a.gid, os.makedev(*a.rdev) if ftype in _DEVICES else 0,
            self.inodes.size(node), BLOCK_SIZE, (a.used + 511) // 512, atime, mtime, ctime,
        )  # fmt: skip

    def _listed_fields(self, ino: int, a: AttrRecord, attr_timeout: float | None = None) -> EntryFields:
        """The kernel's entry for a file a listing read ``a`` of and keeps no Inode of
        (``InodeTable.listed``), as :data:`EntryFields` (what a listing and a LOOKUP of a name read
        ahead pack): as :meth:`_entry` gives it for an Inode made then; ``attr_timeout``: what is
        left of the attributes' time (None: the whole of it, read just now)."""
        ftype, mode, nlink, uid, gid, size, used, rdev, _, _, _, atime, mtime, ctime = a
        if attr_timeout is None:  # (AttrTimeouts.initial written out: a listing gives one per name)
            attr_timeout = self.timeouts.dirmin if ftype == _NF4DIR else self.timeouts.regmin
        return (
            ino, 0, self.entry_timeout, attr_timeout,
            FTYPE_TO_IFMT.get(ftype, 0) | mode, nlink,
            uid, gid, os.makedev(*rdev) if ftype in _DEVICES else 0,
            size, BLOCK_SIZE, (used + 511) // 512, atime, mtime, ctime,
        )  # fmt: skip

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

    def _check_rw(self) -> None:
        if self.opts.ro:
            raise FUSEError(errno.EROFS)

    # -- names (:mod:`.lookup`) ----------------------------------------------------------------------
    @fuse_errors
    async def lookup(self, parent_inode: int, name: bytes, ctx: RequestContext) -> EntryAttributes | EntryFields:
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
    async def getattr(self, inode: int, ctx: RequestContext) -> EntryAttributes | EntryFields:
        """With the writeback cache, a file whose size or mtime moved on the server and that is open
        nowhere here is answered ESTALE (the kernel keeps its own of both): the kernel then looks
        the path up again and makes a new inode from the server's attributes."""
        node = self._inode(inode)
        now = await self._revalidate(node, ctx)
        if ctx.pid and self.opens.kernel_view_stale(node):
            raise FUSEError(errno.ESTALE)
        return self._entry_fields(node, now)

    async def _revalidate(self, node: Inode, ctx: RequestContext) -> float:
        """Make ``node``'s attributes current; returns the time they were found fresh or fetched at
        (what :meth:`_entry` counts their time left from)."""
        if node.shared and not projected(node) and not (
                self._delegated(node) and self.nfs.keeps_times(node.fh)):  # (size and times: ours to tell)
            await self._sync_inode(node)  # (only open state holds gathered writes)
        now = self._now()
        if not self.inodes.fresh(node, now) and not self._delegated(node):
            self.counts["attr_revalidations"] += 1
            cred = self.cred(ctx) if ctx.pid else self._any_cred(node)
            asked = self.inodes.asking(node)
            attrs = await self.nfs.names.getattr(node.fh, cred)
            now = self._now()
            if self.inodes.refresh(node, attrs, now, asked=asked):
                self._changed(node)
        else:
            self.counts["attr_hits"] += 1
        return now

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
        if mtime_alone(fields):
            if self.setattrs.kernels_modify_time(node):
                self.nfs.note_write(node.fh, attr.st_mtime_ns)
                node.attrs = a.replaced(mtime_ns=attr.st_mtime_ns)
                if known:
                    node.kernel_learned()
                return self._entry(node)
            if self.setattrs.kernels_times_written_back(node, attr):
                return self._entry(node)
        if fields.update_atime or fields.update_mtime:  # (set on the server: no kept time undoes them)
            self.nfs.forget_times(node.fh)
        if not await self.setattrs.setattr(node, attr, fields, fh, self.cred(ctx)):
            await self._revalidate(node, ctx)
        if known:  # (the kernel set them itself, or they did not move)
            node.kernel_learned()
        return self._entry(node)

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
        return await self.namespace.create(parent, _name(name), ftype, self.cred(ctx), **kw)

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
        await self.namespace.unlink(parent, _name(name), self.cred(ctx))

    @fuse_errors
    async def rmdir(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        self._check_rw()
        parent = self._inode(parent_inode)
        await self.namespace.rmdir(parent, _name(name), self.cred(ctx))

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
        await self.namespace.rename(src, old, dst, new, self.cred(ctx))

    @fuse_errors
    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: RequestContext
    ) -> EntryAttributes:
        self._check_rw()
        node = self._inode(inode)
        parent = self._inode(new_parent_inode)
        return await self.namespace.link(node, parent, _name(new_name), self.cred(ctx))

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
        direct = self.writeback_cache and bool(flags & os.O_APPEND) and not self.opens.appends_cached(node)
        if self.opens.reads_to_write(access, flags, node):
            try:
                return await self.opens.open(node, flags, c.OPEN4_SHARE_ACCESS_BOTH, cred)
            except (FUSEError, NFS4Error) as e:
                if e.errno != errno.EACCES:
                    raise
            direct = True  # (the caller may write and not read: the kernel cannot fill partial pages)
        return await self.opens.open(node, flags, access, cred, direct)

    async def gone(self, operation: str, arg: int) -> None:
        """NFS4ERR_STALE for ``operation`` on ``arg`` (:class:`.stale_handles.StaleHandles`)."""
        await self.stale_handles.gone(operation, arg)

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
        for reading too where the server allows it (see :meth:`.opens.Opens.reads_to_write`)."""
        access = share_access(flags)
        direct = self.writeback_cache and bool(flags & os.O_APPEND)  # (no delegation yet: see Opens.appends_cached)
        if self.opens.reads_to_write(access, flags, None):
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
        return await self.namespace.open_create(parent, _name(name), self.cred(ctx), mode, flags, access, direct)

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
