"""RDMA-CM private data for RPC-over-RDMA version 1 (RFC 8797).

Each peer sends an 8-byte message in the private data of its connect request or accept::

    | Format Identifier (32 bits, 0xf6ab0e18)                  |
    | Version (8) | Flags (8, bit 0: I) | Send Size (8) | Receive Size (8) |

Sizes are coded as ``size // 1024 - 1`` (1 KiB to 256 KiB). Flag ``I`` (remote invalidation)
says that the *sender of the message* can take a Send With Invalidate. A peer that sends no valid
message (older implementations) gets the version 1 defaults: 1024-byte inline thresholds in both
directions and no remote invalidation.

Where the message is: the RDMA-CM layers below the ULP may hand up private data that carries
other bytes around ours, so the receiver looks for the format identifier at every byte offset and
takes the first occurrence that is followed by a whole message of a version it knows. Occurrences
with another version are skipped (an unknown version is treated as no message).

Settings hold for one connection and are negotiated again on every (re)connect: call
:func:`negotiate` with what the peer sent on that connection.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from .rpcrdma import RPCRDMA_V1_DEF_INLINE_SIZE

RPCRDMA_CMP_FORMAT_IDENTIFIER: Final = 0xF6AB0E18
RPCRDMA_CMP_VERSION: Final = 1
RPCRDMA_CMP_F_SND_W_INV_OK: Final = 0x01  # the "I" bit: Send With Invalidate is welcome
RPCRDMA_CMP_SIZE_UNIT: Final = 1024
RPCRDMA_CMP_MAX_SIZE: Final = 256 * RPCRDMA_CMP_SIZE_UNIT  # 255 coded
RPCRDMA_CMP_MESSAGE_LEN: Final = 8

_MSG: Final = struct.Struct(">IBBBB")
_IDENT: Final = struct.pack(">I", RPCRDMA_CMP_FORMAT_IDENTIFIER)


class PrivateDataError(ValueError):
    """A private data message that cannot be encoded or decoded."""


def encode_size(size: int) -> int:
    """Code a buffer size as RFC 8797 does; sizes that are not whole KiB round down."""
    if size < RPCRDMA_CMP_SIZE_UNIT:
        raise PrivateDataError(f"inline size {size} is below the 1024-byte minimum")
    return min(size, RPCRDMA_CMP_MAX_SIZE) // RPCRDMA_CMP_SIZE_UNIT - 1


def decode_size(code: int) -> int:
    return (code + 1) * RPCRDMA_CMP_SIZE_UNIT


@dataclass(frozen=True, slots=True)
class ConnectPrivateData:
    """One peer's RFC 8797 message: what it can send, what it can receive, remote invalidation."""

    send_size: int = RPCRDMA_V1_DEF_INLINE_SIZE
    recv_size: int = RPCRDMA_V1_DEF_INLINE_SIZE
    remote_invalidation: bool = False
    version: int = RPCRDMA_CMP_VERSION

    def encode(self) -> bytes:
        flags = RPCRDMA_CMP_F_SND_W_INV_OK if self.remote_invalidation else 0
        return _MSG.pack(
            RPCRDMA_CMP_FORMAT_IDENTIFIER,
            self.version,
            flags,
            encode_size(self.send_size),
            encode_size(self.recv_size),
        )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> ConnectPrivateData:
        """Decode a message that starts at ``data[0]``; raises :class:`PrivateDataError`."""
        if len(data) < RPCRDMA_CMP_MESSAGE_LEN:
            raise PrivateDataError(f"private data message needs 8 bytes, got {len(data)}")
        ident, version, flags, send, recv = _MSG.unpack_from(data, 0)
        if ident != RPCRDMA_CMP_FORMAT_IDENTIFIER:
            raise PrivateDataError(f"format identifier {ident:#010x} is not RPC-over-RDMA's")
        if version != RPCRDMA_CMP_VERSION:
            raise PrivateDataError(f"private data message version {version} is not supported")
        return cls(
            send_size=decode_size(send),
            recv_size=decode_size(recv),
            remote_invalidation=bool(flags & RPCRDMA_CMP_F_SND_W_INV_OK),
            version=version,
        )


V1_DEFAULTS: Final = ConnectPrivateData()
"""What a peer that sent no valid message is assumed to support."""


def find_private_data(data: bytes | bytearray | memoryview | None) -> ConnectPrivateData | None:
    """The first valid message anywhere in received private data, or None."""
    if not data:
        return None
    raw = bytes(data)
    start = raw.find(_IDENT)
    while start >= 0:
        try:
            return ConnectPrivateData.decode(raw[start:])
        except PrivateDataError:
            start = raw.find(_IDENT, start + 1)
    return None


@dataclass(frozen=True, slots=True)
class InlineThresholds:
    """The settings of one connection, from our side.

    ``send``: the largest message we may Send (our send size capped by the peer's receive size).
    ``recv``: the largest message the peer may Send us (the peer's send size capped by our
    receive size); our receive buffers must hold it. ``remote_invalidation``: the peer takes
    Send With Invalidate from us. ``peer_sent_message``: the peer's private data held a message.
    """

    send: int = RPCRDMA_V1_DEF_INLINE_SIZE
    recv: int = RPCRDMA_V1_DEF_INLINE_SIZE
    remote_invalidation: bool = False
    peer_sent_message: bool = False


def negotiate(
    ours: ConnectPrivateData, peer_private_data: bytes | bytearray | memoryview | None
) -> InlineThresholds:
    """Thresholds for a connection, from what we advertised and what the peer's private data held.

    Client-to-server: min(client's send size, server's receive size); the reverse likewise.
    Without a valid message the peer gets the version 1 defaults (1024 bytes, no invalidation).
    """
    peer = find_private_data(peer_private_data)
    theirs = peer if peer is not None else V1_DEFAULTS
    return InlineThresholds(
        send=min(ours.send_size, theirs.recv_size),
        recv=min(ours.recv_size, theirs.send_size),
        remote_invalidation=theirs.remote_invalidation,
        peer_sent_message=peer is not None,
    )


__all__ = [
    "RPCRDMA_CMP_FORMAT_IDENTIFIER",
    "RPCRDMA_CMP_F_SND_W_INV_OK",
    "RPCRDMA_CMP_MAX_SIZE",
    "RPCRDMA_CMP_MESSAGE_LEN",
    "RPCRDMA_CMP_VERSION",
    "V1_DEFAULTS",
    "ConnectPrivateData",
    "InlineThresholds",
    "PrivateDataError",
    "decode_size",
    "encode_size",
    "find_private_data",
    "negotiate",
]
