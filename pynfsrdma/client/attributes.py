"""File attributes as a client uses them: decoded fattr4 values turned into stat-like fields.

Owners travel as strings ("0", "root@domain", "nobody"): :func:`owner_to_id` maps them to numbers
(numeric strings as they are, names through the local user database, anything else to nobody),
and we send numeric strings, which NFS-Ganesha and the Linux server accept.
"""

from __future__ import annotations

import grp
import pwd
import stat
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..proto.nfs4 import const as c
from ..proto.nfs4.attrs import bitmap4_from, decode_fattr4, encode_fattr4
from ..proto.nfs4.types import fattr4, nfstime4

NOBODY = 65534

# what every GETATTR of ours asks for (a stat's worth)
STAT_ATTRS = (
    c.FATTR4_TYPE,
    c.FATTR4_CHANGE,
    c.FATTR4_SIZE,
    c.FATTR4_FSID,
    c.FATTR4_FILEID,
    c.FATTR4_MODE,
    c.FATTR4_NUMLINKS,
    c.FATTR4_OWNER,
    c.FATTR4_OWNER_GROUP,
    c.FATTR4_RAWDEV,
    c.FATTR4_SPACE_USED,
    c.FATTR4_TIME_ACCESS,
    c.FATTR4_TIME_METADATA,
    c.FATTR4_TIME_MODIFY,
)
STAT_BITMAP = bitmap4_from(STAT_ATTRS)

STATFS_ATTRS = (
    c.FATTR4_FILES_AVAIL,
    c.FATTR4_FILES_FREE,
    c.FATTR4_FILES_TOTAL,
    c.FATTR4_SPACE_AVAIL,
    c.FATTR4_SPACE_FREE,
    c.FATTR4_SPACE_TOTAL,
    c.FATTR4_MAXNAME,
)
STATFS_BITMAP = bitmap4_from(STATFS_ATTRS)

FS_INFO_ATTRS = (c.FATTR4_MAXREAD, c.FATTR4_MAXWRITE, c.FATTR4_LEASE_TIME, c.FATTR4_SUPPORTED_ATTRS)
FS_INFO_BITMAP = bitmap4_from(FS_INFO_ATTRS)

_FTYPE_TO_IFMT: dict[int, int] = {
    c.NF4REG: stat.S_IFREG,
    c.NF4DIR: stat.S_IFDIR,
    c.NF4BLK: stat.S_IFBLK,
    c.NF4CHR: stat.S_IFCHR,
    c.NF4LNK: stat.S_IFLNK,
    c.NF4SOCK: stat.S_IFSOCK,
    c.NF4FIFO: stat.S_IFIFO,
    c.NF4ATTRDIR: stat.S_IFDIR,
    c.NF4NAMEDATTR: stat.S_IFREG,
}
IFMT_TO_FTYPE = {v: k for k, v in _FTYPE_TO_IFMT.items() if k not in (c.NF4ATTRDIR, c.NF4NAMEDATTR)}


@lru_cache(maxsize=4096)
def owner_to_id(owner: str, group: bool = False) -> int:
    if owner.isdigit():
        return int(owner)
    name = owner.split("@", 1)[0]
    try:
        return grp.getgrnam(name).gr_gid if group else pwd.getpwnam(name).pw_uid
    except KeyError:
        return NOBODY


def id_to_owner(ident: int) -> str:
    return str(ident)


def _ns(t: nfstime4 | None) -> int:
    return 0 if t is None else t.seconds * 1_000_000_000 + t.nseconds


@dataclass(slots=True)
class FileAttrs:
    """The attributes of one file, as ``os.stat_result``-like fields."""

    type: int = c.NF4REG
    mode: int = 0  # permission bits only (07777)
    nlink: int = 1
    uid: int = NOBODY
    gid: int = NOBODY
    size: int = 0
    used: int = 0
    rdev: tuple[int, int] = (0, 0)
    fsid: tuple[int, int] = (0, 0)
    fileid: int = 0
    change: int = 0
    atime_ns: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0

    @classmethod
    def from_fattr4(cls, f: fattr4) -> FileAttrs:
        return cls.from_dict(decode_fattr4(f))

    @classmethod
    def from_dict(cls, d: dict[int, Any]) -> FileAttrs:
        a = cls()
        v = d.get
        if (t := v(c.FATTR4_TYPE)) is not None:
            a.type = int(t)
        if (m := v(c.FATTR4_MODE)) is not None:
            a.mode = m & 0o7777
        if (n := v(c.FATTR4_NUMLINKS)) is not None:
            a.nlink = n
        if (o := v(c.FATTR4_OWNER)) is not None:
            a.uid = owner_to_id(o)
        if (g := v(c.FATTR4_OWNER_GROUP)) is not None:
            a.gid = owner_to_id(g, group=True)
        if (s := v(c.FATTR4_SIZE)) is not None:
            a.size = s
        if (u := v(c.FATTR4_SPACE_USED)) is not None:
            a.used = u
        if (r := v(c.FATTR4_RAWDEV)) is not None:
            a.rdev = (r.specdata1, r.specdata2)
        if (fs := v(c.FATTR4_FSID)) is not None:
            a.fsid = (fs.major, fs.minor)
        if (fi := v(c.FATTR4_FILEID)) is not None:
            a.fileid = fi
        if (ch := v(c.FATTR4_CHANGE)) is not None:
            a.change = ch
        a.atime_ns = _ns(v(c.FATTR4_TIME_ACCESS))
        a.mtime_ns = _ns(v(c.FATTR4_TIME_MODIFY))
        a.ctime_ns = _ns(v(c.FATTR4_TIME_METADATA))
        return a

    @property
    def st_mode(self) -> int:
        return _FTYPE_TO_IFMT.get(self.type, 0) | self.mode

    @property
    def is_dir(self) -> bool:
        return self.type == c.NF4DIR

    @property
    def is_symlink(self) -> bool:
        return self.type == c.NF4LNK

    @property
    def mtime(self) -> float:
        return self.mtime_ns / 1e9

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": _TYPE_NAMES.get(self.type, str(self.type)),
            "mode": oct(self.mode),
            "st_mode": self.st_mode,
            "nlink": self.nlink,
            "uid": self.uid,
            "gid": self.gid,
            "size": self.size,
            "used": self.used,
            "rdev": list(self.rdev),
            "fsid": list(self.fsid),
            "fileid": self.fileid,
            "change": self.change,
            "atime": self.atime_ns / 1e9,
            "mtime": self.mtime_ns / 1e9,
            "ctime": self.ctime_ns / 1e9,
        }


_TYPE_NAMES: dict[int, str] = {
    c.NF4REG: "file",
    c.NF4DIR: "directory",
    c.NF4BLK: "block device",
    c.NF4CHR: "character device",
    c.NF4LNK: "symlink",
    c.NF4SOCK: "socket",
    c.NF4FIFO: "fifo",
}


def _time(ns: int) -> nfstime4:
    return nfstime4(ns // 1_000_000_000, ns % 1_000_000_000)


NOW = "now"  # a time value meaning "set to the server's time"


def setattr_fattr4(
    mode: int | None = None,
    uid: int | None = None,
    gid: int | None = None,
    size: int | None = None,
    atime_ns: int | str | None = None,
    mtime_ns: int | str | None = None,
) -> fattr4:
    """The fattr4 of a SETATTR (or of the attributes given to CREATE/OPEN)."""
    d: dict[int, Any] = {}
    if size is not None:
        d[c.FATTR4_SIZE] = size
    if mode is not None:
        d[c.FATTR4_MODE] = mode & 0o7777
    if uid is not None:
        d[c.FATTR4_OWNER] = id_to_owner(uid)
    if gid is not None:
        d[c.FATTR4_OWNER_GROUP] = id_to_owner(gid)
    if atime_ns is not None:
        d[c.FATTR4_TIME_ACCESS_SET] = (
            (c.SET_TO_SERVER_TIME4, None) if atime_ns == NOW else (c.SET_TO_CLIENT_TIME4, _time(int(atime_ns)))
        )
    if mtime_ns is not None:
        d[c.FATTR4_TIME_MODIFY_SET] = (
            (c.SET_TO_SERVER_TIME4, None) if mtime_ns == NOW else (c.SET_TO_CLIENT_TIME4, _time(int(mtime_ns)))
        )
    return encode_fattr4(d)


@dataclass(slots=True)
class FsStat:
    """What statfs/df shows."""

    files_avail: int = 0
    files_free: int = 0
    files_total: int = 0
    space_avail: int = 0
    space_free: int = 0
    space_total: int = 0
    maxname: int = 255

    @classmethod
    def from_fattr4(cls, f: fattr4) -> FsStat:
        d = decode_fattr4(f)
        return cls(
            d.get(c.FATTR4_FILES_AVAIL, 0),
            d.get(c.FATTR4_FILES_FREE, 0),
            d.get(c.FATTR4_FILES_TOTAL, 0),
            d.get(c.FATTR4_SPACE_AVAIL, 0),
            d.get(c.FATTR4_SPACE_FREE, 0),
            d.get(c.FATTR4_SPACE_TOTAL, 0),
            d.get(c.FATTR4_MAXNAME, 255),
        )
