"""Real FUSE mounts of the real NFS-Ganesha export, served by a daemon in its own process.

- ``mount_export(options="", subdir="", server=None) -> Mount``: mounts ``ganesha``'s export (or
  ``server``'s, e.g. one from ``ganesha_factory``; or a directory in it) on a fresh temporary mount point; unmounted with ``fusermount3 -u`` at the end
  of the test, and the daemon must then exit with status 0.
- ``shared_mount`` (module scope): one mount of the whole export with default options, for tests
  that each work in their own fresh directory (``work_dir``: a Path inside that mount, and the same
  directory on the server's disk).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._testbed import Ganesha

MOUNT_WAIT = 20.0
PY = sys.executable
# PYNFSRDMA_FUSE_LOG=DIR: run the daemons with -vv and keep their logs there
KEEP_LOGS = os.environ.get("PYNFSRDMA_FUSE_LOG")
VERBOSE = ["-vv"] if KEEP_LOGS else []
# PYNFSRDMA_FUSE_CHANNEL=native|pyfuse3: the FUSE channel of every mount (default: the daemon's own)
CHANNEL = os.environ.get("PYNFSRDMA_FUSE_CHANNEL")
# PYNFSRDMA_FUSE_OPTIONS=OPTS: mount options given to every mount before the test's own (which win
# where they say otherwise), e.g. writeback_cache to run tests/fuse with the kernel's writeback cache
OPTIONS = os.environ.get("PYNFSRDMA_FUSE_OPTIONS", "")


def is_mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


@dataclass
class Mount:
    path: Path
    proc: subprocess.Popen[bytes] | None
    log: Path

    def recoveries(self) -> int | None:
        """How many times the mount's client recovered a lost session or client ID (None: the
        daemon does not answer)."""
        from pynfsrdma._control_socket import Connection, ControlError

        try:
            with Connection(str(self.path)) as conn:
                return int(conn.request("stats")["recoveries"])
        except (OSError, ValueError, KeyError, ControlError):
            return None

    def unmount(self) -> int | None:
        if is_mounted(self.path):
            subprocess.run(["fusermount3", "-u", str(self.path)], check=True, capture_output=True)
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def start_mount(url: str, mountpoint: Path, options: str, log: Path, cli_args: Sequence[str] = ()) -> Mount:
    """``pynfsrdma mount -f`` as a subprocess (``cli_args``: the command's own options before
    ``mount``, ``--trace FILE``); returns once the mount answers."""
    cmd = [PY, "-m", "pynfsrdma._cli.main", *VERBOSE, *cli_args, "mount", url, str(mountpoint), "-f"]
    if CHANNEL and "channel=" not in options:
        options = ",".join(o for o in (f"channel={CHANNEL}", options) if o)
    options = ",".join(o for o in (OPTIONS, options) if o)
    if options:
        cmd += ["-o", options]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + MOUNT_WAIT
    while not is_mounted(mountpoint):
        if proc.poll() is not None:
            raise AssertionError(f"mount daemon exited with {proc.returncode}: {log.read_text()}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"not mounted after {MOUNT_WAIT} s: {log.read_text()}")
        time.sleep(0.05)
    os.stat(mountpoint)  # the FUSE session answers
    return Mount(mountpoint, proc, log)


def _keep(log: Path) -> None:
    if KEEP_LOGS and log.exists():
        shutil.copy(log, Path(KEEP_LOGS) / log.name)
    log.unlink(missing_ok=True)


def unexplained_recoveries(request: pytest.FixtureRequest, mounts: list[Mount]) -> list[str]:
    """Mounts that recovered a session or client ID in a test that caused none (a test that
    restarts the server or cuts paths is marked ``recovers``): every recovery must have a cause."""
    if request.node.get_closest_marker("recovers") is not None:
        return []
    return [f"{m.path}: {n} recoveries (see {m.log.name})" for m in mounts if (n := m.recoveries())]


@pytest.fixture
def mount_export(request: pytest.FixtureRequest, ganesha: Ganesha) -> Iterator[Callable[..., Mount]]:
    mounts: list[Mount] = []
    dirs: list[str] = []

    def make(options: str = "", subdir: str = "", server: Ganesha | None = None) -> Mount:
        d = tempfile.mkdtemp(prefix="pynfsrdma-mnt-")
        dirs.append(d)
        os.chmod(d, 0o755)
        url = (server or ganesha).url + (f"/{subdir}" if subdir else "")
        m = start_mount(url, Path(d), options, Path(d + ".log"))
        mounts.append(m)
        return m

    yield make
    failures = unexplained_recoveries(request, mounts)
    for m in mounts:
        rc = m.unmount()
        if rc not in (0, None):
            failures.append(f"{m.path}: daemon exit status {rc}: {m.log.read_text()[-2000:]}")
    for d in dirs:
        if not is_mounted(Path(d)):
            os.rmdir(d)
        _keep(Path(d + ".log"))
    assert not failures, failures


@pytest.fixture(scope="module")
def shared_mount(ganesha: Ganesha) -> Iterator[Mount]:
    d = Path(tempfile.mkdtemp(prefix="pynfsrdma-mnt-"))
    os.chmod(d, 0o755)
    log = Path(str(d) + ".log")
    m = start_mount(ganesha.url, d, "", log)
    yield m
    recovered = m.recoveries()
    rc = m.unmount()
    assert rc == 0, log.read_text()[-4000:]
    assert not recovered, f"{recovered} unexplained recoveries: {log.read_text()[-4000:]}"
    os.rmdir(d)
    _keep(log)


@dataclass
class WorkDir:
    mnt: Path  # the directory through the FUSE mount
    local: Path  # the same directory on the server's disk
    ref: Path  # a plain local directory to do the same work in, for comparison


@pytest.fixture
def work_dir(shared_mount: Mount, ganesha: Ganesha, tmp_path: Path) -> Iterator[WorkDir]:
    name = f"w-{uuid.uuid4().hex[:10]}"
    (shared_mount.path / name).mkdir()
    ref = tmp_path / "ref"
    ref.mkdir()
    yield WorkDir(shared_mount.path / name, ganesha.export_dir / name, ref)
    shutil.rmtree(ganesha.export_dir / name, ignore_errors=True)


def snapshot(root: Path, times: bool = True, owners: bool = True) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                content: Any = os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                content = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                content = None
            row: tuple[Any, ...] = (
                stat.filemode(st.st_mode),
                st.st_size if not stat.S_ISDIR(st.st_mode) else 0,
                st.st_nlink if not stat.S_ISDIR(st.st_mode) else 0,
                content,
            )
            if owners:
                row += (st.st_uid, st.st_gid)
            if times and not stat.S_ISLNK(st.st_mode) and not stat.S_ISDIR(st.st_mode):
                row += (st.st_mtime_ns // 1_000_000_000,)
            out[rel] = row
    return out


@pytest.fixture
def snap() -> Callable[..., dict[str, tuple[Any, ...]]]:
    """``snap(root, times=True, owners=True)``: the tree below root as comparable rows."""
    return snapshot


@pytest.fixture
def mount_url(tmp_path: Path) -> Iterator[Callable[[str, str], Mount]]:
    """``mount_url(url, options) -> Mount``: mount any URL (e.g. through the testbed's path proxies)
    on a fresh directory; unmounted at the end. Blocking: from trio code call it in a thread."""
    mounts: list[Mount] = []

    def make(url: str, options: str = "") -> Mount:
        d = tmp_path / f"mnt{len(mounts)}"
        d.mkdir()
        m = start_mount(url, d, options, tmp_path / f"mnt{len(mounts)}.log")
        mounts.append(m)
        return m

    yield make
    for m in mounts:
        m.unmount()
