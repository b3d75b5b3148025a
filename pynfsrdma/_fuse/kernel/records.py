"""What the kernel is told about a node, an open file, a lock and the file system, as plain records
(``fuse_entry_out`` and ``fuse_attr``, ``fuse_open_out``, ``fuse_file_lock``, ``fuse_kstatfs``):
what the operations return and :mod:`.replies` encodes. :mod:`pynfsrdma._fuse.lowlevel` names them
as part of the interface every channel serves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class EntryAttributes:
    """A node's attributes and how long the kernel may keep them (fuse_entry_out, fuse_attr).
    ``st_ino`` 0 in a lookup's answer: the name does not exist, and the kernel may keep that for
    ``entry_timeout`` seconds."""

    st_ino: int = 0
    generation: int = 0
    entry_timeout: float = 0.0
    attr_timeout: float = 0.0
    st_mode: int = 0
    st_nlink: int = 0
    st_uid: int = 0
    st_gid: int = 0
    st_rdev: int = 0
    st_size: int = 0
    st_blksize: int = 0
    st_blocks: int = 0
    st_atime_ns: int = 0
    st_mtime_ns: int = 0
    st_ctime_ns: int = 0


# EntryAttributes' fields in their order, as a plain tuple (``EntryAttributes(*fields)`` makes the
# object): a listing hands the kernel thousands, and a LOOKUP of a name read ahead one, packed once
# and never read again
EntryFields = tuple[int, int, float, float, int, int, int, int, int, int, int, int, int, int, int]

# a lookup's answer for a name that does not exist, kept by the kernel for no time
NEGATIVE_ENTRY: EntryFields = (0, 0, 0.0, 0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


@dataclass(slots=True)
class FileInfo:
    """The answer to an open or create (fuse_open_out): the file handle and how the kernel treats
    the open file's data (``keep_cache``: its page cache of the file is still good)."""

    fh: int = 0
    keep_cache: bool = True
    direct_io: bool = False
    nonseekable: bool = False


@dataclass(slots=True)
class StatvfsData:
    f_bsize: int = 0
    f_frsize: int = 0
    f_blocks: int = 0
    f_bfree: int = 0
    f_bavail: int = 0
    f_files: int = 0
    f_ffree: int = 0
    f_favail: int = 0
    f_namemax: int = 0


@dataclass(slots=True)
class FileLock:
    """A POSIX byte-range lock (fuse_file_lock): ``start``..``end`` inclusive, ``end`` OFFSET_MAX
    for "to the end of the file"; ``type`` F_RDLCK, F_WRLCK or F_UNLCK; ``pid`` the holder's
    (0 when the holder is on another client)."""

    start: int
    end: int
    type: int
    pid: int = 0
