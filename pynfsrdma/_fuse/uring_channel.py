"""FUSE over io_uring for the native channel (:mod:`.devfuse`): the kernel hands requests to ring
entries registered on an io_uring (:mod:`.io_uring`) instead of queueing them for read(2) on
/dev/fuse, and takes each reply with the command that fetches the entry's next request
(FUSE_IO_URING_CMD_COMMIT_AND_FETCH): one system call per reply, and none to read a request.

The kernel keeps one queue per possible CPU and hands a request to the queue of the CPU its caller
runs on; it uses the ring only once every queue has an entry. Each entry is one piece of memory
(:mod:`.kernel.uring`: its header buffer, and a payload buffer as large as the largest request).
Requests are decoded and answered as on /dev/fuse, by the same handlers and the same worker scheme:
one worker reaps completions and answers what it can at once, and hands the reaping to another
worker while an operation waits. A WRITE's data is copied out of the entry into a request buffer
of the channel's pool before the operations see it (they may keep it after the reply, and the
entry's memory is the kernel's again once the reply is committed); a READ's data is copied into
the entry. INIT, FORGET and INTERRUPT still come through /dev/fuse, read by the channel as before.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from .io_uring import Ring, buffer_address
from .kernel import abi, replies, uring
from .kernel import requests as rq
from .kernel.interrupts import Interrupts

log = logging.getLogger(__name__)

ENTRIES_PER_QUEUE = 16  # at most; fewer on machines of many CPUs (ENTRIES_IN_ALL)
ENTRIES_IN_ALL = 64
MIN_ENTRIES_PER_QUEUE = 2
WORKERS_KEPT = 4
MAX_WORKERS = 256
READS_BETWEEN_CHECKPOINTS = 8
DRAIN_TIMEOUT = 5.0
# the kernel's switch (module parameter of fuse); FUSE offers io_uring at INIT only while it is on
ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"
CPUS_POSSIBLE = "/sys/devices/system/cpu/possible"
# completions of an entry that mean the connection is going away
GOING = (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED, errno.ENODEV)

Reply = Any
Answer = Callable[[Any, rq.Request, Callable[[], None]], Awaitable[Reply]]


def possible_cpus(path: str = CPUS_POSSIBLE) -> int:
    """How many CPUs the kernel counts as possible (its number of ring queues): ``0-1,4-5`` is 4."""
    with open(path) as f:
        text = f.read().strip()
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n += (int(hi) if hi else int(lo)) - int(lo) + 1
    return n


def kernel_switch(path: str = ENABLE_URING) -> bool | None:
    """Whether the kernel's FUSE over io_uring is turned on (None: this kernel has none)."""
    try:
        with open(path) as f:
            return f.read().strip() == "Y"
    except OSError:
        return None


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Entry:
    """One ring entry: its memory (header buffer, room, payload buffer), its queue, the iovecs that
    register it, and the request it holds."""

    __slots__ = ("commit_id", "index", "iov", "memory", "qid", "view")

    def __init__(self, index: int, qid: int, payload: int) -> None:
        self.index = index
        self.qid = qid
        self.memory = mmap.mmap(-1, uring.entry_size(payload))
        self.view = memoryview(self.memory)
        base = buffer_address(self.memory)
        self.iov = (_Iovec * abi.URING_IOV_SEGS)(
            _Iovec(base, abi.URING_REQ_HEADER_SIZE), _Iovec(base + uring.PAYLOAD_OFFSET, payload))
        self.commit_id = 0

    def close(self) -> None:
        self.view.release()
        try:
            self.memory.close()
        except BufferError:  # (a view of it is still held somewhere: the mapping goes with it)
            pass


class _Worker:
    """A worker's state: the cancel scope an INTERRUPT cancels, and the entry it answers."""

    __slots__ = ("buf", "entry", "interrupted", "interruptible", "scope", "unique")

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.interrupted = False
        self.interruptible = False
        self.unique: int | None = None
        self.entry: Entry | None = None
        self.buf: Any = None

    def interrupt(self) -> None:
        if self.interruptible:
            self.interrupted = True
            self.scope.cancel()


class FuseRing:
    """The io_uring of one FUSE connection (``fuse_fd``) and its entries: ``queues`` queues (one per
    possible CPU unless given) of ``per_queue`` entries. Making it makes the io_uring (RingError when
    the system has none); the entries are made by :meth:`serve`, once INIT said how large a request
    gets."""

    def __init__(self, fuse_fd: int, queues: int | None = None, per_queue: int | None = None) -> None:
        self.fuse_fd = fuse_fd
        self.queues = queues if queues is not None else possible_cpus()
        self.per_queue = per_queue if per_queue is not None else max(
            MIN_ENTRIES_PER_QUEUE, min(ENTRIES_PER_QUEUE, ENTRIES_IN_ALL // self.queues))
        self.ring = Ring(self.queues * self.per_queue)
        self.entries: list[Entry] = []
        self.requests = 0  # taken from the ring
        self.read_bytes_copied = 0  # READ data copied into entries
        self.write_bytes_copied = 0  # WRITE data copied out of them
        self.refused: str | None = None  # why the kernel refused the entries, if it did
        self._ready: deque[Entry] = deque()
        self._stopping = False
        self._stopped = trio.Event()
        self._reading = False
        self._standby = trio.lowlevel.ParkingLot()
        self._workers = 0
        self._hand_offs = 0
        self._in_a_row = 0
        self._nursery: trio.Nursery | None = None
        # set by serve()
        self._answer: Answer | None = None
        self._handlers: Mapping[int, Any] = {}
        self._interrupts: Interrupts[Any] | None = None
        self._interruptible: frozenset[int] = frozenset()
        self._options = rq.Options()
        self._buffers: Any = None
        self._send_to_device: Callable[[bytes], None] = lambda reply: None

    # -- running -------------------------------------------------------------------------------------
    async def serve(
        self,
        payload: int,
        answer: Answer,
        handlers: Mapping[int, Any],
        interrupts: Interrupts[Any],
        interruptible: frozenset[int],
        options: rq.Options,
        buffers: Any,
        send_to_device: Callable[[bytes], None],
    ) -> None:
        """Register ``payload``-byte entries with the kernel and answer the requests they bring with
        ``answer(handler, request, hand_off)`` (the channel's), until :meth:`stop`. A reply to an
        interrupt goes to /dev/fuse by ``send_to_device``; WRITE data is copied into ``buffers``."""
        self._answer = answer
        self._handlers = {**handlers, abi.FUSE_READ: _read}
        self._interrupts = interrupts
        self._interruptible = interruptible
        self._options = options
        self._buffers = buffers
        self._send_to_device = send_to_device
        self.entries = [Entry(i, i // self.per_queue, payload) for i in range(self.queues * self.per_queue)]
        for e in self.entries:
            self.ring.queue_command(self.fuse_fd, abi.FUSE_IO_URING_CMD_REGISTER, e.index, uring.register(e.qid),
                                    ctypes.addressof(e.iov), abi.URING_IOV_SEGS)
        try:
            self.ring.submit()
        except OSError as e:
            self._refuse(e.errno or 0)
            return
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._worker)
            await self._stopped.wait()
            nursery.cancel_scope.deadline = trio.current_time() + DRAIN_TIMEOUT

    def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self._stopped.set()
        self._standby.unpark_all()
        trio.lowlevel.notify_closing(self.ring.fd)

    def close(self) -> None:
        self.ring.close()
        for e in self.entries:
            e.close()
        self.entries = []

    def _refuse(self, err: int) -> None:
        """The kernel refused the entries: it then queues every request for /dev/fuse again."""
        if self.refused is None:
            self.refused = os.strerror(err)
            log.warning("FUSE over io_uring refused by the kernel (%s): requests go through /dev/fuse", self.refused)
        self.stop()

    # -- the workers ---------------------------------------------------------------------------------
    async def _worker(self) -> None:
        w = _Worker()
        self._workers += 1
        try:
            while not self._stopping:
                w.scope = trio.CancelScope()
                w.interrupted = False
                with w.scope:
                    if await self._work(w):
                        return
                if w.unique is not None:  # an INTERRUPT cancelled the operation
                    self._finish(w, replies.error(w.unique, errno.EINTR), True)
        finally:
            self._workers -= 1
            if w.buf is not None:
                self._buffers.give_back(w.buf)

    async def _work(self, w: _Worker) -> bool:
        """Reap and answer requests until stopping (False), until an INTERRUPT came too late for the
        request it was meant for (False), or until enough others stand by (True: this worker ends)."""
        assert self._answer is not None and self._interrupts is not None
        while not self._stopping:
            if self._reading:
                if len(self._standby) >= WORKERS_KEPT:
                    return True
                await self._standby.park()
                continue
            self._reading = True
            try:
                request = await self._next_request()
            finally:
                self._reading = False
            if request is None:
                return False
            entry, handler, req, w.buf = request
            w.entry = entry
            w.unique = unique = req.unique
            w.interruptible = req.opcode in self._interruptible
            if self._interrupts.started(unique, w):
                w.interrupt()
            for due in self._interrupts.take_due():
                self._send_to_device(replies.error(due, errno.EAGAIN))
            hand_offs = self._hand_offs
            reply = await self._answer(handler, req, self._hand_off)
            del req, request
            # answered at once: the commit goes with the next submission (before the reaper waits);
            # answered after a wait: at once, as the reaper may be waiting
            self._finish(w, reply, self._hand_offs != hand_offs)
            if w.interrupted:
                return False
        return False

    def _finish(self, w: _Worker, reply: Reply, submit: bool) -> None:
        assert w.unique is not None and w.entry is not None and self._interrupts is not None
        self._interrupts.finished(w.unique)
        entry, unique = w.entry, w.unique
        w.entry = w.unique = None
        self._commit(entry, unique, reply, submit)
        if w.buf is not None:
            self._buffers.give_back(w.buf)
            w.buf = None

    def _commit(self, entry: Entry, unique: int, reply: Reply, submit: bool) -> None:
        try:
            uring.place_reply(reply, entry.view)
        except ValueError as e:
            log.error("reply to %d not sent: %s", unique, e)
            uring.place_reply(replies.error(unique, errno.EIO), entry.view)
        self.ring.queue_command(self.fuse_fd, abi.FUSE_IO_URING_CMD_COMMIT_AND_FETCH, entry.index,
                                uring.commit(entry.qid, entry.commit_id))
        if submit:
            self._submit()

    def _submit(self) -> None:
        try:
            self.ring.submit()
        except OSError as e:
            log.error("io_uring_enter: %s", e)
            self.stop()

    def _hand_off(self) -> None:
        self._hand_offs += 1
        if len(self._standby):
            self._standby.unpark()
        elif self._workers < MAX_WORKERS and self._nursery is not None:
            self._nursery.start_soon(self._worker)

    async def _next_request(self) -> tuple[Entry, Any, rq.Request, Any] | None:
        while not self._stopping:
            if not self._ready:
                self._reap()
            if self._ready:
                request = self._dispatch(self._ready.popleft())
                self._in_a_row += 1
                if self._in_a_row >= READS_BETWEEN_CHECKPOINTS:
                    self._in_a_row = 0
                    self._submit()
                    await trio.lowlevel.checkpoint()
                if request is not None:
                    return request
                continue
            self._in_a_row = 0
            self._submit()  # (the replies answered at once)
            self._reap()
            if self._ready:
                continue
            try:
                await trio.lowlevel.wait_readable(self.ring.fd)
            except trio.ClosedResourceError:
                return None
        return None

    def _reap(self) -> None:
        for index, res in self.ring.completions():
            if res == 0:
                self._ready.append(self.entries[index])
            elif -res in GOING:
                log.debug("ring entry %d: %s", index, os.strerror(-res))
                self.stop()
            else:
                self._refuse(-res)

    def _dispatch(self, entry: Entry) -> tuple[Entry, Any, rq.Request, Any] | None:
        """Decode the request in ``entry``: what to answer it with, or None when it was answered here."""
        self.requests += 1
        try:
            start, length, entry.commit_id = uring.gather(entry.view)
            req = rq.decode(entry.memory, length, entry.view, self._options, start)
        except rq.MalformedRequest as e:
            log.error("%s", e)
            if e.unique is not None:
                entry.commit_id = e.unique
                self._commit(entry, e.unique, replies.error(e.unique, errno.EIO), False)
            return None
        op = req.opcode
        handler = self._handlers.get(op)
        if handler is None:
            if op == abi.FUSE_DESTROY:
                self._commit(entry, req.unique, replies.empty(req.unique), False)
            else:
                log.debug("%s not handled: ENOSYS", req.name_of_opcode)
                self._commit(entry, req.unique, replies.error(req.unique, errno.ENOSYS), False)
            return None
        buf = None
        if isinstance(req, rq.Write) and req.data.nbytes * 2 >= self._buffers.size:
            # (a smaller one the channel copies itself, before the operation starts)
            data = req.data
            n = data.nbytes
            buf = self._buffers.take()
            buf.view[:n] = data
            req.data = memoryview(buf.data)[:n]
            data.release()
            self.write_bytes_copied += n
        return entry, handler, req, buf


async def _read(channel: Any, r: rq.Read) -> Reply:
    """READ for a ring entry: the data goes into the entry (no pipe to splice from)."""
    data = await channel.ops.read(r.fh, r.offset, r.size)
    if isinstance(data, list | tuple):
        reply = replies.data_parts(r.unique, data)
    else:
        if len(data) > r.size:
            data = memoryview(data)[: r.size]
        reply = replies.data(r.unique, data)
    channel.ring.read_bytes_copied += sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in reply[1:])
    return reply
