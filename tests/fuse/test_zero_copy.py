"""Copies of payload bytes per READ and per WRITE through a real mount (native channel) of
NFS-Ganesha, counted by the mount daemon (``pynfsrdma stats MOUNTPOINT --json``, its ``payload``
part):

- READ: the data goes from the TCP socket into a pipe and from the pipe into the kernel's FUSE
  request by splice(2); what passes through the daemon's memory is the few bytes of data that came
  in with the reply's head (less than 2 KiB per READ), nothing else. O_DIRECT reads and buffered
  reads (the kernel reading ahead) both.
- WRITE: the data reaches the operations as a view of the buffer the kernel wrote the request into,
  and goes to the socket from there as an iovec of its own (sendmsg): no copy in the daemon.

The reads are checked byte for byte against the file on the server's disk."""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma.control import Connection
from pynfsrdma.testbed import Ganesha

MIB = 1 << 20
KIB = 1 << 10
STAGED_PER_READ = 2 * KIB  # data bytes at most that come in with a reply's head (through our memory)

pytestmark = pytest.mark.fuse


def payload(mnt: Path) -> dict[str, int]:
    with Connection(str(mnt.parent)) as conn:
        counts: dict[str, int] = conn.request("stats")["payload"]
    return counts


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def read_direct(path: Path, chunk: int) -> bytes:
    buf = mmap.mmap(-1, chunk)  # (page-aligned, as O_DIRECT wants)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    out = bytearray()
    try:
        while n := os.readv(fd, [buf]):
            out += buf[:n]
    finally:
        os.close(fd)
    return bytes(out)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def mounted(mount_export: Callable[..., Any], ganesha: Ganesha, tmp_path: Path) -> tuple[Path, Path]:
    """(a directory of a fresh native-channel mount, the same directory on the server's disk)"""
    name = f"zc-{tmp_path.name}"
    (ganesha.export_dir / name).mkdir()
    m = mount_export("channel=native")
    return m.path / name, ganesha.export_dir / name


@pytest.mark.parametrize("chunk", [512 * KIB, 128 * KIB])
def test_o_direct_read_data_is_spliced_from_the_socket_into_fuse(mounted: tuple[Path, Path], chunk: int) -> None:
    mnt, local = mounted
    data = os.urandom(24 * MIB)
    (local / "f").write_bytes(data)
    before = payload(mnt)
    assert sha(read_direct(mnt / "f", chunk)) == sha(data)
    d = delta(before, payload(mnt))
    n = len(data)
    reads = n // chunk
    # every READ spliced: the kernel got all of the data from pipes, none written from memory
    assert d["read_replies_spliced"] == reads, d
    assert d["read_bytes_spliced"] == n and d["read_bytes_written"] == 0, d
    # copies of payload bytes in the daemon: only what came with each reply's head
    assert d["transport_bytes_spliced"] + d["transport_bytes_staged"] == n, d
    assert d["transport_bytes_staged"] <= reads * STAGED_PER_READ, d
    assert d["transport_splice_fallbacks"] == 0, d


def test_buffered_read_data_is_spliced_too(mounted: tuple[Path, Path]) -> None:
    """The kernel reads ahead (1 MiB requests, several in flight); each request is one READ, spliced."""
    mnt, local = mounted
    data = os.urandom(32 * MIB + 4321)
    (local / "f").write_bytes(data)
    before = payload(mnt)
    with open(mnt / "f", "rb", buffering=0) as f:
        got = b"".join(iter(lambda: f.read(MIB), b""))
    assert sha(got) == sha(data)
    d = delta(before, payload(mnt))
    # (the file's last request of under SPLICE_MIN bytes and any small first one may be written)
    n = len(data)
    assert d["read_bytes_spliced"] >= n - 64 * KIB and d["read_bytes_written"] <= 64 * KIB, d
    assert d["transport_bytes_staged"] <= d["read_replies_spliced"] * STAGED_PER_READ, d


def test_write_data_goes_from_the_kernels_buffer_to_the_socket_without_a_copy(mounted: tuple[Path, Path]) -> None:
    mnt, local = mounted
    data = os.urandom(16 * MIB)
    buf = mmap.mmap(-1, MIB)
    fd = os.open(mnt / "f", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    before = payload(mnt)
    try:
        for off in range(0, len(data), MIB):
            buf[:] = data[off : off + MIB]
            assert os.pwritev(fd, [buf], off) == MIB
        os.fsync(fd)
    finally:
        os.close(fd)
    d = delta(before, payload(mnt))
    assert sha((local / "f").read_bytes()) == sha(data)
    # all of it handed to the operations in the request's buffer, none copied out of it ...
    n = len(data)
    assert d["write_bytes_in_place"] == n and d["write_bytes_copied"] == 0, d
    # ... and sent from there by reference (each WRITE's data an iovec of its own)
    assert d["transport_bulk_bytes_sent"] == n, d
