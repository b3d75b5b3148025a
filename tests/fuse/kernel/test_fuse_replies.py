"""Replies and notifications encoded byte by byte as ``include/uapi/linux/fuse.h`` lays them out
(host byte order): the layouts are written out here independently of the ABI module's."""

from __future__ import annotations

import errno
import stat
import struct

import pytest

from pynfsrdma._fuse.kernel import abi, notify, replies
from pynfsrdma._fuse.kernel.records import NEGATIVE_ENTRY
from pynfsrdma._fuse.lowlevel import EntryAttributes, FileInfo, FileLock, StatvfsData

UNIQUE = 0x0102030405060708
OUT_HEADER = "=IiQ"  # len, error, unique
ATTR = "QQQqqqIIIIIIIIII"  # ino size blocks atime mtime ctime atimensec mtimensec ctimensec mode nlink uid gid rdev blksize flags


def attrs(**kw: int | float) -> EntryAttributes:
    a = EntryAttributes(
        st_ino=77, generation=3, entry_timeout=1.5, attr_timeout=2.25, st_mode=stat.S_IFREG | 0o644,
        st_nlink=2, st_uid=1000, st_gid=100, st_rdev=0, st_size=12345, st_blksize=4096, st_blocks=24,
        st_atime_ns=1_700_000_000_123_456_789, st_mtime_ns=1_700_000_001_000_000_001,
        st_ctime_ns=-1_500_000_000,  # before 1970: seconds -2, nanoseconds 500000000
    )
    for k, v in kw.items():
        setattr(a, k, v)
    return a


ATTR_FIELDS = (77, 12345, 24, 1_700_000_000, 1_700_000_001, -2, 123_456_789, 1, 500_000_000,
               stat.S_IFREG | 0o644, 2, 1000, 100, 0, 4096, 0)


def test_error_and_empty() -> None:
    assert replies.error(UNIQUE, errno.ENOENT) == struct.pack(OUT_HEADER, 16, -errno.ENOENT, UNIQUE)
    assert replies.empty(UNIQUE) == struct.pack(OUT_HEADER, 16, 0, UNIQUE)


def test_entry() -> None:
    out = replies.entry(UNIQUE, attrs())
    assert len(out) == 16 + 128
    expect = struct.pack(OUT_HEADER, 144, 0, UNIQUE) + struct.pack(
        "=QQQQII" + ATTR, 77, 3, 1, 2, 500_000_000, 250_000_000, *ATTR_FIELDS
    )
    assert out == expect


def test_entry_and_attr_of_fields_are_the_same_replies() -> None:
    for a in (attrs(), attrs(st_ino=79, st_rdev=(7 << 32) | 3, entry_timeout=7.0, attr_timeout=0.0)):
        fields = (
            a.st_ino, a.generation, a.entry_timeout, a.attr_timeout, a.st_mode, a.st_nlink, a.st_uid, a.st_gid,
            a.st_rdev, a.st_size, a.st_blksize, a.st_blocks, a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns,
        )  # fmt: skip
        assert replies.entry_of_fields(UNIQUE, fields) == replies.entry(UNIQUE, a)
        assert replies.attr_of_fields(UNIQUE, fields) == replies.attr(UNIQUE, a)
    assert replies.entry_of_fields(UNIQUE, NEGATIVE_ENTRY) == replies.entry(UNIQUE, EntryAttributes())


def test_negative_entry_has_node_0_and_its_timeout() -> None:
    out = replies.entry(UNIQUE, EntryAttributes(st_ino=0, entry_timeout=30.0))
    nodeid, _, entry_valid, attr_valid, entry_nsec, _ = struct.unpack_from("=QQQQII", out, 16)
    assert (nodeid, entry_valid, attr_valid, entry_nsec) == (0, 30, 0, 0)


def test_attr() -> None:
    out = replies.attr(UNIQUE, attrs())
    assert out == struct.pack(OUT_HEADER, 120, 0, UNIQUE) + struct.pack("=QII" + ATTR, 2, 250_000_000, 0, *ATTR_FIELDS)


def test_timeouts() -> None:
    assert replies.timeout(0) == (0, 0)
    assert replies.timeout(-5) == (0, 0)
    assert replies.timeout(float("nan")) == (0, 0)
    assert replies.timeout(0.000000001)[0] == 0
    s, ns = replies.timeout(float("inf"))
    assert s == 1 << 62 and ns == 0
    s, ns = replies.timeout(3.999999999999)
    assert s == 3 and 0 <= ns < 1_000_000_000


def test_timeouts_left_of_an_attributes_time_are_each_converted() -> None:
    # (what is left of an attribute's time differs at every reply, thousands of values)
    for i in range(3000):
        assert replies.timeout(i + 0.25) == (i, 250_000_000)
    assert replies.timeout(7.0) == (7, 0)
    assert replies.timeout(2.5) == (2, 500_000_000)


def test_rdev_is_the_32_bit_encoding() -> None:
    out = replies.attr(UNIQUE, attrs(st_rdev=(1 << 40) | 0x0801))
    assert struct.unpack_from("=I", out, 16 + 16 + 8 * 6 + 4 * 7)[0] == 0x0801


def test_open_and_create() -> None:
    fi = FileInfo(fh=9, keep_cache=True, direct_io=True, nonseekable=True)
    flags = abi.FOPEN_KEEP_CACHE | abi.FOPEN_DIRECT_IO | abi.FOPEN_NONSEEKABLE
    assert flags == 0b111
    assert replies.open_file(UNIQUE, fi) == struct.pack(OUT_HEADER, 32, 0, UNIQUE) + struct.pack("=QIi", 9, 0b111, 0)
    fi = FileInfo(fh=9, keep_cache=False)
    assert replies.open_file(UNIQUE, fi)[16:] == struct.pack("=QIi", 9, 0, 0)
    assert replies.open_dir(UNIQUE, 5)[16:] == struct.pack("=QIi", 5, 0, 0)
    out = replies.create(UNIQUE, attrs(), FileInfo(fh=6, keep_cache=True))
    assert out == struct.pack(OUT_HEADER, 16 + 128 + 16, 0, UNIQUE) + struct.pack(
        "=QQQQII" + ATTR, 77, 3, 1, 2, 500_000_000, 250_000_000, *ATTR_FIELDS
    ) + struct.pack("=QIi", 6, 2, 0)


def test_write_copy_statfs_xattr_lock_lseek() -> None:
    assert replies.write(UNIQUE, 1 << 20) == struct.pack(OUT_HEADER, 24, 0, UNIQUE) + struct.pack("=II", 1 << 20, 0)
    assert replies.copy_file_range_64(UNIQUE, 1 << 33) == struct.pack(OUT_HEADER, 24, 0, UNIQUE) + struct.pack("=Q", 1 << 33)
    s = StatvfsData(f_bsize=4096, f_frsize=512, f_blocks=10, f_bfree=5, f_bavail=4, f_files=100, f_ffree=50,
                    f_favail=50, f_namemax=255)
    assert replies.statfs(UNIQUE, s) == struct.pack(OUT_HEADER, 96, 0, UNIQUE) + struct.pack(
        "=QQQQQIIII6I", 10, 5, 4, 100, 50, 4096, 255, 512, 0, 0, 0, 0, 0, 0, 0
    )
    assert replies.xattr_size(UNIQUE, 33) == struct.pack(OUT_HEADER, 24, 0, UNIQUE) + struct.pack("=II", 33, 0)
    lk = FileLock(start=1, end=(1 << 63) - 1, type=1, pid=99)
    assert replies.lock(UNIQUE, lk) == struct.pack(OUT_HEADER, 40, 0, UNIQUE) + struct.pack("=QQII", 1, (1 << 63) - 1, 1, 99)
    assert replies.lseek(UNIQUE, 8192) == struct.pack(OUT_HEADER, 24, 0, UNIQUE) + struct.pack("=Q", 8192)


def test_data_is_written_where_it_lies() -> None:
    payload = memoryview(bytearray(b"x" * 5000))[100:4196]
    out = replies.data(UNIQUE, payload)
    assert out[0] == struct.pack(OUT_HEADER, 16 + 4096, 0, UNIQUE)
    assert out[1] is payload
    assert replies.data(UNIQUE, b"") == [struct.pack(OUT_HEADER, 16, 0, UNIQUE)]
    out = replies.data_parts(UNIQUE, [b"ab", memoryview(b"cde"), b""])
    assert out[0] == struct.pack(OUT_HEADER, 21, 0, UNIQUE) and b"".join(bytes(p) for p in out[1:]) == b"abcde"


def test_dirent_buffer_plain() -> None:
    d = replies.DirentBuffer(4096, plus=False)
    assert d.add(b"a", attrs(st_ino=5, st_mode=stat.S_IFDIR | 0o755), 1)
    assert d.add(b"longer-name", attrs(st_ino=6, st_mode=stat.S_IFLNK | 0o777), 2)
    out = b"".join(bytes(p) for p in d.reply(UNIQUE))
    body = (
        struct.pack("=QQII", 5, 1, 1, 4) + b"a" + bytes(7)  # DT_DIR 4, 24 + 1 padded to 32
        + struct.pack("=QQII", 6, 2, 11, 10) + b"longer-name" + bytes(5)  # DT_LNK 10, 24 + 11 -> 40
    )
    assert out == struct.pack(OUT_HEADER, 16 + len(body), 0, UNIQUE) + body


def test_direntplus_buffer_and_its_limit() -> None:
    one = 128 + 24 + 8  # entry_out + dirent + "f0" padded to 8
    d = replies.DirentBuffer(2 * one + one - 1, plus=True)
    assert d.add(b"f0", attrs(), 1)
    assert d.add(b"f1", attrs(st_ino=78), 2)
    assert not d.add(b"f2", attrs(st_ino=79), 3)  # does not fit: not taken
    assert d.count == 2
    out = b"".join(bytes(p) for p in d.reply(UNIQUE))
    assert len(out) == 16 + 2 * one
    first = struct.pack("=QQQQII" + ATTR, 77, 3, 1, 2, 500_000_000, 250_000_000, *ATTR_FIELDS)
    first += struct.pack("=QQII", 77, 1, 2, 8) + b"f0" + bytes(6)  # DT_REG 8
    assert out[16 : 16 + one] == first


def test_direntplus_from_fields_is_the_same_entry() -> None:
    a = attrs(st_ino=79, st_rdev=(7 << 32) | 3, st_mode=stat.S_IFCHR | 0o600)
    fields = (
        a.st_ino, a.generation, a.entry_timeout, a.attr_timeout, a.st_mode, a.st_nlink, a.st_uid, a.st_gid,
        a.st_rdev, a.st_size, a.st_blksize, a.st_blocks, a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns,
    )  # fmt: skip
    assert EntryAttributes(*fields) == a
    for plus in (True, False):
        by_attrs, by_fields = replies.DirentBuffer(4096, plus), replies.DirentBuffer(4096, plus)
        assert by_attrs.add(b"dev", a, 4) and by_fields.add_fields(b"dev", fields, 4)
        assert bytes(by_fields.reply(UNIQUE)[1]) == bytes(by_attrs.reply(UNIQUE)[1])


def test_an_empty_listing_is_just_the_header() -> None:
    assert replies.DirentBuffer(4096, plus=True).reply(UNIQUE) == [struct.pack(OUT_HEADER, 16, 0, UNIQUE)]


def test_notifications() -> None:
    assert notify.inval_inode(55) == struct.pack(OUT_HEADER, 40, abi.FUSE_NOTIFY_INVAL_INODE, 0) + struct.pack(
        "=Qqq", 55, 0, 0
    )
    assert notify.inval_inode(55, attr_only=True)[16:] == struct.pack("=Qqq", 55, -1, 0)
    assert abi.FUSE_NOTIFY_INVAL_INODE == 2 and abi.FUSE_NOTIFY_INVAL_ENTRY == 3 and abi.FUSE_NOTIFY_DELETE == 6
    assert notify.inval_entry(1, b"name") == struct.pack(OUT_HEADER, 16 + 16 + 5, 3, 0) + struct.pack(
        "=QII", 1, 4, 0
    ) + b"name\0"
    assert notify.inval_entry(1, b"n", expire_only=True)[16:32] == struct.pack("=QII", 1, 1, 1)
    assert notify.delete(1, 9, b"gone") == struct.pack(OUT_HEADER, 16 + 24 + 5, 6, 0) + struct.pack(
        "=QQII", 1, 9, 4, 0
    ) + b"gone\0"
    for bad in (b"", b"a\0b", b"x" * 1025):
        with pytest.raises(ValueError):
            notify.inval_entry(1, bad)
