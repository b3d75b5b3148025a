"""A shared file system: what one client sees of another's work, and of its own, right away.

Two mounts of one export are two NFS clients (each mount point has a client owner of its own); the
server's export directory on disk is a third party that changes files behind both. The rules
checked here are the Linux NFS client's (close-to-open: a close makes the data visible to an open
that follows it anywhere; opens, creates and renames go to the server by name) and POSIX's for one
client; where we promise more than the Linux client (an absent name looked up for an open), it says
so.
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma.control import Connection
from pynfsrdma.testbed.ganesha import Ganesha


@dataclass
class Shared:
    a: Path  # the directory through the first mount
    b: Path  # the same directory through the second mount
    disk: Path  # the same directory on the server's disk


@pytest.fixture
def shared(mount_export: Callable[..., Any], ganesha: Ganesha) -> Iterator[Shared]:
    """One fresh directory seen by two mounts (two clients) and on the server's disk."""
    d = ganesha.new_directory(prefix="shared-")
    os.chmod(d.local, 0o777)
    a, b = mount_export("allow_other"), mount_export("allow_other")
    yield Shared(a.path / d.local.name, b.path / d.local.name, d.local)


def test_a_listing_sent_while_a_file_is_written_does_not_shrink_it(shared: Shared) -> None:
    """A listing's entries carry attributes. One made while the data written so far was still held
    by the mount (gathered, not yet sent) shows the file's size on the server: handed to the kernel,
    it cut the file short, and a read saw the end of the file early (cp then cmp read an empty file)."""
    p = shared.a / "growing"
    with open(p, "wb") as f:
        f.write(b"x" * 100_000)
        f.flush()  # in the kernel's size now; the data waits in the mount for the close
        assert (shared.disk / "growing").stat().st_size == 0
        listed = {e.name: e.stat().st_size for e in os.scandir(shared.a)}  # ls -l: READDIR with sizes
        assert listed["growing"] == 100_000
        assert os.stat(p).st_size == 100_000
        with open(p, "rb") as r:
            assert len(r.read()) == 100_000
    assert p.read_bytes() == b"x" * 100_000


def test_read_after_write_stays_whole_while_listings_run(shared: Shared, tmp_path: Path) -> None:
    """cp then cmp, 120 times, while another process lists the tree over and over (the listings'
    READDIRs overlap the writes): every read-back is whole."""
    data = os.urandom(1 << 20)
    src = tmp_path / "src"
    src.write_bytes(data)
    stop = threading.Event()

    def lister() -> None:
        while not stop.is_set():
            subprocess.run(["ls", "-lR", str(shared.a)], capture_output=True)

    t = threading.Thread(target=lister)
    t.start()
    bad = []
    try:
        for i in range(120):
            dst = shared.a / f"f{i}"
            subprocess.run(["cp", str(src), str(dst)], check=True)
            if subprocess.run(["cmp", "-s", str(src), str(dst)]).returncode != 0:
                bad.append((i, os.stat(dst).st_size))
    finally:
        stop.set()
        t.join()
    assert bad == []


def op_statuses(mount: Any) -> dict[str, dict[str, int]]:
    with Connection(str(mount.path)) as conn:
        ops = conn.request("stats")["operations"]
    return {name: dict(op["statuses"]) for name, op in ops.items()}


def test_everyday_copies_close_every_open_without_an_error(mount_export: Callable[..., Any], ganesha: Ganesha,
                                                           tmp_path: Path) -> None:
    """cp then cmp of small files (the mount closes the copy's open soon after close(2) returns, and
    cmp opens the file again meanwhile): no CLOSE fails. A CLOSE of the earlier open overtaken by the
    next OPEN was answered NFS4ERR_OLD_STATEID, hundreds of times a test run, and left the server
    holding an open we believed closed."""
    d = ganesha.new_directory(prefix="closes-")
    m = mount_export()
    for i in range(25):
        src = tmp_path / f"s{i}"
        src.write_bytes(os.urandom(3000 + i))
        dst = m.path / d.local.name / f"s{i}"
        subprocess.run(["cp", str(src), str(dst)], check=True)
        subprocess.run(["cmp", str(src), str(dst)], check=True)
    (m.path / d.local.name / "s3").unlink()
    statuses = op_statuses(m)
    assert statuses["OPEN"] == {} and statuses["CLOSE"] == {}, statuses


def test_an_exclusive_create_leaves_the_times_of_now(shared: Shared, tmp_path: Path) -> None:
    """O_CREAT|O_EXCL (mkstemp, cp to a new name, lock files) creates with NFSv4.1's EXCLUSIVE4_1,
    whose verifier NFS-Ganesha keeps in the file's times: they read 1988 and 2076 until set."""
    before = time.time()
    fd = os.open(shared.a / "excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
    os.write(fd, b"x")
    os.close(fd)
    src = tmp_path / "src"
    src.write_bytes(b"copied\n")
    subprocess.run(["cp", str(src), str(shared.a / "copied")], check=True)
    after = time.time()
    for name in ("excl", "copied"):
        for st in (os.stat(shared.b / name), (shared.disk / name).stat()):
            assert before - 2 <= st.st_atime <= after + 2, (name, st)
            assert before - 2 <= st.st_mtime <= after + 2, (name, st)
    assert stat.S_IMODE(os.stat(shared.b / "excl").st_mode) == 0o640
    with pytest.raises(FileExistsError):
        os.open(shared.b / "excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
