"""Whole trees of a client's export: ``walk`` and ``glob`` over the listings, ``makedirs`` and
``rmtree`` as ``os`` and ``shutil`` answer, made of the client's own one-path calls.
"""

from __future__ import annotations

import errno
import fnmatch
import posixpath
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .attributes import FileAttrs
from .dir_entry import DirEntry
from .export_paths import ExportPaths


def glob_magic(name: str) -> bool:
    return any(ch in name for ch in "*?[")


_Level = tuple[str, list[str], list[str], set[str]]  # a directory, its dirnames and filenames, its links


class Walk:
    """``os.walk``'s order over listings its caller makes (the blocking client's and the async
    one's): :meth:`next_directory` says which directory to list, :meth:`listed` takes its entries
    (or :meth:`failed` the error, handed to ``onerror``), and :meth:`results` hands out the
    ``(dirpath, dirnames, filenames)`` due. Top down, a caller may prune ``dirnames`` before it
    asks for the next result: only the names left are walked into; links to directories are walked
    into with ``followlinks`` only."""

    def __init__(self, top: str, topdown: bool, onerror: Callable[[OSError], Any] | None,
                 followlinks: bool) -> None:
        self.topdown = topdown
        self.onerror = onerror
        self.followlinks = followlinks
        # directories to list, and (bottom up) the results due once those above them in the stack are
        self._stack: list[str | _Level] = [top]
        self._due: list[_Level] = []

    def next_directory(self) -> str | None:
        """The directory to list next (None: the walk is over, once :meth:`results` are handed out)."""
        while self._stack:
            item = self._stack.pop()
            if isinstance(item, str):
                return item
            self._due.append(item)
        return None

    def listed(self, path: str, entries: list[DirEntry]) -> None:
        dirs = [e.name for e in entries if e.is_dir()]
        files = [e.name for e in entries if not e.is_dir()]
        level = (path, dirs, files, {e.name for e in entries if e.is_symlink()})
        if self.topdown:
            self._due.append(level)
        else:
            self._stack.append(level)
            self._walk_into(level)

    def failed(self, e: OSError) -> None:
        if self.onerror is not None:
            self.onerror(e)

    def results(self) -> Iterator[tuple[str, list[str], list[str]]]:
        while self._due:
            level = self._due.pop(0)
            path, dirs, files, _ = level
            yield path, dirs, files
            if self.topdown:
                self._walk_into(level)

    def _walk_into(self, level: _Level) -> None:
        path, dirs, _, links = level
        self._stack.extend(
            posixpath.join(path, name) for name in reversed(dirs) if self.followlinks or name not in links)



class Trees:
    """A client's whole-tree calls, over its one-path calls: ``scandir(path)``, ``lexists(path)``,
    ``stat(path)``, ``mkdir(path, mode)`` and ``remove_name(path)``."""

    def __init__(self, paths: ExportPaths, scandir: Callable[[str], Awaitable[list[DirEntry]]],
                 lexists: Callable[[str], Awaitable[bool]], stat: Callable[[str], Awaitable[FileAttrs]],
                 mkdir: Callable[[str, int], Awaitable[FileAttrs]],
                 remove_name: Callable[[str], Awaitable[None]]) -> None:
        self.paths = paths
        self.scandir = scandir
        self.lexists = lexists
        self.stat = stat
        self.mkdir = mkdir
        self._remove_name = remove_name

    async def walk(self, top: str = "/", topdown: bool = True, onerror: Callable[[OSError], Any] | None = None,
                   followlinks: bool = False) -> AsyncIterator[tuple[str, list[str], list[str]]]:
        """:meth:`.api.Client.walk`."""
        walk = Walk(top, topdown, onerror, followlinks)
        while (path := walk.next_directory()) is not None:
            try:
                walk.listed(path, await self.scandir(path))
            except OSError as e:
                walk.failed(e)
            for result in walk.results():
                yield result
        for result in walk.results():
            yield result

    async def glob(self, pattern: str) -> list[str]:
        """:meth:`.api.Client.glob`."""
        parts = [p for p in self.paths.norm(pattern).split("/") if p]
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

    async def makedirs(self, path: str, mode: int = 0o755, exist_ok: bool = False) -> None:
        """:meth:`.api.Client.makedirs`."""
        target = self.paths.norm(path)
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

    async def rmtree(self, path: str) -> None:
        """:meth:`.api.Client.rmtree`."""
        attrs = await self.paths.lstat_name(path)
        if attrs.is_symlink:
            raise OSError(errno.ENOTDIR, "Cannot call rmtree on a symbolic link", self.paths.norm(path))
        if not attrs.is_dir:
            raise NFS4Error(c.NFS4ERR_NOTDIR, c.OP_REMOVE, self.paths.norm(path))
        for e in await self.scandir(self.paths.norm(path)):
            if e.is_dir(follow_symlinks=False):
                await self.rmtree(e.path)
            else:
                await self._remove_name(e.path)
        await self._remove_name(path)
