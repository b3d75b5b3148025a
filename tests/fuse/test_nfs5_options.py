"""The nfs(5) options fstab lines carry, through ``pynfsrdma mount`` against NFS-Ganesha: ``vers=4``
(the highest version both speak), ``nolock`` and ``local_lock=`` (locks local to the mount), ``bg``
and ``retry=`` (a server not there yet), and those that mean nothing here (one line on stderr)."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._control_socket import Connection
from pynfsrdma._testbed.ganesha import Ganesha

pytestmark = pytest.mark.fuse

CLI = [sys.executable, "-m", "pynfsrdma._cli.main"]

# Takes a lock on the file (posix: fcntl, flock: flock), says "locked", and holds it until stdin ends.
HOLD = r"""
import fcntl, sys
f = open(sys.argv[2], "r+b")
if sys.argv[1] == "posix":
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
else:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
sys.stdin.read()
"""


def nfs_version(mountpoint: Path) -> str:
    with Connection(str(mountpoint)) as conn:
        return str(conn.request("stats")["nfs_version"])


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


@pytest.fixture
def mountpoints(tmp_path: Path) -> Iterator[Callable[[], Path]]:
    """Fresh mount points for ``pynfsrdma mount`` in the background; unmounted at the end."""
    made: list[Path] = []

    def make() -> Path:
        p = tmp_path / f"mnt{len(made)}"
        p.mkdir()
        made.append(p)
        return p

    yield make
    for p in made:
        if mounted(p):
            subprocess.run([*CLI, "umount", str(p)], timeout=60, check=True)


@pytest.mark.parametrize(("served", "spoken"), [((1, 2), "4.2"), ((1,), "4.1")])
def test_vers_4_speaks_the_highest_version_both_have(
    ganesha_factory: Callable[..., Ganesha], mountpoints: Callable[[], Path], served: tuple[int, ...], spoken: str
) -> None:
    server = ganesha_factory(minor_versions=served)
    mnt = mountpoints()
    p = subprocess.run([*CLI, "mount", server.url, str(mnt), "-o", "vers=4"], capture_output=True, text=True,
                       timeout=60)
    assert (p.returncode, p.stderr) == (0, "")
    assert nfs_version(mnt) == spoken
    (mnt / "f").write_bytes(b"spoken")
    assert (server.export_dir / "f").read_bytes() == b"spoken"


def hold(kind: str, path: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, kind, str(path)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "locked\n"
    return p


def try_lock(kind: str, path: Path) -> str:
    with open(path, "r+b") as f:
        try:
            if kind == "posix":
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            else:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            return os.strerror(e.errno)
        return "locked"


@pytest.mark.parametrize(
    ("options", "local"),
    [("nolock", {"posix", "flock"}), ("local_lock=flock", {"flock"}), ("local_lock=posix", {"posix"}),
     ("local_lock=none", set())],
)
def test_nolock_and_local_lock_keep_locks_local_to_the_mount(
    mount_export: Callable[..., Any], ganesha: Ganesha, options: str, local: set[str]
) -> None:
    """A lock taken through the mount with the option is seen through that mount; through another
    mount of the export (another client) only if that kind of lock goes to the server."""
    d = ganesha.new_directory(prefix="locallock-")
    (d.local / "f").write_bytes(b"x")
    a = mount_export(f"channel=native,{options}").path / d.local.name / "f"
    b = mount_export("channel=native").path / d.local.name / "f"
    for kind in ("posix", "flock"):
        holder = hold(kind, a)
        try:
            seen_here = try_lock(kind, a)
            seen_there = try_lock(kind, b)
        finally:
            holder.communicate("")
        assert seen_here == "Resource temporarily unavailable", kind
        assert seen_there == ("locked" if kind in local else "Resource temporarily unavailable"), kind


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bg_mounts_once_the_server_is_there(
    ganesha_factory: Callable[..., Ganesha], mountpoints: Callable[[], Path]
) -> None:
    """nfs(5)'s bg: when the server cannot be reached, the command says so and returns 0 at once,
    and the mount is made in the background once the server answers (within retry= minutes)."""
    port, mnt = free_port(), mountpoints()
    url = f"nfs://127.0.0.1:{port}/export"
    p = subprocess.run([*CLI, "mount", url, str(mnt), "-o", "bg,retry=2"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not mounted(mnt)
    assert p.stderr == (f"pynfsrdma: cannot mount {url}: 127.0.0.1:{port}: connection refused; trying again in the "
                        "background for 2 minutes (bg)\n")
    server = ganesha_factory(port=port)
    (server.export_dir / "there").write_bytes(b"at last")
    deadline = time.monotonic() + 60
    while not mounted(mnt) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (mnt / "there").read_bytes() == b"at last"


def test_retry_keeps_trying_in_the_foreground_until_the_server_answers(
    ganesha_factory: Callable[..., Ganesha], mountpoints: Callable[[], Path]
) -> None:
    port, mnt = free_port(), mountpoints()
    url = f"nfs://127.0.0.1:{port}/export"
    # with no retry=, one try (as before, and as nfs(5)'s retry=0)
    p = subprocess.run([*CLI, "mount", url, str(mnt)], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr) == (1, f"pynfsrdma: cannot mount {url}: 127.0.0.1:{port}: connection refused\n")
    mounting = subprocess.Popen([*CLI, "mount", url, str(mnt), "-o", "retry=1"], stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    assert mounting.poll() is None  # still trying
    ganesha_factory(port=port)
    _, err = mounting.communicate(timeout=90)
    assert (mounting.returncode, err) == (0, "")
    assert mounted(mnt)


def test_options_that_mean_nothing_here_are_taken_with_a_note(
    mount_export: Callable[..., Any], ganesha: Ganesha, mountpoints: Callable[[], Path]
) -> None:
    mnt = mountpoints()
    p = subprocess.run([*CLI, "mount", ganesha.url, str(mnt), "-o", "nocto,noresvport,cto,fg"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ("pynfsrdma: nocto: every open asks the server (an OPEN, whose reply carries the change "
                        "attribute), as with cto\n")
    assert mounted(mnt)
