"""Extended attributes: NFS-Ganesha 4.3 with the VFS backend answers LISTXATTRS and GETXATTR with
NFS4ERR_NOTSUPP (and FATTR4_XATTR_SUPPORT false in a minor version 2 GETATTR), so every xattr call on
the mount fails with ENOTSUP, as on a local filesystem without xattrs; nothing reaches the file. On an
NFSv4.1 mount none can be sent at all; a vers=4.2 mount asks the server whether it has them. (The
VM rig, tests/vm, sets, gets, lists and removes them on the Linux nfsd's ext4 export.)"""

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


def _not_supported(f: Any) -> None:
    assert _errno(os.setxattr, f, "user.a", b"v") == errno.ENOTSUP
    assert _errno(os.getxattr, f, "user.a") == errno.ENOTSUP
    assert _errno(os.listxattr, f) == errno.ENOTSUP
    assert _errno(os.removexattr, f, "user.a") == errno.ENOTSUP
    assert _errno(os.setxattr, f, "trusted.a", b"v") == errno.ENOTSUP


def test_xattrs_are_not_supported(work_dir: Any) -> None:
    f = work_dir.mnt / "f"
    f.write_text("x")
    _not_supported(f)
    assert os.listxattr(work_dir.local / "f") == []  # nothing was set on the server's file
    assert f.read_text() == "x"  # and the file still works
    r = subprocess.run(["cp", "-a", str(f), str(work_dir.mnt / "g")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr  # tools that copy xattrs cope with their absence


def test_nfsv42_mount_works_and_finds_no_xattrs_on_ganesha(mount_export: Any, export_path: Any) -> None:
    m = mount_export("vers=4.2", subdir=export_path.local.name)
    f = m.path / "f"
    f.write_bytes(b"4.2" * 1000)
    (m.path / "d").mkdir()
    os.rename(f, m.path / "d" / "g")
    assert (m.path / "d" / "g").read_bytes() == b"4.2" * 1000
    assert (export_path.local / "d" / "g").read_bytes() == b"4.2" * 1000
    assert sorted(os.listdir(m.path)) == ["d"]
    _not_supported(m.path / "d" / "g")
    assert os.listxattr(export_path.local / "d" / "g") == []
