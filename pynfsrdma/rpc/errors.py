"""Errors of the RPC layer: the server answered the RPC itself with an error, or did not answer."""

from __future__ import annotations

from ..proto.rpc import ReplyHeader
from ..transport.base import TransportError


class RpcTimeout(TransportError):
    """No reply came within the call's timeout (the path may be stalled)."""


class RpcReplyError(Exception):
    """An RPC-level error reply (program unavailable, version mismatch, auth error, garbage args)."""

    def __init__(self, message: str, peer: str | None = None, header: ReplyHeader | None = None) -> None:
        super().__init__(f"{peer}: {message}" if peer else message)
        self.peer = peer
        self.header = header
