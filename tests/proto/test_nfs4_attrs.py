"""fattr4 <-> dict over every attribute, bitmaps as RFC 8881 section 3.3.7 lays them out, fs_locations_info."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import LEAN, for_xdr

from pynfsrdma._proto.nfs4 import attrs as A
from pynfsrdma._proto.nfs4.const import (
    FATTR4_CHANGE,
    FATTR4_FS_LOCATIONS_INFO,
    FATTR4_MODE,
    FATTR4_OWNER,
    FATTR4_SIZE,
    FATTR4_SUPPORTED_ATTRS,
    FATTR4_TIME_MODIFY,
    FATTR4_TIME_MODIFY_SET,
    FATTR4_TYPE,
    FSLI4BX_GFLAGS,
    FSLI4BX_READRANK,
    FSLI4BX_TFLAGS,
    FSLI4BX_WRITEORDER,
    FSLI4GF_WRITABLE,
    FSLI4TF_RDMA,
    NF4DIR,
    SET_TO_CLIENT_TIME4,
    SET_TO_SERVER_TIME4,
)
from pynfsrdma._proto.nfs4.types import (
    fattr4,
    fs_locations_info4,
    fs_locations_item4,
    fs_locations_server4,
    nfstime4,
)
from pynfsrdma._xdr import XdrError


def w(*words: int) -> bytes:
    return b"".join(x.to_bytes(4, "big") for x in words)


def _attr_dicts() -> st.SearchStrategy[dict[int, Any]]:
    keys = st.sets(st.sampled_from(sorted(A.ATTRS)), max_size=12)
    return keys.flatmap(lambda ks: st.fixed_dictionaries({k: for_xdr(A.ATTRS[k].xdr) for k in ks}))


@LEAN
@given(_attr_dicts())
def test_fattr4_dict_round_trip(attrs: dict[int, Any]) -> None:
    f = A.encode_fattr4(attrs)
    assert A.attrs_in(f.attrmask) == sorted(attrs)
    assert A.decode_fattr4(f) == attrs
    # and through the wire form of fattr4 itself
    assert A.decode_fattr4(fattr4.XDR.decode(fattr4.XDR.encode(f))) == attrs


def test_every_attribute_in_one_fattr4() -> None:
    every = st.fixed_dictionaries({k: for_xdr(d.xdr) for k, d in A.ATTRS.items()})

    @LEAN
    @given(every)
    def check(attrs: dict[int, Any]) -> None:
        assert A.decode_fattr4(A.encode_fattr4(attrs)) == attrs

    check()


@LEAN
@given(st.sets(st.integers(0, 300)))
def test_bitmap_and_attribute_numbers_are_inverse(nums: set[int]) -> None:
    bm = A.bitmap4_from(nums)
    assert A.attrs_in(bm) == sorted(nums)
    assert not bm or bm[-1] != 0  # no trailing empty words
    assert all(0 <= word < 2**32 for word in bm)


def test_bitmap_layout_golden() -> None:
    # bit n is bit n % 32 of word n // 32
    assert A.bitmap4_from([FATTR4_TYPE, FATTR4_SIZE, FATTR4_MODE]) == [0x12, 0x2]
    assert A.bitmap4_from([FATTR4_SUPPORTED_ATTRS]) == [1]
    assert A.bitmap4_from([]) == []
    assert A.attrs_in([0, 0, 1]) == [64]


def test_decode_golden_bytes() -> None:
    f = fattr4([0x18, 0x2], w(0, 7) + w(0, 4096) + w(0o644))  # change, size, mode
    assert A.decode_fattr4(f) == {FATTR4_CHANGE: 7, FATTR4_SIZE: 4096, FATTR4_MODE: 0o644}
    g = fattr4([0x2, 0x200000], w(2) + w(0, 10, 20))  # type NF4DIR, time_modify (53 = 32 + 21)
    assert A.decode_fattr4(g) == {FATTR4_TYPE: NF4DIR, FATTR4_TIME_MODIFY: nfstime4(10, 20)}


def test_settime4_arms() -> None:
    server = {FATTR4_TIME_MODIFY_SET: (SET_TO_SERVER_TIME4, None)}
    client = {FATTR4_TIME_MODIFY_SET: (SET_TO_CLIENT_TIME4, nfstime4(-5, 999_999_999))}
    assert A.encode_fattr4(server).attr_vals == w(0)
    assert A.encode_fattr4(client).attr_vals == w(1) + b"\xff" * 4 + w(0xFFFFFFFB, 999_999_999)
    assert A.decode_fattr4(A.encode_fattr4(client)) == client


@pytest.mark.parametrize("bit", [81, 83, 200])
def test_unknown_attribute_bit_is_an_xdr_error(bit: int) -> None:
    with pytest.raises(XdrError):
        A.decode_fattr4(fattr4(A.bitmap4_from([FATTR4_SIZE, bit]), w(0, 1) + w(0, 0)))
    with pytest.raises(XdrError):
        A.encode_fattr4({bit: 0})


def test_attribute_values_that_do_not_fit_their_mask() -> None:
    size = A.bitmap4_from([FATTR4_SIZE])
    with pytest.raises(XdrError):
        A.decode_fattr4(fattr4(size, w(0)))  # truncated
    with pytest.raises(XdrError):
        A.decode_fattr4(fattr4(size, w(0, 1, 2)))  # trailing bytes
    with pytest.raises(XdrError):
        A.decode_fattr4(fattr4(A.bitmap4_from([FATTR4_OWNER]), w(0xFFFFFFFF)))  # length beyond the data


def test_decoder_cache_survives_many_masks() -> None:
    for i in range(600):  # more masks than the cache holds: it is emptied and refilled
        nums = [FATTR4_SIZE, FATTR4_CHANGE] if i % 2 else [FATTR4_SIZE]
        f = fattr4(A.bitmap4_from(nums) + [0] * (i + 1), w(0, i) * len(nums))
        # trailing zero words in a mask name no attributes but make a different cache key
        assert A.decode_fattr4(f) == dict.fromkeys(sorted(nums), i)


def test_the_attributes_a_client_uses_are_in_the_table() -> None:
    wanted = [
        "supported_attrs",
        "type",
        "fh_expire_type",
        "change",
        "size",
        "link_support",
        "symlink_support",
        "named_attr",
        "fsid",
        "unique_handles",
        "lease_time",
        "rdattr_error",
        "filehandle",
        "aclsupport",
        "cansettime",
        "case_insensitive",
        "case_preserving",
        "chown_restricted",
        "fileid",
        "files_avail",
        "files_free",
        "files_total",
        "fs_locations",
        "homogeneous",
        "maxfilesize",
        "maxlink",
        "maxname",
        "maxread",
        "maxwrite",
        "mode",
        "no_trunc",
        "numlinks",
        "owner",
        "owner_group",
        "rawdev",
        "space_avail",
        "space_free",
        "space_total",
        "space_used",
        "time_access",
        "time_access_set",
        "time_create",
        "time_delta",
        "time_metadata",
        "time_modify",
        "time_modify_set",
        "mounted_on_fileid",
        "suppattr_exclcreat",
        "fs_layout_types",
        "fs_locations_info",
    ]
    assert set(wanted) <= set(A.ATTR_BY_NAME)
    assert A.attr_name(FATTR4_SIZE) == "size" and A.attr_name(81) == "attr_81"


def test_fs_locations_info_bytes() -> None:
    rdma = fs_locations_server4(0, bytes([FSLI4GF_WRITABLE, FSLI4TF_RDMA, 0, 0, 0, 0, 0, 0, 3]), "192.0.2.1")
    short = fs_locations_server4(-1, b"", "server2")
    info = fs_locations_info4(0, 60, ["export"], [fs_locations_item4([rdma, short], ["export"])])
    back = A.decode_fattr4(A.encode_fattr4({FATTR4_FS_LOCATIONS_INFO: info}))[FATTR4_FS_LOCATIONS_INFO]
    first, second = back.fli_items[0].fli_entries
    assert A.fls_info_byte(first, FSLI4BX_TFLAGS) & FSLI4TF_RDMA
    assert A.fls_info_byte(first, FSLI4BX_GFLAGS) & FSLI4GF_WRITABLE
    assert A.fls_info_byte(first, FSLI4BX_READRANK) == 3
    assert A.fls_info_byte(first, FSLI4BX_WRITEORDER) == 0  # past the end of fls_info
    assert A.fls_info_byte(second, FSLI4BX_TFLAGS) == 0


@pytest.mark.parametrize("name", [b"", b".", b"..", b"a/b", b"/", b"caf\xe9", b"\xff", b"\xed\xa0\x80"])
def test_a_directory_entry_that_names_no_file_is_a_bad_reply(name: bytes) -> None:
    """READDIR names are component4 (RFC 8881 utf8str_cs): UTF-8, no "/", not empty, never "." or ".."."""
    from pynfsrdma._proto.nfs4.types import READDIR4resok, dirlist4, entry4

    good = READDIR4resok(bytes(8), dirlist4([entry4(3, "caf\u00e9", fattr4([], b"")), entry4(4, "x.", fattr4([], b""))], True))
    data = READDIR4resok.XDR.encode(good)
    assert [e.name for e in READDIR4resok.XDR.decode(data).reply.entries] == ["caf\u00e9", "x."]
    n = len("caf\u00e9".encode())
    at = data.index(b"caf\xc3\xa9") - 4
    bad = data[:at] + len(name).to_bytes(4, "big") + name + bytes(-len(name) % 4) + data[at + 4 + n + (-n % 4):]
    with pytest.raises(XdrError, match="directory entry name"):
        READDIR4resok.XDR.decode(bad)


@pytest.mark.parametrize("name", [b"", b".", b"..", b"a/b", b"/", b"caf\xe9", b"\xff", b"x\x00/"])
@pytest.mark.parametrize("where", [0, 150, 299])
def test_a_page_of_names_is_checked_at_once_and_a_bad_name_anywhere_fails_it(name: bytes, where: int) -> None:
    """A page of READDIR names is checked in one pass (check_entry_names); a name that names no file,
    first, amid or last among 299 good ones, still fails the page, and the error names it; names that
    hold a NUL (a pass over them cannot tell them apart) are checked one by one and pass."""
    names = [f"f{i:07d}".encode() for i in range(300)]
    names[where] = name
    data = b"".join(b"attr" + n for n in names)
    spans, p = [], 0
    for n in names:
        spans.append((p, p + 4, p + 4 + len(n), [], p, p + 4))
        p += 4 + len(n)
    with pytest.raises(XdrError, match=re.escape(f"directory entry name {name!r}")):
        A.check_entry_names(data, spans)
    names[where] = b"a\x00b" if where else b"\x00"
    data = b"".join(b"attr" + n for n in names)
    spans, p = [], 0
    for n in names:
        spans.append((p, p + 4, p + 4 + len(n), [], p, p + 4))
        p += 4 + len(n)
    A.check_entry_names(data, spans)  # (b"\x00" alone: a NUL, not an empty name)
