"""Copies of payload bytes per READ and per WRITE through a real mount (native channel) of
NFS-Ganesha, counted by the mount daemon (``pynfsrdma stats MOUNTPOINT --json``, its ``payload``
part):

- READ: the data goes from the TCP socket into a pipe and from the pipe into the kernel's FUSE
  request by splice(2); what passes through the daemon's memory is the few bytes of data that came
  in with the reply's head (at most 256 bytes per READ), nothing else. O_DIRECT reads and buffered
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
import trio

from pynfsrdma._control_socket import Connection
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._testbed import Ganesha, MutatingProxy, Mutation, ReplyMutator, Rule
from pynfsrdma._testbed.ganesha import ExportPath

MIB = 1 << 20
KIB = 1 << 10
STAGED_PER_READ = 256  # data bytes at most that come in with a reply's head (through our memory)


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


@pytest.mark.fuse
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


@pytest.mark.fuse
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


@pytest.mark.fuse
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


# -- replies that break the protocol ------------------------------------------------------------------------
BROKEN_READS = [
    Rule(Mutation.READ_SHORT, c.OP_READ),  # spliced as announced, then the rest of the data is left over
    Rule(Mutation.LENGTH, c.OP_READ, "READ.data"),  # a length longer than asked: not spliced, refused
    Rule(Mutation.TRUNCATE, c.OP_READ),  # the record ends inside the data
    Rule(Mutation.TRAILING, c.OP_READ),  # bytes after the reply
    Rule(Mutation.DUPLICATE, c.OP_READ),  # the reply twice: the second answers no call
    Rule(Mutation.XID, c.OP_READ),  # a reply to no call: the READ waiting for its own gets none
]


@pytest.mark.fuse
@pytest.mark.parametrize("rule", BROKEN_READS, ids=lambda r: f"{r.mutation.value}-{r.site or ''}")
async def test_a_broken_read_reply_never_reaches_the_reader(
    ganesha: Ganesha, nursery: trio.Nursery, mount_url: Callable[..., Any], export_path: ExportPath, rule: Rule
) -> None:
    """A READ reply that breaks the protocol closes its connection and the READ goes again on a new one
    (as for the path API): the reader gets the file's bytes, and nothing of the broken reply, whether
    its data went into the pipe in part, whole, or not at all."""
    data = os.urandom(4 * MIB)
    (export_path.local / "f").write_bytes(data)
    rule.count = 0  # (the mount's own calls pass as they are)
    proxy = MutatingProxy("127.0.0.1", 0, ganesha.host, ganesha.port, ReplyMutator(seed=3, rules=[rule]))
    await nursery.start(proxy.run)
    m = await trio.to_thread.run_sync(mount_url, f"nfs://127.0.0.1:{proxy.port}{export_path.remote}",
                                      "channel=native")
    try:
        before = await trio.to_thread.run_sync(payload, m.path / "x")
        for _ in range(2):
            rule.count = 1
            got = await trio.to_thread.run_sync(read_direct, m.path / "f", 512 * KIB)
            assert rule.count == 0  # (the change was made)
            assert sha(got) == sha(data)
        d = delta(before, await trio.to_thread.run_sync(payload, m.path / "x"))
        assert d["read_bytes_spliced"] + d["read_bytes_written"] == 2 * len(data)
        assert d["read_bytes_spliced"] >= len(data)  # (the other READs were spliced)
    finally:
        rc = await trio.to_thread.run_sync(m.unmount)
    assert rc == 0, m.log.read_text()[-3000:]
