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
from collections.abc import Callable, Mapping
from typing import Any

import trio

from .io_uring import Ring, buffer_address
from .kernel import abi, replies, uring
from .kernel import requests as rq
from .kernel.interrupts import Interrupts
from .workers import READS_BETWEEN_CHECKPOINTS, Task, Worker, Workers

log = logging.getLogger(__name__)

ENTRIES_PER_QUEUE = 16  # at most; fewer on machines of many CPUs (ENTRIES_IN_ALL)
ENTRIES_IN_ALL = 64
MIN_ENTRIES_PER_QUEUE = 2
DRAIN_TIMEOUT = 5.0
# the kernel's switch (module parameter of fuse); FUSE offers io_uring at INIT only while it is on
ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"
CPUS_POSSIBLE = "/sys/devices/system/cpu/possible"
# completions of an entry that mean the connection is going away
GOING = (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED, errno.ENODEV)

Reply = Any


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


class FuseRing(Workers):
    """The io_uring of one FUSE connection (``fuse_fd``) and its entries: ``queues`` queues (one per
    possible CPU unless given) of ``per_queue`` entries. Making it makes the io_uring (RingError when
    the system has none); the entries are made by :meth:`serve`, once INIT said how large a request
    gets."""

    def __init__(self, fuse_fd: int, queues: int | None = None, per_queue: int | None = None) -> None:
        super().__init__()
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
        # set by serve()
        self._channel: Any = None
        self._handlers: Mapping[int, Any] = {}
        self._interrupts: Interrupts[Worker] = Interrupts()
        self._interruptible: frozenset[int] = frozenset()
        self._options = rq.Options()
        self.buffers: Any = None
        self._send_to_device: Callable[[bytes], None] = lambda reply: None

    # -- running -------------------------------------------------------------------------------------
    async def serve(
        self,
        payload: int,
        channel: Any,
        handlers: Mapping[int, Any],
        interrupts: Interrupts[Worker],
        interruptible: frozenset[int],
        options: rq.Options,
        buffers: Any,
        send_to_device: Callable[[bytes], None],
    ) -> None:
        """Register ``payload``-byte entries with the kernel and answer the requests they bring with
        ``handler(channel, request)``, until :meth:`stop`. A reply to an interrupt goes to /dev/fuse
        by ``send_to_device``; WRITE data is copied into ``buffers``."""
        self._channel = channel
        self._handlers = {**handlers, abi.FUSE_READ: _read}
        self._interrupts = interrupts
        self._interruptible = interruptible
        self._options = options
        self.buffers = buffers
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
        await self.answer_requests(DRAIN_TIMEOUT)

    def _wake_reader(self) -> None:
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
    def _finish(self, w: Worker, reply: Reply, waited: bool) -> None:
        # answered at once: the commit goes with the next submission (before the reaper waits);
        # answered after a wait: at once, as the reaper may be waiting
        assert w.unique is not None and w.entry is not None
        self._interrupts.finished(w.unique)
        entry, unique = w.entry, w.unique
        w.entry = w.unique = None
        self._commit(entry, unique, reply, waited)
        if w.buf is not None:
            self.buffers.give_back(w.buf)
            w.buf = None

    def _send(self, reply: Reply) -> None:
        self._send_to_device(reply)

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

    async def _next_request(self) -> Task | None:
        while not self.stopping:
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

    def _dispatch(self, entry: Entry) -> Task | None:
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
        if isinstance(req, rq.Write) and req.data.nbytes * 2 >= self.buffers.size:
            # (a smaller one the channel copies itself, before the operation starts)
            data = req.data
            n = data.nbytes
            buf = self.buffers.take()
            buf.view[:n] = data
            req.data = memoryview(buf.data)[:n]
            data.release()
            self.write_bytes_copied += n
        return handler, req, buf, entry


async def _read(channel: Any, r: rq.Read) -> Reply:
    """READ for a ring entry: the data goes into the entry (no pipe to splice from)."""
    reply = replies.read(r.unique, await channel.ops.read(r.fh, r.offset, r.size), r.size)
    channel.ring.read_bytes_copied += replies.payload_length(reply)
    return reply
