"""What the process behind a FUSE request waits in, read from /proc/PID/syscall: real processes
blocked in open(2) of a FIFO (which waits for a writer) with and without O_CREAT, and in a sleep."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pynfsrdma._fuse.caller import is_opening


def _blocked(code: str) -> subprocess.Popen[bytes]:
    """A Python child running ``code``, once it sits in a system call (its syscall file names one)."""
    p = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "S":
            time.sleep(0.05)  # (settled in its blocking call)
            return p
        time.sleep(0.01)
    p.kill()
    raise AssertionError("the child never blocked")


@pytest.mark.parametrize(
    ("flags", "opening"),
    [("os.O_RDONLY", True), ("os.O_RDONLY | os.O_CREAT", False)],
)
def test_a_process_opening_an_existing_name_is_told_from_one_that_may_create(
    tmp_path: Path, flags: str, opening: bool
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    p = _blocked(f"import os; os.open({str(fifo)!r}, {flags})")
    try:
        assert is_opening(p.pid) is opening
    finally:
        p.kill()
        p.wait()


def test_a_sleeping_process_the_kernel_and_a_gone_process() -> None:
    p = _blocked("import time; time.sleep(60)")
    try:
        assert is_opening(p.pid) is False
    finally:
        p.kill()
        p.wait()
    assert is_opening(0) is False  # the kernel's own request
    assert is_opening(p.pid) is True  # gone: nothing can be told, so the server is asked
