"""Declarative XDR types: one encoder and one decoder per XDR type, composed from these pieces.

A struct is a dataclass whose fields are annotated with their XDR type::

    @xdr_struct
    class stateid4:
        seqid: Annotated[int, uint32]
        other: Annotated[bytes, Opaque(12)]

The decorator compiles a ``pack``/``unpack`` pair for the class (straight-line code, no per-field
dispatch at run time). Unions decode to ``(discriminant, arm value)`` tuples unless an arm class is
keyed by a class attribute (see :class:`ClassUnion`).
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin, get_type_hints

from .codec import Packer, Unpacker, XdrError

T = TypeVar("T")


class XdrType(Generic[T]):
    """Base of all XDR types. ``u_expr``/``p_stmt`` let structs inline the primitives."""

    u_expr: str | None = None  # expression decoding from ``u``
    p_stmt: str | None = None  # statement encoding ``{v}`` into ``p``

    def pack(self, p: Packer, v: T) -> None:
        raise NotImplementedError  # every concrete type overrides this

    def unpack(self, u: Unpacker) -> T:
        raise NotImplementedError  # every concrete type overrides this

    # conveniences for tests and small messages
    def encode(self, v: T) -> bytes:
        p = Packer()
        self.pack(p, v)
        return p.getvalue()

    def decode(self, data: bytes | bytearray | memoryview) -> T:
        u = Unpacker(data)
        v = self.unpack(u)
        u.done()
        return v


class _Prim(XdrType[Any]):
    def __init__(self, name: str) -> None:
        self.name = name
        self.u_expr = f"u.{name}()"
        self.p_stmt = f"p.{name}({{v}})"
        self.pack = getattr(Packer, name)  # type: ignore[method-assign]
        self.unpack = getattr(Unpacker, name)  # type: ignore[method-assign]

    def __repr__(self) -> str:
        return self.name


uint32: XdrType[int] = _Prim("uint32")
int32: XdrType[int] = _Prim("int32")
uint64: XdrType[int] = _Prim("uint64")
int64: XdrType[int] = _Prim("int64")
boolean: XdrType[bool] = _Prim("boolean")


class Bounded(XdrType[int]):
    """An unsigned integer that may not exceed ``maximum`` (a count or size the protocol, or this
    client, bounds): a larger value is an :class:`XdrError` when decoded or encoded, before anything
    is made from it. In a struct it is read with its neighbours in one ``struct`` call, as its
    base type is."""

    def __init__(self, base: XdrType[int], maximum: int, what: str = "value") -> None:
        if not isinstance(base, _Prim) or base.name not in ("uint32", "uint64"):
            raise TypeError("Bounded takes uint32 or uint64")
        self.base = base
        self.name = base.name
        self.maximum = maximum
        self.what = what
        self._unpack_base = getattr(Unpacker, base.name)
        self._pack_base = getattr(Packer, base.name)

    def __repr__(self) -> str:
        return f"Bounded({self.name}, {self.maximum})"

    def check(self, v: int) -> int:
        if v > self.maximum:
            raise XdrError(f"{self.what} {v} exceeds its bound {self.maximum}")
        return v

    def pack(self, p: Packer, v: int) -> None:
        self._pack_base(p, self.check(v))

    def unpack(self, u: Unpacker) -> int:
        v: int = self._unpack_base(u)
        if v > self.maximum:
            raise XdrError(f"{self.what} {v} exceeds its bound {self.maximum}")
        return v


class Void(XdrType[None]):
    u_expr = "None"
    p_stmt = "pass"

    def pack(self, p: Packer, v: None) -> None:
        pass

    def unpack(self, u: Unpacker) -> None:
        return None


void = Void()


class Opaque(XdrType[bytes]):
    """opaque name[size] (fixed); decodes to bytes (small identifiers: kept, hashed, compared)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.u_expr = f"bytes(u.opaque_fixed({size}))"
        self.p_stmt = f"p.opaque_fixed({{v}}, {size})"

    def pack(self, p: Packer, v: bytes) -> None:
        p.opaque_fixed(v, self.size)

    def unpack(self, u: Unpacker) -> bytes:
        return bytes(u.opaque_fixed(self.size))


class VarOpaque(XdrType[bytes]):
    """opaque name<max>; decodes to bytes. Payloads use :data:`bulk` instead (a view, no copy)."""

    def __init__(self, maxlen: int | None = None) -> None:
        self.maxlen = maxlen
        self.u_expr = f"bytes(u.opaque({maxlen}))"
        self.p_stmt = f"p.opaque({{v}}, {maxlen})"

    def pack(self, p: Packer, v: bytes) -> None:
        p.opaque(v, self.maxlen)

    def unpack(self, u: Unpacker) -> bytes:
        return bytes(u.opaque(self.maxlen))


class Bulk(XdrType[Any]):
    """A DDP-eligible opaque<> (READ/WRITE data): encoded by reference, decoded as a view."""

    u_expr = "u.bulk()"
    p_stmt = "p.bulk({v})"

    def pack(self, p: Packer, v: Any) -> None:
        p.bulk(v)

    def unpack(self, u: Unpacker) -> memoryview:
        return u.bulk()


bulk = Bulk()


class String(XdrType[str]):
    def __init__(self, maxlen: int | None = None) -> None:
        self.maxlen = maxlen
        self.u_expr = f"u.string({maxlen})"
        self.p_stmt = f"p.string({{v}}, {maxlen})"

    def pack(self, p: Packer, v: str) -> None:
        p.string(v, self.maxlen)

    def unpack(self, u: Unpacker) -> str:
        return u.string(self.maxlen)


string = String()

E = TypeVar("E", bound=enum.IntEnum)


class Enum(XdrType[Any]):
    """An XDR enum backed by an IntEnum. Unknown values are a decode error unless ``open_``."""

    def __init__(self, cls: type[enum.IntEnum], open_: bool = False) -> None:
        self.cls = cls
        self.open_ = open_
        self._values = {m.value: m for m in cls}

    def pack(self, p: Packer, v: int) -> None:
        p.int32(int(v))

    def unpack(self, u: Unpacker) -> Any:
        raw = u.int32()
        m = self._values.get(raw)
        if m is None:
            if self.open_:
                return raw
            raise XdrError(f"{raw} is not a valid {self.cls.__name__}")
        return m


class Array(XdrType[list[Any]]):
    """type name<max> (variable) or type name[n] (fixed, with ``fixed=n``)."""

    def __init__(self, elem: XdrType[Any], maxcount: int | None = None, fixed: int | None = None) -> None:
        self.elem = elem
        self.maxcount = maxcount
        self.fixed = fixed
        # XDR items are at least 4 bytes, except void-like ones
        self.min_size = 0 if isinstance(elem, Void) else 4
        # integers (bitmap4 words, ...) are read all at once with one struct call
        fmt = _PRIM_FORMATS.get(elem.name) if isinstance(elem, _Prim) and elem.name != "boolean" else None
        self._fast: tuple[str, int] | None = fmt
        self._structs: dict[int, Callable[..., tuple[Any, ...]]] = {}  # count -> its unpack_from

    def pack(self, p: Packer, v: list[Any]) -> None:
        n = len(v)
        if self.fixed is not None:
            if n != self.fixed:
                raise XdrError(f"fixed array needs {self.fixed} items, got {n}")
        else:
            if self.maxcount is not None and n > self.maxcount:
                raise XdrError(f"array of {n} items exceeds its bound {self.maxcount}")
            p.uint32(n)
        pk = self.elem.pack
        for item in v:
            pk(p, item)

    def unpack(self, u: Unpacker) -> list[Any]:
        if self.fixed is not None:
            n = self.fixed
            if n * self.min_size > u.remaining():
                raise XdrError(f"fixed array of {n} items cannot fit in {u.remaining()} bytes")
        else:
            n = u.count(self.maxcount, self.min_size)
        fast = self._fast
        if fast is not None:
            fmt, size = fast
            unpack = self._structs.get(n)
            if unpack is None:
                unpack = struct.Struct(f">{n}{fmt}").unpack_from
                if n <= 16:  # (the counts that recur: bitmap words)
                    self._structs[n] = unpack
            return list(unpack(u.view, u.need(n * size)))
        up = self.elem.unpack
        return [up(u) for _ in range(n)]


class LinkedList(XdrType[list[Any]]):
    """An XDR linked list (``T *next`` chained through optional-data, RFC 4506 section 4.19), as a list.

    Used where the XDR chains items with a ``*next`` pointer (entry4 of READDIR, the RPC-over-RDMA chunk lists): on the wire each item is
    preceded by TRUE and the list ends with FALSE. Decoding loops, so a long list cannot exhaust the stack.
    """

    def __init__(self, elem: XdrType[Any], maxcount: int | None = None) -> None:
        self.elem = elem
        self.maxcount = maxcount

    def pack(self, p: Packer, v: list[Any]) -> None:
        if self.maxcount is not None and len(v) > self.maxcount:
            raise XdrError(f"list of {len(v)} items exceeds its bound {self.maxcount}")
        pk = self.elem.pack
        for item in v:
            p.uint32(1)
            pk(p, item)
        p.uint32(0)

    def unpack(self, u: Unpacker) -> list[Any]:
        out: list[Any] = []
        up = self.elem.unpack
        more = u.uint32
        limit = self.maxcount
        while True:
            m = more()
            if m != 1:
                if m:
                    raise XdrError(f"bad boolean value {m}")
                return out
            if limit is not None and len(out) >= limit:
                raise XdrError(f"list of more than {limit} items exceeds its bound")
            out.append(up(u))


class Optional(XdrType[Any]):
    """type *name: absent is None."""

    def __init__(self, elem: XdrType[Any]) -> None:
        self.elem = elem

    def pack(self, p: Packer, v: Any) -> None:
        if v is None:
            p.uint32(0)
        else:
            p.uint32(1)
            self.elem.pack(p, v)

    def unpack(self, u: Unpacker) -> Any:
        return self.elem.unpack(u) if u.boolean() else None


class Union(XdrType[tuple[int, Any]]):
    """A discriminated union; the Python value is ``(discriminant, arm value)``.

    ``arms`` maps discriminant values to arm types (``void`` for no data). A discriminant with no arm
    and no ``default`` is a decode error.
    """

    def __init__(
        self,
        disc: XdrType[Any],
        arms: Mapping[int, XdrType[Any]],
        default: XdrType[Any] | None = None,
    ) -> None:
        self.disc = disc
        self.arms = dict(arms)
        self.default = default

    def _arm(self, d: int) -> XdrType[Any]:
        arm = self.arms.get(d, self.default)
        if arm is None:
            raise XdrError(f"bad union discriminant {d}")
        return arm

    def pack(self, p: Packer, v: tuple[int, Any]) -> None:
        d, val = v
        arm = self._arm(d)
        self.disc.pack(p, d)
        arm.pack(p, val)

    def unpack(self, u: Unpacker) -> tuple[int, Any]:
        d = self.disc.unpack(u)
        return d, self._arm(d).unpack(u)


class ClassUnion(XdrType[Any]):
    """A union whose arms are distinct structs; the Python value is the arm object itself.

    Each arm class carries its discriminant in a class attribute named by ``key`` (``OPNUM`` for
    operations, for example). Encoding reads it back from the object's class.
    """

    def __init__(self, disc: XdrType[Any], arms: list[type], key: str) -> None:
        self.disc = disc
        self.by_disc: dict[int, Any] = {getattr(c, key): c for c in arms}
        self.by_class: dict[type, int] = {c: getattr(c, key) for c in arms}

    def pack(self, p: Packer, v: Any) -> None:
        d = self.by_class.get(type(v))
        if d is None:
            raise XdrError(f"{type(v).__name__} is not an arm of this union")
        self.disc.pack(p, d)
        type(v).XDR.pack(p, v)

    def unpack(self, u: Unpacker) -> Any:
        d = self.disc.unpack(u)
        cls = self.by_disc.get(d)
        if cls is None:
            raise XdrError(f"bad union discriminant {d}")
        return cls.XDR.unpack(u)


class Lazy(XdrType[Any]):
    """A forward reference for recursive types."""

    def __init__(self, resolve: Callable[[], XdrType[Any]]) -> None:
        self._resolve = resolve
        self._t: XdrType[Any] | None = None

    def _get(self) -> XdrType[Any]:
        if self._t is None:
            self._t = self._resolve()
        return self._t

    def pack(self, p: Packer, v: Any) -> None:
        self._get().pack(p, v)

    def unpack(self, u: Unpacker) -> Any:
        return self._get().unpack(u)


class StructType(XdrType[Any]):
    """The codec of an @xdr_struct class (its ``XDR`` attribute)."""

    def __init__(self, cls: type, fields: list[tuple[str, XdrType[Any]]]) -> None:
        self.cls = cls
        self.fields = fields
        ns: dict[str, Any] = {"cls": cls, "XdrError": XdrError}
        for i, (_, t) in enumerate(fields):
            ns[f"t{i}"] = t
        src = "\n".join(_pack_source(fields, ns)) + "\n"
        src += "\n".join(_unpack_source(fields, ns)) + "\n"
        exec(compile(src, f"<xdr {cls.__name__}>", "exec"), ns)
        self.pack = ns["pack"]  # type: ignore[method-assign]
        self.unpack = ns["unpack"]  # type: ignore[method-assign]

    def __repr__(self) -> str:
        return f"StructType({self.cls.__name__})"


def _fixed_format(t: XdrType[Any]) -> tuple[str, int] | None:
    """The struct-module format and size of a fixed-size XDR item, if it has one."""
    if isinstance(t, _Prim | Bounded):
        return _PRIM_FORMATS.get(t.name)
    if isinstance(t, Opaque):
        pad = -t.size & 3
        return f"{t.size}s" + "x" * pad, t.size + pad
    return None


_PRIM_FORMATS: dict[str, tuple[str, int]] = {
    "uint32": ("I", 4),
    "int32": ("i", 4),
    "uint64": ("Q", 8),
    "int64": ("q", 8),
    "boolean": ("I", 4),
}


def _pack_source(fields: list[tuple[str, XdrType[Any]]], ns: dict[str, Any]) -> list[str]:
    """Source of a struct's ``pack``: runs of two or more integer and boolean fields are packed with
    one ``struct.pack``; a value it refuses (out of range, not an integer) or past its bound is
    packed field by field instead, which raises the field's own error."""
    lines = ["def pack(p, obj):"]

    def one(k: int) -> str:
        name, t = fields[k]
        return "    " + (t.p_stmt.format(v=f"obj.{name}") if t.p_stmt is not None else f"t{k}.pack(p, obj.{name})")

    i = 0
    n = len(fields)
    while i < n:
        j = i
        while j < n and isinstance(fields[j][1], _Prim | Bounded):
            j += 1
        if j - i < 2:
            lines.append(one(i))
            i += 1
            continue
        fmt = ">" + "".join(_PRIM_FORMATS[fields[k][1].name][0] for k in range(i, j))  # type: ignore[attr-defined]
        ns[f"P{i}"] = struct.Struct(fmt)
        ns["struct_error"] = struct.error
        bounds = [f"obj.{fields[k][0]} <= {fields[k][1].maximum}"  # type: ignore[attr-defined]
                  for k in range(i, j) if isinstance(fields[k][1], Bounded)]
        values = [f"1 if obj.{fields[k][0]} else 0" if fields[k][1] is boolean else f"obj.{fields[k][0]}"
                  for k in range(i, j)]
        indent = "    "
        if bounds:
            lines.append(f"    if {' and '.join(bounds)}:")
            indent = "        "
        lines.append(f"{indent}try:")
        lines.append(f"{indent}    p.buf += P{i}.pack({', '.join(values)})")
        lines.append(f"{indent}    ok{i} = True")
        lines.append(f"{indent}except struct_error:")
        lines.append(f"{indent}    ok{i} = False")
        if bounds:
            lines.append("    else:")
            lines.append(f"        ok{i} = False")
        lines.append(f"    if not ok{i}:")
        lines.extend("    " + one(k) for k in range(i, j))
        i = j
    if len(lines) == 1:
        lines.append("    pass")
    return lines


def _unpack_source(fields: list[tuple[str, XdrType[Any]]], ns: dict[str, Any]) -> list[str]:
    """Source of a struct's ``unpack``: runs of two or more fixed-size fields (integers, booleans,
    fixed opaques) are read with one bounds check and one ``struct.unpack_from``."""
    lines = ["def unpack(u):"]
    args: list[str] = []
    i = 0
    n = len(fields)
    while i < n:
        j = i
        while j < n and _fixed_format(fields[j][1]) is not None:
            j += 1
        if j - i >= 2:
            fmts = [_fixed_format(fields[k][1]) for k in range(i, j)]
            fmt = ">" + "".join(f for f, _ in fmts if f)  # type: ignore[misc]
            size = sum(sz for _, sz in fmts if _)  # type: ignore[misc]
            ns[f"S{i}"] = struct.Struct(fmt)
            names = [f"v{k}" for k in range(i, j)]
            lines.append(f"    {', '.join(names)}, = S{i}.unpack_from(u.view, u.need({size}))")
            for k in range(i, j):
                fk = fields[k][1]
                if fk is boolean:
                    lines.append(f"    if v{k} > 1: raise XdrError(f'bad boolean value {{v{k}}}')")
                    args.append(f"v{k} == 1")
                else:
                    if isinstance(fk, Bounded):
                        lines.append(f"    if v{k} > {fk.maximum}: t{k}.check(v{k})")
                    args.append(f"v{k}")
            i = j
            continue
        t = fields[i][1]
        lines.append(f"    v{i} = " + (t.u_expr if t.u_expr is not None else f"t{i}.unpack(u)"))
        args.append(f"v{i}")
        i += 1
    lines.append("    return cls(" + ", ".join(args) + ")")
    return lines


C = TypeVar("C", bound=type)


@typing.dataclass_transform()
def xdr_struct(cls: C) -> C:
    """Make ``cls`` a slotted dataclass with a compiled XDR codec in ``cls.XDR``.

    Type checkers see the dataclass constructor (``dataclass_transform``); deriving the class from
    :class:`XdrStruct` also lets them see ``cls.XDR``.
    """
    dc: Any = dataclasses.dataclass(slots=True)(cls)
    hints = get_type_hints(dc, include_extras=True)
    fields: list[tuple[str, XdrType[Any]]] = []
    for f in dataclasses.fields(dc):
        hint = hints[f.name]
        xt: XdrType[Any] | None = None
        if get_origin(hint) is typing.Annotated:
            xt = next((a for a in get_args(hint)[1:] if isinstance(a, XdrType)), None)
        elif isinstance(getattr(hint, "XDR", None), XdrType):
            xt = hint.XDR  # a field whose type is another @xdr_struct class
        if xt is None:
            raise TypeError(f"{cls.__name__}.{f.name} has no XDR type annotation")
        fields.append((f.name, xt))
    dc.XDR = StructType(dc, fields)
    return dc


class XdrStruct:
    """Optional base for type checkers: @xdr_struct classes carry ``XDR``."""

    __slots__ = ()
    XDR: ClassVar[StructType]


def struct_type(cls: type) -> XdrType[Any]:
    """The codec of an @xdr_struct class, for use as a field type."""
    xt: XdrType[Any] = cls.XDR  # type: ignore[attr-defined]
    return xt
