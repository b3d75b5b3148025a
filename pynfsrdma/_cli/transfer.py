"""``get``, ``put`` and ``cp``: a file, or with ``-r`` a tree, keeping cp(1)'s word.

- A destination that is an existing directory receives the source under its own name.
- A destination written with a trailing ``/`` means a directory: if there is none, nothing is written
  and the error says so.
- A file is never copied onto itself.
- A transfer cut short (Ctrl-C, an error) removes the partial copy and says so; one that stopped
  before its destination was created (or truncated) says only what stopped it, and leaves what was
  there as it was.
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from .._client.api import Client
from .._client.attributes import FileAttrs
from .progress import ProgressBar

PROG = "pynfsrdma"


@dataclass
class Totals:
    files: int = 0
    bytes: int = 0


async def _remote_attrs(client: Client, path: str) -> FileAttrs | None:
    try:
        return await client.stat(path)
    except FileNotFoundError:
        return None


async def remote_destination(client: Client, dst: str, name: str) -> str:
    """Where ``name`` goes for the remote destination ``dst``."""
    a = await _remote_attrs(client, dst)
    if a is not None and a.is_dir:
        return posixpath.join(dst, name)
    if dst.endswith("/"):
        if a is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", dst)
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", dst)
    return dst


def local_destination(dst: str, name: str) -> str:
    """Where ``name`` goes for the local destination ``dst``."""
    if os.path.isdir(dst):
        return os.path.join(dst, name)
    if dst.endswith("/"):
        # as cp(1): "Not a directory" when there is no such directory (or a file by that name), "No such
        # file or directory" when the directory it would be in is missing too
        parent = os.path.dirname(dst.rstrip("/")) or "."
        if not os.path.lexists(dst.rstrip("/") or "/") and not os.path.isdir(parent):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", dst)
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", dst)
    return dst


Todo = list[tuple[str, str, int]]  # (source, destination, size)


async def _each(todo: Todo, label: str, progress: bool,
                one: Callable[[str, str, Callable[[int], None]], Awaitable[int]],
                remove: Callable[[str], Awaitable[Any]]) -> Totals:
    """``one(source, destination, progress)`` for each of ``todo``, under one progress bar."""
    totals = Totals()
    with ProgressBar(sum(n for _, _, n in todo), label, enabled=progress) as bar:
        for src, dst, _ in todo:
            base = totals.bytes
            started: list[bool] = []  # (the first progress call: the destination is created or truncated)

            def step(n: int, base: int = base, started: list[bool] = started) -> None:
                started[:] = [True]
                bar.update(base + n)

            try:
                totals.bytes += await one(src, dst, step)
            except BaseException:
                if started:
                    await _partial_removed(dst, remove)
                raise
            totals.files += 1
    return totals


async def _remove_local(path: str) -> None:
    await trio.to_thread.run_sync(os.remove, path)


def _not_recursive(path: str) -> IsADirectoryError:
    return IsADirectoryError(errno.EISDIR, "Is a directory (use -r to copy a directory)", path)


async def _partial_removed(what: str, remove: Callable[[str], Awaitable[Any]]) -> None:
    """A transfer into ``what`` was cut short: remove the partial copy, and tell."""
    with trio.CancelScope(shield=True):
        try:
            await remove(what)
            print(f"{PROG}: stopped: removed the partial copy {what}", file=sys.stderr)
        except OSError as e:
            print(f"{PROG}: stopped: the partial copy {what} is left ({e.strerror or e})", file=sys.stderr)


# -- put ----------------------------------------------------------------------------------------------------
def _local_tree(top: str) -> tuple[list[str], list[tuple[str, int]]]:
    """Directories (relative, parents first) and files (relative, size) under ``top``."""
    dirs, files = [], []
    for root, dnames, fnames in os.walk(top):
        dnames.sort()
        rel = os.path.relpath(root, top)
        for d in dnames:
            dirs.append(os.path.normpath(os.path.join(rel, d)))
        for f in sorted(fnames):
            p = os.path.join(root, f)
            if os.path.isfile(p):
                files.append((os.path.normpath(os.path.join(rel, f)), os.path.getsize(p)))
    return dirs, files


async def put(client: Client, local: str, remote: str, recursive: bool, progress: bool) -> tuple[str, Totals]:
    if not os.path.exists(local):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", local)
    name = os.path.basename(os.path.normpath(local))
    target = await remote_destination(client, remote, name)
    if os.path.isdir(local):
        if not recursive:
            raise _not_recursive(local)
        dirs, files = _local_tree(local)
        await client.makedirs(target, exist_ok=True)
        for d in dirs:
            await client.makedirs(posixpath.join(target, d.replace(os.sep, "/")), exist_ok=True)
        todo = [(os.path.join(local, f), posixpath.join(target, f.replace(os.sep, "/")), n) for f, n in files]
    elif os.path.isfile(local):
        todo = [(local, target, os.path.getsize(local))]
    else:
        raise OSError(errno.EINVAL, "Not a regular file", local)
    return target, await _each(todo, name, progress, client.put, client.remove)


# -- get ----------------------------------------------------------------------------------------------------
async def get(client: Client, remote: str, local: str, recursive: bool, progress: bool) -> tuple[str, Totals]:
    a = await client.stat(remote)
    name = posixpath.basename(remote.rstrip("/")) or "root"
    target = local_destination(local, name)
    if a.is_dir:
        if not recursive:
            raise _not_recursive(remote)
        todo: Todo = []
        os.makedirs(target, exist_ok=True)
        async for top, _dirs, files in client.walk(remote):
            rel = posixpath.relpath(top, remote)
            os.makedirs(os.path.normpath(os.path.join(target, rel)), exist_ok=True)
            for f in files:
                st = await client.lstat(posixpath.join(top, f))
                if st.is_symlink:
                    continue
                todo.append((posixpath.join(top, f), os.path.normpath(os.path.join(target, rel, f)), st.size))
    else:
        todo = [(remote, target, a.size)]
    return target, await _each(todo, name, progress, client.get, _remove_local)


# -- cp within one server ---------------------------------------------------------------------------------------
async def copy(client: Client, src: str, dst: str, recursive: bool, progress: bool) -> tuple[str, Totals]:
    a = await client.stat(src)
    target = await remote_destination(client, dst, posixpath.basename(src.rstrip("/")))
    t = await _remote_attrs(client, target)
    if t is not None and (t.fsid, t.fileid) == (a.fsid, a.fileid):
        raise shutil.SameFileError(f"{src!r} and {target!r} are the same file")
    if a.is_dir:
        if not recursive:
            raise _not_recursive(src)
        if (client_path := posixpath.normpath(target)).startswith(posixpath.normpath(src) + "/"):
            raise OSError(errno.EINVAL, f"cannot copy a directory into itself ({client_path})", src)
        todo: Todo = []
        await client.makedirs(target, exist_ok=True)
        async for top, _dirs, files in client.walk(src):
            rel = posixpath.normpath(posixpath.join(target, posixpath.relpath(top, src)))
            await client.makedirs(rel, exist_ok=True)
            for f in files:
                st = await client.lstat(posixpath.join(top, f))
                if not st.is_symlink:
                    todo.append((posixpath.join(top, f), posixpath.join(rel, f), st.size))
    else:
        todo = [(src, target, a.size)]
    async def one(s: str, d: str, step: Callable[[int], None]) -> int:
        # the server copies (COPY) when the session is NFSv4.2 and it can; else READs and WRITEs
        return await client.copy_file(s, d, (await client.stat(s)).mode, step)

    return target, await _each(todo, posixpath.basename(src.rstrip("/")), progress, one, client.remove)


__all__ = ["Totals", "copy", "get", "local_destination", "put", "remote_destination"]
