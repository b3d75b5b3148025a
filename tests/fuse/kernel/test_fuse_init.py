"""FUSE_INIT with the kernels this client meets: 7.31 (fuse_init_in of 16 bytes, no flags2), 7.37
(Debian 12's 6.1: 64 bytes, flags2), 7.45 (this machine's), one newer than we speak, a newer major, and
one too old. The reply is checked byte by byte against fuse_init_out's layout."""

from __future__ import annotations

import errno
import struct

import pytest

from pynfsrdma._fuse.kernel import abi
from pynfsrdma._fuse.kernel import init as fi
from pynfsrdma._fuse.kernel import requests as rq

UNIQUE = 2
OUT_HEADER = "=IiQ"
INIT_OUT = "=IIIIHHIIHHIIH22x"  # 64 bytes

# what each kernel offers (fs/fuse/inode.c fuse_send_init of that version)
OFFERED_7_31 = (
    abi.FUSE_ASYNC_READ | abi.FUSE_POSIX_LOCKS | abi.FUSE_ATOMIC_O_TRUNC | abi.FUSE_EXPORT_SUPPORT
    | abi.FUSE_BIG_WRITES | abi.FUSE_DONT_MASK | abi.FUSE_SPLICE_WRITE | abi.FUSE_SPLICE_MOVE
    | abi.FUSE_SPLICE_READ | abi.FUSE_FLOCK_LOCKS | abi.FUSE_HAS_IOCTL_DIR | abi.FUSE_AUTO_INVAL_DATA
    | abi.FUSE_DO_READDIRPLUS | abi.FUSE_READDIRPLUS_AUTO | abi.FUSE_ASYNC_DIO | abi.FUSE_WRITEBACK_CACHE
    | abi.FUSE_NO_OPEN_SUPPORT | abi.FUSE_PARALLEL_DIROPS | abi.FUSE_HANDLE_KILLPRIV | abi.FUSE_POSIX_ACL
    | abi.FUSE_ABORT_ERROR | abi.FUSE_MAX_PAGES | abi.FUSE_CACHE_SYMLINKS | abi.FUSE_NO_OPENDIR_SUPPORT
    | abi.FUSE_EXPLICIT_INVAL_DATA
)
OFFERED_7_37 = OFFERED_7_31 | abi.FUSE_HANDLE_KILLPRIV_V2 | abi.FUSE_SETXATTR_EXT | abi.FUSE_INIT_EXT \
    | abi.FUSE_SECURITY_CTX | abi.FUSE_HAS_INODE_DAX
OFFERED_7_45 = OFFERED_7_37 | abi.FUSE_CREATE_SUPP_GROUP | abi.FUSE_HAS_EXPIRE_ONLY | abi.FUSE_DIRECT_IO_ALLOW_MMAP \
    | abi.FUSE_PASSTHROUGH | abi.FUSE_NO_EXPORT_SUPPORT | abi.FUSE_HAS_RESEND | abi.FUSE_ALLOW_IDMAP \
    | abi.FUSE_OVER_IO_URING | abi.FUSE_REQUEST_TIMEOUT

ASKED = (
    abi.FUSE_ASYNC_READ | abi.FUSE_BIG_WRITES | abi.FUSE_ATOMIC_O_TRUNC | abi.FUSE_PARALLEL_DIROPS
    | abi.FUSE_ASYNC_DIO | abi.FUSE_DO_READDIRPLUS | abi.FUSE_AUTO_INVAL_DATA | abi.FUSE_MAX_PAGES
)


def init_request(major: int, minor: int, flags: int, readahead: int = 131072) -> rq.Init:
    body = struct.pack("=IIII", major, minor, readahead, flags & 0xFFFFFFFF)
    if minor >= 36:
        body += struct.pack("=I44x", flags >> 32)
    buf = bytearray(struct.pack("=IIQQIIIHH", 40 + len(body), abi.FUSE_INIT, UNIQUE, 0, 0, 0, 0, 0, 0) + body)
    req = rq.decode(buf, len(buf))
    assert isinstance(req, rq.Init)
    return req


def unpack_reply(reply: bytes) -> tuple[int, ...]:
    length, err, unique = struct.unpack_from(OUT_HEADER, reply)
    assert (length, err, unique) == (len(reply), 0, UNIQUE)
    assert length == 16 + 64
    return struct.unpack_from(INIT_OUT, reply, 16)


def test_decode_init_before_and_after_flags2() -> None:
    assert init_request(7, 31, OFFERED_7_31).flags == OFFERED_7_31
    req = init_request(7, 37, OFFERED_7_37)
    assert req.flags == OFFERED_7_37 and req.flags >> 32  # flags2 folded in
    req = init_request(7, 45, OFFERED_7_45, readahead=1 << 20)
    assert (req.major, req.minor, req.max_readahead, req.flags) == (7, 45, 1 << 20, OFFERED_7_45)


@pytest.mark.parametrize(
    "minor, offered, extra",
    [(31, OFFERED_7_31, 0), (37, OFFERED_7_37, abi.FUSE_HANDLE_KILLPRIV_V2),
     (45, OFFERED_7_45, abi.FUSE_HANDLE_KILLPRIV_V2)],
)
def test_negotiate(minor: int, offered: int, extra: int) -> None:
    reply, agreed = fi.negotiate(init_request(7, minor, offered), fi.Wanted())
    assert agreed is not None
    expected_flags = ASKED | extra
    (major, rminor, readahead, flags, max_bg, congestion, max_write, time_gran, max_pages, map_alignment, flags2,
     stack_depth, timeout) = unpack_reply(reply)
    assert (major, rminor) == (7, minor)
    assert readahead == 131072  # as the kernel offered
    assert flags == expected_flags and flags2 == 0  # nothing asked for above bit 31
    assert not flags & (abi.FUSE_WRITEBACK_CACHE | abi.FUSE_READDIRPLUS_AUTO | abi.FUSE_POSIX_LOCKS
                        | abi.FUSE_FLOCK_LOCKS | abi.FUSE_SPLICE_READ | abi.FUSE_EXPORT_SUPPORT)
    assert (max_write, max_pages, time_gran) == (1 << 20, 256, 1)
    assert (max_bg, congestion, map_alignment, stack_depth, timeout) == (0, 0, 0, 0, 0)
    assert (agreed.minor, agreed.flags, agreed.max_write) == (minor, expected_flags, 1 << 20)
    assert not agreed.options.setxattr_ext


def test_locks_are_asked_for_only_when_wanted() -> None:
    wanted = fi.Wanted(flags=fi.WANTED | fi.LOCKS)
    _, agreed = fi.negotiate(init_request(7, 45, OFFERED_7_45), wanted)
    assert agreed is not None and agreed.has(abi.FUSE_POSIX_LOCKS) and agreed.has(abi.FUSE_FLOCK_LOCKS)


def test_no_max_pages_offered_means_none_in_the_reply() -> None:
    reply, agreed = fi.negotiate(init_request(7, 31, OFFERED_7_31 & ~abi.FUSE_MAX_PAGES), fi.Wanted())
    assert agreed is not None and not agreed.has(abi.FUSE_MAX_PAGES)
    assert unpack_reply(reply)[8] == 0


def test_a_newer_minor_is_answered_with_ours() -> None:
    reply, agreed = fi.negotiate(init_request(7, 99, OFFERED_7_45), fi.Wanted())
    assert agreed is not None and agreed.minor == 45
    assert unpack_reply(reply)[:2] == (7, 45)


def test_a_newer_major_is_answered_with_ours_alone() -> None:
    reply, agreed = fi.negotiate(init_request(8, 0, OFFERED_7_45), fi.Wanted())
    assert agreed is None  # the kernel sends INIT again
    assert unpack_reply(reply) == (7, 45) + (0,) * 11


@pytest.mark.parametrize("major, minor", [(7, 30), (7, 9), (6, 40)])
def test_too_old_is_refused(major: int, minor: int) -> None:
    with pytest.raises(fi.InitRefused, match=f"{major}.{minor}") as e:
        fi.negotiate(init_request(major, minor, OFFERED_7_31), fi.Wanted())
    assert e.value.reply == struct.pack(OUT_HEADER, 16, -errno.EPROTO, UNIQUE)


@pytest.mark.parametrize(
    "pages, read_ahead, max_background, congestion",
    [
        (256, 8 << 20, 16, 12),  # 1 MiB requests, an 8 MiB window: 8 read-ahead requests, as many for writeback
        (256, 32 << 20, 64, 48),  # the window the paths may grow it to: 64 MiB of background requests at most
        (1024, 32 << 20, 16, 12),  # 4 MiB requests (the limit raised): the same bytes in fewer requests
        (1024, 8 << 20, 12, 9),  # never below the kernel's own default (12, and 9)
        (256, 128 << 10, 12, 9),
    ],
)
def test_sized_requests_and_background_go_into_the_reply(
    pages: int, read_ahead: int, max_background: int, congestion: int
) -> None:
    wanted = fi.sized(fi.WANTED, pages, read_ahead)
    reply, agreed = fi.negotiate(init_request(7, 45, OFFERED_7_45), wanted)
    assert agreed is not None
    (_, _, readahead, _, max_bg, congestion_threshold, max_write, _, max_pages, *_) = unpack_reply(reply)
    assert (max_pages, max_write) == (pages, pages * 4096)
    assert (max_bg, congestion_threshold) == (max_background, congestion)
    # the window asked for, above what the kernel offered: the kernel keeps the smaller of it and its
    # bdi's (read_ahead_kb, which the mount raises before it answers INIT)
    assert readahead == read_ahead
    assert (agreed.max_pages, agreed.max_write, agreed.max_readahead, agreed.max_background,
            agreed.congestion_threshold) == (pages, pages * 4096, read_ahead, max_background, congestion)
    assert max_bg * max_write <= max(fi.BACKGROUND_BYTES, fi.KERNEL_MAX_BACKGROUND * max_write)  # memory bounded


def test_sized_pages_stay_within_the_fields_16_bits() -> None:
    wanted = fi.sized(fi.WANTED, 1 << 20, 0)
    reply, _ = fi.negotiate(init_request(7, 45, OFFERED_7_45), wanted)
    assert unpack_reply(reply)[8] == 0xFFFF
    assert fi.sized(fi.WANTED, 0, 0).max_pages == 1
