"""Hypothesis strategies derived from XDR type descriptions, for property tests of any codec.

``for_xdr(t)`` builds a strategy producing Python values that ``t`` can encode: structs through their
``XDR.fields``, unions as ``(discriminant, arm value)`` (including discriminants that take the default
arm), ClassUnions as any arm object, arrays within their bounds (kept short), enums as their members,
bulk payloads as bytes (both sides of the 512-byte inline threshold), and COMPOUND result ops
(:class:`ResOpType`) as ResOp objects with a status that selects each of the op's arms.

``LEAN`` is the hypothesis settings profile the protocol tests use (few examples, no deadline: the
machines running the suite are small and busy).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from pynfsrdma._proto.nfs4.attrs import DirEntries
from pynfsrdma._proto.nfs4.compound import ResOp, ResOpType
from pynfsrdma._proto.nfs4.const import NFS4ERR_DELAY, NFS4ERR_IO, NFS4ERR_NOENT
from pynfsrdma._proto.nfs4.types import fattr4
from pynfsrdma._xdr import (
    Array,
    Bounded,
    Bulk,
    ClassUnion,
    Enum,
    Lazy,
    LinkedList,
    Opaque,
    Optional,
    String,
    StructType,
    Union,
    VarOpaque,
    Void,
    XdrType,
    boolean,
    int32,
    int64,
    uint32,
    uint64,
)

LEAN = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MAX_ITEMS = 3  # array lengths: enough to catch count and ordering bugs, small enough to stay fast
MAX_OPAQUE = 40

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_PRIMS: dict[int, st.SearchStrategy[Any]] = {
    id(uint32): st.integers(0, 2**32 - 1),
    id(int32): st.integers(-(2**31), 2**31 - 1),
    id(uint64): st.integers(0, 2**64 - 1),
    id(int64): st.integers(-(2**63), 2**63 - 1),
    id(boolean): st.booleans(),
}
_memo: dict[int, st.SearchStrategy[Any]] = {}


def _disc_values(disc: XdrType[Any]) -> list[Any]:
    """Candidate discriminant values of a union's discriminant type."""
    if isinstance(disc, Enum):
        return list(disc.cls)
    if disc is boolean:
        return [True, False]
    return [0, 1, 2, 3, 6, 7, 0x7FFFFFFF]


def _text(maxlen: int | None) -> st.SearchStrategy[str]:
    s = _TEXT
    if maxlen is not None:
        s = s.filter(lambda v: len(v.encode("utf-8")) <= maxlen)
    return s


def for_xdr(t: XdrType[Any]) -> st.SearchStrategy[Any]:
    """A strategy of values that ``t`` encodes (and decodes back to an equal value)."""
    key = id(t)
    s = _memo.get(key)
    if s is None:
        s = _build(t)
        _memo[key] = s
    return s


def _build(t: XdrType[Any]) -> st.SearchStrategy[Any]:
    prim = _PRIMS.get(id(t))
    if prim is not None:
        return prim
    if isinstance(t, Void):
        return st.none()
    if isinstance(t, Opaque):
        return st.binary(min_size=t.size, max_size=t.size)
    if isinstance(t, VarOpaque):
        return st.binary(max_size=min(MAX_OPAQUE, t.maxlen if t.maxlen is not None else MAX_OPAQUE))
    if isinstance(t, Bulk):
        return st.one_of(st.binary(max_size=MAX_OPAQUE), st.binary(min_size=512, max_size=700))
    if isinstance(t, String):
        return _text(t.maxlen)
    if isinstance(t, Enum):
        return st.sampled_from(list(t.cls))
    if isinstance(t, Bounded):
        return st.integers(0, t.maximum)
    if isinstance(t, Array):
        elem = for_xdr(t.elem)
        if t.fixed is not None:
            return st.lists(elem, min_size=t.fixed, max_size=t.fixed)
        hi = MAX_ITEMS if t.maxcount is None else min(MAX_ITEMS, t.maxcount)
        return st.lists(elem, max_size=hi)
    if isinstance(t, DirEntries):  # (a READDIR's entries are named as files are: check_entry_name)
        entry = t.entry_cls
        names = _text(None).filter(lambda v: v not in ("", ".", "..") and "/" not in v)
        return st.lists(st.builds(entry, for_xdr(uint64), names, for_xdr(fattr4.XDR)), max_size=MAX_ITEMS)
    if isinstance(t, LinkedList):
        hi = MAX_ITEMS if t.maxcount is None else min(MAX_ITEMS, t.maxcount)
        return st.lists(for_xdr(t.elem), max_size=hi)
    if isinstance(t, Optional):
        return st.one_of(st.none(), for_xdr(t.elem))
    if isinstance(t, Union):
        options = [st.tuples(st.just(d), for_xdr(arm)) for d, arm in t.arms.items()]
        if t.default is not None:
            others = [d for d in _disc_values(t.disc) if d not in t.arms]
            if others:
                options.append(st.tuples(st.sampled_from(others), for_xdr(t.default)))
        return st.one_of(options)
    if isinstance(t, ClassUnion):
        return st.one_of([for_xdr(cls.XDR) for cls in t.by_class])
    if isinstance(t, StructType):
        return st.builds(t.cls, *(for_xdr(ft) for _, ft in t.fields))
    if isinstance(t, Lazy):
        return st.deferred(lambda: for_xdr(t._get()))
    if isinstance(t, ResOpType):
        return st.one_of([_resop(spec) for spec in t.results.values()])
    raise TypeError(f"no strategy for XDR type {t!r}")


def _resop(spec: Any) -> st.SearchStrategy[ResOp]:
    statuses = [0, *spec.errors, NFS4ERR_NOENT, NFS4ERR_IO, NFS4ERR_DELAY]

    def with_status(status: int) -> st.SearchStrategy[ResOp]:
        arm = spec.arm(status)
        res = st.none() if arm is None else for_xdr(arm)
        return st.builds(ResOp, st.just(spec.opnum), st.just(status), res)

    return st.sampled_from(statuses).flatmap(with_status)
