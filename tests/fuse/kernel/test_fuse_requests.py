"""Every FUSE request type decoded from bytes built here field by field, as the kernel lays them out
(``include/uapi/linux/fuse.h``: host byte order, structures padded to 8 bytes); and bytes that are not
a request (truncated, lying about their length, garbage) refused with MalformedRequest, never a crash."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynfsrdma._fuse.kernel import abi
from pynfsrdma._fuse.kernel import requests as rq

UNIQUE, NODE, UID, GID, PID = 0x1122334455667788, 42, 1000, 100, 4242


def request(opcode: int, body: bytes, extlen: int = 0, unique: int = UNIQUE, nodeid: int = NODE) -> bytearray:
    """fuse_in_header (len u32, opcode u32, unique u64, nodeid u64, uid, gid, pid u32, total_extlen u16,
    padding u16) then ``body``."""
    header = struct.pack("=IIQQIIIHH", 40 + len(body), opcode, unique, nodeid, UID, GID, PID, extlen, 0)
    return bytearray(header + body)


def decode(buf: bytearray, **kw: object) -> rq.Request:
    return rq.decode(buf, len(buf), **kw)  # type: ignore[arg-type]


def check_header(r: rq.Request, opcode: int) -> None:
    assert (r.unique, r.opcode, r.nodeid, r.uid, r.gid, r.pid) == (UNIQUE, opcode, NODE, UID, GID, PID)


def test_struct_sizes_match_the_header() -> None:
    sizes = {
        abi.IN_HEADER: 40, abi.OUT_HEADER: 16, abi.ATTR: 88, abi.ENTRY_OUT: 128, abi.ATTR_OUT: 104,
        abi.OPEN_OUT: 16, abi.WRITE_OUT: 8, abi.STATFS_OUT: 80, abi.GETXATTR_OUT: 8, abi.LK_OUT: 24,
        abi.LSEEK_OUT: 8, abi.DIRENT: 24, abi.DIRENTPLUS: 152, abi.INIT_IN: 16, abi.INIT_IN_EXT: 48,
        abi.INIT_OUT: 64, abi.FORGET_IN: 8, abi.BATCH_FORGET_IN: 8, abi.FORGET_ONE: 16, abi.GETATTR_IN: 16,
        abi.SETATTR_IN: 88, abi.MKNOD_IN: 16, abi.MKDIR_IN: 8, abi.RENAME_IN: 8, abi.RENAME2_IN: 16,
        abi.LINK_IN: 8, abi.OPEN_IN: 8, abi.CREATE_IN: 16, abi.RELEASE_IN: 24, abi.FLUSH_IN: 24,
        abi.READ_IN: 40, abi.WRITE_IN: 40, abi.FSYNC_IN: 16, abi.SETXATTR_IN: 8, abi.SETXATTR_IN_EXT: 16,
        abi.GETXATTR_IN: 8, abi.LK_IN: 48, abi.ACCESS_IN: 8, abi.INTERRUPT_IN: 8, abi.FALLOCATE_IN: 32,
        abi.LSEEK_IN: 24, abi.COPY_FILE_RANGE_IN: 56, abi.COPY_FILE_RANGE_OUT: 8,
        abi.NOTIFY_INVAL_INODE_OUT: 24, abi.NOTIFY_INVAL_ENTRY_OUT: 16, abi.NOTIFY_DELETE_OUT: 24,
    }
    for s, size in sizes.items():
        assert s.size == size, s.format


def test_lookup_unlink_rmdir_removexattr_carry_one_name() -> None:
    for op in (abi.FUSE_LOOKUP, abi.FUSE_UNLINK, abi.FUSE_RMDIR, abi.FUSE_REMOVEXATTR):
        r = decode(request(op, b"file.txt\0"))
        assert isinstance(r, rq.Named)
        check_header(r, op)
        assert r.name == b"file.txt" and type(r.name) is bytes


def test_forget_and_batch_forget() -> None:
    r = decode(request(abi.FUSE_FORGET, struct.pack("=Q", 7)))
    assert isinstance(r, rq.Forget) and r.nlookup == 7 and r.nodeid == NODE
    body = struct.pack("=II", 3, 0) + b"".join(struct.pack("=QQ", n, n * 10) for n in (5, 6, 7))
    r = decode(request(abi.FUSE_BATCH_FORGET, body, nodeid=0))
    assert isinstance(r, rq.BatchForget)
    assert r.forgets == [(5, 50), (6, 60), (7, 70)]
    with pytest.raises(rq.MalformedRequest) as e:  # says 3, carries 2
        decode(request(abi.FUSE_BATCH_FORGET, body[:-16]))
    assert e.value.unique == UNIQUE


def test_getattr_setattr() -> None:
    r = decode(request(abi.FUSE_GETATTR, struct.pack("=IIQ", abi.FUSE_GETATTR_FH, 0, 99)))
    assert isinstance(r, rq.Getattr) and (r.getattr_flags, r.fh) == (abi.FUSE_GETATTR_FH, 99)
    valid = abi.FATTR_MODE | abi.FATTR_SIZE | abi.FATTR_ATIME | abi.FATTR_ATIME_NOW | abi.FATTR_KILL_SUIDGID
    body = struct.pack(
        "=IIQQQqqqIIIIIIII", valid, 0, 5, 1 << 33, 77, -3, 2_000_000_000, 3, 1, 2, 3, 0o4755, 0, 65534, 65533, 0
    )
    r = decode(request(abi.FUSE_SETATTR, body))
    assert isinstance(r, rq.Setattr)
    assert (r.valid, r.fh, r.size, r.lock_owner) == (valid, 5, 1 << 33, 77)
    assert (r.atime, r.mtime, r.ctime, r.atimensec, r.mtimensec, r.ctimensec) == (-3, 2_000_000_000, 3, 1, 2, 3)
    assert (r.mode, r.attr_uid, r.attr_gid) == (0o4755, 65534, 65533)
    assert (r.uid, r.gid) == (UID, GID)  # the caller, not the new owner


def test_symlink_name_then_target() -> None:
    r = decode(request(abi.FUSE_SYMLINK, b"link\0../some/where\0"))
    assert isinstance(r, rq.Symlink) and (r.name, r.target) == (b"link", b"../some/where")


def test_mknod_mkdir_create_carry_mode_and_umask() -> None:
    r = decode(request(abi.FUSE_MKNOD, struct.pack("=IIII", 0o10644, 0x0801, 0o022, 0) + b"fifo\0"))
    assert isinstance(r, rq.Mknod) and (r.name, r.mode, r.rdev, r.umask) == (b"fifo", 0o10644, 0x0801, 0o022)
    r = decode(request(abi.FUSE_MKDIR, struct.pack("=II", 0o755, 0o027) + b"d\0"))
    assert isinstance(r, rq.Mkdir) and (r.name, r.mode, r.umask) == (b"d", 0o755, 0o027)
    flags = os.O_WRONLY | os.O_TRUNC
    r = decode(request(abi.FUSE_CREATE, struct.pack("=IIII", flags, 0o100600, 0o077, 1) + b"new\0"))
    assert isinstance(r, rq.Create)
    assert (r.name, r.flags, r.mode, r.umask, r.open_flags) == (b"new", flags, 0o100600, 0o077, 1)


def test_rename_and_rename2() -> None:
    r = decode(request(abi.FUSE_RENAME, struct.pack("=Q", 9) + b"a\0b\0"))
    assert isinstance(r, rq.Rename) and (r.name, r.newdir, r.newname, r.flags) == (b"a", 9, b"b", 0)
    r = decode(request(abi.FUSE_RENAME2, struct.pack("=QII", 9, 1, 0) + b"a\0b\0"))
    assert isinstance(r, rq.Rename) and (r.name, r.newdir, r.newname, r.flags) == (b"a", 9, b"b", 1)


def test_link() -> None:
    r = decode(request(abi.FUSE_LINK, struct.pack("=Q", 11) + b"hard\0"))
    assert isinstance(r, rq.Link) and (r.oldnodeid, r.name, r.nodeid) == (11, b"hard", NODE)


def test_open_opendir() -> None:
    for op in (abi.FUSE_OPEN, abi.FUSE_OPENDIR):
        r = decode(request(op, struct.pack("=II", os.O_RDWR | os.O_TRUNC, abi.FUSE_OPEN_KILL_SUIDGID)))
        assert isinstance(r, rq.Open)
        check_header(r, op)
        assert (r.flags, r.open_flags) == (os.O_RDWR | os.O_TRUNC, abi.FUSE_OPEN_KILL_SUIDGID)


def test_read_readdir_readdirplus() -> None:
    for op in (abi.FUSE_READ, abi.FUSE_READDIR, abi.FUSE_READDIRPLUS):
        r = decode(request(op, struct.pack("=QQIIQII", 3, 1 << 40, 131072, 2, 55, os.O_RDONLY, 0)))
        assert isinstance(r, rq.Read)
        assert (r.fh, r.offset, r.size, r.read_flags, r.lock_owner, r.flags) == (3, 1 << 40, 131072, 2, 55, 0)


def test_write_data_is_a_view_into_the_buffer_read() -> None:
    payload = os.urandom(5000)
    buf = request(abi.FUSE_WRITE, struct.pack("=QQIIQII", 3, 4096, len(payload), 4, 0, 0, 0) + payload)
    r = decode(buf)
    assert isinstance(r, rq.Write) and (r.fh, r.offset, r.size, r.write_flags) == (3, 4096, 5000, 4)
    assert isinstance(r.data, memoryview) and r.data.obj is buf and bytes(r.data) == payload
    buf[80] ^= 0xFF  # the same memory: no copy was made
    assert r.data[0] == payload[0] ^ 0xFF
    with pytest.raises(BufferError):  # the view holds the buffer (it cannot be resized under it)
        buf.extend(b"x")
    r.data.release()
    buf.extend(b"x")


def test_write_longer_than_its_bytes_is_malformed() -> None:
    buf = request(abi.FUSE_WRITE, struct.pack("=QQIIQII", 3, 0, 100, 0, 0, 0, 0) + bytes(99))
    with pytest.raises(rq.MalformedRequest, match="the data written"):
        decode(buf)


def test_release_flush_fsync() -> None:
    for op in (abi.FUSE_RELEASE, abi.FUSE_RELEASEDIR):
        r = decode(request(op, struct.pack("=QIIQ", 8, os.O_RDWR, abi.FUSE_RELEASE_FLOCK_UNLOCK, 0xABC)))
        assert isinstance(r, rq.Release)
        assert (r.fh, r.flags, r.release_flags, r.lock_owner) == (8, os.O_RDWR, abi.FUSE_RELEASE_FLOCK_UNLOCK, 0xABC)
    r = decode(request(abi.FUSE_FLUSH, struct.pack("=QIIQ", 8, 0, 0, 0xDEF)))
    assert isinstance(r, rq.Flush) and (r.fh, r.lock_owner) == (8, 0xDEF)
    for op in (abi.FUSE_FSYNC, abi.FUSE_FSYNCDIR):
        r = decode(request(op, struct.pack("=QII", 8, abi.FUSE_FSYNC_FDATASYNC, 0)))
        assert isinstance(r, rq.Fsync) and (r.fh, r.fsync_flags) == (8, abi.FUSE_FSYNC_FDATASYNC)


def test_xattr_requests() -> None:
    r = decode(request(abi.FUSE_SETXATTR, struct.pack("=II", 5, 1) + b"user.k\0value"))
    assert isinstance(r, rq.Setxattr) and (r.name, r.value, r.flags) == (b"user.k", b"value", 1)
    ext = rq.Options(setxattr_ext=True)
    r = decode(request(abi.FUSE_SETXATTR, struct.pack("=IIII", 5, 2, 1, 0) + b"user.k\0value"), options=ext)
    assert isinstance(r, rq.Setxattr) and (r.name, r.value, r.flags, r.setxattr_flags) == (b"user.k", b"value", 2, 1)
    with pytest.raises(rq.MalformedRequest):
        decode(request(abi.FUSE_SETXATTR, struct.pack("=II", 50, 1) + b"user.k\0value"))
    r = decode(request(abi.FUSE_GETXATTR, struct.pack("=II", 0, 0) + b"user.k\0"))
    assert isinstance(r, rq.Getxattr) and (r.name, r.size) == (b"user.k", 0)
    r = decode(request(abi.FUSE_LISTXATTR, struct.pack("=II", 4096, 0)))
    assert isinstance(r, rq.Getxattr) and (r.name, r.size) == (b"", 4096)


def test_locks() -> None:
    for op in (abi.FUSE_GETLK, abi.FUSE_SETLK, abi.FUSE_SETLKW):
        body = struct.pack("=QQQQIIII", 4, 0xFEED, 10, (1 << 63) - 1, 1, 777, abi.FUSE_LK_FLOCK, 0)
        r = decode(request(op, body))
        assert isinstance(r, rq.Lk)
        check_header(r, op)
        assert (r.fh, r.owner, r.start, r.end, r.type, r.lk_pid, r.lk_flags) == (
            4, 0xFEED, 10, (1 << 63) - 1, 1, 777, abi.FUSE_LK_FLOCK,
        )


def test_access_interrupt_fallocate_lseek_copy_file_range() -> None:
    r = decode(request(abi.FUSE_ACCESS, struct.pack("=II", os.W_OK, 0)))
    assert isinstance(r, rq.Access) and r.mask == os.W_OK
    r = decode(request(abi.FUSE_INTERRUPT, struct.pack("=Q", 1234), unique=1235))
    assert isinstance(r, rq.Interrupt) and (r.unique, r.target) == (1235, 1234)
    r = decode(request(abi.FUSE_FALLOCATE, struct.pack("=QQQII", 2, 100, 200, 3, 0)))
    assert isinstance(r, rq.Fallocate) and (r.fh, r.offset, r.length, r.mode) == (2, 100, 200, 3)
    r = decode(request(abi.FUSE_LSEEK, struct.pack("=QQII", 2, 100, os.SEEK_DATA, 0)))
    assert isinstance(r, rq.Lseek) and (r.fh, r.offset, r.whence) == (2, 100, os.SEEK_DATA)
    for op in (abi.FUSE_COPY_FILE_RANGE, abi.FUSE_COPY_FILE_RANGE_64):
        r = decode(request(op, struct.pack("=QQQQQQQ", 1, 2, 3, 4, 5, 6, 7)))
        assert isinstance(r, rq.CopyFileRange)
        assert (r.fh_in, r.off_in, r.nodeid_out, r.fh_out, r.off_out, r.length, r.flags) == (1, 2, 3, 4, 5, 6, 7)


def test_requests_without_arguments() -> None:
    for op in (abi.FUSE_READLINK, abi.FUSE_STATFS, abi.FUSE_DESTROY):
        r = decode(request(op, b""))
        assert type(r) is rq.Request
        check_header(r, op)


def test_unknown_opcodes_decode_to_a_plain_request() -> None:
    for op in (abi.FUSE_IOCTL, abi.FUSE_POLL, abi.FUSE_BMAP, abi.FUSE_STATX, abi.FUSE_TMPFILE, 999, 4096):
        r = decode(request(op, b"whatever"))
        assert type(r) is rq.Request and r.opcode == op and r.unique == UNIQUE


def test_extensions_after_the_arguments_are_left_out() -> None:
    # 7.38+: total_extlen counts 8-byte units at the end (a security context, groups); the name ends before
    r = decode(request(abi.FUSE_MKDIR, struct.pack("=II", 0o755, 0) + b"dir\0" + bytes(4) + bytes(16), extlen=2))
    assert isinstance(r, rq.Mkdir) and r.name == b"dir"


@pytest.mark.parametrize(
    "buf, unique",
    [
        (bytearray(b""), None),
        (bytearray(b"\x28\0\0\0\x01\0\0\0"), None),  # half a header
        (request(abi.FUSE_LOOKUP, b"no-nul"), UNIQUE),
        (request(abi.FUSE_GETATTR, b"\0" * 8), UNIQUE),  # fuse_getattr_in is 16 bytes
        (request(abi.FUSE_RENAME, struct.pack("=Q", 1) + b"only-one\0"), UNIQUE),
        (request(abi.FUSE_SETATTR, b""), UNIQUE),
        (request(abi.FUSE_MKDIR, struct.pack("=II", 0, 0) + b"x\0", extlen=100), UNIQUE),
    ],
)
def test_malformed_requests_are_refused_with_their_unique(buf: bytearray, unique: int | None) -> None:
    with pytest.raises(rq.MalformedRequest) as e:
        decode(buf)
    assert e.value.unique == unique


def test_a_header_that_lies_about_the_length() -> None:
    buf = request(abi.FUSE_LOOKUP, b"name\0")
    with pytest.raises(rq.MalformedRequest, match="header says"):
        rq.decode(buf, len(buf) - 1)
    struct.pack_into("=I", buf, 0, 4000)
    with pytest.raises(rq.MalformedRequest, match="header says") as e:
        decode(buf)
    assert e.value.unique == UNIQUE and e.value.opcode == abi.FUSE_LOOKUP


@given(st.binary(max_size=300))
def test_garbage_never_crashes(data: bytes) -> None:
    try:
        rq.decode(bytearray(data), len(data))
    except rq.MalformedRequest:
        pass


@given(st.sampled_from(sorted(n for n, o in rq.OPCODES.items() if o.decoder)), st.binary(max_size=200))
def test_garbage_arguments_of_every_opcode(opcode: int, body: bytes) -> None:
    try:
        r = decode(request(opcode, body))
    except rq.MalformedRequest as e:
        assert e.unique == UNIQUE and e.opcode == opcode
    else:
        assert r.opcode == opcode
