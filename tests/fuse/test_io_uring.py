"""FUSE over io_uring: the native channel's other way to take requests (``_fuse/uring_channel.py``).

With the kernel's switch on (the fuse module's ``enable_uring``, set by each test and put back as it
was), the in-memory file system of ``test_native_channel.py`` answers its locks, the F_SETLKW a
signal interrupts, readdirplus, setattr, open flags, fallocate/lseek/copy_file_range, notifications
and the other requests by the ring, and the NFS mount reads, writes, creates, renames and lists
through it. With the switch off, a mount that asks for io_uring says so in one line and takes its
requests by /dev/fuse. No mount changes the switch."""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import test_native_channel as tnc

from pynfsrdma._control_socket import Connection
from pynfsrdma._fuse.devfuse import NativeChannel

pytestmark = pytest.mark.fuse

SWITCH = Path("/sys/module/fuse/parameters/enable_uring")
MIB = 1 << 20
FALLBACK = "requests go through /dev/fuse"


@contextmanager
def kernel_switch(on: bool) -> Iterator[None]:
    """The kernel's FUSE-over-io_uring switch set to ``on``, and put back as it was."""
    before = SWITCH.read_text().strip()
    SWITCH.write_text("Y" if on else "N")
    try:
        yield
        assert SWITCH.read_text().strip() == ("Y" if on else "N"), "a mount changed the kernel's switch"
    finally:
        SWITCH.write_text(before)


@pytest.fixture
def uring_on() -> Iterator[None]:
    with kernel_switch(True):
        yield


@pytest.fixture
def uring_off() -> Iterator[None]:
    with kernel_switch(False):
        yield


@pytest.fixture
def ring_mounts(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, int]]:
    """test_native_channel's mounts ask for io_uring; each one's counts, taken before it is
    unmounted, are listed here."""
    counts: list[dict[str, int]] = []
    plain = tnc.mounted

    @asynccontextmanager
    async def mounted(ops: tnc.MemOps, where: Path, options: frozenset[str] = frozenset()) -> AsyncIterator[NativeChannel]:
        async with plain(ops, where, options) as channel:
            yield channel
            counts.append(channel.counts())

    monkeypatch.setattr(tnc, "IO_URING", True)
    monkeypatch.setattr(tnc, "mounted", mounted)
    return counts


# the semantics of test_native_channel.py that go through the ring (those that spy on the writes to
# /dev/fuse are about that way of answering only)
OVER_THE_RING = [
    tnc.test_setattr_time_now_kill_suidgid_and_size,
    tnc.test_o_trunc_comes_with_the_open_and_file_info_flags_are_honoured,
    tnc.test_readdirplus_fills_the_kernels_entries,
    tnc.test_posix_locks_flock_flush_and_release,
    tnc.test_a_blocked_setlkw_is_interrupted_by_a_signal,
    tnc.test_fallocate_lseek_copy_file_range,
    tnc.test_notifications_drop_what_the_kernel_keeps,
    tnc.test_the_other_requests,
]


@pytest.mark.parametrize("test", OVER_THE_RING, ids=lambda t: t.__name__.removeprefix("test_"))
async def test_the_native_channel_over_io_uring(
    test: Callable[[Path], Any], tmp_path: Path, uring_on: None, ring_mounts: list[dict[str, int]]
) -> None:
    await test(tmp_path)
    assert ring_mounts and all(c["ring_requests"] > 0 for c in ring_mounts), ring_mounts


async def test_data_goes_both_ways_through_the_ring_entries(
    tmp_path: Path, uring_on: None, ring_mounts: list[dict[str, int]]
) -> None:
    ops = tnc.MemOps()
    ops.add_file(b"f")
    payload = os.urandom(3 * MIB + 4321)
    async with tnc.mounted(ops, tmp_path / "m"):
        p = tmp_path / "m" / "f"
        await tnc.io(p.write_bytes, payload)
        assert bytes(ops.nodes[2].data) == payload
        assert await tnc.io(p.read_bytes) == payload
        fd = await tnc.io(os.open, p, os.O_RDONLY | os.O_DIRECT)
        try:
            assert await tnc.io(os.pread, fd, 2 * MIB, MIB) == payload[MIB : 3 * MIB]
        finally:
            await tnc.io(os.close, fd)
        await tnc.io((tmp_path / "m" / "f").rename, tmp_path / "m" / "g")
        assert await tnc.io(os.listdir, tmp_path / "m") == ["g"]
    (c,) = ring_mounts
    # a large WRITE's data is copied out of its entry (the operations may keep it); READ data into it
    assert c["ring_write_bytes_copied"] >= 2 * MIB
    assert c["ring_read_bytes_copied"] >= 2 * MIB
    assert c["read_replies_spliced"] == 0


async def test_with_the_switch_off_a_mount_asking_for_io_uring_uses_dev_fuse_and_says_so(
    tmp_path: Path, uring_off: None, ring_mounts: list[dict[str, int]], caplog: pytest.LogCaptureFixture
) -> None:
    ops = tnc.MemOps()
    ops.add_file(b"f", b"abc")
    with caplog.at_level(logging.INFO, logger="pynfsrdma._fuse.devfuse"):
        async with tnc.mounted(ops, tmp_path / "m") as channel:
            assert await tnc.io((tmp_path / "m" / "f").read_bytes) == b"abc"
            assert channel.ring is None
    said = [r for r in caplog.records if FALLBACK in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in said] == [
        (logging.WARNING, f"the kernel offers no FUSE over io_uring ({SWITCH} is N): {FALLBACK}")]
    assert ring_mounts[0]["ring_requests"] == 0


def _stats(mountpoint: Path) -> dict[str, Any]:
    with Connection(str(mountpoint)) as conn:
        return conn.request("stats")


def test_an_nfs_mount_over_io_uring(mount_export: Callable[..., Any], export_path: Any, uring_on: None) -> None:
    m = mount_export("io_uring", subdir=export_path.remote.removeprefix("/export/"))
    here = export_path.local
    data = os.urandom(5 * MIB + 17)
    (m.path / "d").mkdir()
    (m.path / "d" / "a").write_bytes(data)
    (m.path / "d" / "a").rename(m.path / "d" / "b")
    assert sorted(os.listdir(m.path / "d")) == ["b"]
    assert (here / "d" / "b").read_bytes() == data
    assert (m.path / "d" / "b").read_bytes() == data
    # a lock, and a blocked F_SETLKW a signal interrupts, over the ring
    fd = os.open(m.path / "d" / "b", os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        script = (
            "import fcntl, os, signal, sys\n"
            "class Stop(Exception): pass\n"
            "def stop(*_): raise Stop\n"
            "signal.signal(signal.SIGALRM, stop)\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "signal.setitimer(signal.ITIMER_REAL, 1.0)\n"
            "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX)\nexcept Stop:\n    print('interrupted'); sys.exit(3)\n"
            "print('locked')\n"
        )
        out = subprocess.run([sys.executable, "-c", script, str(m.path / "d" / "b")], capture_output=True, text=True,
                             timeout=60)
        assert (out.returncode, out.stdout.strip()) == (3, "interrupted"), out.stderr
    finally:
        os.close(fd)
    (m.path / "d" / "b").unlink()
    assert os.listdir(here / "d") == []
    payload = _stats(m.path)["payload"]
    assert payload["ring_requests"] > 0
    assert payload["ring_write_bytes_copied"] > 0 and payload["ring_read_bytes_copied"] > 0


def test_an_nfs_mount_asking_for_io_uring_with_the_switch_off_uses_dev_fuse(
    mount_export: Callable[..., Any], export_path: Any, uring_off: None
) -> None:
    m = mount_export("io_uring", subdir=export_path.remote.removeprefix("/export/"))
    (m.path / "f").write_bytes(b"hello")
    assert (export_path.local / "f").read_bytes() == b"hello"
    assert _stats(m.path)["payload"]["ring_requests"] == 0
    lines = [line for line in m.log.read_text().splitlines() if FALLBACK in line]
    assert len(lines) == 1 and "offers no FUSE over io_uring" in lines[0], m.log.read_text()
