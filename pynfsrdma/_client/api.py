"""Scripted access: an async (trio) client that works with paths, like ``os`` and ``open``.

    async with Client.connect("nfs://127.0.0.1:2049/export") as nfs:
        await nfs.write_file("/hello.txt", b"hi")
        print(await nfs.listdir("/"))

Paths are relative to the export given in the URL ("/" is the export's root); one that ends in ``/``
names a directory or nothing (:func:`.export_paths.names_a_directory`), and the calls named after ``os`` and
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
import io
import os
import posixpath
import shutil
import stat
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

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
from .batched import MERGE_GAP
from .connect_options import ConnectOptions, takes_connect_options
from .dir_entry import DirEntry
from .export_paths import ExportPaths, names_a_directory
from .locks import TO_EOF, LockConflict, LockDenied, LockLost, nfs_lock_type
from .many_calls import ManyCalls, single_error
from .nfs4 import NFSv4, OpenFile
from .open_file import FileWriter, ReadStream, Window, read_range
from .security import FlavorChoice, credential, machine_credential, negotiate
from .stack import start_stack
from .trees import Trees
from .url import NfsURL, URLError, minor_version, parse_url

Progress = Callable[[int], None]
PUT_READ_AHEAD = 2  # blocks of the local file read and not yet handed to WRITEs, at most (put)
PUT_BLOCK_WRITES = 4  # wsize WRITEs per block put reads (each read is a hop to a thread and back)
XATTR_USER = "user."  # the namespace of extended attributes NFSv4.2 carries (RFC 8276)
RELEASE_TIMEOUT = 5.0  # at the end, locks and opens still held are given back within this long at most


def _open_for_reading(path: str) -> io.FileIO:
    return open(path, "rb", buffering=0)  # (closed by the caller)


class Client:
    """A connection to one NFSv4.1 export, with path-based calls."""

    def __init__(self, url: NfsURL, clientid: ClientID, ops: NFSv4, cred: Credential) -> None:
        self.url = url
        self.clientid = clientid
        self.nfs = ops
        self.cred = cred
        # READs and WRITEs of one transfer in flight at most; None: as many as fill the live paths
        # (NFSv4.io_window: it grows with the paths and their bandwidth-delay products)
        self.window: int | None = None
        self.trunking: Trunking | None = None  # the other paths (addrs=, nconnect=, discovery)
        self._nursery: trio.Nursery | None = None  # where open files write in the background
        self.paths = ExportPaths(ops, cred)  # each path to its file handle (directories remembered briefly)
        self.many = ManyCalls(ops, cred, self.paths, self.io_window, self.read_bytes, self.write_file)
        self.trees = Trees(self.paths, self.scandir, self.lexists, self.stat, self.mkdir, self._remove_name)

    @property
    def root_fh(self) -> bytes:
        """The export's root file handle."""
        return self.paths.root_fh

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
                        self.paths.root_fh = ops.root_fh
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
                        with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
                            await ops.read_write.close_layouts()
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
        return {**self.nfs.read_write.pnfs_report(), "server_is_mds": bool(flags & c.EXCHGID4_FLAG_USE_PNFS_MDS)}

    # -- metadata ---------------------------------------------------------------------------------------
    async def stat(self, path: str) -> FileAttrs:
        return (await self.paths.resolve(path, follow=True))[1]

    async def lstat(self, path: str) -> FileAttrs:
        return (await self.paths.resolve(path, follow=False))[1]

    async def exists(self, path: str) -> bool:
        """Whether ``path`` names something (a symbolic link: its target), as os.path.exists."""
        return await self.paths.stat_or_none(path) is not None

    async def lexists(self, path: str) -> bool:
        """Whether ``path`` names something, a dangling symbolic link too."""
        return await self.paths.stat_or_none(path, follow=False) is not None

    async def isdir(self, path: str) -> bool:
        a = await self.paths.stat_or_none(path)
        return a is not None and a.is_dir

    async def isfile(self, path: str) -> bool:
        a = await self.paths.stat_or_none(path)
        return a is not None and stat.S_ISREG(a.st_mode)

    async def islink(self, path: str) -> bool:
        a = await self.paths.stat_or_none(path, follow=False)
        return a is not None and a.is_symlink

    async def scandir(self, path: str = "/") -> list[DirEntry]:
        """The entries of a directory, with the attributes READDIR brought (no GETATTR per entry;
        only a symbolic link's target is looked up)."""
        npath = self.paths.norm(path)
        fh = await self.paths.dir_fh(npath)
        return await self.paths.entries(path, npath, await self.nfs.directories.listdir_plus(fh, self.cred, path=npath))

    async def listdir(self, path: str = "/") -> list[str]:
        npath = self.paths.norm(path)
        fh = await self.paths.dir_fh(npath)
        return [e.name for e in await self.nfs.directories.listdir(fh, self.cred, with_attrs=True, path=npath)]

    def walk(self, top: str = "/", topdown: bool = True, onerror: Callable[[OSError], Any] | None = None,
             followlinks: bool = False) -> AsyncIterator[tuple[str, list[str], list[str]]]:
        """(dirpath, dirnames, filenames) for ``top`` and every directory below it, as os.walk: with
        ``topdown`` a caller may prune ``dirnames`` in place; errors listing a directory go to
        ``onerror`` (or are ignored)."""
        return self.trees.walk(top, topdown, onerror, followlinks)

    async def glob(self, pattern: str) -> list[str]:
        """The paths matching ``pattern`` (``*``, ``?``, ``[...]`` within a name, ``**`` for any depth
        of directories), sorted; names starting with ``.`` match only a pattern that starts with one."""
        return await self.trees.glob(pattern)

    async def created(self, path: str) -> int | None:
        """When ``path`` was created (time_create), in nanoseconds since the epoch; None when the
        server keeps no creation times (NFS-Ganesha's VFS back end keeps none)."""
        fh, _ = await self.paths.resolve(path)
        return await self.nfs.names.time_create(fh, self.cred, self.paths.norm(path))

    async def statfs(self, path: str = "/") -> FsStat:
        fh, _ = await self.paths.resolve(path)
        return await self.nfs.names.statfs(fh, self.cred)

    async def setattr(self, path: str, *, follow: bool = True, **changes: Any) -> FileAttrs:
        fh, _ = await self.paths.resolve(path, follow=follow)
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
            raise NFS4Error(c.NFS4ERR_NOTSUPP, None, self.paths.norm(path))
        return name[len(XATTR_USER) :]

    async def getxattr(self, path: str, name: str) -> bytes:
        key = self._xattr_key(path, name)
        fh, _ = await self.paths.resolve(path)
        return await self.nfs.xattrs.getxattr(fh, key, self.cred, path=self.paths.norm(path))

    async def setxattr(self, path: str, name: str, value: bytes, *, create: bool = False,
                       replace: bool = False) -> None:
        """Set ``name`` to ``value``; ``create``: fail if it exists (EEXIST), ``replace``: fail if it
        does not (ENODATA), as os.setxattr's XATTR_CREATE and XATTR_REPLACE."""
        key = self._xattr_key(path, name)
        option = c.SETXATTR4_CREATE if create else c.SETXATTR4_REPLACE if replace else c.SETXATTR4_EITHER
        fh, _ = await self.paths.resolve(path)
        await self.nfs.xattrs.setxattr(fh, key, value, self.cred, option, path=self.paths.norm(path))

    async def listxattr(self, path: str) -> list[str]:
        if not self.nfs.xattr_support:
            raise NFS4Error(c.NFS4ERR_NOTSUPP, None, self.paths.norm(path))
        fh, _ = await self.paths.resolve(path)
        return [XATTR_USER + n for n in await self.nfs.xattrs.listxattrs(fh, self.cred, path=self.paths.norm(path))]

    async def removexattr(self, path: str, name: str) -> None:
        key = self._xattr_key(path, name)
        fh, _ = await self.paths.resolve(path)
        await self.nfs.xattrs.removexattr(fh, key, self.cred, path=self.paths.norm(path))

    # -- namespace --------------------------------------------------------------------------------------
    async def mkdir(self, path: str, mode: int = 0o755) -> FileAttrs:
        parent, name = self.paths.split(path)
        dfh = await self.paths.dir_fh(parent)
        _, attrs, _, _ = await self.nfs.directories.create(dfh, name, c.NF4DIR, self.cred, mode=mode, path=self.paths.norm(path))
        return attrs

    async def makedirs(self, path: str, mode: int = 0o755, exist_ok: bool = False) -> None:
        """Make ``path`` and the directories on the way to it that are missing, as os.makedirs: a
        ``path`` that exists is FileExistsError unless it is a directory and ``exist_ok``; a file on
        the way is NotADirectoryError."""
        await self.trees.makedirs(path, mode, exist_ok)

    async def remove(self, path: str) -> None:
        """Remove a file or a symbolic link (not what it points to), as os.remove: a directory is
        IsADirectoryError (:meth:`rmdir` and :meth:`rmtree` remove directories). One COMPOUND."""
        if names_a_directory(path):  # (a directory or ENOTDIR: never a file)
            await self.paths.lstat_name(path)
            raise NFS4Error(c.NFS4ERR_ISDIR, c.OP_REMOVE, self.paths.norm(path) + "/")
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
        await self.trees.rmtree(path)

    async def _remove_name(self, path: str, is_dir: bool | None = None) -> None:
        """REMOVE the name ``path`` ends in: a directory only (``is_dir``), a non-directory only
        (False), or whatever it names (None)."""
        npath, parent, name = self.paths.parts(path)
        dfh = await self.paths.dir_fh(parent)
        await self.nfs.directories.remove(dfh, name, self.cred, path=npath, is_dir=is_dir)
        self.paths.forget(path)

    async def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``, replacing what ``dst`` names (as os.rename does on POSIX). A path
        written as a directory's (a trailing ``/``) renames a directory only (ENOTDIR)."""
        if (names_a_directory(src) or names_a_directory(dst)) and not (await self.paths.lstat_name(src)).is_dir:
            raise NFS4Error(c.NFS4ERR_NOTDIR, c.OP_RENAME, self.paths.norm(dst if names_a_directory(dst) else src) + "/")
        sp, sn = self.paths.split(src)
        dp, dn = self.paths.split(dst)
        sfh = await self.paths.dir_fh(sp)
        dfh = await self.paths.dir_fh(dp)
        await self.nfs.directories.rename(sfh, sn, dfh, dn, self.cred, path=self.paths.norm(src))
        self.paths.forget(src)
        self.paths.forget(dst)

    async def link(self, src: str, dst: str, *, follow_symlinks: bool = True) -> FileAttrs:
        """Make ``dst`` a hard link to ``src``: to what ``src`` points to when it is a symbolic link, as
        os.link, or to the link itself without ``follow_symlinks``."""
        self.paths.no_file_at(dst, c.NFS4ERR_NOENT)  # (link(2) answers so)
        fh, _ = await self.paths.resolve(src, follow=follow_symlinks)
        dp, dn = self.paths.split(dst)
        dfh = await self.paths.dir_fh(dp)
        attrs, _, _ = await self.nfs.directories.link(fh, dfh, dn, self.cred, path=self.paths.norm(dst))
        return attrs

    async def symlink(self, target: str, path: str) -> FileAttrs:
        self.paths.no_file_at(path, c.NFS4ERR_NOENT)  # (symlink(2) answers so)
        parent, name = self.paths.split(path)
        dfh = await self.paths.dir_fh(parent)
        _, attrs, _, _ = await self.nfs.directories.create(dfh, name, c.NF4LNK, self.cred, mode=0o777,
                                         linkdata=target.encode("utf-8", "surrogateescape"),
                                         path=self.paths.norm(path))
        return attrs

    async def readlink(self, path: str) -> str:
        fh, attrs = await self.paths.resolve(path, follow=False)
        if not attrs.is_symlink:
            raise NFS4Error(c.NFS4ERR_INVAL, c.OP_READLINK, self.paths.norm(path))
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
        npath, parent, name = self.paths.parts(path)
        if base[0] == "r":
            fh, attrs = await self.paths.resolve(path, follow=True)
            if attrs.is_dir:
                raise NFS4Error(c.NFS4ERR_ISDIR, c.OP_OPEN, npath)
            of = await self.nfs.open_fh(fh, self.cred, access, path=npath)
        else:
            self.paths.no_file_at(path, c.NFS4ERR_ISDIR)  # (open(2) with O_CREAT answers so)
            dfh = await self.paths.dir_fh(parent)
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
        it: one COMPOUND (LOOKUP, READ with the anonymous stateid) when ``count`` fits in one READ;
        to the end, one COMPOUND (LOOKUP, GETFH, GETATTR, READ) when the file fits in one READ; the
        rest by READs of the file handle kept in flight together, none past the size the first
        COMPOUND learned nor past a READ that came back at the end. A symbolic link, or a
        server that wants an open for I/O, takes the longer way (open, READs, CLOSE)."""
        if offset < 0 or (count is not None and count < 0):
            raise ValueError(f"a negative offset or count: {offset}, {count}")
        nfs = self.nfs
        first = None
        if names_a_directory(path):  # (a directory or ENOTDIR, which the open tells)
            npath = self.paths.norm(path)
        else:
            npath, parent, name = self.paths.parts(path)
            dfh = await self.paths.dir_fh(parent)
            if count is not None and count <= nfs.maxread:  # one READ: no handle, no size needed
                got = await nfs.whole_files.read_range_named(dfh, name, offset, count, self.cred, npath)
                if got is not None and (got[1] or got[0].nbytes == count):
                    return got[0].tobytes()
                # (a link, a server that wants an open, or a short READ: the longer way)
            first = await nfs.whole_files.read_named(dfh, name, offset, nfs.maxread if count is None else count,
                                                     self.cred, npath)
        if first is None:
            async with await self.open(path, "r") as f:
                if count is None:
                    f.seek(offset)
                    return await f.read()
                return await f.pread(offset, count)
        size = first.size
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
        npath, parent, name = self.paths.parts(path)
        dfh = await self.paths.dir_fh(parent)
        _, written = await nfs.whole_files.write_named(dfh, name, mv, self.cred, mode=perm, exclusive=exclusive, path=npath)
        if written < mv.nbytes:  # (the server wrote less than asked: the rest, by the engine)
            async with await self.open(npath, "r+") as f:
                await f.pwrite(written, mv[written:])

    # -- many calls at once -------------------------------------------------------------------------
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
        return await self.many.read_ranges(ranges, gap)

    async def write_files(self, files: Sequence[tuple[str, Any]], perm: int = 0o644, *,
                          exclusive: bool = False) -> list[Exception | None]:
        """:meth:`write_file` of each (path, data), all at once (each a COMPOUND of its own, as many in
        flight as the session's slots take): None for each written, an error (OSError) in the place
        of one that was not."""
        return await self.many.write_files(files, perm, exclusive=exclusive)

    async def remove_many(self, paths: Sequence[str]) -> list[Exception | None]:
        """Remove each path (a file, a symbolic link or an empty directory), all at once: the names
        of one directory several REMOVEs to a COMPOUND, the COMPOUNDs in flight together. None for
        each removed, an error (OSError) in the place of one that was not. A directory goes only
        once empty: give a tree's directories in a later call than their contents."""
        return await self.many.remove_many(paths)

    async def scandir_many(self, paths: Sequence[str]) -> list[list[DirEntry] | Exception]:
        """:meth:`scandir` of each path, all at once: the entries of each, or an error (OSError) in
        its place. The first READDIRs of several directories go in one COMPOUND (a PUTFH and a
        READDIR each), the COMPOUNDs in flight together; a directory larger than that first page
        goes on alone."""
        return await self.many.scandir_many(paths)

    async def copy_file(self, src: str, dst: str, perm: int = 0o644, progress: Progress | None = None) -> int:
        """Copy the file ``src`` to ``dst`` (created or truncated) on this server; returns the bytes
        copied. The server copies it itself (COPY, NFSv4.2) when it can; when it cannot (EOPNOTSUPP: an
        NFSv4.1 session, a server without COPY; EXDEV: another file system) this client reads the
        data and writes it. ``progress(n)``: n bytes copied so far; first ``progress(0)``, once ``dst``
        is created (or truncated). ``src`` and ``dst`` the same file is shutil.SameFileError, as
        shutil.copyfile answers (nothing is truncated)."""
        async with await self.open(src, "r") as s:
            there = await self.paths.stat_or_none(dst)
            if there is not None and s.of.attrs is not None and \
                    (there.fsid, there.fileid) == (s.of.attrs.fsid, s.of.attrs.fileid):
                raise shutil.SameFileError(f"{self.paths.norm(src)!r} and {self.paths.norm(dst)!r} are the same file")
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


class HeldFile:
    """A file read by ranges with no open kept, by its file handle (fsspec's files opened "rb"): the
    first range looks the name up and learns the handle in the same COMPOUND (PUTFH the directory,
    LOOKUP, GETFH, READ), each later range is one COMPOUND by that handle (PUTFH, READ), the anonymous
    stateid each time. A name replaced meanwhile (another file RENAMEd over it: the atomic update)
    never mixes the two files' bytes: the reader reads on the file it started with while the server
    still has it, and gets FileNotFoundError once the server let it go (no open holds it there), as
    for a file removed meanwhile. A symbolic link is followed to its target's handle (one
    COMPOUND more, once); a server that wants an open for I/O is read as :meth:`Client.read_bytes`
    reads it, range by range."""

    __slots__ = ("fh", "needs_open", "npath", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.npath: str | None = None  # the path as the client normalises it (for errors), once known
        self.fh: bytes | None = None
        self.needs_open = False

    async def read(self, client: Client, offset: int, count: int) -> bytes:
        """``count`` bytes from ``offset`` (fewer at the end of the file), of the file the first range
        found under the name."""
        if offset < 0 or count < 0:
            raise ValueError(f"a negative offset or count: {offset}, {count}")
        if self.needs_open:
            return await client.read_bytes(self.path, offset, count)
        nfs = client.nfs
        npath = self.npath
        if npath is None:
            self.npath = npath = client.paths.norm(self.path)
        fh = self.fh
        views: list[Any] = []
        if fh is not None and 0 < count <= nfs.maxread:  # a range after the first, in one READ: the usual one
            try:
                data, eof = await nfs.whole_files.read_held(fh, offset, count, client.cred, npath)
            except NFS4Error as e:
                if e.status != c.NFS4ERR_BAD_STATEID:
                    raise
                self.needs_open = True  # (no I/O without an open on this server)
                return await client.read_bytes(self.path, offset, count)
            if eof or not data.nbytes or data.nbytes >= count:
                return data.tobytes()
            views.append(data)  # (a short READ before the end: the rest is asked from where it stopped)
            offset, count = offset + data.nbytes, count - data.nbytes
        elif fh is None:
            got = None
            if not names_a_directory(self.path):
                parent, name = client.paths.split(npath)
                dfh = await client.paths.dir_fh(parent)
                got = await nfs.whole_files.read_range_and_fh(dfh, name, offset, count, client.cred, npath)
            if got is None:  # a symbolic link (its target is read), or no file: the handle tells
                self.fh = fh = (await client.paths.resolve(self.path))[0]
            else:
                self.fh = fh = got[0]
                data, eof = got[1], got[2]
                if eof or data.nbytes >= count:
                    return data.tobytes()
                views.append(data)
                offset, count = offset + data.nbytes, count - data.nbytes
        held: bytes = fh

        async def read_one(at: int, n: int) -> tuple[memoryview, bool]:
            return await nfs.whole_files.read_held(held, at, n, client.cred, npath)

        try:
            more, _ = await read_range(read_one, offset, count, nfs.maxread, lambda: client.io_window(nfs.maxread))
        except NFS4Error as e:
            if e.status != c.NFS4ERR_BAD_STATEID or views:
                raise
            self.needs_open = True  # (no I/O without an open on this server)
            return await client.read_bytes(self.path, offset, count)
        return b"".join(views + more)


def _lock_length(length: int) -> int:
    """A lock length as fcntl's l_len (0: to the end of the file) as NFS's."""
    if length < 0:
        raise ValueError("a negative lock length")
    return TO_EOF if length == 0 else length


__all__ = ["Client", "File", "HeldFile", "LockConflict", "LockDenied", "LockLost", "NfsURL", "URLError", "parse_url"]
