"""FUSE requests larger than 1 MiB, where root raised the kernel's limit (``fs.fuse.max_pages_limit``,
kernels 6.13 and later): the mount asks for as many pages as the limit allows, one READ or WRITE
request of 4 MiB reaches the daemon whole, and goes to the server as several NFS READs or WRITEs
in flight at once, over several trunked paths (the RPC trace, ``pynfsrdma --trace FILE mount ...``,
gives each READ's path and the time it was out). The data is checked byte for byte against the file
on the server's disk. ``-o max_pages=N`` caps the requests.

The limit is the whole machine's: a test raises it only while its mount is made (the kernel takes
it when the mount is made), and puts back what it found."""

from __future__ import annotations

import datetime
import hashlib
import mmap
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from conftest import Mount, start_mount

from pynfsrdma._control_socket import Connection
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

MIB = 1 << 20
PAGE = 4096
LIMIT = Path("/proc/sys/fs/fuse/max_pages_limit")
PAGES = 1024  # 4 MiB requests


@contextmanager
def pages_limit(pages: int) -> Iterator[None]:
    """``fs.fuse.max_pages_limit`` at ``pages`` inside, what it was after."""
    before = LIMIT.read_text().strip()
    LIMIT.write_text(str(pages))
    try:
        yield
    finally:
        LIMIT.write_text(before)


def mount_with_limit(url: str, mnt: Path, options: str, log: Path, trace: Path | None = None) -> Mount:
    mnt.mkdir()
    with pages_limit(PAGES):  # (the kernel takes the limit as the mount is made: put back once it answers)
        return start_mount(url, mnt, options, log, ["--trace", str(trace)] if trace else [])


def payload(mnt: Path) -> dict[str, int]:
    with Connection(str(mnt)) as conn:
        counts: dict[str, int] = conn.request("stats")["payload"]
    return counts


def aligned(n: int) -> mmap.mmap:
    return mmap.mmap(-1, n)  # (page-aligned, as O_DIRECT wants)


def pread_direct(path: Path, offset: int, n: int) -> bytes:
    buf = aligned(n)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.preadv(fd, [buf], offset)
    finally:
        os.close(fd)
    return bytes(buf[:got])


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def traced(trace: Path, op: str) -> list[tuple[float, float, str]]:
    """(start, end, path) of each COMPOUND whose last operation is ``op``, from the RPC trace."""
    out = []
    for line in trace.read_text().splitlines():
        fields = line.split()
        if fields[-1].split(",")[-1] != op or not fields[3].startswith("status="):
            continue
        end = datetime.datetime.fromisoformat(fields[0]).timestamp()
        out.append((end - float(fields[4].rstrip("s")), end, fields[2].removeprefix("path=")))
    return out


def most_at_once(spans: list[tuple[float, float, str]]) -> int:
    events = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


@pytest.mark.fuse
async def test_a_4_mib_read_is_one_request_and_several_reads_in_flight_on_several_paths(
    proxied_paths, export_path: ExportPath, tmp_path: Path
) -> None:
    paths = await proxied_paths(count=3)
    for proxy in paths:
        proxy.throttle(40_000)  # 40 MB/s a path: each 1 MiB READ is out for a while
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}"
    trace = tmp_path / "trace"
    m = await trio.to_thread.run_sync(
        mount_with_limit, url, tmp_path / "mnt", f"addrs={paths.addresses[1]}+{paths.addresses[2]},channel=native",
        tmp_path / "mnt.log", trace)
    try:
        data = os.urandom(16 * MIB)
        (export_path.local / "f").write_bytes(data)
        before = len(traced(trace, "READ"))
        got = await trio.to_thread.run_sync(pread_direct, m.path / "f", 4 * MIB, 4 * MIB)
        assert sha(got) == sha(data[4 * MIB : 8 * MIB])
        assert payload(m.path)["largest_read_request"] == 4 * MIB  # one request from the kernel
        reads = traced(trace, "READ")[before:]
        assert len(reads) == 4, reads  # rsize (1 MiB) each
        assert most_at_once(reads) >= 2, reads  # in flight together, not one after another
        assert len({p for _, _, p in reads}) >= 2, reads  # over more than one path
    finally:
        for proxy in paths:
            proxy.restore()
        await trio.to_thread.run_sync(m.unmount)


@pytest.mark.fuse
def test_4_mib_writes_and_reads_of_the_mount_are_the_servers_bytes(ganesha: Ganesha, tmp_path: Path) -> None:
    """O_DIRECT writes of 4 MiB (one WRITE request each, several NFS WRITEs), read back by O_DIRECT
    reads of 4 MiB and by a buffered reader (the kernel's read-ahead in requests of 4 MiB)."""
    (ganesha.export_dir / tmp_path.name).mkdir()
    m = mount_with_limit(ganesha.url, tmp_path / "mnt", "channel=native", tmp_path / "mnt.log")
    try:
        data = os.urandom(24 * MIB + 12345)
        whole = len(data) // (4 * MIB) * 4 * MIB
        f = m.path / tmp_path.name / "f"
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
        try:
            buf = aligned(4 * MIB)
            for off in range(0, whole, 4 * MIB):
                buf[:] = data[off : off + 4 * MIB]
                assert os.pwritev(fd, [buf], off) == 4 * MIB
        finally:
            os.close(fd)
        with open(f, "ab") as out:
            out.write(data[whole:])
        assert payload(m.path)["largest_write_request"] == 4 * MIB
        assert sha((ganesha.export_dir / tmp_path.name / "f").read_bytes()) == sha(data)
        assert sha(b"".join(pread_direct(f, off, 4 * MIB) for off in range(0, len(data), 4 * MIB))) == sha(data)
        subprocess.run(["sh", "-c", "echo 1 > /proc/sys/vm/drop_caches"], check=True)
        with open(f, "rb", buffering=0) as src:
            got = b"".join(iter(lambda: src.read(MIB), b""))
        assert sha(got) == sha(data)
        assert payload(m.path)["largest_read_request"] == 4 * MIB
    finally:
        m.unmount()


@pytest.mark.fuse
def test_max_pages_caps_the_requests(ganesha: Ganesha, tmp_path: Path) -> None:
    """``-o max_pages=512`` under a limit of 1024: a 4 MiB O_DIRECT read reaches the daemon in 2 MiB requests."""
    data = os.urandom(8 * MIB)
    (ganesha.export_dir / tmp_path.name).mkdir()
    (ganesha.export_dir / tmp_path.name / "f").write_bytes(data)
    m = mount_with_limit(ganesha.url, tmp_path / "mnt", "channel=native,max_pages=512", tmp_path / "mnt.log")
    try:
        assert sha(pread_direct(m.path / tmp_path.name / "f", 0, 8 * MIB)) == sha(data)
        assert payload(m.path)["largest_read_request"] == 2 * MIB
    finally:
        m.unmount()


def test_max_pages_needs_the_native_channel(ganesha: Ganesha, tmp_path: Path) -> None:
    """What a user sees: one line saying why, and nothing mounted."""
    (tmp_path / "mnt").mkdir()
    p = subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", "mount", ganesha.url, str(tmp_path / "mnt"),
                        "-o", "channel=pyfuse3,max_pages=1024"], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert p.stderr.strip().splitlines()[-1].endswith(
        "mount option max_pages needs channel=native (libfuse, under channel=pyfuse3, sizes FUSE's requests itself)")
    assert not os.path.ismount(tmp_path / "mnt")
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def read_ahead_kb(mnt: Path) -> int:
    st = os.stat(mnt)
    return int(Path(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb").read_text())


@pytest.mark.fuse
def test_the_kernels_read_ahead_is_the_mounts_window_or_max_readahead(mount_export) -> None:
    """By default the kernel reads ahead at least as far as the daemon's own window (8 MiB: READs
    of 1 MiB that fill the paths, several in flight); ``-o max_readahead=BYTES`` sets it."""
    assert read_ahead_kb(mount_export("channel=native").path) >= 8192
    assert read_ahead_kb(mount_export("channel=native,max_readahead=2097152").path) == 2048
