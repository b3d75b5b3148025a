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
import uuid
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.transaction import Transaction
from fsspec.utils import stringify_path

from ._client.api import Client, HeldFile
from ._client.attributes import FileAttrs
from ._client.batched import MERGE_GAP
from ._client.dir_entry import DirEntry
from ._client.export_paths import names_a_directory
from ._client.file_object import RawFile
from ._client.sync import SyncClient, process_id
from ._client.trees import glob_magic
from ._client.url import URLError, check_url_options, parse_url, reads_per_compound
from ._session.errors import NotNFSv41Server

CONNECT_ARGS = ("timeout", "hard", "timeo", "retrans", "rsize", "wsize", "groups")
CLEANED_PATHS = 4096  # paths as given -> as :meth:`NFSFileSystem._path` gives them, kept (then forgotten all at once)

_clients: dict[tuple[Any, ...], SyncClient] = {}  # this process's clients, by their options
_clients_pid = process_id()
_clients_lock = threading.Lock()
_cleaned: dict[str, str] = {}  # (a pure function of the string: shared by every file system)


def _close_all() -> None:
    if _clients_pid != process_id():
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
        if _clients_pid != process_id():  # a forked child: the parent's loop thread is not here
            _clients.clear()
            _clients_pid = process_id()
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


def _listing_failed(error: OSError, on_error: Any) -> None:
    """A directory of a walk could not be listed: raise, tell ``on_error``, or leave it out."""
    if on_error == "raise":
        raise error
    if callable(on_error):
        on_error(error)


class StagingTransaction(Transaction):
    """fsspec's transaction, which its file system knows to be running (``in_transaction``): the
    files written meanwhile are staged (:class:`NFSFile`)."""

    def start(self) -> None:
        super().start()
        self.fs.in_transaction = True

    def complete(self, commit: bool = True) -> None:
        fs = self.fs
        try:
            super().complete(commit)
        finally:
            if fs is not None:
                fs.in_transaction = False


class NFSFileSystem(AbstractFileSystem):
    """An NFSv4.1/4.2 server as an fsspec file system; paths are those of the server's pseudo-root
    (``/export/dir/file``)."""

    protocol: ClassVar[tuple[str, ...]] = ("nfs",)
    root_marker = "/"
    transaction_type = StagingTransaction
    in_transaction = False  # a transaction runs: files written are staged until it ends

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
        url = parse_url(self.url)
        check_url_options(url)  # a misspelt option fails here, not in a worker
        reads_per_compound(url)
        self._explicit_vers = vers is not None
        self._connect = connect
        self._key = (self.url, tuple(sorted(connect.items())))
        self._held: tuple[int, SyncClient] | None = None  # the client last used, and the process it is of

    def start_transaction(self) -> Transaction:
        t = super().start_transaction()
        self.in_transaction = True
        return t

    @property
    def client(self) -> SyncClient:
        """This process's blocking client for this server (kept at hand while it is open)."""
        held, pid = self._held, process_id()
        if held is not None and held[0] == pid and not held[1].closed:
            return held[1]
        client = _client_for(self._key, self.url, self._explicit_vers, self._connect)
        self._held = (pid, client)
        return client

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
        (fsspec strips it from the names it lists and compares). A string is cleaned once: the
        answer is kept for the next call with it (:data:`CLEANED_PATHS` of them)."""
        if type(path) is str:
            cleaned = _cleaned.get(path)
            if cleaned is not None:
                return cleaned
        stripped: str = self._strip_protocol(path)
        raw = stringify_path(path)
        written = urlsplit(raw).path if raw.startswith("nfs://") else raw
        cleaned = stripped + "/" if stripped != "/" and names_a_directory(written) else stripped
        if type(path) is str:
            if len(_cleaned) >= CLEANED_PATHS:
                _cleaned.clear()
            _cleaned[path] = cleaned
        return cleaned

    def unstrip_protocol(self, name: str) -> str:
        u = urlsplit(self.url)
        return f"nfs://{u.netloc}{self._strip_protocol(name)}"

    # -- metadata ---------------------------------------------------------------------------------------
    def _details(self, path: str, attrs: FileAttrs, link: FileAttrs | None = None) -> dict[str, Any]:
        mode = attrs.st_mode
        return {
            "name": path,
            "size": attrs.size,
            "type": "directory" if attrs.is_dir else "file" if stat.S_ISREG(mode) else "other",
            "mode": mode,
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
        given = self._path(path)
        path = given[:-1] if len(given) > 1 and given.endswith("/") else given  # (as _strip_protocol has it)
        attrs, link = self.client.run(_attrs_and_link, given)
        return self._details(path, attrs, link)

    def _entry_details(self, name: str, e: DirEntry) -> dict[str, Any]:
        if not e.is_symlink():
            return self._details(name, e.stat())
        try:
            return self._details(name, e.stat(), e.stat(follow_symlinks=False))
        except FileNotFoundError:
            return self._details(name, e.stat(follow_symlinks=False))

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        """The entries of a directory (one READDIR, with their attributes), or a file's own."""
        given, path = path, self._strip_protocol(path)
        try:
            entries = self.client.scandir(path)
        except NotADirectoryError:
            info = self.info(given)
            return [info] if detail else [path]
        names = [(posixpath.join(path, e.name), e) for e in entries]
        return [self._entry_details(n, e) for n, e in names] if detail else [n for n, _ in names]

    def walk(self, path: str, maxdepth: int | None = None, topdown: bool = True, on_error: Any = "omit",
             **kwargs: Any) -> Any:
        """(path, dirs, files) for ``path`` and each directory below it, as fsspec's walk (with
        ``detail`` dicts of names to info), the directories of each level listed all at once (as
        many READDIRs in flight as the session's slots take; level by level, so a level's
        directories come before the next level's). Topdown, pruning ``dirs`` in place prunes the
        walk. A symbolic link to a directory is in ``dirs`` and not walked into (as os.walk).
        ``on_error`` ("omit", "raise" or a callable given the OSError) applies at every level."""
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        path = self._strip_protocol(path)
        detail = kwargs.pop("detail", False)
        try:
            top = self.ls(path, detail=True)
        except OSError as e:
            _listing_failed(e, on_error)
            return
        if len(top) == 1 and top[0]["name"] == path and top[0]["type"] != "directory":
            yield path, ({} if detail else []), ({"": top[0]} if detail else [""])
            return
        level = [(path, top)]
        depth = 1
        below_up: list[tuple[str, Any, Any]] = []  # bottom-up: everything, yielded deepest level first
        while level:
            walked: list[tuple[str, Any, dict[str, str]]] = []
            out: list[tuple[str, Any, Any]] = []
            for d, listing in level:
                dirs: dict[str, Any] = {}
                files: dict[str, Any] = {}
                into: dict[str, str] = {}
                for info in listing:
                    name = info["name"].rsplit("/", 1)[-1]
                    if info["type"] == "directory":
                        dirs[name] = info
                        if not info["islink"]:
                            into[name] = info["name"]
                    else:
                        files[name] = info
                names = (dirs, files) if detail else (list(dirs), list(files))
                out.append((d, *names))
                walked.append((d, names[0], into))
            if topdown:
                yield from out
            else:
                below_up[:0] = out
            depth += 1
            if maxdepth is not None and depth > maxdepth:
                break
            nxt = [into[n] for _, kept, into in walked for n in kept if n in into]  # (what the caller kept)
            level = []
            for d, entries in zip(nxt, self.client.scandir_many(nxt) if nxt else [], strict=True):
                if isinstance(entries, Exception):  # (gone or unreadable meanwhile)
                    if not isinstance(entries, OSError):
                        raise entries
                    _listing_failed(entries, on_error)
                    continue
                level.append((d, [self._entry_details(posixpath.join(d, e.name), e) for e in entries]))
        if not topdown:
            yield from below_up

    def find(self, path: str, maxdepth: int | None = None, withdirs: bool = False, detail: bool = False,
             **kwargs: Any) -> Any:
        """Everything below ``path`` (sorted; with ``withdirs`` its directories too), as fsspec's find:
        the directories of each level listed all at once (as many READDIRs in flight as the
        session's slots take). Symbolic links to directories are listed, not followed."""
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        path = self._strip_protocol(path)
        out: dict[str, dict[str, Any]] = {}
        try:
            top = self.info(path)
        except FileNotFoundError:
            return {} if detail else []
        if top["type"] != "directory" or withdirs:
            out[path] = top
        level = [path] if top["type"] == "directory" else []
        depth = 1
        while level and (maxdepth is None or depth <= maxdepth):
            below: list[str] = []
            for d, entries in zip(level, self.client.scandir_many(level), strict=True):
                if isinstance(entries, Exception):  # (gone or unreadable meanwhile: left out, as fsspec's walk does)
                    continue
                for e in entries:
                    name = posixpath.join(d, e.name)
                    info = self._entry_details(name, e)
                    if info["type"] == "directory" and not e.is_symlink():
                        below.append(name)
                        if withdirs:
                            out[name] = info
                    else:
                        out[name] = info
            level = below
            depth += 1
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def du(self, path: str, total: bool = True, maxdepth: int | None = None, withdirs: bool = False,
           **kwargs: Any) -> Any:
        """The sizes of the files below ``path`` (and with ``withdirs`` of its directories), from the
        listings :meth:`find` made (no GETATTR per file): their sum, or {path: size}."""
        sizes = {n: i["size"] for n, i in self.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=True).items()}
        return sum(sizes.values()) if total else sizes

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self.client.exists(self._path(path))

    def isdir(self, path: str) -> bool:
        return self.client.isdir(self._path(path))

    def isfile(self, path: str) -> bool:
        return self.client.isfile(self._path(path))

    def modified(self, path: str) -> datetime.datetime:
        ns = self.client.stat(self._path(path)).mtime_ns
        return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC)

    def created(self, path: str) -> datetime.datetime:
        """When the file was created (time_create); on a server that keeps no creation times, when
        its attributes last changed (ctime), as fsspec's local file system reports it."""
        ns = self.client.run(_created_or_changed, self._path(path))
        return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC)

    def checksum(self, path: str) -> int:
        """Changes whenever the file does (the server's change attribute, with the file's identity)."""
        a = self.client.stat(self._path(path))
        return hash((a.fsid, a.fileid, a.change, a.size))

    # -- data -------------------------------------------------------------------------------------------
    def _open(self, path: str, mode: str = "rb", block_size: int | str | None = None, autocommit: bool = True,
              cache_options: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if "+" in mode:  # read and write: the client's own file object (io.BufferedRandom)
            if not autocommit and "r" not in mode:
                raise ValueError(f"mode {mode!r} cannot be staged in a transaction: write the file with 'wb'")
            return self.client.open(path, mode)
        return NFSFile(self, path, mode, block_size or "default", autocommit=autocommit,
                       cache_options=cache_options, **kwargs)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        """The file's bytes, or those from ``start`` to ``end`` (negative: from the end): one COMPOUND
        (LOOKUP, GETATTR, READ) up to rsize bytes; a negative position asks the size first (in the
        same hand-over to the client's loop)."""
        path = self._path(path)
        lo = start or 0
        if lo < 0 or (end is not None and end < 0):
            return self.client.run(_read_from_end, path, lo, end)
        return self.client.read_bytes(path, lo, None if end is None else max(end - lo, 0))

    def cat_ranges(self, paths: list[str], starts: Any, ends: Any, max_gap: int | None = None,
                   on_error: str = "return", **kwargs: Any) -> list[Any]:
        """The byte ranges, all at once (how fsspec's parquet reader fetches column chunks): a file's
        ranges sorted, those that overlap or lie at most ``max_gap`` bytes apart (None: 64,000, as
        fsspec's parquet reader merges) read by one READ up to rsize, each range sliced from its
        data; the READs two (of whole pages) to a COMPOUND, all in flight together (one, of the
        span's bytes, with ``batchreads=0``, as many as fit with ``batchreads=1``), the files side
        by side."""
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        starts = starts if isinstance(starts, list) else [starts] * len(paths)
        ends = ends if isinstance(ends, list) else [ends] * len(paths)
        if len(starts) != len(paths) or len(ends) != len(paths):
            raise ValueError("paths, starts and ends must be as long as each other")
        paths = [self._path(p) for p in paths]
        sizes: dict[str, Any] = {}
        for p, s, e in zip(paths, starts, ends, strict=True):
            if ((s or 0) < 0 or (e is not None and e < 0)) and p not in sizes:
                try:
                    sizes[p] = self.client.stat(p).size
                except OSError as stat_error:
                    sizes[p] = stat_error
        ranges: list[tuple[str, int, int | None]] = []
        failed: dict[int, Exception] = {}
        for i, (p, s, e) in enumerate(zip(paths, starts, ends, strict=True)):
            lo = s or 0
            if p in sizes:
                size = sizes[p]
                if isinstance(size, Exception):
                    failed[i] = size
                    ranges.append((p, 0, 0))
                    continue
                lo = _clamp(lo, size)
                e = size if e is None else _clamp(e, size)
            ranges.append((p, lo, None if e is None else max(e - lo, 0)))
        out: list[Any] = self.client.read_ranges(ranges, MERGE_GAP if max_gap is None else max_gap)
        for i, error in failed.items():
            out[i] = error
        if on_error != "return":
            for r in out:
                if isinstance(r, Exception):
                    raise r
        return out

    def cat(self, path: Any, recursive: bool = False, on_error: str = "raise", **kwargs: Any) -> Any:
        """The bytes of each file, as fsspec's cat: several paths are read all at once."""
        paths = self.expand_path(path, recursive=recursive, **kwargs)
        if len(paths) == 1 and not isinstance(path, list) and paths[0] == self._strip_protocol(path):
            return self.cat_file(paths[0])
        got = self.client.read_ranges([(p, 0, None) for p in paths])
        out: dict[str, Any] = {}
        for p, data in zip(paths, got, strict=True):
            if isinstance(data, IsADirectoryError) and recursive:
                continue  # (the directories the paths were found in)
            if isinstance(data, Exception):
                if on_error == "raise":
                    raise data
                if on_error == "omit":
                    continue
            out[p] = data
        return out

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """Write ``value`` as the whole file; ``mode="create"``: only if nothing has the name (an
        exclusive OPEN: FileExistsError, errno EEXIST, when something has). In a transaction the
        file is staged and appears at its end (:class:`NFSFile`)."""
        path = self._path(path)
        if mode not in ("overwrite", "create"):
            raise ValueError(f"pipe_file mode {mode!r}: 'overwrite' or 'create'")
        if self.in_transaction:
            with self.open(path, "xb" if mode == "create" else "wb") as f:
                f.write(value)
            return
        self.client.write_file(path, value, exclusive=mode == "create")

    def pipe(self, path: Any, value: bytes | None = None, **kwargs: Any) -> None:
        """Put ``value`` at ``path``, or each {path: bytes} of a dict: the files of a dict all at once
        (each one COMPOUND when small), outside a transaction."""
        if not isinstance(path, dict) or self.in_transaction:
            super().pipe(path, value, **kwargs)
            return
        mode = kwargs.get("mode", "overwrite")
        if mode not in ("overwrite", "create"):
            raise ValueError(f"pipe_file mode {mode!r}: 'overwrite' or 'create'")
        files = [(self._path(p), v) for p, v in path.items()]
        for r in self.client.write_files(files, exclusive=mode == "create"):
            if r is not None:
                raise r

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """Copy on the server (NFSv4.2 COPY) where it can; else through this client."""
        self.client.run(_copy, self._path(path1), self._path(path2))

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
        """Remove files (and with ``recursive`` directories and what is in them): the names of one
        depth all at once, the deepest first, several REMOVEs of a directory to a COMPOUND."""
        paths = [self._strip_protocol(p) for p in self.expand_path(path, recursive=recursive, maxdepth=maxdepth)]
        if not recursive:
            for p in paths:
                if self.client.lstat(p).is_dir:
                    raise IsADirectoryError(21, "Is a directory (use recursive=True)", p)
        by_depth: dict[int, list[str]] = {}
        for p in paths:
            by_depth.setdefault(p.count("/"), []).append(p)
        try:
            for depth in sorted(by_depth, reverse=True):
                for r in self.client.remove_many(by_depth[depth]):
                    if r is not None:
                        raise r
        finally:
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
        if truncate:
            self.client.write_file(path, b"")
        else:
            self.client.run(_touch, path)


class NFSFile(AbstractBufferedFile):
    """A file opened through fsspec: ranged reads (fsspec's read cache in front), each one COMPOUND with
    no open kept, the first by name, the others by the file handle it learned (a name replaced by
    RENAME meanwhile does not mix two files' bytes); writes sent in blocks through an open file.

    "xb" creates the file by an exclusive OPEN when it is opened (FileExistsError, errno EEXIST, if
    the name is taken). In a transaction (``with fs.transaction:``) a file written goes to a
    temporary name in its directory (``.NAME.XXXXXXXXXXXX.part``) and appears under its own name by
    RENAME when the transaction ends (by LINK for "xb": EEXIST if the name was taken meanwhile);
    when the transaction fails, the temporary file is removed and the name is left as it was."""

    DEFAULT_BLOCK_SIZE = 8 << 20

    def __init__(self, fs: NFSFileSystem, path: str, mode: str = "rb", block_size: int | str = "default",
                 **kwargs: Any) -> None:
        self._raw: RawFile | None = None
        self._staged: str | None = None  # in a transaction: the temporary name written to
        self._held = HeldFile(path)  # "rb": the file its ranges read, by handle once the first learned it
        super().__init__(fs, path, mode, block_size, **kwargs)
        if mode == "xb" and self.autocommit:
            try:
                self._raw_file("xb")
            except BaseException:
                self.closed = True  # (nothing to flush when it goes)
                raise

    def _raw_file(self, mode: str, path: str | None = None) -> RawFile:
        if self._raw is None:
            raw = self.fs.client.open(path or self.path, mode, buffering=0)
            assert isinstance(raw, RawFile)
            self._raw = raw
        return self._raw

    def _fetch_range(self, start: int, end: int) -> bytes:
        """A range read, one COMPOUND with no OPEN and no CLOSE (fsspec's files are read by range, as an
        object store's are): the first by name, learning the file handle, the others by that handle
        (:class:`~pynfsrdma._client.api.HeldFile`): the name replaced meanwhile, the file read is still
        the one first read, or FileNotFoundError once the server let it go; removed, FileNotFoundError."""
        return self.fs.client.run(self._held.read, start, end - start)

    def _initiate_upload(self) -> None:
        if not self.autocommit:
            self._stage()
            return
        raw = self._raw_file({"wb": "wb", "xb": "xb", "ab": "ab"}[self.mode])
        if self.mode == "ab":
            self.offset = raw.seek(0, os.SEEK_END)

    def _stage(self) -> None:
        """Open the temporary file a transaction writes to (an exclusive OPEN of a new name); for "ab",
        a copy of the file as it is."""
        client = self.fs.client
        staged = _staging_name(self.path)
        if self.mode == "ab" and client.lexists(self.path):
            client.copy_file(self.path, staged, perm=client.stat(self.path).mode)
            self._staged = staged
            self.offset = self._raw_file("ab", staged).seek(0, os.SEEK_END)
        else:
            self._raw_file("xb", staged)
            self._staged = staged

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

    def commit(self) -> None:
        """The end of the transaction: the staged file takes its name (RENAME; LINK for "xb")."""
        if not self.closed:
            self.close()
        staged = self._staged
        if staged is None:
            return
        client = self.fs.client
        if self.mode == "xb":
            client.link(staged, self.path)
            client.remove(staged)
        else:
            client.rename(staged, self.path)
        self._staged = None
        self.fs.invalidate_cache(self.path)

    def discard(self) -> None:
        """The transaction failed: the staged file goes, nothing it wrote is seen."""
        self._close_raw()
        self.closed = True
        staged, self._staged = self._staged, None
        if staged is not None:
            try:
                self.fs.client.remove(staged)
            except FileNotFoundError:
                pass

    def _close_raw(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None:
            raw.close()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._close_raw()


# -- several calls of the client in one hand-over to its loop (each blocking call is one) --------------
async def _attrs_and_link(client: Client, path: str) -> tuple[FileAttrs, FileAttrs | None]:
    """The attributes of ``path`` and, for a symbolic link, of its target: (target's, link's); a
    dangling link: (link's, None)."""
    lattrs = await client.lstat(path)
    if lattrs.is_symlink:
        try:
            return await client.stat(path), lattrs
        except FileNotFoundError:
            pass
    return lattrs, None


async def _read_from_end(client: Client, path: str, start: int, end: int | None) -> bytes:
    """The bytes from ``start`` to ``end`` with a position counted from the end (negative)."""
    size = (await client.stat(path)).size
    lo = _clamp(start, size)
    hi = size if end is None else _clamp(end, size)
    return await client.read_bytes(path, lo, max(hi - lo, 0))


async def _created_or_changed(client: Client, path: str) -> int:
    """time_create, or where the server keeps none, ctime (ns)."""
    ns = await client.created(path)
    return (await client.stat(path)).ctime_ns if ns is None else ns


async def _copy(client: Client, src: str, dst: str) -> None:
    """Copy a file on the server (a directory: made at ``dst``), with its permissions."""
    attrs = await client.stat(src)
    if attrs.is_dir:
        await client.makedirs(dst, exist_ok=True)
        return
    await client.copy_file(src, dst, perm=attrs.mode)


async def _touch(client: Client, path: str) -> None:
    """A file's times set to now, or an empty file where none is."""
    if await client.exists(path):
        await client.utime(path, "now", "now")
    else:
        await client.write_file(path, b"")


def _staging_name(path: str) -> str:
    """A new temporary name beside ``path`` for a file written in a transaction (within NAME_MAX)."""
    parent, name = posixpath.split(path)
    return posixpath.join(parent, f".{name[:200]}.{uuid.uuid4().hex[:12]}.part")


def _clamp(pos: int, size: int) -> int:
    return max(size + pos, 0) if pos < 0 else min(pos, size)


def _option_text(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, list | tuple):
        return ",".join(map(str, v))
    return str(v)


__all__ = ["NFSFile", "NFSFileSystem", "URLError"]
