"""The native channel's shell against a stand-in for /dev/fuse: a SOCK_SEQPACKET socket pair, which
keeps each message whole as the device does. The test is the kernel: it writes requests built byte
by byte and reads the replies. What a real kernel never sends (malformed requests, an interrupt before
its request, an INIT too old) is tried here; tests/fuse/test_native_channel.py has the real kernel."""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from pynfsrdma._fuse import devfuse
from pynfsrdma._fuse.devfuse import NativeChannel
from pynfsrdma._fuse.kernel import abi
from pynfsrdma._fuse.lowlevel import EntryAttributes, FileLock, FUSEError, Operations, RequestContext
from pynfsrdma._fuse.workers import Task, Worker, Workers

IN_HEADER = "=IIQQIIIHH"
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)  # <asm-generic/socket.h>; Python 3.11 lacks them
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
OUT_HEADER = "=IiQ"


class Ops(Operations):
    """Answers LOOKUP at once, waits in GETATTR (50 ms, or until ``getattr_may_end`` is set when a
    test gives one), waits in SETLKW until cancelled, keeps what WRITE hands over."""

    def __init__(self) -> None:
        self.forgotten: list[list[tuple[int, int]]] = []
        self.cancelled: list[str] = []
        self.written: list[Any] = []
        self.keep_writes = True
        self.release_lock = trio.Event()
        self.fsync_may_end = trio.Event()
        self.getattr_may_end: trio.Event | None = None
        self.getattr_began = trio.Event()
        self.setlk_began = trio.Event()

    async def lookup(self, parent_inode: int, name: bytes, ctx: RequestContext) -> EntryAttributes:
        if name == b"missing":
            raise FUSEError(errno.ENOENT)
        if name == b"broken":
            raise RuntimeError("a bug in the operations")
        return EntryAttributes(st_ino=100 + len(name), st_mode=0o100644, attr_timeout=1.0, entry_timeout=1.0)

    async def getattr(self, inode: int, ctx: RequestContext) -> EntryAttributes:
        # an answer that waits: the reading goes on meanwhile
        self.getattr_began.set()
        if self.getattr_may_end is None:
            await trio.sleep(0.05)
        else:
            await self.getattr_may_end.wait()
        return EntryAttributes(st_ino=inode, st_mode=0o040755, st_nlink=2)

    async def forget(self, inode_list: list[tuple[int, int]]) -> None:
        self.forgotten.append(sorted(inode_list))

    async def setlk(
        self, fh: int, lock_owner: int, lock: FileLock, sleep: bool, flock: bool, ctx: RequestContext
    ) -> None:
        self.setlk_began.set()
        try:
            await self.release_lock.wait()
        except trio.Cancelled:
            self.cancelled.append("setlk")
            raise

    async def fsync(self, fh: int, datasync: bool) -> None:
        try:
            await self.fsync_may_end.wait()
        except trio.Cancelled:
            self.cancelled.append("fsync")
            raise

    async def write(self, fh: int, off: int, buf: Any) -> int:
        if self.keep_writes:
            self.written.append(buf)
        return len(buf)


class FakeKernel:
    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ours.setblocking(False)
        for s in (self.ours, self.theirs):  # room for a 1 MiB WRITE in one message (root may)
            s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 4 << 20)
        self.next_unique = 2

    def send(self, opcode: int, body: bytes = b"", nodeid: int = 1, unique: int | None = None) -> int:
        if unique is None:
            unique = self.next_unique
            self.next_unique += 2
        header = struct.pack(IN_HEADER, 40 + len(body), opcode, unique, nodeid, 1000, 100, 4242, 0, 0)
        self.ours.send(header + body)
        return unique

    async def reply(self, timeout: float = 5.0) -> tuple[int, int, bytes]:
        """(error, unique, body) of the next message from the channel."""
        with trio.fail_after(timeout):
            while True:
                try:
                    data = self.ours.recv(1 << 21)
                    break
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(self.ours)
        length, err, unique = struct.unpack_from(OUT_HEADER, data)
        assert length == len(data)
        return err, unique, data[16:]

    async def nothing(self, wait: float = 0.2) -> None:
        with trio.move_on_after(wait):
            err, unique, body = await self.reply()
            raise AssertionError(f"unexpected reply: error {err}, unique {unique}, {body[:32]!r}")

    def init(self, minor: int = 45) -> None:
        self.send(abi.FUSE_INIT, struct.pack("=IIII", 7, minor, 131072, 0xFFFFFFFF) + struct.pack("=I44x", 0),
                  nodeid=0)


@asynccontextmanager
async def serving(ops: Operations) -> AsyncIterator[tuple[NativeChannel, FakeKernel]]:
    kernel = FakeKernel()
    channel = NativeChannel(ops, "/nonexistent", {"fsname=test", "subtype=test"})
    channel.attach(kernel.theirs.fileno())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(channel.serve)
        try:
            yield channel, kernel
        finally:
            kernel.ours.close()  # the channel reads the end and stops
    kernel.theirs.close()


async def test_init_then_lookup_and_errors() -> None:
    async with serving(Ops()) as (channel, kernel):
        kernel.init()
        err, unique, body = await kernel.reply()
        assert (err, unique, len(body)) == (0, 2, 64)
        major, minor, _, flags = struct.unpack_from("=IIII", body)
        assert (major, minor) == (7, 45) and flags & abi.FUSE_DO_READDIRPLUS
        assert not flags & abi.FUSE_POSIX_LOCKS  # Ops has setlk, not getlk: no remote locks
        assert channel.agreed is not None and channel.initialized.is_set()

        u = kernel.send(abi.FUSE_LOOKUP, b"abc\0")
        err, unique, body = await kernel.reply()
        assert (err, unique, len(body)) == (0, u, 128)
        assert struct.unpack_from("=Q", body)[0] == 103

        u = kernel.send(abi.FUSE_LOOKUP, b"missing\0")
        assert await kernel.reply() == (-errno.ENOENT, u, b"")
        u = kernel.send(abi.FUSE_LOOKUP, b"broken\0")  # an exception in the operations: EIO, and on
        assert await kernel.reply() == (-errno.EIO, u, b"")
        u = kernel.send(abi.FUSE_IOCTL, bytes(32))
        assert await kernel.reply() == (-errno.ENOSYS, u, b"")
        u = kernel.send(abi.FUSE_READLINK)  # not implemented by Ops: the default answers ENOSYS
        assert await kernel.reply() == (-errno.ENOSYS, u, b"")
        u = kernel.send(abi.FUSE_DESTROY)
        assert await kernel.reply() == (0, u, b"")


async def test_malformed_requests_are_answered_eio_when_their_unique_is_known(caplog: pytest.LogCaptureFixture) -> None:
    async with serving(Ops()) as (_, kernel):
        u = kernel.send(abi.FUSE_GETATTR, b"\0" * 4)  # fuse_getattr_in is 16 bytes
        assert await kernel.reply() == (-errno.EIO, u, b"")
        u = kernel.send(abi.FUSE_LOOKUP, b"no terminating nul")
        assert await kernel.reply() == (-errno.EIO, u, b"")
        kernel.ours.send(b"\x07\0\0\0garbage")  # not even a header: nothing to answer
        kernel.ours.send(struct.pack(IN_HEADER, 999, abi.FUSE_LOOKUP, 77, 1, 0, 0, 0, 0, 0) + b"x\0")  # length lies
        assert await kernel.reply() == (-errno.EIO, 77, b"")
        u = kernel.send(abi.FUSE_FORGET, b"\0")  # a FORGET is never answered, not even when malformed
        await kernel.nothing()
        u = kernel.send(abi.FUSE_LOOKUP, b"still-serving\0")
        err, unique, _ = await kernel.reply()
        assert (err, unique) == (0, u)
    assert sum("malformed FUSE request" in r.message for r in caplog.records) == 5


async def test_forgets_are_gathered_and_never_answered() -> None:
    ops = Ops()
    async with serving(ops) as (_, kernel):
        kernel.send(abi.FUSE_FORGET, struct.pack("=Q", 2), nodeid=7)
        kernel.send(abi.FUSE_BATCH_FORGET, struct.pack("=II", 2, 0) + struct.pack("=QQQQ", 7, 1, 9, 4), nodeid=0)
        await kernel.nothing()
    assert ops.forgotten == [[(7, 3), (9, 4)]]


async def test_a_forget_that_fails_is_logged_and_serving_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    class Failing(Ops):
        async def forget(self, inode_list: list[tuple[int, int]]) -> None:
            raise RuntimeError("a bug in forget")

    async with serving(Failing()) as (_, kernel):
        kernel.send(abi.FUSE_FORGET, struct.pack("=Q", 1), nodeid=7)
        await kernel.nothing(0.1)
        u = kernel.send(abi.FUSE_LOOKUP, b"after\0")
        assert (await kernel.reply())[:2] == (0, u)
    assert any("forget of 1 nodes failed" in r.message for r in caplog.records)


async def test_an_interrupt_cancels_the_operation_and_the_request_is_answered_eintr() -> None:
    ops = Ops()
    async with serving(ops) as (_, kernel):
        lk = struct.pack("=QQQQIIII", 1, 5, 0, 100, 1, 0, 0, 0)
        u = kernel.send(abi.FUSE_SETLKW, lk)
        await kernel.nothing(0.1)  # it waits ...
        u2 = kernel.send(abi.FUSE_LOOKUP, b"meanwhile\0")  # ... while others are answered
        assert (await kernel.reply())[:2] == (0, u2)
        kernel.send(abi.FUSE_INTERRUPT, struct.pack("=Q", u), unique=u | abi.FUSE_INT_REQ_BIT)
        assert await kernel.reply() == (-errno.EINTR, u, b"")
        assert ops.cancelled == ["setlk"]
        u3 = kernel.send(abi.FUSE_LOOKUP, b"after\0")  # the worker goes on with a fresh cancel scope
        assert (await kernel.reply())[:2] == (0, u3)


async def test_an_operation_not_interruptible_runs_to_completion() -> None:
    ops = Ops()
    assert "fsync" not in ops.interruptible and "setlk" in ops.interruptible
    async with serving(ops) as (_, kernel):
        u = kernel.send(abi.FUSE_FSYNC, struct.pack("=QII", 1, 0, 0))
        await kernel.nothing(0.1)
        kernel.send(abi.FUSE_INTERRUPT, struct.pack("=Q", u), unique=u | abi.FUSE_INT_REQ_BIT)
        await kernel.nothing(0.1)  # the interrupt is let go
        ops.fsync_may_end.set()
        assert await kernel.reply() == (0, u, b"")
    assert ops.cancelled == []


async def test_an_interrupt_that_came_first_starts_its_request_interrupted() -> None:
    ops = Ops()
    async with serving(ops) as (_, kernel):
        kernel.send(abi.FUSE_INTERRUPT, struct.pack("=Q", 100), unique=101)
        await kernel.nothing(0.1)
        kernel.send(abi.FUSE_SETLKW, struct.pack("=QQQQIIII", 1, 5, 0, 100, 1, 0, 0, 0), unique=100)
        assert await kernel.reply() == (-errno.EINTR, 100, b"")
    assert ops.cancelled == ["setlk"]


async def test_an_interrupt_of_no_request_is_answered_eagain_at_the_next_one() -> None:
    async with serving(Ops()) as (_, kernel):
        kernel.send(abi.FUSE_INTERRUPT, struct.pack("=Q", 500), unique=501)
        await kernel.nothing(0.1)
        u = kernel.send(abi.FUSE_LOOKUP, b"next\0")
        replies = {(await kernel.reply())[:2], (await kernel.reply())[:2]}
        assert replies == {(-errno.EAGAIN, 501), (0, u)}


async def test_requests_that_wait_do_not_hold_up_the_others() -> None:
    ops = Ops()
    ops.getattr_may_end = trio.Event()
    async with serving(ops) as (channel, kernel):
        slow = [kernel.send(abi.FUSE_GETATTR, struct.pack("=IIQ", 0, 0, 0), nodeid=n) for n in range(1, 21)]
        fast = kernel.send(abi.FUSE_LOOKUP, b"quick\0")
        assert (await kernel.reply())[:2] == (0, fast)  # while the twenty GETATTRs before it wait
        ops.getattr_may_end.set()
        got = {(await kernel.reply())[1] for _ in slow}
        assert got == set(slow)
        assert channel.requests == 21


async def test_write_payloads_large_as_views_into_the_buffer_small_as_copies() -> None:
    ops = Ops()
    async with serving(ops) as (channel, kernel):
        big, small = bytes(range(256)) * 4096, b"s" * 4096  # 1 MiB, 4 KiB
        for payload in (big, small):
            u = kernel.send(abi.FUSE_WRITE, struct.pack("=QQIIQII", 1, 0, len(payload), 0, 0, 0, 0) + payload)
            err, unique, body = await kernel.reply()
            assert (err, unique, struct.unpack("=II", body)[0]) == (0, u, len(payload))
        view, copy = ops.written
        assert isinstance(view, memoryview) and channel.buffers.holds(view) and bytes(view) == big
        assert type(copy) is bytes and copy == small
        assert channel.buffers.lent == 1  # the view keeps its buffer from the pool
        allocated = channel.buffers.allocated
        ops.written.clear()
        del view, copy
        assert channel.buffers.lent == 0
        ops.keep_writes = False
        for _ in range(5):  # the buffer let go of is used again, no new one is made
            kernel.send(abi.FUSE_WRITE, struct.pack("=QQIIQII", 1, 0, len(big), 0, 0, 0, 0) + big)
            assert (await kernel.reply())[0] == 0
        assert channel.buffers.allocated == allocated


async def test_notifications_go_out_after_init() -> None:
    ops = Ops()
    async with serving(ops) as (_, kernel):
        kernel.init()
        await kernel.reply()
        assert ops.kernel is not None
        await ops.kernel.invalidate_inode(55, attr_only=True)
        assert await kernel.reply() == (abi.FUSE_NOTIFY_INVAL_INODE, 0, struct.pack("=Qqq", 55, -1, 0))
        await ops.kernel.invalidate_entry(1, b"name")
        assert await kernel.reply() == (abi.FUSE_NOTIFY_INVAL_ENTRY, 0, struct.pack("=QII", 1, 4, 0) + b"name\0")
        await ops.kernel.notify_delete(1, 9, b"gone")  # type: ignore[attr-defined]
        assert await kernel.reply() == (abi.FUSE_NOTIFY_DELETE, 0, struct.pack("=QQII", 1, 9, 4, 0) + b"gone\0")


async def test_an_init_too_old_is_refused_and_serving_ends() -> None:
    kernel = FakeKernel()
    channel = NativeChannel(Ops(), "/nonexistent", set())
    channel.attach(kernel.theirs.fileno())
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.serve)
            kernel.init(minor=30)
            assert await kernel.reply() == (-errno.EPROTO, 2, b"")
    assert channel.agreed is None


async def test_terminate_lets_requests_finish_then_cancels_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devfuse, "DRAIN_TIMEOUT", 1.0)
    ops = Ops()
    ops.getattr_may_end = trio.Event()
    kernel = FakeKernel()
    channel = NativeChannel(ops, "/nonexistent", set())
    channel.attach(kernel.theirs.fileno())
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.serve)
            u = kernel.send(abi.FUSE_GETATTR, struct.pack("=IIQ", 0, 0, 0), nodeid=5)
            kernel.send(abi.FUSE_SETLKW, struct.pack("=QQQQIIII", 1, 5, 0, 100, 1, 0, 0, 0))
            await ops.getattr_began.wait()
            await ops.setlk_began.wait()
            channel.terminate()
            await trio.sleep(0.05)  # the GETATTR ends well within the grace period, not at once
            ops.getattr_may_end.set()
            assert (await kernel.reply())[:2] == (0, u)  # the GETATTR under way finished
    assert ops.cancelled == ["setlk"]  # the SETLKW was cancelled at the end of the grace period


def test_a_worker_scheme_that_leaves_out_part_of_the_contract_cannot_be_made() -> None:
    """Both channels run on Workers; one that forgets how to send a reply fails when it is made,
    naming what it lacks, not at the first reply."""
    assert Workers.__abstractmethods__ == {"_next_request", "_finish", "_send", "_wake_reader"}

    class Forgetful(Workers):
        async def _next_request(self) -> Task | None:
            return None

        def _finish(self, w: Worker, reply: Any, waited: bool) -> None:
            pass

        def _wake_reader(self) -> None:
            pass

    with pytest.raises(TypeError, match="abstract method _send"):
        Forgetful()


def test_a_take_looks_at_few_lent_buffers_and_never_hands_out_a_referenced_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pool = devfuse.RequestBuffers(4096, keep=0)
    kept: list[memoryview] = []
    for _ in range(500):  # the operations keep a view of every WRITE payload
        b = pool.take()
        kept.append(memoryview(b.data)[64:128])  # (as the decoder hands a WRITE payload over)
        pool.give_back(b)
    assert pool.lent == 500 and pool.allocated == 500
    looked = 0
    referenced = devfuse.RequestBuffer.referenced

    def counted(b: devfuse.RequestBuffer) -> bool:
        nonlocal looked
        looked += 1
        return referenced(b)

    monkeypatch.setattr(devfuse.RequestBuffer, "referenced", counted)
    for _ in range(100):
        b = pool.take()
        assert not referenced(b)
        pool.give_back(b)
    assert looked <= 100 * (devfuse.LENT_CHECKS + 1)  # (the give_back's look included)
    assert pool.allocated == 600  # the lent ones, all still referenced, are not handed out
    kept.clear()  # the views let go of: every lent buffer is taken again before any is made
    taken = [pool.take() for _ in range(500)]
    assert pool.allocated == 600
    assert pool.lent == 0 and not any(referenced(b) for b in taken)
