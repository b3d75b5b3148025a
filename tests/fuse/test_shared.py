"""A shared file system: what one client sees of another's work, and of its own, right away.

Two mounts of one export are two NFS clients (each mount point has a client owner of its own); the
server's export directory on disk is a third party that changes files behind both. The rules
checked here are the Linux NFS client's (close-to-open: a close makes the data visible to an open
that follows it anywhere; opens, creates and renames go to the server by name) and POSIX's for one
client; where we promise more than the Linux client (an absent name looked up for an open), it says
so.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._control_socket import Connection
from pynfsrdma._testbed.ganesha import Ganesha


@dataclass
class Shared:
    a: Path  # the directory through the first mount
    b: Path  # the same directory through the second mount
    disk: Path  # the same directory on the server's disk


USER = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups"]


@pytest.fixture
def shared(mount_export: Callable[..., Any], ganesha: Ganesha) -> Iterator[Shared]:
    """One fresh directory seen by two mounts (two clients, mounted with default options) and on the
    server's disk."""
    d = ganesha.new_directory(prefix="shared-")
    os.chmod(d.local, 0o777)
    a, b = mount_export(), mount_export()
    yield Shared(a.path / d.local.name, b.path / d.local.name, d.local)


def as_user(code: str, *args: Any) -> subprocess.CompletedProcess[str]:
    """Python ``code`` run as uid/gid 1000 (``sys.argv[1:]`` = ``args``); what it prints."""
    return subprocess.run(
        [*USER, sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=60
    )


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


def test_what_one_client_closes_the_other_opens_at_once(shared: Shared) -> None:
    """Close-to-open: after a close on one client, an open on the other sees the new data, size,
    mode, and that names were removed or renamed, without waiting for any attribute cache."""
    (shared.a / "f").write_bytes(b"first")
    assert (shared.b / "f").read_bytes() == b"first"  # b caches f now
    (shared.a / "f").write_bytes(b"second, longer")
    assert (shared.b / "f").read_bytes() == b"second, longer"
    with open(shared.a / "f", "r+b") as f:
        f.truncate(3)
    assert (shared.b / "f").read_bytes() == b"sec"
    with open(shared.a / "f", "ab") as f:
        f.write(b"+more")
    with open(shared.b / "f", "rb") as f:
        assert f.read() == b"sec+more"
        assert os.fstat(f.fileno()).st_size == 8
    os.chmod(shared.a / "f", 0o600)
    with open(shared.b / "f", "rb") as f:
        assert stat.S_IMODE(os.fstat(f.fileno()).st_mode) == 0o600
    os.unlink(shared.a / "f")
    with pytest.raises(FileNotFoundError):
        (shared.b / "f").read_bytes()


def test_appends_from_two_clients_taking_turns_all_land(shared: Shared) -> None:
    """Each client opens with O_APPEND, writes a line and closes, in turn: every line is there once,
    in order (the kernel appends at the size it holds, which the other client's appends left behind:
    lines were overwritten and the file got runs of zero bytes)."""
    lines = []
    (shared.a / "log").write_bytes(b"")
    for i in range(6):
        for side, d in (("a", shared.a), ("b", shared.b)):
            os.stat(shared.a / "log")  # each side's kernel holds a size
            os.stat(shared.b / "log")
            line = f"{side}{i}\n".encode()
            with open(d / "log", "ab") as f:
                f.write(line)
            lines.append(line)
    want = b"".join(lines)
    assert (shared.disk / "log").read_bytes() == want
    assert (shared.a / "log").read_bytes() == want and (shared.b / "log").read_bytes() == want
    assert os.stat(shared.a / "log").st_size == len(want) == os.stat(shared.b / "log").st_size


def test_a_name_another_client_made_opens_at_once(shared: Shared) -> None:
    """A name looked up as absent is not kept as absent for an open(): another client's new file
    opens at once (the Linux client would say ENOENT for as long as it keeps the directory's
    attributes); stat() may still answer from the cache within that time."""
    with pytest.raises(FileNotFoundError):
        os.stat(shared.a / "late")
    with pytest.raises(FileNotFoundError):
        (shared.a / "late").read_bytes()
    (shared.b / "late").write_bytes(b"made by b")
    with open(shared.a / "late", "rb") as f:
        assert f.read() == b"made by b"
    assert os.stat(shared.a / "late").st_size == 9
    with pytest.raises(FileNotFoundError):
        os.stat(shared.a / "later")
    (shared.disk / "later").write_bytes(b"on the disk")  # made behind both clients
    assert subprocess.run(["cat", str(shared.a / "later")], capture_output=True).stdout == b"on the disk"


@pytest.mark.parametrize("lookupcache", ["positive", "none"])
def test_lookupcache_positive_and_none_ask_for_an_absent_name_every_time(
    mount_export: Callable[..., Any], ganesha: Ganesha, lookupcache: str
) -> None:
    """As nfs(5) says: ``positive`` keeps no absent names, ``none`` keeps no names at all."""
    d = ganesha.new_directory(prefix="lookupcache-")
    m, other = mount_export(f"lookupcache={lookupcache}"), mount_export()
    p, q = m.path / d.local.name / "x", other.path / d.local.name / "x"
    with pytest.raises(FileNotFoundError):
        os.stat(p)
    q.write_bytes(b"x")
    assert os.stat(p).st_size == 1  # (stat, not open: no cache of absent names with these)
    os.rename(q, q.with_name("y"))
    if lookupcache == "none":
        with pytest.raises(FileNotFoundError):
            os.stat(p)


def test_a_name_another_client_renamed_opens_what_it_leads_to_now(shared: Shared) -> None:
    """After another client renames f to g (and makes a new f), open("f") opens the new f, and
    writes through the name f do not land in g (the open goes to the server by name)."""
    (shared.a / "f").write_bytes(b"old f")
    assert (shared.a / "f").read_bytes() == b"old f"  # a knows f, and keeps its entry
    os.rename(shared.b / "f", shared.b / "g")
    with pytest.raises(FileNotFoundError):
        (shared.a / "f").read_bytes()
    (shared.b / "f").write_bytes(b"new f")
    assert (shared.a / "f").read_bytes() == b"new f"
    with open(shared.a / "f", "ab") as f:
        f.write(b" appended")
    assert (shared.disk / "g").read_bytes() == b"old f"
    assert (shared.disk / "f").read_bytes() == b"new f appended"


PERMISSIONS = """
import os, sys
f = sys.argv[1]

def attempt(what, fn):
    try:
        fn()
        print(what, "allowed")
    except OSError as e:
        print(what, e.strerror)

held = open(f, "rb")  # an open of this user's stays while the mode changes
os.chmod(f, 0)
attempt("read mode 0", lambda: open(f, "rb"))
os.chmod(f, 0o444)
attempt("write 0444", lambda: open(f, "r+b"))
attempt("truncate 0444", lambda: os.open(f, os.O_RDONLY | os.O_TRUNC))
attempt("read 0444", lambda: open(f, "rb").read())
attempt("write root's", lambda: open(sys.argv[2], "r+b"))
attempt("truncate root's", lambda: os.open(sys.argv[2], os.O_WRONLY | os.O_TRUNC))
"""


def test_every_open_is_the_servers_to_allow(shared: Shared) -> None:
    """Each open is checked by the server for the caller, also when the same user holds the file
    open already (a second open skipped the check: a file made mode 0 while open still opened, the
    owner opened a 0444 file for writing, O_TRUNC truncated it, a non-owner got a write descriptor on
    root's 0644 file). Run as a user other than the one who mounted (root's mount serves everyone)."""
    (shared.disk / "mine").write_bytes(b"data")
    os.chown(shared.disk / "mine", 1000, 1000)
    os.chmod(shared.disk / "mine", 0o644)
    (shared.disk / "roots").write_bytes(b"root's")
    os.chmod(shared.disk / "roots", 0o644)
    r = as_user(PERMISSIONS, shared.a / "mine", shared.a / "roots")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "read mode 0 Permission denied",
        "write 0444 Permission denied",
        "truncate 0444 Permission denied",
        "read 0444 allowed",
        "write root's Permission denied",
        "truncate root's Permission denied",
    ]
    assert (shared.disk / "mine").read_bytes() == b"data" and (shared.disk / "roots").read_bytes() == b"root's"


def test_link_counts_and_ctime_follow_our_own_changes_to_other_names(shared: Shared) -> None:
    a = shared.a / "a"
    a.write_bytes(b"x")
    os.link(a, shared.a / "b")
    st = os.stat(a)
    assert st.st_nlink == 2
    time.sleep(0.02)
    os.unlink(shared.a / "b")
    after = os.stat(a)
    assert after.st_nlink == 1 and after.st_ctime_ns > st.st_ctime_ns
    os.link(a, shared.a / "c")
    assert os.stat(a).st_nlink == 2
    os.rename(shared.a / "c", shared.a / "d")
    assert os.stat(a).st_nlink == 2
    (shared.a / "e").write_bytes(b"e")
    os.rename(shared.a / "e", shared.a / "d")  # the other name is replaced: one link left
    assert os.stat(a).st_nlink == 1


def test_names_longer_than_255_bytes_are_too_long(shared: Shared) -> None:
    assert os.statvfs(shared.a).f_namemax == 255
    ok, long = shared.a / ("n" * 255), shared.a / ("n" * 256)
    ok.write_bytes(b"fits")
    assert ok.read_bytes() == b"fits"
    for call in (os.stat, lambda p: os.open(p, os.O_RDONLY), lambda p: os.open(p, os.O_WRONLY | os.O_CREAT),
                 os.mkdir, os.unlink):
        with pytest.raises(OSError) as e:
            call(long)
        assert e.value.errno == errno.ENAMETOOLONG
    with pytest.raises(OSError) as e:
        os.rename(ok, long)
    assert e.value.errno == errno.ENAMETOOLONG


def test_a_listing_has_dot_and_dot_dot(shared: Shared) -> None:
    (shared.a / "f").write_bytes(b"")
    (shared.a / "sub").mkdir()
    out = subprocess.run(["ls", "-a", str(shared.a)], capture_output=True, text=True, check=True).stdout
    assert out.split() == [".", "..", "f", "sub"]
    out = subprocess.run(["ls", "-ai", str(shared.a / "sub")], capture_output=True, text=True, check=True).stdout
    inos = {name: int(ino) for ino, name in (line.split() for line in out.splitlines())}
    assert inos == {".": os.stat(shared.a / "sub").st_ino, "..": os.stat(shared.a).st_ino}


def test_a_mount_by_root_serves_every_user_and_the_server_decides(shared: Shared) -> None:
    """Without allow_other, FUSE refuses every user but the one who mounted; a kernel NFS mount
    serves all and the server decides. A mount made by root does the same."""
    (shared.disk / "open").write_bytes(b"for all")
    os.chmod(shared.disk / "open", 0o644)
    r = as_user("import sys; print(open(sys.argv[1]).read()); open(sys.argv[1], 'a')", shared.a / "open")
    assert r.stdout == "for all\n" and "Permission denied" in r.stderr


SETID_AND_TRUNCATE = """
import os, sys
setid, mine = sys.argv[1], sys.argv[2]
fd = os.open(setid, os.O_WRONLY)  # a non-owner's write to a set-user-ID file: the kernel clears the bit
os.write(fd, b"x")
os.close(fd)
print("write", oct(os.stat(setid).st_mode & 0o7777))
try:
    os.truncate(mine, 1)
    print("truncate allowed")
except OSError as e:
    print("truncate", e.strerror)
fd = os.open(mine, os.O_RDONLY)
os.unlink(mine)
print("nlink", os.fstat(fd).st_nlink)
"""


def test_setid_bits_truncate_by_name_and_an_unlinked_open_file(shared: Shared) -> None:
    """A non-owner's write to a mode 04777 file works and clears the bit (it failed with EPERM: the
    kernel's chmod before the write, sent as the writer, was refused); the owner of a 0444 file may
    not truncate it by name (the server lets an owner, the mode says no); a file unlinked while open
    has no links left (its name became a hidden .nfs one)."""
    (shared.disk / "setid").write_bytes(b"")
    os.chmod(shared.disk / "setid", 0o4777)
    (shared.disk / "mine").write_bytes(b"hello")
    os.chown(shared.disk / "mine", 1000, 1000)
    os.chmod(shared.disk / "mine", 0o444)
    r = as_user(SETID_AND_TRUNCATE, shared.a / "setid", shared.a / "mine")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["write 0o777", "truncate Permission denied", "nlink 0"]
    assert (shared.disk / "setid").read_bytes() == b"x"


def test_a_directory_is_removed_right_after_its_last_file_unlinked_while_open_is_closed(shared: Shared) -> None:
    """A file unlinked while open keeps a hidden .nfsXXXX name until its last close (as on the Linux
    client); the close reaches the mount a moment after close(2) returns, and a rmdir right after
    said ENOTEMPTY (pjdfstest unlink/14)."""
    for i in range(10):
        d = shared.a / f"d{i}"
        d.mkdir()
        fd = os.open(d / "f", os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"Hello")
        os.unlink(d / "f")
        assert os.fstat(fd).st_nlink == 0 and os.pread(fd, 5, 0) == b"Hello"
        os.close(fd)
        os.rmdir(d)
    assert not any(shared.disk.iterdir())


def test_stats_count_what_the_caches_answered_and_what_went_to_the_server(shared: Shared) -> None:
    """pynfsrdma stats: attribute hits and revalidations, lookups answered from the cache of absent
    names and sent, names found stale at an open (another client renamed the file)."""
    for _ in range(3):
        with pytest.raises(FileNotFoundError):
            os.stat(shared.a / "absent")
    (shared.a / "f").write_bytes(b"1")
    os.stat(shared.a / "f")
    os.rename(shared.b / "f", shared.b / "g")
    (shared.b / "f").write_bytes(b"2")
    assert (shared.a / "f").read_bytes() == b"2"
    with Connection(str(shared.a.parent)) as conn:
        cache = conn.request("stats")["cache"]
    assert cache["lookups_sent"] >= 1 and cache["lookups_cached"] >= 2 and cache["stale_names"] >= 1, cache
    assert set(cache) >= {"attr_hits", "attr_revalidations", "invalidations", "reopens"}, cache
    out = subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", "stats", str(shared.a.parent)],
                         capture_output=True, text=True, check=True).stdout
    assert "caches: attributes" in out and "stale names" in out
