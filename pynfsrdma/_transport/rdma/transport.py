"""RPC-over-RDMA version 1 as a :class:`~pynfsrdma._transport.base.Transport` (the requester side).

Glues the pieces as Linux's xprtrdma ``transport.c`` does: the CM private data negotiation
(:mod:`~pynfsrdma._proto.private_data`, on every connect), the credit gate (:mod:`.credits`), the
chunk plan of each call (:mod:`.chunks`), the memory behind the chunks (:mod:`.chunk_memory`:
the caller's buffers where they lie and sinks for Write chunks and the Reply chunk, registered
once and reached through a memory window per call where the provider has them), and reply
reassembly (:mod:`.reply`).

Send and receive buffers are registered once per connection, as Linux's ``rpcrdma_regbuf``: one
per credit and two more (backchannel), sized by the negotiated send and receive thresholds. A
call's transport header and inline Payload stream are marshalled into a free send buffer and
Sent from it; the buffer is free again when the Send completed. Where the provider takes Sends
unsignaled (``send_region_unsignaled``: the software provider, whose Send bytes are in its socket
when the post returns), the call does not wait for a completion at all, as xprtrdma posts most
Sends unsignaled.

Copies: WRITE payloads are RDMA-Read by the responder from the caller's buffer (a WRITE small
enough to go inline is marshalled into the send buffer: ``payload_bytes_copied``); READ data is
RDMA-Written into a sink (a :class:`WriteChunkSink`) whose memoryview ``bulk()`` returns, or lent
where the provider can (``Connection.allow_lending``: the software provider on one host), whose
read-only view of the bytes where the responder has them ``bulk()`` returns then. The
inline part of each received message (at most the inline threshold) is copied out of the receive
buffer, so that the buffer can be posted again at once. :class:`RdmaStats` counts what went where.

Background work (the provider's completion handling) runs in a nursery the transport is given;
replies are taken from the provider's Receive completions in the task that calls
:meth:`RdmaTransport.receive` (the RPC layer's receive loop), with no task of ours in between.
:meth:`RdmaTransport.open` makes a nursery of its own in a trio *system task* (see :class:`_Host`),
for callers such as the path layer that own the transport but hand out no
nursery: the task lives exactly as long as the connection (``aclose`` ends it and waits for it),
and trio cancels it if the run ends first.

A received message is a CALL (backchannel) or a REPLY by its RPC message type, never by XID.

Remote invalidation (RFC 8797's "I" bit, section 4.2.1): we advertise the "I" bit only when the
provider can take a Send With Invalidate. The responder may then name, in the Send of a reply,
one registration of that call; the provider invalidated it already, so the call's regions are
released with that one retired as it is (no second invalidation) and the rest invalidated
locally. A Send With Invalidate that names a handle of no region of the call it answers, comes
with a callback, or comes when we did not advertise it, is a connection error.

RDMA_ERROR (RFC 8166 section 4.5): ERR_CHUNK answers one call, which fails alone
(:meth:`receive` returns a :class:`~pynfsrdma._transport.base.CallError` with
:class:`~pynfsrdma._transport.base.CallFailed`; its regions are released and its credit comes
back); the connection carries on. ERR_VERS means the responder does not speak version 1 with us:
the connection fails with a :class:`RdmaVersionMismatch` that says which versions it offers.
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypedDict

import trio

from ..._proto.private_data import V1_DEFAULTS, ConnectPrivateData, InlineThresholds, negotiate
from ..._proto.rpc import CALL
from ..._proto.rpcrdma import (
    ERR_VERS,
    RDMA_ERROR,
    RDMA_MSG,
    RPCRDMA_V1_DEF_INLINE_SIZE,
    RPCRDMA_VERSION,
    RpcRdmaError,
    decode_rdma_msg,
    header_size,
)
from ..._xdr import Packer, Unpacker
from ..base import (
    NO_HINTS,
    CallError,
    CallFailed,
    ConnectionLost,
    ConnectTimeout,
    ProtocolViolation,
    ReplyHints,
    SendTimeout,
    Transport,
    TransportError,
)
from .chunk_memory import DEFAULT_PINNED_LIMIT, ChunkMemory, Lease, WriteChunkSink
from .chunks import CallPlan, NeedKind, Registration, plan_call
from .credits import CreditGate
from .header import pack_header_into, read_header
from .provider import Access, Buffer, Connection, MemoryRegion, Provider
from .reply import reassemble_reply

if TYPE_CHECKING:
    from typing_extensions import Unpack

log = logging.getLogger(__name__)

_MSG_TYPE: Final = struct.Struct(">I")

DEFAULT_CREDITS: Final = 32
DEFAULT_INLINE: Final = 4096


class ConnectSettings(TypedDict, total=False):
    """A connection's settings beyond where it goes: what :meth:`RdmaTransport.connect` takes after
    ``port`` (see there for each; left out, its default)."""

    credits: int
    inline_size: int
    remote_invalidation: bool | None
    send_private_data: bool
    pinned_limit: int


class RdmaVersionMismatch(ProtocolViolation):
    """The responder answered RDMA_ERROR / ERR_VERS: no RPC-over-RDMA version in common."""


class InjectedConnectionLoss(ConnectionLost):
    """The connection was failed on purpose by :meth:`RdmaTransport.break_at_reply`."""


@dataclass(slots=True)
class RdmaStats:
    """What the transport did, for tests and benchmarks."""

    calls: int = 0
    nomsg_calls: int = 0  # calls sent as RDMA_NOMSG (position-zero Read chunk)
    read_chunk_segments: int = 0  # Read chunk segments offered (WRITE payloads, NOMSG calls)
    write_chunks: int = 0  # Write chunks offered with a sink
    reply_chunks: int = 0  # Reply chunks offered
    replies: int = 0
    nomsg_replies: int = 0  # replies that came through the Reply chunk
    inline_bytes_copied: int = 0  # bytes copied out of receive buffers (headers and inline parts)
    send_bytes_marshalled: int = 0  # bytes placed in registered send buffers (headers, inline parts)
    payload_bytes_copied: int = 0  # WRITE payload bytes among them (calls small enough to go inline)
    placed_bytes: int = 0  # bytes the responder wrote into our Write chunk sinks (no copy)
    callbacks: int = 0  # backchannel CALLs received
    remote_invalidations: int = 0  # replies whose Send With Invalidate retired a registration
    rdma_errors: int = 0  # calls the responder refused with RDMA_ERROR / ERR_CHUNK


@dataclass(slots=True)
class _Outstanding:
    plan: CallPlan
    lease: Lease  # the chunk memory the responder may reach for this call
    regs: list[Registration]
    abandoned: bool = False
    done: bool = field(default=False)

    @property
    def regions(self) -> list[MemoryRegion]:
        return self.lease.regions


class RdmaTransport(Transport):
    kind: ClassVar[str] = "rdma"

    def __init__(
        self,
        conn: Connection,
        thresholds: InlineThresholds,
        credits: int,
        nursery: trio.Nursery,
        remote_invalidation: bool = False,
        pinned_limit: int = DEFAULT_PINNED_LIMIT,
    ) -> None:
        self.conn = conn
        self.peer = conn.peer
        self.thresholds = thresholds
        # what we advertised: the responder may Send With Invalidate one registration per reply
        self.accepts_remote_invalidation = remote_invalidation
        self.gate: CreditGate[trio.Event] = CreditGate(credits)
        self._outstanding: dict[int, _Outstanding] = {}
        self._closed = False
        self.stats = RdmaStats()
        self._dead: TransportError | None = None  # the connection failed: every call fails
        self._host: _Host | None = None
        self._break_match: Callable[[bytes], bool] | None = None  # see break_at_reply
        self._break_xid: int | None = None
        self._recv_regions = [
            conn.register(bytearray(thresholds.recv), Access.LOCAL_WRITE) for _ in range(credits + 2)
        ]
        for r in self._recv_regions:
            conn.post_recv(r)
        # send buffers, registered once: one per credit, and two for backchannel replies
        self._send_free = [self._new_send_buffer() for _ in range(credits + 2)]
        self._send_waiters = trio.lowlevel.ParkingLot()  # calls waiting for a free send buffer
        self.chunk_memory = ChunkMemory(conn, pinned_limit)
        # a provider that takes Sends unsignaled (the software one) frees the buffer when the Send
        # was posted: the call goes on without waiting for a completion it does not need
        self._send_region = getattr(conn, "send_region_unsignaled", conn.send_region)

    @classmethod
    async def connect(
        cls,
        provider: Provider,
        nursery: trio.Nursery,
        host: str,
        port: int,
        credits: int = DEFAULT_CREDITS,
        inline_size: int = DEFAULT_INLINE,
        remote_invalidation: bool | None = None,
        send_private_data: bool = True,
        pinned_limit: int = DEFAULT_PINNED_LIMIT,
    ) -> RdmaTransport:
        """Connect, exchange RFC 8797 private data, post receives; settings are per connection.

        ``remote_invalidation``: advertise that we take Send With Invalidate (None: when the
        provider can; True with a provider that cannot is a ValueError).
        ``send_private_data`` False: connect with no private data; the responder then takes us
        to use the version 1 defaults (RFC 8797 section 5), and so do we (``inline_size`` and
        remote invalidation are not advertised)."""
        can = provider.supports_remote_invalidation
        if remote_invalidation and not can:
            raise ValueError(f"the {provider.name} provider cannot take Send With Invalidate")
        if not send_private_data:
            if remote_invalidation:
                raise ValueError("remote invalidation is advertised in the private data that is not sent")
            ours = V1_DEFAULTS
            conn = await provider.connect(nursery, host, port, b"")
            thresholds = negotiate(ours, conn.peer_private_data)
            return cls(conn, thresholds, credits, nursery, False, pinned_limit)
        ours = ConnectPrivateData(
            send_size=max(inline_size, RPCRDMA_V1_DEF_INLINE_SIZE),
            recv_size=max(inline_size, RPCRDMA_V1_DEF_INLINE_SIZE),
            remote_invalidation=can if remote_invalidation is None else remote_invalidation,
        )
        conn = await provider.connect(nursery, host, port, ours.encode())
        thresholds = negotiate(ours, conn.peer_private_data)
        return cls(conn, thresholds, credits, nursery, ours.remote_invalidation, pinned_limit)

    @classmethod
    async def open(
        cls, provider: Provider, host: str, port: int, *, timeout: float = 10.0, **settings: Unpack[ConnectSettings]
    ) -> RdmaTransport:
        """Connect like :meth:`connect` (``settings`` as there), with a nursery of the transport's own
        (a system task that :meth:`aclose` ends). Raises :class:`ConnectTimeout` after ``timeout`` seconds."""
        host_task = await _Host.start()
        try:
            with trio.move_on_after(timeout) as scope:
                t = await cls.connect(provider, host_task.nursery, host, port, **settings)
            if scope.cancelled_caught:
                raise ConnectTimeout(f"no RDMA connection within {timeout:g} s", f"{host}:{port}")
        except BaseException:
            with trio.CancelScope(shield=True):
                await host_task.stop()
            raise
        t.hold(host_task)
        return t

    def hold(self, host: _Host) -> None:
        """Keep ``host`` (the nursery of :meth:`open`) as long as this transport: :meth:`aclose`
        stops it, and a task of it that fails fails the transport like a lost connection."""
        self._host = host
        host.on_crash = self._crashed

    def _crashed(self, exc: BaseException) -> None:
        err = ConnectionLost(f"RDMA transport failed: {exc!r}", self.peer)
        self._fail(err)
        self.conn.fail(err)  # a receive waiting for a completion that would never come sees it

    def break_at_reply(self, match: Callable[[bytes], bool]) -> None:
        """Fault injection (tests): lose the connection at the reply of the next call whose
        encoded RPC message ``match`` accepts.

        The call goes out as usual and the responder executes it; when its reply arrives, the
        reply is dropped and the connection fails and is torn down, as if it had died between
        the responder's Send and our Receive. The caller's view: the connection was lost with the
        call outstanding (so an NFSv4.1 session resends it on the same slot and sequence id)."""
        self._break_match = match
        self._break_xid = None

    # -- sending ----------------------------------------------------------------------------------
    async def _acquire_credit(self, deadline: float = math.inf) -> None:
        ev = trio.Event()
        if self.gate.acquire(ev):
            return
        try:
            with trio.move_on_at(deadline):
                await ev.wait()
            if not ev.is_set():
                raise SendTimeout("no credit to send with before the call's deadline", self.peer)
        except BaseException:
            if not self.gate.cancel(ev) and self._dead is None:  # admitted meanwhile: give it back
                for admitted in self.gate.release():
                    admitted.set()
            raise
        if self._dead is not None:  # woken because the connection is gone
            raise ConnectionLost(str(self._dead)) from self._dead

    @property
    def resting_registrations(self) -> int:
        """How many registrations the connection holds between calls: the send and receive
        buffers and the chunk memory kept registered (:mod:`.chunk_memory`)."""
        return 2 * len(self._recv_regions) + self.chunk_memory.resting_registrations

    @property
    def memory_registrations(self) -> int:
        """Memory registrations the connection made so far (its provider's count)."""
        return self.conn.counters.registrations

    @property
    def memory_windows_bound(self) -> int:
        """Memory windows bound so far (one per chunk where chunk memory is kept registered)."""
        return self.conn.counters.binds

    @property
    def payload_bytes_copied(self) -> int:
        """WRITE payload bytes copied on their way out: marshalled inline with their call, or
        gathered by the provider."""
        return self.stats.payload_bytes_copied + self.conn.counters.bytes_copied

    def _new_send_buffer(self) -> MemoryRegion:
        return self.conn.register(bytearray(self.thresholds.send), Access.LOCAL_WRITE)

    async def _send_marshalled(
        self, header: Callable[[memoryview], int], payload: Sequence[Buffer], invalidate: int | None = None
    ) -> None:
        """Marshal the transport header (``header`` writes it at the start of the buffer and says
        how long it is) and the inline Payload stream into a free send buffer and Send it from
        there. The buffer goes back to the pool when the Send completed; one whose Send failed or
        was abandoned (the device may still read it) is released and replaced by a new registration."""
        # a free buffer is taken at once, not through the scheduler (one is free unless every
        # credit's Send and both backchannel replies are being posted at this moment)
        while not self._send_free:
            await self._send_waiters.park()
        region = self._send_free.pop()
        completed = False
        try:
            buf = region.buffer
            n = header(buf)
            for piece in payload:
                v = memoryview(piece).cast("B")
                buf[n : n + v.nbytes] = v
                n += v.nbytes
            self.stats.send_bytes_marshalled += n
            await self._send_region(region, n, invalidate)
            completed = True
        finally:
            if not completed:
                self.conn.deregister(region)
            if completed or (not self._closed and self._dead is None):
                self._send_free.append(region if completed else self._new_send_buffer())
                if self._send_waiters:
                    self._send_waiters.unpark()

    def _register(self, plan: CallPlan) -> tuple[Lease, list[Registration]]:
        lease = Lease()
        regs: list[Registration] = []
        try:
            for need in plan.needs:
                if need.kind is NeedKind.READ_SOURCE:
                    assert need.buffer is not None
                    r = self.chunk_memory.source(need.buffer, lease)
                    regs.append(Registration(r.handle, r.address, r.buffer))
                else:
                    r, view = self.chunk_memory.sink(need.length, lease)
                    self.conn.allow_lending(r)
                    regs.append(Registration(r.handle, r.address, view))
        except BaseException:
            self.chunk_memory.release(lease)
            raise
        return lease, regs

    def _release_regions(self, out: _Outstanding) -> None:
        # a region the responder invalidated (Send With Invalidate) is already invalid: the
        # provider releases it without invalidating it again
        self.chunk_memory.release(out.lease)

    async def send_call(
        self, xid: int, msg: Packer, hints: ReplyHints = NO_HINTS, deadline: float = math.inf
    ) -> None:
        # a call that goes at once passes through no schedule point (as over TCP); a connection
        # already dead or closed fails it after one, so that a caller that resends at once lets
        # the receive loop report the loss
        if self._dead is not None or self._closed:
            await trio.lowlevel.checkpoint()
            if self._dead is not None:
                raise ConnectionLost(str(self._dead)) from self._dead
            raise ConnectionLost("transport closed", self.peer)
        await self._acquire_credit(deadline)
        if self._break_match is not None and self._break_match(b"".join(bytes(x) for x in msg.segments())):
            self._break_match = None
            self._break_xid = xid
        sent = False
        try:
            plan = plan_call(msg.segments(), msg.bulk_segments, hints, self.thresholds)
            lease, regs = self._register(plan)
            out = _Outstanding(plan, lease, regs)
            self._outstanding[xid] = out
            bulk = msg.bulk_segments
            if bulk and NeedKind.READ_SOURCE not in [n.kind for n in plan.needs]:  # WRITE data inline
                for b in bulk:
                    self.stats.payload_bytes_copied += b.data.nbytes
            credit = self.gate.rdma_credit()
            await self._send_marshalled(lambda buf: plan.pack_header_into(buf, xid, credit, regs), plan.inline)
            sent = True
            st = self.stats
            st.calls += 1
            for need in plan.needs:
                if need.kind is NeedKind.READ_SOURCE:
                    st.read_chunk_segments += 1
                elif need.kind is NeedKind.WRITE_SINK:
                    st.write_chunks += 1
                else:
                    st.reply_chunks += 1
            if plan.proc != RDMA_MSG:
                st.nomsg_calls += 1
        finally:
            if not sent:
                gone = self._outstanding.pop(xid, None)
                if gone is not None:
                    self._release_regions(gone)
                if self._dead is None:  # a dead connection's gate is not used again
                    for admitted in self.gate.release():
                        admitted.set()

    async def send_reply(self, xid: int, msg: Packer) -> None:
        await trio.lowlevel.checkpoint()
        credit = self.gate.rdma_credit()
        if header_size(0, [], None) + len(msg) > self.thresholds.send:
            raise TransportError(
                f"backchannel reply of {len(msg)} bytes exceeds the inline threshold", self.peer
            )
        await self._send_marshalled(lambda buf: pack_header_into(buf, xid, credit, RDMA_MSG), msg.segments())

    def abandon(self, xid: int) -> None:
        """The caller stops waiting: its memory is invalidated now (a late RDMA access by the
        responder then fails the connection, as on hardware); the credit stays in use until the
        reply comes."""
        out = self._outstanding.get(xid)
        if out is not None and not out.abandoned:
            out.abandoned = True
            self.chunk_memory.invalidate(out.lease)

    # -- receiving --------------------------------------------------------------------------------
    async def receive(self) -> Unpacker | CallError:
        """The next message, taken from the connection's Receive completions in the caller's task
        (the RPC layer's receive loop): no task of the transport's own passes it on."""
        while self._dead is None:
            try:
                rcv = await self.conn.receive()
                data = bytes(rcv.data)  # the inline part; the buffer goes back at once
                self.stats.inline_bytes_copied += len(data)
                self.conn.post_recv(rcv.region)
                msg = self._handle(data, rcv.invalidated)
            except (TransportError, RpcRdmaError) as e:
                self._fail(e if isinstance(e, TransportError) else ProtocolViolation(str(e), self.peer))
                if isinstance(e, InjectedConnectionLoss):
                    await self.conn.aclose()  # the connection goes away now, as a real loss would
                break
            if msg is not None:
                return msg
        await trio.lowlevel.checkpoint()
        assert self._dead is not None
        raise self._dead  # every later receive fails the same way

    def _fail(self, err: TransportError) -> None:
        """The connection is gone: every call fails, credit waiters included."""
        if self._dead is None:
            self._dead = err
        for ev in self.gate.drain():
            ev.set()

    def _handle(self, data: bytes, invalidated: int | None = None) -> Unpacker | CallError | None:
        if invalidated is not None and not self.accepts_remote_invalidation:
            raise ProtocolViolation(
                f"Send With Invalidate of {invalidated:#x}, which we did not advertise", self.peer
            )
        lean = read_header(memoryview(data))  # RDMA_ERROR and faults: the generic decoder
        hdr, off = lean if lean is not None else decode_rdma_msg(data)
        payload = memoryview(data)[off:]
        proc = hdr.rdma_body[0]  # as a plain int: no enum made for each comparison
        if proc == RDMA_MSG and payload.nbytes >= 8 and _MSG_TYPE.unpack_from(payload, 4)[0] == CALL:
            if hdr.chunks.rdma_reads or hdr.chunks.rdma_writes:
                raise RpcRdmaError("backchannel calls must be inline")
            if invalidated is not None:
                raise ProtocolViolation("a backchannel call came with Send With Invalidate", self.peer)
            self.stats.callbacks += 1
            return Unpacker(payload)  # a callback from the server
        out = self._outstanding.pop(hdr.rdma_xid, None)
        for ev in self.gate.reply_received(hdr.rdma_credit) if self.gate.in_flight else ():
            ev.set()
        if self._break_xid is not None and hdr.rdma_xid == self._break_xid:
            if out is not None:
                self._release_regions(out)
            raise InjectedConnectionLoss(
                f"connection broken on purpose at the reply to {hdr.rdma_xid:#x} (break_at_reply)", self.peer
            )
        if invalidated is not None:
            if out is None or invalidated not in [r.handle for r in out.lease.regions]:
                if out is not None:
                    self._release_regions(out)
                raise ProtocolViolation(
                    f"Send With Invalidate of {invalidated:#x} in the reply to {hdr.rdma_xid:#x}, "
                    "which registered no such region",
                    self.peer,
                )
            self.stats.remote_invalidations += 1
        if proc == RDMA_ERROR:
            return self._rdma_error(hdr.rdma_xid, hdr.rdma_body[1], out)
        if out is None:
            return None  # not a call of ours: the RPC layer would drop it too
        if out.abandoned:
            self._release_regions(out)
            return None
        try:
            u = reassemble_reply(hdr, payload, out.plan, self._written(out.regs))
        finally:
            self._release_regions(out)
        st = self.stats
        st.replies += 1
        for c in u.write_chunks:
            if c is not None:
                st.placed_bytes += c.nbytes
        if proc != RDMA_MSG:
            st.nomsg_replies += 1
        return u

    def _written(self, regs: list[Registration]) -> list[Registration]:
        """The call's registrations, a sink's memory replaced by the bytes the provider lent for
        it (:meth:`~.provider.Connection.borrowed`) where it did."""
        placed = regs
        for i, reg in enumerate(regs):
            lent = self.conn.borrowed(reg.handle)
            if lent is not None:
                if placed is regs:
                    placed = list(regs)
                placed[i] = Registration(reg.handle, reg.offset, lent)
        return placed

    def _rdma_error(self, xid: int, body: tuple[int, Any], out: _Outstanding | None) -> CallError | None:
        err, arm = body
        if out is not None:
            self._release_regions(out)
        if err == ERR_VERS:
            raise RdmaVersionMismatch(
                f"the responder refused call {xid:#x} with ERR_VERS: it offers RPC-over-RDMA versions "
                f"{arm.rdma_vers_low}..{arm.rdma_vers_high}, we speak version {RPCRDMA_VERSION}",
                self.peer,
            )
        self.stats.rdma_errors += 1
        if out is None or out.abandoned:
            log.info("%s: RDMA_ERROR for XID %#x, which no call waits for", self.peer, xid)
            return None
        return CallError(xid, CallFailed(f"the responder refused call {xid:#x} (ERR_CHUNK)", self.peer))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.conn.aclose()
        finally:
            if self._host is not None:
                with trio.CancelScope(shield=True):
                    await self._host.stop()

    @property
    def max_payload(self) -> int:
        return 0


class _Host:
    """A nursery for one connection's background tasks, held open by a trio system task.

    Structured concurrency without a caller's nursery: the system task is the owner, ``stop``
    cancels it and waits until every task in it has ended. An unexpected exception in a task is
    logged and handed to ``on_crash`` (the transport then fails like a lost connection) instead
    of escaping the system task, which would abort the whole trio run.
    """

    def __init__(self) -> None:
        self.nursery: trio.Nursery
        self._stopped = trio.Event()
        self._done = trio.Event()
        self.on_crash: Callable[[BaseException], None] | None = None

    @classmethod
    async def start(cls) -> _Host:
        host = cls()
        ready = trio.Event()
        trio.lowlevel.spawn_system_task(host.run, ready, name="rdma-transport-host")
        await ready.wait()
        return host

    async def run(self, ready: trio.Event) -> None:
        """The system task: hold the nursery open until :meth:`stop`."""
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                ready.set()
                await self._stopped.wait()
                nursery.cancel_scope.cancel()
        except Exception as e:  # must not escape a system task
            log.exception("RDMA transport task failed")
            if self.on_crash is not None:
                self.on_crash(e)
        finally:
            self._done.set()

    async def stop(self) -> None:
        self._stopped.set()
        await self._done.wait()


__all__ = [
    "DEFAULT_CREDITS",
    "DEFAULT_INLINE",
    "ConnectSettings",
    "InjectedConnectionLoss",
    "RdmaStats",
    "RdmaTransport",
    "RdmaVersionMismatch",
    "WriteChunkSink",
]
