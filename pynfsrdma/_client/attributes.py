"""File attributes as a client uses them: decoded fattr4 values turned into stat-like fields.

Owners travel as strings ("0", "root@domain", "nobody"): :func:`owner_to_id` maps them to numbers
(numeric strings as they are, names through the local user database, anything else to nobody),
and we send numeric strings, which NFS-Ganesha and the Linux server accept.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import attrs_in, bitmap4_from, decode_fattr4, encode_fattr4
from .._proto.nfs4.types import fattr4, nfstime4
from .._xdr import XdrError

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

FS_INFO_ATTRS = (c.FATTR4_MAXREAD, c.FATTR4_MAXWRITE, c.FATTR4_LEASE_TIME, c.FATTR4_SUPPORTED_ATTRS,
                 c.FATTR4_FS_LAYOUT_TYPES, c.FATTR4_LAYOUT_BLKSIZE)
FS_INFO_BITMAP = bitmap4_from(FS_INFO_ATTRS)
XATTR_SUPPORT_BITMAP = bitmap4_from((c.FATTR4_XATTR_SUPPORT,))  # (NFSv4.2, RFC 8276)
TIME_CREATE_BITMAP = bitmap4_from((c.FATTR4_TIME_CREATE,))  # (RECOMMENDED, not kept by every server)

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
FTYPE_TO_IFMT: dict[int, int] = _FTYPE_TO_IFMT  # nfs_ftype4 -> S_IFMT bits (as st_mode has them)


MAX_ID = 0xFFFFFFFE  # the largest uid or gid (2**32 - 1 is (uid_t)-1, "none")
ID_DIGITS = len(str(MAX_ID))


@lru_cache(maxsize=4096)
def owner_to_id(owner: str, group: bool = False) -> int:
    # (str.isdigit also takes "¹", which int() refuses; an id is 32 bits, 2**32 - 1 meaning none)
    if owner.isascii() and owner.isdigit() and len(owner) <= ID_DIGITS and int(owner) <= MAX_ID:
        return int(owner)
    name = owner.split("@", 1)[0]
    try:
        return grp.getgrnam(name).gr_gid if group else pwd.getpwnam(name).pw_uid
    except (KeyError, ValueError):  # unknown, or not a name at all (a NUL byte in it)
        return NOBODY


def id_to_owner(ident: int) -> str:
    return str(ident)


def _seconds(ns: int) -> float:
    """Nanoseconds as os.stat's float seconds (computed as it computes them, so the two compare equal)."""
    sec, nsec = divmod(ns, 1_000_000_000)
    return sec + nsec * 1e-9


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
        return decode_file_attrs(f)[0]

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

    # -- as os.stat_result names them ----------------------------------------------------------------
    @property
    def st_ino(self) -> int:
        return self.fileid

    @property
    def st_dev(self) -> int:
        """The file system (NFS fsid major and minor, folded into one number)."""
        return (self.fsid[0] << 32) ^ self.fsid[1]

    @property
    def st_nlink(self) -> int:
        return self.nlink

    @property
    def st_uid(self) -> int:
        return self.uid

    @property
    def st_gid(self) -> int:
        return self.gid

    @property
    def st_size(self) -> int:
        return self.size

    @property
    def st_blocks(self) -> int:
        """512-byte blocks used."""
        return (self.used + 511) // 512

    @property
    def st_rdev(self) -> int:
        return os.makedev(*self.rdev)

    @property
    def st_atime(self) -> float:
        return _seconds(self.atime_ns)

    @property
    def st_mtime(self) -> float:
        return _seconds(self.mtime_ns)

    @property
    def st_ctime(self) -> float:
        return _seconds(self.ctime_ns)

    @property
    def st_atime_ns(self) -> int:
        return self.atime_ns

    @property
    def st_mtime_ns(self) -> int:
        return self.mtime_ns

    @property
    def st_ctime_ns(self) -> int:
        return self.ctime_ns

    def replaced(self, **changes: Any) -> FileAttrs:
        """A copy with ``changes`` (field names) made: ``dataclasses.replace`` without its walk over
        the fields, for the mount's SETATTRs that answer with the attributes as they will be."""
        a = FileAttrs(self.type, self.mode, self.nlink, self.uid, self.gid, self.size, self.used, self.rdev,
                      self.fsid, self.fileid, self.change, self.atime_ns, self.mtime_ns, self.ctime_ns)
        for name, value in changes.items():
            setattr(a, name, value)
        return a

    def as_dict(self) -> dict[str, Any]:
        """The attributes as JSON shows them: mode as an integer (permission bits; ``st_mode`` has the
        type bits too), times in nanoseconds since the epoch."""
        return {
            "type": _TYPE_NAMES.get(self.type, str(self.type)),
            "mode": self.mode,
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
            "atime_ns": self.atime_ns,
            "mtime_ns": self.mtime_ns,
            "ctime_ns": self.ctime_ns,
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


# -- fattr4 straight into FileAttrs ---------------------------------------------------------------------
# Every GETATTR reply and every READDIR entry carries the same few masks: for each mask a decoder is
# compiled that reads the values with struct (one unpack_from per run of fixed-size attributes) into
# a FileAttrs, without the dict of decode_fattr4. A mask naming any other attribute takes the general
# way (decode_fattr4, then from_dict).

# fixed-size attributes: struct format of the XDR, and the names the generated code gives the values
_FIXED: dict[int, tuple[str, tuple[str, ...]]] = {
    c.FATTR4_TYPE: ("i", ("ftype",)),
    c.FATTR4_CHANGE: ("Q", ("change",)),
    c.FATTR4_SIZE: ("Q", ("size",)),
    c.FATTR4_FSID: ("QQ", ("fsid_major", "fsid_minor")),
    c.FATTR4_RDATTR_ERROR: ("i", ("rdattr_error",)),
    c.FATTR4_FILEID: ("Q", ("fileid",)),
    c.FATTR4_MODE: ("I", ("mode",)),
    c.FATTR4_NUMLINKS: ("I", ("nlink",)),
    c.FATTR4_RAWDEV: ("II", ("rdev1", "rdev2")),
    c.FATTR4_SPACE_USED: ("Q", ("used",)),
    c.FATTR4_TIME_ACCESS: ("qI", ("atime_s", "atime_ns")),
    c.FATTR4_TIME_METADATA: ("qI", ("ctime_s", "ctime_ns")),
    c.FATTR4_TIME_MODIFY: ("qI", ("mtime_s", "mtime_ns")),
}
# variable-length attributes (XDR opaque/string): the name of the value, its maximum length
_VARIABLE: dict[int, tuple[str, int | None]] = {
    c.FATTR4_FILEHANDLE: ("fh", c.NFS4_FHSIZE),
    c.FATTR4_OWNER: ("owner", None),
    c.FATTR4_OWNER_GROUP: ("group", None),
}
# the value each name has when the attribute is absent (as from_dict leaves the field)
_ABSENT = {
    "ftype": int(c.NF4REG),
    "change": 0,
    "size": 0,
    "fsid_major": 0,
    "fsid_minor": 0,
    "rdattr_error": 0,
    "fileid": 0,
    "mode": 0,
    "nlink": 1,
    "rdev1": 0,
    "rdev2": 0,
    "used": 0,
    "atime_s": 0,
    "atime_ns": 0,
    "ctime_s": 0,
    "ctime_ns": 0,
    "mtime_s": 0,
    "mtime_ns": 0,
    "fh": None,
}
_FTYPES = frozenset(int(t) for t in c.nfs_ftype4)
_OWNER_IDS: dict[bytes, int] = {}  # owner string as sent -> uid
_GROUP_IDS: dict[bytes, int] = {}  # owner_group string as sent -> gid
_OWNER_IDS_MAX = 4096

# what a compiled decoder returns: the attributes (None when the server gave an rdattr_error
# instead of them, or no fileid), and the file handle if the mask holds one
EntryAttrs = tuple["FileAttrs | None", "bytes | None"]


def _owner_id(raw: bytes, group: bool) -> int:
    """The uid (gid) of an owner (owner_group) string, remembered (the decoders look there first)."""
    cache = _GROUP_IDS if group else _OWNER_IDS
    ident = owner_to_id(str(raw, "utf-8", "surrogateescape"), group)
    if len(cache) >= _OWNER_IDS_MAX:
        cache.clear()
    cache[raw] = ident
    return ident


# the same decoder over values in a larger buffer: ``dec_at(b, start, end)`` for b[start:end] (a READDIR
# reply's entries lie in one bytes object: no copy of each entry's values)
EntryAttrsAt = Callable[[bytes, int, int], EntryAttrs]


# A listing's entry attributes as a plain tuple of FileAttrs' fields in their order (``FileAttrs(*record)``
# makes the object): a listing holds thousands, and the mount hands most of them to the kernel and never
# looks at them again, so the object is made only for those it keeps (:func:`file_attrs`)
AttrRecord = tuple[int, int, int, int, int, int, int, tuple[int, int], tuple[int, int], int, int, int, int, int]
RECORD_TYPE: Final = 0  # (where an AttrRecord holds FileAttrs' type, fileid and change)
RECORD_FILEID: Final = 9
RECORD_CHANGE: Final = 10
EntryRecord = tuple["AttrRecord | None", "bytes | None"]
EntryRecordAt = Callable[[bytes, int, int], EntryRecord]
# an entry as a listing gives it: (name as the server sent it, cookie, file handle, attributes as
# an AttrRecord: ``file_attrs`` makes their FileAttrs); a tuple, made by the thousand in a listing
ListedEntry = tuple[bytes, int, "bytes | None", "AttrRecord | None"]
# a page's entries from ``first`` on while their mask is the same list as that entry's, each appended
# as a ListedEntry (its record None when the server gave no attributes); gives the index of the first
# entry not decoded (``records_at(b, spans, first, append) -> int``: one call per page, not per entry)
RecordsAt = Callable[[bytes, Sequence[tuple[int, int, int, list[int], int, int]], int, Callable[[ListedEntry], None]], int]
_Decoders = tuple[Callable[[Any], EntryAttrs], EntryAttrsAt, EntryRecordAt, RecordsAt]


def file_attrs(record: AttrRecord) -> FileAttrs:
    """The FileAttrs of a listing's :data:`AttrRecord`."""
    return FileAttrs(*record)


def record_of(a: FileAttrs) -> AttrRecord:
    """The :data:`AttrRecord` of a FileAttrs (``file_attrs(record_of(a)) == a``)."""
    return (a.type, a.mode, a.nlink, a.uid, a.gid, a.size, a.used, a.rdev, a.fsid, a.fileid, a.change,
            a.atime_ns, a.mtime_ns, a.ctime_ns)


def _compile_file_attrs(mask: tuple[int, ...]) -> _Decoders:
    nums = attrs_in(mask)
    if any(n not in _FIXED and n not in _VARIABLE for n in nums):

        def general(vals: Any) -> EntryAttrs:
            d = decode_fattr4(fattr4(list(mask), vals))
            fh = d.get(c.FATTR4_FILEHANDLE)
            err = d.get(c.FATTR4_RDATTR_ERROR)
            attrs = None if err or c.FATTR4_FILEID not in d else FileAttrs.from_dict(d)
            return attrs, bytes(fh) if fh is not None else None

        def general_at(b: bytes, start: int, end: int) -> EntryAttrs:
            return general(b[start:end])

        def general_record_at(b: bytes, start: int, end: int) -> EntryRecord:
            attrs, fh = general(b[start:end])
            return (None if attrs is None else record_of(attrs)), fh

        def general_records_at(
            b: bytes, spans: Sequence[tuple[int, int, int, list[int], int, int]], first: int,
            append: Callable[[ListedEntry], None],
        ) -> int:
            same = spans[first][3]
            for i in range(first, len(spans)):
                cookie, name_at, name_end, emask, start, end = spans[i]
                if emask is not same:
                    return i
                record, fh = general_record_at(b, start, end)
                append((b[name_at:name_end], cookie, fh, record))
            return len(spans)

        return general, general_at, general_record_at, general_records_at
    ns: dict[str, Any] = {
        "FileAttrs": FileAttrs,
        "XdrError": XdrError,
        "struct_error": struct.error,
        "owner_id": _owner_id,
        "OWNERS": _OWNER_IDS,
        "GROUPS": _GROUP_IDS,
        "FTYPES": _FTYPES,
    }
    body: list[str] = []
    fmt = ""  # the run of fixed-size attributes being gathered: struct format, value names
    names: list[str] = []
    present: set[str] = set()
    # the values in one piece, for the fast way: struct formats, and for each variable-length value its
    # index among them (its format then depends on its length); the names the values get, in order
    pieces: list[str | int] = []
    whole: list[str] = []
    lengths: list[str] = []  # the variable-length values' length words, in order
    fast: list[str] = []  # what the fast way does with the values it read

    def flush_run() -> None:
        nonlocal fmt, names
        if fmt:
            st = struct.Struct(">" + fmt)
            key = f"s{len(ns)}"
            ns[key] = st.unpack_from
            body.append(f"{', '.join(names)}, = {key}(b, p)")
            body.append(f"p += {st.size}")
        fmt, names = "", []

    for n in nums:
        if n in _FIXED:
            f, vs = _FIXED[n]
            fmt += f
            names.extend(vs)
            present.update(vs)
            pieces.append(f)
            whole.extend(vs)
            continue
        # a variable-length value: its length word ends the run before it
        name, maxlen = _VARIABLE[n]
        k = f"k{n}"
        fmt += "I"
        names.append(k)
        flush_run()
        present.add(name)
        pieces.extend(("I", len(lengths)))
        lengths.append(k)
        if name == "fh":
            whole.extend((k, "fh"))
        else:
            whole.extend((k, f"{name}_raw"))
            cache = "GROUPS" if name == "group" else "OWNERS"
            fast.append(f"{name} = {cache}.get({name}_raw)")
            fast.append(f"if {name} is None: {name} = owner_id({name}_raw, {name == 'group'})")
        if maxlen is not None:
            body.append(
                f"if {k} > {maxlen}: raise XdrError(f'opaque of {{{k}}} bytes exceeds its bound {maxlen}')"
            )
        body.append(f"q = p + {k}")
        body.append("if q > end: raise XdrError('truncated fattr4')")
        if name == "fh":
            body.append("fh = b[p:q]")
        else:
            cache = "GROUPS" if name == "group" else "OWNERS"
            body.append(f"{name} = {cache}.get(b[p:q])")
            body.append(f"if {name} is None: {name} = owner_id(b[p:q], {name == 'group'})")
        body.append(f"p = q + (-{k} & 3)")
    flush_run()
    defaults = [f"{k} = {v!r}" for k, v in _ABSENT.items() if k not in present]
    uid = "owner" if "owner" in present else str(NOBODY)
    gid = "group" if "group" in present else str(NOBODY)
    ok = "rdattr_error == 0 and " if "rdattr_error" in present else ""
    ok += "True" if "fileid" in present else "False"
    # (values are read from b at p up to end; a fixed-size run may read past end when b goes on:
    # then p ends up past end, which is truncation)
    reading = [
        "try:",
        *(f"    {line}" for line in body or ["pass"]),
        "except struct_error as e:",
        "    raise XdrError(f'truncated fattr4: {e}') from None",
        "if p != end:",
        "    if p > end: raise XdrError(f'truncated fattr4: {p - end} bytes missing')",
        "    raise XdrError(f'{end - p} bytes of trailing garbage in fattr4')",
    ]
    if lengths:
        # The fast way, for values of a size seen before: one struct read of them all, laid out for
        # the variable-length values' lengths then (taken only if the length words read say the
        # same); otherwise the general way, whose lengths the next values of their size are read by.
        # A listing's handles, owners and groups are of the same few lengths.
        ns["FAST"] = {}
        ns["learn"] = _fast_values(pieces, ns["FAST"])
        reading.append(f"learn(end - start, ({', '.join(lengths)},))")
        matched = " and ".join(f"{k} == known[{i + 1}]" for i, k in enumerate(lengths))
        reading = [
            "start = p",
            "known = FAST.get(end - p)",
            "if known is not None:",
            "    try:",
            f"        {', '.join(whole)}, = known[0](b, p)",
            "    except struct_error as e:",
            "        raise XdrError(f'truncated fattr4: {e}') from None",
            f"    if not ({matched}):",
            "        known = None",
            "    else:",
            *(f"        {line}" for line in fast or ["pass"]),
            "if known is None:",
            *(f"    {line}" for line in reading),
        ]
    tail = [
        *(f"    {line}" for line in defaults),
        *(f"    {line}" for line in reading),
        "    if ftype not in FTYPES:",
        "        raise XdrError(f'{ftype} is not a valid nfs_ftype4')",
        f"    if atime_ns > {c.NFS4_NSECONDS_MAX} or mtime_ns > {c.NFS4_NSECONDS_MAX} or ctime_ns > {c.NFS4_NSECONDS_MAX}:",
        "        raise XdrError(f'nfstime4 nseconds {max(atime_ns, mtime_ns, ctime_ns)} is not below one second')",
        f"    if not ({ok}):",
        "        return None, fh",
    ]
    values = (f"ftype, mode & 0o7777, nlink, {uid}, {gid}, size, used, (rdev1, rdev2), (fsid_major, fsid_minor), "
              "fileid, change, atime_s * 1000000000 + atime_ns, mtime_s * 1000000000 + mtime_ns, "
              "ctime_s * 1000000000 + ctime_ns")
    # the same for a page's entries, in one loop (an entry without attributes is appended with None)
    loop = [f"    {line}" if line != "        return None, fh" else
            "            append((b[name_at:name_end], cookie, fh, None))\n            continue" for line in tail]
    src = [
        "def dec_at(b, p, end):",
        *tail,
        f"    return FileAttrs({values}), fh",
        "def record_at(b, p, end):",
        *tail,
        f"    return ({values}), fh",
        "def records_at(b, spans, first, append):",
        "    same = spans[first][3]",
        "    for i in range(first, len(spans)):",
        "        cookie, name_at, name_end, emask, p, end = spans[i]",
        "        if emask is not same:",
        "            return i",
        *loop,
        f"        append((b[name_at:name_end], cookie, fh, ({values})))",
        "    return len(spans)",
        "def dec(vals):",
        "    b = bytes(vals)",  # one copy of the few bytes; every slice of it is then bytes
        "    return dec_at(b, 0, len(b))",
    ]
    exec(compile("\n".join(src) + "\n", "<FileAttrs decoder>", "exec"), ns)
    dec: Callable[[Any], EntryAttrs] = ns["dec"]
    dec_at: EntryAttrsAt = ns["dec_at"]
    record_at: EntryRecordAt = ns["record_at"]
    records_at: RecordsAt = ns["records_at"]
    return dec, dec_at, record_at, records_at


_FAST_SIZES_MAX = 64  # sizes of values a mask's decoder knows the layout of


def _fast_values(pieces: list[str | int], known: dict[int, tuple[Any, ...]]) -> Callable[[int, tuple[int, ...]], None]:
    """For a compiled decoder: ``learn(size, lengths)`` notes in ``known`` that values of ``size``
    bytes whose variable-length values have ``lengths`` are read by one struct (the value, then its
    padding skipped, for each)."""
    structs: dict[tuple[int, ...], Any] = {}

    def learn(size: int, lengths: tuple[int, ...]) -> None:
        unpack = structs.get(lengths)
        if unpack is None:
            fmt = "".join(p if isinstance(p, str) else f"{lengths[p]}s{-lengths[p] & 3}x" for p in pieces)
            if len(structs) >= _FAST_SIZES_MAX:
                structs.clear()
            unpack = structs[lengths] = struct.Struct(">" + fmt).unpack_from
        if len(known) >= _FAST_SIZES_MAX:
            known.clear()
        known[size] = (unpack, *lengths)

    return learn


_FILE_ATTRS_DECODERS: dict[tuple[int, ...], _Decoders] = {}
_FILE_ATTRS_DECODERS_MAX = 256


def _decoders(attrmask: Sequence[int]) -> _Decoders:
    mask = tuple(attrmask)
    decs = _FILE_ATTRS_DECODERS.get(mask)
    if decs is None:
        if len(_FILE_ATTRS_DECODERS) >= _FILE_ATTRS_DECODERS_MAX:
            _FILE_ATTRS_DECODERS.clear()
        decs = _FILE_ATTRS_DECODERS[mask] = _compile_file_attrs(mask)
    return decs


def entry_attrs_decoder(attrmask: Sequence[int]) -> Callable[[Any], EntryAttrs]:
    """The compiled decoder of an fattr4 mask: ``dec(attr_vals) -> (FileAttrs or None, fh)``."""
    return _decoders(attrmask)[0]


def entry_attrs_decoder_at(attrmask: Sequence[int]) -> EntryAttrsAt:
    """The same, for values lying in a larger buffer: ``dec_at(b, start, end)`` decodes b[start:end]."""
    return _decoders(attrmask)[1]


def entry_record_decoder_at(attrmask: Sequence[int]) -> EntryRecordAt:
    """As :func:`entry_attrs_decoder_at`, the attributes as an :data:`AttrRecord` (no FileAttrs made):
    ``record_at(b, start, end) -> (record or None, fh)``; the same checks, the same errors."""
    return _decoders(attrmask)[2]


def entry_records_decoder_at(attrmask: Sequence[int]) -> RecordsAt:
    """As :func:`entry_record_decoder_at`, for a page's entries in one call (:data:`RecordsAt`)."""
    return _decoders(attrmask)[3]


def decode_entry_attrs(f: fattr4) -> EntryAttrs:
    """The FileAttrs and file handle in an fattr4 (a READDIR entry's or a GETATTR's).

    The attributes are None when the server reports an rdattr_error for the entry or sends no
    fileid (the caller then looks the name up). Malformed or unknown attributes: XdrError."""
    return entry_attrs_decoder(f.attrmask)(f.attr_vals)


def decode_file_attrs(f: fattr4) -> tuple[FileAttrs, bytes | None]:
    """Like :func:`decode_entry_attrs`, for replies that must hold attributes (GETATTR): whatever
    is there, absent fields as :meth:`FileAttrs.from_dict` leaves them."""
    attrs, fh = decode_entry_attrs(f)
    if attrs is None:
        return FileAttrs.from_dict(decode_fattr4(f)), fh
    return attrs, fh


def time_create_ns(f: fattr4) -> int | None:
    """The time_create in an fattr4, in nanoseconds since the epoch; None when it is not there."""
    t = decode_fattr4(f).get(c.FATTR4_TIME_CREATE)
    return None if t is None else _ns(t)


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
            (c.SET_TO_SERVER_TIME4, None)
            if atime_ns == NOW
            else (c.SET_TO_CLIENT_TIME4, _time(int(atime_ns)))
        )
    if mtime_ns is not None:
        d[c.FATTR4_TIME_MODIFY_SET] = (
            (c.SET_TO_SERVER_TIME4, None)
            if mtime_ns == NOW
            else (c.SET_TO_CLIENT_TIME4, _time(int(mtime_ns)))
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
