"""Where a READ reply's data lies in its RPC message, read from the message's first bytes: what a
transport needs to splice the data elsewhere (:class:`~pynfsrdma._transport.base.SpliceRequest`).

The reply's head is decoded with the same decoders that decode the whole reply later (RPC reply
header, COMPOUND results) up to the first bulk item, READ's data: its offset in the message and the
length its opaque says. A READ sent as a prepared shape (:mod:`~pynfsrdma._proto.nfs4.compound_shapes`)
has its head read by that shape's decoder first, which reads a reply of success with a few struct
reads; any other reply goes to the general decoder. The decision is only where the data would be; every check of the reply (its
statuses, the length against what was asked, the bytes after the data) is made on the whole reply
as for any other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._proto import rpc as rpcdef
from .._proto.nfs4.compound import decode_compound_res
from .._proto.nfs4.compound_shapes import CompoundShape
from .._proto.nfs4.types import PUTFH4args, READ4args
from .._transport.base import NEED_MORE
from .._xdr import Unpacker, XdrError
from .open_state import ANONYMOUS_STATEID


class _Found(Exception):
    def __init__(self, at: int, length: int) -> None:
        super().__init__(at, length)
        self.at = at
        self.length = length


class _Locating(Unpacker):
    """Stops at the first bulk item, saying where its bytes start and how many it announces."""

    __slots__ = ()

    def bulk(self) -> memoryview:
        n = self.uint32()
        raise _Found(self.pos, n)


def locate_read_data(head: memoryview) -> tuple[int, int] | None:
    """Where the data of the READ in the reply whose first bytes are ``head`` (from its XID on)
    starts and how long it is; :data:`~pynfsrdma._transport.base.NEED_MORE` when ``head`` ends
    before that is known; None when the reply carries no READ data (an RPC error, a failed
    operation before READ's data, a message that is not a reply)."""
    return _locate(head, None, ())


def _locate(head: memoryview, shape: CompoundShape | None, ops: tuple[Any, ...]) -> tuple[int, int] | None:
    """:func:`locate_read_data`, the reply's results first given to ``shape``'s decoder (for
    ``ops``) when there is one."""
    u = _Locating(head)
    try:
        if not rpcdef.read_to_results(u):
            return None
        if shape is not None:
            at = u.pos
            shape.decode(u, ops)  # (None: not a reply of success of the shape, ``u`` untouched)
            u.pos = at
        decode_compound_res(u)
    except _Found as found:
        return found.at, found.length
    except XdrError:
        return NEED_MORE
    return None


Locator = Callable[[memoryview], "tuple[int, int] | None"]


@functools.lru_cache(maxsize=16)
def read_data_locator(shape: CompoundShape, count: int) -> Locator:
    """:func:`locate_read_data` for a READ of at most ``count`` bytes sent as ``shape`` (PUTFH,
    READ): the shape's decoder reads the head of a reply of success; any other goes to the general
    decoder. (Made once per shape and count: a stream of READs asks for the same one.)"""
    # (the decoder looks at the READ's count only, to refuse data longer than asked)
    ops = (PUTFH4args(b""), READ4args(ANONYMOUS_STATEID, 0, count))

    def locate(head: memoryview) -> tuple[int, int] | None:
        return _locate(head, shape, ops)

    return locate


__all__ = ["Locator", "locate_read_data", "read_data_locator"]
