"""The flexfiles layout's data servers (RFC 8435 section 2): NFSv3 (RFC 1813) READ, WRITE and COMMIT over
a TCP connection of their own per data server address, with AUTH_SYS as the layout's synthetic uid and
gid. A data server's answer other than NFS3_OK, a connection that cannot be made or fails, and a call
that times out are each a :class:`DataServerError`, which the layout's I/O turns into LAYOUTERROR and
I/O through the metadata server."""

from __future__ import annotations

import logging
from typing import Any

import trio

from .._proto import nfs3
from .._proto.nfs4.types_base import netaddr4
from .._rpc.auth import auth_sys
from .._rpc.client import RpcConnection
from .._rpc.errors import RpcReplyError
from .._transport.base import NO_HINTS, ReplyHints, TransportError
from .._transport.tcp import TcpTransport
from .._xdr import XdrError

log = logging.getLogger(__name__)

CALL_TIMEOUT = 60.0  # seconds a data server may take to answer one call
CONNECT_TIMEOUT = 10.0


class DataServerError(OSError):
    """A READ, WRITE or COMMIT to a data server failed: ``status`` is its NFSv3 status (None: the
    connection failed or the call timed out)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def host_port(addr: netaddr4) -> tuple[str, int]:
    """A netaddr4's host and port (RFC 5665 universal address: the host, then the port's two bytes)."""
    if addr.na_r_netid not in ("tcp", "tcp6"):
        raise ValueError(f"data server netid {addr.na_r_netid!r}: only tcp and tcp6 are spoken here")
    host, hi, lo = addr.na_r_addr.rsplit(".", 2)
    return host, int(hi) * 256 + int(lo)


class DataServers:
    """One connection per data server address, made when first used and kept for the client's life."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.conns: dict[tuple[str, int], RpcConnection] = {}
        self.locks: dict[tuple[str, int], trio.Lock] = {}

    async def _conn(self, where: tuple[str, int]) -> RpcConnection:
        conn = self.conns.get(where)
        if conn is not None and conn.alive:
            return conn
        lock = self.locks.setdefault(where, trio.Lock())
        async with lock:
            conn = self.conns.get(where)
            if conn is not None and conn.alive:
                return conn
            try:
                transport = await TcpTransport.connect(where[0], where[1], timeout=CONNECT_TIMEOUT)
            except TransportError as e:
                raise DataServerError(f"data server {where[0]}:{where[1]}: {e}") from e
            conn = RpcConnection(transport, nfs3.NFS_PROGRAM, nfs3.NFS_V3)
            await self.nursery.start(conn.run)
            self.conns[where] = conn
            return conn

    async def _call(self, where: tuple[str, int], proc: int, uid: int, gid: int, args: Any,
                    hints: ReplyHints | None = None) -> Any:
        conn = await self._conn(where)
        xid, p = conn.start_call(proc, auth_sys(uid, gid))
        type(args).XDR.pack(p, args)
        try:
            return await conn.call_packed(xid, p, hints or NO_HINTS, timeout=CALL_TIMEOUT)
        except (TransportError, RpcReplyError) as e:
            raise DataServerError(f"data server {where[0]}:{where[1]}: {e}") from e

    @staticmethod
    def _check(where: tuple[str, int], what: str, res: tuple[int, Any]) -> Any:
        status, body = res
        if status != nfs3.nfsstat3.NFS3_OK:
            raise DataServerError(f"data server {where[0]}:{where[1]}: {what}: {nfs3.status_name(status)}", status)
        return body

    async def read(self, where: tuple[str, int], fh: bytes, offset: int, count: int, uid: int,
                   gid: int) -> tuple[memoryview, bool]:
        """READ: (the data, a view of the reply; eof)."""
        u = await self._call(where, nfs3.nfsproc3.NFSPROC3_READ, uid, gid, nfs3.READ3args(fh, offset, count),
                             ReplyHints(ddp_sizes=[count]))
        try:
            ok = self._check(where, "READ", nfs3.READ3res.unpack(u))
        except XdrError as e:
            raise DataServerError(f"data server {where[0]}:{where[1]}: READ reply: {e}") from e
        return ok.data, bool(ok.eof)

    async def write(self, where: tuple[str, int], fh: bytes, offset: int, data: Any, stable: int, uid: int,
                    gid: int) -> tuple[int, int, bytes]:
        """WRITE (the data sent by reference): (count, committed, verifier)."""
        n = memoryview(data).nbytes
        u = await self._call(where, nfs3.nfsproc3.NFSPROC3_WRITE, uid, gid,
                             nfs3.WRITE3args(fh, offset, n, stable, data))
        try:
            ok = self._check(where, "WRITE", nfs3.WRITE3res.unpack(u))
        except XdrError as e:
            raise DataServerError(f"data server {where[0]}:{where[1]}: WRITE reply: {e}") from e
        if ok.count < n:
            raise DataServerError(f"data server {where[0]}:{where[1]}: WRITE wrote {ok.count} of {n} bytes")
        return int(ok.count), int(ok.committed), bytes(ok.verf)

    async def commit(self, where: tuple[str, int], fh: bytes, uid: int, gid: int) -> bytes:
        """COMMIT of the whole file: its write verifier."""
        u = await self._call(where, nfs3.nfsproc3.NFSPROC3_COMMIT, uid, gid, nfs3.COMMIT3args(fh, 0, 0))
        try:
            ok = self._check(where, "COMMIT", nfs3.COMMIT3res.unpack(u))
        except XdrError as e:
            raise DataServerError(f"data server {where[0]}:{where[1]}: COMMIT reply: {e}") from e
        return bytes(ok.verf)

    async def aclose(self) -> None:
        for conn in self.conns.values():
            with trio.CancelScope(shield=True):
                await conn.aclose()
        self.conns.clear()

