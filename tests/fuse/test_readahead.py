"""Read-ahead: the window's decisions (sans-I/O) and what a reader sees through a real mount."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import pytest

from pynfsrdma._fuse.readahead import (
    KERNEL_READ_AHEAD_MOST,
    Extent,
    HeldBytes,
    OpenedBytes,
    ReadAhead,
    assemble,
    kernel_window,
)

MIB = 1 << 20
KIB = 1 << 10


def finish(extents: list[Extent], content: bytes) -> None:
    """Answer each READ ahead from ``content`` as a server would (a view of the reply)."""
    for e in extents:
        data = memoryview(content)[e.offset : e.offset + e.size]
        e.finish(data, e.offset + len(data) >= len(content))


# -- the window's decisions -------------------------------------------------------------------------------
def test_sequential_reads_are_read_ahead_in_aligned_rsize_extents() -> None:
    ra = ReadAhead(MIB, max_window=4 * MIB)
    assert ra.request(0, 128 * KIB, 100 * MIB) == ([], [])  # one request is not yet a pattern
    cover, new = ra.request(128 * KIB, 128 * KIB, 100 * MIB)
    assert [(e.offset, e.size) for e in new] == [(128 * KIB, 896 * KIB), (MIB, MIB), (2 * MIB, MIB)]
    assert cover == [new[0]]
    content = os.urandom(100 * MIB)
    finish(new, content)
    got = assemble(cover, 128 * KIB, 128 * KIB)
    assert isinstance(got, memoryview) and got.obj is new[0].data.obj  # a slice of the reply: no copy
    assert bytes(got) == content[128 * KIB : 256 * KIB]
    # reading on: served from the window, which moves along and grows up to max_window
    off = 256 * KIB
    while off < 20 * MIB:
        cover, new = ra.request(off, 128 * KIB, 100 * MIB)
        finish(new, content)
        assert cover and bytes(assemble(cover, off, 128 * KIB)) == content[off : off + 128 * KIB]
        ahead = ra.extents[-1].end - off
        assert ahead <= 4 * MIB + MIB
        off += 128 * KIB
    assert ra.window == 4 * MIB
    assert ra.extents[0].offset <= off - 128 * KIB  # passed extents were let go
    assert len(ra.extents) <= 6


def test_a_request_across_two_replies_is_joined() -> None:
    ra = ReadAhead(MIB)
    content = os.urandom(8 * MIB)
    ra.request(0, 512 * KIB, 8 * MIB)
    cover, new = ra.request(512 * KIB, MIB, 8 * MIB)
    finish(new, content)
    assert len(cover) == 2
    assert assemble(cover, 512 * KIB, MIB) == content[512 * KIB : 1536 * KIB]


def test_nothing_is_read_ahead_past_the_end_of_the_file_and_eof_reads_short() -> None:
    ra = ReadAhead(MIB)
    size = 1 * MIB + 1000
    content = os.urandom(size)
    ra.request(0, 128 * KIB, size)
    cover, new = ra.request(128 * KIB, 128 * KIB, size)
    assert [(e.offset, e.size) for e in new] == [(128 * KIB, 896 * KIB), (MIB, MIB)]
    finish(new, content)
    cover, new = ra.request(MIB, 128 * KIB, size)
    assert new == [] and bytes(assemble(cover, MIB, 128 * KIB)) == content[MIB:]
    # past the end inside the last extent: its reply said end of file
    cover, new = ra.request(MIB + 128 * KIB, 128 * KIB, size)
    assert new == [] and assemble(cover, MIB + 128 * KIB, 128 * KIB) == b""
    # beyond the known size and the window: read directly (the file may have grown), nothing ahead
    assert ra.request(2 * MIB, 128 * KIB, size) == ([], [])


def test_a_seek_drops_the_window_and_a_short_reply_is_not_trusted() -> None:
    ra = ReadAhead(MIB)
    ra.request(0, 128 * KIB, 64 * MIB)
    cover, new = ra.request(128 * KIB, 128 * KIB, 64 * MIB)
    assert new
    assert ra.request(40 * MIB, 128 * KIB, 64 * MIB) == ([], [])  # a seek
    assert not ra.extents and ra.drops == 1 and ra.streak == 1
    cover, new = ra.request(40 * MIB + 128 * KIB, 128 * KIB, 64 * MIB)
    assert cover and new[0].offset == 40 * MIB + 128 * KIB
    new[0].finish(memoryview(bytes(1000)), eof=False)  # short, not at end of file
    assert assemble(cover, 40 * MIB + 128 * KIB, 128 * KIB) is None  # the caller reads it itself
    new[0].error = OSError("lost")
    assert assemble(cover, 40 * MIB + 128 * KIB, 100) is None


def test_reordered_requests_just_behind_the_reader_are_not_a_seek() -> None:
    ra = ReadAhead(MIB)
    ra.request(0, 128 * KIB, 64 * MIB)
    ra.request(128 * KIB, 128 * KIB, 64 * MIB)
    ra.request(MIB, 128 * KIB, 64 * MIB)  # inside the window
    n = len(ra.extents)
    assert ra.request(0, 64 * KIB, 64 * MIB) == ([], [])  # behind the window: read directly
    assert len(ra.extents) == n and ra.drops == 0


def test_drop_forgets_everything() -> None:
    ra = ReadAhead(MIB)
    ra.request(0, 128 * KIB, 64 * MIB)
    ra.request(128 * KIB, 128 * KIB, 64 * MIB)
    ra.drop()
    assert not ra.extents and ra.streak == 0 and ra.window == ra.min_window


# -- through the mount ------------------------------------------------------------------------------------
def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def drop_page_cache(fd: int) -> None:
    """Make the kernel ask the file system again (our read-ahead window is what is then tested)."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


@pytest.mark.fuse
def test_bytes_read_with_the_open_answer_each_request_once_and_never_past_what_was_read() -> None:
    held = HeldBytes(10_000)
    content = os.urandom(6000)
    whole = OpenedBytes(memoryview(content), True, held)  # (the whole file: eof)
    assert held.held == 6000 and held.room(4000) and not held.room(4001)
    got = whole.take(0, 4096)
    assert isinstance(got, memoryview) and got.obj is content and bytes(got) == content[:4096]  # (no copy)
    assert held.held == 6000  # (the rest is still to be read)
    assert bytes(whole.take(4096, 8192)) == content[4096:]  # short at the end of the file
    assert held.held == 0 and whole.take(0, 10) is None  # once
    part = OpenedBytes(memoryview(content)[:5000], False, held)  # (the first bytes of a larger file)
    assert bytes(part.take(0, 5000)) == content[:5000] and part.take(0, 10) is None
    part = OpenedBytes(memoryview(content)[:5000], False, held)
    assert part.take(4096, 4096) is None and held.held == 0  # past what was read: the caller reads it
    dropped = OpenedBytes(memoryview(content), True, held)
    dropped.drop()
    assert held.held == 0 and dropped.take(0, 10) is None


def test_sequential_read_of_a_large_file_is_the_servers_data(work_dir: Any) -> None:
    data = os.urandom(48 * MIB + 12345)
    (work_dir.local / "big").write_bytes(data)
    with open(work_dir.mnt / "big", "rb", buffering=0) as f:
        h = hashlib.sha256()
        while chunk := f.read(128 * KIB):
            h.update(chunk)
    assert h.hexdigest() == sha(data)
    with open(work_dir.mnt / "big", "rb", buffering=0) as f:  # and with 1 MiB reads, then a seek
        assert f.read(3 * MIB) == data[: 3 * MIB]
        f.seek(40 * MIB + 7)
        assert f.read(5 * MIB) == data[40 * MIB + 7 : 45 * MIB + 7]


@pytest.mark.fuse
def test_a_read_after_a_write_through_the_same_open_sees_the_new_data(work_dir: Any) -> None:
    data = bytearray(os.urandom(16 * MIB))
    (work_dir.local / "rw").write_bytes(data)
    fd = os.open(work_dir.mnt / "rw", os.O_RDWR)
    try:
        assert os.pread(fd, 3 * MIB, 0) == data[: 3 * MIB]  # sequential: READs ahead to beyond 5 MiB
        new = os.urandom(300 * KIB)
        assert os.pwrite(fd, new, 5 * MIB) == len(new)
        data[5 * MIB : 5 * MIB + len(new)] = new
        drop_page_cache(fd)
        assert os.pread(fd, 3 * MIB, 3 * MIB) == data[3 * MIB : 6 * MIB]
        assert os.pread(fd, 16 * MIB, 0) == data
    finally:
        os.close(fd)
    assert (work_dir.local / "rw").read_bytes() == data


@pytest.mark.fuse
def test_a_file_changed_by_another_client_is_read_fresh(
    work_dir: Any, mount_export: Callable[..., Any]
) -> None:
    """Close-to-open across two mounts (two clients), and a change seen by a GETATTR while open."""
    other = mount_export("actimeo=0")
    name = work_dir.mnt.name
    first = os.urandom(12 * MIB)
    second = os.urandom(12 * MIB)
    third = os.urandom(12 * MIB)
    (other.path / name / "f").write_bytes(first)
    mine = work_dir.mnt / "f"
    assert sha(mine.read_bytes()) == sha(first)
    (other.path / name / "f").write_bytes(second)  # closed: on the server
    assert sha(mine.read_bytes()) == sha(second)  # a new open revalidates and reads afresh
    # while open, with actimeo=0 on the reading mount too
    reader = mount_export("actimeo=0")
    fd = os.open(reader.path / name / "f", os.O_RDONLY)
    try:
        assert os.pread(fd, 2 * MIB, 0) == second[: 2 * MIB]  # read ahead well past 4 MiB
        (other.path / name / "f").write_bytes(third)
        os.fstat(fd)  # a GETATTR: the change attribute moved
        drop_page_cache(fd)
        assert os.pread(fd, 2 * MIB, 4 * MIB) == third[4 * MIB : 6 * MIB]
    finally:
        os.close(fd)


def test_the_kernels_window_grows_with_the_reads_that_fill_the_paths_within_its_bounds() -> None:
    mib = 1 << 20
    assert kernel_window(mib, 3, 8 * mib) == 8 * mib  # one path: the daemon's own window
    assert kernel_window(mib, 12, 8 * mib) == 12 * mib  # four paths of three READs in flight each
    assert kernel_window(mib, 200, 8 * mib) == KERNEL_READ_AHEAD_MOST  # memory bounded
    assert kernel_window(4096, 1, 4096) == 128 << 10  # never below the kernel's default
    assert kernel_window(mib, 2, mib, most=2 * mib + 100) == 2 * mib  # (whole KiB)
