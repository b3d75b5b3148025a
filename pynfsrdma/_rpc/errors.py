"""Errors of the RPC layer: the server answered the RPC itself with an error, or did not answer."""

from __future__ import annotations

import errno

from .._errors import ReplyError
from .._proto import rpc as rpcdef
from .._proto.rpc import ReplyHeader
from .._transport.base import TransportError


class RpcTimeout(TransportError):
    """No reply came within the call's timeout (the path may be stalled)."""

    ERRNO = errno.ETIMEDOUT


def _errno_for(h: ReplyHeader | None) -> int:
    """EACCES for an authentication error, EPROTONOSUPPORT when the server does not serve the program,
    version or procedure, EIO otherwise (GARBAGE_ARGS, SYSTEM_ERR)."""
    if h is None:
        return errno.EIO
    if h.denied == rpcdef.AUTH_ERROR:
        return errno.EACCES
    if h.denied == rpcdef.RPC_MISMATCH or h.accept in _UNSERVED:
        return errno.EPROTONOSUPPORT
    return errno.EIO


_UNSERVED = frozenset({rpcdef.accept_stat.PROG_UNAVAIL, rpcdef.accept_stat.PROG_MISMATCH,
                       rpcdef.accept_stat.PROC_UNAVAIL})


class RpcReplyError(ReplyError):
    """An RPC-level error reply (program unavailable, version mismatch, auth error, garbage args, system
    error): an OSError naming the server (``peer``), with the RPC reply header in ``header``."""

    def __init__(self, message: str, peer: str | None = None, header: ReplyHeader | None = None) -> None:
        super().__init__(message, peer, err=_errno_for(header))
        self.peer = peer
        self.header = header
