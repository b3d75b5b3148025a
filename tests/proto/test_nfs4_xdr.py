"""Every NFSv4 XDR type: encode then decode is identity, and malformed input only ever raises XdrError.

The types come from the modules' exports (nfs4_catalog), so a type added later is covered without
touching this file; values come from strategies derived from the type descriptions.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nfs4_catalog import XDR_TYPES
from strategies import LEAN, for_xdr

from pynfsrdma._proto.nfs4.compound import ResOpType
from pynfsrdma._xdr import (
    Array,
    Bulk,
    ClassUnion,
    Enum,
    LinkedList,
    String,
    Union,
    Unpacker,
    VarOpaque,
    XdrError,
    XdrType,
    boolean,
)

NAMES = sorted(XDR_TYPES)
BAD_DISC = 0x7FFFFFF0


def _decode_or_xdr_error(t: XdrType[Any], data: bytes) -> None:
    """Decoding arbitrary bytes either yields a value or raises XdrError: nothing else escapes."""
    try:
        t.decode(data)
    except XdrError:
        pass


def _cut_points(n: int) -> list[int]:
    if n <= 160:
        return list(range(n))
    return sorted({*range(0, n, 4), *range(1, 9), *range(n - 9, n)})


@pytest.mark.parametrize("name", NAMES)
def test_round_trip(name: str) -> None:
    t = XDR_TYPES[name]

    @LEAN
    @given(for_xdr(t))
    def check(value: Any) -> None:
        data = t.encode(value)
        assert len(data) % 4 == 0
        back = t.decode(data)
        assert back == value
        assert t.encode(back) == data  # canonical: the decoded value encodes to the same bytes

    check()


@pytest.mark.parametrize("name", NAMES)
def test_truncated_trailing_and_corrupted_input(name: str) -> None:
    t = XDR_TYPES[name]

    @settings(LEAN, max_examples=4)
    @given(for_xdr(t))
    def check(value: Any) -> None:
        data = t.encode(value)
        for k in _cut_points(len(data)):
            with pytest.raises(XdrError):
                t.decode(data[:k])
        with pytest.raises(XdrError):
            t.decode(data + b"\0\0\0\0")
        with pytest.raises(XdrError):
            t.decode(data + b"\x01")
        # any word replaced by a hostile value (a huge length, a negative enum, a bad discriminant)
        for i in range(0, min(len(data), 256), 4):
            for word in (b"\xff\xff\xff\xff", b"\x7f\xff\xff\xf0"):
                _decode_or_xdr_error(t, data[:i] + word + data[i + 4 :])

    check()


def _has_length_prefix(t: XdrType[Any]) -> bool:
    return isinstance(t, VarOpaque | String | Bulk) or (isinstance(t, Array) and t.fixed is None)


LENGTH_PREFIXED = [n for n in NAMES if _has_length_prefix(XDR_TYPES[n])]


@pytest.mark.parametrize("name", LENGTH_PREFIXED)
@pytest.mark.parametrize("length", [0xFFFFFFFF, 0x80000000, 0x10000])
def test_length_beyond_what_remains(name: str, length: int) -> None:
    t = XDR_TYPES[name]
    data = length.to_bytes(4, "big") + bytes(64)
    with pytest.raises(XdrError):
        t.decode(data)
    # and the unpacker did not move past the data it has
    u = Unpacker(data)
    with pytest.raises(XdrError):
        t.unpack(u)
    assert u.pos <= len(data)


def _bad_discriminant(t: XdrType[Any]) -> bytes | None:
    """The encoding of a discriminant that selects no arm, or None if every value selects one."""
    if isinstance(t, ClassUnion | ResOpType):
        return BAD_DISC.to_bytes(4, "big")
    if isinstance(t, Union):
        if t.disc is boolean:
            return (2).to_bytes(4, "big")  # neither TRUE nor FALSE
        if t.default is None or isinstance(t.disc, Enum):
            return BAD_DISC.to_bytes(4, "big")
    return None


UNIONS = [n for n in NAMES if _bad_discriminant(XDR_TYPES[n]) is not None]


@pytest.mark.parametrize("name", UNIONS)
def test_bad_union_discriminant(name: str) -> None:
    t = XDR_TYPES[name]
    bad = _bad_discriminant(t)
    assert bad is not None
    with pytest.raises(XdrError):
        t.decode(bad + bytes(64))


def test_catalog_covers_every_kind_of_type() -> None:
    kinds = {type(t).__name__ for t in XDR_TYPES.values()}
    assert {"StructType", "Union", "ClassUnion", "ResOpType", "Array", "Enum", "Bulk"} <= kinds
    assert any(isinstance(t, LinkedList) for t in XDR_TYPES.values()) or "types.dirlist4" in XDR_TYPES
    assert len(UNIONS) > 20 and len(LENGTH_PREFIXED) > 10


def test_linked_list_of_many_entries_decodes_without_recursion() -> None:
    from pynfsrdma._proto.nfs4.types import dirlist4, entry4, fattr4

    entries = [entry4(i, f"f{i}", fattr4([], b"")) for i in range(5000)]
    value = dirlist4(entries, True)
    assert dirlist4.XDR.decode(dirlist4.XDR.encode(value)) == value


def test_readdir_entries_decode_to_spans_over_one_copy() -> None:
    """DirEntries gives a DirList: the chain's bytes and where each entry's parts lie (one mask list
    for entries with the same mask), the entry4 values when looked at."""
    from pynfsrdma._proto.nfs4.attrs import DirList
    from pynfsrdma._proto.nfs4.types import dirlist4, entry4, fattr4

    entries = [entry4(7, "a", fattr4([1, 2], b"1234")), entry4(9, "b\u00e9c", fattr4([1, 2], b"")),
               entry4(11, "d", fattr4([3], b"12345678"))]  # fmt: skip
    got = dirlist4.XDR.decode(dirlist4.XDR.encode(dirlist4(entries, False)))
    assert isinstance(got.entries, DirList) and not got.eof
    b, spans = got.entries.data, got.entries.spans
    assert [(cookie, b[n:m], mask, b[a:z]) for cookie, n, m, mask, a, z in spans] == [
        (7, b"a", [1, 2], b"1234"), (9, "b\u00e9c".encode(), [1, 2], b""), (11, b"d", [3], b"12345678")
    ]  # fmt: skip
    assert spans[0][3] is spans[1][3]
    assert len(got.entries) == 3 and got.entries[1] == entries[1] and list(got.entries) == entries
    assert got.entries == entries and entries == got.entries
    assert got.entries[1].attrs.attrmask is not spans[1][3]  # (each entry4 its own list)


def _entries_or_error(xdr: Any, data: bytes) -> Any:
    from pynfsrdma._xdr import Unpacker

    u = Unpacker(data)
    try:
        return list(xdr.unpack(u)), u.pos
    except XdrError:
        return "XdrError"


@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.text("ab\u00e9", min_size=1, max_size=9),
                          st.lists(st.integers(0, 2**32 - 1), max_size=3), st.binary(max_size=12)), max_size=6),
       st.binary(max_size=24), st.data())
@settings(LEAN, max_examples=200)
def test_readdir_entries_decode_as_the_general_way(rows: list[Any], after: bytes, data: st.DataObject) -> None:
    """DirEntries (two reads of each entry's fixed-size parts when they lie within the reply and
    the bitmap has as many words as the entry before's, piece by piece otherwise) gives the entries
    the general LinkedList of entry4 gives, stops where it stops, and fails where it fails: any
    mix of bitmap lengths, whatever follows the chain, any cut of it, any byte changed (and refuses
    what is not a file name)."""
    from pynfsrdma._proto.nfs4.attrs import DirEntries, check_entry_name
    from pynfsrdma._proto.nfs4.types import entry4, fattr4

    ours, general = DirEntries(entry4), LinkedList(entry4.XDR)
    encoded = general.encode([entry4(ck, name, fattr4(mask, vals)) for ck, name, mask, vals in rows]) + after
    cut = data.draw(st.integers(0, len(encoded)))
    changed = bytearray(encoded)
    if changed:
        at = data.draw(st.integers(0, len(changed) - 1))
        changed[at] = data.draw(st.sampled_from([0, 1, 2, 3, 4, 255]))
    for case in (encoded, encoded[:cut], bytes(changed)):
        expected = _entries_or_error(general, case)
        try:  # (names a READDIR may not return are refused: the general way takes any string)
            for e in expected[0] if expected != "XdrError" else ():
                check_entry_name(e.name.encode("utf-8", "surrogateescape"))
        except XdrError:
            expected = "XdrError"
        assert _entries_or_error(ours, case) == expected


@given(st.binary(max_size=200))
@settings(LEAN, max_examples=50)
def test_random_bytes_as_a_compound_reply(data: bytes) -> None:
    from pynfsrdma._proto.nfs4.compound import COMPOUND4res

    _decode_or_xdr_error(COMPOUND4res.XDR, data)
