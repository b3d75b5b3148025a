"""RPC credentials: AUTH_NONE and AUTH_SYS (RFC 5531 appendix A), encoded once and reused."""

from __future__ import annotations

import socket
from functools import lru_cache

from .._proto import rpc as rpcdef


class Credential:
    """A credential whose wire form (the whole opaque_auth) is computed once."""

    __slots__ = ("encoded", "gid", "gids", "uid")

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


AUTH_NONE_CRED = Credential(rpcdef.opaque_auth.XDR.encode(rpcdef.NULL_AUTH))

_MACHINE = socket.gethostname()[: rpcdef.AUTH_SYS_MAX_MACHINENAME]


@lru_cache(maxsize=1024)
def auth_sys(uid: int, gid: int, gids: tuple[int, ...] = (), machinename: str = _MACHINE) -> Credential:
    """An AUTH_SYS credential. More than 16 supplementary groups are cut to the first 16, as the
    protocol allows no more."""
    gids = tuple(gids[: rpcdef.AUTH_SYS_MAX_GIDS])
    parms = rpcdef.authsys_parms(0, machinename, uid, gid, list(gids))
    return Credential(rpcdef.encode_auth_sys(parms), uid, gid, gids)
