"""What the command-line tests share besides their fixtures (conftest.py): the command, and a run of it
as a script makes one."""

from __future__ import annotations

import subprocess
import sys

CLI = [sys.executable, "-m", "pynfsrdma._cli.main"]


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``pynfsrdma *args`` in a process of its own, its output as text; ``ok``: it must exit 0."""
    p = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)
    if ok:
        assert p.returncode == 0, p.stderr
    return p
