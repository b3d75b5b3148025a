"""The native FUSE channel: the kernel protocol (:mod:`.kernel`) spoken on /dev/fuse from trio, with
no libfuse.

A READ is answered through a pipe of its own where the transport can splice the data from its socket
into it (:mod:`.reply_pipe`, :mod:`~pynfsrdma._client.read_sink`): the reply then goes from the pipe to
/dev/fuse by splice, and its data never passes through this process; otherwise its data is written as
below.

Requests are read into pooled buffers (as large as the largest request, ``max_write`` plus the headers)
by one worker task at a time, the reader, which reads the next request into the buffer of the last
unless that was a WRITE whose payload is still being answered. The reader answers the request it read itself: it calls the
:class:`~.lowlevel.Operations` method and writes the reply with one ``writev`` (a READ's data from the
object the operation returned; a WRITE's data reaches the operation as a view into the buffer the kernel
wrote it to). Only when the operation has to wait does the reader hand the reading on, to a worker
standing by or a new one; an operation answered at once (a cached attribute, the null file system of the
benchmarks) costs no task switch at all. A buffer goes back to the pool once nothing refers to its
memory (the write gathering keeps payloads until a COMMIT); a payload of less than half a MiB is
copied out instead, so that a small write does not hold a whole buffer.

FORGETs are gathered and handed over in batches; an INTERRUPT cancels the worker answering that request
if the operation is one the operations call interruptible (it sees ``trio.Cancelled``; the request is
answered EINTR); otherwise the request is answered as usual. The loop ends when the file
system is unmounted (the device reads ENODEV) or on :meth:`NativeChannel.terminate`; requests being
answered then get a little time to finish. Notifications for the operations (``ops.kernel``) are
written from a thread: the kernel may wait for requests of ours before it takes them.

With ``io_uring`` (``-o io_uring``) and a kernel that offers FUSE over io_uring at INIT, the requests
come by a ring instead (:mod:`.uring_channel`), answered by the same handlers; INIT, FORGET and
INTERRUPT still come by /dev/fuse, read here.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import logging
import os
import stat
import sys
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import trio

from .._client import read_sink
from .._client.write_buffers import StableBuffer
from .._trio_compat import run_sync_abandoning
from . import fusermount, uring_channel
from .kernel import abi, notify, replies, uring
from .kernel import requests as rq
from .kernel.forgets import Forgets
from .kernel.init import (
    KERNEL_MAX_BACKGROUND,
    LOCKS,
    MAX_PAGES,
    MAX_WRITE,
    WANTED,
    InitRefused,
    Negotiated,
    Wanted,
    negotiate,
    sized,
)
from .kernel.interrupts import Interrupts
from .lowlevel import EntryAttributes, FileLock, FUSEError, Operations, RequestContext, SetattrFields
from .reply_pipe import ReplyPipe, ReplyPipes
from .workers import READS_BETWEEN_CHECKPOINTS, Task, Worker, Workers

log = logging.getLogger(__name__)

DRAIN_TIMEOUT = 5.0  # seconds requests in progress get to finish once the loop stops reading
FORGET_BATCH = 512  # nodes gathered before the operations hear of them, at the latest
FREE_BUFFERS_KEPT = 16
LENT_CHECKS = 2  # lent buffers a take looks at, at most: one more than it can make
NOTIFY_WAIT = 1.0  # seconds a notification holds up whoever sent it, at most (then it goes on alone)
NOTIFIERS = 16  # threads writing notifications at once, at most
# a WRITE payload this small is copied out of its request buffer (whatever the buffers' size)
SMALL_WRITE = MAX_WRITE // 2
# the kernel's largest request in pages, which root may raise (kernels 6.13 and later); before that
# sysctl existed the limit was fixed at MAX_PAGES
MAX_PAGES_LIMIT = "/proc/sys/fs/fuse/max_pages_limit"
# errnos of a reply the kernel no longer waits for: the request was interrupted or aborted (ENOENT),
# or the file system is gone (ENODEV, EBADF)
GONE = (errno.ENOENT, errno.ENODEV, errno.EBADF, errno.ENOTCONN)

Reply = bytes | list[Any] | ReplyPipe
# PYNFSRDMA_SPLICE=0 answers every READ by writev (for measuring)
SPLICE = hasattr(os, "splice") and os.environ.get("PYNFSRDMA_SPLICE", "1") != "0"


class RequestBuffer:
    """One buffer requests are read into, and a view of it for decoding. Its memory is a
    :class:`StableBuffer`: an RPC-over-RDMA connection keeps it registered between calls, and a
    WRITE's payload goes out from it through a memory window, with no registration of its own."""

    __slots__ = ("__weakref__", "data", "idle_refs", "view")

    def __init__(self, size: int) -> None:
        self.data = StableBuffer(size)
        self.view = memoryview(self.data)
        self.idle_refs = sys.getrefcount(self.data)

    def referenced(self) -> bool:
        """Something besides this object (and its own view) holds the memory: a view of a WRITE's
        payload that the operations kept (a transport's registration of it does not count)."""
        return sys.getrefcount(self.data) - self.data.cached_refs > self.idle_refs


class RequestBuffers:
    """The pool of request buffers. A buffer whose memory is still referenced when it is given back
    is lent; it is free again once nothing refers to it. A take that finds no free buffer looks at
    no more than ``LENT_CHECKS`` of the lent ones, the longest lent first, so that its cost does not
    grow with the number of views the operations keep."""

    def __init__(self, size: int, keep: int = FREE_BUFFERS_KEPT) -> None:
        self.size = size
        self.keep = keep
        self._free: list[RequestBuffer] = []
        self._lent: collections.deque[RequestBuffer] = collections.deque()
        self._made: weakref.WeakSet[RequestBuffer] = weakref.WeakSet()
        self.allocated = 0

    def take(self) -> RequestBuffer:
        if self._free:
            return self._free.pop()
        lent = self._lent
        for _ in range(min(LENT_CHECKS, len(lent))):
            b = lent.popleft()
            if not b.referenced():
                return b
            lent.append(b)
        self.allocated += 1
        b = RequestBuffer(self.size)
        self._made.add(b)
        return b

    def give_back(self, b: RequestBuffer) -> None:
        if b.referenced():
            self._lent.append(b)
        elif len(self._free) < self.keep:
            self._free.append(b)

    @property
    def lent(self) -> int:
        return sum(1 for b in self._lent if b.referenced())

    def holds(self, view: memoryview) -> bool:
        """``view`` is memory of one of this pool's buffers."""
        return any(view.obj is b.data for b in self._made)


Handler = Callable[["NativeChannel", Any], Coroutine[Any, Any, Reply]]


class _Kernel:
    """Notifications to the kernel for the operations layer."""

    def __init__(self, channel: NativeChannel) -> None:
        self._channel = channel

    async def invalidate_inode(self, ino: int, attr_only: bool = False) -> None:
        await self._channel.notify(notify.inval_inode(ino, attr_only))

    async def invalidate_entry(self, parent: int, name: bytes) -> None:
        await self._channel.notify(notify.inval_entry(parent, name))

    async def notify_delete(self, parent: int, child: int, name: bytes) -> None:
        await self._channel.notify(notify.delete(parent, child, name))


def _ctx(r: rq.Request, umask: int = 0) -> RequestContext:
    return RequestContext(r.uid, r.gid, r.pid, umask)


def _handles_locks(ops: Operations) -> bool:
    cls = type(ops)
    return cls.getlk is not Operations.getlk and cls.setlk is not Operations.setlk


def _lock_flags(ops: Operations) -> int:
    """The INIT flags for the locks ``ops`` answers: none of the kinds it keeps local (the kernel then
    keeps those locks itself, local to the mount)."""
    if not _handles_locks(ops):
        return 0
    local = (abi.FUSE_POSIX_LOCKS if "posix" in ops.local_locks else 0) | (
        abi.FUSE_FLOCK_LOCKS if "flock" in ops.local_locks else 0)
    return LOCKS & ~local


def kernel_max_pages() -> int:
    """The kernel's largest FUSE request in pages (``fs.fuse.max_pages_limit``), read before the
    mount: the kernel takes no more than that whatever INIT asks for."""
    try:
        with open(MAX_PAGES_LIMIT) as f:
            return max(1, int(f.read()))
    except (OSError, ValueError):
        return MAX_PAGES


def _cache_flags(ops: Operations) -> int:
    """The INIT flag for the kernel's writeback cache, when ``ops`` wants it."""
    return abi.FUSE_WRITEBACK_CACHE if ops.writeback_cache else 0


class NativeChannel(Workers):
    """Mount on /dev/fuse and serve ``ops`` until unmounted or :meth:`terminate` is called."""

    name = "native"

    def __init__(
        self,
        ops: Operations,
        mountpoint: str,
        options: set[str],
        wanted: Wanted | None = None,
        splice: bool = SPLICE,
        io_uring: bool | None = None,
        *,
        max_pages: int | None = None,
        read_ahead: int = MAX_WRITE,
        max_background: int | None = None,
    ) -> None:
        """``wanted``: what INIT asks for, as given; else requests of as many pages as the kernel
        allows (``max_pages`` at most), and background requests for a read-ahead window of
        ``read_ahead`` bytes (:func:`~.kernel.init.sized`), or ``max_background`` of them."""
        super().__init__()
        self._channel = self  # (what the handlers are called with)
        self.ops = ops
        self.spec = fusermount.MountSpec.from_options(mountpoint, options)
        if wanted is None:
            limit = kernel_max_pages()
            pages = limit if max_pages is None else min(max_pages, limit)
            wanted = sized(WANTED | _lock_flags(ops) | _cache_flags(ops), pages, read_ahead)
            if max_background is not None:
                wanted.max_background = max_background
                wanted.congestion_threshold = max(1, max_background * 3 // 4)
        self.wanted = wanted
        self.buffers = RequestBuffers(wanted.max_write + abi.REQUEST_HEADER_ROOM)
        self.pipes = ReplyPipes() if splice else None
        self.bytes_written = 0  # READ data written from this process's memory (writev)
        self.write_bytes_in_place = 0  # WRITE data handed on as a view of the buffer the kernel wrote
        self.write_bytes_copied = 0  # WRITE data copied out of it (a small write)
        self.largest_read = 0  # the largest READ and WRITE requests the kernel sent (bytes)
        self.largest_write = 0
        self.agreed: Negotiated | None = None
        self.initialized = trio.Event()
        self.requests = 0  # read so far
        self._mounted: fusermount.Mounted | None = None
        self._fd = -1
        self._options = rq.Options()
        self._forgets = Forgets()
        # the buffer the reader reads the next request into: the last one's, unless a WRITE kept it
        self._spare: RequestBuffer | None = None
        self._interrupts: Interrupts[Worker] = Interrupts()
        self._interruptible = frozenset(
            o.number for o in rq.OPCODES.values() if o.operation is not None and o.operation in ops.interruptible
        )
        self._notifiers = trio.CapacityLimiter(NOTIFIERS)
        # requests by FUSE over io_uring where the kernel offers it (None: IO_URING_DEFAULT, and a
        # kernel that does not offer it is no news; True: asked for, and its absence is a warning)
        self.io_uring = uring.IO_URING_DEFAULT if io_uring is None else io_uring
        self._io_uring_asked = bool(io_uring)
        self.ring: uring_channel.FuseRing | None = None
        ops.kernel = _Kernel(self)

    # -- the Channel interface -------------------------------------------------------------------------
    def mount(self) -> None:
        self._mounted = fusermount.mount(self.spec)
        self.attach(self._mounted.fd)

    def attach(self, fd: int) -> None:
        """Serve the kernel connection ``fd``, opened and mounted by someone else (it is not closed
        here: :meth:`close` lets go of it only when :meth:`mount` opened it)."""
        self._fd = fd
        os.set_blocking(fd, False)

    async def serve(self) -> None:
        if self._fd < 0:
            raise RuntimeError("not mounted")
        await self.answer_requests(DRAIN_TIMEOUT)

    def _stopped_reading(self, nursery: trio.Nursery) -> None:
        if self._forgets:
            nursery.start_soon(self._forget, self._forgets.take())

    def terminate(self) -> None:
        self.stop()

    def counts(self) -> dict[str, int]:
        """READ replies by how their data went (spliced from a pipe, or written from memory), WRITE
        data by how it reached the operations (in the request's buffer, or copied), how many
        request buffers were made, and the largest READ and WRITE requests."""
        pipes = self.pipes
        return {
            "read_replies_spliced": pipes.spliced if pipes else 0,
            "read_bytes_spliced": pipes.bytes_spliced if pipes else 0,
            "read_bytes_written": self.bytes_written,
            "write_bytes_in_place": self.write_bytes_in_place,
            "write_bytes_copied": self.write_bytes_copied,
            "request_buffers_allocated": self.buffers.allocated,
            "ring_requests": self.ring.requests if self.ring else 0,
            "ring_read_bytes_copied": self.ring.read_bytes_copied if self.ring else 0,
            "ring_write_bytes_copied": self.ring.write_bytes_copied if self.ring else 0,
            "largest_read_request": self.largest_read,
            "largest_write_request": self.largest_write,
        }

    def close(self) -> None:
        if self.pipes is not None:
            self.pipes.close()
        if self._mounted is not None:
            self._mounted.unmount()
            self._mounted = None
        if self.ring is not None:
            self.ring.close()
        self._fd = -1

    # -- notifications -------------------------------------------------------------------------------
    async def notify(self, message: bytes) -> None:
        """Write a notification from a thread of its own: the kernel may wait for requests of ours
        before it takes it (INVAL_ENTRY takes the directory's lock, which a LOOKUP or RENAME there
        holds until answered; INVAL_INODE locks the pages READs in flight hold). The caller waits
        NOTIFY_WAIT at most, or until cancelled; then the thread writes it on its own, and the
        request that awaited it is answered meanwhile, which is what the kernel waits for."""
        await self.initialized.wait()
        fd = self._fd
        if fd < 0:
            return
        with trio.move_on_after(NOTIFY_WAIT):
            await run_sync_abandoning(self._write_notification, fd, message, limiter=self._notifiers)

    @staticmethod
    def _write_notification(fd: int, message: bytes) -> None:
        try:
            os.write(fd, message)
        except OSError as e:
            if e.errno not in (*GONE, errno.ENOTDIR):
                log.info("notification %r: %s", message[:24], e)

    # -- the workers ---------------------------------------------------------------------------------
    def _wake_reader(self) -> None:
        if self.ring is not None:
            self.ring.stop()
        if self._fd >= 0:
            trio.lowlevel.notify_closing(self._fd)  # (wakes the reader)

    def _finish(self, w: Worker, reply: Reply, waited: bool) -> None:
        assert w.unique is not None
        self._interrupts.finished(w.unique)
        w.unique = None
        self._send(reply)
        if w.buf is not None:
            self.buffers.give_back(w.buf)
            w.buf = None

    async def _next_request(self) -> Task | None:
        """The next request to answer (those answered on the spot are answered here); None: stop."""
        fd = self._fd
        buffers = self.buffers
        while not self.stopping:
            buf = self._spare
            if buf is None:
                buf = buffers.take()
            else:
                self._spare = None
            try:
                n = os.readv(fd, [buf.data])
            except BlockingIOError:
                self._spare = buf
                self._idle()
                try:
                    await trio.lowlevel.wait_readable(fd)
                except trio.ClosedResourceError:
                    return None
                continue
            except OSError as e:
                buffers.give_back(buf)
                if e.errno == errno.ENODEV:
                    log.debug("unmounted")
                    self.stop()
                    return None
                if e.errno in (errno.EINTR, errno.ENOENT):  # (ENOENT: aborted before it was read)
                    continue
                raise
            if n == 0:  # (a connection that is not the kernel's, closed)
                buffers.give_back(buf)
                self.stop()
                return None
            self.requests += 1
            request = self._dispatch(buf, n)
            self._in_a_row += 1
            if self._in_a_row >= READS_BETWEEN_CHECKPOINTS:
                self._in_a_row = 0
                await trio.lowlevel.checkpoint()
            if request is not None:
                return request
        return None

    def _idle(self) -> None:
        """Nothing to read for now: hand over the gathered FORGETs."""
        self._in_a_row = 0
        if self._forgets and self.nursery is not None:
            self.nursery.start_soon(self._forget, self._forgets.take())

    async def _forget(self, forgets: list[tuple[int, int]]) -> None:
        try:
            await self.ops.forget(forgets)
        except Exception:  # (a FORGET has no reply to carry it: it must not end the loop either)
            log.exception("forget of %d nodes failed", len(forgets))

    def _dispatch(self, buf: RequestBuffer, n: int) -> Task | None:
        """Decode one request: what to answer it with, or None when it was dealt with here."""
        try:
            req = rq.decode(buf.data, n, buf.view, self._options)
        except rq.MalformedRequest as e:
            self.buffers.give_back(buf)
            log.error("%s", e)
            if e.unique is not None and e.opcode is not None and rq.answered(e.opcode):
                self._send(replies.error(e.unique, errno.EIO))
            return None
        op = req.opcode
        handler = HANDLERS.get(op)
        if handler is not None:
            if op == abi.FUSE_WRITE:
                return handler, req, buf, None
            self._spare = buf  # (the request holds copies of what it needs: the next is read into it)
            return handler, req, None, None
        self._spare = buf
        if op == abi.FUSE_FORGET or op == abi.FUSE_BATCH_FORGET:
            self._forgets.add(req)
            if len(self._forgets) >= FORGET_BATCH and self.nursery is not None:
                self.nursery.start_soon(self._forget, self._forgets.take())
        elif isinstance(req, rq.Interrupt):
            target = self._interrupts.interrupt(req)
            if target is not None:
                target.interrupt()
        elif isinstance(req, rq.Init):
            self._init(req)
        elif op == abi.FUSE_DESTROY:
            self._send(replies.empty(req.unique))
        else:
            log.debug("%s not handled: ENOSYS", req.name_of_opcode)
            self._send(replies.error(req.unique, errno.ENOSYS))
        return None

    def _init(self, req: rq.Init) -> None:
        try:
            reply, agreed = negotiate(req, self._wanted_with_ring(req))
        except InitRefused as e:
            log.error("%s", e)
            self._send(e.reply)
            self.stop()
            return
        self._send(reply)
        if agreed is not None:
            self.agreed = agreed
            self._options = agreed.options
            self.ops.writeback_cache = agreed.has(abi.FUSE_WRITEBACK_CACHE)
            self.keep_workers(agreed.max_background or KERNEL_MAX_BACKGROUND)
            log.debug("FUSE %d.%d, flags %#x, max_write %d", agreed.major, agreed.minor, agreed.flags, agreed.max_write)
            self._start_ring(agreed)
            self.initialized.set()

    # -- FUSE over io_uring (uring_channel) -------------------------------------------------------------
    def _wanted_with_ring(self, req: rq.Init) -> Wanted:
        """What to ask for at INIT: FUSE over io_uring too, when the mount wants it, the kernel offers
        it and an io_uring can be made (else the requests keep coming by /dev/fuse, said in one line)."""
        if not self.io_uring or self.ring is not None:
            return self.wanted
        if not req.flags & abi.FUSE_OVER_IO_URING:
            switch = uring_channel.kernel_switch()
            log.log(logging.WARNING if self._io_uring_asked else logging.INFO,
                    "the kernel offers no FUSE over io_uring (%s is %s): requests go through /dev/fuse",
                    uring_channel.ENABLE_URING, "absent" if switch is None else "Y" if switch else "N")
            return self.wanted
        try:
            self.ring = uring_channel.FuseRing(self._fd)
        except OSError as e:
            log.warning("no io_uring for FUSE (%s): requests go through /dev/fuse", e.strerror or e)
            return self.wanted
        return dataclasses.replace(self.wanted, flags=self.wanted.flags | abi.FUSE_OVER_IO_URING)

    def _start_ring(self, agreed: Negotiated) -> None:
        ring = self.ring
        if ring is None:
            return
        if not agreed.has(abi.FUSE_OVER_IO_URING) or self.nursery is None:
            self.ring = None
            ring.close()
            return
        ring.keep_workers(agreed.max_background or KERNEL_MAX_BACKGROUND)
        self.nursery.start_soon(
            ring.serve, uring.payload_size(agreed.max_write, agreed.max_pages), self, HANDLERS,
            self._interrupts, self._interruptible, agreed.options, self.buffers, self._send)

    def _send(self, reply: Reply) -> None:
        try:
            if isinstance(reply, bytes):
                os.write(self._fd, reply)
            elif isinstance(reply, ReplyPipe):
                self._send_pipe(reply)
            else:
                os.writev(self._fd, reply)
        except OSError as e:
            if e.errno in GONE:
                log.debug("reply not taken: %s", e)
            else:
                log.error("reply refused by the kernel: %s", e)

    def _send_pipe(self, pipe: ReplyPipe) -> None:
        """Splice a READ reply from its pipe into the kernel's request; if the kernel refuses it (it
        never should), the request is answered EIO rather than left waiting."""
        pipes = self.pipes
        assert pipes is not None
        try:
            sent = pipe.send(self._fd)
        except OSError as e:
            if e.errno in GONE:
                raise
            log.error("READ reply of %d bytes refused by the kernel: %s", pipe.length, e)
            sent = -1
        finally:
            pipes.give_back(pipe)
        if sent == pipe.length + abi.OUT_HEADER.size:
            pipes.spliced += 1
            pipes.bytes_spliced += pipe.length
        else:
            self._send(replies.error(pipe.unique, errno.EIO))

    # -- the requests: a handler per operation, of the operation's name (kernel.requests.OPCODES) ------
    async def lookup(self, r: rq.Named) -> Reply:
        a = await self.ops.lookup(r.nodeid, r.name, _ctx(r))
        if isinstance(a, tuple):
            return replies.entry_of_fields(r.unique, a)
        return replies.entry(r.unique, a)

    async def getattr(self, r: rq.Getattr) -> Reply:
        a = await self.ops.getattr(r.nodeid, _ctx(r))
        if isinstance(a, tuple):
            return replies.attr_of_fields(r.unique, a)
        return replies.attr(r.unique, a)

    async def setattr(self, r: rq.Setattr) -> Reply:
        v = r.valid
        attr = EntryAttributes(
            st_ino=r.nodeid,
            st_mode=r.mode,
            st_uid=r.attr_uid,
            st_gid=r.attr_gid,
            st_size=r.size,
            st_atime_ns=r.atime * 1_000_000_000 + r.atimensec,
            st_mtime_ns=r.mtime * 1_000_000_000 + r.mtimensec,
            st_ctime_ns=r.ctime * 1_000_000_000 + r.ctimensec,
        )
        fields = SetattrFields(
            update_atime=bool(v & abi.FATTR_ATIME),
            update_mtime=bool(v & abi.FATTR_MTIME),
            update_ctime=bool(v & abi.FATTR_CTIME),
            update_mode=bool(v & abi.FATTR_MODE),
            update_uid=bool(v & abi.FATTR_UID),
            update_gid=bool(v & abi.FATTR_GID),
            update_size=bool(v & abi.FATTR_SIZE),
            update_atime_now=bool(v & abi.FATTR_ATIME_NOW),
            update_mtime_now=bool(v & abi.FATTR_MTIME_NOW),
            kill_suidgid=bool(v & abi.FATTR_KILL_SUIDGID),
        )
        fh = r.fh if v & abi.FATTR_FH else None
        return replies.attr(r.unique, await self.ops.setattr(r.nodeid, attr, fields, fh, _ctx(r)))

    async def readlink(self, r: rq.Request) -> Reply:
        return replies.data(r.unique, await self.ops.readlink(r.nodeid, _ctx(r)))

    async def symlink(self, r: rq.Symlink) -> Reply:
        return replies.entry(r.unique, await self.ops.symlink(r.nodeid, r.name, r.target, _ctx(r)))

    async def mknod(self, r: rq.Mknod) -> Reply:
        return replies.entry(r.unique, await self.ops.mknod(r.nodeid, r.name, r.mode, r.rdev, _ctx(r, r.umask)))

    async def mkdir(self, r: rq.Mkdir) -> Reply:
        mode = (r.mode & ~stat.S_IFMT(r.mode)) | stat.S_IFDIR  # the kernel sends the permission bits only
        return replies.entry(r.unique, await self.ops.mkdir(r.nodeid, r.name, mode, _ctx(r, r.umask)))

    async def unlink(self, r: rq.Named) -> Reply:
        await self.ops.unlink(r.nodeid, r.name, _ctx(r))
        return replies.empty(r.unique)

    async def rmdir(self, r: rq.Named) -> Reply:
        await self.ops.rmdir(r.nodeid, r.name, _ctx(r))
        return replies.empty(r.unique)

    async def rename(self, r: rq.Rename) -> Reply:
        await self.ops.rename(r.nodeid, r.name, r.newdir, r.newname, r.flags, _ctx(r))
        return replies.empty(r.unique)

    async def link(self, r: rq.Link) -> Reply:
        return replies.entry(r.unique, await self.ops.link(r.oldnodeid, r.nodeid, r.name, _ctx(r)))

    async def open(self, r: rq.Open) -> Reply:
        return replies.open_file(r.unique, await self.ops.open(r.nodeid, r.flags, _ctx(r)))

    async def create(self, r: rq.Create) -> Reply:
        fi, attrs = await self.ops.create(r.nodeid, r.name, r.mode, r.flags, _ctx(r, r.umask))
        return replies.create(r.unique, attrs, fi)

    async def read(self, r: rq.Read) -> Reply:
        self.largest_read = max(self.largest_read, r.size)
        pipe = self.pipes.take(r.unique) if self.pipes is not None else None
        if pipe is None:
            return self._data(r, await self.ops.read(r.fh, r.offset, r.size))
        try:
            data = await self.ops.read_into(r.fh, r.offset, r.size, pipe)
            if isinstance(data, read_sink.SplicedPayload):
                if pipe.holds(data) and data.length <= r.size:
                    reply, pipe = pipe, None
                    return reply  # (sent by splice, and given back, by _send)
                data = data.materialize()
            return self._data(r, data)
        finally:
            if pipe is not None:
                self.pipes.give_back(pipe)  # type: ignore[union-attr]

    def _data(self, r: rq.Read, data: Any) -> Reply:
        reply = replies.read(r.unique, data, r.size)
        self.bytes_written += replies.payload_length(reply)
        return reply

    async def write(self, r: rq.Write) -> Reply:
        data: Any = r.data
        r.data = EMPTY_VIEW  # (the operation's reference is the only one that may outlive the request)
        self.largest_write = max(self.largest_write, data.nbytes)
        if data.nbytes < SMALL_WRITE:
            self.write_bytes_copied += data.nbytes
            small = bytes(data)
            data.release()
            data = small
        else:
            self.write_bytes_in_place += data.nbytes
        n = await self.ops.write(r.fh, r.offset, data)
        return replies.write(r.unique, n)

    async def statfs(self, r: rq.Request) -> Reply:
        return replies.statfs(r.unique, await self.ops.statfs(_ctx(r)))

    async def release(self, r: rq.Release) -> Reply:
        await self.ops.release(r.fh, r.lock_owner, bool(r.release_flags & abi.FUSE_RELEASE_FLOCK_UNLOCK))
        return replies.empty(r.unique)

    async def fsync(self, r: rq.Fsync) -> Reply:
        await self.ops.fsync(r.fh, bool(r.fsync_flags & abi.FUSE_FSYNC_FDATASYNC))
        return replies.empty(r.unique)

    async def setxattr(self, r: rq.Setxattr) -> Reply:
        await self.ops.setxattr(r.nodeid, r.name, r.value, _ctx(r))
        return replies.empty(r.unique)

    async def getxattr(self, r: rq.Getxattr) -> Reply:
        value = await self.ops.getxattr(r.nodeid, r.name, _ctx(r))
        return _sized(r, value)

    async def listxattr(self, r: rq.Getxattr) -> Reply:
        names = await self.ops.listxattr(r.nodeid, _ctx(r))
        return _sized(r, b"".join(n + b"\0" for n in names))

    async def removexattr(self, r: rq.Named) -> Reply:
        await self.ops.removexattr(r.nodeid, r.name, _ctx(r))
        return replies.empty(r.unique)

    async def flush(self, r: rq.Flush) -> Reply:
        await self.ops.flush(r.fh, r.lock_owner)
        return replies.empty(r.unique)

    async def opendir(self, r: rq.Open) -> Reply:
        return replies.open_dir(r.unique, await self.ops.opendir(r.nodeid, _ctx(r)))

    async def readdir(self, r: rq.Read) -> Reply:
        token = replies.DirentBuffer(r.size, plus=r.opcode == abi.FUSE_READDIRPLUS)
        await self.ops.readdir(r.fh, r.offset, token)
        return token.reply(r.unique)

    async def releasedir(self, r: rq.Release) -> Reply:
        await self.ops.releasedir(r.fh)
        return replies.empty(r.unique)

    async def fsyncdir(self, r: rq.Fsync) -> Reply:
        await self.ops.fsyncdir(r.fh, bool(r.fsync_flags & abi.FUSE_FSYNC_FDATASYNC))
        return replies.empty(r.unique)

    async def getlk(self, r: rq.Lk) -> Reply:
        lk = await self.ops.getlk(r.fh, r.owner, FileLock(r.start, r.end, r.type, r.lk_pid), _ctx(r))
        return replies.lock(r.unique, lk)

    async def setlk(self, r: rq.Lk) -> Reply:
        await self.ops.setlk(
            r.fh,
            r.owner,
            FileLock(r.start, r.end, r.type, r.lk_pid),
            r.opcode == abi.FUSE_SETLKW,
            bool(r.lk_flags & abi.FUSE_LK_FLOCK),
            _ctx(r),
        )
        return replies.empty(r.unique)

    async def access(self, r: rq.Access) -> Reply:
        if not await self.ops.access(r.nodeid, r.mask, _ctx(r)):
            raise FUSEError(errno.EACCES)
        return replies.empty(r.unique)

    async def fallocate(self, r: rq.Fallocate) -> Reply:
        await self.ops.fallocate(r.fh, r.mode, r.offset, r.length)
        return replies.empty(r.unique)

    async def lseek(self, r: rq.Lseek) -> Reply:
        return replies.lseek(r.unique, await self.ops.lseek(r.fh, r.offset, r.whence))

    async def copy_file_range(self, r: rq.CopyFileRange) -> Reply:
        n = await self.ops.copy_file_range(r.fh_in, r.off_in, r.fh_out, r.off_out, r.length, r.flags)
        if r.opcode == abi.FUSE_COPY_FILE_RANGE_64:
            return replies.copy_file_range_64(r.unique, n)
        return replies.write(r.unique, min(n, abi.WRITE_OUT_MAX))


EMPTY_VIEW = memoryview(b"")


def _sized(r: rq.Getxattr, value: bytes) -> Reply:
    """An xattr value or list: its size when asked with size 0; ERANGE when larger than asked."""
    if r.size == 0:
        return replies.xattr_size(r.unique, len(value))
    if len(value) > r.size:
        raise FUSEError(errno.ERANGE)
    return replies.data(r.unique, value)


# the handler of each request that asks the file system for an operation: the channel's method of the
# operation's name (kernel.requests.OPCODES names it)
HANDLERS: dict[int, Handler] = {
    o.number: getattr(NativeChannel, o.operation) for o in rq.OPCODES.values() if o.operation is not None
}
