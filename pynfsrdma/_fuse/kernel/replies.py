"""Replies to FUSE requests: ``fuse_out_header`` and the reply's structure, as bytes to write to
/dev/fuse in one ``writev``.

A reply with a payload (READ data, a symlink's target, an xattr value) is a list of buffers: the header
then the payload as it was given (a view is written from where it lies, not copied). Every other reply
is one ``bytes``. Directory listings are built by :class:`DirentBuffer`.
"""

from __future__ import annotations

import stat
import struct
from collections.abc import Sequence
from typing import Any

from . import abi
from .records import EntryAttributes, EntryFields, FileInfo, FileLock, StatvfsData

_HEADER = abi.OUT_HEADER
_ENTRY = struct.Struct(_HEADER.format + abi.ENTRY_OUT.format[1:])
_ATTR = struct.Struct(_HEADER.format + abi.ATTR_OUT.format[1:])
_OPEN = struct.Struct(_HEADER.format + abi.OPEN_OUT.format[1:])
_CREATE = struct.Struct(_HEADER.format + abi.ENTRY_OUT.format[1:] + abi.OPEN_OUT.format[1:])
_WRITE = struct.Struct(_HEADER.format + abi.WRITE_OUT.format[1:])
_COPY64 = struct.Struct(_HEADER.format + abi.COPY_FILE_RANGE_OUT.format[1:])
_STATFS = struct.Struct(_HEADER.format + abi.STATFS_OUT.format[1:])
_XATTR_SIZE = struct.Struct(_HEADER.format + abi.GETXATTR_OUT.format[1:])
_LK = struct.Struct(_HEADER.format + abi.LK_OUT.format[1:])
_LSEEK = struct.Struct(_HEADER.format + abi.LSEEK_OUT.format[1:])

MAX_TIMEOUT = float(1 << 62)  # seconds: longer than anything (the kernel adds it to "now")
NS = 1_000_000_000
U32 = 0xFFFFFFFF


_TIMEOUTS: dict[float, tuple[int, int]] = {}  # the few whole-second timeouts a file system gives, converted once
_CAPPED = (int(MAX_TIMEOUT), 0)


def timeout(seconds: float) -> tuple[int, int]:
    """A cache timeout as the kernel's (seconds, nanoseconds); negative and NaN as 0, infinity capped.
    What is left of an attribute's time differs at every reply: it is converted, not remembered."""
    t = _TIMEOUTS.get(seconds)
    if t is not None:
        return t
    if not 0 < seconds < MAX_TIMEOUT:  # (NaN too)
        return _CAPPED if seconds >= MAX_TIMEOUT else (0, 0)
    whole = int(seconds)
    if whole == seconds:
        t = whole, 0
        if len(_TIMEOUTS) < 1024:
            _TIMEOUTS[seconds] = t
        return t
    ns = int((seconds - whole) * NS)
    return whole, ns if ns < NS else NS - 1


def attr_fields(a: EntryAttributes) -> tuple[int, ...]:
    """``fuse_attr`` of ``a``, field by field."""
    at, mt, ct = a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns
    return (
        a.st_ino,
        a.st_size,
        a.st_blocks,
        at // NS,
        mt // NS,
        ct // NS,
        at % NS,
        mt % NS,
        ct % NS,
        a.st_mode,
        a.st_nlink,
        a.st_uid,
        a.st_gid,
        a.st_rdev & U32,
        a.st_blksize,
        0,
    )


def _entry_fields(a: EntryAttributes) -> tuple[int, ...]:
    es, ens = timeout(a.entry_timeout)
    ats, atns = timeout(a.attr_timeout)
    return (a.st_ino, a.generation, es, ats, ens, atns, *attr_fields(a))


def _open_flags(fi: FileInfo) -> int:
    flags = 0
    if fi.keep_cache:
        flags |= abi.FOPEN_KEEP_CACHE
    if fi.direct_io:
        flags |= abi.FOPEN_DIRECT_IO
    if fi.nonseekable:
        flags |= abi.FOPEN_NONSEEKABLE
    return flags


def error(unique: int, errno: int) -> bytes:
    """The request failed with ``errno`` (positive, as in :mod:`errno`)."""
    return _HEADER.pack(_HEADER.size, -errno, unique)


def empty(unique: int) -> bytes:
    """Success with nothing more to say (UNLINK, RELEASE, FLUSH, SETXATTR ...)."""
    return _HEADER.pack(_HEADER.size, 0, unique)


def entry(unique: int, a: EntryAttributes) -> bytes:
    """``fuse_entry_out`` (LOOKUP, MKNOD, MKDIR, SYMLINK, LINK); ``st_ino`` 0 is a negative entry."""
    es, ens = timeout(a.entry_timeout)
    ats, atns = timeout(a.attr_timeout)
    at, mt, ct = a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns
    return _ENTRY.pack(
        _ENTRY.size, 0, unique,
        a.st_ino, a.generation, es, ats, ens, atns,
        a.st_ino, a.st_size, a.st_blocks, at // NS, mt // NS, ct // NS, at % NS, mt % NS, ct % NS,
        a.st_mode, a.st_nlink, a.st_uid, a.st_gid, a.st_rdev & U32, a.st_blksize, 0,
    )  # fmt: skip


def entry_of_fields(unique: int, fields: EntryFields) -> bytes:
    """:func:`entry` of the attributes as :data:`EntryFields` (a LOOKUP answered from a listing's
    record: no :class:`EntryAttributes` made for it)."""
    ino, generation, entry_timeout, attr_timeout, mode, nlink, uid, gid, rdev, size, blksize, blocks, at, mt, ct = fields
    es, ens = _TIMEOUTS.get(entry_timeout) or timeout(entry_timeout)
    ats, atns = timeout(attr_timeout)
    return _ENTRY.pack(
        _ENTRY.size, 0, unique,
        ino, generation, es, ats, ens, atns,
        ino, size, blocks, at // NS, mt // NS, ct // NS, at % NS, mt % NS, ct % NS,
        mode, nlink, uid, gid, rdev & U32, blksize, 0,
    )  # fmt: skip


def attr(unique: int, a: EntryAttributes) -> bytes:
    """``fuse_attr_out`` (GETATTR, SETATTR), valid for ``a.attr_timeout``."""
    ats, atns = timeout(a.attr_timeout)
    at, mt, ct = a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns
    return _ATTR.pack(
        _ATTR.size, 0, unique,
        ats, atns, 0,
        a.st_ino, a.st_size, a.st_blocks, at // NS, mt // NS, ct // NS, at % NS, mt % NS, ct % NS,
        a.st_mode, a.st_nlink, a.st_uid, a.st_gid, a.st_rdev & U32, a.st_blksize, 0,
    )  # fmt: skip


def attr_of_fields(unique: int, fields: EntryFields) -> bytes:
    """:func:`attr` of the attributes as :data:`EntryFields` (a GETATTR answered from the
    attribute cache: no :class:`EntryAttributes` made for it)."""
    ino, _, _, attr_timeout, mode, nlink, uid, gid, rdev, size, blksize, blocks, at, mt, ct = fields
    ats, atns = timeout(attr_timeout)
    return _ATTR.pack(
        _ATTR.size, 0, unique,
        ats, atns, 0,
        ino, size, blocks, at // NS, mt // NS, ct // NS, at % NS, mt % NS, ct % NS,
        mode, nlink, uid, gid, rdev & U32, blksize, 0,
    )  # fmt: skip


def open_file(unique: int, fi: FileInfo) -> bytes:
    """``fuse_open_out`` (OPEN)."""
    return _OPEN.pack(_OPEN.size, 0, unique, fi.fh, _open_flags(fi), 0)


def open_dir(unique: int, fh: int) -> bytes:
    """``fuse_open_out`` (OPENDIR)."""
    return _OPEN.pack(_OPEN.size, 0, unique, fh, 0, 0)


def create(unique: int, a: EntryAttributes, fi: FileInfo) -> bytes:
    """``fuse_entry_out`` then ``fuse_open_out`` (CREATE)."""
    return _CREATE.pack(_CREATE.size, 0, unique, *_entry_fields(a), fi.fh, _open_flags(fi), 0)


def write(unique: int, size: int) -> bytes:
    """``fuse_write_out`` (WRITE, COPY_FILE_RANGE)."""
    return _WRITE.pack(_WRITE.size, 0, unique, size, 0)


def copy_file_range_64(unique: int, size: int) -> bytes:
    """``fuse_copy_file_range_out`` (COPY_FILE_RANGE_64)."""
    return _COPY64.pack(_COPY64.size, 0, unique, size)


def statfs(unique: int, s: StatvfsData) -> bytes:
    """``fuse_statfs_out``."""
    return _STATFS.pack(
        _STATFS.size, 0, unique, s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree, s.f_bsize,
        s.f_namemax, s.f_frsize, 0,
    )


def xattr_size(unique: int, size: int) -> bytes:
    """``fuse_getxattr_out`` (GETXATTR, LISTXATTR asked with size 0)."""
    return _XATTR_SIZE.pack(_XATTR_SIZE.size, 0, unique, size, 0)


def lock(unique: int, lk: FileLock) -> bytes:
    """``fuse_lk_out`` (GETLK)."""
    return _LK.pack(_LK.size, 0, unique, lk.start, lk.end, lk.type, lk.pid)


def lseek(unique: int, offset: int) -> bytes:
    """``fuse_lseek_out``."""
    return _LSEEK.pack(_LSEEK.size, 0, unique, offset)


def data(unique: int, payload: Any) -> list[Any]:
    """The header and ``payload`` (a bytes-like object, written where it lies)."""
    n = len(payload) if not isinstance(payload, memoryview) else payload.nbytes
    if not n:
        return [empty(unique)]
    return [_HEADER.pack(_HEADER.size + n, 0, unique), payload]


def data_header(unique: int, n: int) -> bytes:
    """The header of a successful reply whose ``n`` bytes of data follow it separately (spliced)."""
    return _HEADER.pack(_HEADER.size + n, 0, unique)


def data_parts(unique: int, parts: Sequence[Any]) -> list[Any]:
    """The header and several bytes-like objects one after the other."""
    n = sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in parts)
    return [_HEADER.pack(_HEADER.size + n, 0, unique), *(p for p in parts if len(p))]


def read(unique: int, payload: Any, size: int) -> list[Any]:
    """A READ's reply: ``payload`` (a bytes-like object, of which no more than the ``size`` bytes
    asked for go, or a list of them), written where it lies."""
    if isinstance(payload, list | tuple):
        return data_parts(unique, payload)
    if len(payload) > size:
        payload = memoryview(payload)[:size]
    return data(unique, payload)


def payload_length(reply: Sequence[Any]) -> int:
    """How many bytes of data a reply of :func:`data`, :func:`data_parts` or :func:`read` carries."""
    return sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in reply[1:])


def dirent_type(mode: int) -> int:
    """``fuse_dirent.type``: the file type bits of ``mode`` as DT_*."""
    return stat.S_IFMT(mode) >> abi.DT_SHIFT


_PLUS: dict[int, struct.Struct] = {}  # fuse_direntplus and its name, by the name's length
_PLUS_PADDED = abi.DIRENTPLUS.size + abi.DIRENT_ALIGN - 1  # (an entry's size: that and its name's, aligned)
_PLAIN_PADDED = abi.DIRENT.size + abi.DIRENT_ALIGN - 1
_ALIGNED = ~(abi.DIRENT_ALIGN - 1)
_S_IFMT = stat.S_IFMT(U32)  # (the file type bits)
_DT_SHIFT = abi.DT_SHIFT
_PLAIN: dict[int, struct.Struct] = {}


def _with_name(layouts: dict[int, struct.Struct], fixed: struct.Struct, n: int) -> struct.Struct:
    s = layouts.get(n)
    if s is None:
        s = layouts[n] = struct.Struct(fixed.format + f"{n}s")
    return s


class DirentBuffer:
    """The entries of a READDIR (``fuse_dirent``) or READDIRPLUS (``fuse_direntplus``) reply, up to
    the size the kernel asked for; the :class:`~pynfsrdma._fuse.lowlevel.ReaddirToken` a readdir
    fills. Each entry is packed in place (with its name; the padding stays zero)."""

    __slots__ = ("_buf", "_plus", "_size", "_used", "count")

    def __init__(self, size: int, plus: bool) -> None:
        self._size = size
        self._plus = plus
        self._buf = bytearray(size)
        self._used = 0
        self.count = 0

    def add(self, name: bytes, attrs: EntryAttributes, next_id: int) -> bool:
        a = attrs
        return self.add_fields(
            name,
            (a.st_ino, a.generation, a.entry_timeout, a.attr_timeout, a.st_mode, a.st_nlink, a.st_uid, a.st_gid,
             a.st_rdev, a.st_size, a.st_blksize, a.st_blocks, a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns),
            next_id,
        )  # fmt: skip

    def add_fields(self, name: bytes, fields: EntryFields, next_id: int) -> bool:
        n = len(name)
        ino, gen, entry_timeout, attr_timeout, mode, nlink, uid, gid, rdev, size, blksize, blocks, at, mt, ct = fields
        if self._plus:
            end = self._used + ((_PLUS_PADDED + n) & _ALIGNED)
            if end > self._size:
                return False
            # (the lookups of timeout and _with_name written out: a listing packs one per name)
            es, ens = _TIMEOUTS.get(entry_timeout) or timeout(entry_timeout)
            ats, atns = _TIMEOUTS.get(attr_timeout) or timeout(attr_timeout)
            (_PLUS.get(n) or _with_name(_PLUS, abi.DIRENTPLUS, n)).pack_into(
                self._buf, self._used,
                ino, gen, es, ats, ens, atns,
                ino, size, blocks, at // NS, mt // NS, ct // NS, at % NS, mt % NS, ct % NS,
                mode, nlink, uid, gid, rdev & U32, blksize, 0,
                ino, next_id, n, (mode & _S_IFMT) >> _DT_SHIFT, name,
            )  # fmt: skip
        else:
            end = self._used + ((_PLAIN_PADDED + n) & _ALIGNED)
            if end > self._size:
                return False
            _with_name(_PLAIN, abi.DIRENT, n).pack_into(self._buf, self._used, ino, next_id, n, dirent_type(mode), name)
        self._used = end
        self.count += 1
        return True

    def reply(self, unique: int) -> list[Any]:
        return data(unique, memoryview(self._buf)[: self._used])
