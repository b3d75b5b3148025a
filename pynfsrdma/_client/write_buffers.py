"""Memory that WRITE payloads arrive in and leave from: the FUSE channel reads its requests into
:class:`StableBuffer`\\ s, which an RPC-over-RDMA connection keeps registered between calls, so
that a WRITE's data goes out from where the kernel wrote it with neither a copy nor a registration
of its own (see :mod:`pynfsrdma._transport.rdma.chunk_memory`)."""

from __future__ import annotations

from .._transport.base import StableBuffer

__all__ = ["StableBuffer"]
