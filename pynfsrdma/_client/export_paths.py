"""A client's paths: each path of the export to its file handle, symbolic links followed, the
directories on the way remembered briefly (so that a path's directories are not looked up again
for every call on files inside them), and what a listing's entries are as :class:`.dir_entry.DirEntry`.
"""

from __future__ import annotations

import errno
import posixpath

import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential
from .attributes import FileAttrs, file_attrs
from .dir_entry import DirEntry
from .nfs4 import ListedEntry, NFSv4
from .timed_map import TimedMap

MAX_SYMLINKS = 40
NORMED_PATHS = 4096  # paths as given -> (normalised, its directory, its last name), kept (then forgotten all at once)

_normed: dict[str, tuple[str, str, str]] = {}  # (a pure function of the string: shared by every client)


def _parts(path: str) -> tuple[str, str, str]:
    """``path`` normalised from the export's root, its directory and its last name (both "/" and ""
    for the root), worked out once for each string and then remembered: a script's calls name the
    same few directories again and again."""
    got = _normed.get(path)
    if got is None:
        normed = posixpath.normpath("/" + path.lstrip("/"))
        got = (normed, *posixpath.split(normed))
        if len(_normed) >= NORMED_PATHS:
            _normed.clear()
        _normed[path] = got
    return got


def names_a_directory(path: str) -> bool:
    """Whether ``path`` is written as a directory's: it ends in ``/`` or ``/.``. As in POSIX path
    resolution, such a path names a directory (a symbolic link to one is followed) or fails with
    ENOTDIR, whatever the call: ``stat("file/")``, ``remove("file/")`` and ``open("file/")`` never
    reach the file."""
    return path.endswith(("/", "/."))


class ExportPaths:
    """The paths of one export as :class:`~.api.Client` resolves them, under its credential."""

    def __init__(self, nfs: NFSv4, cred: Credential) -> None:
        self.nfs = nfs
        self.cred = cred
        self.root_fh = b""  # (set once the export is looked up)
        # directory path -> file handle (short-lived; a renamed directory is looked up again)
        self._dirs: TimedMap[str, bytes] = TimedMap(4096, 3.0)
        self._looking_up: dict[str, trio.Event] = {}  # directory path -> set when its lookup is answered

    def norm(self, path: str) -> str:
        return _parts(path)[0]

    async def dir_fh(self, dirpath: str, depth: int = 0) -> bytes:
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
            fh, attrs = await self.resolve(dirpath, follow=True, depth=depth)
            if not attrs.is_dir:
                raise NFS4Error(c.NFS4ERR_NOTDIR, c.OP_LOOKUP, dirpath)
            self._dirs[dirpath] = fh
        finally:
            done.set()
            if self._looking_up.get(dirpath) is done:
                del self._looking_up[dirpath]
        return fh

    async def resolve(self, path: str, follow: bool = True, depth: int = 0) -> tuple[bytes, FileAttrs]:
        """File handle and attributes of ``path``; symlinks inside the path are followed, the last
        component only with ``follow`` or when ``path`` is written as a directory's (a trailing
        ``/``: :func:`names_a_directory`), which must then be one (ENOTDIR)."""
        if depth > MAX_SYMLINKS:
            raise NFS4Error(c.NFS4ERR_SYMLINK, c.OP_LOOKUP, path)  # ELOOP-like: too many links
        want_dir = names_a_directory(path)
        path, parent, name = _parts(path)
        if path == "/":
            return self.root_fh, await self.nfs.names.getattr(self.root_fh, self.cred, path)
        try:
            # (the directory's handle known, as it mostly is: the one LOOKUP from it)
            dfh = self.root_fh if parent == "/" else self._dirs.get(parent)
            walked = await self.walk_to(path) if dfh is None else None
            if walked is not None:
                fh, attrs = walked
            else:
                if dfh is None:
                    dfh = await self.dir_fh(parent, depth)
                fh, attrs = await self.nfs.names.lookup_path(dfh, [name], self.cred, path)
        except NFS4Error as e:
            if e.status == c.NFS4ERR_STALE:
                self._dirs.clear()
            raise
        if (follow or want_dir) and attrs.is_symlink:
            target = (await self.nfs.directories.readlink(fh, self.cred, path)).decode("utf-8", "surrogateescape")
            nxt = target if target.startswith("/") else posixpath.join(parent, target)
            return await self.resolve(nxt + "/" if want_dir else nxt, True, depth + 1)
        if want_dir and not attrs.is_dir:
            raise NFS4Error(c.NFS4ERR_NOTDIR, c.OP_LOOKUP, path + "/")
        return fh, attrs

    async def walk_to(self, path: str) -> tuple[bytes, FileAttrs] | None:
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

    def forget(self, path: str) -> None:
        path = self.norm(path)
        for k in [k for k, _ in self._dirs.items() if k == path or k.startswith(path + "/")]:
            self._dirs.pop(k)

    async def target_or_none(self, path: str) -> FileAttrs | None:
        """What a symbolic link in a listing points to, or None when it leads nowhere: a link whose
        target cannot be resolved (absent, a name too long, a loop, no search permission) is a
        dangling entry of the listing, as ``os.scandir`` reports it, not a failure of the listing."""
        try:
            return (await self.resolve(path, follow=True))[1]
        except NFS4Error as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EACCES):
                return None
            raise

    async def stat_or_none(self, path: str, follow: bool = True) -> FileAttrs | None:
        try:
            return (await self.resolve(path, follow=follow))[1]
        except NFS4Error as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return None
            raise

    async def entries(self, path: str, npath: str, listing: list[ListedEntry]) -> list[DirEntry]:
        """The entries of the directory ``path`` (``npath`` normalised) as READDIR listed them; the
        handles of the directories in it are remembered, a symbolic link's target looked up."""
        out = []
        for raw, _, efh, listed in listing:
            name = str(raw, "utf-8", "surrogateescape")
            attrs = FileAttrs() if listed is None else file_attrs(listed)
            child = posixpath.join(path, name)
            if attrs.is_dir and efh:  # (a walk into it needs no LOOKUP: READDIR brought its handle)
                self._dirs[posixpath.join(npath, name)] = bytes(efh)
            target = await self.target_or_none(child) if attrs.is_symlink else None
            out.append(DirEntry(name, child, attrs, target))
        return out

    def split(self, path: str) -> tuple[str, str]:
        path, parent, name = _parts(path)
        if path == "/":
            raise NFS4Error(c.NFS4ERR_INVAL, None, path)
        return parent, name

    def parts(self, path: str) -> tuple[str, str, str]:
        """``path`` normalised, its directory and its last name (:meth:`norm` and :meth:`split` in
        one): NFS4ERR_INVAL for the root, which has no directory."""
        got = _parts(path)
        if got[0] == "/":
            raise NFS4Error(c.NFS4ERR_INVAL, None, "/")
        return got

    async def lstat_name(self, path: str) -> FileAttrs:
        """The attributes of the name ``path`` ends in, not followed even when written as a
        directory's: then it must be a directory itself (ENOTDIR for a file, or a symbolic link to a
        directory, as rmdir(2) and unlink(2) answer)."""
        attrs = (await self.resolve(self.norm(path), follow=False))[1]
        if names_a_directory(path) and not attrs.is_dir:
            raise NFS4Error(c.NFS4ERR_NOTDIR, None, self.norm(path) + "/")
        return attrs

    def no_file_at(self, path: str, status: int) -> None:
        """``status`` for a call that makes a non-directory at ``path`` written as a directory's."""
        if names_a_directory(path):
            raise NFS4Error(status, None, self.norm(path) + "/")
