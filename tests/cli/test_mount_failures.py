"""``pynfsrdma mount`` and the mount(8) helper return only once the mount answers: a daemon that dies
before that makes them fail with its error, and leaves nothing mounted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pynfsrdma._testbed import Ganesha

# Loaded by the daemon's Python (it inherits PYTHONPATH): the FUSE channel's request loop fails at
# once, after the kernel mount was made and before the kernel's first request is answered.
BROKEN_LOOP = '''
import sys
if "pynfsrdma._fuse.mount_daemon" in sys.argv[0] or "--ready-fd" in sys.argv:
    from pynfsrdma._fuse.devfuse import NativeChannel

    async def serve(self):
        raise RuntimeError("the request loop broke")

    NativeChannel.serve = serve
'''


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


@pytest.mark.fuse
@pytest.mark.parametrize("command", ["pynfsrdma mount", "mount.pynfsrdma"])
def test_a_daemon_that_dies_before_the_mount_answers_fails_the_mount_with_its_error(
    ganesha: Ganesha, tmp_path: Path, command: str
) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(BROKEN_LOOP)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    source = f"{ganesha.host}:/export"
    options = f"port={ganesha.port}"
    if command == "mount.pynfsrdma":
        argv = [sys.executable, "-c", "from pynfsrdma._cli.mount import helper_main; raise SystemExit(helper_main())",
                source, str(mnt), "-o", options]
    else:
        argv = [sys.executable, "-m", "pynfsrdma._cli.main", "mount", source, str(mnt), "-o", options]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    try:
        assert p.returncode == (32 if command == "mount.pynfsrdma" else 1), p.stderr
        assert "the mount daemon failed: RuntimeError: the request loop broke" in p.stderr
        assert not mounted(mnt)
    finally:
        if mounted(mnt):  # (a mount that came up after all must not outlive the test)
            subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", "umount", str(mnt)], timeout=60)
