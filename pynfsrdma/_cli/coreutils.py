"""What df(1), stat(1) and ls(1) print, for the commands of the same names: ``-h`` sizes, df's Use%,
modes as ``-rw-r--r--`` and octal, times as dates, owners by the names the local system gives their
numbers. Attributes in, text out: nothing here asks the server.

Where the tools' output rests on a choice, the choice is theirs (GNU coreutils 9):
- ``-h`` sizes are powers of 1024 rounded up, with one decimal below 10 (``1.5K``, ``15K``, ``3.1G``);
- df's Use% is used / (used + available), rounded up: the share of the space a user may have that is
  taken (the space only root may use is left out);
- df's 1K-blocks are rounded up.
"""

from __future__ import annotations

import grp
import pwd
import stat
import time
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._client.attributes import FileAttrs

UNITS = "KMGTPEZY"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def human_size(n: int) -> str:
    """``ls -h`` and ``df -h``: 999, 1.0K, 1.5K, 15K, 1.5M, 20G."""
    if n < 1024:
        return str(n)
    exponent = 1
    while n >= 1024 ** (exponent + 1) and exponent < len(UNITS):
        exponent += 1
    scale = 1024**exponent
    tenths = _ceil_div(n * 10, scale)
    if tenths < 100:
        return f"{tenths // 10}.{tenths % 10}{UNITS[exponent - 1]}"
    whole = _ceil_div(n, scale)
    if whole >= 1024 and exponent < len(UNITS):  # (1023.1K rounds up to 1.0M, not 1024K)
        return f"1.0{UNITS[exponent]}"
    return f"{whole}{UNITS[exponent - 1]}"


def use_percent(used: int, avail: int) -> str:
    """df's Use%: ``used / (used + avail)``, rounded up; ``-`` when there is no space at all."""
    total = used + avail
    if total <= 0:
        return "-"
    return f"{_ceil_div(used * 100, total)}%"


DF_WIDTHS = (14, 5, 5, 5, 4)  # df's narrowest columns


def df_table(rows: Sequence[tuple[str, int, int, int]], human: bool) -> str:
    """df's table for rows of (file system, size, used, available) in bytes: 1K-blocks, or with
    ``human`` sizes as ``-h`` shows them."""
    if human:
        header = ["Filesystem", "Size", "Used", "Avail", "Use%"]
        cells = [[fs, human_size(size), human_size(used), human_size(avail), use_percent(used, avail)]
                 for fs, size, used, avail in rows]
    else:
        header = ["Filesystem", "1K-blocks", "Used", "Available", "Use%"]
        cells = [[fs, *(str(_ceil_div(n, 1024)) for n in (size, used, avail)), use_percent(used, avail)]
                 for fs, size, used, avail in rows]
    table = [header, *cells]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    widths = [max(w, least) for w, least in zip(widths, DF_WIDTHS, strict=True)]
    return "\n".join(
        " ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))])
        for r in table
    )


@cache
def user_name(uid: int) -> str | None:
    """The local name of ``uid``, None when the local system has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


@cache
def group_name(gid: int) -> str | None:
    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return None


# stat(1)'s %F
_FILE_TYPES = (
    (stat.S_ISREG, "regular file"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character special file"),
    (stat.S_ISBLK, "block special file"),
)


def file_type(a: FileAttrs) -> str:
    mode = a.st_mode
    for test, name in _FILE_TYPES:
        if test(mode):
            return "regular empty file" if name == "regular file" and a.size == 0 else name
    return "weird file"


def stat_time(ns: int) -> str:
    """stat(1)'s times: ``2026-11-27 11:09:52.814158147 +0000``, in the local time zone."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    t = time.localtime(seconds)
    return time.strftime("%Y-%m-%d %H:%M:%S", t) + f".{fraction:09d} " + time.strftime("%z", t)


def name_and_target(name: str, target: str | None) -> str:
    return f"{name} -> {target}" if target is not None else name


def stat_text(name: str, a: FileAttrs, target: str | None = None) -> str:
    """What stat(1) prints for ``name`` (a symbolic link's ``target`` after ``->``). The server does
    not say its preferred I/O size nor when a file was made: there is no IO Block, and Birth is ``-``."""
    mode = a.st_mode
    device = f"  Device type: {a.rdev[0]},{a.rdev[1]}" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else ""
    return "\n".join([
        f"  File: {name_and_target(name, target)}",
        f"  Size: {a.size:<10d}\tBlocks: {a.st_blocks:<10d} {file_type(a)}",
        f"Device: {a.fsid[0]},{a.fsid[1]}\tInode: {a.fileid:<11d} Links: {a.nlink:<5d}{device}".rstrip(),
        f"Access: ({stat.S_IMODE(mode):04o}/{stat.filemode(mode)})  "
        f"Uid: ({a.uid:5d}/{user_name(a.uid) or 'UNKNOWN':>8})   "
        f"Gid: ({a.gid:5d}/{group_name(a.gid) or 'UNKNOWN':>8})",
        f"Access: {stat_time(a.atime_ns)}",
        f"Modify: {stat_time(a.mtime_ns)}",
        f"Change: {stat_time(a.ctime_ns)}",
        " Birth: -",
    ])


def ls_time(ns: int) -> str:
    """``ls -l --time-style=long-iso``: ``2026-11-27 11:09``."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ns // 1_000_000_000))


def long_lines(entries: Sequence[tuple[str, FileAttrs, str | None]], human: bool) -> list[str]:
    """``ls -l``'s lines for (name, attributes, symlink target) entries, in columns as wide as their
    widest cell: mode, links, owner and group (names where the local system knows the numbers), size
    (``human``: as ``-h``), time, name (``-> target`` for a symbolic link)."""
    rows = [
        (stat.filemode(a.st_mode), str(a.nlink), user_name(a.uid) or str(a.uid), group_name(a.gid) or str(a.gid),
         human_size(a.size) if human else str(a.size), ls_time(a.mtime_ns), name_and_target(name, target))
        for name, a, target in entries
    ]
    if not rows:
        return []
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    return [f"{m} {n:>{w[1]}} {u:<{w[2]}} {g:<{w[3]}} {s:>{w[4]}} {t} {name}" for m, n, u, g, s, t, name in rows]


def total_line(entries: Sequence[tuple[str, FileAttrs, str | None]], human: bool) -> str:
    """``ls -l``'s first line for a directory: the space its entries use, in 1K blocks (``-h``: as a size)."""
    blocks = sum(a.st_blocks for _, a, _ in entries)  # (512-byte blocks, as ls adds them up)
    return f"total {human_size(blocks * 512) if human else _ceil_div(blocks * 512, 1024)}"


__all__ = ["df_table", "file_type", "group_name", "human_size", "long_lines", "ls_time", "stat_text",
           "stat_time", "total_line", "use_percent", "user_name"]
