"""Scripted access: an async (trio) client that works with paths, like ``os`` and ``open``.

    async with Client.connect("nfs://127.0.0.1:2049/export") as nfs:
        await nfs.write_file("/hello.txt", b"hi")
        print(await nfs.listdir("/"))

Paths are relative to the export given in the URL ("/" is the export's root); one that ends in ``/``
names a directory or nothing (:func:`names_a_directory`), and the calls named after ``os`` and
``shutil`` answer as those do (``remove`` of a directory is IsADirectoryError, ``makedirs`` of an
existing one FileExistsError unless ``exist_ok``, ...). Every call is one
COMPOUND where the protocol allows; directory file handles are cached briefly so that a path's
directories are not looked up again for every call on files inside them.

Whatever the server sends, a call fails with an OSError subclass whose ``errno`` is set (NFS4Error for
an NFS status, ProtocolError for a reply that breaks the protocol, ServerUnreachable when a soft
request goes unanswered, ...), never with trio's ExceptionGroup (several READs or WRITEs failing
together raise the first error) nor with a decoding error. Misuse (a closed File, an unknown open
mode) raises ValueError, as Python's own files do.
"""

from __future__ import annotations

import errno
import fcntl
import fnmatch
import io
import os
import posixpath
import shutil
import stat
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import cachetools
import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential, auth_sys
from .._rpc.gss_auth import GssCredential
from .._session.client_id import ClientID, SessionOptions, default_owner_id
from .._session.errors import ServerUnreachable
from .._session.session import RetryPolicy
from .._trunking import Trunking, TrunkingOptions
from .attributes import FileAttrs, FsStat
from .batched import MERGE_GAP, coalesced, read_step, wire_pieces
from .connect_options import ConnectOptions, takes_connect_options
from .dir_entry import DirEntry
from .locks import TO_EOF, LockConflict, LockDenied, LockLost, nfs_lock_type
from .nfs4 import ListedEntry, NFSv4, OpenFile
from .open_file import FileWriter, ReadStream, Window, read_range
from .security import FlavorChoice, credential, machine_credential, negotiate
from .stack import start_stack
from .url import NfsURL, URLError, minor_version, parse_url

Progress = Callable[[int], None]
T = TypeVar("T")
SMALL_IO = 4096  # the size the window of many small calls at once is reckoned for (io_window)
PUT_READ_AHEAD = 2  # blocks of the local file read and not yet handed to WRITEs, at most (put)
PUT_BLOCK_WRITES = 4  # wsize WRITEs per block put reads (each read is a hop to a thread and back)
MAX_SYMLINKS = 40
XATTR_USER = "user."  # the namespace of extended attributes NFSv4.2 carries (RFC 8276)
RELEASE_TIMEOUT = 5.0  # at the end, locks and opens still held are given back within this long at most


def _open_for_reading(path: str) -> io.FileIO:
    return open(path, "rb", buffering=0)  # (closed by the caller)


def names_a_directory(path: str) -> bool:
    """Whether ``path`` is written as a directory's: it ends in ``/`` or ``/.``. As in POSIX path
    resolution, such a path names a directory (a symbolic link to one is followed) or fails with
    ENOTDIR, whatever the call: ``stat("file/")``, ``remove("file/")`` and ``open("file/")`` never
    reach the file."""
    return path.endswith(("/", "/."))


def glob_magic(name: str) -> bool:
    return any(ch in name for ch in "*?[")


def single_error(eg: BaseExceptionGroup) -> BaseException:
    """The error to raise for trio's exception group ``eg``, so that callers see ``NFS4Error``/
    ``OSError`` rather than a group: the one error inside, or of several (READs failing together)
    the first that is not an OSError (a KeyboardInterrupt, a bug: what they are must not be lost),
    else the first. A group of nothing but cancellations stays a group (trio wants it back)."""
    leaves = [e for e in _leaves(eg) if not isinstance(e, trio.Cancelled)]
    if not leaves:
        return eg
    return next((e for e in leaves if not isinstance(e, OSError)), leaves[0])


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in _leaves(sub)]
    return [e]


class Client:
    """A connection to one NFSv4.1 export, with path-based calls."""

    def __init__(self, url: NfsURL, clientid: ClientID, ops: NFSv4, cred: Credential) -> None:
        self.url = url
        self.clientid = clientid
        self.nfs = ops
        self.cred = cred
        self.root_fh = b""
        # READs and WRITEs of one transfer in flight at most; None: as many as fill the live paths
        # (NFSv4.io_window: it grows with the paths and their bandwidth-delay products)
        self.window: int | None = None
        # directory path -> file handle (short-lived; a renamed directory is looked up again)
        self._dirs: cachetools.TTLCache[str, bytes] = cachetools.TTLCache(maxsize=4096, ttl=3.0)
        self._looking_up: dict[str, trio.Event] = {}  # directory path -> set when its lookup is answered
        self.trunking: Trunking | None = None  # the other paths (addrs=, nconnect=, discovery)
        self._nursery: trio.Nursery | None = None  # where open files write in the background

    def io_window(self, io_size: int) -> int:
        """READs or WRITEs of ``io_size`` bytes one transfer keeps in flight now (:attr:`window`
        when set)."""
        return self.window if self.window is not None else self.nfs.io_window(io_size)

    @property
    def nursery(self) -> trio.Nursery:
        """Where the client's background work runs (open files' WRITEs and COMMITs, READs sent
        ahead) while it is connected; ValueError when it is not."""
        if self._nursery is None:
            raise ValueError("the client is not connected")
        return self._nursery

    # -- connecting -----------------------------------------------------------------------------------
    @classmethod
    @takes_connect_options.method
    def connect(cls, options: ConnectOptions) -> AbstractAsyncContextManager[Client]:
        """Connect, create a session, look up the export; on exit close the session cleanly.

        The keywords are :class:`~.connect_options.ConnectOptions`' (the URL, or ``host``, ``port``,
        ``export``, ``proto``; the identity; the timeouts; the security flavours; RPC-with-TLS; pNFS),
        documented and checked there: an option that does not fit is a URLError, raised by this call,
        before anything is sent.
        """
        return cls.from_options(options)

    @classmethod
    @asynccontextmanager
    async def from_options(cls, o: ConnectOptions) -> AsyncIterator[Client]:
        """:meth:`connect` with options made already."""
        u = o.nfs_url
        timeout, sec_path, ccache = o.timeout, o.sec_path, o.ccache
        want_pnfs = o.want_pnfs
        uid, gid, groups = o.identity()
        cred = auth_sys(uid, gid, groups)
        choice = FlavorChoice(o.flavors, given=o.sec_given, xprtsec=o.xprtsec_mode)
        deadline = trio.current_time() + timeout  # for connecting, setting up and looking up the export
        try:
            async with trio.open_nursery() as nursery:
                cid = ClientID(
                    nursery,
                    options=SessionOptions(rsize=o.rsize, wsize=o.wsize, minorversion=minor_version(u.vers),
                                           pnfs=want_pnfs),
                    policy=RetryPolicy(timeo=o.timeo, retrans=o.retrans, hard=o.hard),
                    cred=machine_credential(u.host, o.keytab or u.options.get("keytab"), choice.flavors, cred,
                                            uuid.uuid4().hex),
                    # a client owner of its own: its open state lives and dies with this object, and
                    # two clients of one server (in one process or two) must not share a client ID
                    owner_id=default_owner_id(f"api:{os.getpid()}:{uuid.uuid4().hex}"),
                )
                connected = False
                try:
                    with trio.move_on_at(deadline) as setting_up:
                        stack = await start_stack(cid, nursery, u, TrunkingOptions.from_url_options(u.options),
                                                  timeout)
                        trunking, ops = stack.trunking, stack.nfs
                        ops.owner_per_open = True  # every File is an open of its own
                        if want_pnfs:
                            ops.read_write.use_pnfs(nursery)
                        probe = posixpath.join(u.path, (sec_path or "").lstrip("/"))
                        user = await negotiate(ops, u.path, probe, choice, cred,
                                               lambda f: credential(f, u.host, uid, gid, groups, ccache))
                        self = cls(u, cid, ops, user)
                        self.trunking = trunking
                        self._nursery = nursery
                        self.root_fh = ops.root_fh
                        connected = True
                    if setting_up.cancelled_caught:
                        what = f"{u.path} not reached" if cid.session is not None else "no NFSv4.1 answer"
                        raise ServerUnreachable(f"{u.address}: {what} within {timeout:g} s")
                    try:
                        yield self
                    finally:
                        # files left open give their locks and opens back now, not when the lease runs
                        # out (the server keeps them past DESTROY_CLIENTID, and other clients wait)
                        with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
                            await ops.release_all()
                            await cid.forget(self.cred)
                        if ops.read_write.pnfs is not None:
                            ops.read_write.pnfs.close()  # (the block devices it opened)
                        self._nursery = None  # (a file opened for writing now is refused, saying why)
                finally:
                    with trio.CancelScope(shield=True):
                        # (a connect that failed has no time left for a clean goodbye to a server
                        # that may not answer: what remains of its timeout, a moment at least)
                        await cid.shutdown(None if connected else max(0.2, deadline - trio.current_time()))
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as eg:
            raise single_error(eg) from None

    @property
    def sec(self) -> str:
        """The security flavour the requests go with (nfs(5)'s name: sys, krb5, krb5i, krb5p)."""
        return self.cred.flavor.name if isinstance(self.cred, GssCredential) else "sys"

    def stats(self) -> dict[str, Any]:
        """The statistics report ``pynfsrdma stats`` shows for a mount (see :mod:`pynfsrdma._stats`)."""
        from .. import _stats as stats

        report = stats.snapshot(self.clientid, self.trunking, {"server": f"{self.url.host}:{self.url.path}"})
        report["pnfs"] = self.pnfs_report()
        return report

    def pnfs_report(self) -> dict[str, Any]:
        """pNFS as ``stats`` shows it: off, or the layout, the devices that carried I/O, the layout
        operations and bytes, and why I/O went through the metadata server (reason: times)."""
        identity = self.clientid.identity
        flags = identity.flags if identity is not None else 0
        if self.nfs.read_write.pnfs is None:
            return {"enabled": False}
        return {**self.nfs.read_write.pnfs.report(), "server_is_mds": bool(flags & c.EXCHGID4_FLAG_USE_PNFS_MDS)}

    # -- names ------------------------------------------------------------------------------------------
    def _norm(self, path: str) -> str:
        return posixpath.normpath("/" + path.lstrip("/"))

    async def _dir_fh(self, dirpath: str, depth: int = 0) -> bytes:
        if dirpath == "/":
            return self.root_fh
        fh = self._dirs.get(dirpath)
        if fh is not None:
            return fh
        looking = self._looking_up.get(dirpath)
        if looking is not None:  # (another call is looking it up: its answer serves this one too)
            await looking.wait()
            fh = self._dirs.get(dirpath)
            if fh is not None:
                return fh
        self._looking_up[dirpath] = done = trio.Event()
        try:
            fh, attrs = await self._resolve(dirpath, follow=True, depth=depth)
            if not attrs.is_dir:
                raise NFS4Error(c.NFS4ERR_NOTDIR, c.OP_LOOKUP, dirpath)
            self._dirs[dirpath] = fh
        finally:
            done.set()
            if self._looking_up.get(dirpath) is done:
                del self._looking_up[dirpath]
        return fh

    async def _resolve(self, path: str, follow: bool = True, depth: int = 0) -> tuple[bytes, FileAttrs]:
        """File handle and attributes of ``path``; symlinks inside the path are followed, the last
        component only with ``follow`` or when ``path`` is written as a directory's (a trailing
        ``/``: :func:`names_a_directory`), which must then be one (ENOTDIR)."""
        if depth > MAX_SYMLINKS:
            raise NFS4Error(c.NFS4ERR_SYMLINK, c.OP_LOOKUP, path)  # ELOOP-like: too many links
        want_dir = names_a_directory(path)
        path = self._norm(path)
        if path == "/":
            return self.root_fh, await self.nfs.names.getattr(self.root_fh, self.cred, path)
        parent, name = posixpath.split(path)
        try:
            walked = await self._walk_to(path) if parent != "/" and self._dirs.get(parent) is None else None
            if walked is not None:
                fh, attrs = walked
            else:
                dfh = await self._dir_fh(parent, depth)
                fh, attrs = await self.nfs.names.lookup_path(dfh, [name], self.cred, path)
        except NFS4Error as e:
            if e.status == c.NFS4ERR_STALE:
                self._dirs.clear()
            raise
        if (follow or want_dir) and attrs.is_symlink:
            target = (await self.nfs.directories.readlink(fh, self.cred, path)).decode("utf-8", "surrogateescape")
            nxt = target if target.startswith("/") else posixpath.join(parent, target)
            return await self._resolve(nxt + "/" if want_dir else nxt, True, depth + 1)
        if want_dir and not attrs.is_dir:
            raise NFS4Error(c.NFS4ERR_NOTDIR, c.OP_LOOKUP, path + "/")
        return fh, attrs

    async def _walk_to(self, path: str) -> tuple[bytes, FileAttrs] | None:
        """``path`` looked up from the nearest directory whose file handle is known, all its names in
        one COMPOUND (the directories on the way are remembered): its file handle and attributes.
        None where that cannot be: a symbolic link on the way, more names than a COMPOUND holds."""
        parts = path.strip("/").split("/")
        base, start = self.root_fh, 0
        for i in range(len(parts) - 1, 0, -1):
            fh = self._dirs.get("/" + "/".join(parts[:i]))
            if fh is not None:
                base, start = fh, i
                break
        names = parts[start:]
        if 2 * len(names) + 1 > self.nfs.per_compound():
            return None
        prefixes = ["/" + "/".join(parts[: start + j + 1]) for j in range(len(names))]
        walked = await self.nfs.names.lookup_walk(base, names, self.cred, prefixes)
        if walked is None:
            return None
        fhs, attrs = walked
        for p, fh in zip(prefixes[:-1], fhs[:-1], strict=True):
            self._dirs[p] = fh
        return fhs[-1], attrs

    def _forget(self, path: str) -> None:
        path = self._norm(path)
        for k in [k for k in self._dirs if k == path or k.startswith(path + "/")]:
            self._dirs.pop(k, None)

    # -- metadata ---------------------------------------------------------------------------------------
    async def stat(self, path: str) -> FileAttrs:
        return (await self._resolve(path, follow=True))[1]

    async def lstat(self, path: str) -> FileAttrs:
        return (await self._resolve(path, follow=False))[1]

    async def _target_or_none(self, path: str) -> FileAttrs | None:
        """What a symbolic link in a listing points to, or None when it leads nowhere: a link whose
        target cannot be resolved (absent, a name too long, a loop, no search permission) is a
        dangling entry of the listing, as ``os.scandir`` reports it, not a failure of the listing."""
        try:
            return (await self._resolve(path, follow=True))[1]
        except NFS4Error as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EACCES):
                return None
            raise

    async def _stat_or_none(self, path: str, follow: bool = True) -> FileAttrs | None:
        try:
            return (await self._resolve(path, follow=follow))[1]
        except NFS4Error as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return None
            raise

    async def exists(self, path: str) -> bool:
        """Whether ``path`` names something (a symbolic link: its target), as os.path.exists."""
        return await self._stat_or_none(path) is not None

    async def lexists(self, path: str) -> bool:
        """Whether ``path`` names something, a dangling symbolic link too."""
        return await self._stat_or_none(path, follow=False) is not None

    async def isdir(self, path: str) -> bool:
        a = await self._stat_or_none(path)
        return a is not None and a.is_dir

    async def isfile(self, path: str) -> bool:
        a = await self._stat_or_none(path)
        return a is not None and stat.S_ISREG(a.st_mode)

    async def islink(self, path: str) -> bool:
        a = await self._stat_or_none(path, follow=False)
        return a is not None and a.is_symlink

    async def scandir(self, path: str = "/") -> list[DirEntry]:
        """The entries of a directory, with the attributes READDIR brought (no GETATTR per entry;
        only a symbolic link's target is looked up)."""
        npath = self._norm(path)
        fh = await self._dir_fh(npath)
        return await self._entries(path, npath, await self.nfs.directories.listdir_plus(fh, self.cred, path=npath))

    async def _entries(self, path: str, npath: str, listing: list[ListedEntry]) -> list[DirEntry]:
        """The entries of the directory ``path`` (``npath`` normalised) as READDIR listed them; the
        handles of the directories in it are remembered, a symbolic link's target looked up."""
        out = []
        for raw, _, efh, listed in listing:
            name = str(raw, "utf-8", "surrogateescape")
            attrs = listed or FileAttrs()
            child = posixpath.join(path, name)
            if attrs.is_dir and efh:  # (a walk into it needs no LOOKUP: READDIR brought its handle)
                self._dirs[posixpath.join(npath, name)] = bytes(efh)
            target = await self._target_or_none(child) if attrs.is_symlink else None
            out.append(DirEntry(name, child, attrs, target))
        return out

    async def listdir(self, path: str = "/") -> list[str]:
        npath = self._norm(path)
        fh = await self._dir_fh(npath)
        return [e.name for e in await self.nfs.directories.listdir(fh, self.cred, with_attrs=True, path=npath)]

    async def walk(self, top: str = "/", topdown: bool = True, onerror: Callable[[OSError], Any] | None = None,
                   followlinks: bool = False) -> AsyncIterator[tuple[str, list[str], list[str]]]:
        """(dirpath, dirnames, filenames) for ``top`` and every directory below it, as os.walk: with
        ``topdown`` a caller may prune ``dirnames`` in place; errors listing a directory go to
        ``onerror`` (or are ignored)."""
        try:
            entries = await self.scandir(top)
        except OSError as e:
            if onerror is not None:
                onerror(e)
            return
        dirs = [e.name for e in entries if e.is_dir()]
        files = [e.name for e in entries if not e.is_dir()]
        links = {e.name for e in entries if e.is_symlink()}
        if topdown:
            yield top, dirs, files
        for name in dirs:
            if name in links and not followlinks:
                continue
            async for item in self.walk(posixpath.join(top, name), topdown, onerror, followlinks):
                yield item
        if not topdown:
            yield top, dirs, files

    async def glob(self, pattern: str) -> list[str]:
        """The paths matching ``pattern`` (``*``, ``?``, ``[...]`` within a name, ``**`` for any depth
        of directories), sorted; names starting with ``.`` match only a pattern that starts with one."""
        parts = [p for p in self._norm(pattern).split("/") if p]
        found: list[str] = []

        async def match(base: str, rest: list[str]) -> None:
            if not rest:
                found.append(base)
                return
            head, tail = rest[0], rest[1:]
            if head == "**":
                await match(base, tail)
                for e in await self._entries_or_none(base):
                    if e.is_dir() and not e.name.startswith("."):
                        await match(e.path, rest)
                return
            if not glob_magic(head):
                child = posixpath.join(base, head)
                if await self.lexists(child):
                    await match(child, tail)
                return
            for e in await self._entries_or_none(base):
                visible = head.startswith(".") or not e.name.startswith(".")
                if visible and fnmatch.fnmatchcase(e.name, head) and (not tail or e.is_dir()):
                    await match(e.path, tail)

        await match("/", parts)
        return sorted(set(found))

    async def _entries_or_none(self, path: str) -> list[DirEntry]:
        try:
            return await self.scandir(path)
        except NFS4Error as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                return []
            raise

    async def created(self, path: str) -> int | None:
        """When ``path`` was created (time_create), in nanoseconds since the epoch; None when the
        server keeps no creation times (NFS-Ganesha's VFS back end keeps none)."""
        fh, _ = await self._resolve(path)
        return await self.nfs.names.time_create(fh, self.cred, self._norm(path))

    async def statfs(self, path: str = "/") -> FsStat:
        fh, _ = await self._resolve(path)
        return await self.nfs.names.statfs(fh, self.cred)

    async def setattr(self, path: str, *, follow: bool = True, **changes: Any) -> FileAttrs:
        fh, _ = await self._resolve(path, follow=follow)
        return await self.nfs.names.setattr(fh, self.cred, path=path, **changes)

    async def chmod(self, path: str, mode: int) -> FileAttrs:
        return await self.setattr(path, mode=mode)

    async def chown(self, path: str, uid: int | None = None, gid: int | None = None) -> FileAttrs:
        """Change the owner and group; None (or -1, as os.chown takes it) leaves one as it is."""
        return await self.setattr(path, uid=None if uid == -1 else uid, gid=None if gid == -1 else gid)

    async def truncate(self, path: str, size: int) -> FileAttrs:
        return await self.setattr(path, size=size)

    async def utime(self, path: str, atime_ns: int | str | None = None,
                    mtime_ns: int | str | None = None) -> FileAttrs:
        """Set the access and modification times (nanoseconds since the epoch, or "now": the server's
        clock); with neither, both to now, as os.utime(path) does."""
        if atime_ns is None and mtime_ns is None:
            atime_ns = mtime_ns = "now"
        return await self.setattr(path, atime_ns=atime_ns, mtime_ns=mtime_ns)

    # -- extended attributes (vers=4.2 and a server with them: RFC 8276) -------------------------------
    def _xattr_key(self, path: str, name: str) -> str:
        """The RFC 8276 name of ``name`` ("user.NAME", as os.getxattr takes it); NFS4ERR_NOTSUPP
        (ENOTSUP) for other namespaces, NFSv4.1 sessions, and servers without extended attributes."""
        if not self.nfs.xattr_support or not name.startswith(XATTR_USER) or name == XATTR_USER:
            raise NFS4Error(c.NFS4ERR_NOTSUPP, None, self._norm(path))
        return name[len(XATTR_USER) :]

    async def getxattr(self, path: str, name: str) -> bytes:
        key = self._xattr_key(path, name)
        fh, _ = await self._resolve(path)
        return await self.nfs.xattrs.getxattr(fh, key, self.cred, path=self._norm(path))

    async def setxattr(self, path: str, name: str, value: bytes, *, create: bool = False,
                       replace: bool = False) -> None:
        """Set ``name`` to ``value``; ``create``: fail if it exists (EEXIST), ``replace``: fail if it
        does not (ENODATA), as os.setxattr's XATTR_CREATE and XATTR_REPLACE."""
        key = self._xattr_key(path, name)
        option = c.SETXATTR4_CREATE if create else c.SETXATTR4_REPLACE if replace else c.SETXATTR4_EITHER
        fh, _ = await self._resolve(path)
        await self.nfs.xattrs.setxattr(fh, key, value, self.cred, option, path=self._norm(path))

    async def listxattr(self, path: str) -> list[str]:
        if not self.nfs.xattr_support:
            raise NFS4Error(c.NFS4ERR_NOTSUPP, None, self._norm(path))
        fh, _ = await self._resolve(path)
        return [XATTR_USER + n for n in await self.nfs.xattrs.listxattrs(fh, self.cred, path=self._norm(path))]

    async def removexattr(self, path: str, name: str) -> None:
        key = self._xattr_key(path, name)
        fh, _ = await self._resolve(path)
        await self.nfs.xattrs.removexattr(fh, key, self.cred, path=self._norm(path))

    # -- namespace --------------------------------------------------------------------------------------
    def _split(self, path: str) -> tuple[str, str]:
        path = self._norm(path)
        if path == "/":
            raise NFS4Error(c.NFS4ERR_INVAL, None, path)
        return posixpath.split(path)

    async def _lstat_name(self, path: str) -> FileAttrs:
        """The attributes of the name ``path`` ends in, not followed even when written as a
        directory's: then it must be a directory itself (ENOTDIR for a file, or a symbolic link to a
        directory, as rmdir(2) and unlink(2) answer)."""
        attrs = await self.lstat(self._norm(path))
        if names_a_directory(path) and not attrs.is_dir:
            raise NFS4Error(c.NFS4ERR_NOTDIR, None, self._norm(path) + "/")
        return attrs

    def _no_file_at(self, path: str, status: int) -> None:
        """``status`` for a call that makes a non-directory at ``path`` written as a directory's."""
        if names_a_directory(path):
            raise NFS4Error(status, None, self._norm(path) + "/")

    async def mkdir(self, path: str, mode: int = 0o755) -> FileAttrs:
        parent, name = self._split(path)
        dfh = await self._dir_fh(parent)
        _, attrs, _, _ = await self.nfs.directories.create(dfh, name, c.NF4DIR, self.cred, mode=mode, path=self._norm(path))
        return attrs

    async def makedirs(self, path: str, mode: int = 0o755, exist_ok: bool = False) -> None:
        """Make ``path`` and the directories on the way to it that are missing, as os.makedirs: a
        ``path`` that exists is FileExistsError unless it is a directory and ``exist_ok``; a file on
        the way is NotADirectoryError."""
        target = self._norm(path)
        if target == "/" and not exist_ok:
            raise NFS4Error(c.NFS4ERR_EXIST, c.OP_CREATE, target)
        cur = ""
        for part in [p for p in target.split("/") if p]:
            cur += "/" + part
            try:
                attrs = await self.stat(cur)
            except NFS4Error as e:
                if e.status != c.NFS4ERR_NOENT:
                    raise
                try:
                    await self.mkdir(cur, mode)
                except NFS4Error as e2:  # made meanwhile by somebody else: fine
                    if e2.status != c.NFS4ERR_EXIST:
                        raise
                continue
            if cur == target and not (exist_ok and attrs.is_dir):
                raise NFS4Error(c.NFS4ERR_EXIST, c.OP_CREATE, cur)
            if not attrs.is_dir:
                raise NFS4Error(c.NFS4ERR_NOTDIR, c.OP_CREATE, cur)

    async def remove(self, path: str) -> None:
        """Remove a file or a symbolic link (not what it points to), as os.remove: a directory is
        IsADirectoryError (:meth:`rmdir` and :meth:`rmtree` remove directories). One COMPOUND."""
        if names_a_directory(path):  # (a directory or ENOTDIR: never a file)
            await self._lstat_name(path)
            raise NFS4Error(c.NFS4ERR_ISDIR, c.OP_REMOVE, self._norm(path) + "/")
        await self._remove_name(path, is_dir=False)

    unlink = remove

    async def rmdir(self, path: str) -> None:
        """Remove an empty directory, as os.rmdir: ENOTDIR for anything else (a symbolic link to a
        directory too), ENOTEMPTY. One COMPOUND."""
        await self._remove_name(path, is_dir=True)

    async def rmtree(self, path: str) -> None:
        """Remove a directory and everything in it, as shutil.rmtree: the links in it are removed,
        not followed; ``path`` itself must be a directory (NotADirectoryError), not a symbolic link
        to one (OSError, as shutil answers)."""
        attrs = await self._lstat_name(path)
        if attrs.is_symlink:
            raise OSError(errno.ENOTDIR, "Cannot call rmtree on a symbolic link", self._norm(path))
        if not attrs.is_dir:
            raise NFS4Error(c.NFS4ERR_NOTDIR, c.OP_REMOVE, self._norm(path))
        for e in await self.scandir(self._norm(path)):
            if e.is_dir(follow_symlinks=False):
                await self.rmtree(e.path)
            else:
                await self._remove_name(e.path)
        await self._remove_name(path)

    async def _remove_name(self, path: str, is_dir: bool | None = None) -> None:
        """REMOVE the name ``path`` ends in: a directory only (``is_dir``), a non-directory only
        (False), or whatever it names (None)."""
        parent, name = self._split(path)
        dfh = await self._dir_fh(parent)
        await self.nfs.directories.remove(dfh, name, self.cred, path=self._norm(path), is_dir=is_dir)
        self._forget(path)

    async def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``, replacing what ``dst`` names (as os.rename does on POSIX). A path
        written as a directory's (a trailing ``/``) renames a directory only (ENOTDIR)."""
        if (names_a_directory(src) or names_a_directory(dst)) and not (await self._lstat_name(src)).is_dir:
            raise NFS4Error(c.NFS4ERR_NOTDIR, c.OP_RENAME, self._norm(dst if names_a_directory(dst) else src) + "/")
        sp, sn = self._split(src)
        dp, dn = self._split(dst)
        sfh = await self._dir_fh(sp)
        dfh = await self._dir_fh(dp)
        await self.nfs.directories.rename(sfh, sn, dfh, dn, self.cred, path=self._norm(src))
        self._forget(src)
        self._forget(dst)

    async def link(self, src: str, dst: str, *, follow_symlinks: bool = True) -> FileAttrs:
        """Make ``dst`` a hard link to ``src``: to what ``src`` points to when it is a symbolic link, as
        os.link, or to the link itself without ``follow_symlinks``."""
        self._no_file_at(dst, c.NFS4ERR_NOENT)  # (link(2) answers so)
        fh, _ = await self._resolve(src, follow=follow_symlinks)
        dp, dn = self._split(dst)
        dfh = await self._dir_fh(dp)
        attrs, _, _ = await self.nfs.directories.link(fh, dfh, dn, self.cred, path=self._norm(dst))
        return attrs

    async def symlink(self, target: str, path: str) -> FileAttrs:
        self._no_file_at(path, c.NFS4ERR_NOENT)  # (symlink(2) answers so)
        parent, name = self._split(path)
        dfh = await self._dir_fh(parent)
        _, attrs, _, _ = await self.nfs.directories.create(dfh, name, c.NF4LNK, self.cred, mode=0o777,
                                         linkdata=target.encode("utf-8", "surrogateescape"),
                                         path=self._norm(path))
        return attrs

    async def readlink(self, path: str) -> str:
        fh, attrs = await self._resolve(path, follow=False)
        if not attrs.is_symlink:
            raise NFS4Error(c.NFS4ERR_INVAL, c.OP_READLINK, self._norm(path))
        return (await self.nfs.directories.readlink(fh, self.cred, path)).decode("utf-8", "surrogateescape")

    # -- files ------------------------------------------------------------------------------------------
    async def open(self, path: str, mode: str = "r", perm: int = 0o644) -> File:
        """Open like Python's ``open`` in binary: modes r, r+, w, w+, a, a+, x, x+."""
        base = mode.replace("b", "")
        if base not in ("r", "r+", "w", "w+", "a", "a+", "x", "x+"):
            raise ValueError(f"invalid mode {mode!r}")
        write = base[0] in "wax" or "+" in base
        read = base[0] == "r" or "+" in base
        access = (c.OPEN4_SHARE_ACCESS_READ if read else 0) | (c.OPEN4_SHARE_ACCESS_WRITE if write else 0)
        parent, name = self._split(path)
        npath = self._norm(path)
        if base[0] == "r":
            fh, attrs = await self._resolve(path, follow=True)
            if attrs.is_dir:
                raise NFS4Error(c.NFS4ERR_ISDIR, c.OP_OPEN, npath)
            of = await self.nfs.open_fh(fh, self.cred, access, path=npath)
        else:
            self._no_file_at(path, c.NFS4ERR_ISDIR)  # (open(2) with O_CREAT answers so)
            dfh = await self._dir_fh(parent)
            of = await self.nfs.open(dfh, name, self.cred, access=access, create=True,
                                     exclusive=base[0] == "x", truncate=base[0] == "w", mode=perm, path=npath)
        f = File(self, of, npath, readable=read, writable=write)
        if base[0] == "a" and of.attrs is not None:
            f.pos = of.attrs.size
            f.append = True
        return f

    async def read_file(self, path: str) -> bytes:
        async with await self.open(path, "r") as f:
            return await f.read()

    async def read_bytes(self, path: str, offset: int = 0, count: int | None = None) -> bytes:
        """``count`` bytes of ``path`` from ``offset`` (None: to the end of the file), without opening
        it: one COMPOUND (LOOKUP, GETATTR, READ with the anonymous stateid) when they fit in one
        READ; the rest by READs of the file handle kept in flight together, none past the size the
        first COMPOUND learned nor past a READ that came back at the end. A symbolic link, or a
        server that wants an open for I/O, takes the longer way (open, READs, CLOSE)."""
        if offset < 0 or (count is not None and count < 0):
            raise ValueError(f"a negative offset or count: {offset}, {count}")
        nfs = self.nfs
        npath = self._norm(path)
        first = None
        if not names_a_directory(path):  # (else a directory or ENOTDIR, which the open tells)
            parent, name = self._split(npath)
            dfh = await self._dir_fh(parent)
            first = await nfs.whole_files.read_named(dfh, name, offset, nfs.maxread if count is None else count, self.cred,
                                         npath)
        if first is None:
            async with await self.open(path, "r") as f:
                if count is None:
                    f.seek(offset)
                    return await f.read()
                return await f.pread(offset, count)
        size = first.attrs.size
        data = first.data
        pos = offset + data.nbytes
        limit = None if count is None else offset + count
        if first.eof or pos == limit:
            return data.tobytes()
        fh = first.fh

        async def read_one(at: int, n: int) -> tuple[memoryview, bool]:
            return await nfs.read_write.read(None, fh, at, n, self.cred, path=npath)

        views = [data]
        end = size if limit is None else min(size, limit)
        eof = False
        if pos < end:
            more, eof = await read_range(read_one, pos, end - pos, nfs.maxread, lambda: self.io_window(nfs.maxread))
            views += more
            pos += sum(v.nbytes for v in more)
        # data past the size learned shows that size out of date (the file grew meanwhile): on to
        # the end, one READ at a time
        while not eof and pos > size and pos != limit:
            view, eof = await read_one(pos, nfs.maxread if limit is None else min(nfs.maxread, limit - pos))
            if not view.nbytes:
                break
            views.append(view)
            pos += view.nbytes
        return b"".join(views)

    async def write_file(self, path: str, data: Any, perm: int = 0o644, *, exclusive: bool = False) -> None:
        """Write ``data`` (any buffer) as the whole of ``path``, created with ``perm`` or truncated;
        on the server's stable storage when this returns. ``exclusive``: only if nothing has the name
        (FileExistsError, EEXIST, otherwise: an exclusive OPEN, no window between a check and the
        write). Up to wsize bytes go in one COMPOUND (OPEN, WRITE FILE_SYNC4, CLOSE, GETATTR); a
        larger file by the open-file engine (WRITEs in flight together, COMMIT)."""
        mv = memoryview(data).cast("B")
        nfs = self.nfs
        if mv.nbytes > nfs.maxwrite or names_a_directory(path):  # (the open refuses ``file/``, ``dir/``)
            async with await self.open(path, "x" if exclusive else "w", perm) as f:
                await f.pwrite(0, mv)
            return
        npath = self._norm(path)
        parent, name = self._split(npath)
        dfh = await self._dir_fh(parent)
        _, _, written = await nfs.whole_files.write_named(dfh, name, mv, self.cred, mode=perm, exclusive=exclusive, path=npath)
        if written < mv.nbytes:  # (the server wrote less than asked: the rest, by the engine)
            async with await self.open(npath, "r+") as f:
                await f.pwrite(written, mv[written:])

    # -- many calls at once -------------------------------------------------------------------------
    async def _each(self, items: Sequence[T], call: Callable[[T], Awaitable[Any]]) -> list[Any]:
        """``call(item)`` for every item, together, as many in flight as the session's slots take
        (:meth:`io_window`): each one's result, or the OSError (ValueError) it raised, in order."""
        out: list[Any] = [None] * len(items)
        limit = trio.CapacityLimiter(max(1, self.io_window(SMALL_IO)))

        async def one(i: int, item: T) -> None:
            async with limit:
                try:
                    out[i] = await call(item)
                except (OSError, ValueError) as e:
                    out[i] = e

        try:
            async with trio.open_nursery() as nursery:
                for i, item in enumerate(items):
                    nursery.start_soon(one, i, item)
        except BaseExceptionGroup as eg:
            raise single_error(eg) from None
        return out

    async def read_ranges(self, ranges: Sequence[tuple[str, int, int | None]], gap: int = MERGE_GAP
                          ) -> list[bytes | Exception]:
        """The bytes of each (path, offset, count) (count None: to the end), in order: an error (an
        OSError) in the place of a range that could not be read. All at once: a file with one
        range is :meth:`read_bytes`' one COMPOUND; a file with several has its ranges sorted, and
        those that overlap or lie at most ``gap`` bytes apart (fsspec's parquet reader's 64,000 by
        default) read by one READ up to rsize (:func:`.batched.coalesced`), each range sliced from
        its data. The READs go two of whole pages to a COMPOUND (one, of the span's bytes, with
        ``batchreads=0`` in the URL; as many as fit with ``batchreads=1``: Linux's nfsd 7.3 places
        a third READ wrong, :class:`.batched.Batched`), each COMPOUND finding the file by name, the
        COMPOUNDs in flight together."""
        if gap < 0:
            raise ValueError(f"gap must be at least 0, not {gap}")
        out: list[bytes | Exception] = [b""] * len(ranges)
        by_path: dict[str, list[int]] = {}
        for i, (path, _, _) in enumerate(ranges):
            by_path.setdefault(self._norm(path), []).append(i)
        singles: list[int] = []
        files: list[tuple[str, list[int]]] = []
        for path, idx in by_path.items():
            if len(idx) == 1 or any(ranges[i][2] is None or ranges[i][1] < 0 for i in idx):
                singles += idx
            else:
                files.append((path, idx))

        async def single(i: int) -> None:
            path, offset, count = ranges[i]
            out[i] = await self.read_bytes(path, offset, count)

        async def several(item: tuple[str, list[int]]) -> None:
            path, idx = item
            try:
                got = await self._read_spans_of(path, [(ranges[i][1], ranges[i][2] or 0) for i in idx], gap)
            except (OSError, ValueError) as e:
                got = [e] * len(idx)
            for i, data in zip(idx, got, strict=True):
                out[i] = data

        results = await self._each(singles, single)
        for i, r in zip(singles, results, strict=True):
            if isinstance(r, Exception):
                out[i] = r
        await self._each(files, several)
        return out

    async def _read_spans_of(self, path: str, ranges: list[tuple[int, int]], gap: int) -> list[bytes | Exception]:
        """Ranges (offset, count) of one file, as :meth:`read_ranges` sends them: the bytes of each,
        sliced from the data of the READ of its span (:func:`.batched.coalesced`,
        :func:`.batched.wire_pieces`). Each COMPOUND finds the file by its name (PUTFH of the
        directory, LOOKUP, the READs), all in flight together; a name that cannot be read so (a
        symbolic link ...) is looked up first, and its file handle read."""
        nfs = self.nfs
        pages = nfs.batched.reads_per_compound != 1
        spans = coalesced(ranges, gap, read_step(nfs.maxread, pages), pages)
        pieces, cuts, of_span = wire_pieces([(lo, n) for lo, n, _ in spans], nfs.maxread, pages)
        data: list[Any] = [b""] * len(pieces)

        async def again(k: int) -> None:  # (in a COMPOUND of its own)
            at, _ = pieces[k]
            skip, n = cuts[k]
            data[k] = await self.read_bytes(path, at + skip, n)

        async def keep(which: list[int], got: list[tuple[memoryview, bool]]) -> None:
            for j, (k, (view, eof)) in enumerate(zip(which, got, strict=True)):
                at, count = pieces[k]
                skip, n = cuts[k]
                part = view[skip : skip + n]
                data[k] = part
                if part.nbytes < n and not eof:  # (short, not at the end: the server's limit)
                    data[k] = b"".join([part, await self.read_bytes(path, at + skip + part.nbytes, n - part.nbytes)])
                if view.nbytes < count and j < len(which) - 1:
                    # a READ that came back short ends the batch: the data of those after it in the
                    # COMPOUND may not be where the reply says (Batched)
                    failed = [r for r in await self._each(which[j + 1 :], again) if isinstance(r, Exception)]
                    if failed:
                        raise failed[0]
                    return

        npath = self._norm(path)
        by_name = bool(pieces) and npath != "/" and not names_a_directory(path)
        if by_name:
            parent, name = self._split(npath)
            dfh = await self._dir_fh(parent)

            async def named(which: list[int]) -> None:
                nonlocal by_name
                got = await nfs.batched.read_spans_named(dfh, name, [pieces[k] for k in which], self.cred, npath)
                if got is None:
                    by_name = False
                else:
                    await keep(which, got)

            results = await self._each(nfs.batched.read_batches(pieces, named=True), named)
        if not by_name:  # (the longer way)
            fh, attrs = await self._resolve(path, follow=True)
            if attrs.is_dir:
                raise NFS4Error(c.NFS4ERR_ISDIR, c.OP_READ, path)

            async def of_fh(which: list[int]) -> None:
                await keep(which, await nfs.batched.read_spans(fh, [pieces[k] for k in which], self.cred, path))

            results = await self._each(nfs.batched.read_batches(pieces), of_fh)
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]
        of: list[list[Any]] = [[] for _ in spans]
        for k, s in enumerate(of_span):
            of[s].append(data[k])
        out: list[bytes | Exception] = [b""] * len(ranges)
        for (lo, _, members), views in zip(spans, of, strict=True):
            if len(views) > 1:  # (a range longer than one READ: its span's only one)
                out[members[0]] = b"".join(views)
                continue
            whole = memoryview(views[0])
            for r in members:
                offset, count = ranges[r]
                out[r] = bytes(whole[offset - lo : offset - lo + count])
        return out

    async def write_files(self, files: Sequence[tuple[str, Any]], perm: int = 0o644, *,
                          exclusive: bool = False) -> list[Exception | None]:
        """:meth:`write_file` of each (path, data), all at once (each a COMPOUND of its own, as many in
        flight as the session's slots take): None for each written, an error (OSError) in the place
        of one that was not."""
        async def write(item: tuple[str, Any]) -> None:
            await self.write_file(item[0], item[1], perm, exclusive=exclusive)

        return await self._each(files, write)

    async def remove_many(self, paths: Sequence[str]) -> list[Exception | None]:
        """Remove each path (a file, a symbolic link or an empty directory), all at once: the names
        of one directory several REMOVEs to a COMPOUND, the COMPOUNDs in flight together. None for
        each removed, an error (OSError) in the place of one that was not. A directory goes only
        once empty: give a tree's directories in a later call than their contents."""
        out: list[Exception | None] = [None] * len(paths)
        by_dir: dict[str, list[int]] = {}
        for i, p in enumerate(paths):
            try:
                parent, _ = self._split(p)
            except NFS4Error as e:
                out[i] = e
                continue
            by_dir.setdefault(parent, []).append(i)
        room = self.nfs.per_compound()
        chunks = [(d, idx[k : k + room]) for d, idx in by_dir.items() for k in range(0, len(idx), room)]

        async def remove(item: tuple[str, list[int]]) -> None:
            parent, idx = item
            dfh = await self._dir_fh(parent)
            while idx:
                names = [self._split(paths[i])[1] for i in idx]
                done, error = await self.nfs.batched.remove_names(dfh, names, self.cred, [self._norm(paths[i]) for i in idx])
                for i in idx[:done]:
                    self._forget(paths[i])
                if error is None:
                    return
                out[idx[done]] = error
                idx = idx[done + 1 :]

        for (_, idx), r in zip(chunks, await self._each(chunks, remove), strict=True):
            if isinstance(r, Exception):
                for i in idx:
                    out[i] = out[i] or r
        return out

    async def scandir_many(self, paths: Sequence[str]) -> list[list[DirEntry] | Exception]:
        """:meth:`scandir` of each path, all at once: the entries of each, or an error (OSError) in
        its place. The first READDIRs of several directories go in one COMPOUND (a PUTFH and a
        READDIR each), the COMPOUNDs in flight together; a directory larger than that first page
        goes on alone."""
        out: list[Any] = [None] * len(paths)
        npaths: list[str] = [""] * len(paths)
        for i, p in enumerate(paths):
            try:
                npaths[i] = self._norm(p)
            except (OSError, ValueError) as e:
                out[i] = e
        todo = [i for i in range(len(paths)) if out[i] is None]
        fhs = dict(zip(todo, await self._each([npaths[i] for i in todo], self._dir_fh), strict=True))
        for i, fh in fhs.items():
            if isinstance(fh, Exception):
                out[i] = fh
        todo = [i for i in todo if out[i] is None]
        room = self.nfs.batched.readdirs_per_compound()
        chunks = [todo[k : k + room] for k in range(0, len(todo), room)]

        async def list_chunk(idx: list[int]) -> None:
            while len(idx) > 1:
                pages, failed, error = await self.nfs.batched.first_pages([fhs[i] for i in idx], self.cred,
                                                                  [npaths[i] for i in idx])
                if error is None:
                    for i, page in zip(idx, pages, strict=True):
                        try:
                            listing = await self.nfs.directories.listdir_plus(fhs[i], self.cred, path=npaths[i], first=page)
                            out[i] = await self._entries(paths[i], npaths[i], listing)
                        except OSError as e:
                            out[i] = e
                    return
                out[idx[failed]] = error
                idx = idx[:failed] + idx[failed + 1 :]
            for i in idx:  # (one directory: its pages as scandir asks them)
                try:
                    listing = await self.nfs.directories.listdir_plus(fhs[i], self.cred, path=npaths[i])
                    out[i] = await self._entries(paths[i], npaths[i], listing)
                except OSError as e:
                    out[i] = e

        for idx, r in zip(chunks, await self._each(chunks, list_chunk), strict=True):
            if isinstance(r, Exception):
                for i in idx:
                    out[i] = out[i] or r
        return out

    async def copy_file(self, src: str, dst: str, perm: int = 0o644, progress: Progress | None = None) -> int:
        """Copy the file ``src`` to ``dst`` (created or truncated) on this server; returns the bytes
        copied. The server copies it itself (COPY, NFSv4.2) when it can; when it cannot (EOPNOTSUPP: an
        NFSv4.1 session, a server without COPY; EXDEV: another file system) this client reads the
        data and writes it. ``progress(n)``: n bytes copied so far; first ``progress(0)``, once ``dst``
        is created (or truncated). ``src`` and ``dst`` the same file is shutil.SameFileError, as
        shutil.copyfile answers (nothing is truncated)."""
        async with await self.open(src, "r") as s:
            there = await self._stat_or_none(dst)
            if there is not None and s.of.attrs is not None and \
                    (there.fsid, there.fileid) == (s.of.attrs.fsid, s.of.attrs.fileid):
                raise shutil.SameFileError(f"{self._norm(src)!r} and {self._norm(dst)!r} are the same file")
            async with await self.open(dst, "w", perm) as d:
                return await self._copy_open(s, d, progress)

    async def _copy_open(self, s: File, d: File, progress: Progress | None) -> int:
        """Copy the open file ``s`` into the open file ``d`` (:meth:`copy_file`)."""
        if progress:
            progress(0)
        size = s.size
        if size:
            try:
                n = await self.nfs.nfs42.copy(s.of, d.of, 0, 0, size, self.cred, path=d.path)
            except NFS4Error as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EXDEV):
                    raise
            else:
                if progress:
                    progress(n)
                return n
        total = 0
        async for offset, view in s.iter_views():
            await d.pwrite(offset, view)
            total += view.nbytes
            if progress:
                progress(total)
        return total

    # -- bulk transfers ------------------------------------------------------------------------------
    async def get(self, remote: str, local: str, progress: Progress | None = None) -> int:
        """Copy a remote file to a local one; returns bytes copied. READ data goes to disk by
        os.write of the reply buffers themselves (no copy). ``progress(n)``: n bytes written so far;
        first ``progress(0)``, once the local file is created (or truncated): a call that fails
        before it left the local file as it was."""
        async with await self.open(remote, "r") as f:
            fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            if progress:
                progress(0)
            total = 0
            try:
                async for offset, view in f.iter_views():
                    n = os.pwrite(fd, view, offset)
                    while n < view.nbytes:  # a short write to a local disk: finish it
                        n += os.pwrite(fd, view[n:], offset + n)
                    total += view.nbytes
                    if progress:
                        progress(total)
            finally:
                os.close(fd)
        return total

    async def put(self, local: str, remote: str, progress: Progress | None = None, perm: int = 0o644) -> int:
        """Copy a local file to a remote one; returns bytes copied. A pipeline: the next block of the
        local file (PUT_BLOCK_WRITES x wsize) is read in a thread while the WRITEs of the blocks
        before it are in flight, as many as fill the session's live paths
        (:meth:`File.pwrite_behind`); a COMMIT goes in the background as a window's worth waits for
        one, and the last at the close. A block goes to the
        wire from the bytes the local read returned (no other copy). ``progress(n)``: n bytes of the
        local file handed to WRITEs so far; first ``progress(0)``, once the remote file is created (or
        truncated): a call that fails before it left the remote file as it was.

        A WRITE or COMMIT that fails makes ``put`` raise its error (OSError) before it returns: it
        never returns as if all was copied when the server did not take all of it. The remote file
        then holds what went before the failure; removing it is the caller's choice (the CLI's put
        removes it and says so)."""
        block = self.nfs.maxwrite * PUT_BLOCK_WRITES
        total = 0
        # the local file first (in a thread: a FIFO's open waits for its writer): a local file that
        # cannot be read leaves the remote one as it was
        src = await trio.to_thread.run_sync(_open_for_reading, local)
        with src:
            async with await self.open(remote, "w", perm) as f:
                if progress:
                    progress(0)
                blocks, taken = trio.open_memory_channel[bytes](PUT_READ_AHEAD)

                async def read_blocks() -> None:
                    async with blocks:
                        while blk := await trio.to_thread.run_sync(src.read, block):
                            await blocks.send(blk)

                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(read_blocks)
                        async with taken:
                            async for blk in taken:
                                await f.pwrite_behind(total, blk)
                                total += len(blk)
                                if progress:
                                    progress(total)
                except BaseExceptionGroup as eg:
                    raise single_error(eg) from None
                await f.fsync()
        return total


class File:
    """An open file. Reads and writes are split into rsize/wsize pieces, several in flight."""

    def __init__(self, client: Client, of: OpenFile, path: str, readable: bool, writable: bool) -> None:
        self.client = client
        self.of = of
        self.path = path
        self.readable = readable
        self.writable = writable
        self.pos = 0
        self.append = False
        nfs = client.nfs
        self._writer: FileWriter | None = None
        if writable:
            self._writer = FileWriter(nfs, of, client.cred, client.nursery, nfs.maxwrite, client.window,
                                      lock_owner=self, path=path)
        self.closed = False

    async def __aenter__(self) -> File:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def size(self) -> int:
        return self.of.attrs.size if self.of.attrs else 0

    @property
    def name(self) -> str:
        """The path this file was opened by."""
        return self.path

    def tell(self) -> int:
        return self.pos

    def _check(self, writing: bool) -> None:
        if self.closed:
            raise ValueError("I/O on a closed file")
        if writing and not self.writable:
            raise OSError(errno.EBADF, "file not open for writing", self.path)
        if not writing and not self.readable:
            raise OSError(errno.EBADF, "file not open for reading", self.path)
        self.client.nfs.io_stateid(self.of, self, self.path)  # LockLost (EIO) when our locks were lost

    # -- reading ------------------------------------------------------------------------------------
    async def pread_views(self, offset: int, count: int) -> tuple[list[memoryview], bool]:
        """Read up to ``count`` bytes at ``offset`` as views of the reply buffers (zero copy),
        rsize READs in flight as a pipeline (as many as fill the session's live paths); stops at end
        of file."""
        self._check(False)
        nfs = self.client.nfs
        return await read_range(self._read_one, offset, count, nfs.maxread, self._window)

    async def _read_one(self, offset: int, count: int) -> tuple[memoryview, bool]:
        nfs = self.client.nfs
        return await nfs.read_write.read(self.of, self.of.fh, offset, count, self.client.cred, lock_owner=self, path=self.path)

    def _window(self) -> int:
        return self.client.io_window(self.client.nfs.maxread)

    async def iter_views(self, chunk: int | None = None) -> AsyncIterator[tuple[int, memoryview]]:
        """Stream the file from the current position: (offset, view) pairs, zero copy, by a pipeline
        of READs (:class:`~.open_file.ReadStream`: the next starts when any is answered), ``chunk``
        bytes of them sent and not yet taken at most (default: as many READs as fill the session's
        live paths)."""
        self._check(False)
        nursery = self.client.nursery
        maxread = self.client.nfs.maxread
        window: Window = max(1, chunk // maxread) if chunk else self._window
        stream = ReadStream(self._read_one, self.pos, maxread, window, lambda: self.size, nursery)
        try:
            while True:
                view = await stream.next()
                if view is None:
                    return
                self._check(False)
                yield self.pos, view
                self.pos += view.nbytes
        finally:
            stream.close()

    async def preadinto(self, offset: int, buffer: Any) -> int:
        """Fill ``buffer`` (any writable buffer) from ``offset``, straight from the reply buffers; the
        number of bytes read (fewer at the end of the file)."""
        dest = memoryview(buffer).cast("B")
        done = 0
        while done < dest.nbytes:
            views, eof = await self.pread_views(offset + done, dest.nbytes - done)
            for v in views:
                dest[done : done + v.nbytes] = v
                done += v.nbytes
            if eof or not views:
                break
        return done

    async def readinto(self, buffer: Any) -> int:
        n = await self.preadinto(self.pos, buffer)
        self.pos += n
        return n

    async def pread(self, offset: int, count: int) -> bytes:
        views, _ = await self.pread_views(offset, count)
        return views[0].tobytes() if len(views) == 1 else b"".join(views)

    async def read(self, count: int = -1) -> bytes:
        if count < 0:  # to the end: as much as the file holds in one pipeline of READs, then on to its end
            out: list[memoryview] = []
            window = self.client.nfs.maxread * self._window()
            while True:
                views, eof = await self.pread_views(self.pos, max(self.size - self.pos, 0) + window)
                out += views
                self.pos += sum(v.nbytes for v in views)
                if eof or not views:
                    return b"".join(out)
        data = await self.pread(self.pos, count)
        self.pos += len(data)
        return data

    # -- writing ------------------------------------------------------------------------------------
    @property
    def rewrites(self) -> int:
        """WRITEs sent again because the server's write verifier changed (it restarted and may have
        lost what it had not committed)."""
        return self._writer.resends if self._writer is not None else 0

    async def pwrite(self, offset: int, data: Any) -> int:
        """Write ``data`` at ``offset`` by the open-file engine (:class:`~.open_file.FileWriter`):
        wsize UNSTABLE WRITEs in flight together, the data sent from where it lies, a COMMIT in the
        background once a window's worth waits for one; returns once the WRITEs are answered. A
        read-only buffer (bytes) is kept by reference until committed, as a server that restarts
        before the COMMIT needs it again; a mutable one (which the caller may change once this
        returns) is committed before this returns instead, so it is never copied nor needed again."""
        mv = await self._hand_over(offset, data)
        writer = self._writer
        assert writer is not None  # (_hand_over: the file is open for writing)
        if mv.readonly:
            await writer.written()
        else:
            await writer.commit()
        return mv.nbytes

    async def pwrite_behind(self, offset: int, data: bytes) -> None:
        """Hand read-only ``data`` to the WRITEs at ``offset`` and return once its WRITEs are sent, not
        answered (it waits while the window of WRITEs in flight is full): a pipeline, for a caller that
        has the next block to fetch meanwhile. ``data`` is kept by reference until committed. The error
        of a WRITE or COMMIT that failed is raised by the next ``pwrite_behind``, ``pwrite``, ``fsync``
        or ``close``."""
        if not memoryview(data).readonly:
            raise TypeError("pwrite_behind keeps the data in flight: it takes a read-only buffer (bytes)")
        await self._hand_over(offset, data)

    async def _hand_over(self, offset: int, data: Any) -> memoryview:
        """Give ``data`` to the engine's WRITEs at ``offset`` (sent, not yet answered) and count the
        file's size past it; returns the bytes as the engine holds them."""
        self._check(True)
        writer = self._writer
        assert writer is not None  # (_check: the file is open for writing)
        mv = memoryview(data).cast("B")
        await writer.write(offset, mv)
        end = offset + mv.nbytes
        if self.of.attrs is not None and end > self.of.attrs.size:
            self.of.attrs.size = end
        return mv

    async def write(self, data: Any) -> int:
        if self.append:
            self.pos = max(self.pos, self.size)
        n = await self.pwrite(self.pos, data)
        self.pos += n
        return n

    async def fsync(self) -> None:
        """COMMIT; if the server's write verifier changed (it restarted and may have lost unstable
        data), what it lost is sent again and committed, so nothing acknowledged is lost."""
        if self._writer is not None:
            await self._writer.flush()

    flush = fsync

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """SEEK_SET, SEEK_CUR, SEEK_END (as known locally; :meth:`seek_data` and :meth:`seek_hole` ask
        the server)."""
        if whence == os.SEEK_SET:
            self.pos = offset
        elif whence == os.SEEK_CUR:
            self.pos += offset
        elif whence == os.SEEK_END:
            self.pos = self.size + offset
        else:
            raise ValueError(f"whence {whence}: SEEK_DATA and SEEK_HOLE are seek_data() and seek_hole()")
        return self.pos

    # -- holes and space (NFSv4.2: EOPNOTSUPP on NFSv4.1 sessions and servers without them) -----------
    async def seek_data(self, offset: int) -> int:
        """Move to the first byte of data at or after ``offset`` and return it (lseek's SEEK_DATA);
        ENXIO when no data follows or ``offset`` is past the end."""
        return await self._seek(offset, c.NFS4_CONTENT_DATA)

    async def seek_hole(self, offset: int) -> int:
        """Move to the first byte of a hole at or after ``offset`` and return it (lseek's SEEK_HOLE: the
        end of the file counts as one); ENXIO when ``offset`` is past the end."""
        return await self._seek(offset, c.NFS4_CONTENT_HOLE)

    async def _seek(self, offset: int, what: int) -> int:
        if self.closed:
            raise ValueError("I/O on a closed file")
        self.pos = await self.client.nfs.nfs42.seek(self.of, offset, what, self.client.cred, self.path, lock_owner=self)
        return self.pos

    async def allocate(self, offset: int, length: int) -> FileAttrs:
        """Reserve space for ``length`` bytes from ``offset`` (fallocate(2) mode 0: the file grows if
        shorter); the file's attributes after it."""
        self._check(True)
        attrs = await self.client.nfs.nfs42.allocate(self.of, offset, length, self.client.cred, self.path,
                                               lock_owner=self)
        self.of.attrs = attrs
        return attrs

    async def punch_hole(self, offset: int, length: int) -> FileAttrs:
        """Free the space of ``length`` bytes from ``offset`` (fallocate(2)'s PUNCH_HOLE|KEEP_SIZE: they
        read back as zeros, the size stays); the file's attributes after it."""
        self._check(True)
        attrs = await self.client.nfs.nfs42.deallocate(self.of, offset, length, self.client.cred, self.path,
                                                 lock_owner=self)
        self.of.attrs = attrs
        return attrs

    # -- byte-range locks ---------------------------------------------------------------------------
    async def lock(self, type: int, offset: int = 0, length: int = 0, wait: bool = False) -> None:
        """Lock ``length`` bytes from ``offset`` (0: to the end of the file, however it grows):
        ``fcntl.F_RDLCK`` (shared; the file open for reading) or ``fcntl.F_WRLCK`` (exclusive; open for
        writing), as fcntl's F_SETLK, or F_SETLKW with ``wait``. The locks are this File's: another File
        (of this client or another) conflicts with them, as open file description locks do; this
        File's own lock under the range is replaced (an upgrade or downgrade). A conflict raises
        :class:`~pynfsrdma._client.locks.LockDenied` (a BlockingIOError, EAGAIN) whose ``conflict`` is
        the lock in the way; with ``wait`` the call waits for it to go (cancel it with trio). Closing
        the File releases its locks."""
        self._check(type != fcntl.F_RDLCK)
        await self.client.nfs.byte_range_locks.lock(self.of, self, nfs_lock_type(type), offset, _lock_length(length),
                                   self.client.cred, wait=wait, path=self.path)

    async def unlock(self, offset: int = 0, length: int = 0) -> None:
        """Unlock ``length`` bytes from ``offset`` (0: to the end of the file); what this File held
        elsewhere stays locked."""
        if self.closed:
            raise ValueError("I/O on a closed file")
        await self.client.nfs.byte_range_locks.locku(self.of, self, offset, _lock_length(length), self.client.cred, self.path)

    async def test_lock(self, type: int, offset: int = 0, length: int = 0) -> LockConflict | None:
        """The lock that would stand in the way of :meth:`lock` with these arguments (fcntl's F_GETLK),
        or None; this File's own locks never do."""
        if self.closed:
            raise ValueError("I/O on a closed file")
        return await self.client.nfs.byte_range_locks.lockt(self.of, self, nfs_lock_type(type), offset, _lock_length(length),
                                           self.client.cred, self.path)

    async def close(self) -> None:
        if self.closed:
            return
        try:
            if self.writable:
                await self.fsync()
        finally:
            self.closed = True
            await self.client.nfs.close(self.of, self.client.cred)


def _lock_length(length: int) -> int:
    """A lock length as fcntl's l_len (0: to the end of the file) as NFS's."""
    if length < 0:
        raise ValueError("a negative lock length")
    return TO_EOF if length == 0 else length


__all__ = ["Client", "File", "LockConflict", "LockDenied", "LockLost", "NfsURL", "URLError", "parse_url"]
