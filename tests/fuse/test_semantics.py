"""POSIX behaviour through the mount that a local filesystem would show, and the mount's own life."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma import _control_socket as control_socket
from pynfsrdma._testbed import Ganesha

pytestmark = pytest.mark.fuse
REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "pynfsrdma._cli.main"]
USER = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups"]


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


def eventually(cond: Callable[[], bool], limit: float = 15.0) -> bool:
    """FUSE's release is asynchronous (close(2) does not wait for it): poll for what it does."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def silly_names(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.startswith(".nfs"))


def test_unlink_while_open_reads_still_work(work_dir: Any) -> None:
    data = os.urandom(300_000)
    f = work_dir.mnt / "doomed"
    f.write_bytes(data)
    with open(f, "rb") as r:
        assert r.read(1000) == data[:1000]
        f.unlink()
        assert not f.exists()
        assert "doomed" not in os.listdir(work_dir.mnt)
        assert len(silly_names(work_dir.local)) == 1  # renamed on the server, not removed
        assert r.read() == data[1000:]
        r.seek(0)
        assert r.read() == data
    assert eventually(lambda: os.listdir(work_dir.local) == [])  # removed at the last close


def test_rename_over_an_open_file(work_dir: Any) -> None:
    (work_dir.mnt / "target").write_bytes(b"old contents")
    (work_dir.mnt / "new").write_bytes(b"new contents")
    with open(work_dir.mnt / "target", "rb") as r:
        os.rename(work_dir.mnt / "new", work_dir.mnt / "target")
        assert (work_dir.mnt / "target").read_bytes() == b"new contents"
        assert r.read() == b"old contents"  # the open file is the old one, still readable
    assert eventually(lambda: sorted(os.listdir(work_dir.local)) == ["target"])
    assert (work_dir.local / "target").read_bytes() == b"new contents"


APPENDER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for i in range(int(sys.argv[3])):
    os.write(fd, f"{sys.argv[2]} {i:05d} {'x' * 50}\\n".encode())
os.close(fd)
"""


def test_two_processes_appending(work_dir: Any) -> None:
    n = 400
    path = work_dir.mnt / "log"
    procs = [
        subprocess.Popen([sys.executable, "-c", APPENDER, str(path), tag, str(n)], stderr=subprocess.PIPE)
        for tag in "AB"
    ]
    errors = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    lines = path.read_text().splitlines()
    assert len(lines) == 2 * n
    for tag in "AB":  # every line whole, each writer's lines in order
        mine = [ln for ln in lines if ln.startswith(tag + " ")]
        assert mine == [f"{tag} {i:05d} {'x' * 50}" for i in range(n)]
    assert (work_dir.local / "log").read_text() == path.read_text()


def _errno_of(fn: Callable[[], Any]) -> int:
    try:
        fn()
    except OSError as e:
        return e.errno or 0
    return 0


def test_errors_are_those_of_a_local_filesystem(work_dir: Any) -> None:
    results = []
    for root in (work_dir.mnt, work_dir.ref):
        (root / "d").mkdir()
        (root / "d/f").write_text("x")
        (root / "f").write_text("y")
        results.append(
            [
                _errno_of(lambda r=root: os.rmdir(r / "d")),  # ENOTEMPTY
                _errno_of(lambda r=root: os.open(r / "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY)),  # EEXIST
                _errno_of(lambda r=root: os.stat(r / "missing")),  # ENOENT
                _errno_of(lambda r=root: os.open(r / "d", os.O_WRONLY)),  # EISDIR
                _errno_of(lambda r=root: os.stat(r / "f/x")),  # ENOTDIR
                _errno_of(lambda r=root: os.mkdir(r / "d")),  # EEXIST
                _errno_of(lambda r=root: os.unlink(r / "d")),  # EISDIR
                _errno_of(lambda r=root: os.rmdir(r / "f")),  # ENOTDIR
                _errno_of(lambda r=root: os.rename(r / "d", r / "d/f/sub")),  # ENOTDIR or EINVAL
                _errno_of(lambda r=root: (r / ("n" * 300)).write_text("z")),  # ENAMETOOLONG
                _errno_of(lambda r=root: os.mkdir(r / "d" / "sub")),  # 0
                _errno_of(lambda r=root: os.rename(r / "d/sub", r / "d/f")),  # ENOTDIR
            ]
        )
    assert results[0] == results[1]
    assert results[0][:3] == [errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT]


def test_statfs(work_dir: Any) -> None:
    st = os.statvfs(work_dir.mnt)
    local = os.statvfs(work_dir.local)
    assert st.f_blocks > 0 and st.f_frsize * st.f_blocks == pytest.approx(
        local.f_frsize * local.f_blocks, rel=0.01
    )
    out = subprocess.run(["df", "-P", str(work_dir.mnt)], capture_output=True, text=True, check=True).stdout
    assert "127.0.0.1:/export" in out


def test_permissions_as_a_user(mount_export: Callable[..., Any], export_path: Any) -> None:
    root = export_path.local
    os.chmod(root, 0o777)
    (root / "private").write_text("root only")
    os.chmod(root / "private", 0o600)
    (root / "mine").mkdir()
    os.chown(root / "mine", 1000, 1000)
    os.chmod(root / "mine", 0o700)
    sub = export_path.remote.removeprefix("/export/")
    for options in ("allow_other", "allow_other,nodefault_permissions"):  # the kernel checks, or the server alone
        m = mount_export(options, subdir=sub)

        def as_user(script: str, m: Any = m) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*USER, "sh", "-c", script], cwd=m.path, capture_output=True, text=True, timeout=30
            )

        r = as_user("cat private")
        assert r.returncode != 0 and "Permission denied" in r.stderr, (options, r)
        r = as_user("echo hi > mine/new-$$ && cat mine/new-$$ && id -u")
        assert r.returncode == 0 and r.stdout == "hi\n1000\n", (options, r)
        r = as_user("echo x > not-mine/y; touch private")
        assert r.returncode != 0
        assert (root / "private").read_text() == "root only"
    made = sorted((root / "mine").iterdir())
    assert len(made) == 2 and all(p.stat().st_uid == 1000 and p.stat().st_gid == 1000 for p in made)


def test_squash_uid_sends_everything_as_one_user(mount_export: Callable[..., Any], export_path: Any) -> None:
    os.chmod(export_path.local, 0o777)
    m = mount_export("squash_uid=1234,squash_gid=4321", subdir=export_path.remote.removeprefix("/export/"))
    (m.path / "f").write_text("x")
    st = (export_path.local / "f").stat()
    assert (st.st_uid, st.st_gid) == (1234, 4321)


def test_unknown_options_are_named(ganesha: Ganesha, tmp_path: Path) -> None:
    r = subprocess.run(
        [*CLI, "mount", ganesha.url, str(tmp_path), "-o", "rsize=65536,bogus,frob=1,soft"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "unknown mount options: bogus, frob=1" in r.stderr
    assert not mounted(tmp_path)
    r = subprocess.run(
        [*CLI, "mount", ganesha.url, str(tmp_path), "-o", "timeo=abc"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and "timeo=abc: not a number" in r.stderr


def test_unreachable_server_fails_cleanly(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for mode in ([], ["-f"]):
        r = subprocess.run(
            [
                *CLI,
                "mount",
                f"nfs://127.0.0.1:{port}/export",
                str(tmp_path),
                *mode,
                "-o",
                "soft,timeo=20,retrans=1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 1, r
        assert r.stderr.startswith(f"pynfsrdma: cannot mount nfs://127.0.0.1:{port}/export: "), r.stderr
        assert not mounted(tmp_path)


def test_missing_export_fails_cleanly(ganesha: Ganesha, tmp_path: Path) -> None:
    r = subprocess.run(
        [*CLI, "mount", ganesha.url + "/no-such-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "No such file or directory" in r.stderr, r
    assert not mounted(tmp_path)


def test_sigterm_unmounts_and_keeps_data(mount_export: Callable[..., Any], export_path: Any) -> None:
    m = mount_export("", subdir=export_path.remote.removeprefix("/export/"))
    data = os.urandom(2_500_000)
    with open(m.path / "f", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    m.proc.send_signal(signal.SIGTERM)
    assert m.proc.wait(timeout=30) == 0
    assert not mounted(m.path)
    assert (export_path.local / "f").read_bytes() == data


def test_background_mount_umount_and_mount_helper(ganesha: Ganesha, export_path: Any) -> None:
    with tempfile.TemporaryDirectory() as d:
        mnt = Path(d)
        r = subprocess.run(
            [*CLI, "mount", f"{ganesha.url}/{export_path.name}", d],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        assert mounted(mnt)  # up when the command returns
        (mnt / "bg").write_text("background")
        r = subprocess.run([*CLI, "umount", d], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert not mounted(mnt)
        assert (export_path.local / "bg").read_text() == "background"

        # what mount(8) runs for `mount -t fuse.pynfsrdma 127.0.0.1:/export/... DIR -o port=N,...`
        helper = REPO / "bin" / "mount.pynfsrdma"
        r = subprocess.run(
            [
                str(helper),
                f"{ganesha.host}:{export_path.remote}",
                d,
                "-o",
                f"rw,nosuid,nodev,port={ganesha.port},actimeo=1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYNFSRDMA_PYTHON": sys.executable},
        )
        assert r.returncode == 0, r.stderr
        try:
            assert (mnt / "bg").read_text() == "background"
            line = next(ln for ln in Path("/proc/self/mounts").read_text().splitlines() if f" {d} " in ln)
            assert line.startswith(f"{ganesha.host}:{export_path.remote} {d} fuse.pynfsrdma ")
        finally:
            subprocess.run(["fusermount3", "-u", d], check=True)


def test_a_mount_made_again_at_once_on_the_same_mount_point_keeps_its_session(
    ganesha: Ganesha, export_path: Any
) -> None:
    """umount, then mount again on the same directory right away: the two daemons are one client
    owner (the mount point's), and while the first still closed files and ended its session the
    second's client ID took its place; the first then recovered, taking the place back, and each
    recovered again and again. umount now returns once the daemon is done."""
    with tempfile.TemporaryDirectory() as d:
        mnt = Path(d)
        for i in range(4):
            r = subprocess.run([*CLI, "mount", f"{ganesha.url}/{export_path.name}", d],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            pid = control_socket.query(d, "stats")["pid"]
            for j in range(20):
                (mnt / f"f{i}-{j}").write_bytes(b"x" * j)
            st = control_socket.query(d, "stats")
            r = subprocess.run([*CLI, "umount", d], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            assert st["recoveries"] == 0, st
            assert not Path(f"/proc/{pid}").exists()  # the daemon is done when umount returns
        assert sorted(p.name for p in export_path.local.iterdir()) == sorted(
            f"f{i}-{j}" for i in range(4) for j in range(20)
        )
