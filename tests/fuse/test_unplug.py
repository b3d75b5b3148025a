"""Unplugging the server under a mount: NFS-Ganesha stopped and started again (graceless, so every open
is lost with it), with ``hard`` and with ``soft`` mounts."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.fuse

MiB = 1 << 20
PY = sys.executable

# The I/O runs in a child process: a file of the mount open in the test process would be flushed by
# every fork of it (starting the server is one), and that flush waits for the server under ``hard``.
HARD_WORKER = """
import os, sys
root = sys.argv[1]
first, second, third = (bytes.fromhex(x) * n for x, n in (("a1", 3 << 20), ("b2", (2 << 20) + 123), ("c3", 1 << 20)))
def step(name):
    print(name, flush=True)
    sys.stdin.readline()
w = open(os.path.join(root, "data"), "wb")
w.write(first); w.flush(); os.fsync(w.fileno())
r = open(os.path.join(root, "before"), "rb")
step("ready")
w.write(second); w.flush(); os.fsync(w.fileno())
with open(os.path.join(root, "new"), "wb") as n:
    n.write(third)
assert r.read() == b"written before the server went away"
step("done")
w.write(third); w.close(); r.close()
print("closed", flush=True)
"""
FIRST, SECOND, THIRD = b"\xa1" * (3 * MiB), b"\xb2" * (2 * MiB + 123), b"\xc3" * MiB


def read_line(proc: subprocess.Popen[str], timeout: float) -> str | None:
    """The child's next line, or None if it says nothing within ``timeout``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().strip() if ready else None


@pytest.mark.recovers  # the server restarts graceless: a new client ID
def test_hard_mount_waits_for_the_server_and_loses_nothing(
    ganesha_factory: Callable[..., Any], mount_export: Callable[..., Any]
) -> None:
    server = ganesha_factory()  # graceless: a restart forgets every open and client ID
    m = mount_export("hard,timeo=10,retrans=1", server=server)
    (m.path / "before").write_bytes(b"written before the server went away")
    proc = subprocess.Popen(
        [PY, "-c", HARD_WORKER, str(m.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    try:
        assert read_line(proc, 60) == "ready"
        server.stop()
        assert (server.export_dir / "data").read_bytes() == FIRST  # fsync'd: on the server's disk
        proc.stdin.write("go\n")
        proc.stdin.flush()
        try:
            early = read_line(proc, 3.0)
        finally:
            server.start()
        assert early is None, "a call on the hard mount returned while the server was down"
        assert read_line(proc, 120) == "done", "calls on the hard mount did not complete after the restart"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert read_line(proc, 60) == "closed"
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (server.export_dir / "data").read_bytes() == FIRST + SECOND + THIRD
    assert (server.export_dir / "new").read_bytes() == THIRD
    assert (m.path / "data").read_bytes() == FIRST + SECOND + THIRD


@pytest.mark.recovers  # the server restarts graceless: a new client ID
def test_soft_mount_fails_with_eio_after_timeo(
    ganesha_factory: Callable[..., Any], mount_export: Callable[..., Any]
) -> None:
    server = ganesha_factory()
    m = mount_export("soft,timeo=10,retrans=1", server=server)
    data = os.urandom(MiB)
    f = open(m.path / "kept", "wb")  # noqa: SIM115 (closed by hand before the server comes back)
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
    server.stop()
    try:
        start = time.monotonic()
        with pytest.raises(OSError) as e:
            (m.path / "while-down").write_bytes(b"x")
        assert e.value.errno == errno.EIO
        assert time.monotonic() - start >= 1.0  # not before timeo (1 s)
        f.write(b"more")
        with pytest.raises(OSError) as e:
            f.flush()
            os.fsync(f.fileno())
        assert e.value.errno == errno.EIO
    finally:
        with contextlib.suppress(OSError):  # (close's flush fails too; it must not be open across fork)
            f.close()
        server.start()
    # the mount works again once it has found the server back (until then, having given up on it, it
    # fails at once: its path is redialled within half a second while calls come); what was fsync'd
    # is there
    deadline = time.monotonic() + 10
    while True:
        try:
            kept = (m.path / "kept").read_bytes()
            break
        except OSError as e:
            assert e.errno == errno.EIO and time.monotonic() < deadline, e
            time.sleep(0.1)
    assert kept[: len(data)] == data
    (m.path / "after").write_bytes(b"back")
    assert (server.export_dir / "after").read_bytes() == b"back"
    assert (server.export_dir / "kept").read_bytes()[: len(data)] == data
