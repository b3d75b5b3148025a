"""RPC calls over one transport: XIDs, call/reply matching, timeouts, and incoming callbacks.

An :class:`RpcConnection` owns one transport. Replies are matched to waiting calls by XID, and
incoming CALL messages (the NFSv4.1 backchannel on the same connection) go to a handler. A call is
a message kind (CALL or REPLY) first and an XID second: the XID spaces of the two directions are
independent.

Who reads the connection: over a transport whose ``receive`` a caller may run
(``Transport.caller_receives``: TCP), the task that sent a call reads the connection itself while
nobody else does (leader/follower): its own reply costs no pass through the scheduler. What it
reads for others (their replies, the server's callback CALLs) goes to them; when its own reply
came, it hands the reading on to a caller still waiting. The receive loop
(:meth:`RpcConnection.run`, started in the owner's nursery) reads only while no call has been made
for ``LOOP_IDLE`` seconds (callbacks to serve, the connection's end to see), and steps aside for
the next caller; while several calls are out it rests with no timeout at all, and is woken when
no more than one is left. Over other transports (RPC-over-RDMA, TLS) the receive loop reads everything.

A message that cannot be from a server keeping the protocol (too short for an RPC header, of no
message type, a reply whose header is malformed, a reply to an XID we never sent or that was
answered already) ends the connection with :class:`~pynfsrdma._transport.base.ProtocolViolation`:
its framing can no longer be trusted, and every call waiting on it fails with that error (the owner
may send them again on a fresh connection). A late reply to a call we stopped waiting for is not
one of these: it is dropped.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .._proto import rpc as rpcdef
from .._transport.base import (
    NO_HINTS,
    CallError,
    ConnectionLost,
    ProtocolViolation,
    ReceiveInterrupted,
    ReplyHints,
    SendTimeout,
    Transport,
    TransportError,
)
from .._xdr import Packer, Unpacker, XdrError
from .auth import Credential
from .errors import RpcReplyError, RpcTimeout

log = logging.getLogger(__name__)

CallbackHandler = Callable[[int, rpcdef.call_body, Unpacker], Awaitable[Packer | None]]


class _Pending:
    """One call waiting for its reply: the task waiting is woken once, by :meth:`set` (a reply, an
    error), without an Event of its own (one per call is most of what waiting costs)."""

    __slots__ = ("deadline", "done", "error", "header", "reply", "task", "timeout")

    def __init__(self) -> None:
        self.done = False  # a reply or an error came
        self.task: trio.lowlevel.Task | None = None  # the task waiting for it, while it waits
        self.reply: Unpacker | None = None
        self.header: rpcdef.ReplyHeader | None = None
        self.error: BaseException | None = None
        self.deadline = math.inf  # trio clock; the watchdog fails the call with RpcTimeout past it
        self.timeout = 0.0

    def set(self) -> None:
        if not self.done:
            self.done = True
            task, self.task = self.task, None
            if task is not None:
                trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Until :meth:`set` (at once if it was); a checkpoint either way."""
        if self.done:
            await trio.lowlevel.checkpoint()
            return
        self.task = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self.task = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


# seconds without a call after which the receive loop reads the connection itself (at most this
# long a callback CALL waits when nobody waits for a reply)
LOOP_IDLE = 0.02
_LOOP = _Pending()  # the reader when it is the receive loop
WATCHDOG_TICK = 0.05  # how late a timeout may fire (seconds); a call's timeout is at least seconds
# XIDs of calls no longer waited for (timed out, cancelled) whose late replies are dropped quietly
ABANDONED_KEPT = 4096


class RpcConnection:
    """Calls of one RPC program/version over one transport."""

    def __init__(
        self,
        transport: Transport,
        prog: int,
        vers: int,
        callback_handler: CallbackHandler | None = None,
    ) -> None:
        self.transport = transport
        self.prog = prog
        self.vers = vers
        self.callback_handler = callback_handler
        self._xid = random.getrandbits(32)
        self._pending: dict[int, _Pending] = {}
        self._dead: TransportError | None = None  # (set with alive, below)
        # attributes, not properties: every request looks at them
        self.alive = True  # the connection has not failed (``failure`` says why once it has)
        self.receiving = False  # the receive loop runs (a reply can still come; once it ends, every waiting call fails)
        self._closed = trio.Event()
        self._watchdog: trio.Event | None = None
        self._next_deadline = math.inf
        self._abandoned: dict[int, None] = {}  # (in order: the oldest go first)
        self._warned: set[str] = set()  # kinds of misbehaviour logged on this connection already
        self._sealing: dict[int, tuple[int, Credential]] = {}  # RPCSEC_GSS calls started, not yet sent
        self._callers_receive = transport.caller_receives
        self._nursery: trio.Nursery | None = None  # the receive loop's (callback handlers run there)
        self._reader: _Pending | None = None  # whose task reads the transport now (_LOOP: the loop)
        self._loop_waiting = False  # the loop reads, and waits for a message's start (it can step aside)
        self._loop_rest = trio.lowlevel.ParkingLot()  # the receive loop, while callers read
        self._loop_wanted = False  # a send failed: the loop reads at once, whatever calls are made
        self._loop_deep = False  # the loop rests with no timeout: several calls are out (_call_gone wakes it)
        self.calls = 0
        self.unmatched_replies = 0  # late replies to calls no longer waited for

    @property
    def peer(self) -> str:
        return self.transport.peer

    @property
    def failure(self) -> TransportError | None:
        """What ended the connection (None while it is alive)."""
        return self._dead

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def next_xid(self) -> int:
        self._xid = (self._xid + 1) & 0xFFFFFFFF
        return self._xid

    # -- the receive loop -------------------------------------------------------------------------------
    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Receive until the connection fails or is closed; then fail every waiting call."""
        self._watchdog = trio.Event()
        self.receiving = True
        task_status.started()
        error: TransportError | None = None
        try:
            async with trio.open_nursery() as nursery:  # callback handlers and the watchdog run here
                self._nursery = nursery
                nursery.start_soon(self._watch_timeouts)
                try:
                    if self._callers_receive:
                        await self._read_when_idle()
                        error = self._dead
                    else:
                        while True:
                            self._received(await self.transport.receive())
                except TransportError as e:
                    error = e
                    self._log_end(e)
                except (OSError, trio.ClosedResourceError) as e:
                    error = ConnectionLost(str(e) or type(e).__name__, self.peer)
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            self._fail_all(error or ConnectionLost("connection closed", self.peer))

    def _log_end(self, e: TransportError) -> None:
        if isinstance(e, ProtocolViolation):
            # (the connection ends here: one line per connection, not per reply)
            log.warning("%s; the connection is closed and its calls go again on a new one", e)

    def _received(self, u: Unpacker | CallError) -> None:
        """Hand a reply to its call, a call to the callback handler, a transport's failure of one
        call to its waiter; raise ProtocolViolation for a message no server keeping the protocol
        sends (its reader then ends the connection)."""
        nursery = self._nursery
        if nursery is None or self._dead is not None:
            return  # (the connection has ended under its reader: its calls have failed already)
        if isinstance(u, CallError):
            self._fail_call(u)
            return
        try:
            xid = u.uint32()
            mtype = u.uint32()
        except XdrError:
            raise ProtocolViolation("a message too short to hold an RPC header", self.peer) from None
        if mtype == rpcdef.REPLY:
            p = self._pending.pop(xid, None)
            if self._loop_deep:
                self._call_gone()
            if p is None:
                if xid not in self._abandoned:
                    raise ProtocolViolation(f"a reply to XID {xid:#x}, which no call of ours waits for", self.peer)
                del self._abandoned[xid]
                self.unmatched_replies += 1
                log.debug("%s: late reply for XID %#x dropped", self.peer, xid)
                return
            try:
                p.header = rpcdef.unpack_reply_header(u)
            except XdrError as e:
                self._dead = p.error = ProtocolViolation(f"malformed RPC reply header: {e}", self.peer)
                self.alive = False
                p.set()
                raise p.error from None
            p.reply = u
            if not p.done:  # (p.set()'s, inline: every reply comes here)
                p.done = True
                task = p.task
                if task is not None:
                    p.task = None
                    trio.lowlevel.reschedule(task)
        elif mtype == rpcdef.CALL:
            nursery.start_soon(self._serve_callback, xid, u)
        else:
            raise ProtocolViolation(f"a message of type {mtype}, neither call nor reply", self.peer)

    async def _read_when_idle(self) -> None:
        """The receive loop over a transport callers read: it rests while calls are made, reads
        when none was made for LOOP_IDLE seconds, and steps aside (between messages) for the next
        caller. Returns when the connection has ended (``_dead``)."""
        seen = -1
        while self._dead is None:
            if not self._loop_wanted and len(self._pending) > 1:
                # several calls out: their callers read until the last but one is answered, and the
                # loop rests without a timeout meanwhile (a timeout's wakeup every LOOP_IDLE would
                # find calls out, and cost a cancellation each, for nothing)
                self._loop_deep = True
                try:
                    await self._loop_rest.park()
                finally:
                    self._loop_deep = False
                continue
            if self._reader is not None or (not self._loop_wanted and (self._pending or self.calls != seen)):
                seen = self.calls
                with trio.move_on_after(LOOP_IDLE):
                    await self._loop_rest.park()
                continue
            self._reader = _LOOP
            self._loop_wanted = False
            self._loop_waiting = True
            try:
                try:
                    await self.transport.wait_receivable()
                    if self._reader is not _LOOP:  # (a caller took the connection meanwhile)
                        continue
                    self._loop_waiting = False
                    self._received(await self.transport.receive())
                except ReceiveInterrupted:  # (a caller takes the connection, or it is ending)
                    continue
            finally:
                self._loop_waiting = False
                if self._reader is _LOOP:
                    self._reader = None
                    self._hand_on()

    def _call_gone(self) -> None:
        """A call left ``_pending``: with at most one left, the loop rests with its timeout again."""
        if self._loop_deep and len(self._pending) <= 1:
            self._loop_deep = False
            self._loop_rest.unpark()

    def _hand_on(self) -> None:
        """The reader stopped: a call still waiting for its reply reads next."""
        for q in self._pending.values():
            task = q.task
            if task is not None:
                q.task = None
                trio.lowlevel.reschedule(task)
                return

    async def _watch_timeouts(self) -> None:
        """Fail calls whose deadline passed with RpcTimeout (one task per connection, instead of
        a cancel scope in every call)."""
        try:
            while True:
                wake = self._watchdog
                assert wake is not None
                with trio.move_on_at(max(self._next_deadline, trio.current_time() + WATCHDOG_TICK)):
                    await wake.wait()
                self._watchdog = trio.Event()
                now = trio.current_time()
                nxt = math.inf
                for xid, p in list(self._pending.items()):
                    if p.deadline <= now:
                        del self._pending[xid]
                        self._call_gone()
                        self._abandon(xid)
                        p.error = RpcTimeout(f"no reply within {p.timeout:g} s", self.peer)
                        p.set()
                        if p is self._reader:
                            self.transport.interrupt_receive()  # (it reads for everyone: a waiting call reads next)
                    elif p.deadline < nxt:
                        nxt = p.deadline
                self._next_deadline = nxt
        finally:
            self._watchdog = None
            self.receiving = False

    def _fail_all(self, error: TransportError) -> None:
        if self._dead is None:
            self._dead = error
            self.alive = False
        pending, self._pending = self._pending, {}
        for p in pending.values():
            p.error = error
            p.set()
        if self._reader is not None and self._callers_receive:  # (a caller or the loop reads: it stops)
            self.transport.interrupt_receive()
        self._loop_rest.unpark_all()
        self._closed.set()

    def _fail_call(self, failed: CallError) -> None:
        """One call failed at the transport (the connection lives on): fail its waiter only."""
        p = self._pending.pop(failed.xid, None)
        self._call_gone()
        if p is None:
            log.info(
                "%s: transport error for unknown XID %#x dropped: %s", self.peer, failed.xid, failed.error
            )
            return
        p.error = failed.error
        p.set()

    def limit_replies(self, size: int) -> None:
        """Messages larger than ``size`` bytes end the connection (a session's ca_maxresponsesize)."""
        self.transport.limit_records(size)

    def misbehaved(self, kind: str, message: str) -> None:
        """Log a misbehaviour of the server that does not end the connection: a warning the first time
        for each ``kind`` on this connection, debug lines after that."""
        if kind in self._warned:
            log.debug("%s: %s", self.peer, message)
            return
        self._warned.add(kind)
        log.warning("%s: %s (reported once per connection)", self.peer, message)

    def _abandon(self, xid: int) -> None:
        """The call ``xid`` is no longer waited for: a late reply to it is dropped."""
        self.transport.abandon(xid)
        kept = self._abandoned
        kept[xid] = None
        if len(kept) > ABANDONED_KEPT:
            del kept[next(iter(kept))]

    async def _serve_callback(self, xid: int, u: Unpacker) -> None:
        try:
            body = rpcdef.decode_call_body(u)
        except XdrError as e:
            self.misbehaved("callback", f"malformed callback call {xid:#x} dropped: {e}")
            return
        reply: Packer | None
        if body.rpcvers != rpcdef.RPC_VERSION or self.callback_handler is None:
            reply = Packer()
            rpcdef.pack_accepted_reply_header(reply, xid, rpcdef.accept_stat.PROG_UNAVAIL)
        else:
            reply = await self.callback_handler(xid, body, u)
        if reply is not None:
            try:
                await self.transport.send_reply(xid, reply)
            except TransportError as e:
                log.info("%s: could not send callback reply: %s", self.peer, e)

    # -- calls ----------------------------------------------------------------------------------------
    def start_call(self, proc: int, cred: Credential) -> tuple[int, Packer]:
        """A packer holding the call header; the caller appends the arguments. Under RPCSEC_GSS the
        packer takes the arguments only: the header is made (and the arguments sealed) when the
        call is sent, with a sequence number of that moment."""
        xid = self._xid = (self._xid + 1) & 0xFFFFFFFF  # (next_xid's, inline: every call)
        p = Packer()
        if cred.seals_at_send:
            if len(self._sealing) > ABANDONED_KEPT:  # (calls started and never sent)
                self._sealing.clear()
            self._sealing[xid] = (proc, cred)
            return xid, p
        rpcdef.pack_call_header(p, xid, self.prog, self.vers, proc, cred.encoded)
        return xid, p

    def call_packed(
        self,
        xid: int,
        msg: Packer,
        hints: ReplyHints = NO_HINTS,
        timeout: float | None = None,
        *,
        now: float | None = None,
    ) -> Awaitable[Unpacker]:
        """Send a call built by :meth:`start_call` and wait for its reply's results. ``now``: the
        trio clock at the call's start, when the caller has read it (its timeout runs from there).

        Returns an unpacker positioned at the procedure's results. Raises
        :class:`~pynfsrdma._transport.base.TransportError` (the connection failed: the call may or
        may not have been executed; or, as :class:`~pynfsrdma._transport.base.CallFailed`, the
        transport refused this call and the connection lives on; or, as
        :class:`~pynfsrdma._transport.base.ProtocolViolation`, the reply failed its RPCSEC_GSS
        checks and the connection was closed), :class:`RpcTimeout`, or :class:`RpcReplyError` (the
        server answered the RPC itself with an error).
        """
        sealing = self._sealing.pop(xid, None) if self._sealing else None
        if sealing is not None:
            proc, cred = sealing
            return cred.call(self, xid, proc, msg, hints, timeout)
        # (the call registered at once and carried by _carry: no coroutine of its own between, on
        # the path of every call; the caller awaits what it returns at once)
        return self._carry(xid, msg, hints, self._register(xid, timeout, now))

    async def exchange(
        self, xid: int, msg: Packer, hints: ReplyHints, timeout: float | None, *, now: float | None = None
    ) -> tuple[rpcdef.ReplyHeader, Unpacker]:
        """Send a whole call message (header included) and wait for its accepted, successful reply:
        its header (with the verifier) and an unpacker at its results. ``hints``, ``timeout`` and
        ``now`` as :meth:`call_packed` takes them (a credential making its call always says both);
        raises as it does."""
        p = self._register(xid, timeout, now)
        results = await self._carry(xid, msg, hints, p)
        assert p.header is not None
        return p.header, results

    def _register(self, xid: int, timeout: float | None, now: float | None) -> _Pending:
        """A call about to go out, waiting for its reply as ``xid`` (its deadline told to the watchdog)."""
        if self._dead is not None:
            raise self._dead
        p = _Pending()
        if timeout is not None:
            # no cancel scope per call: the connection's watchdog ends calls past their deadline
            p.timeout = timeout
            p.deadline = (trio.current_time() if now is None else now) + timeout
            if self._watchdog is None:  # the receive loop has ended (or never ran): nothing will answer
                raise self._dead or ConnectionLost("connection is not receiving", self.peer)
            if p.deadline < self._next_deadline:
                self._next_deadline = p.deadline
                self._watchdog.set()
        self._pending[xid] = p
        self.calls += 1
        return p

    async def _carry(self, xid: int, msg: Packer, hints: ReplyHints, p: _Pending) -> Unpacker:
        """Send the call registered as ``p`` and, until it is answered (or failed), read the
        connection while nobody else does, else wait to be answered or handed the
        reading (or, where the receive loop reads every reply, wait for it); return the reply's
        results (raise as :meth:`_accepted`)."""
        try:
            try:
                await self.transport.send_call(xid, msg, hints, p.deadline)
            except TransportError as e:
                if self._callers_receive:  # (the receive loop reads now, to see whether the connection ended)
                    self._loop_wanted = True
                    self._loop_rest.unpark()
                if isinstance(e, SendTimeout):
                    raise RpcTimeout(f"not sent within {p.timeout:g} s ({e})", self.peer) from e
                raise
            if not self._callers_receive:
                await p.wait()
            while not p.done:
                reader = self._reader
                if reader is _LOOP and self._loop_waiting:
                    self.transport.interrupt_receive()  # (the loop waits for a message's start: it steps aside)
                    self._loop_waiting = False
                    reader = self._reader = None
                if reader is None and self._nursery is not None:
                    # read the connection for everyone until p is answered (no coroutine of its own:
                    # the path of every call over TCP)
                    self._reader = p
                    error: TransportError | None = None
                    ok = False
                    try:
                        try:
                            while not p.done:
                                self._received(await self.transport.receive())
                        except ReceiveInterrupted:  # (p timed out, or the connection is ending)
                            pass
                        ok = True
                    except TransportError as e:
                        error = e
                        self._log_end(e)
                    except (OSError, trio.ClosedResourceError) as e:
                        error = ConnectionLost(str(e) or type(e).__name__, self.peer)
                    finally:
                        self._reader = None
                        if error is not None:
                            self._fail_all(error)
                        if self._pending:  # (a caller still waiting reads next)
                            self._hand_on()
                        if not ok:
                            self._loop_rest.unpark()  # (to read, or to see the connection's end, at once)
                else:
                    await p.wait()
        finally:
            if not p.done:
                self._pending.pop(xid, None)
                self._call_gone()
                self._abandon(xid)
        h = p.header
        if p.error is None and h is not None and h.denied is None and h.accept == rpcdef.SUCCESS:
            assert p.reply is not None
            return p.reply  # (what _accepted returns, found inline for the call that succeeded)
        return self._accepted(p)[1]

    def _accepted(self, p: _Pending) -> tuple[rpcdef.ReplyHeader, Unpacker]:
        """The answered call's reply header and results; raises its error, or RpcReplyError for a
        reply that did not accept the call or whose procedure failed at the RPC level."""
        if p.error is not None:
            raise p.error
        h = p.header
        assert p.reply is not None and h is not None
        if h.denied is not None or h.accept != rpcdef.SUCCESS:
            raise RpcReplyError(rpcdef.describe(h), self.peer, h)
        return h, p.reply

    async def violated(self, reason: str) -> ProtocolViolation:
        """A reply on this connection broke the protocol where only the caller could see it (an
        RPCSEC_GSS verifier or MIC that does not verify): end the connection (its calls fail and
        go again on a new one) and return the error to raise."""
        error = ProtocolViolation(reason, self.peer)
        if self._dead is None:
            self._dead = error
            self.alive = False
            log.warning("%s; the connection is closed and its calls go again on a new one", error)
        with trio.CancelScope(shield=True):
            await self.transport.aclose()
        return error

    async def call(
        self,
        proc: int,
        cred: Credential,
        encode_args: Callable[[Packer], None] | None = None,
        hints: ReplyHints = NO_HINTS,
        timeout: float | None = None,
    ) -> Unpacker:
        xid, p = self.start_call(proc, cred)
        if encode_args is not None:
            encode_args(p)
        return await self.call_packed(xid, p, hints, timeout)

    async def aclose(self) -> None:
        await self.transport.aclose()
