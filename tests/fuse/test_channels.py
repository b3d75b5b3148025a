"""Both FUSE channels mount the same export and do the same work with the same result: the native
channel (the default) and pyfuse3 (``-o channel=pyfuse3``), kept working so that it cannot rot."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._fuse import fusermount
from pynfsrdma._testbed import Ganesha

pytestmark = pytest.mark.fuse


def is_mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


def libfuse_loaded(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return any("libfuse3.so" in line for line in f)


def workload(root: Path) -> None:
    (root / "d/e").mkdir(parents=True)
    (root / "d/small.txt").write_text("hello\n" * 100)
    (root / "d/e/big.bin").write_bytes(bytes(range(256)) * 20_000)  # 5 MB: several 1 MiB WRITEs
    os.symlink("e/big.bin", root / "d/link")
    os.link(root / "d/small.txt", root / "d/hard.txt")
    os.chmod(root / "d/small.txt", 0o640)
    subprocess.run(["tar", "cf", str(root / "t.tar"), "-C", str(root), "d"], check=True)
    (root / "x").mkdir()
    subprocess.run(["tar", "xf", str(root / "t.tar"), "-C", str(root / "x")], check=True)
    os.rename(root / "x/d/e", root / "x/d/moved")
    os.unlink(root / "t.tar")
    with open(root / "d/small.txt", "r+b") as f:
        f.truncate(10)


@pytest.mark.parametrize("channel", ["native", "pyfuse3"])
def test_the_same_work_through_either_channel(
    channel: str,
    mount_export: Callable[..., Any],
    ganesha: Ganesha,
    tmp_path: Path,
    snap: Callable[..., dict[str, Any]],
) -> None:
    m = mount_export(f"channel={channel}")
    assert m.proc is not None
    assert libfuse_loaded(m.proc.pid) == (channel == "pyfuse3")
    work = m.path / f"work-{channel}"
    work.mkdir()
    workload(work)
    (tmp_path / "ref").mkdir()
    workload(tmp_path / "ref")
    assert snap(work, times=False) == snap(tmp_path / "ref", times=False)
    on_server = ganesha.export_dir / f"work-{channel}"
    assert (on_server / "x/d/moved/big.bin").read_bytes() == bytes(range(256)) * 20_000
    listing = subprocess.run(["ls", "-lR", str(work)], capture_output=True, text=True, check=True).stdout
    assert "big.bin" in listing and "moved" in listing


def test_an_unknown_channel_is_refused(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pynfsrdma._cli.main", "mount", "nfs://127.0.0.1/x", str(tmp_path), "-o", "channel=x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and "channel=x" in r.stderr and "native" in r.stderr


@pytest.mark.parametrize("channel", ["native", "pyfuse3"])
def test_a_killed_mount_daemon_leaves_no_dead_mount(channel: str, mount_export: Callable[..., Any]) -> None:
    m = mount_export(f"channel={channel}")
    assert m.proc is not None
    (m.path / f"before-kill-{channel}").write_text("x")
    m.proc.send_signal(signal.SIGKILL)
    m.proc.wait(timeout=30)
    m.proc = None  # (killed on purpose: no exit status to check)
    deadline = time.monotonic() + 60  # (fusermount3 unmounts once it sees the daemon gone)
    while is_mounted(m.path):
        assert time.monotonic() < deadline, "a dead mount was left behind"
        time.sleep(0.05)


def _descriptors(pid: int) -> dict[str, int]:
    """What process ``pid``'s descriptors name (``socket:[INODE]``, ``/dev/fuse``...), to its descriptor."""
    return {os.readlink(f"/proc/{pid}/fd/{n}"): int(n) for n in os.listdir(f"/proc/{pid}/fd")}


def _watcher(daemon: int) -> int:
    """The fusermount3 the mount daemon ``daemon`` left to unmount when it dies."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm == "fusermount3" and int(fields[1]) == daemon:
            return int(pid)
    raise AssertionError(f"no fusermount3 child of {daemon}")


@pytest.mark.parametrize("channel", ["native", "pyfuse3"])
def test_the_socket_fusermount3_watches_is_below_the_connection(
    channel: str, mount_export: Callable[..., Any]
) -> None:
    """A dying process's files are let go of from its highest descriptor down: the connection
    (/dev/fuse) must go before the socket, or fusermount3 may find the connection alive when the
    socket ends and leave a dead mount."""
    m = mount_export(f"channel={channel}")
    assert m.proc is not None
    watcher = _watcher(m.proc.pid)
    with open(f"/proc/{watcher}/environ", "rb") as f:
        env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
    theirs = os.readlink(f"/proc/{watcher}/fd/{int(env[b'_FUSE_COMMFD'])}")
    # ss -x: "u_str ESTAB 0 0 * INODE * PEER-INODE"
    pairs = subprocess.run(["ss", "-xH"], capture_output=True, text=True, check=True).stdout.splitlines()
    peer = next(line.split()[7] for line in pairs if f"socket:[{line.split()[5]}]" == theirs)
    ours = _descriptors(m.proc.pid)
    assert ours[f"socket:[{peer}]"] < ours["/dev/fuse"]


def test_a_connection_below_the_watched_socket_is_moved_above_it() -> None:
    """The native channel's own mount: the connection it receives takes the lowest free descriptor,
    which may be below the socket; it is moved above and keeps naming the same file."""
    connection = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    ours, theirs = socket.socketpair()
    moved = connection
    try:
        assert connection < ours.fileno()
        moved = fusermount.connection_above(connection, ours.fileno())
        assert moved > ours.fileno() and os.readlink(f"/proc/self/fd/{moved}") == os.devnull
        assert not os.get_inheritable(moved)
        assert fusermount.connection_above(moved, ours.fileno()) == moved  # (above already: kept)
    finally:
        os.close(moved)
        ours.close()
        theirs.close()
