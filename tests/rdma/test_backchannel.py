"""The NFSv4.1 backchannel over RPC-over-RDMA: server CALLs relayed to the client, replies back.

NFS-Ganesha here sends no callbacks on its own: it sends no CB_NULL after CREATE_SESSION with
CREATE_SESSION4_FLAG_CONN_BACK_CHAN (checked with a capture), and its VFS backend grants no
delegations to recall (an OPEN with OPEN4_SHARE_ACCESS_WANT_READ_DELEG gets WND4_NOT_SUPP_FTYPE
even with ``Delegations = true``). So the callbacks come from a record-marking proxy between the
responder and Ganesha, which forwards everything and, asked to, puts a CB_NULL or a CB_COMPOUND
(CB_SEQUENCE on the client's real session) on the server's TCP connection, where Ganesha's own
would go, and takes the reply off the same connection.
"""

from __future__ import annotations

import struct

import trio
from test_end_to_end import rdma_url, responder, transport_of

from pynfsrdma._client.api import Client
from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto.nfs4 import callback as cb
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._rpc.auth import AUTH_NONE_CRED
from pynfsrdma._xdr import Packer, Unpacker

_MARK = struct.Struct(">I")
_LAST = 0x80000000


async def _record(stream: trio.SocketStream) -> bytes:
    out = bytearray()
    while True:
        head = await _exactly(stream, 4)
        (mark,) = _MARK.unpack(head)
        out += await _exactly(stream, mark & ~_LAST)
        if mark & _LAST:
            return bytes(out)


async def _exactly(stream: trio.SocketStream, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.receive_some(n - len(buf))
        if not chunk:
            raise trio.EndOfChannel
        buf += chunk
    return bytes(buf)


class CallbackProxy:
    """Between the responder (client side) and Ganesha: forwards records both ways; ``call``
    sends one callback CALL towards the responder and returns the reply that comes back."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._to_client: trio.SocketStream | None = None
        self._send_lock = trio.Lock()
        self._waiting: dict[int, trio.MemorySendChannel[bytes]] = {}
        self.connected = trio.Event()

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listener.socket.getsockname()[1]
        task_status.started()
        async with listener:
            client = await listener.accept()
        server = await trio.open_tcp_stream(*self.target)
        self._to_client = client
        self.connected.set()
        async with client, server, trio.open_nursery() as n:
            n.start_soon(self._server_to_client, server, client)
            n.start_soon(self._client_to_server, client, server)

    async def _server_to_client(self, server: trio.SocketStream, client: trio.SocketStream) -> None:
        while True:
            rec = await _record(server)
            async with self._send_lock:
                await client.send_all(_MARK.pack(_LAST | len(rec)) + rec)

    async def _client_to_server(self, client: trio.SocketStream, server: trio.SocketStream) -> None:
        while True:
            rec = await _record(client)
            xid, mtype = struct.unpack_from(">II", rec)
            if mtype == rpcdef.REPLY and xid in self._waiting:
                self._waiting.pop(xid).send_nowait(rec)  # the reply to our callback
                continue
            await server.send_all(_MARK.pack(_LAST | len(rec)) + rec)

    async def call(self, xid: int, proc: int, args: bytes = b"") -> Unpacker:
        p = Packer()
        rpcdef.pack_call_header(p, xid, c.CB_PROGRAM, 1, proc, AUTH_NONE_CRED.encoded)
        msg = p.getvalue() + args
        tx, rx = trio.open_memory_channel[bytes](1)
        self._waiting[xid] = tx
        assert self._to_client is not None
        async with self._send_lock:
            await self._to_client.send_all(_MARK.pack(_LAST | len(msg)) + msg)
        with trio.fail_after(10):
            u = Unpacker(await rx.receive())
        assert (u.uint32(), u.uint32()) == (xid, rpcdef.REPLY)
        h = rpcdef.unpack_reply_header(u)
        assert h.denied is None and h.accept == rpcdef.SUCCESS, rpcdef.describe(h)
        return u


async def test_callbacks_travel_over_rdma_to_the_backchannel_and_back(ganesha, export_path):
    async with trio.open_nursery() as nursery:
        proxy = CallbackProxy((ganesha.host, ganesha.port))
        await nursery.start(proxy.serve)

        class Target:
            host = "127.0.0.1"
            port = proxy.port

        async with responder(Target) as r, Client.connect(rdma_url(r, export_path)) as nfs:
            await proxy.connected.wait()
            bc = nfs.clientid.backchannel
            session = nfs.clientid.session
            assert session is not None
            t = transport_of(nfs)

            u = await proxy.call(0xCB000001, c.CB_NULL)
            u.done()
            p = Packer()
            cb.encode_cb_compound_args(
                p,
                cb.CB_COMPOUND4args(
                    "rdma", 1, 0, [cb.CB_SEQUENCE4args(session.sessionid, 1, 0, 0, False, [])]
                ),
            )
            res = cb.decode_cb_compound_res(await proxy.call(0xCB000002, c.CB_COMPOUND, p.getvalue()))
            assert res.status == c.NFS4_OK and res.tag == "rdma"
            assert [op.opnum for op in res.resarray] == [c.OP_CB_SEQUENCE]
            assert res.resarray[0].res.csr_sessionid == session.sessionid

            assert bc.calls == 2  # both reached the client's backchannel ...
            assert t.stats.callbacks == 2  # ... as RDMA_MSG CALLs on the RDMA connection
            # and the fore channel still works on the same connection
            await nfs.write_file("/after", b"x" * 10000)
            assert await nfs.read_file("/after") == b"x" * 10000
        s = r.stats
        assert (s.callbacks_relayed, s.callback_replies_relayed) == (2, 2)
        assert s.rdma_errors_sent == 0
        nursery.cancel_scope.cancel()
