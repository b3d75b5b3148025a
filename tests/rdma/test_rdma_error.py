"""RDMA_ERROR from the responder: ERR_CHUNK fails one call and nothing else, ERR_VERS the connection.

Through the responder (forced with ``refuse_calls``) to NFS-Ganesha over the software provider.
"""

from __future__ import annotations

import errno
import hashlib

import pytest
import trio
from test_end_to_end import data_of, rdma_url, responder, transport_of

from pynfsrdma._client.api import Client
from pynfsrdma._proto.nfs4.const import NFS4_PROGRAM, NFS_V4
from pynfsrdma._proto.rpcrdma import ERR_VERS
from pynfsrdma._rpc.auth import AUTH_NONE_CRED
from pynfsrdma._rpc.client import RpcConnection
from pynfsrdma._transport.base import CallFailed
from pynfsrdma._transport.rdma import connect_rdma
from pynfsrdma._transport.rdma.soft import SoftConnection
from pynfsrdma._transport.rdma.transport import RdmaTransport, RdmaVersionMismatch

MiB = 1 << 20
NULLPROC = 0


async def _rpc(port: int, nursery: trio.Nursery) -> tuple[RpcConnection, RdmaTransport]:
    t = await connect_rdma("127.0.0.1", port, options={"provider": "soft"})
    assert isinstance(t, RdmaTransport)
    rpc = RpcConnection(t, NFS4_PROGRAM, NFS_V4)
    await nursery.start(rpc.run)
    return rpc, t


async def test_err_chunk_fails_that_call_only(ganesha):
    async with responder(ganesha) as r, trio.open_nursery() as nursery:
        rpc, t = await _rpc(r.port, nursery)
        conn = t.conn
        assert isinstance(conn, SoftConnection)
        await rpc.call(NULLPROC, AUTH_NONE_CRED)
        r.refuse_calls(count=1, after=1)
        outcomes: dict[int, str] = {}

        async def one(i: int) -> None:
            try:
                await rpc.call(NULLPROC, AUTH_NONE_CRED)
                outcomes[i] = "ok"
            except CallFailed as e:
                assert "ERR_CHUNK" in str(e)
                outcomes[i] = "refused"

        async with trio.open_nursery() as n:
            for i in range(4):
                n.start_soon(one, i)
        assert sorted(outcomes.values()) == ["ok", "ok", "ok", "refused"]
        # the connection lives on: the next call works, nothing leaked, every credit is back
        assert rpc.alive
        await rpc.call(NULLPROC, AUTH_NONE_CRED)
        assert t.stats.rdma_errors == 1 and r.stats.rdma_errors_sent == 1
        assert r.accepted == 1
        assert t.gate.in_flight == 0
        assert conn.registrations == t.resting_registrations
        await t.aclose()
        nursery.cancel_scope.cancel()


async def test_err_chunk_in_a_transfer_is_resent_by_the_session(ganesha, export_path):
    data = data_of(3 * MiB, 7)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        session = nfs.clientid.session
        assert session is not None
        resends = session.resends
        r.refuse_calls(count=1, after=2)  # the third call of the WRITE never reaches the server
        await nfs.write_file("/f", data)
        assert (export_path.local / "f").read_bytes() == data
        r.refuse_calls(count=1, after=1)
        got = await nfs.read_file("/f")
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
        assert session.resends - resends == 2  # each refused request was sent once more
        assert r.accepted == 1  # on the same connection
        assert transport_of(nfs).stats.rdma_errors == 2


async def test_a_request_refused_every_time_fails_with_eio_instead_of_looping(ganesha, export_path):
    """ERR_CHUNK once may be a passing fault (the request goes again); the same request refused
    again fails with EIO, even on a hard mount, and the connection stays usable."""
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path), hard=True) as nfs:
        await nfs.write_file("/f", b"kept")
        r.refuse_calls(count=2)
        with trio.fail_after(20):
            with pytest.raises(OSError) as ei:
                await nfs.stat("/f")
        assert ei.value.errno == errno.EIO and "refused again" in str(ei.value)
        assert await nfs.read_file("/f") == b"kept"  # the slot and the connection go on
        assert r.accepted == 1


async def test_err_vers_kills_the_connection_with_a_clear_message(ganesha):
    async with responder(ganesha) as r, trio.open_nursery() as nursery:
        rpc, t = await _rpc(r.port, nursery)
        r.refuse_calls(count=1, error=ERR_VERS)
        with pytest.raises(RdmaVersionMismatch, match=r"ERR_VERS: it offers RPC-over-RDMA versions 1\.\.1"):
            await rpc.call(NULLPROC, AUTH_NONE_CRED)
        with trio.fail_after(5):
            while rpc.alive:
                await trio.sleep(0.01)
        with pytest.raises(RdmaVersionMismatch):
            await rpc.call(NULLPROC, AUTH_NONE_CRED)
        await t.aclose()
        nursery.cancel_scope.cancel()
