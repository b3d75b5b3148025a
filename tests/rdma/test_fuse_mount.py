"""A FUSE mount with proto=rdma: ``pynfsrdma mount "nfs://...?proto=rdma&provider=soft" MNT``.

The mount daemon is a process of its own; the responder runs in the test's trio loop (so its
statistics can be read), and every file system call on the mount runs in a worker thread so that
the responder keeps serving meanwhile.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from test_end_to_end import data_of, rdma_url, responder

from pynfsrdma._control_socket import Connection

pytestmark = [pytest.mark.fuse]

MiB = 1 << 20


def _mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


async def _mount(url: str, mnt: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pynfsrdma._cli.main", "mount", url, str(mnt), "-f"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    with trio.fail_after(20):
        while not _mounted(mnt):
            assert proc.poll() is None, log.read_text()
            await trio.sleep(0.05)
    return proc


def _sha(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


async def test_cp_in_and_out_ls_and_symlink_through_an_rdma_mount(ganesha, export_path, tmp_path):
    src = tmp_path / "src"
    src.write_bytes(data_of(6 * MiB + 4321, 11))
    names = sorted(f"entry-{i:04d}-{'z' * 60}" for i in range(400))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    async with responder(ganesha) as r:
        url = rdma_url(r, export_path)
        proc = await _mount(url, mnt, tmp_path / "mount.log")
        try:

            def work() -> tuple[str, str]:
                subprocess.run(["cp", str(src), str(mnt / "big")], check=True)
                # what cp wrote stays in the kernel's page cache (the writeback cache): let it go, so
                # that cp out reads from the server
                fd = os.open(mnt / "big", os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
                subprocess.run(["cp", str(mnt / "big"), str(tmp_path / "back")], check=True)
                (mnt / "dir").mkdir()
                for n in names:
                    (mnt / "dir" / n).write_bytes(b"")
                os.symlink("../big", mnt / "dir-link")
                ls = subprocess.run(
                    ["ls", "-l", str(mnt / "dir")], check=True, capture_output=True, text=True
                )
                return ls.stdout, os.readlink(mnt / "dir-link")

            before = r.stats
            listing, link = await trio.to_thread.run_sync(work)
        finally:
            await trio.to_thread.run_sync(
                lambda: subprocess.run(["fusermount3", "-u", str(mnt)], check=True, capture_output=True)
            )
            with trio.fail_after(30):
                while proc.poll() is None:
                    await trio.sleep(0.05)
        assert proc.returncode == 0, (tmp_path / "mount.log").read_text()[-3000:]
        after = r.stats
    assert _sha(tmp_path / "back") == _sha(src) == _sha(export_path.local / "big")
    lines = listing.splitlines()
    assert lines[0].startswith("total")
    assert [line.split()[-1] for line in lines[1:]] == names
    assert link == "../big" and os.readlink(export_path.local / "dir-link") == "../big"
    # the data went by RDMA Read (cp in) and RDMA Write (cp out), the listing by Reply chunks
    assert after.rdma_read_bytes - before.rdma_read_bytes >= src.stat().st_size
    assert after.rdma_write_bytes - before.rdma_write_bytes >= src.stat().st_size
    assert after.reply_chunks_used > before.reply_chunks_used
    assert after.rdma_errors_sent == 0 and after.credit_overruns == 0


def _payload_counts(mnt: Path) -> dict[str, int]:
    with Connection(str(mnt)) as conn:
        counts: dict[str, int] = conn.request("stats")["payload"]
    return counts


async def test_fuse_write_data_goes_out_with_no_registration_and_no_copy(ganesha, export_path, tmp_path):
    """A WRITE's data goes from the buffer the kernel wrote the FUSE request into, through a memory
    window over that buffer, to the responder's RDMA Read. A request buffer is registered once, the
    first time it carries a WRITE, and stays registered: the daemon makes no registration per WRITE
    and no copy of the data."""
    data = os.urandom(16 * MiB)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    rounds = 3

    def write(name: str) -> None:
        buf = mmap.mmap(-1, MiB)  # (page-aligned, as O_DIRECT wants)
        fd = os.open(mnt / name, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
        try:
            for off in range(0, len(data), MiB):
                buf[:] = data[off : off + MiB]
                assert os.pwritev(fd, [buf], off) == MiB
            os.fsync(fd)
        finally:
            os.close(fd)

    async with responder(ganesha) as r:
        proc = await _mount(rdma_url(r, export_path), mnt, tmp_path / "mount.log")
        try:
            at_mount = await trio.to_thread.run_sync(_payload_counts, mnt)
            for i in range(rounds):
                await trio.to_thread.run_sync(write, f"f{i}")
            after = await trio.to_thread.run_sync(_payload_counts, mnt)
        finally:
            await trio.to_thread.run_sync(
                lambda: subprocess.run(["fusermount3", "-u", str(mnt)], check=True, capture_output=True)
            )
            with trio.fail_after(30):
                while proc.poll() is None:
                    await trio.sleep(0.05)
        assert proc.returncode == 0, (tmp_path / "mount.log").read_text()[-3000:]
    for i in range(rounds):
        assert hashlib.sha256((export_path.local / f"f{i}").read_bytes()).digest() == hashlib.sha256(data).digest()
    d = {k: after[k] - at_mount[k] for k in after}
    n = rounds * len(data)
    writes = n // MiB
    # handed to the operations in the request's buffer, and sent from there by RDMA Read ...
    assert d["write_bytes_in_place"] == n and d["write_bytes_copied"] == 0, d
    assert d["transport_payload_bytes_copied"] == 0, d
    # ... through a window per WRITE, over a request buffer registered once: at most one
    # registration per buffer the channel made, however many WRITEs each carried
    assert d["transport_memory_windows_bound"] == writes, d
    assert d["transport_memory_registrations"] <= after["request_buffers_allocated"] < writes, (d, after)
