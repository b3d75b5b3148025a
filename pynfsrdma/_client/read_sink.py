"""A pipe offered for the data of one READ: the FUSE channel's reply pipe, which the transport may
splice the reply's data into (:class:`~pynfsrdma._transport.base.PayloadSink`), so that the data
goes from the socket to the kernel's FUSE request without passing through this process.

The offer holds for the task that made it and for the one READ of exactly its offset and size
(:func:`offered`): a READ sent ahead by another task, a READ of part of the range, or a second
READ of the rest after a short one receives its data as usual. What the READ then returns is a
:class:`~pynfsrdma._transport.base.SplicedPayload` in place of the bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import trio

from .._transport.base import PayloadSink, SplicedPayload


@dataclass(frozen=True, slots=True)
class _Offer:
    sink: PayloadSink
    offset: int
    size: int
    task: trio.lowlevel.Task


_OFFER: ContextVar[_Offer | None] = ContextVar("pynfsrdma_read_sink", default=None)


@contextmanager
def offering(sink: PayloadSink, offset: int, size: int) -> Iterator[None]:
    """Within the block, a READ of ``size`` bytes at ``offset`` made by this task may put its data
    into ``sink``."""
    token = _OFFER.set(_Offer(sink, offset, size, trio.lowlevel.current_task()))
    try:
        yield
    finally:
        _OFFER.reset(token)


def offered(offset: int, size: int) -> PayloadSink | None:
    """The sink offered for a READ of ``size`` bytes at ``offset`` in this task, if one was."""
    offer = _OFFER.get()
    if offer is None or offer.offset != offset or offer.size != size:
        return None
    if offer.task is not trio.lowlevel.current_task():
        return None
    return offer.sink


def payload_length(data: object) -> int:
    """The length of READ data: a bytes-like object or a :class:`SplicedPayload`."""
    if isinstance(data, memoryview):
        return data.nbytes
    return len(data)  # type: ignore[arg-type]


def as_bytes(data: object) -> object:
    """READ data as bytes: a spliced payload is read back out of its pipe (a copy)."""
    if isinstance(data, SplicedPayload):
        return data.materialize()
    return data


__all__ = ["PayloadSink", "SplicedPayload", "as_bytes", "offered", "offering", "payload_length"]
