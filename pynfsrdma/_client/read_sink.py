"""A pipe offered for the data of one READ: the FUSE channel's reply pipe, which the transport may
splice the reply's data into (:class:`~pynfsrdma._transport.base.PayloadSink`), so that the data
goes from the socket to the kernel's FUSE request without passing through this process.

The channel hands the pipe down with the request, as the ``sink`` parameter of each layer's read
(the mount's operations, the open file's reads, :meth:`~.read_write.ReadWrite.read`); it serves the
one READ of exactly the request's range: a READ sent ahead, a READ of part of the range, or a second
READ of the rest after a short one receives its data as usual. What the READ then returns is a
:class:`~pynfsrdma._transport.base.SplicedPayload` in place of the bytes.
"""

from __future__ import annotations

from .._transport.base import PayloadSink, SplicedPayload


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


__all__ = ["PayloadSink", "SplicedPayload", "as_bytes", "payload_length"]
