"""``nfs://`` for fsspec, and so for pandas, pyarrow, xarray and Dask: ``pd.read_csv("nfs://host/export/x")``.

Registered with fsspec as the ``nfs`` protocol (the ``fsspec.specs`` entry point): nothing of ours needs
importing. A URL names the server and the path from its pseudo-root, ``nfs://host[:port]/export/dir/file``,
with the options of :func:`pynfsrdma.connect` in its query or in ``storage_options``: ``uid``, ``gid``,
``vers`` (default 4.2, 4.1 where the server has no 4.2), ``proto``, ``addrs``, ``nconnect``, ``timeout``,
``timeo``, ``hard`` ... (an unknown one is an error).

The file system pickles as its options, without sockets: each process (each Dask worker) connects on
first use, one NFS client (one client ID) per process, shared by its threads. Errors are the standard
FileNotFoundError, PermissionError, NotADirectoryError ... (OSError subclasses); a path handed to the
file system's calls written as a directory's (``file/``) is NotADirectoryError, as in ``os``
(``fsspec.open(url)`` strips the ``/`` before the file system sees it, as fsspec does for all).
"""

from __future__ import annotations

import atexit
import datetime
import errno
import os
import posixpath
import stat
import threading
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.utils import stringify_path

from ._client.api import glob_magic, names_a_directory
from ._client.attributes import FileAttrs
from ._client.file_object import RawFile
from ._client.sync import SyncClient
from ._client.url import URLError, check_url_options, parse_url
from ._session.errors import NotNFSv41Server

CONNECT_ARGS = ("timeout", "hard", "timeo", "retrans", "rsize", "wsize", "groups")

_clients: dict[tuple[Any, ...], SyncClient] = {}  # this process's clients, by their options
_clients_pid = os.getpid()
_clients_lock = threading.Lock()


def _close_all() -> None:
    if _clients_pid != os.getpid():
        return
    for client in list(_clients.values()):
        try:
            client.close()
        except Exception:
            pass
    _clients.clear()


atexit.register(_close_all)


def _client_for(key: tuple[Any, ...], url: str, explicit_vers: bool, kwargs: dict[str, Any]) -> SyncClient:
    """This process's client for these options (made on first use; a forked child makes its own)."""
    global _clients_pid
    with _clients_lock:
        if _clients_pid != os.getpid():  # a forked child: the parent's loop thread is not here
            _clients.clear()
            _clients_pid = os.getpid()
        client = _clients.get(key)
        if client is None or client.closed:
            try:
                client = SyncClient(url, **kwargs)
            except NotNFSv41Server:
                if explicit_vers:
                    raise
                client = SyncClient(url.replace("vers=4.2", "vers=4.1"), **kwargs)
            _clients[key] = client
        return client


class NFSFileSystem(AbstractFileSystem):
    """An NFSv4.1/4.2 server as an fsspec file system; paths are those of the server's pseudo-root
    (``/export/dir/file``)."""

    protocol: ClassVar[tuple[str, ...]] = ("nfs",)
    root_marker = "/"

    def __init__(self, host: str, port: int | None = None, *, uid: int | None = None, gid: int | None = None,
                 vers: str | None = None, proto: str = "tcp", **options: Any) -> None:
        super().__init__(host=host, port=port, uid=uid, gid=gid, vers=vers, proto=proto, **options)
        connect = {k: options.pop(k) for k in CONNECT_ARGS if k in options}
        for k in ("skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"):
            options.pop(k, None)
        query = {"vers": vers or "4.2", "proto": proto, **{k: _option_text(v) for k, v in options.items()}}
        if uid is not None:
            query["uid"] = str(uid)
        if gid is not None:
            query["gid"] = str(gid)
        hostpart = f"[{host}]" if ":" in host else host
        self.url = f"nfs://{hostpart}{f':{port}' if port else ''}/?" + "&".join(f"{k}={v}" for k, v in query.items())
        check_url_options(parse_url(self.url))  # a misspelt option fails here, not in a worker
        self._explicit_vers = vers is not None
        self._connect = connect
        self._key = (self.url, tuple(sorted(connect.items())))

    @property
    def client(self) -> SyncClient:
        """This process's blocking client for this server."""
        return _client_for(self._key, self.url, self._explicit_vers, self._connect)

    # -- URLs -------------------------------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        if path.startswith("nfs://"):
            path = urlsplit(path).path
        path = posixpath.normpath("/" + path.lstrip("/"))
        return "/" if path == "//" else path

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        parts = urlsplit(stringify_path(path))
        if parts.scheme != "nfs" or not parts.hostname:
            return {}
        out: dict[str, Any] = {"host": parts.hostname}
        if parts.port:
            out["port"] = parts.port
        for k, v in parse_qsl(parts.query, keep_blank_values=True):
            out["vers" if k == "version" else k] = int(v) if k in ("uid", "gid", "port") else v
        return out

    def _path(self, path: Any) -> str:
        """The path to hand to the client: as :meth:`_strip_protocol` gives it, with the trailing ``/``
        of a path written as a directory's kept, so that the client answers ENOTDIR for ``file/``
        (fsspec strips it from the names it lists and compares)."""
        stripped: str = self._strip_protocol(path)
        raw = stringify_path(path)
        written = urlsplit(raw).path if raw.startswith("nfs://") else raw
        return stripped + "/" if stripped != "/" and names_a_directory(written) else stripped

    def unstrip_protocol(self, name: str) -> str:
        u = urlsplit(self.url)
        return f"nfs://{u.netloc}{self._strip_protocol(name)}"

    # -- metadata ---------------------------------------------------------------------------------------
    def _details(self, path: str, attrs: FileAttrs, link: FileAttrs | None = None) -> dict[str, Any]:
        return {
            "name": path,
            "size": attrs.size,
            "type": "directory" if attrs.is_dir else "file" if stat.S_ISREG(attrs.st_mode) else "other",
            "mode": attrs.st_mode,
            "uid": attrs.uid,
            "gid": attrs.gid,
            "nlink": attrs.nlink,
            "ino": attrs.fileid,
            "mtime": attrs.st_mtime,
            "mtime_ns": attrs.mtime_ns,
            "change": attrs.change,
            "islink": link is not None,
        }

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path, given = self._strip_protocol(path), self._path(path)
        lattrs = self.client.lstat(given)
        if lattrs.is_symlink:
            try:
                return self._details(path, self.client.stat(given), lattrs)
            except FileNotFoundError:
                pass
        return self._details(path, lattrs)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        given, path = path, self._strip_protocol(path)
        if not self.client.isdir(path):
            info = self.info(given)
            return [info] if detail else [path]
        out: list[Any] = []
        for e in self.client.scandir(path):
            name = posixpath.join(path, e.name)
            if not detail:
                out.append(name)
            elif e.is_symlink():
                try:
                    out.append(self._details(name, e.stat(), e.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    out.append(self._details(name, e.stat(follow_symlinks=False)))
            else:
                out.append(self._details(name, e.stat()))
        return out

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self.client.exists(self._path(path))

    def isdir(self, path: str) -> bool:
        return self.client.isdir(self._path(path))

    def isfile(self, path: str) -> bool:
        return self.client.isfile(self._path(path))

    def modified(self, path: str) -> datetime.datetime:
        ns = self.client.stat(self._path(path)).mtime_ns
        return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC)

    def checksum(self, path: str) -> int:
        """Changes whenever the file does (the server's change attribute, with the file's identity)."""
        a = self.client.stat(self._path(path))
        return hash((a.fsid, a.fileid, a.change, a.size))

    # -- data -------------------------------------------------------------------------------------------
    def _open(self, path: str, mode: str = "rb", block_size: int | str | None = None, autocommit: bool = True,
              cache_options: dict[str, Any] | None = None, **kwargs: Any) -> NFSFile:
        return NFSFile(self, self._strip_protocol(path), mode, block_size or "default",
                       autocommit=autocommit, cache_options=cache_options, **kwargs)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        path = self._path(path)
        if start is None and end is None:
            return self.client.read_file(path)
        with self.client.open(path, "rb", buffering=0) as f:
            assert isinstance(f, RawFile)
            size = f.seek(0, os.SEEK_END)
            lo = _clamp(start or 0, size)
            hi = size if end is None else _clamp(end, size)
            return f.pread(lo, max(hi - lo, 0))

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        path = self._path(path)
        if mode == "create" and self.client.lexists(path):
            raise FileExistsError(path)
        self.client.write_file(path, value)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """Copy on the server (NFSv4.2 COPY) where it can; else through this client."""
        src, dst = self._path(path1), self._path(path2)
        if self.client.isdir(src):
            self.makedirs(dst, exist_ok=True)
            return
        self.client.copy_file(src, dst, perm=self.client.stat(src).mode)

    # -- namespace --------------------------------------------------------------------------------------
    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        path = self._path(path)
        if create_parents:
            self.client.makedirs(path, exist_ok=False)
        else:
            self.client.mkdir(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self.client.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def rmdir(self, path: str) -> None:
        self.client.rmdir(self._path(path))

    def rm_file(self, path: str) -> None:
        self.client.unlink(self._path(path))

    def expand_path(self, path: Any, recursive: bool = False, maxdepth: int | None = None,
                    **kwargs: Any) -> list[str]:
        """As fsspec's, after checking that each path written as a directory's (``file/``) names one
        (ENOTDIR): ``rm``, ``cat``, ``get`` and ``copy`` see the paths stripped of their ``/``."""
        if not isinstance(path, str | os.PathLike):  # (fsspec hands a single path back here as a list)
            for p in path:
                given = self._path(p)
                if given.endswith("/") and not glob_magic(given):
                    self.client.stat(given)
        return super().expand_path(path, recursive=recursive, maxdepth=maxdepth, **kwargs)

    def open(self, path: Any, mode: str = "rb", **kwargs: Any) -> Any:
        """As fsspec's; a path written as a directory's (``file/``) is never opened as a file: ENOTDIR
        (a file there) or EISDIR, as open(2) answers."""
        given = self._path(path)
        if given.endswith("/"):
            if "r" in mode and "+" not in mode:
                self.client.stat(given)  # ENOTDIR or ENOENT; a directory fails to open below
            else:
                raise IsADirectoryError(errno.EISDIR, "Is a directory", given)
        return super().open(path, mode, **kwargs)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        for p in reversed(self.expand_path(path, recursive=recursive, maxdepth=maxdepth)):
            p = self._strip_protocol(p)
            if self.client.lstat(p).is_dir:
                if not recursive:
                    raise IsADirectoryError(21, "Is a directory (use recursive=True)", p)
                self.client.rmdir(p)
            else:
                self.client.remove(p)
        self.invalidate_cache()

    def mv(self, path1: Any, path2: Any, recursive: bool = False, maxdepth: int | None = None,
           **kwargs: Any) -> None:
        """Rename within the server (one RENAME, however large the file or directory)."""
        if isinstance(path1, list) or isinstance(path2, list):
            super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)
            return
        self.client.rename(self._path(path1), self._path(path2))
        self.invalidate_cache()

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        path = self._path(path)
        if truncate or not self.client.exists(path):
            self.client.write_file(path, b"")
        else:
            self.client.utime(path, "now", "now")


class NFSFile(AbstractBufferedFile):
    """A file opened through fsspec: ranged reads (fsspec's read cache in front), writes sent in blocks."""

    DEFAULT_BLOCK_SIZE = 8 << 20

    def __init__(self, fs: NFSFileSystem, path: str, mode: str = "rb", block_size: int | str = "default",
                 **kwargs: Any) -> None:
        self._raw: RawFile | None = None
        if mode == "xb" and fs.client.lexists(path):
            raise FileExistsError(errno.EEXIST, "File exists", path)
        super().__init__(fs, path, mode, block_size, **kwargs)

    def _raw_file(self, mode: str) -> RawFile:
        if self._raw is None:
            raw = self.fs.client.open(self.path, mode, buffering=0)
            assert isinstance(raw, RawFile)
            self._raw = raw
        return self._raw

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self._raw_file("rb").pread(start, end - start)

    def _initiate_upload(self) -> None:
        raw = self._raw_file({"wb": "wb", "xb": "xb", "ab": "ab"}[self.mode])
        if self.mode == "ab":
            self.offset = raw.seek(0, os.SEEK_END)

    def _upload_chunk(self, final: bool = False) -> bool:
        raw = self._raw_file("wb")
        view = self.buffer.getbuffer()
        try:
            if view.nbytes:
                raw.pwrite(self.offset, view)
        finally:
            view.release()
        if final:
            self._close_raw()
        return True

    def _close_raw(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None:
            raw.close()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._close_raw()


def _clamp(pos: int, size: int) -> int:
    return max(size + pos, 0) if pos < 0 else min(pos, size)


def _option_text(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, list | tuple):
        return ",".join(map(str, v))
    return str(v)


__all__ = ["NFSFile", "NFSFileSystem", "URLError"]
