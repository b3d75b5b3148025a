"""``mount -o remount,...`` through mount(8) and the installed helper (mount(8) hands it
``remount`` with the generic flags and the kernel's own options): the running daemon is told, the
mount becomes read-only (writes get EROFS) and writable again, the attribute cache's timeouts
change (another client's change shows at once), and an option that cannot change is refused by name. Run in a mount namespace of its own,
with an empty /sbin for the helper's links."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

SCRIPT = r"""
set -u
mount -t tmpfs helpers "$(realpath /sbin)"
"$PYNFSRDMA" install-helper > /dev/null
options() { "$PYNFSRDMA" stats "$MNT" --json | python3 -c 'import json, sys; o = json.load(sys.stdin)["options"]; print("daemon: ro", o["ro"], "acregmax", o["acregmax"])'; }
flags() { echo "kernel: $(findmnt -n -o VFS-OPTIONS "$MNT" | cut -d, -f1)"; }
mount -t fuse.pynfsrdma "$SOURCE" "$MNT" -o "port=$PORT,actimeo=3600" || exit 1
echo one > "$MNT/$DIR/f"
mount -o remount,ro "$MNT"; echo "remount,ro: $?"
flags; options
err=$( (echo two > "$MNT/$DIR/f") 2>&1 ) || echo "write refused: ${err##*: }"
mount -o remount,rw,port=1 "$MNT"; echo "remount,rw,port=1: $?"
flags
echo "changed on the server" > "$TMP/f"
"$PYNFSRDMA" put "$TMP/f" "$URL/$DIR/f"  # (another client)
echo "size before: $(stat -c %s "$MNT/$DIR/f")"
mount -o remount,rw,actimeo=0 "$MNT"; echo "remount,rw,actimeo=0: $?"
flags; options
echo "size after: $(stat -c %s "$MNT/$DIR/f")"
echo three > "$MNT/$DIR/f" && cat "$MNT/$DIR/f"
"$PYNFSRDMA" umount "$MNT"
"""


@pytest.mark.fuse
def test_remount_through_mount8_changes_read_only_and_the_attribute_cache(
    ganesha: Ganesha, export_path: ExportPath, tmp_path: Path
) -> None:
    bindir = Path(sys.executable).parent
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = {
        **os.environ,
        "PYNFSRDMA": str(bindir / "pynfsrdma"),
        "SOURCE": f"{ganesha.host}:/export",
        "PORT": str(ganesha.port),
        "MNT": str(mnt),
        "DIR": export_path.remote.removeprefix("/export/"),
        "URL": ganesha.url,
        "TMP": str(tmp_path),
    }
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", SCRIPT],
                       capture_output=True, text=True, env=env, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines() == [
        "remount,ro: 0",
        "kernel: ro",
        "daemon: ro True acregmax 3600.0",
        "write refused: Read-only file system",
        "remount,rw,port=1: 32",
        "kernel: ro",
        "size before: 4",
        "remount,rw,actimeo=0: 0",
        "kernel: rw",
        "daemon: ro False acregmax 0.0",
        "size after: 22",
        "three",
    ]
    assert p.stderr.splitlines() == [
        f"mount.pynfsrdma: cannot remount {mnt}: a remount cannot change the option port (unmount and mount again)",
    ]
    assert (export_path.local / "f").read_text() == "three\n"
