"""Small files through the mount: what ``tar x`` and ``ls -l`` cost in COMPOUNDs, and that the
fewer round trips leave the same files, times, modes and owners on the server's disk.

Counts come from the daemon itself (``pynfsrdma stats``: COMPOUNDs named by their main operation,
and every operation inside them), read before and after the work on a mount of its own.
"""

from __future__ import annotations

import ctypes
import io
import os
import platform
import stat
import struct
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from daemon_counts import counts, delta, settle

from pynfsrdma import _control_socket as control_socket
from pynfsrdma._fuse.cache import LISTING_RUN

pytestmark = pytest.mark.fuse
USER = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups"]
MTIME = 1_700_000_000


def make_tarball(path: Path, dirs: int, per_dir: int) -> list[str]:
    """Files of a few hundred bytes to 12 KiB (one WRITE each) in ``dirs`` directories, mode 0644
    and 0755, owned by 0:0, one mtime."""
    names = []
    with tarfile.open(path, "w") as tar:
        for d in range(dirs):
            ti = tarfile.TarInfo(f"src/d{d}")
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, MTIME
            tar.addfile(ti)
            for i in range(per_dir):
                body = (f"file {d}/{i} ".encode() * 997)[: 300 + 700 * i]
                ti = tarfile.TarInfo(f"src/d{d}/f{i}.c")
                ti.size, ti.mode, ti.mtime = len(body), 0o755 if i % 3 == 0 else 0o644, MTIME + i
                tar.addfile(ti, io.BytesIO(body))
                names.append(ti.name)
    return names


def tree(root: Path) -> dict[str, tuple[int, int, int, int, int, bytes | None]]:
    """Every entry below root: (mode, uid, gid, size, mtime_ns, data of regular files)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        data = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[str(p.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, data)
    return out


def test_untar_takes_two_compounds_per_file_and_a_share_of_one_and_leaves_what_tar_says(
    mount_export: Callable[..., Any], export_path: Any, tmp_path: Path
) -> None:
    dirs, per_dir = 3, 12
    tarball = tmp_path / "t.tar"
    files = make_tarball(tarball, dirs, per_dir)
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    before, ops_before = settle(m.path)
    r = subprocess.run(["tar", "xf", str(tarball), "-C", str(m.path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    after, ops_after = settle(m.path)
    compounds, ops = delta(after, before), delta(ops_after, ops_before)
    n = len(files)
    # per file: OPEN (tar creates with O_EXCL: + SETATTR of the times the verifier took), WRITE
    # FILE_SYNC + SETATTR (tar's times and its chmod from the 0600 it creates with, kept until the
    # close) + GETATTR, and a CLOSE (with others); tar's chown to the owner the file has sends
    # nothing, and the kernel's lookup of the new name is answered from the listing of the directory
    # tar made and fills (looked up: "src", in a directory the mount did not make, and in each
    # directory tar made the names before its changes there make a run: the first two, or a few
    # more if tar pauses)
    assert compounds.get("LOOKUP", 0) <= 1 + (LISTING_RUN + 1) * (dirs + 1), compounds
    assert compounds.get("WRITE") == n, compounds
    assert ops.get("WRITE") == n and ops.get("CLOSE") == n, (compounds, ops)
    assert compounds.get("CLOSE", 0) < n, compounds  # CLOSEs go several to a COMPOUND
    assert "COMMIT" not in ops, ops  # every file's data went FILE_SYNC with its attributes
    assert ops.get("SETATTR", 0) <= 2 * n + 3 * (dirs + 1), ops
    assert sum(compounds.values()) - compounds["CLOSE"] <= 2 * n + 6 * (dirs + 1), (compounds, ops)
    # a mount made by root checks permissions in the kernel (default_permissions): before each create
    # the kernel looks at the directory's attributes, which every create in it made stale; they came
    # back with the create (its COMPOUND ends with the directory's GETATTR), and no GETATTR is sent
    assert compounds.get("GETATTR", 0) <= dirs + 1, (compounds, ops)
    # the same tree as tar makes on a local disk: data, modes, owners and (nanosecond) mtimes
    ref = tmp_path / "ref"
    ref.mkdir()
    subprocess.run(["tar", "xf", str(tarball), "-C", str(ref)], check=True)
    assert tree(export_path.local / "src") == tree(ref / "src")
    assert tree(m.path / "src") == tree(ref / "src")


def test_rm_r_sends_no_getattr_for_the_permission_check_before_each_unlink(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    n = 20
    (m.path / "d").mkdir()
    for i in range(n):
        (m.path / "d" / f"f{i}").write_bytes(b"x")
    before, ops_before = settle(m.path)
    r = subprocess.run(["rm", "-r", str(m.path / "d")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    after, ops_after = settle(m.path)
    compounds, ops = delta(after, before), delta(ops_after, ops_before)
    assert not (export_path.local / "d").exists() and not (m.path / "d").exists()
    assert compounds.get("REMOVE") == n + 1, compounds
    # the kernel (default_permissions, as root mounts) checks the directory before each unlink, and
    # finds its attributes out of date after the one before: they came back with that REMOVE
    assert compounds.get("GETATTR", 0) <= 2, (compounds, ops)  # (not one per file)


def test_renames_and_links_send_no_getattr_for_the_permission_checks_before_each(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    n = 20
    a, b = m.path / "a", m.path / "b"
    a.mkdir()
    b.mkdir()
    for i in range(n):
        (a / f"f{i}").write_bytes(b"x")
    before, ops_before = settle(m.path)
    for i in range(n):  # in one directory, then into another, then a hard link back
        os.rename(a / f"f{i}", a / f"g{i}")
        os.rename(a / f"g{i}", b / f"g{i}")
        os.link(b / f"g{i}", a / f"h{i}")
    after, ops_after = settle(m.path)
    compounds, ops = delta(after, before), delta(ops_after, ops_before)
    assert sorted(os.listdir(export_path.local / "a")) == sorted(f"h{i}" for i in range(n))
    assert sorted(os.listdir(export_path.local / "b")) == sorted(f"g{i}" for i in range(n))
    assert all(os.stat(export_path.local / "b" / f"g{i}").st_nlink == 2 for i in range(n))
    assert os.stat(b / "g0").st_nlink == 2 and sorted(os.listdir(a)) == sorted(f"h{i}" for i in range(n))
    assert compounds.get("RENAME") == 2 * n and compounds.get("LINK") == n, compounds
    # the kernel (default_permissions, as root mounts) checks both directories before each rename
    # and link, and finds their attributes out of date after the one before: they came back with it
    assert compounds.get("GETATTR", 0) <= 2, (compounds, ops)  # (not one per rename or link)


def test_times_set_after_writes_stay_on_the_servers_disk(work_dir: Any, shared_mount: Any) -> None:
    data = os.urandom(5000)
    f = work_dir.mnt / "a"
    before, ops_before = settle(shared_mount.path)
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, data[:3000])
    os.write(fd, data[3000:])
    os.utime(fd, ns=(MTIME * 10**9 + 5, MTIME * 10**9 + 123456789))
    os.fchmod(fd, 0o640)
    os.close(fd)
    after, ops_after = settle(shared_mount.path)
    st = (work_dir.local / "a").stat()
    assert (work_dir.local / "a").read_bytes() == data
    assert st.st_mtime_ns == MTIME * 10**9 + 123456789 and st.st_atime_ns == MTIME * 10**9 + 5
    assert stat.S_IMODE(st.st_mode) == 0o640
    compounds, ops = delta(after, before), delta(ops_after, ops_before)
    assert compounds.get("WRITE") == 1 and ops.get("WRITE") == 1 and "COMMIT" not in ops, (compounds, ops)
    # with the OPEN (O_EXCL's times) and with the WRITE
    assert "SETATTR" not in compounds and ops.get("SETATTR") == 2, (compounds, ops)
    # a write after the times moves mtime on, as it does on a local disk
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"more")
    os.utime(fd, ns=(MTIME * 10**9, MTIME * 10**9))
    os.write(fd, b"after")
    os.close(fd)
    assert (work_dir.local / "a").read_bytes() == data + b"moreafter"
    assert (work_dir.local / "a").stat().st_mtime_ns > MTIME * 10**9
    assert f.stat().st_size == len(data) + 9


def test_chmod_and_chown_to_what_the_file_has_send_nothing(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    os.chmod(export_path.local, 0o777)
    m = mount_export("allow_other", subdir=export_path.remote.removeprefix("/export/"))
    f = m.path / "f"
    f.write_text("x")
    os.chmod(f, 0o644)
    st = f.stat()
    before, _ = settle(m.path)
    os.chmod(f, 0o644)
    os.chown(f, st.st_uid, st.st_gid)
    assert settle(m.path)[0] == before  # the owner asks for what is there already: no SETATTR
    os.chmod(f, 0o600)  # a real change goes to the server
    assert stat.S_IMODE((export_path.local / "f").stat().st_mode) == 0o600
    assert delta(settle(m.path)[0], before) == {"SETATTR": 1}
    # someone who does not own the file gets the server's answer, as from a local disk
    r = subprocess.run([*USER, "chmod", "600", str(f)], capture_output=True, text=True)
    assert r.returncode != 0 and "Operation not permitted" in r.stderr, r
    fd = os.open(f, os.O_RDONLY)
    try:
        os.fchmod(fd, 0o4600)  # set-user-ID: always sent
    finally:
        os.close(fd)
    assert stat.S_IMODE((export_path.local / "f").stat().st_mode) == 0o4600
    r = subprocess.run([*USER, "chown", "0:0", str(f)], capture_output=True, text=True)
    assert r.returncode != 0 and "Operation not permitted" in r.stderr, r


def test_ls_l_of_a_cold_directory_is_readdir_alone(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    n = 2500
    d = export_path.local / "big"
    d.mkdir()
    for i in range(n):
        p = d / f"e{i:05d}"
        if i % 10 == 0:
            p.mkdir(mode=0o750)
        else:
            p.write_bytes(b"x" * (i % 97))
            os.chmod(p, 0o600 + (i % 8))
        os.utime(p, ns=(MTIME * 10**9 + i, MTIME * 10**9 + 7 * i))
    os.symlink("e00001", d / "link")
    # what a listing gave is kept, by the kernel and by the mount, for acregmin (acdirmin for a
    # directory): a minute here, not the 3 s default, so that the stats after the listing still
    # find it when a loaded machine pauses this test for seconds in between
    m = mount_export("acregmin=60", subdir=export_path.remote.removeprefix("/export/"))
    before, _ = settle(m.path)
    r = subprocess.run(
        ["ls", "-l", "--time-style=+%s", str(m.path / "big")],
        capture_output=True,
        text=True,
        env={"LC_ALL": "C"},
    )
    assert r.returncode == 0 and not r.stderr, r.stderr
    compounds = delta(settle(m.path)[0], before)
    ref = subprocess.run(
        ["ls", "-l", "--time-style=+%s", str(d)],
        capture_output=True,
        text=True,
        env={"LC_ALL": "C"},
        check=True,
    )
    # the same listing, sizes, modes, owners and times as on the server's disk (link counts of
    # directories aside: the mount shows the server's, which is the local one too)
    assert r.stdout.splitlines()[1:] == ref.stdout.splitlines()[1:]
    assert len(r.stdout.splitlines()) == n + 2
    # readdirplus gave the kernel every entry's attributes: no LOOKUP or GETATTR per entry, and
    # several entries per READDIR
    assert compounds.get("READDIR", 0) <= n // 50, compounds
    assert sum(v for k, v in compounds.items() if k != "READDIR") <= 4, compounds
    # and the attributes are the kernel's now: a stat of each costs nothing
    for i in range(0, n, 97):
        assert (m.path / "big" / f"e{i:05d}").lstat().st_mtime_ns == MTIME * 10**9 + 7 * i
    assert delta(settle(m.path)[0], before) == compounds


SYS_GETDENTS64 = 217  # x86_64 (the machines this project runs on; see docs/platform notes)
DIRENT64 = struct.Struct("=QqHB")  # d_ino, d_off, d_reclen, d_type; the name follows


def getdents_names(path: Path, bufsize: int) -> list[bytes]:
    """The names of a directory read with getdents64 into a small buffer: the kernel then keeps
    only part of each FUSE reply and asks again from where the reader stopped."""
    assert platform.machine() == "x86_64"
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(bufsize)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    names = []
    try:
        while True:
            n = libc.syscall(SYS_GETDENTS64, fd, buf, bufsize)
            if n < 0:
                raise OSError(ctypes.get_errno(), "getdents64")
            if n == 0:
                return names
            raw, pos = buf.raw, 0
            while pos < n:
                _, _, reclen, _ = DIRENT64.unpack_from(raw, pos)
                names.append(raw[pos + DIRENT64.size : pos + reclen].split(b"\0", 1)[0])
                pos += reclen
    finally:
        os.close(fd)


def listed_through_a_mount(mount_export: Callable[..., Any], export_path: Any, n: int, name: str, bufsize: int
                           ) -> tuple[list[bytes], dict[str, int], Path]:
    """A directory of ``n`` empty files named by the format ``name`` (of their index), made on the
    server, listed through a new mount with getdents64 buffers of ``bufsize`` bytes: the names (".",
    ".." first), the COMPOUNDs that took, and the directory's path in the mount."""
    d = export_path.local / "listed"
    d.mkdir()
    for i in range(n):
        (d / name.format(i)).touch()
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    before, _ = settle(m.path)
    names = getdents_names(m.path / "listed", bufsize)
    return names, delta(settle(m.path)[0], before), m.path / "listed"


def test_a_reader_with_a_small_buffer_sees_every_entry_once(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    n = 1500
    d = export_path.local / "listed"
    names, compounds, listed = listed_through_a_mount(mount_export, export_path, n,
                                                      "entry-with-a-longer-name-{:05d}", 700)  # (a few per call)
    assert names[:2] == [b".", b".."]
    names = names[2:]
    assert sorted(names) == sorted(os.fsencode(p.name) for p in d.iterdir())
    assert len(names) == n  # none twice
    # what the kernel asked again was served from the entries in hand: each READDIR once
    pages = compounds.get("READDIR", 0)
    assert 1 <= pages <= n // 100, compounds
    again = getdents_names(listed, 1 << 16)  # and a listing from the start is fresh
    assert sorted(again) == sorted([b".", b"..", *names])


def test_a_large_directory_is_read_in_growing_pages(mount_export: Callable[..., Any], export_path: Any) -> None:
    """A listing's first READDIR asks for little (a small directory costs no more than it holds), each
    after it for twice as much: 8,000 entries take a handful of READDIRs, neither one (1 MiB from
    the start) nor the 30 or so of 64 KiB pages."""
    n = 8000
    names, compounds, _ = listed_through_a_mount(mount_export, export_path, n, "entry-{:05d}", 1 << 16)
    pages = compounds.get("READDIR", 0)
    assert sorted(names) == sorted([b".", b"..", *(os.fsencode(f"entry-{i:05d}") for i in range(n))])
    assert 3 <= pages <= 7, pages


def test_times_and_mode_wait_for_the_data_and_stat_shows_them_before(
    work_dir: Any, shared_mount: Any
) -> None:
    """tar's utimensat and fchmod after the data are kept until the close and go with the data in
    one COMPOUND; a stat in between (the kernel asks for one before every chown) sends nothing and
    shows what the file will be."""
    data = os.urandom(7000)
    fd = os.open(work_dir.mnt / "w", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        before, _ = counts(shared_mount.path)
        os.utime(fd, ns=(MTIME * 10**9, MTIME * 10**9 + 42))
        os.fchown(fd, os.getuid(), os.getgid())
        os.fchmod(fd, 0o644)
        st = os.fstat(fd)
        assert (st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode)) == (
            len(data),
            MTIME * 10**9 + 42,
            0o644,
        )
        assert counts(shared_mount.path)[0] == before  # nothing sent yet
        assert (work_dir.local / "w").stat().st_size == 0  # (the server has not seen the data)
    finally:
        os.close(fd)
    local = (work_dir.local / "w").stat()
    assert (work_dir.local / "w").read_bytes() == data
    assert (local.st_mtime_ns, stat.S_IMODE(local.st_mode)) == (MTIME * 10**9 + 42, 0o644)
    assert delta(settle(shared_mount.path)[0], before) == {"WRITE": 1, "CLOSE": 1}


def test_a_refused_deferred_chmod_fails_the_close_and_keeps_the_data(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    """The owner's chmod is kept with the data; if the file changed hands on the server meanwhile,
    the server refuses it when it goes: close(2) reports EPERM, as it reports a failed write, and the
    data is on the server all the same."""
    os.chmod(export_path.local, 0o777)
    m = mount_export("allow_other", subdir=export_path.remote.removeprefix("/export/"))
    script = (
        "import os, sys\n"
        f"fd = os.open({str(m.path / 'f')!r}, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)\n"
        "os.write(fd, b'precious data')\n"
        "os.fchmod(fd, 0o644)\n"
        "sys.stdout.write('chmod done\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
        "try:\n"
        "    os.close(fd)\n"
        "except OSError as e:\n"
        "    print('close:', e.strerror)\n"
        "else:\n"
        "    print('close: ok')\n"
    )
    p = subprocess.Popen(
        [*USER, sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdin is not None
    assert p.stdout.readline() == "chmod done\n"
    os.chown(export_path.local / "f", 2000, 2000)  # on the server's disk, behind the mount's back
    out, _ = p.communicate("\n", timeout=30)
    assert out.strip() == "close: Operation not permitted", out
    assert (export_path.local / "f").read_bytes() == b"precious data"
    assert stat.S_IMODE((export_path.local / "f").stat().st_mode) == 0o600


def test_closes_nobody_waits_for_share_compounds_and_a_reopen_meanwhile_keeps_its_open(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    for i in range(20):
        (export_path.local / f"r{i}").write_bytes(b"%d" % i)
    fds = [os.open(m.path / f"r{i}", os.O_RDONLY) for i in range(20)]
    before, ops_before = settle(m.path)
    for fd in fds:  # release sends nothing itself: the CLOSEs gather
        os.close(fd)
    after, ops_after = settle(m.path)
    compounds, ops = delta(after, before), delta(ops_after, ops_before)
    assert ops == {"CLOSE": 20, "PUTFH": 20}, (compounds, ops)
    assert compounds["CLOSE"] <= 10, compounds
    # written, closed and at once opened again, written and closed, removed, made again: the
    # OPEN that comes before the earlier CLOSE moves the open on, and that CLOSE ends nothing
    f = m.path / "again"
    for i in range(30):
        with open(f, "ab") as w:
            w.write(b"%d," % i)
        with open(f, "rb") as r:
            assert r.read().endswith(b"%d," % i)
        if i % 10 == 9:
            os.unlink(f)
            assert not (export_path.local / "again").exists()
    f.write_bytes(b"last")
    assert (export_path.local / "again").read_bytes() == b"last"
    settle(m.path)
    assert "CLOSE of an open" not in m.log.read_text()



def fuse_requests(mountpoint: Path) -> dict[str, int]:
    """The FUSE requests the daemon answered so far, by opcode (``pynfsrdma stats --json``)."""
    return dict(control_socket.query(str(mountpoint), "stats")["fuse_requests"])


def test_stats_count_the_fuse_requests_of_an_untar_by_kind(
    mount_export: Callable[..., Any], export_path: Any, tmp_path: Path
) -> None:
    dirs, per_dir = 2, 10
    tarball = tmp_path / "t.tar"
    files = make_tarball(tarball, dirs, per_dir)
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    settle(m.path)
    before = fuse_requests(m.path)
    r = subprocess.run(["tar", "xf", str(tarball), "-C", str(m.path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    settle(m.path)
    got = delta(fuse_requests(m.path), before)
    n = len(files)
    # what the kernel asks for each file tar makes: a CREATE (after the LOOKUP of the new name), a
    # WRITE of its few KiB, the SETATTRs of tar's fchown, fchmod and futimens, a FLUSH at close and
    # the RELEASE after it; and a MKDIR for each directory ("src" and its two)
    assert got["CREATE"] == n and got["WRITE"] == n, got
    assert got["FLUSH"] == n and got["RELEASE"] == n, got
    assert got["MKDIR"] == dirs + 1, got
    assert n <= got["LOOKUP"] <= n + 2 * (dirs + 1), got
    # (the kernel's writeback may flush a written file's times by a SETATTR of its own before tar's
    # futimens sets them: fuse_write_inode, at most once a file, when the flusher comes by in between)
    assert 3 * n <= got["SETATTR"] <= 4 * n + 3 * (dirs + 1), got
    flushes = got["SETATTR"] - 3 * n  # (the kernel's own, bounded above)
    assert sum(got.values()) - flushes <= 10 * n, got


def test_a_shell_appending_to_a_log_takes_an_open_a_write_and_a_close_per_line(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    """``echo x >> f``: the OPEN (by name, with the file's attributes: close-to-open), a WRITE and
    a CLOSE. With the writeback cache an append goes around the kernel's page cache, which leaves the
    mtime the kernel holds behind: the next open is answered ESTALE and the kernel makes a new inode,
    and its lookups of the name and its open again are answered from that OPEN."""
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    (export_path.local / "log").write_bytes(b"start\n")
    f = m.path / "log"
    f.stat()
    n = 12
    before, ops_before = settle(m.path)
    for i in range(n):
        subprocess.run(["sh", "-c", f"echo line{i} >> {f}"], check=True)
    after, ops_after = settle(m.path)
    compounds, ops = delta(after, before), delta(ops_after, ops_before)
    assert ops.get("OPEN") == n and compounds.get("WRITE") == n, (compounds, ops)
    assert "LOOKUP" not in ops, (compounds, ops)
    assert sum(compounds.values()) <= 3 * n, (compounds, ops)
    want = b"start\n" + b"".join(b"line%d\n" % i for i in range(n))
    assert (export_path.local / "log").read_bytes() == want
    assert f.read_bytes() == want
    assert f.stat().st_mtime_ns == (export_path.local / "log").stat().st_mtime_ns
