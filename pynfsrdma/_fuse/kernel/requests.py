"""FUSE requests decoded from the bytes read from /dev/fuse, one typed object per request.

This module also holds the protocol's table (:data:`OPCODES`, one record per opcode, as go-fuse's
``opcode.go`` keeps it): each opcode's name, the decoder of its arguments, whether it is answered,
and the operation it asks for. :func:`decode` reads the ``fuse_in_header`` and hands the arguments
to the opcode's decoder. Names and xattr values are ``bytes`` (small copies); a WRITE's data is a
``memoryview`` into the buffer read, which holds a buffer export of its own for as long as it lives
(whoever keeps it keeps the buffer). An opcode without a decoder gives a plain :class:`Request`, to
be answered ENOSYS. Bytes that are not a well-formed request raise :class:`MalformedRequest`, with
the request's unique id when the header was whole (so that the request can still be answered).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass

from . import abi

Buffer = bytes | bytearray | mmap.mmap


class MalformedRequest(ValueError):
    """The bytes read are not a well-formed request; ``unique`` and ``opcode`` are None when even
    the header was not whole."""

    def __init__(self, reason: str, unique: int | None = None, opcode: int | None = None) -> None:
        name = name_of(opcode) if opcode is not None else "?"
        super().__init__(f"malformed FUSE request {name} (unique {unique}): {reason}")
        self.unique = unique
        self.opcode = opcode


@dataclass(slots=True)
class Request:
    """``fuse_in_header``: the request's unique id, what it is, the node it is about (0 when none)
    and who asked. A request of this plain type is one this client does not handle."""

    unique: int
    opcode: int
    nodeid: int
    uid: int
    gid: int
    pid: int

    @property
    def name_of_opcode(self) -> str:
        return name_of(self.opcode)


@dataclass(slots=True)
class Named(Request):
    """LOOKUP, UNLINK, RMDIR, REMOVEXATTR: one name."""

    name: bytes


@dataclass(slots=True)
class Forget(Request):
    nlookup: int


@dataclass(slots=True)
class BatchForget(Request):
    forgets: list[tuple[int, int]]  # (nodeid, nlookup)


@dataclass(slots=True)
class Getattr(Request):
    getattr_flags: int
    fh: int


@dataclass(slots=True)
class Setattr(Request):
    valid: int  # FATTR_* bits
    fh: int
    size: int
    lock_owner: int
    atime: int
    mtime: int
    ctime: int
    atimensec: int
    mtimensec: int
    ctimensec: int
    mode: int
    attr_uid: int
    attr_gid: int


@dataclass(slots=True)
class Symlink(Request):
    name: bytes
    target: bytes


@dataclass(slots=True)
class Mknod(Request):
    name: bytes
    mode: int
    rdev: int
    umask: int


@dataclass(slots=True)
class Mkdir(Request):
    name: bytes
    mode: int
    umask: int


@dataclass(slots=True)
class Rename(Request):
    """RENAME and RENAME2 (``flags`` 0 for RENAME)."""

    name: bytes
    newdir: int
    newname: bytes
    flags: int


@dataclass(slots=True)
class Link(Request):
    oldnodeid: int
    name: bytes


@dataclass(slots=True)
class Open(Request):
    """OPEN and OPENDIR."""

    flags: int
    open_flags: int


@dataclass(slots=True)
class Create(Request):
    name: bytes
    flags: int
    mode: int
    umask: int
    open_flags: int


@dataclass(slots=True)
class Read(Request):
    """READ, READDIR and READDIRPLUS."""

    fh: int
    offset: int
    size: int
    read_flags: int
    lock_owner: int
    flags: int


@dataclass(slots=True)
class Write(Request):
    fh: int
    offset: int
    size: int
    write_flags: int
    lock_owner: int
    flags: int
    data: memoryview  # ``size`` bytes, a view into the buffer read


@dataclass(slots=True)
class Release(Request):
    """RELEASE and RELEASEDIR."""

    fh: int
    flags: int
    release_flags: int
    lock_owner: int


@dataclass(slots=True)
class Flush(Request):
    fh: int
    lock_owner: int


@dataclass(slots=True)
class Fsync(Request):
    """FSYNC and FSYNCDIR."""

    fh: int
    fsync_flags: int


@dataclass(slots=True)
class Setxattr(Request):
    name: bytes
    value: bytes
    flags: int
    setxattr_flags: int


@dataclass(slots=True)
class Getxattr(Request):
    """GETXATTR (a name) and LISTXATTR (``name`` empty); ``size`` 0 asks only for the size."""

    name: bytes
    size: int


@dataclass(slots=True)
class Init(Request):
    major: int
    minor: int
    max_readahead: int
    flags: int  # with flags2 in bits 32..63 when FUSE_INIT_EXT is set


@dataclass(slots=True)
class Lk(Request):
    """GETLK, SETLK and SETLKW."""

    fh: int
    owner: int
    start: int
    end: int
    type: int
    lk_pid: int
    lk_flags: int


@dataclass(slots=True)
class Access(Request):
    mask: int


@dataclass(slots=True)
class Interrupt(Request):
    target: int  # the unique id of the request to interrupt


@dataclass(slots=True)
class Fallocate(Request):
    fh: int
    offset: int
    length: int
    mode: int


@dataclass(slots=True)
class Lseek(Request):
    fh: int
    offset: int
    whence: int


@dataclass(slots=True)
class CopyFileRange(Request):
    """COPY_FILE_RANGE and COPY_FILE_RANGE_64 (which differ only in their reply)."""

    fh_in: int
    off_in: int
    nodeid_out: int
    fh_out: int
    off_out: int
    length: int
    flags: int


# -- decoding -------------------------------------------------------------------------------------------
Header = tuple[int, int, int, int, int, int]  # unique, opcode, nodeid, uid, gid, pid
Decoder = Callable[[Header, Buffer, memoryview, int, int], Request]


@dataclass(slots=True)
class Options:
    """What decoding depends on besides the bytes: the arguments' sizes negotiated at INIT."""

    setxattr_ext: bool = False  # FUSE_SETXATTR_EXT: fuse_setxattr_in is 16 bytes, not 8


def decode(
    buf: Buffer, length: int, view: memoryview | None = None, options: Options | None = None, offset: int = 0
) -> Request:
    """The request in ``buf[offset:offset + length]`` (``view``: a memoryview of all of ``buf``, for
    speed). Raises :class:`MalformedRequest`."""
    if length < abi.IN_HEADER.size:
        raise MalformedRequest(f"{length} bytes, shorter than fuse_in_header")
    total, opcode, unique, nodeid, uid, gid, pid, extlen, _ = abi.IN_HEADER.unpack_from(buf, offset)
    if total != length:
        raise MalformedRequest(f"header says {total} bytes, {length} read", unique, opcode)
    end = offset + length - extlen * 8  # request extensions (none asked for) follow the arguments
    if end < offset + abi.IN_HEADER.size:
        raise MalformedRequest(f"extensions of {extlen * 8} bytes do not fit", unique, opcode)
    h: Header = (unique, opcode, nodeid, uid, gid, pid)
    op = OPCODES.get(opcode)
    decoder = op.decoder if op is not None else None
    if decoder is None:
        return Request(*h)
    if view is None:
        view = memoryview(buf)
    if opcode == abi.FUSE_SETXATTR and options is not None and options.setxattr_ext:
        decoder = _setxattr_ext
    return decoder(h, buf, view, offset + abi.IN_HEADER.size, end)


def _need(h: Header, start: int, end: int, size: int, what: str) -> None:
    if end - start < size:
        raise MalformedRequest(f"{what} needs {size} bytes, {end - start} there", h[0], h[1])


def _name(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> tuple[bytes, int]:
    """The NUL-terminated name at ``start`` and the offset after its NUL."""
    nul = buf.find(b"\0", start, end)
    if nul < 0:
        raise MalformedRequest("a name without its terminating NUL", h[0], h[1])
    return bytes(view[start:nul]), nul + 1


def _no_args(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    return Request(*h)


def _named(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    name, _ = _name(h, buf, view, start, end)
    return Named(*h, name)


def _forget(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.FORGET_IN.size, "fuse_forget_in")
    return Forget(*h, abi.FORGET_IN.unpack_from(buf, start)[0])


def _batch_forget(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.BATCH_FORGET_IN.size, "fuse_batch_forget_in")
    count, _ = abi.BATCH_FORGET_IN.unpack_from(buf, start)
    start += abi.BATCH_FORGET_IN.size
    _need(h, start, end, count * abi.FORGET_ONE.size, f"{count} fuse_forget_one")
    one = abi.FORGET_ONE
    forgets = [one.unpack_from(buf, start + i * one.size) for i in range(count)]
    return BatchForget(*h, forgets)


def _getattr(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    if end - start < abi.GETATTR_IN.size:  # (_need written out: the commonest request)
        _need(h, start, end, abi.GETATTR_IN.size, "fuse_getattr_in")
    flags, _, fh = abi.GETATTR_IN.unpack_from(buf, start)
    return Getattr(*h, flags, fh)


def _setattr(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.SETATTR_IN.size, "fuse_setattr_in")
    (valid, _, fh, size, owner, atime, mtime, ctime, atimensec, mtimensec, ctimensec, mode, _, uid, gid,
     _) = abi.SETATTR_IN.unpack_from(buf, start)
    return Setattr(*h, valid, fh, size, owner, atime, mtime, ctime, atimensec, mtimensec, ctimensec, mode,
                   uid, gid)


def _symlink(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    name, pos = _name(h, buf, view, start, end)
    target, _ = _name(h, buf, view, pos, end)
    return Symlink(*h, name, target)


def _mknod(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.MKNOD_IN.size, "fuse_mknod_in")
    mode, rdev, umask, _ = abi.MKNOD_IN.unpack_from(buf, start)
    name, _ = _name(h, buf, view, start + abi.MKNOD_IN.size, end)
    return Mknod(*h, name, mode, rdev, umask)


def _mkdir(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.MKDIR_IN.size, "fuse_mkdir_in")
    mode, umask = abi.MKDIR_IN.unpack_from(buf, start)
    name, _ = _name(h, buf, view, start + abi.MKDIR_IN.size, end)
    return Mkdir(*h, name, mode, umask)


def _rename(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.RENAME_IN.size, "fuse_rename_in")
    (newdir,) = abi.RENAME_IN.unpack_from(buf, start)
    name, pos = _name(h, buf, view, start + abi.RENAME_IN.size, end)
    newname, _ = _name(h, buf, view, pos, end)
    return Rename(*h, name, newdir, newname, 0)


def _rename2(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.RENAME2_IN.size, "fuse_rename2_in")
    newdir, flags, _ = abi.RENAME2_IN.unpack_from(buf, start)
    name, pos = _name(h, buf, view, start + abi.RENAME2_IN.size, end)
    newname, _ = _name(h, buf, view, pos, end)
    return Rename(*h, name, newdir, newname, flags)


def _link(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.LINK_IN.size, "fuse_link_in")
    (old,) = abi.LINK_IN.unpack_from(buf, start)
    name, _ = _name(h, buf, view, start + abi.LINK_IN.size, end)
    return Link(*h, old, name)


def _open(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.OPEN_IN.size, "fuse_open_in")
    return Open(*h, *abi.OPEN_IN.unpack_from(buf, start))


def _create(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.CREATE_IN.size, "fuse_create_in")
    flags, mode, umask, open_flags = abi.CREATE_IN.unpack_from(buf, start)
    name, _ = _name(h, buf, view, start + abi.CREATE_IN.size, end)
    return Create(*h, name, flags, mode, umask, open_flags)


def _read(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.READ_IN.size, "fuse_read_in")
    fh, offset, size, read_flags, owner, flags, _ = abi.READ_IN.unpack_from(buf, start)
    return Read(*h, fh, offset, size, read_flags, owner, flags)


def _write(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.WRITE_IN.size, "fuse_write_in")
    fh, offset, size, write_flags, owner, flags, _ = abi.WRITE_IN.unpack_from(buf, start)
    start += abi.WRITE_IN.size
    _need(h, start, end, size, "the data written")
    # a view of its own (not a slice of ``view``): it exports ``buf`` for as long as anyone keeps it
    data = memoryview(buf)[start : start + size]
    return Write(*h, fh, offset, size, write_flags, owner, flags, data)


def _release(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.RELEASE_IN.size, "fuse_release_in")
    return Release(*h, *abi.RELEASE_IN.unpack_from(buf, start))


def _flush(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.FLUSH_IN.size, "fuse_flush_in")
    fh, _, _, owner = abi.FLUSH_IN.unpack_from(buf, start)
    return Flush(*h, fh, owner)


def _fsync(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.FSYNC_IN.size, "fuse_fsync_in")
    fh, flags, _ = abi.FSYNC_IN.unpack_from(buf, start)
    return Fsync(*h, fh, flags)


def _setxattr_with(layout: Callable[[Buffer, int], tuple[int, int, int]], size: int) -> Decoder:
    def decode_setxattr(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
        _need(h, start, end, size, "fuse_setxattr_in")
        value_size, flags, setxattr_flags = layout(buf, start)
        name, pos = _name(h, buf, view, start + size, end)
        _need(h, pos, end, value_size, "the xattr value")
        return Setxattr(*h, name, bytes(view[pos : pos + value_size]), flags, setxattr_flags)

    return decode_setxattr


_setxattr = _setxattr_with(lambda buf, at: (*abi.SETXATTR_IN.unpack_from(buf, at), 0), abi.SETXATTR_IN.size)
_setxattr_ext = _setxattr_with(lambda buf, at: abi.SETXATTR_IN_EXT.unpack_from(buf, at)[:3], abi.SETXATTR_IN_EXT.size)


def _getxattr(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.GETXATTR_IN.size, "fuse_getxattr_in")
    size, _ = abi.GETXATTR_IN.unpack_from(buf, start)
    name, _ = _name(h, buf, view, start + abi.GETXATTR_IN.size, end)
    return Getxattr(*h, name, size)


def _listxattr(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.GETXATTR_IN.size, "fuse_getxattr_in")
    size, _ = abi.GETXATTR_IN.unpack_from(buf, start)
    return Getxattr(*h, b"", size)


def _init(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.INIT_IN.size, "fuse_init_in")
    major, minor, readahead, flags = abi.INIT_IN.unpack_from(buf, start)
    ext = start + abi.INIT_IN.size
    if flags & abi.FUSE_INIT_EXT and end - ext >= abi.INIT_IN_EXT.size:
        flags |= abi.INIT_IN_EXT.unpack_from(buf, ext)[0] << 32
    return Init(*h, major, minor, readahead, flags)


def _lk(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.LK_IN.size, "fuse_lk_in")
    fh, owner, lk_start, lk_end, lk_type, lk_pid, lk_flags, _ = abi.LK_IN.unpack_from(buf, start)
    return Lk(*h, fh, owner, lk_start, lk_end, lk_type, lk_pid, lk_flags)


def _access(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.ACCESS_IN.size, "fuse_access_in")
    return Access(*h, abi.ACCESS_IN.unpack_from(buf, start)[0])


def _interrupt(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.INTERRUPT_IN.size, "fuse_interrupt_in")
    return Interrupt(*h, abi.INTERRUPT_IN.unpack_from(buf, start)[0])


def _fallocate(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.FALLOCATE_IN.size, "fuse_fallocate_in")
    fh, offset, length, mode, _ = abi.FALLOCATE_IN.unpack_from(buf, start)
    return Fallocate(*h, fh, offset, length, mode)


def _lseek(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.LSEEK_IN.size, "fuse_lseek_in")
    fh, offset, whence, _ = abi.LSEEK_IN.unpack_from(buf, start)
    return Lseek(*h, fh, offset, whence)


def _copy_file_range(h: Header, buf: Buffer, view: memoryview, start: int, end: int) -> Request:
    _need(h, start, end, abi.COPY_FILE_RANGE_IN.size, "fuse_copy_file_range_in")
    return CopyFileRange(*h, *abi.COPY_FILE_RANGE_IN.unpack_from(buf, start))


@dataclass(frozen=True, slots=True)
class Opcode:
    """One opcode of the protocol: its number and name (``enum fuse_opcode``), the decoder of its
    arguments (None: not handled, answered ENOSYS), whether the kernel waits for a reply, and the
    file system operation it asks for: the :class:`~pynfsrdma._fuse.lowlevel.Operations` method, and
    the channel's handler, of that name (None: the channel answers it itself)."""

    number: int
    name: str
    decoder: Decoder | None = None
    operation: str | None = None
    answered: bool = True


# every opcode of abi, one record each (as go-fuse's opcode.go keeps them)
OPCODES: dict[int, Opcode] = {o.number: o for o in (
    Opcode(abi.FUSE_LOOKUP, "LOOKUP", _named, "lookup"),
    Opcode(abi.FUSE_FORGET, "FORGET", _forget, answered=False),
    Opcode(abi.FUSE_GETATTR, "GETATTR", _getattr, "getattr"),
    Opcode(abi.FUSE_SETATTR, "SETATTR", _setattr, "setattr"),
    Opcode(abi.FUSE_READLINK, "READLINK", _no_args, "readlink"),
    Opcode(abi.FUSE_SYMLINK, "SYMLINK", _symlink, "symlink"),
    Opcode(abi.FUSE_MKNOD, "MKNOD", _mknod, "mknod"),
    Opcode(abi.FUSE_MKDIR, "MKDIR", _mkdir, "mkdir"),
    Opcode(abi.FUSE_UNLINK, "UNLINK", _named, "unlink"),
    Opcode(abi.FUSE_RMDIR, "RMDIR", _named, "rmdir"),
    Opcode(abi.FUSE_RENAME, "RENAME", _rename, "rename"),
    Opcode(abi.FUSE_LINK, "LINK", _link, "link"),
    Opcode(abi.FUSE_OPEN, "OPEN", _open, "open"),
    Opcode(abi.FUSE_READ, "READ", _read, "read"),
    Opcode(abi.FUSE_WRITE, "WRITE", _write, "write"),
    Opcode(abi.FUSE_STATFS, "STATFS", _no_args, "statfs"),
    Opcode(abi.FUSE_RELEASE, "RELEASE", _release, "release"),
    Opcode(abi.FUSE_FSYNC, "FSYNC", _fsync, "fsync"),
    Opcode(abi.FUSE_SETXATTR, "SETXATTR", _setxattr, "setxattr"),
    Opcode(abi.FUSE_GETXATTR, "GETXATTR", _getxattr, "getxattr"),
    Opcode(abi.FUSE_LISTXATTR, "LISTXATTR", _listxattr, "listxattr"),
    Opcode(abi.FUSE_REMOVEXATTR, "REMOVEXATTR", _named, "removexattr"),
    Opcode(abi.FUSE_FLUSH, "FLUSH", _flush, "flush"),
    Opcode(abi.FUSE_INIT, "INIT", _init),
    Opcode(abi.FUSE_OPENDIR, "OPENDIR", _open, "opendir"),
    Opcode(abi.FUSE_READDIR, "READDIR", _read, "readdir"),
    Opcode(abi.FUSE_RELEASEDIR, "RELEASEDIR", _release, "releasedir"),
    Opcode(abi.FUSE_FSYNCDIR, "FSYNCDIR", _fsync, "fsyncdir"),
    Opcode(abi.FUSE_GETLK, "GETLK", _lk, "getlk"),
    Opcode(abi.FUSE_SETLK, "SETLK", _lk, "setlk"),
    Opcode(abi.FUSE_SETLKW, "SETLKW", _lk, "setlk"),
    Opcode(abi.FUSE_ACCESS, "ACCESS", _access, "access"),
    Opcode(abi.FUSE_CREATE, "CREATE", _create, "create"),
    Opcode(abi.FUSE_INTERRUPT, "INTERRUPT", _interrupt, answered=False),
    Opcode(abi.FUSE_BMAP, "BMAP"),
    Opcode(abi.FUSE_DESTROY, "DESTROY", _no_args),
    Opcode(abi.FUSE_IOCTL, "IOCTL"),
    Opcode(abi.FUSE_POLL, "POLL"),
    Opcode(abi.FUSE_NOTIFY_REPLY, "NOTIFY_REPLY"),
    Opcode(abi.FUSE_BATCH_FORGET, "BATCH_FORGET", _batch_forget, answered=False),
    Opcode(abi.FUSE_FALLOCATE, "FALLOCATE", _fallocate, "fallocate"),
    Opcode(abi.FUSE_READDIRPLUS, "READDIRPLUS", _read, "readdir"),
    Opcode(abi.FUSE_RENAME2, "RENAME2", _rename2, "rename"),
    Opcode(abi.FUSE_LSEEK, "LSEEK", _lseek, "lseek"),
    Opcode(abi.FUSE_COPY_FILE_RANGE, "COPY_FILE_RANGE", _copy_file_range, "copy_file_range"),
    Opcode(abi.FUSE_SETUPMAPPING, "SETUPMAPPING"),
    Opcode(abi.FUSE_REMOVEMAPPING, "REMOVEMAPPING"),
    Opcode(abi.FUSE_SYNCFS, "SYNCFS"),
    Opcode(abi.FUSE_TMPFILE, "TMPFILE"),
    Opcode(abi.FUSE_STATX, "STATX"),
    Opcode(abi.FUSE_COPY_FILE_RANGE_64, "COPY_FILE_RANGE_64", _copy_file_range, "copy_file_range"),
)}


def name_of(opcode: int) -> str:
    """The opcode's name (its number when the table has none)."""
    o = OPCODES.get(opcode)
    return o.name if o is not None else str(opcode)


def answered(opcode: int) -> bool:
    """The kernel waits for a reply to a request of this opcode (one not in the table is answered:
    ENOSYS)."""
    o = OPCODES.get(opcode)
    return o is None or o.answered
