"""With the writeback cache on, the kernel writes a file's data back while a program is still
writing it, close behind it: the mount lowers the kernel's limit of its dirty data (the bdi's
max_bytes, data dirty or under writeback) to twice the WRITEs that fill its paths, and the kernel's
background writeback starts once about half of that is dirty. FUSE's own limit, 1% of the machine's
dirty memory (46 MiB on a host with 24 GiB), let a writer run up to 46 MiB ahead of the server
before the writeback caught up, and left 20-25 MiB of each file in the page cache for a while
after the writer stopped: the paths idle while ``tar x`` wrote a file's first part, its close
waiting for the rest.

A program writes 96 MiB in ``tar``'s 10 KiB writes; every 640 KiB it compares what it wrote with
the server's copy. On one loopback path (8 WRITEs of 1 MiB fill it) the mount's limit is 16 MiB,
and the server's copy is never further behind than that, the daemon's own WRITEs in flight and a little
more (with FUSE's limit it fell 37-42 MiB behind)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pynfsrdma._testbed import Ganesha

MIB = 1 << 20
BLOCK = 10240  # tar's writes
LOOK_EVERY = 64  # writes between two looks at the server's copy
DAEMON_IN_FLIGHT = 8 * MIB  # the daemon's WRITEs on one loopback path, answered to the kernel
GATHERED = 2 * MIB  # what the daemon may gather, and the kernel's pages between two looks
LOOPBACK_LIMIT = 16 * MIB  # twice the 8 WRITEs of 1 MiB that fill one loopback path
# the kernel keeps the limit as a share of the machine's dirty limit, which moves with free memory:
# it reads back within this share of what was set
ROUNDING = 0.01


def dirty_limit(mnt: Path) -> int:
    st = os.stat(mnt)
    return int(Path(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/max_bytes").read_text())


@pytest.mark.fuse
def test_the_server_follows_a_writer_closely(mount_export, ganesha: Ganesha) -> None:
    m = mount_export("channel=native")
    limit = dirty_limit(m.path)
    assert limit <= LOOPBACK_LIMIT * (1 + ROUNDING)
    name = f"write-behind-{os.getpid()}"
    on_server = ganesha.export_dir / name
    total = 96 * MIB // BLOCK * BLOCK
    block = os.urandom(BLOCK)
    behind = 0  # the most the server's copy was behind the writer
    fd = os.open(m.path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for i in range(total // BLOCK):
            os.write(fd, block)
            if i % LOOK_EVERY == 0:
                behind = max(behind, (i + 1) * BLOCK - on_server.stat().st_size)
    finally:
        os.close(fd)
    most = min(limit, LOOPBACK_LIMIT) + DAEMON_IN_FLIGHT + GATHERED
    assert behind <= most, f"the server was {behind} bytes behind (at most {most}); the mount's limit is {limit}"
    assert on_server.stat().st_size == total  # (the close sent the rest)
    with open(on_server, "rb") as f:
        assert f.read(BLOCK) == block and f.read()[-BLOCK:] == block
    os.unlink(m.path / name)


@pytest.mark.fuse
def test_the_limit_is_the_paths_whatever_the_read_ahead(mount_export) -> None:
    """``-o max_readahead=0`` (no read-ahead) leaves the limit of dirty data as the paths size it."""
    without = dirty_limit(mount_export("channel=native,max_readahead=0").path)
    assert abs(without - dirty_limit(mount_export("channel=native").path)) <= ROUNDING * LOOPBACK_LIMIT
