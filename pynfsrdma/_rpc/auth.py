"""RPC credentials: AUTH_NONE and AUTH_SYS (RFC 5531 appendix A), encoded once and reused, and what
a credential needs of the connection its calls go on (:class:`Connection`)."""

from __future__ import annotations

import socket
from functools import lru_cache
from typing import ClassVar, Protocol

from .._proto import rpc as rpcdef
from .._transport.base import NO_HINTS, ProtocolViolation, ReplyHints
from .._xdr import Packer, Unpacker


class Connection(Protocol):
    """What a credential making its own calls uses of an RPC connection (:class:`.client.RpcConnection`)."""

    prog: int
    vers: int

    @property
    def peer(self) -> str: ...

    def next_xid(self) -> int: ...

    def start_call(self, proc: int, cred: Credential) -> tuple[int, Packer]: ...

    async def exchange(self, xid: int, msg: Packer, hints: ReplyHints,
                       timeout: float | None) -> tuple[rpcdef.ReplyHeader, Unpacker]: ...

    async def violated(self, reason: str) -> ProtocolViolation: ...


class Credential:
    """A credential whose wire form (the whole opaque_auth) is computed once."""

    __slots__ = ("encoded", "gid", "gids", "uid")

    # whether the call's header is made when it is sent, by :meth:`call` (RPCSEC_GSS: with a sequence
    # number of that moment, the arguments sealed); otherwise the header is made with the call
    seals_at_send: ClassVar[bool] = False

    def __init__(self, encoded: bytes, uid: int | None = None, gid: int | None = None,
                 gids: tuple[int, ...] = ()) -> None:
        self.encoded = encoded
        self.uid = uid
        self.gid = gid
        self.gids = gids

    def __repr__(self) -> str:
        if self.uid is None:
            return "Credential(AUTH_NONE)"
        return f"Credential(AUTH_SYS uid={self.uid} gid={self.gid} gids={list(self.gids)})"

    async def call(self, conn: Connection, xid: int, proc: int, args: Packer,
                   hints: ReplyHints = NO_HINTS, timeout: float | None = None) -> Unpacker:
        """Send the call ``args`` of ``proc`` on ``conn``; its results. Here the header is in
        ``args`` already (:meth:`Connection.start_call` put it there)."""
        return (await conn.exchange(xid, args, hints, timeout))[1]

    async def destroy(self, conn: Connection) -> None:
        """Have the server forget what it keeps for this credential: AUTH_NONE and AUTH_SYS leave
        nothing there."""


AUTH_NONE_CRED = Credential(rpcdef.opaque_auth.XDR.encode(rpcdef.NULL_AUTH))

_MACHINE = socket.gethostname()[: rpcdef.AUTH_SYS_MAX_MACHINENAME]


@lru_cache(maxsize=1024)
def auth_sys(uid: int, gid: int, gids: tuple[int, ...] = (), machinename: str = _MACHINE) -> Credential:
    """An AUTH_SYS credential. More than 16 supplementary groups are cut to the first 16, as the
    protocol allows no more."""
    gids = tuple(gids[: rpcdef.AUTH_SYS_MAX_GIDS])
    parms = rpcdef.authsys_parms(0, machinename, uid, gid, list(gids))
    return Credential(rpcdef.encode_auth_sys(parms), uid, gid, gids)
