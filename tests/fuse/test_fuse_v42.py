"""NFSv4.2's file operations through the mount (vers=4.2): fallocate(2) as ALLOCATE and DEALLOCATE,
lseek's SEEK_DATA/SEEK_HOLE as SEEK, copy_file_range(2) as COPY (NFS-Ganesha has none: the kernel's
own copy then), and on an NFSv4.1 mount none of them is sent."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any

import pytest

from pynfsrdma._control_socket import Connection
from pynfsrdma._testbed.ganesha import Ganesha

pytestmark = pytest.mark.fuse
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2


def op_calls(m: Any) -> dict[str, int]:
    with Connection(str(m.path)) as conn:
        return {k: v["calls"] for k, v in conn.request("stats")["operations"].items()}


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.fallocate(fd, mode, ctypes.c_int64(offset), ctypes.c_int64(length)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def test_fallocate_seek_and_copy_on_a_42_mount(mount_export: Callable[..., Any], ganesha: Ganesha) -> None:
    d = ganesha.new_directory(prefix="v42-")
    m = mount_export("vers=4.2")
    p = m.path / d.local.name / "f"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"a" * 8192)
        os.pwrite(fd, b"b" * 4096, 1 << 20)  # data, a hole, data
        # (SEEK_DATA and SEEK_HOLE are the server's answers: written data the kernel still holds in its
        # writeback cache is not seen there until fsync or close)
        os.fsync(fd)
        assert os.lseek(fd, 8192, os.SEEK_HOLE) == 8192
        assert os.lseek(fd, 8192, os.SEEK_DATA) == 1 << 20
        with pytest.raises(OSError) as e:
            os.lseek(fd, (1 << 20) + 4096, os.SEEK_DATA)
        assert e.value.errno == errno.ENXIO
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096)  # DEALLOCATE
        assert os.pread(fd, 8192, 0) == bytes(4096) + b"a" * 4096
        assert os.fstat(fd).st_size == (1 << 20) + 4096
        fallocate(fd, 0, 0, 4 << 20)  # ALLOCATE: the file grows to the range's end
        assert os.fstat(fd).st_size == 4 << 20
        with pytest.raises(OSError) as e:
            fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 1)  # not carried
        assert e.value.errno == errno.EOPNOTSUPP
    finally:
        os.close(fd)
    assert (d.local / "f").stat().st_size == 4 << 20
    assert (d.local / "f").read_bytes()[:8192] == bytes(4096) + b"a" * 4096
    src = os.open(p, os.O_RDONLY)
    dst = os.open(m.path / d.local.name / "copy", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        copied = 0
        while copied < 8192:
            n = os.copy_file_range(src, dst, 8192 - copied, copied, copied)
            assert n > 0
            copied += n
    finally:
        os.close(src)
        os.close(dst)
    assert (d.local / "copy").read_bytes() == bytes(4096) + b"a" * 4096
    calls = op_calls(m)
    assert calls.get("ALLOCATE") == 1 and calls.get("DEALLOCATE") == 1 and calls.get("SEEK", 0) >= 2
    assert calls.get("COPY") == 1  # (answered NOTSUPP by NFS-Ganesha, once; the kernel copied)
    assert "READ_PLUS" not in calls and "IO_ADVISE" not in calls


def test_a_41_mount_sends_none_of_them(mount_export: Callable[..., Any], ganesha: Ganesha) -> None:
    d = ganesha.new_directory(prefix="v41-")
    m = mount_export()
    p = m.path / d.local.name / "f"
    p.write_bytes(b"x" * 5000)
    fd = os.open(p, os.O_RDWR)
    try:
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 5000  # the kernel's own answer: no holes known
        with pytest.raises(OSError) as e:
            fallocate(fd, 0, 0, 1 << 20)
        assert e.value.errno == errno.EOPNOTSUPP
    finally:
        os.close(fd)
    calls = op_calls(m)
    assert not {"SEEK", "ALLOCATE", "DEALLOCATE", "COPY", "CLONE"} & calls.keys(), calls
