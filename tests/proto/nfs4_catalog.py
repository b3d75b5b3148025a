"""Every XDR type the NFSv4 definitions export, by name: what the round-trip and malformed-input tests cover."""

from __future__ import annotations

from typing import Any

from pynfsrdma._proto.nfs4 import attrs, callback, compound, types
from pynfsrdma._xdr import XdrType


def _codec(obj: Any) -> XdrType[Any] | None:
    if isinstance(obj, XdrType):
        return obj
    xt = getattr(obj, "XDR", None)
    return xt if isinstance(xt, XdrType) else None


def all_xdr_types() -> dict[str, XdrType[Any]]:
    out: dict[str, XdrType[Any]] = {}
    seen: set[int] = set()
    for mod in (types, compound, callback):
        names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
        for name in names:
            xt = _codec(getattr(mod, name))
            if xt is not None and id(xt) not in seen:
                seen.add(id(xt))
                out[f"{mod.__name__.rsplit('.', 1)[1]}.{name}"] = xt
    for num, d in attrs.ATTRS.items():
        if id(d.xdr) not in seen:
            seen.add(id(d.xdr))
            out[f"fattr4_{d.name}({num})"] = d.xdr
    return out


XDR_TYPES = all_xdr_types()
