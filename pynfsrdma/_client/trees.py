"""Whole trees of a client's export: ``walk`` and ``glob`` over the listings, ``makedirs`` and
``rmtree`` as ``os`` and ``shutil`` answer, made of the client's own one-path calls.
"""

from __future__ import annotations

import errno
import fnmatch
import posixpath
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .attributes import FileAttrs
from .dir_entry import DirEntry
from .export_paths import ExportPaths


def glob_magic(name: str) -> bool:
    return any(ch in name for ch in "*?[")


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
