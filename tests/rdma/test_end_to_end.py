"""proto=rdma end to end: Client -> RdmaTransport -> software provider -> responder -> NFS-Ganesha.

The responder (pynfsrdma._testbed.rdma_responder) runs in the test's nursery; everything between the
client and Ganesha is real: RPC-over-RDMA headers, chunks, RDMA Reads and Writes of the software
provider over loopback, and a real NFSv4.1 server behind.
"""

from __future__ import annotations

import cProfile
import hashlib
import os
import pstats
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from pynfsrdma._client.api import Client
from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto.nfs4.compound import COMPOUND4args, encode_compound_args
from pynfsrdma._proto.nfs4.const import NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, OP_RENAME
from pynfsrdma._proto.nfs4.types import GETFH4args, PUTROOTFH4args, RENAME4args
from pynfsrdma._testbed.procs import wait_pid_gone
from pynfsrdma._testbed.rdma_responder import Responder, compound_has_op, serve_rdma, start_responder_process
from pynfsrdma._transport.rdma import connect_rdma, make_provider
from pynfsrdma._transport.rdma.provider import NoRdmaDevice
from pynfsrdma._transport.rdma.soft import SoftConnection, SoftProvider
from pynfsrdma._transport.rdma.transport import RdmaTransport, WriteChunkSink
from pynfsrdma._xdr import Packer

MiB = 1 << 20


@asynccontextmanager
async def responder(ganesha, **kwargs) -> AsyncIterator[Responder]:
    async with trio.open_nursery() as nursery:
        r = await serve_rdma(nursery, SoftProvider(), "127.0.0.1", 0, ganesha.host, ganesha.port, **kwargs)
        try:
            yield r
        finally:
            await r.aclose()
            nursery.cancel_scope.cancel()


def rdma_url(r: Responder, export_path, **options: object) -> str:
    opts = "".join(f"&{k}={v}" for k, v in options.items())
    return f"nfs://127.0.0.1:{r.port}{export_path.remote}?proto=rdma&provider=soft{opts}"


def transport_of(client: Client) -> RdmaTransport:
    path = client.clientid.paths.paths[0]
    assert path.rpc is not None
    t = path.rpc.transport
    assert isinstance(t, RdmaTransport)
    return t


def data_of(n: int, seed: int) -> bytes:
    block = hashlib.sha256(seed.to_bytes(8, "big")).digest() * 2048  # 64 KiB
    return (block * (n // len(block) + 1))[:n]


async def test_every_api_call(ganesha, export_path):
    many = [f"entry-{i:04d}-{'n' * 60}" for i in range(300)]
    (export_path.local / "many").mkdir()
    for name in many:
        (export_path.local / "many" / name).write_bytes(b"")
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        # multi-MiB WRITE (Read chunks) and READ (Write chunks), checked end to end and on disk
        data = data_of(5 * MiB + 12345, 1)
        await nfs.write_file("/big", data)
        assert hashlib.sha256(await nfs.read_file("/big")).digest() == hashlib.sha256(data).digest()
        assert (export_path.local / "big").read_bytes() == data
        st = await nfs.stat("/big")
        assert st.size == len(data) and not st.is_dir

        await nfs.mkdir("/d", 0o750)
        assert (await nfs.stat("/d")).mode == 0o750
        await nfs.write_file("/d/f", b"small file")
        await nfs.rename("/d/f", "/d/g")
        assert await nfs.listdir("/d") == ["g"]
        await nfs.link("/d/g", "/d/h")
        assert (await nfs.stat("/d/h")).nlink == 2
        target = "t" * 700 + "/x"  # SYMLINK data over 512 bytes: DDP-eligible
        await nfs.symlink(target, "/ln")
        assert await nfs.readlink("/ln") == target
        assert os.readlink(export_path.local / "ln") == target
        await nfs.chmod("/d/g", 0o600)
        await nfs.truncate("/d/g", 3)
        a = await nfs.stat("/d/g")
        assert (a.mode, a.size) == (0o600, 3)
        assert await nfs.read_file("/d/h") == b"sma"
        fs = await nfs.statfs("/")
        assert fs.space_total > 0 and fs.maxname >= 255
        await nfs.remove("/d/h")
        await nfs.remove("/d/g")
        await nfs.rmdir("/d")
        await nfs.remove("/ln")
        assert sorted(await nfs.listdir("/")) == ["big", "many"]

        # a large directory: READDIR replies beyond the inline threshold come in the Reply chunk
        assert sorted(await nfs.listdir("/many")) == many

        t = transport_of(nfs)
        assert t.thresholds.send == t.thresholds.recv == 4096
    s = r.stats
    assert s.rdma_read_bytes >= len(data) and s.read_chunks >= 5  # WRITE data pulled
    assert s.rdma_write_bytes >= len(data)  # READ data placed into Write chunks
    assert s.reply_chunks_used >= 1
    assert s.credit_overruns == 0 and s.rdma_errors_sent == 0
    assert t.stats.write_chunks >= 6 and t.stats.nomsg_replies >= 1


async def test_read_data_is_the_registered_write_chunk_buffer(ganesha, export_path):
    """Zero copies on the READ path: where the responder's RDMA Writes carry the data over the
    socket (``one_host=False``), the views pread_views returns are slices of the very buffers
    registered as Write chunks, which those Writes filled."""
    data = data_of(3 * MiB, 2)
    (export_path.local / "f").write_bytes(data)
    async with trio.open_nursery() as nursery:
        r = await serve_rdma(nursery, SoftProvider(one_host=False), "127.0.0.1", 0, ganesha.host, ganesha.port)
        async with Client.connect(rdma_url(r, export_path)) as nfs:
            t = transport_of(nfs)
            placed_before = t.stats.placed_bytes
            async with await nfs.open("/f") as f:
                views, _eof = await f.pread_views(0, len(data))
            assert b"".join(views) == data
            for v in views:
                assert type(v.obj) is WriteChunkSink
            assert len({id(v.obj) for v in views}) == len(views)  # one sink per READ
            assert t.stats.placed_bytes - placed_before == len(data)
        assert r.stats.rdma_write_bytes >= len(data)
        await r.aclose()
        nursery.cancel_scope.cancel()


async def test_read_data_lent_from_the_responders_arena_is_not_copied(ganesha, export_path):
    """On one host the READ data the responder RDMA-Writes from its shared arena is lent, not
    copied: the client's views are the bytes where the responder has them (read-only), its
    provider copies none of them, and the responder's Send behind each Write completes only once
    the client let go of them, so that no record buffer is used again while a view of it lives."""
    data = data_of(3 * MiB, 5)
    (export_path.local / "f").write_bytes(data)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        conn = transport_of(nfs).conn
        (rc,) = r.connections
        lent, placed = conn.counters.bytes_lent, conn.counters.bytes_placed
        async with await nfs.open("/f") as f:
            views, _eof = await f.pread_views(0, len(data))
            assert conn.counters.bytes_lent - lent == len(data)
            assert conn.counters.bytes_placed == placed  # not a byte copied
            assert all(v.readonly and type(v.obj) is not WriteChunkSink for v in views)
            held = rc.conn._pending.copy()  # the reply chains not completed: one per READ
            assert len(held) >= 3
            await f.pread_views(0, 1)  # a frame to the responder, which carries no acknowledgement
            await trio.sleep(0.05)
            assert set(held) <= set(rc.conn._pending)
            assert b"".join(views) == data
            del views
            await f.pread_views(0, 1)  # the acknowledgements ride with it
            await trio.sleep(0.05)
            assert not set(held) & set(rc.conn._pending)


async def test_a_read_reply_is_one_post_of_the_responder(ganesha, export_path):
    """The responder posts a READ reply's RDMA Writes chained in front of its Send, as a server
    does: one post and one completion per reply, however many Writes it carries."""
    data = data_of(4 * MiB, 5)
    (export_path.local / "f").write_bytes(data)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        (rc,) = r.connections
        posts, before = rc.conn.counters.posts, r.stats
        async with await nfs.open("/f") as f:
            views, _eof = await f.pread_views(0, len(data))
        assert b"".join(views) == data
        after = r.stats
        assert after.rdma_writes - before.rdma_writes >= 4
        assert rc.conn.counters.posts - posts == after.sends - before.sends


async def test_calls_and_replies_without_writes_are_sent_unsignaled(ganesha, export_path):
    """The client posts its calls, and the responder its replies without RDMA Writes, as unsignaled
    Sends: nobody acknowledges them, so a 4 MiB write and read cost the responder at most one
    socket write per post it makes (its RDMA Reads and reply chains; replies the server gave
    together go out together), with no acknowledgement of a call of its own, and the client's
    calls go out without waiting for one."""
    data = data_of(4 * MiB, 12)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        (rc,) = r.connections
        conn = rc.conn
        assert isinstance(conn, SoftConnection)
        async with await nfs.open("/u", "w") as f:
            posts, writes, calls = conn.counters.posts, conn.counters.frame_writes, transport_of(nfs).stats.calls
            await f.pwrite(0, data)
            async with await nfs.open("/u") as g:
                views, _eof = await g.pread_views(0, len(data))
        assert b"".join(views) == data
        assert transport_of(nfs).stats.calls - calls >= 8
        assert 0 < conn.counters.frame_writes - writes <= conn.counters.posts - posts
    assert (export_path.local / "u").read_bytes() == data


async def test_headers_go_through_the_one_pass_codec_both_ways(ganesha, export_path):
    """Neither end walks the generic XDR codec for the header of a call or a reply: a 4 MiB write
    and read through the responder encode and decode every RPC-over-RDMA header in one pass of
    struct (cProfile sees the generic encoder and decoder called not once)."""
    data = data_of(4 * MiB, 13)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        async with await nfs.open("/h", "w") as f:
            profile = cProfile.Profile()
            profile.enable()
            try:
                calls = transport_of(nfs).stats.calls
                await f.pwrite(0, data)
                async with await nfs.open("/h") as g:
                    views, _eof = await g.pread_views(0, len(data))
            finally:
                profile.disable()
        assert b"".join(views) == data and transport_of(nfs).stats.calls - calls >= 8
        assert r.stats.replies >= 8
    seen = {fn for (_file, _line, fn) in pstats.Stats(profile).stats}  # type: ignore[attr-defined]
    assert {"read_header", "pack_header"} <= seen
    assert not seen & {"decode_rdma_msg", "encode_rdma_msg"}, seen & {"decode_rdma_msg", "encode_rdma_msg"}


async def test_the_responders_memory_is_reached_through_a_shared_mapping(ganesha, export_path):
    """The responder keeps its RDMA Read sinks and the record buffers READ data is RDMA Written
    from in shared memory the client maps: the client copies a 4 MiB write's data with plain
    memory copies, none through process_vm_*, and takes the read's data where it lies (lent)."""
    data = data_of(4 * MiB, 14)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        conn = transport_of(nfs).conn
        async with await nfs.open("/m", "w") as f:
            placed, mapped, lent = conn.counters.bytes_placed, conn.counters.bytes_mapped, conn.counters.bytes_lent
            await f.pwrite(0, data)
            async with await nfs.open("/m") as g:
                views, _eof = await g.pread_views(0, len(data))
        assert b"".join(views) == data
        assert conn.counters.bytes_placed - placed == len(data)
        assert conn.counters.bytes_mapped - mapped == len(data)
        assert conn.counters.bytes_lent - lent == len(data)
    assert (export_path.local / "m").read_bytes() == data


class _ResponderTasks(trio.abc.Instrument):
    """Counts the tasks the responder starts."""

    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if "rdma_responder" in task.name:
            self.spawned += 1


async def test_a_read_passes_the_responder_without_a_task_per_call(ganesha, export_path):
    """A READ call (no Read chunk) is forwarded, and its reply placed and posted, in the
    passes of the connection's two loops: the responder starts no task for it."""
    data = data_of(4 * MiB, 6)
    (export_path.local / "f").write_bytes(data)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        async with await nfs.open("/f") as f:
            counter = _ResponderTasks()
            trio.lowlevel.add_instrument(counter)
            try:
                calls, before = transport_of(nfs).stats.calls, r.stats
                views, _eof = await f.pread_views(0, len(data))
            finally:
                trio.lowlevel.remove_instrument(counter)
        assert b"".join(views) == data
        assert r.stats.rdma_writes - before.rdma_writes >= 4
        assert transport_of(nfs).stats.calls - calls >= 4
        assert counter.spawned == 0


async def test_a_write_passes_the_responder_without_a_task_per_call(ganesha, export_path):
    """A WRITE call's RDMA Reads are posted in the receive loop's pass and their completion hands
    the call to the connection's one forwarder: the responder starts no task for it, and the data
    reaches the server whole."""
    data = data_of(4 * MiB, 8)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        async with await nfs.open("/w", "w") as f:
            counter = _ResponderTasks()
            trio.lowlevel.add_instrument(counter)
            try:
                before = r.stats
                await f.pwrite(0, data)
            finally:
                trio.lowlevel.remove_instrument(counter)
        assert r.stats.rdma_reads - before.rdma_reads >= 4
        assert r.stats.read_chunks - before.read_chunks >= 4
        assert counter.spawned == 0
    assert (export_path.local / "w").read_bytes() == data


async def test_only_replies_to_calls_with_write_chunks_are_searched_for_ddp_items(ganesha, export_path):
    """Decoding a COMPOUND reply to find its READ data is for calls that offered a Write chunk:
    the replies to WRITE calls go back without it."""
    searched: list[int] = []
    data = data_of(2 * MiB, 7)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        locate = r.ddp_locator

        def counting(reply: memoryview) -> list[tuple[int, int]]:
            searched.append(reply.nbytes)
            return locate(reply)

        r.ddp_locator = counting
        async with await nfs.open("/f", "w") as f:
            await f.pwrite(0, data)
            writes = r.stats.rdma_reads
            assert writes >= 2
            assert searched == []
        async with await nfs.open("/f") as f:
            views, _eof = await f.pread_views(0, len(data))
        assert b"".join(views) == data
        assert len(searched) >= 2  # each READ reply, searched for the data its Write chunk takes


async def test_read_replies_land_in_record_buffers_used_again(ganesha, export_path):
    """Each 1 MiB READ reply comes from the server straight into a buffer of the responder's
    record stream, which goes back to it once the RDMA Writes from it completed: lent to the
    client, once the client let go of the data. 16 replies taken one at a time need only as many
    buffers as were in flight at once, and 16 more after the first 16 were let go of none."""
    data = data_of(16 * MiB, 8)
    (export_path.local / "f").write_bytes(data)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        (rc,) = r.connections
        assert rc.tcp is not None
        made = rc.tcp.buffers_made
        async with await nfs.open("/f") as f:
            for i in range(16):
                views, _eof = await f.pread_views(i * MiB, MiB)
                assert b"".join(views) == data[i * MiB : (i + 1) * MiB]
                del views
            assert rc.tcp.buffers_made - made <= 2
            views, _eof = await f.pread_views(0, len(data))
            assert b"".join(views) == data
            del views
            made = rc.tcp.buffers_made
            views, _eof = await f.pread_views(0, len(data))
            assert b"".join(views) == data
        assert r.stats.rdma_writes >= 32
        assert rc.tcp.buffers_made == made


async def test_credits_bound_calls_outstanding(ganesha, export_path):
    async with responder(ganesha, credits=2) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        for i in range(20):
            (export_path.local / f"f{i}").write_bytes(data_of(100_000 + i, i))
        got: dict[int, bytes] = {}

        async def one(i: int) -> None:
            got[i] = await nfs.read_file(f"/f{i}")
            await nfs.stat(f"/f{i}")

        async with trio.open_nursery() as n:
            for i in range(20):
                n.start_soon(one, i)
        assert all(got[i] == data_of(100_000 + i, i) for i in range(20))
        t = transport_of(nfs)
        assert t.gate.granted == 2
        assert t.gate.peak_in_flight == 2  # the client side of the same bound
    s = r.stats
    assert s.credit_overruns == 0
    assert s.max_outstanding == 2  # the gate was full, never over
    assert s.calls == s.replies


async def test_no_private_data_both_sides_use_the_version_1_defaults(ganesha, export_path):
    target = "l" * 1500  # READLINK's reply is then larger than 1024 bytes: a Reply chunk
    os.symlink(target, export_path.local / "ln")
    data = data_of(300_000, 5)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path, private_data=0)) as nfs:
        t = transport_of(nfs)
        # the responder sent its message; we sent none, so it uses 1024 for us and we do too
        assert t.thresholds.peer_sent_message
        assert t.thresholds.send == t.thresholds.recv == 1024
        assert not t.accepts_remote_invalidation
        await nfs.write_file("/f", data)
        assert await nfs.read_file("/f") == data
        assert await nfs.readlink("/ln") == target
        assert t.stats.reply_chunks >= 1 and t.stats.write_chunks >= 1
    assert r.stats.credit_overruns == 0 and r.stats.rdma_errors_sent == 0


async def test_long_call_goes_as_rdma_nomsg(ganesha, export_path):
    names = [f"{i}-" + "d" * 200 for i in range(8)]  # a COMPOUND of 8 LOOKUPs: over 1 KiB
    os.makedirs(export_path.local.joinpath(*names))
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path, inline=1024)) as nfs:
        t = transport_of(nfs)
        assert t.thresholds.send == t.thresholds.recv == 1024
        _fh, attrs = await nfs.nfs.names.lookup_path(nfs.root_fh, names, nfs.cred)
        assert attrs.is_dir
        assert t.stats.nomsg_calls >= 1
    assert r.stats.nomsg_calls >= 1
    assert r.stats.rdma_errors_sent == 0


@pytest.mark.parametrize("direction", ["write", "read"])
async def test_connection_lost_mid_transfer_is_resent_on_the_same_slot(ganesha, export_path, direction):
    data = data_of(6 * MiB, 3)
    if direction == "read":
        (export_path.local / "f").write_bytes(data)
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path), timeo=5) as nfs:
        session = nfs.clientid.session
        assert session is not None
        r.drop_replies(count=1, after=2)  # the third reply of the transfer never arrives
        if direction == "write":
            await nfs.write_file("/f", data)
            assert (export_path.local / "f").read_bytes() == data
        else:
            got = await nfs.read_file("/f")
            assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
        assert r.accepted == 2  # the connection was dropped once and made again
        assert session.resends >= 1 and session.replays >= 1
        assert nfs.clientid.session is session  # the same session: resent on its slots
        assert transport_of(nfs) is not None


async def test_break_at_reply_loses_the_connection_after_the_server_ran_the_call(ganesha, export_path):
    # the client-side fault the real-RDMA rig uses against the kernel nfsd: the RENAME runs on
    # the server, its reply is dropped and the connection torn down; the session resends it on
    # the same slot and sequence id over a new connection and the reply cache answers (a second
    # execution would fail: the source name is gone)
    (export_path.local / "a").write_bytes(b"renamed once")
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        session = nfs.clientid.session
        assert session is not None
        broken = transport_of(nfs)
        broken.break_at_reply(compound_has_op(OP_RENAME))
        await nfs.rename("/a", "/b")
        assert (export_path.local / "b").read_bytes() == b"renamed once"
        assert not (export_path.local / "a").exists()
        assert session.resends == 1 and session.replays == 1
        assert nfs.clientid.session is session
        assert transport_of(nfs) is not broken and r.accepted == 2


def test_compound_has_op_reads_only_compound_calls():
    def call(*ops: object) -> bytes:
        p = Packer()
        rpcdef.pack_call_header(
            p, 7, NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, rpcdef.opaque_auth.XDR.encode(rpcdef.NULL_AUTH)
        )
        encode_compound_args(p, COMPOUND4args("", 1, list(ops)))
        return p.getvalue()

    renames = compound_has_op(OP_RENAME)
    assert renames(call(PUTROOTFH4args(), RENAME4args("a", "b")))
    assert not renames(call(PUTROOTFH4args(), GETFH4args()))
    assert not renames(b"\0\0\0\7\0\0\0\1")  # a REPLY
    assert not renames(b"garbage")


async def test_responder_as_a_process(ganesha, export_path, tmp_path: Path):
    pid, port = start_responder_process(ganesha.host, ganesha.port, log_path=tmp_path / "r.log")
    try:
        url = f"nfs://127.0.0.1:{port}{export_path.remote}?proto=rdma&provider=soft"
        async with Client.connect(url) as nfs:
            await nfs.write_file("/p", b"through a responder process" * 100)
            assert await nfs.read_file("/p") == b"through a responder process" * 100
    finally:
        os.kill(pid, 15)
        assert wait_pid_gone(pid, 10)


async def test_a_responder_process_places_the_data_in_the_clients_memory(ganesha, export_path, tmp_path: Path):
    """The responder in a process of its own, as in bench_rdma: the client, the target of its RDMA
    Reads, copies each chunk once between the two processes' memories (the NIC's DMA), its RDMA
    Writes' data is lent from the responder's shared arena, and nothing of the payload crosses
    the emulation's socket."""
    data = data_of(4 * MiB, 3)
    pid, port = start_responder_process(ganesha.host, ganesha.port, log_path=tmp_path / "r.log")
    try:
        url = f"nfs://127.0.0.1:{port}{export_path.remote}?proto=rdma&provider=soft"
        async with Client.connect(url) as nfs:
            conn = transport_of(nfs).conn
            assert isinstance(conn, SoftConnection) and conn.reaches_peer
            await nfs.write_file("/placed", data)
            assert conn.counters.bytes_placed == len(data)  # pulled by the responder's RDMA Reads
            assert await nfs.read_file("/placed") == data
            assert conn.counters.bytes_placed == len(data)
            assert conn.counters.bytes_lent == len(data)  # its RDMA Writes' data, not copied
            assert (export_path.local / "placed").read_bytes() == data
    finally:
        os.kill(pid, 15)
        assert wait_pid_gone(pid, 10)


async def test_transport_closes_its_own_tasks(ganesha):
    async with responder(ganesha) as r:
        t = await connect_rdma("127.0.0.1", r.port, options={"provider": "soft", "credits": "4"})
        assert isinstance(t, RdmaTransport) and t.gate.requested == 4
        await t.aclose()
        assert t._host is not None and t._host._done.is_set()


def _has_rdma_device() -> bool:
    sysfs = Path("/sys/class/infiniband")
    return sysfs.is_dir() and any(sysfs.iterdir())


async def test_pyverbs_without_a_device_says_so(ganesha, export_path):
    if _has_rdma_device():
        assert make_provider("pyverbs").name == "pyverbs"
        return
    with pytest.raises(NoRdmaDevice, match=r"^no RDMA device: .*use provider=soft"):
        make_provider(None)
    with pytest.raises(NoRdmaDevice, match="no RDMA device"):
        async with Client.connect(f"nfs://127.0.0.1:{ganesha.port}{export_path.remote}?proto=rdma"):
            pass
    with pytest.raises(ValueError, match="unknown RDMA provider"):
        make_provider("carrier-pigeon")


async def test_read_ranges_over_rdma_batch_whole_pages(ganesha, export_path):
    # Linux's nfsd 7.3 misplaces a READ's data after a READ whose data ends inside a page
    # (tests/vm/README.md): batched READs ask for whole pages, each with a Write chunk of its own
    # (the ranges 80,000 bytes apart: not joined into one READ)
    data = data_of(MiB, 7)
    (export_path.local / "f").write_bytes(data)
    ranges = [(100_000 + k * 140_001, 60_003) for k in range(6)]
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path)) as nfs:
        t = transport_of(nfs)
        calls, chunks, placed = t.stats.calls, t.stats.write_chunks, t.stats.placed_bytes
        got = await nfs.read_ranges([("/f", o, n) for o, n in ranges])
        assert got == [data[o : o + n] for o, n in ranges]
        assert t.stats.write_chunks - chunks == len(ranges)
        assert t.stats.calls - calls < len(ranges)  # (batched)
        # each READ's pages: from the page its range starts in to the one it ends in
        pages = sum(-(-(o + n) // 4096) - o // 4096 for o, n in ranges)
        assert t.stats.placed_bytes - placed == pages * 4096
    async with responder(ganesha) as r, Client.connect(rdma_url(r, export_path, batchreads=0)) as nfs:
        t = transport_of(nfs)
        calls, placed = t.stats.calls, t.stats.placed_bytes
        got = await nfs.read_ranges([("/f", o, n) for o, n in ranges])
        assert got == [data[o : o + n] for o, n in ranges]
        assert t.stats.calls - calls >= len(ranges)  # (one READ, of the range's bytes, to a COMPOUND)
        assert t.stats.placed_bytes - placed == sum(n for _, n in ranges)
