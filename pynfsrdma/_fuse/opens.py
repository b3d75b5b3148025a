"""The mount's open files: one NFS OPEN per (file, open owner), shared by the FUSE handles on it.

- An open goes by the name the kernel reached the file by (CLAIM_NULL), so that a name another
  client renamed or removed is not opened: ESTALE, and the kernel looks the name up again.
- Close-to-open: every open revalidates the change attribute and keeps the kernel's page cache only
  if it did not move.
- An open for reading of a small file whose pages the kernel will not keep reads the file's first
  bytes in the OPEN's COMPOUND, for the kernel's READs that follow (:class:`.readahead.OpenedBytes`).
  The Linux client reads after the OPEN's reply, in COMPOUNDs of their own.
- The open state is made again when the server lost it (a graceless restart, a revoked lease),
  single-flight per open state.
- The last release of an open flushes its writer and CLOSEs it (in the background, several CLOSEs
  to one COMPOUND, unless a hidden ``.nfsXXXX`` name waits to be removed).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import trio

from .._client.attributes import FileAttrs
from .._client.nfs4 import NFSv4, OpenFile
from .._client.open_file import FileWriter
from .._errors import NFS4Error
from .._lock import Held
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential
from .cache import NameCache
from .inodes import OWN, Inode, InodeTable
from .lowlevel import FileInfo, FUSEError
from .options import MountOptions
from .payload_memory import TRIM_THRESHOLD, return_payload_memory
from .readahead import READ_AHEAD_WINDOW, Extent, HeldBytes, OpenedBytes, ReadAhead

log = logging.getLogger(__name__)

# invalidate(inode, attr_only): the kernel drops its cached data (or attributes) of the inode
Invalidate = Callable[[int, bool], Awaitable[None]]
# drop_entry(parent inode, name): the kernel drops its entry for the name
DropEntry = Callable[[int, str], Awaitable[None]]
# how long after an open answered ESTALE to make the kernel's inode again (Opens.regenerate) the
# kernel's lookups of the name and its open are answered from that open's OPEN (seconds: the kernel
# sends them at once)
REGENERATED_WAIT = 1.0
# an open for reading of a file this small (as the mount last saw its size) reads this much of it
# in the OPEN's COMPOUND (at most what the server's reply cache keeps with an OPEN): a source tree's
# files, a configuration file, a script, whole, where the kernel's first READ asks for all of them
FIRST_READ = 64 * 1024
# and the bytes so read and not yet taken by the kernel's READs, of every open file, at most (they
# are taken a moment after the open: this bounds opens that never read)
FIRST_READ_HELD = 4 << 20


def share_access(flags: int) -> int:
    """The OPEN4_SHARE_ACCESS_* an open(2) with ``flags`` asks for."""
    acc = flags & os.O_ACCMODE
    if acc == os.O_WRONLY:
        return c.OPEN4_SHARE_ACCESS_WRITE
    if acc == os.O_RDWR:
        return c.OPEN4_SHARE_ACCESS_BOTH
    return c.OPEN4_SHARE_ACCESS_READ


def access_mask(access: int) -> int:
    """The ACCESS bits an open with OPEN4_SHARE_ACCESS_* ``access`` needs."""
    want = 0
    if access & c.OPEN4_SHARE_ACCESS_READ:
        want |= c.ACCESS4_READ
    if access & c.OPEN4_SHARE_ACCESS_WRITE:
        want |= c.ACCESS4_MODIFY
    return want


def shown(a: FileAttrs) -> tuple[int, ...]:
    """The attributes ``stat`` shows (the kernel's cached copy must go when one of them moves)."""
    return (a.mode, a.nlink, a.uid, a.gid, a.size, a.mtime_ns, a.ctime_ns)


@dataclass(eq=False)
class SharedOpen:
    """The NFS open state of one (file, open owner), shared by the FUSE handles on it."""

    of: OpenFile
    cred: Credential
    refs: int = 0
    writer: FileWriter | None = None
    # serialises opening again after the server lost the state (not the inode's open lock: a CLOSE
    # holding that waits for the WRITEs that may need to open again)
    reopen_lock: trio.Lock = field(default_factory=trio.Lock)


@dataclass(eq=False)
class FileHandle:
    inode: Inode
    shared: SharedOpen
    access: int
    cred: Credential
    written: bool = False
    append: bool = False  # opened O_APPEND, around the page cache: every write goes to the end of the file
    direct: bool = False  # the kernel's page cache is not used for it (FUSE's direct_io)
    readahead: ReadAhead | None = None
    fetching: set[Extent] = field(default_factory=set)  # READs ahead in flight
    opened: OpenedBytes | None = None  # the file's first bytes, read with the OPEN


class Opens:
    """The open files of a mount (see the module's text); ``files`` by FUSE file handle."""

    def __init__(
        self,
        nfs: NFSv4,
        opts: MountOptions,
        nursery: trio.Nursery,
        inodes: InodeTable,
        names: NameCache,
        counts: Counter[str],
        ids: Iterator[int],
        invalidate: Invalidate,
        drop_entry: DropEntry,
        delegated: Callable[[Inode], bool],
    ) -> None:
        self.nfs = nfs
        self.opts = opts
        self.nursery = nursery
        self.inodes = inodes
        self.names = names
        self.counts = counts
        self.ids = ids  # FUSE handle numbers, shared with the directory handles
        self.invalidate = invalidate
        self.drop_entry = drop_entry
        self.delegated = delegated
        self.files: dict[int, FileHandle] = {}
        self.reopens = 0  # opens made again after the server lost them
        self.readahead_window = READ_AHEAD_WINDOW  # bytes read ahead of a sequential reader at most
        # the kernel gathers writes in its page cache (FUSE's writeback cache): it then keeps a file's
        # size and mtime itself, whatever attributes it is given (see kernel_view_stale)
        self.writeback_cache = False
        self.first_held = HeldBytes(FIRST_READ_HELD)  # the bytes OPENs read that the kernel has yet to take

    def file(self, fh: int) -> FileHandle:
        h = self.files.get(fh)
        if h is None:
            raise FUSEError(errno.EBADF)
        return h

    # -- the gathered writes of a file ----------------------------------------------------------------
    async def sync(self, node: Inode) -> None:
        """Send every gathered write of the file (before its size or data is looked at)."""
        for s in list(node.shared.values()):
            if s.writer is not None and s.writer.unsent:
                await s.writer.drain()

    async def commit(self, node: Inode) -> None:
        """Every write of the file onto the server's stable storage."""
        for s in list(node.shared.values()):
            if s.writer is not None and s.writer.dirty:
                await s.writer.flush()

    # -- open -----------------------------------------------------------------------------------------
    @staticmethod
    def _lock(node: Inode) -> trio.Lock:
        if node.open_lock is None:
            node.open_lock = trio.Lock()
        lock: trio.Lock = node.open_lock
        return lock

    async def open(self, node: Inode, flags: int, access: int, cred: Credential, direct: bool = False) -> FileInfo:
        """Every open is the server's to allow, for the caller: an OPEN (which also revalidates the
        file for close-to-open), or under a delegation an ACCESS check. The OPEN goes by the name the
        kernel reached the file by, so that a name another client renamed or removed is not opened
        (ESTALE: the kernel looks the name up again and opens what it leads to now). ``access``:
        what the open needs (with O_TRUNC, the right to write); ``direct``: the kernel's page cache
        is not used for this open (FUSE's direct_io).

        With the writeback cache, a file another client changed since the kernel last learned its
        size and mtime (which it then keeps itself) is answered ESTALE when no file of it is open
        here: the kernel looks the name up again, finds a new generation, and makes a new inode
        with the server's attributes (see :meth:`kernel_view_stale`)."""
        owner = self.nfs.open_owner(cred)
        first: tuple[Any, bool] | None = None  # (the file's first bytes, read with the OPEN; eof)
        if access & c.OPEN4_SHARE_ACCESS_WRITE:
            node.drop_readahead()  # (no open file reads on from bytes read before a write)
        # an OPEN racing with the CLOSE of the same owner's open state would get a stateid the CLOSE ends
        async with Held(self._lock(node)):
            shared = node.shared.get(owner)
            attrs: FileAttrs | None = None
            asked = self.inodes.asking(node)
            deleg = self.nfs.delegation_for(node.fh, access)
            if deleg is not None and self.delegated(node) and (shared is None or shared.of.local):
                await self._may_open(node, access, cred)
                shared = self.adopt(node, self.nfs.open_delegated(deleg, cred, access), cred)  # RFC 8881 10.4
            elif (shared is not None and self.regenerated(node) and not shared.of.closed and not shared.of.local
                  and shared.of.access & access == access):
                node.regenerated = 0.0  # (the OPEN that made the kernel's inode go checked this open)
            elif shared is not None and not shared.of.closed and not shared.of.local:
                # this owner has the file open: a server need not check an OPEN of it again (NFS-Ganesha
                # grants it whatever the mode is now), so ACCESS asks, by name, with the attributes
                attrs = await self._access_by_name(node, access, cred)
                if shared.of.access & access != access:
                    of = await self._open_state(node, cred, access)
                    attrs = of.attrs
                    shared = self.adopt(node, of, cred)
            else:
                cold = not node.opened  # (the kernel holds no pages of it)
                of = await self._open_state(node, cred, access, self._first_read(node, flags, access, direct))
                attrs = of.attrs
                first, of.first_read = of.first_read, None
                shared = self.adopt(node, of, cred)
            keep = await self.close_to_open(node, attrs, asked)
            if self.kernel_view_stale(node):
                self.regenerate(node, shared)
                raise FUSEError(errno.ESTALE)
            fi = self.handle(node, shared, share_access(flags), cred, keep, flags, direct)
            if first is not None and (cold or not keep):  # (kept pages: the kernel reads none of these)
                self._hold(self.files[fi.fh], *first)
        if flags & os.O_TRUNC and node.attrs.size:
            asked = self.inodes.asking(node)
            a = await self.nfs.names.setattr(node.fh, cred, stateid=shared.of.stateid, size=0)
            self.inodes.refresh(node, a, trio.current_time(), asked=asked)
            node.data_change = a.change
            node.kernel_learned()
        return fi

    def _first_read(self, node: Inode, flags: int, access: int, direct: bool) -> int:
        """How much of ``node`` an OPEN for ``access`` (open(2)'s ``flags``) reads in its COMPOUND:
        :data:`FIRST_READ`, within what the session allows, for an open for reading only of a
        regular file that small of which the kernel holds no pages or will not keep them (the first
        open, or the change attribute moved as far as we know now: see :meth:`close_to_open`), while
        the mount holds room for it; else 0."""
        if (access != c.OPEN4_SHARE_ACCESS_READ or direct or flags & (os.O_DIRECT | os.O_TRUNC)
                or not node.is_reg or (node.opened and node.data_change == node.attrs.change)):
            return 0
        most = min(FIRST_READ, self.nfs.first_read_most())
        if not 0 < node.attrs.size <= most or not self.first_held.room(most):
            return 0
        return most

    def _hold(self, h: FileHandle, data: Any, eof: bool) -> None:
        """``h`` answers the kernel's READs of the file's first bytes from ``data`` (read with its OPEN)."""
        h.opened = OpenedBytes(data, eof, self.first_held)
        h.inode.readaheads.add(h.opened)

    def adopt(self, node: Inode, of: OpenFile, cred: Credential) -> SharedOpen:
        """Make ``of`` (just returned by OPEN) the shared open state of (node, its owner)."""
        shared = node.shared.get(of.owner)
        if shared is None:
            shared = SharedOpen(of, cred)
            node.shared[of.owner] = shared
        elif shared.of is not of:
            self.nfs.upgraded(shared.of, of)
        if shared.of.access & c.OPEN4_SHARE_ACCESS_WRITE and shared.writer is None:
            stable = c.FILE_SYNC4 if self.opts.noac else c.UNSTABLE4
            shared.writer = FileWriter(
                self.nfs,
                shared.of,
                shared.cred,
                self.nursery,
                self.nfs.maxwrite,
                stable=stable,
                reopen=functools.partial(self.reopen, node, shared),
                answered=functools.partial(self.inodes.wrote, node),
            )
        return shared

    async def reopen(self, node: Inode, shared: SharedOpen, failed: Any) -> None:
        """The server lost the open behind ``failed`` (it restarted graceless, or our lease expired and
        the state was revoked): OPEN the file again and carry on with the new stateid. Single-flight:
        whoever comes second finds the stateid changed already."""
        async with shared.reopen_lock:
            of = shared.of
            if of.stateid != failed and not of.closed:
                return
            log.warning("open state of inode %d lost on the server: opening it again", node.ino)
            await self.nfs.reopen(of, shared.cred)
            self.reopens += 1

    def kernel_view_stale(self, node: Inode) -> bool:
        """Whether the kernel's size and mtime of regular file ``node`` must be made again (with the
        writeback cache the kernel keeps its own and takes none from attributes): the server's
        size or mtime differ from those the kernel's inode learned, and no file of it is open
        here (an open file's inode cannot be replaced; its size is corrected at the next open
        after the last close). Moves the inode's generation on, which makes the kernel replace
        its inode at the next lookup of the name."""
        a = node.attrs
        if (not self.writeback_cache or not node.is_reg or node.opens or node.releasing
                or node.kernel_view == (a.size, a.mtime_ns)):
            return False
        node.generation += 1
        node.kernel_learned()
        self.counts["generations"] += 1
        return True

    def reads_to_write(self, access: int, flags: int, node: Inode | None) -> bool:
        """Whether an open for writing only is made for reading too: with the writeback cache the
        kernel reads the rest of a page a write covers in part (as the Linux client opens for
        reading as well). Where the server refuses the caller reading, the open is made for
        writing only and its writes bypass the page cache (FUSE's direct_io), as do O_APPEND
        opens, whose writes go to the end of the file as the server has it, unless
        :meth:`appends_cached`."""
        if not self.writeback_cache or access != c.OPEN4_SHARE_ACCESS_WRITE:
            return False
        return not flags & os.O_APPEND or (node is not None and self.appends_cached(node))

    def appends_cached(self, node: Inode) -> bool:
        """Whether O_APPEND writes to ``node`` go through the kernel's writeback cache: while we hold
        a write delegation on it, no other client changes the file, so the size the kernel
        appends at (checked at the open: see :meth:`.opens.Opens.kernel_view_stale`) is the file's,
        and the kernel stamps the mtime of each write as it does for the others (a write around its
        page cache leaves the mtime it shows behind until the file is opened again)."""
        return self.nfs.delegation_for(node.fh, c.OPEN4_SHARE_ACCESS_WRITE) is not None

    def regenerated(self, node: Inode) -> bool:
        """Whether the kernel's lookups of ``node``'s names and its next open of it come within
        :data:`REGENERATED_WAIT` of the OPEN that made its kernel inode go (see :meth:`regenerate`)."""
        return trio.current_time() < node.regenerated

    def regenerate(self, node: Inode, shared: SharedOpen) -> None:
        """An open answered ESTALE because the kernel's inode of ``node`` must be made again (see
        :meth:`kernel_view_stale`): the kernel looks the name up again at once and opens what it
        leads to. The OPEN just made checked that name, the caller's rights and the file's change
        attribute, and its open state stays: those lookups and that open are answered from it for
        :data:`REGENERATED_WAIT`, and after that the state goes if nothing took it."""
        node.regenerated = trio.current_time() + REGENERATED_WAIT
        self.nursery.start_soon(self._forsake_later, node, shared)

    async def _forsake_later(self, node: Inode, shared: SharedOpen) -> None:
        await trio.sleep(REGENERATED_WAIT)
        if not self.regenerated(node):
            node.regenerated = 0.0
            async with Held(self._lock(node)):
                self.forsake(node, shared)

    def forsake(self, node: Inode, shared: SharedOpen) -> None:
        """An open answered with an error after its OPEN: the open state goes if nothing else uses it."""
        if shared.refs == 0 and node.shared.get(shared.of.owner) is shared and not (shared.writer and shared.writer.dirty):
            node.shared.pop(shared.of.owner, None)
            self.nfs.close_later(shared.of, shared.cred, self.nursery)

    def handle(
        self,
        node: Inode,
        shared: SharedOpen,
        access: int,
        cred: Credential,
        keep: bool,
        flags: int = 0,
        direct: bool = False,
    ) -> FileInfo:
        """A new FUSE handle on ``shared`` (``keep``: the kernel keeps its cached pages; ``direct``:
        the kernel's page cache is not used for it)."""
        shared.refs += 1
        node.opens += 1
        node.opened = True
        fid = next(self.ids)
        # (through the writeback cache the kernel places appends itself, and WRITEs of its dirty
        # pages may come by any handle of the file)
        append = bool(flags & os.O_APPEND) and (direct or not self.writeback_cache)
        h = FileHandle(node, shared, access, cred, append=append, direct=direct)
        if access & c.OPEN4_SHARE_ACCESS_READ and not flags & os.O_DIRECT and self.readahead_window:
            h.readahead = ReadAhead(self.nfs.maxread, max_window=self.readahead_window)
            node.readaheads.add(h.readahead)
        self.files[fid] = h
        return FileInfo(fh=fid, keep_cache=keep, direct_io=direct)

    async def close_to_open(self, node: Inode, attrs: FileAttrs | None, asked: int | None) -> bool:
        """Revalidate on open: keep the kernel's page cache only if the data did not change. The
        kernel's cached attributes go when the server's differ from what we had (another client's
        chmod or truncate): it asks again at the next stat, fstat of the new descriptor included."""
        if attrs is not None:
            before = node.attrs
            self.inodes.refresh(node, attrs, trio.current_time(), asked=asked)
            if node.attrs is not before and shown(node.attrs) != shown(before):
                await self.invalidate(node.ino, True)
        keep = node.data_change == node.attrs.change
        node.data_change = node.attrs.change
        if not keep:
            node.drop_readahead()
        return keep

    async def _open_state(self, node: Inode, cred: Credential, access: int, read: int = 0) -> OpenFile:
        """OPEN ``node`` for ``cred``: by the name the kernel reached it by (CLAIM_NULL: the server
        checks that the name still leads to it, and the caller's right to search the directory),
        else by its file handle. ESTALE when the name is gone or leads to another file now.
        ``read``: the file's first bytes to read with the OPEN, this many at most."""
        named = await self.sole_name(node, cred)
        want = access_mask(access)
        if named is None:
            return self.granted(node, await self.nfs.open_fh(node.fh, cred, access, check=want, read=read), want)
        parent, name = named
        await self.nfs.prepare_open(node.fh, access)
        try:
            of = await self.nfs.open(parent.fh, name, cred, access=access, check=want, file=node.fh, read=read)
        except NFS4Error as e:
            if e.errno not in (errno.ENOENT, errno.ESTALE):
                raise
            of = None
        if of is not None and of.fh == node.fh:
            return self.granted(node, of, want)
        if of is not None:  # another file: its open state stays if it is one we hold, else it goes
            of.first_read = None
            assert of.attrs is not None
            other = self.inodes.get(self.inodes.ino_for(of.attrs))
            if other is not None and other.fh == of.fh and of.owner in other.shared:
                self.adopt(other, of, cred)
            else:
                self.nfs.close_later(of, cred, self.nursery)
        raise self.name_moved(node, parent, name)

    def granted(self, node: Inode, of: OpenFile, want: int) -> OpenFile:
        """``of``, just OPENed, if the ACCESS that went with it allows ``want``; else the open goes
        (unless it carried on an open of ours) and EACCES. A server need not check an OPEN by an
        owner that holds open state of the file (NFS-Ganesha grants it whatever the mode is now),
        and one we are about to CLOSE may still be there."""
        if of.granted is None or of.granted & want == want:
            return of
        if of.owner not in node.shared:
            self.nfs.close_later(of, of.cred or self.nfs.client.machine_cred, self.nursery)
        raise FUSEError(errno.EACCES)

    # -- the name an open goes by ---------------------------------------------------------------------
    async def sole_name(self, node: Inode, cred: Credential) -> tuple[Inode, str] | None:
        """The one name the kernel may reach ``node`` by, with its directory, for a request to go by
        (None when we know none: it goes by file handle). With several (a file another client
        renamed may be reached by its old name and its new one), each is looked up; the ones that no
        longer lead to it are forgotten with the kernel's entries for them, and ESTALE answered (the
        kernel looks its path up again, once); when all still do, None. With the writeback cache,
        the attributes a name that still leads to it brought are checked against what the kernel's
        inode holds before that ESTALE (see :meth:`kernel_view_stale`), so that the kernel's one
        look at the path again finds the new generation too, and no second ESTALE follows."""
        if node.silly:
            return None
        keys = [(parent, name) for pino, name in node.names if (parent := self.inodes.get(pino)) is not None]
        if len(keys) <= 1:
            return keys[0] if keys else None
        moved = False
        current: FileAttrs | None = None
        asked = self.inodes.asking(node)
        for parent, name in keys:
            try:
                fh, attrs = await self.nfs.names.lookup(parent.fh, name, cred)
            except NFS4Error as e:
                if e.errno not in (errno.ENOENT, errno.ESTALE):
                    raise
                fh = b""
            if fh != node.fh:
                self.name_moved(node, parent, name)
                await self.drop_entry(parent.ino, name)
                moved = True
            else:
                current = attrs
        if moved:
            if current is not None:  # (the kernel's one retry of the path then makes its inode anew too)
                self.inodes.refresh(node, current, trio.current_time(), asked=asked)
                self.kernel_view_stale(node)
            raise FUSEError(errno.ESTALE)
        return None

    def name_moved(self, node: Inode, parent: Inode, name: str) -> FUSEError:
        """``name`` in ``parent``, which the kernel reached ``node`` by, is gone or leads elsewhere
        (another client renamed or removed it): forget it, and answer ESTALE, on which the kernel
        looks the name up again (and opens what it leads to now)."""
        self.counts["stale_names"] += 1
        log.info("%s in inode %d no longer leads to inode %d", name, parent.ino, node.ino)
        self.inodes.unnamed(parent.ino, name)
        self.names.drop(parent.ino, name)
        parent.stale()
        return FUSEError(errno.ESTALE)

    async def _access_by_name(self, node: Inode, access: int, cred: Credential) -> FileAttrs:
        """Whether ``cred`` may open ``node`` with ``access`` (EACCES if not), asked by the name the
        kernel reached it by (ESTALE if that leads elsewhere now); its attributes."""
        want = access_mask(access)
        named = await self.sole_name(node, cred)
        if named is None:
            granted, attrs = await self.nfs.names.access_attrs(node.fh, want, cred)
        else:
            parent, name = named
            try:
                fh, granted, attrs = await self.nfs.names.lookup_access(parent.fh, name, want, cred)
            except NFS4Error as e:
                if e.errno not in (errno.ENOENT, errno.ESTALE):
                    raise
                raise self.name_moved(node, parent, name) from None
            if fh != node.fh:
                raise self.name_moved(node, parent, name)
        if granted & want != want:
            raise FUSEError(errno.EACCES)
        return attrs

    async def _may_open(self, node: Inode, access: int, cred: Credential) -> None:
        """Under a delegation no OPEN is sent: the server still decides whether ``cred`` may open
        the file with ``access`` (ACCESS, its answer kept while the delegation lasts)."""
        want = access_mask(access)
        key = (cred.uid, cred.gid, cred.gids)
        d = self.nfs.delegations.get(node.fh)
        held = (*key, node.attrs.mode, node.attrs.uid, node.attrs.gid)
        granted = node.granted.get(key) if node.granted is not None else None
        if granted is None and d is not None:
            granted = d.granted.get(held)  # (our own writes moved the change attribute: still valid)
        if granted is None or granted & want != want:
            granted = await self.nfs.names.access(node.fh, want, cred)
            if node.granted is None:
                node.granted = {}
            node.granted[key] = granted
            if d is not None:
                d.granted[held] = granted
        if granted & want != want:
            raise FUSEError(errno.EACCES)

    # -- release --------------------------------------------------------------------------------------
    async def release(self, fh: int, h: FileHandle) -> None:
        """FUSE handle ``fh`` is closed: the last one on its open state flushes and CLOSEs it, a
        handle that wrote leaves the file's attributes as the server has them after the writes."""
        del self.files[fh]
        node, shared = h.inode, h.shared
        log.debug("release fh=%d ino=%d refs=%d", fh, node.ino, shared.refs)
        node.opens -= 1
        shared.refs -= 1
        node.releasing += 1
        try:
            await self._release(h, fh, node, shared)
        finally:
            node.releasing -= 1

    async def _release(self, h: FileHandle, fh: int, node: Inode, shared: SharedOpen) -> None:
        if h.readahead is not None:
            ra = h.readahead
            log.debug("read-ahead of fh=%d: %d hits, %d READs, %d drops", fh, ra.hits, ra.sent, ra.drops)
            ra.drop()
            node.readaheads.discard(h.readahead)
        if h.opened is not None:
            h.opened.drop()
            node.readaheads.discard(h.opened)
        for e in list(h.fetching):  # (they use the open's stateid: done before it is CLOSEd)
            await e.done.wait()
        if shared.refs == 0:
            async with Held(self._lock(node)):
                if shared.refs == 0 and node.shared.get(shared.of.owner) is shared:
                    await self._close_shared(node, shared)
        elif h.written and shared.writer is not None:
            await shared.writer.flush()
        if h.written:
            # what the kernel's page cache holds now is what the server holds
            post = self._post_write_attrs(node, shared)
            if post is None:
                asked = self.inodes.asking(node)
                attrs = await self.nfs.names.getattr(node.fh, h.cred)
                self.inodes.refresh(node, attrs, trio.current_time(), asked=asked)
            elif node.fetched < post[1]:
                self.inodes.refresh(node, *post, asked=OWN)
            node.data_change = node.attrs.change
            if h.direct and self.writeback_cache:  # (the kernel stamps no mtime for a write around its cache)
                node.kernel_view = None
            else:
                node.kernel_learned()

    @staticmethod
    def _post_write_attrs(node: Inode, shared: SharedOpen) -> tuple[FileAttrs, float] | None:
        """The attributes (and when fetched) that came back with or after our last WRITE of the file,
        if nothing was written since, by this open or any other of the file."""
        w = shared.writer
        if w is None or w.post_attrs is None or w.dirty:
            return None
        if any(s is not shared and s.writer is not None for s in node.shared.values()):
            return None
        return w.post_attrs

    async def _close_shared(self, node: Inode, shared: SharedOpen) -> None:
        node.shared.pop(shared.of.owner, None)
        try:
            if shared.writer is not None:
                await shared.writer.flush()
        finally:
            if node.silly:  # its name is removed next: the server must have no open of it then
                await self.nfs.close(shared.of, shared.cred)
            else:  # nobody waits for the CLOSE (close(2) returned at flush): it goes with others
                self.nfs.close_later(shared.of, shared.cred, self.nursery)
            if shared.writer is not None and shared.writer.bytes_accepted >= TRIM_THRESHOLD:
                return_payload_memory()  # the heap kept for a large file's writes goes back
