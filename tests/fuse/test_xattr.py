"""Extended attributes: NFS-Ganesha 4.3 with the VFS backend answers LISTXATTRS and GETXATTR with
NFS4ERR_NOTSUPP (and FATTR4_XATTR_SUPPORT false in a minor version 2 GETATTR), so every xattr call on
the mount fails with ENOTSUP, as on a local filesystem without xattrs; nothing reaches the file."""

from __future__ import annotations

import errno
import os
import subprocess
from typing import Any

import pytest

pytestmark = pytest.mark.fuse


def _errno(fn: Any, *args: Any) -> int:
    try:
        fn(*args)
    except OSError as e:
        return e.errno or 0
    return 0


def test_xattrs_are_not_supported(work_dir: Any) -> None:
    f = work_dir.mnt / "f"
    f.write_text("x")
    assert _errno(os.setxattr, f, "user.a", b"v") == errno.ENOTSUP
    assert _errno(os.getxattr, f, "user.a") == errno.ENOTSUP
    assert _errno(os.listxattr, f) == errno.ENOTSUP
    assert _errno(os.removexattr, f, "user.a") == errno.ENOTSUP
    assert os.listxattr(work_dir.local / "f") == []  # nothing was set on the server's file
    assert f.read_text() == "x"  # and the file still works
    r = subprocess.run(["cp", "-a", str(f), str(work_dir.mnt / "g")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr  # tools that copy xattrs cope with their absence
