"""After ``pip install '.[fuse]'``, ``pynfsrdma install-helper`` lets mount(8) find the helper: then
``mount -t fuse.pynfsrdma`` mounts, as with the packages. Run in a mount namespace of its own, with an
empty /sbin, so that the machine's own /sbin is left as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

SCRIPT = r"""
set -eu
mount -t tmpfs helpers "$(realpath /sbin)"
"$PYNFSRDMA" install-helper
test "$(readlink /sbin/mount.fuse.pynfsrdma)" = "$HELPER"
mount -t fuse.pynfsrdma "$SOURCE" "$MNT" -o "port=$PORT"
echo "written through mount(8)" > "$MNT/$DIR/f"
cat "$MNT/$DIR/f"
"$PYNFSRDMA" umount "$MNT"
"$PYNFSRDMA" install-helper --remove
test ! -e /sbin/mount.pynfsrdma
"""


@pytest.mark.fuse
def test_install_helper_lets_mount_find_the_helper(ganesha: Ganesha, export_path: ExportPath, tmp_path: Path) -> None:
    bindir = Path(sys.executable).parent
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = {
        **os.environ,
        "PYNFSRDMA": str(bindir / "pynfsrdma"),
        "HELPER": str(bindir / "mount.pynfsrdma"),
        "SOURCE": f"{ganesha.host}:/export",
        "PORT": str(ganesha.port),
        "MNT": str(mnt),
        "DIR": export_path.remote.removeprefix("/export/"),
    }
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", SCRIPT],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "written through mount(8)" in p.stdout.splitlines()
    assert "removed /sbin/mount.fuse.pynfsrdma" in p.stdout.splitlines()
    assert (export_path.local / "f").read_text() == "written through mount(8)\n"
