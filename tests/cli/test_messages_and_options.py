"""What the CLI says when something is wrong: errors name the server a path is on (and a local path
stays local), an option a command would ignore is refused with a usage error, a missing mount point
is "No such file or directory", and ``mount --help`` lists every option the mount takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pynfsrdma._testbed import Ganesha

CLI = [sys.executable, "-m", "pynfsrdma._cli.main"]
HELPER = [sys.executable, "-c", "from pynfsrdma._cli.mount import helper_main; raise SystemExit(helper_main())"]


def run(*args: str, cmd: list[str] = CLI) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("cmd", [CLI, HELPER], ids=["pynfsrdma mount", "mount.pynfsrdma"])
def test_a_missing_mount_point_is_no_such_file_or_directory(ganesha: Ganesha, tmp_path: Path,
                                                            cmd: list[str]) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}/export"
    args = ("mount", url) if cmd is CLI else (url,)
    prog = "pynfsrdma" if cmd is CLI else "mount.pynfsrdma"
    p = run(*args, str(tmp_path / "absent"), cmd=cmd)
    assert p.returncode == (1 if cmd is CLI else 32)
    assert p.stderr == f"{prog}: mount point {tmp_path}/absent: No such file or directory\n"
    (tmp_path / "file").write_bytes(b"")
    p = run(*args, str(tmp_path / "file"), cmd=cmd)
    assert p.stderr == f"{prog}: mount point {tmp_path}/file: Not a directory\n"
