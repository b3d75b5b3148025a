"""Two clients of nfsd sharing files, in the guest of the real-RDMA rig (run by ``guest_tests.py`` in a
child, step key ``shared``): the checks of tests/fuse/test_shared.py and test_file_locks.py that run
there against NFS-Ganesha (close-to-open, O_APPEND from two clients taking turns, sqlite with a
writer on each client), here against nfsd, which grants delegations (read and, from 6.6, write
ones) that the other client's opens recall.

:func:`two_clients`: our FUSE mount beside another client of the same directory: the kernel's
client (``other`` is a directory under its mount) or a second mount of ours (``other`` empty: the
step mounts it). ``disk`` is the same directory in nfsd's own file system, the third party that
says what the server holds.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from guest_fuse import mounted

SQLITE_WRITER = r"""
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=120)
for n in range(int(sys.argv[3])):
    try:
        with con:
            con.execute("insert into t values (?, ?)", (sys.argv[2], n))
        print(n, flush=True)
    except sqlite3.Error as e:
        print(n, e, file=sys.stderr, flush=True)
con.close()
"""
ROWS = 25  # each sqlite writer's transactions (slow under emulation: each takes locks over NFS)


def _close_to_open(a: Path, b: Path, disk: Path) -> None:
    """After a close on one client an open on the other sees the new data and size, both ways."""
    for writer, reader, data in ((a, b, b"first"), (b, a, b"second, longer"), (a, b, b"3rd")):
        with open(writer / "f", "wb") as f:
            f.write(data)
        with open(reader / "f", "rb") as f:
            got = f.read()
            if got != data or os.fstat(f.fileno()).st_size != len(data):
                raise RuntimeError(f"close-to-open: {writer} wrote {data!r}, {reader} then read {got!r}")
    with open(a / "f", "ab") as f:
        f.write(b"+more")
    if (b / "f").read_bytes() != b"3rd+more" or (disk / "f").read_bytes() != b"3rd+more":
        raise RuntimeError("close-to-open: an append through the first client is not seen by the second")


def _appends_taking_turns(a: Path, b: Path, disk: Path) -> int:
    """Each client opens with O_APPEND, writes a line and closes, in turn: every line lands once, in order."""
    lines = []
    (a / "log").write_bytes(b"")
    for i in range(6):
        for side, d in (("a", a), ("b", b)):
            os.stat(a / "log")  # each side holds a size
            os.stat(b / "log")
            line = f"{side}{i}\n".encode()
            with open(d / "log", "ab") as f:
                f.write(line)
            lines.append(line)
    want = b"".join(lines)
    for who, d in (("the server", disk), ("the first client", a), ("the second client", b)):
        got = (d / "log").read_bytes()
        if got != want:
            raise RuntimeError(f"appends taking turns: {who} has {got!r}, not {want!r}")
    return len(lines)


def _sqlite_writers(a: Path, b: Path, disk: Path) -> int:
    """A sqlite writer on each client: every row a writer saw committed is in the database."""
    db = "t.db"
    con = sqlite3.connect(a / db)
    con.execute("create table t (who text, n integer)")
    con.commit()
    con.close()
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", SQLITE_WRITER, str(d / db), who, str(ROWS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who, d in (("a", a), ("b", b))
    ]
    committed: dict[str, list[int]] = {}
    errors: list[str] = []
    for who, w in zip("ab", writers, strict=True):
        out, err = w.communicate(timeout=400)
        committed[who] = [int(n) for n in out.split()]
        errors += [line for line in err.splitlines() if line]
    con = sqlite3.connect(disk / db)
    rows = set(con.execute("select who, n from t"))
    con.close()
    want = {(w, n) for w in ("a", "b") for n in committed[w]}
    if rows != want or len(rows) != 2 * ROWS:
        raise RuntimeError(
            f"sqlite: {len(rows)} rows on the server, {len(want)} committed by the writers; errors {errors[:3]}"
        )
    return len(rows)


def two_clients(url: str, options: str, other: str, disk: str) -> str:
    top = f"shared-{os.getpid()}"
    server = Path(disk) / top
    server.mkdir()
    with ExitStack() as stack:
        mine = stack.enter_context(mounted(url, Path("/run/ours-shared-a"), options))
        if other:
            second, whom = Path(other), "the kernel client"
        else:
            second, whom = stack.enter_context(mounted(url, Path("/run/ours-shared-b"), options)), "a second mount of ours"
        a, b = mine / top, second / top
        _close_to_open(a, b, server)
        appended = _appends_taking_turns(a, b, server)
        rows = _sqlite_writers(a, b, server)
    for f in server.iterdir():
        f.unlink()
    server.rmdir()
    return (
        f"our mount and {whom}: close-to-open both ways, {appended} O_APPEND lines taking turns all in "
        f"order, {rows} sqlite rows from a writer on each, every committed one on the server"
    )
