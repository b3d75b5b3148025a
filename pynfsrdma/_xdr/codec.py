"""XDR (RFC 4506) encoding into a growing buffer and decoding from a memoryview.

The packer keeps bulk payloads (WRITE data, DDP-eligible items in RFC 8267's words) as separate
segments so that they go out by scatter/gather and are never joined into one bytes object.
The unpacker hands opaque data back as views of the receive buffer: no copy.

Every decode failure is an :class:`XdrError`; nothing else escapes (no IndexError, no struct.error,
no allocation sized by an untrusted length before that length was checked against what remains).
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview

_U32: Final = struct.Struct(">I")
_I32: Final = struct.Struct(">i")
_U64: Final = struct.Struct(">Q")
_I64: Final = struct.Struct(">q")
_u32_from = _U32.unpack_from
_i32_from = _I32.unpack_from
_u64_from = _U64.unpack_from
_i64_from = _I64.unpack_from
_PAD: Final = (b"", b"\0\0\0", b"\0\0", b"\0")

UINT32_MAX: Final = 0xFFFFFFFF
UINT64_MAX: Final = 0xFFFFFFFFFFFFFFFF


class XdrError(ValueError):
    """Malformed XDR data, or a value that cannot be encoded."""


def pad_len(n: int) -> int:
    """Bytes of XDR padding that follow an opaque of length n."""
    return -n & 3


class BulkSegment:
    """A DDP-eligible payload inside an encoded message (RFC 8166 section 3.4).

    ``position`` is the byte offset in the XDR stream where the payload starts (just after its
    length word); ``data`` is the caller's buffer, referenced, never copied.
    """

    __slots__ = ("data", "position")

    def __init__(self, position: int, data: memoryview) -> None:
        self.position = position
        self.data = data

    def __repr__(self) -> str:
        return f"BulkSegment(position={self.position}, len={len(self.data)})"


class Packer:
    """Encode XDR into a list of buffers: inline bytes interleaved with referenced bulk payloads."""

    __slots__ = ("_bulk", "_done", "_offset", "buf")

    def __init__(self) -> None:
        self.buf = bytearray()
        self._done: list[bytes | bytearray | memoryview] = []
        self._bulk: list[BulkSegment] = []
        self._offset = 0  # bytes already moved to _done

    # -- primitives -------------------------------------------------------------------------------
    def uint32(self, v: int) -> None:
        try:
            self.buf += _U32.pack(v)
        except struct.error as e:
            raise XdrError(f"uint32 out of range: {v!r}") from e

    def int32(self, v: int) -> None:
        try:
            self.buf += _I32.pack(v)
        except struct.error as e:
            raise XdrError(f"int32 out of range: {v!r}") from e

    def uint64(self, v: int) -> None:
        try:
            self.buf += _U64.pack(v)
        except struct.error as e:
            raise XdrError(f"uint64 out of range: {v!r}") from e

    def int64(self, v: int) -> None:
        try:
            self.buf += _I64.pack(v)
        except struct.error as e:
            raise XdrError(f"int64 out of range: {v!r}") from e

    def boolean(self, v: bool) -> None:
        self.buf += _U32.pack(1 if v else 0)

    def opaque_fixed(self, data: Buffer, size: int) -> None:
        mv = memoryview(data)
        if mv.nbytes != size:
            raise XdrError(f"fixed opaque needs {size} bytes, got {mv.nbytes}")
        self.buf += mv
        self.buf += _PAD[size & 3]

    def opaque(self, data: Buffer, maxlen: int | None = None) -> None:
        mv = memoryview(data)
        n = mv.nbytes
        if maxlen is not None and n > maxlen:
            raise XdrError(f"opaque of {n} bytes exceeds its bound {maxlen}")
        self.buf += _U32.pack(n)
        self.buf += mv
        self.buf += _PAD[n & 3]

    def string(self, s: str, maxlen: int | None = None) -> None:
        self.opaque(s.encode("utf-8", "surrogateescape"), maxlen)

    def bulk(self, data: Buffer) -> None:
        """A variable-length opaque whose payload is referenced rather than copied (WRITE data)."""
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        self.buf += _U32.pack(n)
        if n < 512:  # small payloads are cheaper inline than as an extra iovec
            self.buf += mv
        else:
            self._flush()
            self._bulk.append(BulkSegment(self._offset, mv))
            self._done.append(mv)
            self._offset += n
        self.buf += _PAD[n & 3]

    def opaque_ref(self, data: Buffer) -> None:
        """A variable-length opaque whose bytes are referenced rather than copied, yet not
        DDP-eligible (a body sealed by RPCSEC_GSS integrity or privacy goes inline)."""
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        self.buf += _U32.pack(n)
        self._flush()
        self._done.append(mv)
        self._offset += n
        self.buf += _PAD[n & 3]

    def prefixed(self, head: Buffer) -> Packer:
        """A new packer holding ``head`` and then what this one holds, by reference (an RPC header
        made after the arguments: RPCSEC_GSS signs it with a sequence number taken when the call is
        sent, and a call sent again gets a header of its own); bulk positions move with it."""
        q = Packer()
        q.adopt(head, self)
        return q

    def adopt(self, head: Buffer, rest: Packer) -> None:
        """Hold ``head`` (bytes already encoded) and then what ``rest`` holds, both by reference, in
        this empty packer (see :meth:`prefixed`)."""
        self._done.append(head)
        self._offset = len(head)
        self._bulk = [BulkSegment(s.position + self._offset, s.data) for s in rest.bulk_segments]
        self._done.extend(rest.segments())
        self._offset += len(rest)

    def _flush(self) -> None:
        if self.buf:
            self._done.append(self.buf)
            self._offset += len(self.buf)
            self.buf = bytearray()

    # -- results ----------------------------------------------------------------------------------
    def segments(self) -> list[bytes | bytearray | memoryview]:
        """The encoded message as buffers to send in order (for sendmsg)."""
        self._flush()
        return self._done

    @property
    def bulk_segments(self) -> list[BulkSegment]:
        return self._bulk

    def __len__(self) -> int:
        return self._offset + len(self.buf)

    def getvalue(self) -> bytes:
        """The whole message joined (tests and small messages only: this copies)."""
        return b"".join(bytes(s) for s in self.segments())


class Unpacker:
    """Decode XDR from a buffer without copying opaque payloads."""

    __slots__ = ("end", "pos", "view")

    def __init__(self, data: Buffer, pos: int = 0, end: int | None = None) -> None:
        self.view = memoryview(data).cast("B")
        self.pos = pos
        self.end = self.view.nbytes if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def carried(self) -> int:
        """The bytes the message brought from here on, wherever they lie: the rest of the stream
        (a transport that places bulk data apart from it counts that data too)."""
        return self.end - self.pos

    def need(self, n: int) -> int:
        """Take the next ``n`` bytes: their offset in :attr:`view` (XdrError if fewer remain)."""
        p = self.pos
        if n < 0 or p + n > self.end:
            raise XdrError(f"truncated: need {n} bytes at offset {p}, {self.end - p} remain")
        self.pos = p + n
        return p

    # The primitives check bounds inline (no helper call): they run tens of times per reply.
    def uint32(self) -> int:
        p = self.pos
        q = p + 4
        if q > self.end:
            self.need(4)
        self.pos = q
        return _u32_from(self.view, p)[0]

    def int32(self) -> int:
        p = self.pos
        q = p + 4
        if q > self.end:
            self.need(4)
        self.pos = q
        return _i32_from(self.view, p)[0]

    def uint64(self) -> int:
        p = self.pos
        q = p + 8
        if q > self.end:
            self.need(8)
        self.pos = q
        return _u64_from(self.view, p)[0]

    def int64(self) -> int:
        p = self.pos
        q = p + 8
        if q > self.end:
            self.need(8)
        self.pos = q
        return _i64_from(self.view, p)[0]

    def boolean(self) -> bool:
        v = self.uint32()
        if v > 1:
            raise XdrError(f"bad boolean value {v}")
        return v == 1

    def opaque_fixed(self, size: int) -> memoryview:
        p = self.need(size + (-size & 3))
        return self.view[p : p + size]

    def opaque(self, maxlen: int | None = None) -> memoryview:
        p = self.pos
        if p + 4 > self.end:
            self.need(4)
        n = _u32_from(self.view, p)[0]
        if maxlen is not None and n > maxlen:
            raise XdrError(f"opaque of {n} bytes exceeds its bound {maxlen}")
        p += 4
        q = p + n + (-n & 3)
        if q > self.end:
            self.pos = p
            self.need(n + (-n & 3))
        self.pos = q
        return self.view[p : p + n]

    def string(self, maxlen: int | None = None) -> str:
        data = self.opaque(maxlen)
        try:
            return str(data, "utf-8", "surrogateescape")
        except UnicodeDecodeError as e:  # pragma: no cover - surrogateescape accepts all bytes
            raise XdrError(f"bad UTF-8 string: {e}") from e

    def bulk(self) -> memoryview:
        """A DDP-eligible opaque (READ data). Transports that place it elsewhere override this."""
        return self.opaque()

    def count(self, maxcount: int | None = None, min_item_size: int = 4) -> int:
        """An array length, checked against its bound and against the bytes that remain."""
        n = self.uint32()
        if maxcount is not None and n > maxcount:
            raise XdrError(f"array of {n} items exceeds its bound {maxcount}")
        if min_item_size and n * min_item_size > self.end - self.pos:
            raise XdrError(f"array of {n} items cannot fit in {self.end - self.pos} bytes")
        return n

    def done(self) -> None:
        if self.pos != self.end:
            raise XdrError(f"{self.end - self.pos} bytes of trailing garbage")
