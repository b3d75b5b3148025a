"""``pynfsrdma ls [-l] [-a] [-R] [-h] [--json] URL``, as ls(1) shows a directory.

Names are printed as given: ``ls URL`` of a file prints the URL (without its ``?options``), and
``-R``'s headings are the URL with the directories below appended, as ls(1) builds them from its
argument. ``-l`` shows a symbolic link itself, ``name -> target``; without ``-l`` a link to a
directory is listed as the directory. ``--json`` keeps machine values: paths on the server, modes as
numbers, times in nanoseconds, and ``target`` for symbolic links.
"""

from __future__ import annotations

import argparse
import posixpath
from typing import TYPE_CHECKING, Any

from .coreutils import long_lines, total_line
from .output import print_json

if TYPE_CHECKING:
    from .._client.api import Client
    from .._client.attributes import FileAttrs

Entry = tuple[str, "FileAttrs", "str | None"]  # (name, attributes, symlink target)


async def _target(client: Client, path: str, a: FileAttrs) -> str | None:
    return await client.readlink(path) if a.is_symlink else None


async def _entries(client: Client, path: str, show_all: bool, targets: bool) -> list[Entry]:
    listed = sorted((e.name, e.stat(follow_symlinks=False)) for e in await client.scandir(path))
    if not show_all:
        listed = [(n, a) for n, a in listed if not n.startswith(".")]
    entries: list[Entry] = [
        (n, a, await _target(client, posixpath.join(path, n), a) if targets else None) for n, a in listed
    ]
    if not show_all:
        return entries
    here = await client.stat(path)
    parent = await client.stat(posixpath.dirname(path.rstrip("/")) or "/")
    return [(".", here, None), ("..", parent, None), *entries]


def _json_entry(name: str, path: str, a: FileAttrs, target: str | None) -> dict[str, Any]:
    d = {**a.as_dict(), "name": name, "path": path}
    if target is not None:
        d["target"] = target
    return d


def _given(url: str) -> str:
    """The name as given: the URL without its options."""
    return url.split("?", 1)[0]


def _below(given: str, rel: str) -> str:
    return given + rel if given.endswith("/") else f"{given}/{rel}"


async def run(client: Client, path: str, args: argparse.Namespace) -> int:
    given = _given(args.url)
    # (-l shows a link itself; ls without -l, and --json, follow it)
    a = await (client.lstat(path) if args.long and not args.json else client.stat(path))
    if not a.is_dir:
        target = await _target(client, path, a)
        if args.json:
            print_json({"path": path, "entries": [_json_entry(posixpath.basename(path), path, a, target)]})
        else:
            print(long_lines([(given, a, target)], args.human)[0] if args.long else given)
        return 0
    found: list[dict[str, Any]] = []
    todo = [("", path)]
    first = True
    while todo:
        rel, directory = todo.pop(0)
        entries = await _entries(client, directory, args.all, args.long or args.json)
        if args.json:
            found += [_json_entry(n, posixpath.join(directory, n), e, t) for n, e, t in entries]
        else:
            if args.recursive:
                print(("" if first else "\n") + f"{_below(given, rel) if rel else given}:")
            if args.long:
                print(total_line(entries, args.human))
                for line in long_lines(entries, args.human):
                    print(line)
            else:
                for n, _, _ in entries:
                    print(n)
        first = False
        if args.recursive:
            # depth first, as ls -R
            todo[:0] = [(posixpath.join(rel, n), posixpath.join(directory, n))
                        for n, e, _ in entries if e.is_dir and n not in (".", "..")]
    if args.json:
        print_json({"path": path, "entries": found})
    return 0


__all__ = ["run"]
