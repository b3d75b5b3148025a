"""File locks between clients: fcntl (POSIX) and flock locks taken through one mount are seen by
another mount of the same export (each an NFS client of its own), as NFSv4 LOCK, LOCKT and LOCKU.

Each lock holder is a process of its own (POSIX locks belong to a process), driven line by line."""

from __future__ import annotations

import os
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._control_socket import Connection
from pynfsrdma._testbed.ganesha import Ganesha

pytestmark = pytest.mark.fuse

HOLDER = r"""
import fcntl, os, struct, sys
f = open(sys.argv[1], "r+b")
for line in sys.stdin:
    cmd, *args = line.split()
    try:
        if cmd == "lock":  # lock TYPE START LEN [wait]
            kind = {"r": fcntl.LOCK_SH, "w": fcntl.LOCK_EX, "u": fcntl.LOCK_UN}[args[0]]
            nb = 0 if args[3:] == ["wait"] or kind == fcntl.LOCK_UN else fcntl.LOCK_NB
            fcntl.lockf(f, kind | nb, int(args[2]), int(args[1]))
            print("ok", flush=True)
        elif cmd == "test":  # test TYPE START LEN: the lock in the way (F_GETLK)
            kind = {"r": fcntl.F_RDLCK, "w": fcntl.F_WRLCK}[args[0]]
            req = struct.pack("hhqqi", kind, 0, int(args[1]), int(args[2]), 0)
            t, _, start, length, pid = struct.unpack("hhqqi", fcntl.fcntl(f, fcntl.F_GETLK, req))
            print("free" if t == fcntl.F_UNLCK else f"held {'rw'[t == fcntl.F_WRLCK]} {start} {length} {pid}",
                  flush=True)
        elif cmd == "flock":  # flock sh|ex|un [wait]
            kind = {"sh": fcntl.LOCK_SH, "ex": fcntl.LOCK_EX, "un": fcntl.LOCK_UN}[args[0]]
            fcntl.flock(f, kind if args[1:] == ["wait"] else kind | fcntl.LOCK_NB)
            print("ok", flush=True)
        elif cmd == "close":
            f.close()
            print("ok", flush=True)
    except OSError as e:
        print("error", e.errno, flush=True)
"""


SQLITE_WRITER = r"""
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=60)
for n in range(40):
    try:
        with con:
            con.execute("insert into t values (?, ?)", (sys.argv[2], n))
        print(n, flush=True)
    except sqlite3.Error as e:
        print(n, e, file=sys.stderr, flush=True)
con.close()
"""


class Holder:
    """A process holding ``path`` open, taking and testing locks on command."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 20) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return "(no answer)"

    def do(self, line: str, timeout: float = 20) -> str:
        self.send(line)
        return self.answer(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture
def two(mount_export: Callable[..., Any], ganesha: Ganesha) -> Iterator[tuple[Path, Path, Any]]:
    d = ganesha.new_directory(prefix="locks-")
    a, b = mount_export(), mount_export()
    (d.local / "f").write_bytes(b"x" * 1000)
    yield a.path / d.local.name / "f", b.path / d.local.name / "f", (a, b)


def lock_counts(mount: Any) -> dict[str, int]:
    with Connection(str(mount.path)) as conn:
        ops = conn.request("stats")["operations"]
    return {op: ops[op]["calls"] for op in ("LOCK", "LOCKT", "LOCKU") if op in ops}


def test_posix_locks_are_seen_by_the_other_client(two: tuple[Path, Path, Any]) -> None:
    """fcntl locks on one mount conflict with the other mount's, by byte range and type (before,
    each mount granted every lock: the kernel kept them, and no LOCK was sent)."""
    pa, pb, (ma, mb) = two
    a, b = Holder(pa), Holder(pb)
    try:
        assert a.do("lock w 0 100") == "ok"
        assert b.do("lock w 50 10") == "error 11"  # EAGAIN: held by the other client
        assert b.do("lock r 0 1") == "error 11"
        assert b.do("lock w 100 100") == "ok"  # the next bytes are free
        assert b.do("test w 0 10") == "held w 0 100 0"  # F_GETLK names the range (pid 0: another host)
        assert a.do("lock u 0 100") == "ok"
        assert b.do("lock w 0 100") == "ok"
        assert a.do("test r 10 1") == "held w 0 200 0"  # (the server joined b's two ranges)
        assert b.do("lock r 0 200") == "ok"  # downgraded: readers may share it
        assert a.do("lock r 0 50") == "ok"
        assert a.do("lock w 0 50") == "error 11"  # no upgrade past another reader
        assert b.do("lock u 0 200") == "ok"
        assert a.do("lock w 0 50") == "ok"  # now the upgrade goes through
    finally:
        a.close()
        b.close()
    assert lock_counts(ma).get("LOCK", 0) >= 3 and lock_counts(mb).get("LOCKT", 0) >= 1


def test_a_waiter_wakes_when_the_holder_unlocks_or_dies(two: tuple[Path, Path, Any]) -> None:
    pa, pb, _ = two
    a, b = Holder(pa), Holder(pb)
    try:
        assert a.do("lock w 0 0") == "ok"  # the whole file
        b.send("lock w 0 10 wait")
        assert b.answer(timeout=1.5) == "(no answer)"  # it waits
        assert a.do("lock u 0 0") == "ok"
        assert b.answer() == "ok"
        a.send("lock r 0 10 wait")
        assert a.answer(timeout=1.5) == "(no answer)"
        b.kill()  # the holder's locks go with its process
        assert a.answer() == "ok"
    finally:
        a.close()
        b.close()


def test_flock_locks_are_whole_file_locks_between_clients(two: tuple[Path, Path, Any]) -> None:
    pa, pb, _ = two
    a, b = Holder(pa), Holder(pb)
    try:
        assert a.do("flock ex") == "ok"
        assert b.do("flock sh") == "error 11"
        # the last close of the open file ends its flock lock (when the kernel's RELEASE, which
        # close(2) does not wait for, reaches the mount: a moment later)
        assert a.do("close") == "ok"
        assert b.do("flock ex wait") == "ok"
        c = Holder(pa)
        try:
            assert c.do("flock sh") == "error 11"
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def test_sqlite_writers_on_two_clients_lose_no_committed_transaction(
    mount_export: Callable[..., Any], ganesha: Ganesha
) -> None:
    """One sqlite writer on each mount, each inserting rows in transactions of its own: every row a
    writer saw committed is in the database, and no transaction failed with "disk I/O error" (both
    believed they held the write lock: 21-27% of committed transactions were lost)."""
    d = ganesha.new_directory(prefix="sqlite-")
    a, b = mount_export(), mount_export()
    db = "t.db"
    con = sqlite3.connect(a.path / d.local.name / db)
    con.execute("create table t (who text, n integer)")
    con.commit()
    con.close()
    writers = [
        subprocess.Popen([sys.executable, "-c", SQLITE_WRITER, str(m.path / d.local.name / db), who],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for who, m in (("a", a), ("b", b))
    ]
    committed: dict[str, list[int]] = {}
    errors: list[str] = []
    for who, w in zip("ab", writers, strict=True):
        out, err = w.communicate(timeout=240)
        committed[who] = [int(n) for n in out.split()]
        errors += [line for line in err.splitlines() if line]
    con = sqlite3.connect(d.local / db)
    rows = set(con.execute("select who, n from t"))
    con.close()
    assert rows == {(w, n) for w in ("a", "b") for n in committed[w]}
    assert len(rows) == 80


def test_a_non_owner_may_set_the_time_to_now_where_the_server_lets_it_write(
    mount_export: Callable[..., Any], ganesha: Ganesha
) -> None:
    """touch by a user who may write a file but does not own it sets the server's "now" (pyfuse3
    turned it into the client's clock, which only the owner may set: EPERM)."""
    d = ganesha.new_directory(prefix="touch-")
    m = mount_export()
    f = d.local / "shared"
    f.write_bytes(b"")
    os.chmod(f, 0o666)
    os.utime(f, (1_000_000_000, 1_000_000_000))
    r = subprocess.run(
        ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "touch", str(m.path / d.local.name / "shared")],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    assert abs(f.stat().st_mtime - time.time()) < 30


@pytest.mark.recovers  # the server restarts; its clients reclaim
def test_locks_are_reclaimed_after_a_server_restart(
    ganesha_factory: Callable[..., Any], mount_export: Callable[..., Any]
) -> None:
    """A lock held through one mount is reclaimed in the server's grace period after it restarts:
    the other mount still cannot take it, and the holder keeps writing."""
    server = ganesha_factory(grace=5)
    ma, mb = mount_export(server=server), mount_export(server=server)
    (server.export_dir / "f").write_bytes(b"x" * 100)
    a, b = Holder(ma.path / "f"), Holder(mb.path / "f")
    try:
        assert a.do("lock w 0 50") == "ok"
        server.restart()
        time.sleep(1)
        assert b.do("lock w 0 10", timeout=60) == "error 11"  # (after the grace period: reclaimed)
        assert b.do("lock w 50 10") == "ok"
        assert a.do("lock u 0 50") == "ok"
        assert b.do("lock w 0 10") == "ok"
    finally:
        a.close()
        b.close()
