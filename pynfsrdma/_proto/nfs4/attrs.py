"""NFSv4 file attributes (RFC 8881 section 5, RFC 7862 section 12.2, RFC 8276): numbers, names, XDR types.

An ``fattr4`` is a bitmap and the XDR of each attribute it names, in increasing attribute number. Bit n of
the mask is bit ``n % 32`` of word ``n // 32`` (section 3.3.7). This module turns fattr4 into a dict keyed by
``FATTR4_*`` number and back.

Value types in the dicts (the XDR types of :data:`ATTRS`):

- integers (uint32/uint64): change, size, fileid, mode, numlinks, maxread, files_*, space_*, ...
- bool: link_support, symlink_support, cansettime, case_*, no_trunc, homogeneous, ...
- ``type``: an ``nfs_ftype4`` member; ``rdattr_error``: an nfsstat4 (member or int)
- ``fsid``: :class:`fsid4` (major, minor); ``rawdev``: :class:`specdata4`; ``owner``/``owner_group``: str
- times: :class:`nfstime4` (seconds, nseconds); ``time_access_set``/``time_modify_set``: the settime4
  union, ``(SET_TO_SERVER_TIME4, None)`` or ``(SET_TO_CLIENT_TIME4, nfstime4(...))``
- ``supported_attrs``/``suppattr_exclcreat``: a bitmap4 (list of words; :func:`attrs_in` lists numbers)
- ``filehandle``: bytes; ``fs_locations``: :class:`fs_locations4`; ``fs_locations_info``:
  :class:`fs_locations_info4`, whose servers' ``fls_info`` bytes are read with :func:`fls_info_byte`
- ``acl``: list of :class:`nfsace4`; ``dacl``/``sacl``: :class:`nfsacl41`; ``fs_layout_types``: list of int

A bit that this table does not know cannot be decoded (its length is unknown): :class:`XdrError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from ..._xdr import Array, LinkedList, Packer, Unpacker, XdrError, XdrType, boolean, uint32, uint64
from .const import (
    FATTR4_ACL,
    FATTR4_ACLSUPPORT,
    FATTR4_ARCHIVE,
    FATTR4_CANSETTIME,
    FATTR4_CASE_INSENSITIVE,
    FATTR4_CASE_PRESERVING,
    FATTR4_CHANGE,
    FATTR4_CHANGE_ATTR_TYPE,
    FATTR4_CHANGE_POLICY,
    FATTR4_CHOWN_RESTRICTED,
    FATTR4_CLONE_BLKSIZE,
    FATTR4_DACL,
    FATTR4_DIR_NOTIF_DELAY,
    FATTR4_DIRENT_NOTIF_DELAY,
    FATTR4_FH_EXPIRE_TYPE,
    FATTR4_FILEHANDLE,
    FATTR4_FILEID,
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_FS_CHARSET_CAP,
    FATTR4_FS_LAYOUT_TYPES,
    FATTR4_FS_LOCATIONS,
    FATTR4_FS_LOCATIONS_INFO,
    FATTR4_FS_STATUS,
    FATTR4_FSID,
    FATTR4_HIDDEN,
    FATTR4_HOMOGENEOUS,
    FATTR4_LAYOUT_ALIGNMENT,
    FATTR4_LAYOUT_BLKSIZE,
    FATTR4_LAYOUT_HINT,
    FATTR4_LAYOUT_TYPES,
    FATTR4_LEASE_TIME,
    FATTR4_LINK_SUPPORT,
    FATTR4_MAXFILESIZE,
    FATTR4_MAXLINK,
    FATTR4_MAXNAME,
    FATTR4_MAXREAD,
    FATTR4_MAXWRITE,
    FATTR4_MDSTHRESHOLD,
    FATTR4_MIMETYPE,
    FATTR4_MODE,
    FATTR4_MODE_SET_MASKED,
    FATTR4_MOUNTED_ON_FILEID,
    FATTR4_NAMED_ATTR,
    FATTR4_NO_TRUNC,
    FATTR4_NUMLINKS,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_QUOTA_AVAIL_HARD,
    FATTR4_QUOTA_AVAIL_SOFT,
    FATTR4_QUOTA_USED,
    FATTR4_RAWDEV,
    FATTR4_RDATTR_ERROR,
    FATTR4_RETENTEVT_GET,
    FATTR4_RETENTEVT_SET,
    FATTR4_RETENTION_GET,
    FATTR4_RETENTION_HOLD,
    FATTR4_RETENTION_SET,
    FATTR4_SACL,
    FATTR4_SEC_LABEL,
    FATTR4_SIZE,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_FREED,
    FATTR4_SPACE_TOTAL,
    FATTR4_SPACE_USED,
    FATTR4_SUPPATTR_EXCLCREAT,
    FATTR4_SUPPORTED_ATTRS,
    FATTR4_SYMLINK_SUPPORT,
    FATTR4_SYSTEM,
    FATTR4_TIME_ACCESS,
    FATTR4_TIME_ACCESS_SET,
    FATTR4_TIME_BACKUP,
    FATTR4_TIME_CREATE,
    FATTR4_TIME_DELEG_ACCESS,
    FATTR4_TIME_DELEG_MODIFY,
    FATTR4_TIME_DELTA,
    FATTR4_TIME_METADATA,
    FATTR4_TIME_MODIFY,
    FATTR4_TIME_MODIFY_SET,
    FATTR4_TYPE,
    FATTR4_UNIQUE_HANDLES,
    FATTR4_XATTR_SUPPORT,
    NFS4_BITMAP4_WORDS_MAX,
    NFS4_DIRLIST4_ENTRIES_MAX,
)
from .types_base import (
    ascii_REQUIRED4,
    bitmap4,
    change_attr_type4_t,
    change_policy4,
    changeid4,
    fattr4,
    fs4_status,
    fs_charset_cap4,
    fs_locations4,
    fs_locations_info4,
    fs_locations_server4,
    fsid4,
    layouthint4,
    layouttype4_t,
    mdsthreshold4,
    mode4,
    mode_masked4,
    nfs_fh4,
    nfs_ftype4_t,
    nfs_lease4,
    nfsace4,
    nfsacl41,
    nfsstat4_t,
    nfstime4,
    retention_get4,
    retention_set4,
    sec_label4,
    settime4,
    specdata4,
    utf8str_mixed,
)


@dataclass(frozen=True, slots=True)
class AttrDef:
    """One attribute: its number (FATTR4_*), its RFC name (without ``fattr4_``) and its XDR type."""

    num: int
    name: str
    xdr: XdrType[Any]


def _defs(*rows: tuple[int, str, Any]) -> dict[int, AttrDef]:
    out: dict[int, AttrDef] = {}
    for num, name, t in rows:
        xt: XdrType[Any] = t if isinstance(t, XdrType) else t.XDR
        out[num] = AttrDef(num, name, xt)
    return out


#: Every attribute this package can decode and encode, by number.
ATTRS: dict[int, AttrDef] = _defs(
    # REQUIRED (section 5.6)
    (FATTR4_SUPPORTED_ATTRS, "supported_attrs", bitmap4),
    (FATTR4_TYPE, "type", nfs_ftype4_t),
    (FATTR4_FH_EXPIRE_TYPE, "fh_expire_type", uint32),
    (FATTR4_CHANGE, "change", changeid4),
    (FATTR4_SIZE, "size", uint64),
    (FATTR4_LINK_SUPPORT, "link_support", boolean),
    (FATTR4_SYMLINK_SUPPORT, "symlink_support", boolean),
    (FATTR4_NAMED_ATTR, "named_attr", boolean),
    (FATTR4_FSID, "fsid", fsid4),
    (FATTR4_UNIQUE_HANDLES, "unique_handles", boolean),
    (FATTR4_LEASE_TIME, "lease_time", nfs_lease4),
    (FATTR4_RDATTR_ERROR, "rdattr_error", nfsstat4_t),
    (FATTR4_FILEHANDLE, "filehandle", nfs_fh4),
    (FATTR4_SUPPATTR_EXCLCREAT, "suppattr_exclcreat", bitmap4),
    # RECOMMENDED (section 5.7)
    (FATTR4_ACL, "acl", Array(nfsace4.XDR)),
    (FATTR4_ACLSUPPORT, "aclsupport", uint32),
    (FATTR4_ARCHIVE, "archive", boolean),
    (FATTR4_CANSETTIME, "cansettime", boolean),
    (FATTR4_CASE_INSENSITIVE, "case_insensitive", boolean),
    (FATTR4_CASE_PRESERVING, "case_preserving", boolean),
    (FATTR4_CHOWN_RESTRICTED, "chown_restricted", boolean),
    (FATTR4_FILEID, "fileid", uint64),
    (FATTR4_FILES_AVAIL, "files_avail", uint64),
    (FATTR4_FILES_FREE, "files_free", uint64),
    (FATTR4_FILES_TOTAL, "files_total", uint64),
    (FATTR4_FS_LOCATIONS, "fs_locations", fs_locations4),
    (FATTR4_HIDDEN, "hidden", boolean),
    (FATTR4_HOMOGENEOUS, "homogeneous", boolean),
    (FATTR4_MAXFILESIZE, "maxfilesize", uint64),
    (FATTR4_MAXLINK, "maxlink", uint32),
    (FATTR4_MAXNAME, "maxname", uint32),
    (FATTR4_MAXREAD, "maxread", uint64),
    (FATTR4_MAXWRITE, "maxwrite", uint64),
    (FATTR4_MIMETYPE, "mimetype", ascii_REQUIRED4),
    (FATTR4_MODE, "mode", mode4),
    (FATTR4_NO_TRUNC, "no_trunc", boolean),
    (FATTR4_NUMLINKS, "numlinks", uint32),
    (FATTR4_OWNER, "owner", utf8str_mixed),
    (FATTR4_OWNER_GROUP, "owner_group", utf8str_mixed),
    (FATTR4_QUOTA_AVAIL_HARD, "quota_avail_hard", uint64),
    (FATTR4_QUOTA_AVAIL_SOFT, "quota_avail_soft", uint64),
    (FATTR4_QUOTA_USED, "quota_used", uint64),
    (FATTR4_RAWDEV, "rawdev", specdata4),
    (FATTR4_SPACE_AVAIL, "space_avail", uint64),
    (FATTR4_SPACE_FREE, "space_free", uint64),
    (FATTR4_SPACE_TOTAL, "space_total", uint64),
    (FATTR4_SPACE_USED, "space_used", uint64),
    (FATTR4_SYSTEM, "system", boolean),
    (FATTR4_TIME_ACCESS, "time_access", nfstime4),
    (FATTR4_TIME_ACCESS_SET, "time_access_set", settime4),
    (FATTR4_TIME_BACKUP, "time_backup", nfstime4),
    (FATTR4_TIME_CREATE, "time_create", nfstime4),
    (FATTR4_TIME_DELTA, "time_delta", nfstime4),
    (FATTR4_TIME_METADATA, "time_metadata", nfstime4),
    (FATTR4_TIME_MODIFY, "time_modify", nfstime4),
    (FATTR4_TIME_MODIFY_SET, "time_modify_set", settime4),
    (FATTR4_MOUNTED_ON_FILEID, "mounted_on_fileid", uint64),
    # new in NFSv4.1 (section 5.8.2 and following)
    (FATTR4_DIR_NOTIF_DELAY, "dir_notif_delay", nfstime4),
    (FATTR4_DIRENT_NOTIF_DELAY, "dirent_notif_delay", nfstime4),
    (FATTR4_DACL, "dacl", nfsacl41),
    (FATTR4_SACL, "sacl", nfsacl41),
    (FATTR4_CHANGE_POLICY, "change_policy", change_policy4),
    (FATTR4_FS_STATUS, "fs_status", fs4_status),
    (FATTR4_FS_LAYOUT_TYPES, "fs_layout_types", Array(layouttype4_t)),
    (FATTR4_LAYOUT_HINT, "layout_hint", layouthint4),
    (FATTR4_LAYOUT_TYPES, "layout_types", Array(layouttype4_t)),
    (FATTR4_LAYOUT_BLKSIZE, "layout_blksize", uint32),
    (FATTR4_LAYOUT_ALIGNMENT, "layout_alignment", uint32),
    (FATTR4_FS_LOCATIONS_INFO, "fs_locations_info", fs_locations_info4),
    (FATTR4_MDSTHRESHOLD, "mdsthreshold", mdsthreshold4),
    (FATTR4_RETENTION_GET, "retention_get", retention_get4),
    (FATTR4_RETENTION_SET, "retention_set", retention_set4),
    (FATTR4_RETENTEVT_GET, "retentevt_get", retention_get4),
    (FATTR4_RETENTEVT_SET, "retentevt_set", retention_set4),
    (FATTR4_RETENTION_HOLD, "retention_hold", uint64),
    (FATTR4_MODE_SET_MASKED, "mode_set_masked", mode_masked4),
    (FATTR4_FS_CHARSET_CAP, "fs_charset_cap", fs_charset_cap4),
    # NFSv4.2 (RFC 7862 section 12.2) and RFC 8276
    (FATTR4_CLONE_BLKSIZE, "clone_blksize", uint32),
    (FATTR4_SPACE_FREED, "space_freed", uint64),
    (FATTR4_CHANGE_ATTR_TYPE, "change_attr_type", change_attr_type4_t),
    (FATTR4_SEC_LABEL, "sec_label", sec_label4),
    (FATTR4_XATTR_SUPPORT, "xattr_support", boolean),
    # RFC 9754 (attribute delegations)
    (FATTR4_TIME_DELEG_ACCESS, "time_deleg_access", nfstime4),
    (FATTR4_TIME_DELEG_MODIFY, "time_deleg_modify", nfstime4),
)

#: name ("size", "time_modify", ...) -> definition
ATTR_BY_NAME: dict[str, AttrDef] = {d.name: d for d in ATTRS.values()}


def attr_name(num: int) -> str:
    """``"size"`` for FATTR4_SIZE; ``"attr_N"`` for a number this table does not know."""
    d = ATTRS.get(num)
    return d.name if d is not None else f"attr_{num}"


# -- bitmaps (section 3.3.7) ------------------------------------------------------------------------------
def bitmap4_from(attr_numbers: Iterable[int]) -> list[int]:
    """The bitmap4 words naming these attribute numbers (no trailing zero words)."""
    words: list[int] = []
    for n in attr_numbers:
        if n < 0:
            raise ValueError(f"negative attribute number {n}")
        w, b = divmod(n, 32)
        if w >= len(words):
            words.extend([0] * (w + 1 - len(words)))
        words[w] |= 1 << b
    return words


def attrs_in(bitmap: Sequence[int]) -> list[int]:
    """The attribute numbers set in a bitmap4, in increasing order."""
    out: list[int] = []
    for w, word in enumerate(bitmap):
        base = w * 32
        while word:
            low = word & -word
            out.append(base + low.bit_length() - 1)
            word ^= low
    return out


# -- fattr4 <-> dict ----------------------------------------------------------------------------------------
_DECODERS: dict[tuple[int, ...], Any] = {}
_DECODER_CACHE_MAX = 512


def _compile_decoder(mask: tuple[int, ...]) -> Any:
    """A straight-line decoder for one attribute mask (servers answer the same few masks again and again)."""
    nums = attrs_in(mask)
    ns: dict[str, Any] = {}
    items = []
    for n in nums:
        d = ATTRS.get(n)
        if d is None:
            raise XdrError(f"cannot decode attribute {n}: not in the attribute table")
        if d.xdr.u_expr is not None:
            items.append(f"{n}: {d.xdr.u_expr}")
        else:
            ns[f"t{n}"] = d.xdr.unpack
            items.append(f"{n}: t{n}(u)")
    src = "def dec(u):\n    return {" + ", ".join(items) + "}\n"
    exec(compile(src, "<fattr4 decoder>", "exec"), ns)
    if len(_DECODERS) >= _DECODER_CACHE_MAX:
        _DECODERS.clear()
    _DECODERS[mask] = ns["dec"]
    return ns["dec"]


def decode_fattr4(f: fattr4) -> dict[int, Any]:
    """The attributes of an fattr4, keyed by FATTR4_* number. Malformed or unknown: XdrError."""
    mask = tuple(f.attrmask)
    dec = _DECODERS.get(mask)
    if dec is None:
        dec = _compile_decoder(mask)
    u = Unpacker(f.attr_vals)
    attrs: dict[int, Any] = dec(u)
    u.done()
    return attrs


def encode_fattr4(attrs: Mapping[int, Any]) -> fattr4:
    """An fattr4 holding these attributes (keyed by FATTR4_* number), in attribute-number order."""
    p = Packer()
    nums = sorted(attrs)
    for n in nums:
        d = ATTRS.get(n)
        if d is None:
            raise XdrError(f"cannot encode attribute {n}: not in the attribute table")
        d.xdr.pack(p, attrs[n])
    return fattr4(bitmap4_from(nums), p.getvalue())


# -- READDIR's entries, decoded in one loop ---------------------------------------------------------------------
_U32 = struct.Struct(">I").unpack_from
_WORDS: dict[int, Any] = {n: struct.Struct(f">{n}I").unpack_from for n in range(NFS4_BITMAP4_WORDS_MAX + 1)}
_ENTRY_HEAD = struct.Struct(">IQI").unpack_from  # value follows, cookie, the name's length
# after the name: the bitmap's length, a bitmap of that many words, the values' length
_ENTRY_ATTRS = {n: struct.Struct(f">I{n}II").unpack_from for n in range(NFS4_BITMAP4_WORDS_MAX + 1)}


# One entry as DirEntries finds it: its cookie, where its name starts and ends, its attribute mask (one
# list shared by consecutive entries with the same mask: do not change it), where its attribute values
# start and end (offsets into DirList.data)
EntrySpan = tuple[int, int, int, list[int], int, int]


class DirList(Sequence[Any]):
    """dirlist4's entries as :class:`DirEntries` decodes them: the bytes of the chain (copied out of
    the reply: names and attributes, no file data) and each entry's :data:`EntrySpan`. As a sequence
    it holds the entry4 values, made when first looked at; a client that decodes the attributes its own
    way reads :attr:`data` and :attr:`spans` and makes none (a listing of thousands of entries spent a
    third of its decoding making entry4 and fattr4 objects only to take them apart again)."""

    __slots__ = ("_entries", "_entry_cls", "data", "spans")

    def __init__(self, data: bytes, spans: list[EntrySpan], entry_cls: type) -> None:
        self.data = data
        self.spans = spans
        self._entry_cls = entry_cls
        self._entries: list[Any] | None = None

    def _made(self) -> list[Any]:
        if self._entries is None:
            b, entry = self.data, self._entry_cls
            self._entries = [
                entry(cookie, str(b[n:m], "utf-8", "surrogateescape"), fattr4(list(mask), b[a:z]))
                for cookie, n, m, mask, a, z in self.spans
            ]
        return self._entries

    def __len__(self) -> int:
        return len(self.spans)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        return self._made()[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._made())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DirList):
            return self._made() == other._made()
        if isinstance(other, list):
            return self._made() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (as a list's)

    def __repr__(self) -> str:
        return repr(self._made())


class DirEntries(LinkedList):
    """dirlist4's ``entry4 *entries`` chain (the XDR of ``LinkedList(entry4.XDR)``, encoded as that
    does), decoded in one loop with struct reads in place into a :class:`DirList`: a READDIR reply
    holds hundreds of entries, and the general way spends a dozen calls on each (the cookie, the name,
    the fattr4 bitmap and values). The same values and the same errors (XdrError for anything
    malformed in the chain; the attribute values are read by whoever looks at them)."""

    def __init__(self, entry_cls: type) -> None:
        super().__init__(entry_cls.XDR)  # type: ignore[attr-defined]
        self.entry_cls = entry_cls

    def unpack(self, u: Unpacker) -> DirList:  # type: ignore[override]
        view, start, end = u.view, u.pos, u.end
        p = start
        spans: list[EntrySpan] = []
        append = spans.append
        words_seen: tuple[int, ...] = ()
        mask: list[int] = []
        # (each entry's fixed-size parts in two reads: up to the name's length, and from the bitmap's
        # length to the values' when the bitmap has as many words as the entry before's; a part that
        # may run past the end, or another bitmap length, is read piece by piece as the XDR has it)
        entry_attrs = _ENTRY_ATTRS[0]
        n_words = 0
        got_before: tuple[int, ...] = ()  # (the bitmap and values' length read in one piece for the entry before)
        try:
            while True:
                if p + 16 <= end:
                    more, cookie, n = _ENTRY_HEAD(view, p)
                    if more != 1:
                        if more:
                            raise XdrError(f"bad boolean value {more}")
                        p += 4
                        break
                    p += 16
                else:
                    if p + 4 > end:
                        raise XdrError(f"truncated: need 4 bytes at offset {p}, {end - p} remain")
                    (more,) = _U32(view, p)
                    p += 4
                    if more != 1:
                        if more:
                            raise XdrError(f"bad boolean value {more}")
                        break
                    raise XdrError(f"truncated entry4 at offset {p}")  # (no cookie and name's length)
                q = p + n
                if q + (-n & 3) + 4 > end:  # the name, and the bitmap's length
                    raise XdrError(f"truncated entry4 name at offset {p}")
                name_at = p - start
                p = q + (-n & 3)
                if p + 4 * n_words + 8 <= end and (got := entry_attrs(view, p))[0] == n_words:
                    p += 4 * n_words + 8
                    if got != got_before:  # (as a rule the same as the entry before's: nothing to look at)
                        got_before, n_vals = got, got[-1]
                        w = got[1:-1]
                        if w != words_seen:
                            words_seen, mask = w, list(w)
                else:
                    got_before = ()
                    (words,) = _U32(view, p)
                    p += 4
                    if p + 4 * words + 4 > end:  # the bitmap, and the values' length
                        raise XdrError(f"truncated fattr4 of {words} bitmap words at offset {p}")
                    unpack = _WORDS.get(words)
                    if unpack is None:
                        raise XdrError(f"bitmap4 of {words} words exceeds its bound {NFS4_BITMAP4_WORDS_MAX}")
                    w = unpack(view, p)
                    p += 4 * words
                    (n_vals,) = _U32(view, p)
                    p += 4
                    n_words, entry_attrs = words, _ENTRY_ATTRS[words]
                    if w != words_seen:
                        words_seen, mask = w, list(w)
                q = p + n_vals
                if q + (-n_vals & 3) > end:
                    raise XdrError(f"truncated fattr4 values at offset {p}")
                append((cookie, name_at, name_at + n, mask, p - start, q - start))
                p = q + (-n_vals & 3)
        finally:
            u.pos = p
        if len(spans) > NFS4_DIRLIST4_ENTRIES_MAX:  # (each entry takes 20 bytes at least: the reply bounds the list)
            raise XdrError(f"dirlist4 of more than {NFS4_DIRLIST4_ENTRIES_MAX} entries exceeds its bound")
        data = bytes(view[start:p])
        check_entry_names(data, spans)
        return DirList(data, spans, self.entry_cls)


_NOT_NAMES = (b"", b".", b"..")


def check_entry_names(data: bytes, spans: list[EntrySpan]) -> None:
    """:func:`check_entry_name` of every entry of a page at once: the names, each between NULs, are
    searched once for "/", an empty name, "." or "..", and whether all are ASCII (each C loops over
    the page); only a page that fails a test (or whose names hold NULs) is checked name by name, and
    the error names the entry."""
    edges = b"\0" + b"\0".join([data[s[1] : s[2]] for s in spans]) + b"\0"
    if b"/" in edges or not edges.isascii() or b"\0\0" in edges or b"\0.\0" in edges or b"\0..\0" in edges:
        for span in spans:
            check_entry_name(data[span[1] : span[2]])


def check_entry_name(name: bytes) -> None:
    """A directory entry's name as READDIR returns it is a component4 (RFC 8881 section 14.2: UTF-8,
    no "/", not empty) and neither "." nor ".." (section 18.23.4); XdrError for any other: such a reply
    is a bad one, and the name never reaches a caller or the kernel as a path."""
    if name in _NOT_NAMES or b"/" in name:
        raise XdrError(f"directory entry name {name!r} is not a file name")
    if not name.isascii():
        try:
            name.decode("utf-8")
        except UnicodeDecodeError:
            raise XdrError(f"directory entry name {name!r} is not UTF-8 (RFC 8881 utf8str_cs)") from None


# -- fs_locations_info helpers (section 11.17.1) ------------------------------------------------------------
def fls_info_byte(server: fs_locations_server4, index: int) -> int:
    """Byte ``index`` (an FSLI4BX_* constant) of a server's fls_info; bytes past its end read as zero.

    E.g. ``fls_info_byte(s, FSLI4BX_TFLAGS) & FSLI4TF_RDMA`` says the location is reachable over RDMA,
    ``fls_info_byte(s, FSLI4BX_READRANK)`` is its read rank (lower is preferred).
    """
    info = server.fls_info
    return info[index] if 0 <= index < len(info) else 0


__all__ = [
    "ATTRS",
    "ATTR_BY_NAME",
    "AttrDef",
    "DirEntries",
    "DirList",
    "EntrySpan",
    "attr_name",
    "attrs_in",
    "bitmap4_from",
    "check_entry_name",
    "decode_fattr4",
    "encode_fattr4",
    "fls_info_byte",
]
