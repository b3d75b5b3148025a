"""fattr4 straight into FileAttrs, or a listing's AttrRecord (the decoders compiled per mask that
READDIR entries and GETATTR replies go through): the same values as the general way (decode_fattr4, then FileAttrs.from_dict)
for any mix of attributes, and an XdrError for anything malformed. Sans-I/O: no server."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import LEAN, for_xdr

from pynfsrdma._client.attributes import (
    STAT_ATTRS,
    FileAttrs,
    decode_entry_attrs,
    decode_file_attrs,
    entry_attrs_decoder_at,
    entry_record_decoder_at,
    entry_records_decoder_at,
    file_attrs,
    record_of,
)
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.attrs import ATTRS, decode_fattr4, encode_fattr4
from pynfsrdma._proto.nfs4.types import fattr4, fsid4, nfstime4, specdata4
from pynfsrdma._xdr import XdrError

ENTRY_ATTRS = (*STAT_ATTRS, c.FATTR4_FILEHANDLE, c.FATTR4_RDATTR_ERROR)


def general(f: fattr4) -> tuple[FileAttrs | None, bytes | None]:
    d = decode_fattr4(f)
    fh = d.get(c.FATTR4_FILEHANDLE)
    ok = not d.get(c.FATTR4_RDATTR_ERROR) and c.FATTR4_FILEID in d
    return (FileAttrs.from_dict(d) if ok else None), (bytes(fh) if fh is not None else None)


def _attrs(nums: tuple[int, ...]) -> st.SearchStrategy[dict[int, Any]]:
    keys = st.sets(st.sampled_from(nums), max_size=len(nums))
    return keys.flatmap(lambda ks: st.fixed_dictionaries({k: for_xdr(ATTRS[k].xdr) for k in ks}))


def a_file(over: dict[int, Any] | None = None) -> dict[int, Any]:
    d = {
        c.FATTR4_TYPE: c.NF4REG,
        c.FATTR4_CHANGE: 7,
        c.FATTR4_SIZE: 4097,
        c.FATTR4_FSID: fsid4(1, 2),
        c.FATTR4_RDATTR_ERROR: c.NFS4_OK,
        c.FATTR4_FILEHANDLE: b"\x01" * 30,
        c.FATTR4_FILEID: 1234,
        c.FATTR4_MODE: 0o100644,
        c.FATTR4_NUMLINKS: 1,
        c.FATTR4_OWNER: "1000",
        c.FATTR4_OWNER_GROUP: "root@localdomain",
        c.FATTR4_RAWDEV: specdata4(0, 0),
        c.FATTR4_SPACE_USED: 8192,
        c.FATTR4_TIME_ACCESS: nfstime4(1_700_000_000, 1),
        c.FATTR4_TIME_METADATA: nfstime4(1_700_000_001, 999_999_999),
        c.FATTR4_TIME_MODIFY: nfstime4(-5, 3),
    }
    d.update(over or {})
    return d


@LEAN
@given(_attrs(ENTRY_ATTRS))
def test_same_values_as_the_general_way(attrs: dict[int, Any]) -> None:
    f = encode_fattr4(attrs)
    assert decode_entry_attrs(f) == general(f)
    if c.FATTR4_RDATTR_ERROR not in attrs or attrs[c.FATTR4_RDATTR_ERROR] == c.NFS4_OK:
        assert decode_file_attrs(f)[0] == FileAttrs.from_dict(decode_fattr4(f))


@LEAN
@given(_attrs((*ENTRY_ATTRS, c.FATTR4_MOUNTED_ON_FILEID, c.FATTR4_ACL, c.FATTR4_SUPPORTED_ATTRS)))
def test_masks_with_other_attributes_take_the_general_way(attrs: dict[int, Any]) -> None:
    assert decode_entry_attrs(encode_fattr4(attrs)) == general(encode_fattr4(attrs))


@LEAN
@given(st.lists(st.tuples(st.sampled_from((0, 1)), _attrs((*ENTRY_ATTRS, c.FATTR4_MOUNTED_ON_FILEID))), min_size=1, max_size=6))
def test_a_page_in_one_call_as_each_entry_alone(page: list[tuple[int, dict[int, Any]]]) -> None:
    """A page's entries decoded in one call per run of one mask (a listing's way) give what each
    entry's decoder gives alone, an entry without attributes included; a run stops at another mask."""
    encoded = [encode_fattr4(attrs) for _, attrs in page]
    masks = [list(f.attrmask) for f in encoded]
    for k, (same, _) in enumerate(page):  # (entries of one mask share its list, as DirEntries gives them)
        if same and k and masks[k] == masks[k - 1]:
            masks[k] = masks[k - 1]
    b, spans = b"", []
    for k, f in enumerate(encoded):
        name = b"name%d" % k
        spans.append((k + 3, len(b), len(b) + len(name), masks[k], len(b) + len(name), len(b) + len(name) + len(f.attr_vals)))
        b += name + f.attr_vals
    got: list[Any] = []
    i = 0
    while i < len(spans):
        stopped = entry_records_decoder_at(spans[i][3])(b, spans, i, got.append)
        assert stopped > i and all(s[3] is spans[i][3] for s in spans[i:stopped])
        assert stopped == len(spans) or spans[stopped][3] is not spans[i][3]
        i = stopped
    want = []
    for k, f in enumerate(encoded):
        record, fh = entry_record_decoder_at(f.attrmask)(f.attr_vals, 0, len(f.attr_vals))
        want.append((b"name%d" % k, k + 3, fh, record))
    assert got == want


def test_a_whole_entry() -> None:
    attrs, fh = decode_entry_attrs(encode_fattr4(a_file()))
    assert fh == b"\x01" * 30
    assert attrs == FileAttrs(
        c.NF4REG, 0o644, 1, 1000, 0, 4097, 8192, (0, 0), (1, 2), 1234, 7,
        1_700_000_000_000_000_001, -5 * 10**9 + 3, 1_700_000_001_999_999_999,
    )  # fmt: skip
    assert attrs.st_mode == 0o100644


def test_values_of_a_size_seen_before_with_other_lengths_decode_as_theirs() -> None:
    """Values of a size decoded before are read in one piece laid out for the lengths seen then,
    only when their own length words say the same: a handle of 31 bytes and an owner of 1 (the
    same size, padded, as 30 and 4), an owner with a NUL, a cut or an overlong handle decode as
    the general way decodes them, or fail as it fails."""
    seen = encode_fattr4(a_file())
    assert decode_entry_attrs(seen) == decode_entry_attrs(seen) == general(seen)  # (the second: in one piece)
    for over in ({c.FATTR4_FILEHANDLE: b"\x02" * 31, c.FATTR4_OWNER: "7"},
                 {c.FATTR4_OWNER: "10\x000"}, {c.FATTR4_OWNER: "1001", c.FATTR4_OWNER_GROUP: "root@otherdomain"}):
        f = encode_fattr4(a_file(over))
        assert len(f.attr_vals) == len(seen.attr_vals)
        attrs, fh = decode_entry_attrs(f)
        assert (attrs, fh) == general(f) and fh == over.get(c.FATTR4_FILEHANDLE, b"\x01" * 30)
        record, record_fh = entry_record_decoder_at(f.attrmask)(f.attr_vals, 0, len(f.attr_vals))
        assert record is not None and attrs is not None and file_attrs(record) == attrs and record_fh == fh
    assert decode_entry_attrs(seen)[0] == general(seen)[0]
    vals = bytearray(seen.attr_vals)
    vals[40:44] = (129).to_bytes(4, "big")  # the handle's length word: past NFS4_FHSIZE, the same size
    with pytest.raises(XdrError):
        decode_entry_attrs(fattr4(seen.attrmask, bytes(vals)))
    with pytest.raises(XdrError):
        entry_record_decoder_at(seen.attrmask)(seen.attr_vals, 0, len(seen.attr_vals) + 4)


def test_an_entry_the_server_could_not_stat_has_no_attributes() -> None:
    d = {c.FATTR4_RDATTR_ERROR: c.NFS4ERR_ACCESS, c.FATTR4_FILEHANDLE: b"fh"}
    assert decode_entry_attrs(encode_fattr4(d)) == (None, b"fh")
    assert decode_entry_attrs(encode_fattr4({c.FATTR4_TYPE: c.NF4REG})) == (None, None)  # no fileid


@pytest.mark.parametrize("cut", [1, 3, 4, 17, 40])
def test_truncated_values_are_an_xdr_error(cut: int) -> None:
    f = encode_fattr4(a_file())
    with pytest.raises(XdrError):
        decode_entry_attrs(fattr4(f.attrmask, f.attr_vals[:-cut]))


def test_trailing_bytes_bad_types_and_long_handles_are_xdr_errors() -> None:
    f = encode_fattr4(a_file())
    with pytest.raises(XdrError):
        decode_entry_attrs(fattr4(f.attrmask, f.attr_vals + bytes(4)))
    bad_type = encode_fattr4(a_file())
    vals = bytearray(bad_type.attr_vals)
    vals[0:4] = (77).to_bytes(4, "big")  # type is the first value
    with pytest.raises(XdrError):
        decode_entry_attrs(fattr4(bad_type.attrmask, bytes(vals)))
    long_fh = encode_fattr4({c.FATTR4_FILEHANDLE: b"x" * 128, c.FATTR4_FILEID: 1})
    vals = bytearray(long_fh.attr_vals)
    vals[0:4] = (129).to_bytes(4, "big")  # a handle longer than NFS4_FHSIZE
    with pytest.raises(XdrError):
        decode_entry_attrs(fattr4(long_fh.attrmask, bytes(vals) + b"\0\0\0\0"))


def test_owner_strings_that_are_not_names_are_nobody() -> None:
    attrs, _ = decode_entry_attrs(encode_fattr4(a_file({c.FATTR4_OWNER: "a\0b", c.FATTR4_OWNER_GROUP: "?"})))
    assert attrs is not None and (attrs.uid, attrs.gid) == (65534, 65534)
    # digits that are not ASCII digits ("¹" is a digit to str.isdigit, not to int): not an id either
    attrs, _ = decode_entry_attrs(encode_fattr4(a_file({c.FATTR4_OWNER: "\u00b9", c.FATTR4_OWNER_GROUP: "\u0663\u00b2"})))
    assert attrs is not None and (attrs.uid, attrs.gid) == (65534, 65534)
    attrs, _ = decode_entry_attrs(encode_fattr4(a_file({c.FATTR4_OWNER: "1000", c.FATTR4_OWNER_GROUP: "100"})))
    assert attrs is not None and (attrs.uid, attrs.gid) == (1000, 100)
    # digits past a 32-bit id (the FUSE kernel's uid and gid are 32 bits; 2**32 - 1 means "none"): nobody
    attrs, _ = decode_entry_attrs(encode_fattr4(a_file({c.FATTR4_OWNER: "9" * 40, c.FATTR4_OWNER_GROUP: "4294967295"})))
    assert attrs is not None and (attrs.uid, attrs.gid) == (65534, 65534)
    attrs, _ = decode_entry_attrs(encode_fattr4(a_file({c.FATTR4_OWNER: "4294967294", c.FATTR4_OWNER_GROUP: "0"})))
    assert attrs is not None and (attrs.uid, attrs.gid) == (4294967294, 0)


@LEAN
@given(_attrs((*ENTRY_ATTRS, c.FATTR4_MOUNTED_ON_FILEID)), st.binary(max_size=12), st.binary(max_size=60))
def test_values_inside_a_larger_buffer_decode_the_same(attrs: dict[int, Any], before: bytes, after: bytes) -> None:
    f = encode_fattr4(attrs)
    b = before + f.attr_vals + after
    dec_at = entry_attrs_decoder_at(f.attrmask)
    assert dec_at(b, len(before), len(before) + len(f.attr_vals)) == general(f)
    attrs_, fh = general(f)
    record, record_fh = entry_record_decoder_at(f.attrmask)(b, len(before), len(before) + len(f.attr_vals))
    assert record_fh == fh and (record is None if attrs_ is None else file_attrs(record) == attrs_)
    assert record is None or record == record_of(file_attrs(record))


@pytest.mark.parametrize("cut", [1, 3, 4, 17, 40])
def test_truncated_values_inside_a_larger_buffer_are_an_xdr_error(cut: int) -> None:
    """What follows the values in the buffer (the next READDIR entry) is not read as theirs."""
    f = encode_fattr4(a_file())
    b = f.attr_vals + bytes(200)
    with pytest.raises(XdrError):
        entry_attrs_decoder_at(f.attrmask)(b, 0, len(f.attr_vals) - cut)
    with pytest.raises(XdrError):
        entry_record_decoder_at(f.attrmask)(b, 0, len(f.attr_vals) - cut)


def test_replaced_copies_every_field_and_changes_only_those_named() -> None:
    import dataclasses

    a = FileAttrs(**{f.name: (i + 1, i + 2) if f.name in ("rdev", "fsid") else i + 1
                     for i, f in enumerate(dataclasses.fields(FileAttrs))})
    b = a.replaced(mode=0o644, size=99)
    assert b == dataclasses.replace(a, mode=0o644, size=99)
    assert b is not a and (a.mode, a.size) == (2, 6)
    assert a.replaced() == a
