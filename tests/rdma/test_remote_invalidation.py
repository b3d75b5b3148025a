"""Remote invalidation (RFC 8797 "I" bit, Send With Invalidate) from advertisement to retirement.

The end-to-end tests go through the responder to NFS-Ganesha over the software provider, whose
connection counts registrations alive and every local, remote and double invalidation.
"""

from __future__ import annotations

import hashlib

import pytest
import trio
from test_end_to_end import data_of, rdma_url, responder, transport_of

from pynfsrdma._client.api import Client
from pynfsrdma._proto.private_data import ConnectPrivateData, find_private_data, negotiate
from pynfsrdma._proto.rpcrdma import (
    RDMA_MSG,
    RDMA_NOMSG,
    decode_rdma_msg,
    encode_rdma_msg,
    make_msg,
    xdr_rdma_segment,
    xdr_write_chunk,
)
from pynfsrdma._testbed.responder_chunks import choose_invalidation
from pynfsrdma._transport.base import ProtocolViolation, ReplyHints, TransportError
from pynfsrdma._transport.rdma import connect_rdma
from pynfsrdma._transport.rdma.provider import Access, RemoteAccessError
from pynfsrdma._transport.rdma.soft import SoftConnection, SoftProvider
from pynfsrdma._transport.rdma.transport import RdmaTransport
from pynfsrdma._xdr import Packer

MiB = 1 << 20


def _seg(handle: int, length: int = 100) -> xdr_rdma_segment:
    return xdr_rdma_segment(handle, length, 0x1000 * handle)


def test_choose_invalidation_prefers_the_reply_chunk_then_the_first_written_write_chunk():
    w = [xdr_write_chunk([]), xdr_write_chunk([_seg(7, 0)]), xdr_write_chunk([_seg(8)])]
    assert choose_invalidation(make_msg(1, 8, RDMA_NOMSG, [], w, xdr_write_chunk([_seg(9)]))) == 9
    assert choose_invalidation(make_msg(1, 8, RDMA_MSG, [], w, None)) == 7
    assert choose_invalidation(make_msg(1, 8, RDMA_MSG, [], [xdr_write_chunk([])], None)) is None
    assert choose_invalidation(make_msg(1, 8, RDMA_MSG)) is None


async def test_the_client_advertises_what_the_provider_can_do(ganesha):
    async with responder(ganesha) as r:
        for option, advertised in ((None, True), ("1", True), ("0", False)):
            opts = {"provider": "soft"} | ({} if option is None else {"remote_invalidation": option})
            t = await connect_rdma("127.0.0.1", r.port, options=opts)
            assert isinstance(t, RdmaTransport)
            try:
                assert t.accepts_remote_invalidation is advertised
                with trio.fail_after(5):
                    while not r.connections:
                        await trio.sleep(0.01)
                (rc,) = [c for c in r.connections if not c.closed]
                pd = find_private_data(rc.conn.peer_private_data)
                assert pd is not None and pd.remote_invalidation is advertised
                assert rc.remote_invalidation is advertised
            finally:
                await t.aclose()
            with trio.fail_after(5):
                while r.connections:
                    await trio.sleep(0.01)
        with pytest.raises(ValueError, match="remote_invalidation"):
            await connect_rdma(
                "127.0.0.1", r.port, options={"provider": "soft", "remote_invalidation": "yes"}
            )


async def _workload(nfs: Client, export_path, rounds: int) -> None:
    data = data_of(2 * MiB + 777, 5)
    for i in range(rounds):
        await nfs.write_file(f"/f{i}", data)  # Read chunks: the client invalidates them itself
        got = await nfs.read_file(f"/f{i}")  # Write chunks
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
        assert sorted(await nfs.listdir("/many")) == sorted(  # Reply chunks
            p.name for p in (export_path.local / "many").iterdir()
        )


@pytest.mark.parametrize("reminv", [True, False])
async def test_each_registration_is_invalidated_once_and_released(ganesha, export_path, reminv):
    (export_path.local / "many").mkdir()
    for i in range(250):
        (export_path.local / "many" / f"name-{i:04d}-{'x' * 50}").write_bytes(b"")
    async with responder(ganesha) as r:
        url = rdma_url(r, export_path, remote_invalidation=int(reminv))
        async with Client.connect(url) as nfs:
            t = transport_of(nfs)
            conn = t.conn
            assert isinstance(conn, SoftConnection)
            alive_at_start = conn.registrations
            await _workload(nfs, export_path, rounds=3)
            st = t.stats
            chunk_regions = st.read_chunk_segments + st.write_chunks + st.reply_chunks
            # no leak: every call's windows are gone again, only the send and receive buffers
            # and the chunk memory kept registered stay
            assert conn.registrations == t.resting_registrations > alive_at_start
            # no double invalidation, and every region was invalidated exactly once
            assert conn.double_invalidations == 0
            assert conn.local_invalidations + conn.remote_invalidations == chunk_regions
            assert st.remote_invalidations == conn.remote_invalidations
            assert r.stats.sends_with_invalidate == st.remote_invalidations
            if reminv:
                # every reply that named a Write or Reply chunk retired one of them remotely
                assert st.remote_invalidations >= 3 * 2 + 3  # READs (Write chunks), READDIRs
                assert conn.local_invalidations >= st.read_chunk_segments
            else:
                assert st.remote_invalidations == 0 and conn.remote_invalidations == 0


async def test_soft_send_with_invalidate_only_reaches_remotely_accessible_regions():
    prov = SoftProvider()
    async with trio.open_nursery() as nursery:
        lst = await prov.listen(nursery, "127.0.0.1", 0, b"")
        box: dict[str, SoftConnection] = {}

        async def acc() -> None:
            c = await lst.accept()
            assert isinstance(c, SoftConnection)
            box["s"] = c

        nursery.start_soon(acc)
        c = await prov.connect(nursery, "127.0.0.1", lst.port, b"")
        with trio.fail_after(5):
            while "s" not in box:
                await trio.sleep(0.01)
        s = box["s"]
        recv = [c.register(bytearray(64), Access.LOCAL_WRITE) for _ in range(3)]
        for b in recv:
            c.post_recv(b)
        sink = c.register(bytearray(64), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
        await s.send([b"one"], invalidate=sink.handle)
        assert (await c.receive()).invalidated == sink.handle and not sink.valid
        await s.send([b"two"], invalidate=sink.handle)  # already invalid: counted, not fatal
        assert (await c.receive()).invalidated == sink.handle
        assert (c.remote_invalidations, c.double_invalidations) == (1, 1)
        c.deregister(sink)
        assert c.local_invalidations == 0  # released without a second invalidation
        with pytest.raises(RemoteAccessError):  # a receive buffer is no remote target
            await s.send([b"three"], invalidate=recv[2].handle)
        await c.aclose()
        await s.aclose()
        await lst.aclose()


# -- a misbehaving responder: Send With Invalidate of a handle of another call ----------------
SERVER_PD = ConnectPrivateData(send_size=4096, recv_size=4096)


def _call(xid: int) -> Packer:
    p = Packer()
    p.uint32(xid)
    p.uint32(0)  # CALL
    p.uint32(3)
    return p


def _reply(xid: int) -> bytes:
    reply = Packer()
    reply.uint32(xid)
    reply.uint32(1)  # REPLY
    reply.uint32(0)
    return reply.getvalue()


@pytest.mark.parametrize("case", ["other_call", "not_advertised"])
async def test_send_with_invalidate_of_a_handle_not_this_calls_is_a_connection_error(case):
    prov = SoftProvider()
    async with trio.open_nursery() as nursery:
        lst = await prov.listen(nursery, "127.0.0.1", 0, SERVER_PD.encode())

        async def misbehave() -> None:
            conn = await lst.accept()
            thr = negotiate(SERVER_PD, conn.peer_private_data)
            for _ in range(4):
                conn.post_recv(conn.register(bytearray(thr.recv), Access.LOCAL_WRITE))
            # call 0 gets a plain reply that grants credits for two calls outstanding
            rcv = await conn.receive()
            assert decode_rdma_msg(bytes(rcv.data))[0].rdma_xid == 0
            await conn.send([encode_rdma_msg(make_msg(0, 4, RDMA_MSG)).getvalue(), _reply(0)])
            calls = []
            for _ in range(2):
                rcv = await conn.receive()
                hdr, _off = decode_rdma_msg(bytes(rcv.data))
                assert hdr.chunks.rdma_reply is not None
                calls.append(hdr)
            first, second = calls
            named = (second if case == "other_call" else first).chunks.rdma_reply
            assert named is not None
            unused = xdr_write_chunk([xdr_rdma_segment(s.handle, 0, s.offset) for s in named.target])
            hdr = make_msg(first.rdma_xid, 4, RDMA_MSG, [], [], unused)
            await conn.send(
                [encode_rdma_msg(hdr).getvalue(), _reply(first.rdma_xid)], invalidate=named.target[0].handle
            )
            await trio.sleep_forever()

        nursery.start_soon(misbehave)
        t = await RdmaTransport.connect(
            prov, nursery, "127.0.0.1", lst.port, remote_invalidation=case == "other_call"
        )
        await t.send_call(0, _call(0))
        assert (await t.receive()).uint32() == 0
        big = ReplyHints([], max_reply=20_000)  # each call offers a Reply chunk
        await t.send_call(1, _call(1), big)
        await t.send_call(2, _call(2), big)
        with trio.fail_after(5), pytest.raises(ProtocolViolation, match="Send With Invalidate"):
            await t.receive()
        with pytest.raises(TransportError, match="Send With Invalidate"):  # dead for every call
            await t.send_call(3, _call(3))
        await t.aclose()
        await lst.aclose()
        nursery.cancel_scope.cancel()
