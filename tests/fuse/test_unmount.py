"""A mount ends at ``fusermount3 -u`` whatever the server did meanwhile (issue 30: after a restart of
the testbed's NFS-Ganesha 9, whose mount namespace was made after the mount and held a copy of it,
the kernel never told the daemon that it was unmounted)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.fuse


def test_a_mount_ends_at_unmount_after_the_server_restarted(
    ganesha_factory: Callable[..., Any], mount_export: Callable[..., Any]
) -> None:
    server = ganesha_factory()
    m = mount_export(server=server)
    (m.path / "f").write_bytes(b"before the restart\n")
    server.restart()
    assert (m.path / "f").read_bytes() == b"before the restart\n"  # (a new session)
    (m.path / "g").write_bytes(b"after the restart\n")
    assert (server.export_dir / "g").read_bytes() == b"after the restart\n"
    subprocess.run(["fusermount3", "-u", str(m.path)], check=True, capture_output=True)
    try:
        status = m.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the mount daemon still runs 30 s after fusermount3 -u of {m.path}")
    assert status == 0, m.log.read_text()[-2000:]
