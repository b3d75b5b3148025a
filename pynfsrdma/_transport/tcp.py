"""ONC RPC over TCP with record marking (RFC 5531 section 11).

Sending: the record mark and the message's segments go out in one ``sendmsg`` (scatter/gather), so
WRITE payloads are never joined into one bytes object. Receiving: each fragment is read with
``recv_into`` straight into a buffer of its own, which the decoder then views (READ data is a slice
of it, not a copy).

A READ reply whose caller offered a pipe (``ReplyHints.splice``) has its payload spliced from the
socket into that pipe (splice(2): the kernel moves the socket's pages, nothing passes through this
process) when the record is one fragment: the rest of the record is received as usual, and the
unpacker's ``bulk()`` returns a :class:`~.base.SplicedPayload` for it. (What of the data came in
with the record's head, a few hundred bytes at most, is written into the pipe from here.) Where the payload starts is
the caller's decision (``SpliceRequest.locate`` reads the reply's head); the transport only checks
that the payload lies inside the record and is no longer than the caller allows. A pipe that
fills before the payload is in (a pipe holds at most 1 MiB, in at most 256 pieces) is read back
into a receive buffer and the record is received as usual; so is a record the caller did not
offer a pipe for, or whose payload the caller cannot place.

Large fragments (READ replies) are received into buffers the connection reuses (:class:`BufferPool`):
a fresh 1 MiB ``bytearray`` costs its zeroing and, once glibc hands the memory back to the kernel,
256 page faults (together about 0.3 ms of CPU per 1 MiB READ, as much as the copy out of the
socket). A pooled buffer is reused only when nothing refers to it any more: every memoryview of it
(the READ data handed to FUSE or to a caller) holds a reference, so a buffer still in use is never
overwritten.
"""

from __future__ import annotations

import abc
import errno
import math
import os
import select
import socket
import struct
import sys
from typing import Final

import trio

from .._proto.rpc import RM_LAST_FRAGMENT, RM_LENGTH_MASK
from .._xdr import Packer, Unpacker
from .base import (
    NEED_MORE,
    NO_HINTS,
    ConnectionLost,
    ConnectRefused,
    ConnectTimeout,
    ProtocolViolation,
    ReceiveInterrupted,
    ReplyHints,
    SendTimeout,
    SplicedPayload,
    SpliceRequest,
    Transport,
    TransportError,
)

_MARK: Final = struct.Struct(">I")
DEFAULT_MAX_RECORD: Final = 64 * 1024 * 1024  # a hostile length beyond this is refused before allocating
_IOV_MAX: Final = 1024
POOL_MIN_FRAGMENT: Final = 64 * 1024  # fragments at least this large go into reused buffers
POOL_BYTES: Final = 16 * 1024 * 1024  # kept per connection at most (read-ahead uses ~10 MiB)
POOL_ROUND: Final = 64 * 1024  # pooled buffers are sized up to a multiple of this
# bytes asked of the socket when nothing of the next record is known yet: a small reply (and its
# record mark) comes in one recv; of a larger one, this much of its head is copied out of the
# staging buffer and the rest is received in place
STAGE_READ: Final = 2048
SPLICE_MIN: Final = 8192  # a smaller payload is received as usual (a pipe's round trips cost more)
SPLICE_HEAD: Final = 256  # bytes asked for a record's head while a splice is awaited (a READ reply's is ~150)
_SPLICE_FLAGS: Final = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
CAN_SPLICE: Final = hasattr(os, "splice")
# records taken in a row without waiting for data before the receiver lets the other tasks run (a
# flood of replies must not starve them; a wait for data is such a pass already)
RECORDS_BETWEEN_CHECKPOINTS: Final = 8


def _refs(pool: list[bytearray], i: int) -> int:
    return sys.getrefcount(pool[i])


_UNREFERENCED: Final = _refs([bytearray(1)], 0)  # the count of a buffer only the pool refers to


class BufferPool:
    """Receive buffers reused across records. A buffer is handed out again only once nothing but
    the pool refers to it (CPython reference counts: a memoryview or a slice of one keeps its
    buffer referenced), so data a caller still holds is never overwritten."""

    def __init__(self, max_bytes: int = POOL_BYTES) -> None:
        self.max_bytes = max_bytes
        self.buffers: list[bytearray] = []
        self.bytes = 0
        self.reused = 0  # records received into a buffer used before
        self.allocated = 0  # buffers allocated (pooled or not)

    def get(self, n: int) -> memoryview:
        """A writable view of exactly ``n`` bytes (their content is undefined)."""
        pool = self.buffers
        for i in range(len(pool)):
            if len(pool[i]) >= n and _refs(pool, i) == _UNREFERENCED:
                self.reused += 1
                return memoryview(pool[i])[:n]
        self.allocated += 1
        size = -(-n // POOL_ROUND) * POOL_ROUND
        buf = bytearray(size)
        if size <= self.max_bytes:
            # room for it: unused buffers go first, then the longest-held ones are let go (whoever
            # holds them keeps them alive; the pool just stops counting on them)
            i = 0
            while self.bytes + size > self.max_bytes and i < len(pool):
                if _refs(pool, i) == _UNREFERENCED:
                    self.bytes -= len(pool[i])
                    del pool[i]
                else:
                    i += 1
            while self.bytes + size > self.max_bytes:
                self.bytes -= len(pool[0])
                del pool[0]
            pool.append(buf)
            self.bytes += size
        return memoryview(buf)[:n]


class SplicedUnpacker(Unpacker):
    """A reply whose payload went into a pipe: the message's bytes before the payload and after it
    (its padding first), and, at the payload's place, a :class:`~.base.SplicedPayload` for
    ``bulk()`` to return."""

    __slots__ = ("at", "payload")

    def __init__(self, data: memoryview, at: int, payload: SplicedPayload) -> None:
        super().__init__(data)
        self.at = at
        self.payload: SplicedPayload | None = payload

    def bulk(self) -> memoryview:
        n = self.uint32()
        payload = self.payload
        if payload is not None and self.pos == self.at and n == payload.length:
            self.payload = None
            self.need(-n & 3)
            return payload  # type: ignore[return-value]  # (stands for the bytes: see SplicedPayload)
        p = self.need(n + (-n & 3))
        return self.view[p : p + n]


def _pipe_full(fd: int) -> bool:
    try:
        return not select.select([], [fd], [], 0)[1]
    except (OSError, ValueError):
        return True


def _peer(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class RecordStream(Transport):
    """What the byte-stream transports share (TCP, and TLS over it): RPC record marking's limit on a
    record, and a close that is an abort."""

    max_record: int
    pool: BufferPool
    _stage: memoryview
    _stage_at: int
    _staged: int

    def fragment(self, n: int) -> tuple[memoryview, int]:
        """Memory for an ``n``-byte fragment, with as many of its first bytes as were read ahead
        (staged) already in it, and how many that is."""
        frag = self.pool.get(n) if n >= POOL_MIN_FRAGMENT else memoryview(bytearray(n))
        at, staged = self._stage_at, self._staged
        head = min(n, staged)
        if head:
            frag[:head] = self._stage[at : at + head]
            self._stage_at, self._staged = at + head, staged - head
        return frag, head

    def too_large(self, total: int) -> ProtocolViolation:
        """What a record of more than ``max_record`` bytes (so far) ends the connection with."""
        return ProtocolViolation(
            f"record of {total} bytes exceeds the limit of {self.max_record} (not an RPC server?)", self.peer
        )

    def limit_records(self, size: int) -> None:
        self.max_record = size

    async def aclose(self) -> None:
        self.abort()
        await trio.lowlevel.checkpoint()

    @abc.abstractmethod
    def abort(self) -> None:
        """Close at once, from synchronous code; tasks waiting on the connection see it closed."""


class TcpTransport(RecordStream):
    """One TCP connection. The socket is a plain non-blocking one, driven with trio's low-level
    readiness waits: a call that can complete at once (the common case on a fast network) costs
    no trip through the scheduler."""

    kind = "tcp"
    caller_receives = True

    def __init__(self, sock: socket.socket, peer: str, max_record: int = DEFAULT_MAX_RECORD) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.peer = peer
        self.max_record = max_record
        self._send_lock = trio.Lock()
        self._closed = False
        # what a wait for a record's start waits on: a duplicate of the socket, so that
        # interrupt_receive can end that wait (trio's notify_closing) and leave the socket alone
        self._waker = sock.dup()
        self._in_record = False  # a record's mark was taken, and not all of the record yet
        self._unwaited = 0  # records taken since the receiver last waited or let the others run
        self._stage = memoryview(bytearray(STAGE_READ))
        self._staged = 0  # bytes received ahead into _stage, from _stage_at
        self._stage_at = 0
        self.pool = BufferPool()
        self.bytes_sent = 0
        self.bytes_received = 0
        self.bulk_bytes_sent = 0  # payload bytes (WRITE data) sent from the caller's buffer, by reference
        self._splices: dict[int, SpliceRequest] = {}
        self.bytes_spliced = 0  # payload bytes that went from the socket into a pipe, not our memory
        self.bytes_staged_to_pipe = 0  # payload bytes received with the reply's head, written to the pipe
        self.splice_fallbacks = 0  # payloads read back out of a pipe that filled up
        self.empty_receives = 0  # recvs that found nothing to read (a system call for nothing)
        # a call went out since the last record's start was read: its reply cannot be in yet (a
        # server answers in tens of microseconds; the next recv comes a few after the send), so the
        # next record's start is waited for before it is asked for
        self._reply_due = False

    # -- connecting -----------------------------------------------------------------------------------
    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        timeout: float = 10.0,
        max_record: int = DEFAULT_MAX_RECORD,
        source_address: str | None = None,
    ) -> TcpTransport:
        peer = _peer(host, port)
        try:
            infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise ConnectRefused(f"cannot resolve: {e.strerror or e}", peer) from e
        last: Exception | None = None
        for family, stype, proto, _, addr in infos:
            sock = trio.socket.socket(family, stype, proto)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                if source_address:
                    await sock.bind((source_address, 0))
                with trio.fail_after(timeout):
                    await sock.connect(addr)
                return cls(socket.socket(family, stype, proto, fileno=sock.detach()), peer, max_record)
            except trio.TooSlowError:
                sock.close()
                last = ConnectTimeout(f"no answer within {timeout:g} s", peer)
            except OSError as e:
                sock.close()
                reason = os.strerror(e.errno).lower() if e.errno else str(e)
                if e.errno in (errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH):
                    last = ConnectRefused(reason, peer)
                else:
                    last = ConnectionLost(reason, peer)
        assert last is not None
        raise last

    def detach(self) -> socket.socket:
        """Give the connection's socket up (this transport is closed; the socket is not): RPC-with-TLS
        starts TLS on it after the AUTH_TLS probe. ProtocolViolation if the peer sent more than
        the records received so far (those bytes would be lost)."""
        if self._closed or self._splices:
            raise ConnectionLost("connection is closed", self.peer)
        if self._staged:
            raise ProtocolViolation(f"{self._staged} bytes came after the last record", self.peer)
        self._closed = True
        trio.lowlevel.notify_closing(self._waker)
        self._waker.close()
        return self.sock

    # -- sending --------------------------------------------------------------------------------------
    async def _send_record(self, msg: Packer, deadline: float = math.inf) -> None:
        segments = msg.segments()
        if len(segments) == 1:  # (most calls: no list built by a comprehension of its own)
            views = [memoryview(segments[0]).cast("B")]
        else:
            views = [memoryview(s).cast("B") for s in segments]
        total = sum(map(len, views))
        if total > RM_LENGTH_MASK:
            raise ValueError(f"RPC message of {total} bytes is too large for one record fragment")
        bufs: list[memoryview] = [memoryview(_MARK.pack(RM_LAST_FRAGMENT | total)), *views]
        lock = self._send_lock
        # no record half sent nor waiting for its turn (a lock released to a waiter stays locked for
        # it until it runs): this one may go at once
        if not lock.locked() and len(bufs) <= _IOV_MAX:
            if self._closed:
                raise ConnectionLost("connection is closed", self.peer)
            try:
                sent = self.sock.sendmsg(bufs)
            except BlockingIOError:
                sent = 0
            except OSError as e:
                raise ConnectionLost(e.strerror or str(e), self.peer) from e
            if sent == total + 4:
                self.bytes_sent += sent
                if msg.bulk_segments:
                    self.bulk_bytes_sent += sum(seg.data.nbytes for seg in msg.bulk_segments)
                return
            if sent:  # the rest when the socket takes it, ahead of any other record
                await self._send_rest(bufs, sent, deadline)
                self._sent(msg, total)
                return
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            held = False
            with trio.move_on_at(deadline):
                await lock.acquire()
                held = True
            if not held:
                raise SendTimeout("no turn to send before the call's deadline", self.peer) from None
        try:
            if self._closed:
                raise ConnectionLost("connection is closed", self.peer)
            try:
                await self._sendmsg_all(bufs, deadline)
            except TransportError:
                raise
            except OSError as e:
                raise ConnectionLost(e.strerror or str(e), self.peer) from e
            except trio.ClosedResourceError as e:  # dropped by us (a stalled path) while sending
                raise ConnectionLost("connection closed while sending", self.peer) from e
        finally:
            lock.release()
        self._sent(msg, total)

    def _sent(self, msg: Packer, total: int) -> None:
        self.bytes_sent += total + 4
        if msg.bulk_segments:
            self.bulk_bytes_sent += sum(seg.data.nbytes for seg in msg.bulk_segments)

    async def _send_rest(self, bufs: list[memoryview], sent: int, deadline: float) -> None:
        """Send what is left of a record whose first ``sent`` bytes went out, holding the turn to
        send; a record left half sent closes the connection (as :meth:`_sendmsg_all`)."""
        lock = self._send_lock
        lock.acquire_nowait()  # (free: nothing awaited since it was found so)
        try:
            await self._sendmsg_all(bufs, deadline, sent)
        except TransportError:
            raise
        except OSError as e:
            raise ConnectionLost(e.strerror or str(e), self.peer) from e
        except trio.ClosedResourceError as e:
            raise ConnectionLost("connection closed while sending", self.peer) from e
        finally:
            lock.release()

    async def _sendmsg_all(self, bufs: list[memoryview], deadline: float, sent: int = 0) -> None:
        """Send every buffer (their first ``sent`` bytes gone out already); a record left half sent
        (its deadline passed, or the caller was cancelled) leaves the stream's framing broken: the
        connection is closed."""
        sock = self.sock
        i = 0
        started = sent > 0
        try:
            while i < len(bufs):
                if not sent:
                    try:
                        sent = sock.sendmsg(bufs[i : i + _IOV_MAX])
                    except BlockingIOError:
                        with trio.move_on_at(deadline):
                            await trio.lowlevel.wait_writable(sock)
                            continue
                        raise SendTimeout("the server stopped reading before the call's deadline",
                                          self.peer) from None
                started = True
                # drop what went out; keep the remainder of a partly sent buffer
                while sent:
                    n = bufs[i].nbytes
                    if sent >= n:
                        sent -= n
                        i += 1
                    else:
                        bufs[i] = bufs[i][sent:]
                        sent = 0
        except BaseException:
            if started and i < len(bufs):
                self.abort()
            raise

    async def send_call(
        self, xid: int, msg: Packer, hints: ReplyHints = NO_HINTS, deadline: float = math.inf
    ) -> None:
        if hints.splice is not None and CAN_SPLICE:
            self._splices[xid] = hints.splice  # (before sending: the reply may come before we return)
        await self._send_record(msg, deadline)
        self._reply_due = True

    def abandon(self, xid: int) -> None:
        self._splices.pop(xid, None)

    async def send_reply(self, xid: int, msg: Packer) -> None:
        await self._send_record(msg)

    # -- receiving ------------------------------------------------------------------------------------
    async def _readable(self, interruptible: bool = False) -> None:
        """Wait until the socket has data (or the peer's end); a socket closed meanwhile is a lost
        connection. ``interruptible``: nothing of a record is half received, and
        :meth:`interrupt_receive` may end the wait (ReceiveInterrupted)."""
        waker = self._waker
        try:
            await trio.lowlevel.wait_readable(waker if interruptible else self.sock)
        except trio.ClosedResourceError as e:
            if interruptible and not self._closed:
                raise ReceiveInterrupted from None
            raise ConnectionLost("connection closed", self.peer) from e

    def interrupt_receive(self) -> None:
        if self._closed:
            return
        if self._in_record:  # (its reader waits inside a record: only closing the connection ends that)
            self.abort()
            return
        waker, self._waker = self._waker, self.sock.dup()
        trio.lowlevel.notify_closing(waker)
        waker.close()

    async def _recv_some(
        self, view: memoryview, partial: bool, what: str, head: bool = False
    ) -> tuple[int, bool]:
        """One recv into ``view``, waiting for data when none is there: the bytes received (never 0)
        and whether it waited. ``partial``: part of the record (or mark) came already. ``head``:
        the head of a record is asked, no more than SPLICE_HEAD bytes of it while a splice is
        awaited (as it is when the data comes: the call may have been sent while we waited)."""
        sock = self.sock
        waited = False
        while True:
            try:
                n = sock.recv_into(view[:SPLICE_HEAD] if head and self._splices else view)
            except BlockingIOError:
                self.empty_receives += 1
                await self._readable(interruptible=head and what == "mark")
                waited = True
                continue
            except OSError as e:
                raise ConnectionLost(e.strerror or str(e), self.peer) from e
            if n == 0:
                if partial or what == "record":
                    raise ConnectionLost("closed by the server in the middle of a record", self.peer)
                raise ConnectionLost("closed by the server", self.peer)
            self.bytes_received += n
            return n, waited

    async def _recv_into(self, view: memoryview, what: str) -> bool:
        """Fill ``view`` completely from the socket; True if it had to wait for data (a checkpoint)."""
        got = 0
        want = view.nbytes
        waited = False
        while got < want:
            n, w = await self._recv_some(view[got:] if got else view, got > 0, what)
            got += n
            waited |= w
        return waited

    async def _stage_mark(self, what: str) -> tuple[int, bool]:
        """The next record mark, from the staging buffer (filled by one recv of up to STAGE_READ
        bytes when it holds less than a mark); and whether it had to wait for data. What each recv
        brings is kept at once, so that a cancelled wait loses nothing."""
        stage = self._stage
        waited = False
        if self._staged < 4:
            at, staged = self._stage_at, self._staged
            if at:
                stage[:staged] = stage[at : at + staged]
                self._stage_at = 0
            # (while a reply's data may be spliced, a short head: the READ's data after it is not
            # received into our memory, only what comes with the head)
            if self._reply_due and not self._staged:
                self._reply_due = False
                interruptible = what == "mark"
                try:  # (_readable's, inline: the wait of every reply)
                    await trio.lowlevel.wait_readable(self._waker if interruptible else self.sock)
                except trio.ClosedResourceError as e:
                    if interruptible and not self._closed:
                        raise ReceiveInterrupted from None
                    raise ConnectionLost("connection closed", self.peer) from e
                waited = True
            while self._staged < 4:
                staged = self._staged
                n, w = await self._recv_some(stage[staged:], staged > 0, what, head=True)
                self._staged = staged + n
                waited |= w
        at = self._stage_at
        mark: int = _MARK.unpack_from(stage, at)[0]
        self._stage_at, self._staged = at + 4, self._staged - 4
        return mark, waited

    async def wait_receivable(self) -> None:
        if self._staged or self._closed:
            return
        await self._readable(interruptible=True)

    async def _stage_more(self, what: str) -> bool:
        """Receive more into the staging buffer (what it holds moved to its start first)."""
        stage, at, staged = self._stage, self._stage_at, self._staged
        if at:
            stage[:staged] = stage[at : at + staged]
            self._stage_at = 0
        n, waited = await self._recv_some(stage[staged:], True, what)
        self._staged = staged + n
        return waited

    async def _locate_payload(self, req: SpliceRequest, n: int) -> tuple[tuple[int, int] | None, bool]:
        """Where the payload ``req`` asks spliced lies in the record of ``n`` bytes (its offset and
        length), found in the reply's head as staged (more staged as the decoder asks); None when the
        record is to be received as usual (nothing of it consumed). And whether it waited for data."""
        waited = False
        while True:
            at, staged = self._stage_at, self._staged
            head = self._stage[at : at + min(staged, n)]
            try:
                found = req.locate(head)
            except Exception:  # (the decoder's own business: the reply is decoded as usual)
                found = None
            if found != NEED_MORE:
                break
            if staged >= n or staged >= STAGE_READ:
                return None, waited
            waited |= await self._stage_more("record")
        if found is None:
            return None, waited
        start, length = found
        if not (SPLICE_MIN <= length <= req.max_length and 4 <= start <= staged and staged < start + length <= n):
            return None, waited
        return (start, length), waited

    async def _receive_spliced(self, n: int) -> tuple[Unpacker | None, bool]:
        """A record of ``n`` bytes (one fragment, its mark taken) whose payload a caller asked to
        have spliced: the reply with the payload in the caller's pipe; None when it is to be
        received as usual (nothing of the record consumed yet). And whether it waited for data."""
        waited = False
        while self._staged < 4:
            waited |= await self._stage_more("record")
        xid: int = _MARK.unpack_from(self._stage, self._stage_at)[0]
        req = self._splices.pop(xid, None)
        if req is None:
            return None, waited
        found, w = await self._locate_payload(req, n)
        waited |= w
        if found is None:
            return None, waited
        start, length = found
        at, staged = self._stage_at, self._staged
        sink = req.sink
        try:
            fd = sink.begin(length)
        except OSError:  # (no pipe to be had: the payload is received as usual)
            fd = None
        if fd is None:
            return None, waited
        # from here on the record is taken: its head, the payload (what was staged of it, then
        # spliced), the rest; a fault drops what went into the pipe
        stage = self._stage
        tail = n - start - length
        buf = memoryview(bytearray(start + tail))
        buf[:start] = stage[at : at + start]
        got = staged - start
        ok = False
        try:
            staged_payload = stage[at + start : at + staged]
            self._stage_at, self._staged = at + staged, 0
            while staged_payload.nbytes:
                try:
                    k = os.write(fd, staged_payload)
                except OSError:  # (a pipe that cannot take even these: as usual, from memory)
                    ok = True
                    got -= staged_payload.nbytes
                    return await self._unsplice(req, buf, start, got, n, staged_payload), waited
                staged_payload = staged_payload[k:]
            sock = self.sock
            while got < length:
                try:
                    k = os.splice(sock.fileno(), fd, length - got, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    if _pipe_full(fd):
                        ok = True  # (the fallback below drains the pipe itself)
                        return await self._unsplice(req, buf, start, got, n), True
                    await self._readable()
                    waited = True
                    continue
                except OSError as e:
                    raise ConnectionLost(e.strerror or str(e), self.peer) from e
                if k == 0:
                    raise ConnectionLost("closed by the server in the middle of a record", self.peer)
                got += k
                self.bytes_received += k
            ok = True
        finally:
            if not ok:
                sink.end(False)
        filling = sink.end(True)
        self.bytes_spliced += length - (staged - start)
        self.bytes_staged_to_pipe += staged - start
        if tail:
            waited |= await self._recv_into(buf[start:], "record")
        return SplicedUnpacker(buf, start, SplicedPayload(sink, filling, length)), waited

    async def _unsplice(
        self, req: SpliceRequest, head: memoryview, start: int, got: int, n: int, pending: memoryview | None = None
    ) -> Unpacker:
        """The pipe filled before the payload was in: the record as usual, in a receive buffer of its
        own, the payload's first ``got`` bytes read back out of the pipe (then ``pending``, received
        already and not yet in the pipe)."""
        self.splice_fallbacks += 1
        frag = self.pool.get(n) if n >= POOL_MIN_FRAGMENT else memoryview(bytearray(n))
        frag[:start] = head[:start]
        try:
            req.sink.take_back(frag[start : start + got])
        finally:
            req.sink.end(False)
        at = start + got
        if pending is not None and pending.nbytes:
            frag[at : at + pending.nbytes] = pending
            at += pending.nbytes
        await self._recv_into(frag[at:], "record")
        return Unpacker(frag)

    async def receive(self) -> Unpacker:
        # Each fragment is read into a buffer of exactly its size. What the socket gave beyond a
        # record mark (the head of the fragment, all of a small one) was staged and is copied there;
        # the rest lands with recv_into, once, where the decoder will view it.
        if self._closed:
            raise ConnectionLost("connection is closed", self.peer)
        mark, waited = await self._stage_mark("mark")  # (a cancellation up to here loses nothing)
        n = mark & RM_LENGTH_MASK
        if mark & RM_LAST_FRAGMENT and n <= self._staged and n <= self.max_record:
            # the whole record came with its mark (most replies do): taken from the staging buffer
            # (a staged record is smaller than a splice's least payload: never one to splice)
            at = self._stage_at
            record = memoryview(bytearray(self._stage[at : at + n]))
            self._stage_at, self._staged = at + n, self._staged - n
            if waited:
                self._unwaited = 0
            else:
                await self._taken(False)
            return Unpacker(record)
        self._in_record = True
        try:
            return await self._receive_record(mark, waited)
        except BaseException:
            self.abort()  # a record half received (cancelled, cut): the stream's framing is lost
            raise
        finally:
            self._in_record = False

    async def _taken(self, waited: bool) -> None:
        """A record was taken (``waited``: its data was waited for, a pass through the scheduler
        already). After RECORDS_BETWEEN_CHECKPOINTS taken without one, a pass, so that a flood of
        replies cannot starve the other tasks; never a cancellation point: the record is taken, and
        whoever it is for gets it."""
        if waited:
            self._unwaited = 0
            return
        self._unwaited += 1
        if self._unwaited >= RECORDS_BETWEEN_CHECKPOINTS:
            self._unwaited = 0
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _receive_record(self, mark: int, waited: bool) -> Unpacker:
        """The record whose first mark was taken."""
        frags: list[memoryview] = []
        total = 0
        while True:
            if frags:
                mark, w = await self._stage_mark("record")
                waited |= w
            n = mark & RM_LENGTH_MASK
            total += n
            if total > self.max_record:
                raise self.too_large(total)
            if self._splices and not frags and mark & RM_LAST_FRAGMENT and n > SPLICE_MIN:
                spliced, w = await self._receive_spliced(n)
                waited |= w
                if spliced is not None:
                    await self._taken(waited)
                    return spliced
            frag, head = self.fragment(n)
            if head < n:
                waited |= await self._recv_into(frag[head:], "record")
            frags.append(frag)
            if mark & RM_LAST_FRAGMENT:
                break
        await self._taken(waited)
        if len(frags) == 1:
            return Unpacker(frags[0])
        return Unpacker(b"".join(frags))  # multi-fragment records are rare; join them once

    def abort(self) -> None:
        """Close at once, from synchronous code; tasks waiting on the socket see it closed."""
        if not self._closed:
            self._closed = True
            trio.lowlevel.notify_closing(self._waker)
            self._waker.close()
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()


__all__ = ["DEFAULT_MAX_RECORD", "BufferPool", "TcpTransport", "TransportError"]
