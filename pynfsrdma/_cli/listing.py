"""``pynfsrdma ls [-l] [-a] [-R] [-h] [--json] URL``, as ls(1) shows a directory."""

from __future__ import annotations

import argparse
import posixpath
import stat
import time
from typing import Any

from .._client.api import Client
from .._client.attributes import FileAttrs
from .output import print_json


def human_size(n: int) -> str:
    """ls -h's sizes: 999, 1.0K, 15K, 1.5M, 20G (powers of 1024, one decimal below 10)."""
    size = float(n)
    for unit in ("", "K", "M", "G", "T", "P"):
        if size < 1024 or unit == "P":
            if not unit:
                return str(n)
            return f"{size:.1f}{unit}" if size < 10 else f"{size:.0f}{unit}"
        size /= 1024
    raise AssertionError("unreachable")


def long_line(name: str, a: FileAttrs, human: bool) -> str:
    mtime = time.strftime("%Y-%m-%d %H:%M", time.localtime(a.st_mtime))
    size = human_size(a.size) if human else str(a.size)
    return f"{stat.filemode(a.st_mode)} {a.nlink:3d} {a.uid:5d} {a.gid:5d} {size:>12} {mtime} {name}"


async def _entries(client: Client, path: str, show_all: bool) -> list[tuple[str, FileAttrs]]:
    listed = sorted((e.name, e.stat(follow_symlinks=False)) for e in await client.scandir(path))
    if not show_all:
        return [(n, a) for n, a in listed if not n.startswith(".")]
    here = await client.stat(path)
    parent = await client.stat(posixpath.dirname(path.rstrip("/")) or "/")
    return [(".", here), ("..", parent), *listed]


def _json_entry(name: str, path: str, a: FileAttrs) -> dict[str, Any]:
    return {**a.as_dict(), "name": name, "path": path}


async def run(client: Client, path: str, args: argparse.Namespace) -> int:
    a = await client.stat(path)
    if not a.is_dir:
        if args.json:
            print_json({"path": path, "entries": [_json_entry(posixpath.basename(path), path, a)]})
        else:
            print(long_line(path, a, args.human) if args.long else path)
        return 0
    found: list[dict[str, Any]] = []
    todo = [path]
    first = True
    while todo:
        directory = todo.pop(0)
        entries = await _entries(client, directory, args.all)
        if args.json:
            found += [_json_entry(n, posixpath.join(directory, n), e) for n, e in entries]
        else:
            if args.recursive:
                print(("" if first else "\n") + f"{directory}:")
            for n, e in entries:
                print(long_line(n, e, args.human) if args.long else n)
        first = False
        if args.recursive:
            # depth first, as ls -R
            todo[:0] = [posixpath.join(directory, n) for n, e in entries if e.is_dir and n not in (".", "..")]
    if args.json:
        print_json({"path": path, "entries": found})
    return 0


__all__ = ["human_size", "long_line", "run"]
