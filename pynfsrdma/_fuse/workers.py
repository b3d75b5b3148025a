"""The workers that answer FUSE requests, for both ways requests come to the native channel: read
from /dev/fuse (:mod:`.devfuse`) or taken from io_uring entries (:mod:`.uring_channel`).

One worker at a time, the reader, takes the next request and answers it itself: it runs the
handler's first step at once, and an operation answered then (a cached attribute) costs no task
switch. Only when the operation has to wait does the reader hand the reading on, to a worker
standing by or a new one. As many stand by as requests the kernel may have out at once
(``workers_kept``: its background requests, read-ahead and writeback, and a few more), so that a
burst of replies followed by a burst of requests starts and ends no task; one that finds that many
waiting ends, and there are MAX_WORKERS at most. An INTERRUPT cancels the worker answering its request when the
operation is interruptible (it sees ``trio.Cancelled``; the request is answered EINTR); an
INTERRUPT for a request not seen yet is answered EAGAIN at the next request, as the kernel asks.

What a channel adds is how the next request is taken (:meth:`Workers._next_request`), how a reply
goes back (:meth:`Workers._finish`), how a reply goes to /dev/fuse (:meth:`Workers._send`) and how
the reader is woken when the channel stops (:meth:`Workers._wake_reader`).
"""

from __future__ import annotations

import abc
import errno
import logging
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import trio

from .kernel import replies
from .kernel import requests as rq
from .kernel.interrupts import Interrupts
from .lowlevel import FUSEError

log = logging.getLogger(__name__)

WORKERS_KEPT = 4  # workers standing by at most, besides the kernel's background requests
MAX_WORKERS = 256
READS_BETWEEN_CHECKPOINTS = 64  # requests answered in a row before the reader lets other tasks run

# a handler: the channel's answer to one kind of request (its reply: bytes, a list of parts, or
# what the channel sends in its own way, such as a READ's pipe)
Handler = Callable[[Any, Any], Coroutine[Any, Any, Any]]
# a request to answer: its handler, the request, the request buffer it holds (or None), and the
# ring entry its reply goes to (None on /dev/fuse)
Task = tuple[Handler, rq.Request, Any, Any]


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    """Go on running ``coro``, which was stepped by hand once and yielded ``yielded``, as if it had
    been awaited from the start: what trio sends or throws goes to it."""
    try:
        while True:
            try:
                sent = yield yielded
            except BaseException as e:
                yielded = coro.throw(e)
            else:
                yielded = coro.send(sent)
    except StopIteration as done:
        return done.value
    finally:
        coro.close()


class Worker:
    """A worker task's state: the cancel scope an INTERRUPT cancels, and the request it answers
    (its unique, the request buffer it holds, the ring entry its reply goes to)."""

    __slots__ = ("buf", "entry", "interrupted", "interruptible", "scope", "unique")

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.interrupted = False  # the scope was cancelled (by an INTERRUPT)
        self.interruptible = False  # the request answered may be cancelled
        self.unique: int | None = None
        self.buf: Any = None
        self.entry: Any = None

    def interrupt(self) -> None:
        if self.interruptible:
            self.interrupted = True
            self.scope.cancel()


class Workers(abc.ABC):
    """The worker scheme of a channel; the channel sets ``_channel`` (what handlers are called
    with), ``buffers`` (the pool request buffers go back to), ``_interrupts`` and
    ``_interruptible`` (the opcodes an INTERRUPT may cancel)."""

    _channel: Any
    buffers: Any
    _interrupts: Interrupts[Worker]
    _interruptible: frozenset[int]

    def __init__(self) -> None:
        self.nursery: trio.Nursery | None = None  # the workers', while they run
        self.stopping = False
        self._stopped = trio.Event()
        self._reading = False  # a worker holds the reader role
        self._standby = trio.lowlevel.ParkingLot()  # workers waiting for it
        self._workers = 0
        self.workers_kept = WORKERS_KEPT  # workers standing by at most (see :meth:`keep_workers`)
        self._hand_offs = 0
        self._in_a_row = 0
        self.answered: dict[int, int] = {}  # requests handed to a handler, by opcode

    def keep_workers(self, background: int) -> None:
        """Let as many workers stand by as the kernel may have ``background`` requests out, and
        WORKERS_KEPT more for requests of the foreground."""
        self.workers_kept = min(MAX_WORKERS, WORKERS_KEPT + background)

    def answered_by_name(self) -> dict[str, int]:
        """The requests handed to a handler so far, by the name of their opcode (``pynfsrdma stats
        --json``'s ``fuse_requests``: what the kernel asked for, FORGETs, INTERRUPTs and INIT aside)."""
        return {rq.name_of(op): n for op, n in sorted(self.answered.items())}

    # -- what a channel says -------------------------------------------------------------------------
    @abc.abstractmethod
    async def _next_request(self) -> Task | None:
        """The next request to answer (those answered on the spot are answered there); None: stop."""

    @abc.abstractmethod
    def _finish(self, w: Worker, reply: Any, waited: bool) -> None:
        """Send ``reply`` to the request ``w`` answers (``waited``: its operation waited, so no
        reply of the reader's goes with it) and let go of what the request held."""

    @abc.abstractmethod
    def _send(self, reply: Any) -> None:
        """Write ``reply`` to /dev/fuse."""

    @abc.abstractmethod
    def _wake_reader(self) -> None:
        """Wake the reader waiting for a request, once stopping."""

    def _stopped_reading(self, nursery: trio.Nursery) -> None:
        """No more requests are taken; the workers' ``nursery`` still runs. A channel with nothing
        to do then (the ring) keeps this."""
        return None

    # -- the workers ---------------------------------------------------------------------------------
    async def answer_requests(self, drain_timeout: float) -> None:
        """Take and answer requests until :meth:`stop`; those being answered then get
        ``drain_timeout`` seconds to finish."""
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            nursery.start_soon(self._worker)
            await self._stopped.wait()
            self._stopped_reading(nursery)
            nursery.cancel_scope.deadline = trio.current_time() + drain_timeout

    def stop(self) -> None:
        """Take no more requests."""
        if self.stopping:
            return
        self.stopping = True
        self._stopped.set()
        self._standby.unpark_all()
        self._wake_reader()

    async def _worker(self) -> None:
        w = Worker()
        self._workers += 1
        try:
            while not self.stopping:
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
                self.buffers.give_back(w.buf)

    async def _work(self, w: Worker) -> bool:
        """Take and answer requests until stopping (False), until an INTERRUPT came too late for the
        request it was meant for (False: the worker takes a fresh cancel scope), or until enough
        others stand by (True: this worker ends)."""
        while not self.stopping:
            if self._reading:
                if len(self._standby) >= self.workers_kept:
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
            handler, req, w.buf, w.entry = request
            opcode = req.opcode
            answered = self.answered
            answered[opcode] = answered.get(opcode, 0) + 1
            w.unique = unique = req.unique
            w.interruptible = opcode in self._interruptible
            interrupts = self._interrupts
            if interrupts.started(unique, w):
                w.interrupt()
            if interrupts.due:
                for due in interrupts.take_due():
                    self._send(replies.error(due, errno.EAGAIN))
            # the operation's first step runs here; if it has to wait, the reading goes on in
            # another worker meanwhile
            hand_offs = self._hand_offs
            coro = handler(self._channel, req)
            try:
                try:
                    reply = coro.send(None)
                except StopIteration as done:
                    reply = done.value
                else:
                    self._hand_off()
                    reply = await _resume(coro, reply)
            except FUSEError as e:
                reply = replies.error(unique, e.errno)
            except Exception:
                log.exception("%s (unique %d) failed", req.name_of_opcode, unique)
                reply = replies.error(unique, errno.EIO)
            del req, request, coro
            self._finish(w, reply, self._hand_offs != hand_offs)
            if w.interrupted:
                return False
        return False

    def _hand_off(self) -> None:
        """Someone else reads while this worker waits for its operation."""
        self._hand_offs += 1
        if len(self._standby):
            self._standby.unpark()
        elif self._workers < MAX_WORKERS and self.nursery is not None:
            self.nursery.start_soon(self._worker)
