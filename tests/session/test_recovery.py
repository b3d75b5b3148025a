"""Session loss and server restarts against a real NFS-Ganesha: what the user sees is that the work
goes on, and nothing acknowledged is lost. Servers that are not there, or not NFSv4.1, give a clear
error within seconds."""

from __future__ import annotations

import errno
import socket

import pytest
import trio
import trio.testing

from pynfsrdma._client.api import Client
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import COMPOUND4args, decode_compound_res, encode_compound_args
from pynfsrdma._proto.nfs4.types import BIND_CONN_TO_SESSION4args, DESTROY_SESSION4args
from pynfsrdma._rpc.auth import auth_sys
from pynfsrdma._rpc.client import RpcConnection
from pynfsrdma._session.errors import NotNFSv41Server, ServerUnreachable
from pynfsrdma._session.path_set import REDIAL_WAITED
from pynfsrdma._session.recovery import _SingleFlight
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._transport.base import ConnectRefused
from pynfsrdma._transport.tcp import TcpTransport


async def destroy_session_from_elsewhere(server: Ganesha, sessionid: bytes) -> int:
    t = await TcpTransport.connect(server.host, server.port)
    conn = RpcConnection(t, c.NFS4_PROGRAM, c.NFS_V4)
    async with trio.open_nursery() as n:
        await n.start(conn.run)
        statuses = []
        # a connection must be bound to the session before it may destroy it
        for op in (BIND_CONN_TO_SESSION4args(sessionid, c.CDFC4_FORE, False), DESTROY_SESSION4args(sessionid)):
            xid, p = conn.start_call(c.NFSPROC4_COMPOUND, auth_sys(0, 0))
            encode_compound_args(p, COMPOUND4args("", 1, [op]))
            statuses.append(decode_compound_res(await conn.call_packed(xid, p, timeout=10)).status)
        n.cancel_scope.cancel()
    return max(statuses)


async def test_a_session_destroyed_behind_our_back_is_replaced(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(f"{ganesha.url.rsplit('/', 1)[0]}{export_path.remote}") as nfs:
        await nfs.write_file("/f", b"before")
        session = nfs.clientid.session
        assert session is not None
        assert await destroy_session_from_elsewhere(ganesha, session.sessionid) == c.NFS4_OK
        # the next calls meet BADSESSION, a new session is made, and they complete
        async with trio.open_nursery() as n:
            for _ in range(10):
                n.start_soon(nfs.stat, "/f")
        assert await nfs.read_file("/f") == b"before"
        assert nfs.clientid.session is not None
        assert nfs.clientid.session.sessionid != session.sessionid
        assert nfs.clientid.recoveries == 1  # one recovery for all the calls that saw the loss


async def test_server_restart_with_grace_reclaims_open_files(ganesha_factory, tmp_path) -> None:
    server: Ganesha = ganesha_factory(grace=4, lease=10)
    ep = server.new_directory()
    url = f"nfs://{server.host}:{server.port}{ep.remote}"
    async with Client.connect(url, hard=True, timeo=5) as nfs:
        f = await nfs.open("/data", "w")
        await f.write(b"A" * 100_000)
        await f.fsync()
        await trio.to_thread.run_sync(server.restart)  # state is gone; the server is in grace
        await f.write(b"B" * 100_000)  # BADSESSION/STALE_CLIENTID -> new client ID, reclaim, go on
        await f.close()
        assert nfs.nfs.reclaimed == 1  # the open was reclaimed with CLAIM_PREVIOUS during grace
        assert nfs.clientid.recoveries >= 1
        assert await nfs.read_file("/data") == b"A" * 100_000 + b"B" * 100_000
    assert (ep.local / "data").read_bytes() == b"A" * 100_000 + b"B" * 100_000


async def test_a_request_made_when_the_server_is_back_is_not_held_by_the_reconnect_backoff(
    ganesha_factory,
) -> None:
    """Down for seconds, the path's reconnect attempts are seconds apart; a request that waits for the
    path makes them come every REDIAL_WAITED, so a soft mount's request made just after the server
    returns is answered, not failed after its timeout (2 s here) while the backoff sleeps on."""
    server: Ganesha = ganesha_factory()
    ep = server.new_directory()
    url = f"nfs://{server.host}:{server.port}{ep.remote}"
    async with Client.connect(url, hard=False, timeo=1.0, retrans=1) as nfs:
        await nfs.write_file("/f", b"kept")
        await trio.to_thread.run_sync(server.stop)
        await trio.sleep(3.5)  # attempts after 0.1, 0.3, 0.7, 1.5, 3.1 s: the next one 3.2 s later
        await trio.to_thread.run_sync(server.start)
        with trio.fail_after(REDIAL_WAITED + 1.5):
            assert await nfs.read_file("/f") == b"kept"


async def test_nothing_listening_fails_at_once() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with trio.fail_after(5):
        with pytest.raises(ConnectRefused, match=f"127.0.0.1:{port}: .*refused"):
            async with Client.connect(f"nfs://127.0.0.1:{port}/export"):
                pass


async def test_a_silent_server_fails_within_the_timeout() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)  # accepts connections, never answers
    port = listener.getsockname()[1]
    try:
        with trio.fail_after(10):
            with pytest.raises(ServerUnreachable, match=r"no NFSv4\.1 answer within 2 s"):
                async with Client.connect(f"nfs://127.0.0.1:{port}/export", timeout=2):
                    pass
    finally:
        listener.close()


async def test_a_server_that_is_not_nfs_gives_a_clear_error() -> None:
    async def http(stream: trio.SocketStream) -> None:
        await stream.receive_some(4096)
        await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await trio.sleep(30)

    async with trio.open_nursery() as n:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        n.start_soon(trio.serve_listeners, http, listeners)
        with trio.fail_after(10):
            with pytest.raises((NotNFSv41Server, OSError), match=r"not an RPC server|NFS"):
                async with Client.connect(f"nfs://127.0.0.1:{port}/export", timeout=3):
                    pass
        n.cancel_scope.cancel()


async def test_an_nfsv4_0_only_server_is_named_as_such(ganesha_factory) -> None:
    server: Ganesha = ganesha_factory(minor_versions=(0,))
    with trio.fail_after(10):
        with pytest.raises(NotNFSv41Server, match=r"does not support NFSv4\.1"):
            async with Client.connect(server.url, timeout=5):
                pass


async def test_vers_4_2_against_a_4_1_only_server_names_the_version(ganesha_factory) -> None:
    server: Ganesha = ganesha_factory(minor_versions=(1,))
    with trio.fail_after(10):
        with pytest.raises(NotNFSv41Server, match=r"does not support NFSv4\.2 \(NFS4ERR_MINOR_VERS_MISMATCH\)"):
            async with Client.connect(f"{server.url}?vers=4.2", timeout=5):
                pass
        async with Client.connect(server.url, timeout=5) as nfs:  # 4.1 is fine there
            await nfs.write_file("/f", b"4.1")



async def _rewriting_proxy(listen: trio.SocketListener, target_port: int, commits: list[int],
                           restarts: int = 1) -> None:
    """Forward RPC records both ways; in replies, give the first ``restarts`` successful COMMITs a
    write verifier of their own (as a server that restarted and lost unstable data would)."""
    from pynfsrdma._proto import rpc as rpcdef
    from pynfsrdma._proto.nfs4.compound import encode_compound_res
    from pynfsrdma._xdr import Packer, Unpacker

    async def records(stream: trio.SocketStream):  # type: ignore[no-untyped-def]
        buf = b""
        while True:
            while len(buf) < 4 or len(buf) < 4 + (int.from_bytes(buf[:4], "big") & 0x7FFFFFFF):
                chunk = await stream.receive_some(1 << 20)
                if not chunk:
                    return
                buf += chunk
            n = int.from_bytes(buf[:4], "big") & 0x7FFFFFFF
            yield buf[4 : 4 + n]
            buf = buf[4 + n :]

    def frame(msg: bytes) -> bytes:
        return (0x80000000 | len(msg)).to_bytes(4, "big") + msg

    def tamper(msg: bytes) -> bytes:
        u = Unpacker(msg)
        u.uint32()  # xid
        mtype = u.uint32()
        if mtype != rpcdef.REPLY:
            return msg
        h = rpcdef.unpack_reply_header(u)
        if h.accept != rpcdef.SUCCESS:
            return msg
        header_end = u.pos
        res = decode_compound_res(u)
        changed = False
        for r in res.resarray:
            if r.opnum == c.OP_COMMIT and r.status == c.NFS4_OK:
                commits.append(1)
                if len(commits) <= restarts:
                    r.res.writeverf = (0xFFFF0000 + len(commits)).to_bytes(8, "big")
                    changed = True
        if not changed:
            return msg
        p = Packer()
        encode_compound_res(p, res)
        return msg[:header_end] + p.getvalue()

    async def serve(client: trio.SocketStream) -> None:
        server = await trio.open_tcp_stream("127.0.0.1", target_port)
        async with trio.open_nursery() as n:

            async def up() -> None:
                async for rec in records(client):
                    await server.send_all(frame(rec))
                n.cancel_scope.cancel()

            async def down() -> None:
                async for rec in records(server):
                    await client.send_all(frame(tamper(rec)))
                n.cancel_scope.cancel()

            n.start_soon(up)
            n.start_soon(down)

    await trio.serve_listeners(serve, [listen])


async def test_unstable_writes_are_resent_when_the_write_verifier_changes(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    """COMMIT answers with a verifier other than the WRITEs' (the server restarted and may have lost
    the unstable data): the client sends the data again and nothing is lost."""
    commits: list[int] = []
    async with trio.open_nursery() as n:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        n.start_soon(_rewriting_proxy, listeners[0], ganesha.port, commits)
        async with Client.connect(f"nfs://127.0.0.1:{port}{export_path.remote}", wsize=256 * 1024) as nfs:
            f = await nfs.open("/data", "w")
            payload = bytes(range(256)) * 4096
            await f.write(payload)  # four WRITEs acknowledged UNSTABLE, not yet committed
            await f.close()  # COMMIT's verifier differs from the WRITEs': they go again, and a COMMIT
            assert f.rewrites == 4
            assert len(commits) == 2
        n.cancel_scope.cancel()
    assert (export_path.local / "data").read_bytes() == payload


async def test_a_server_that_keeps_losing_unstable_writes_fails_the_close(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    """Every COMMIT answers with a new write verifier (a server that restarts after each): the data
    goes again a few times, then close says EIO naming the file, rather than report it stored."""
    commits: list[int] = []
    async with trio.open_nursery() as n:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        n.start_soon(_rewriting_proxy, listeners[0], ganesha.port, commits, 1 << 30)
        async with Client.connect(f"nfs://127.0.0.1:{port}{export_path.remote}", wsize=256 * 1024) as nfs:
            f = await nfs.open("/data", "w")
            await f.write(bytes(1 << 20))
            with pytest.raises(OSError) as e:
                await f.close()
            assert e.value.errno == errno.EIO and e.value.filename == "/data"
            assert "write verifier kept changing" in str(e.value)
            assert 2 <= len(commits) <= 4 and f.rewrites >= 4
        n.cancel_scope.cancel()


async def test_the_recovery_lock_stays_held_for_the_task_it_is_handed_to() -> None:
    """A request that finds the recovery lock held waits for it. When a recovery lets it go to a task
    waiting for it, it is that task's before that task runs: a request coming in between must still
    find it held (and wait), not go ahead of a recovery still to run."""
    single = _SingleFlight()
    order: list[str] = []

    async def second_recovery() -> None:
        async with single:
            order.append("second")

    async with trio.open_nursery() as nursery:
        await single.__aenter__()
        nursery.start_soon(second_recovery)
        await trio.testing.wait_all_tasks_blocked()
        await single.__aexit__(None, None, None)  # (no checkpoint: the waiter has not run yet)
        assert single.held and order == []
    assert order == ["second"] and not single.held
