"""Which prepared COMPOUND shapes decoded a reply: a spy on :meth:`CompoundShape.decode` (which it
still calls), for the tests that check a caller's replies really go the prepared way."""

from __future__ import annotations

from typing import Any

import pytest

from pynfsrdma._proto.nfs4.compound_shapes import CompoundShape
from pynfsrdma._xdr import Unpacker


def shapes_taken(monkeypatch: pytest.MonkeyPatch, names: dict[int, str]) -> list[str]:
    """The list the names of the shapes (by ``id``, as ``names`` gives them) are appended to, one for
    each reply such a shape decoded, from now to the end of the test."""
    taken: list[str] = []
    decode = CompoundShape.decode

    def counted(shape: CompoundShape, u: Unpacker, ops: Any = ()) -> Any:
        got = decode(shape, u, ops)
        if got is not None and id(shape) in names:
            taken.append(names[id(shape)])
        return got

    monkeypatch.setattr(CompoundShape, "decode", counted)
    return taken
