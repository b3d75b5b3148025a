"""Reading RPC records the way a server does (RFC 5531 record marking), for the transport tests'
servers on loopback."""

from __future__ import annotations

import struct

import trio


async def read_record(stream: trio.SocketStream) -> bytes:
    """One whole record: its fragments read and joined."""
    data = b""
    while True:
        (mark,) = struct.unpack(">I", await receive_exactly(stream, 4))
        data += await receive_exactly(stream, mark & 0x7FFFFFFF)
        if mark & 0x80000000:
            return data


async def receive_exactly(stream: trio.SocketStream, n: int) -> bytes:
    """``n`` bytes from ``stream`` (EOFError if it ends first)."""
    buf = b""
    while len(buf) < n:
        chunk = await stream.receive_some(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf
