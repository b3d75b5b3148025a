"""An RPC-over-RDMA version 1 responder in front of NFS-Ganesha (which speaks only TCP here).

Each RDMA connection (through a verbs provider: the software one in tests, pyverbs on hardware)
gets a TCP connection of its own to the NFS server. What the responder does, as an RPC-over-RDMA
server must (RFC 8166, RFC 8267, RFC 8797):

* answers the connect request with its RFC 8797 private data and uses the negotiated inline
  thresholds of that connection;
* keeps ``credits`` receives posted for calls (plus a few for backchannel replies), grants
  ``credits`` in every reply, and counts a requester that has more calls outstanding than that
  (:attr:`ConnectionStats.credit_overruns`; the connection is then dropped);
* pulls Read chunks with RDMA Read (WRITE data, RDMA_NOMSG calls), rebuilds the call and
  forwards it over TCP; matches the server's reply by XID;
* places READ and READLINK data of the reply into the requester's Write chunks with RDMA Write
  (found by decoding the COMPOUND4res, :func:`locate_nfs4_ddp_items`), and sends the rest inline,
  or writes it into the Reply chunk (RDMA_NOMSG) when it exceeds the inline threshold;
* when the requester advertised remote invalidation (RFC 8797) and the provider can, sends each
  reply that names a Write or Reply chunk of the call as Send With Invalidate of one of them
  (:func:`choose_invalidation`; :attr:`ResponderSettings.remote_invalidation` turns it off);
* relays the server's backchannel CALLs (CB_NULL, CB_COMPOUND) to the requester as RDMA_MSG
  CALLs and the requester's replies back, telling CALL from REPLY by the RPC message type.

Faults for tests: :meth:`Responder.kill_connections` drops every connection now;
:meth:`Responder.drop_replies` makes the next replies never arrive (the call was executed by
the server, then the connection is dropped instead of replying); :meth:`Responder.refuse_calls`
answers the next calls with RDMA_ERROR (ERR_CHUNK or ERR_VERS) instead of forwarding them.

Run detached for the testbed::

    python -m pynfsrdma._testbed.rdma_responder --listen 127.0.0.1:20049 --target 127.0.0.1:20490

or from Python :func:`start_responder_process`, or in a nursery :func:`serve_rdma`.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import select
import signal
import struct
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import trio

from .._proto import rpc as rpcdef
from .._proto.nfs4 import const as nfs4const
from .._proto.nfs4.compound import decode_compound_args, decode_compound_res
from .._proto.private_data import ConnectPrivateData, InlineThresholds, negotiate
from .._proto.rpcrdma import (
    ERR_CHUNK,
    ERR_VERS,
    RDMA_MSG,
    RDMA_NOMSG,
    RpcRdmaError,
    RpcRdmaVersionError,
    decode_rdma_msg,
    encode_rdma_msg,
    make_error,
    make_msg,
    rpc_rdma_errcode,
)
from .._transport.base import TransportError
from .._transport.rdma.header import pack_header, read_header
from .._transport.rdma.provider import Access, Connection, Listener, MemoryRegion, Provider, RdmaWrite
from .._xdr import Unpacker, XdrError, pad_len
from .listener import host_port
from .record_stream import RecordBuffer, RecordStream
from .responder_chunks import (
    ChunkError,
    DdpLocator,
    ReceivedCall,
    assemble_call,
    choose_invalidation,
    encode_reply,
    parse_call,
)

log = logging.getLogger(__name__)

DEFAULT_CREDITS: Final = 32
DEFAULT_INLINE: Final = 4096
BACKCHANNEL_RECEIVES: Final = 4  # receives posted beyond the credits, for backchannel replies
MIN_SINK: Final = 4096  # the smallest RDMA Read sink kept
READY_LINE: Final = "rdma-responder listening"

_WORD: Final = struct.Struct(">I")
Buffer = bytes | bytearray | memoryview


# -- where the DDP-eligible items of an NFSv4 reply are ------------------------------------------
class _DdpRecorder(Unpacker):
    """An unpacker whose ``bulk()`` notes (position, length) of each DDP-eligible item."""

    __slots__ = ("items",)

    def __init__(self, data: Buffer) -> None:
        super().__init__(data)
        self.items: list[tuple[int, int]] = []

    def bulk(self) -> memoryview:
        n = self.uint32()
        p = self.need(n + pad_len(n))
        self.items.append((p, n))
        return self.view[p : p + n]


def locate_nfs4_ddp_items(reply: memoryview) -> list[tuple[int, int]]:
    """(position, length) of READ data and READLINK link of an NFSv4 COMPOUND reply, in order.

    A reply that is not an accepted SUCCESS has none. A reply that does not decode to its end
    yields the items found before the fault (they are where the decoder saw them)."""
    u = _DdpRecorder(reply)
    try:
        if not rpcdef.read_to_results(u):
            return []
        decode_compound_res(u)
    except XdrError:
        pass
    return u.items


def compound_has_op(opnum: int) -> Callable[[bytes], bool]:
    """A test for an encoded RPC call: an NFSv4 COMPOUND with operation ``opnum`` in it (for
    :meth:`~pynfsrdma._transport.rdma.transport.RdmaTransport.break_at_reply`)."""

    def match(message: bytes) -> bool:
        u = Unpacker(message)
        try:
            u.uint32()  # xid
            if u.uint32() != rpcdef.CALL:
                return False
            body = rpcdef.decode_call_body(u)
            if body.prog != nfs4const.NFS4_PROGRAM or body.proc != nfs4const.NFSPROC4_COMPOUND:
                return False
            args = decode_compound_args(u)
        except XdrError:
            return False
        return any(getattr(op, "OPNUM", None) == opnum for op in args.argarray)

    return match


# -- statistics --------------------------------------------------------------------------------
@dataclass
class ConnectionStats:
    """What one RDMA connection saw (and the totals over all, in :attr:`Responder.stats`)."""

    calls: int = 0
    replies: int = 0
    outstanding: int = 0
    max_outstanding: int = 0
    credit_overruns: int = 0
    msg_calls: int = 0
    nomsg_calls: int = 0
    read_chunks: int = 0
    rdma_reads: int = 0
    rdma_read_bytes: int = 0
    rdma_writes: int = 0
    rdma_write_bytes: int = 0
    write_chunks_filled: int = 0
    reply_chunks_used: int = 0
    sends: int = 0
    rdma_errors_sent: int = 0
    sends_with_invalidate: int = 0
    callbacks_relayed: int = 0
    callback_replies_relayed: int = 0

    def add(self, other: ConnectionStats) -> None:
        for k, v in vars(other).items():
            if k == "max_outstanding":
                self.max_outstanding = max(self.max_outstanding, v)
            elif k != "outstanding":
                setattr(self, k, getattr(self, k) + v)


@dataclass
class ResponderSettings:
    credits: int = DEFAULT_CREDITS
    inline_send: int = DEFAULT_INLINE  # the largest message we Send (before negotiation)
    inline_recv: int = DEFAULT_INLINE  # the largest message we take (our receive buffers)
    remote_invalidation: bool = True  # use Send With Invalidate when the requester takes it

    def private_data(self) -> ConnectPrivateData:
        return ConnectPrivateData(send_size=self.inline_send, recv_size=self.inline_recv)


@dataclass(eq=False)
class _Pending:
    call: ReceivedCall
    proc: int  # the RPC procedure (only COMPOUND replies are searched for DDP items)


# -- one RDMA connection -----------------------------------------------------------------------
class ResponderConnection:
    def __init__(self, responder: Responder, conn: Connection, thresholds: InlineThresholds) -> None:
        self.responder = responder
        self.conn = conn
        self.thresholds = thresholds
        self.settings = responder.settings
        self.stats = ConnectionStats()
        self.tcp: RecordStream | None = None
        self.remote_invalidation = (
            thresholds.remote_invalidation
            and conn.supports_remote_invalidation
            and self.settings.remote_invalidation
        )
        self._pending: dict[int, _Pending] = {}
        self._scope = trio.CancelScope()
        self.closed = False
        # memory registered once per connection, as a server keeps it: RDMA Read sinks by size
        # class (a power of two) and send buffers of the negotiated send threshold
        self._free_sinks: dict[int, list[MemoryRegion]] = {}
        self._free_sends: list[MemoryRegion] = []
        # calls whose Read chunks are pulled, with the data and its sinks, for the forwarder
        self._pulled_tx, self._pulled_rx = trio.open_memory_channel[
            tuple[ReceivedCall, bool, list[memoryview], list[MemoryRegion]]
        ](math.inf)

    @property
    def credits(self) -> int:
        return self.settings.credits

    async def serve(self, target_host: str, target_port: int) -> None:
        for _ in range(self.credits + BACKCHANNEL_RECEIVES):
            self.conn.post_recv(self.conn.register(bytearray(self.thresholds.recv), Access.LOCAL_WRITE))
        try:
            with self._scope:
                self.tcp = await RecordStream.connect(target_host, target_port, self._memory)
                async with trio.open_nursery() as nursery:
                    self._spawn(nursery, self._from_requester, nursery)
                    self._spawn(nursery, self._from_server, nursery)
                    self._spawn(nursery, self._forward_pulled)
        except (TransportError, OSError) as e:
            log.info("%s: cannot reach the server: %s", self.conn.peer, e)
        finally:
            self.closed = True
            with trio.CancelScope(shield=True):
                await self.conn.aclose()
                if self.tcp is not None:
                    await self.tcp.aclose()

    def kill(self) -> None:
        self._scope.cancel()

    def _spawn(self, nursery: trio.Nursery, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        """Run a task of this connection; a connection fault in it ends the whole connection."""

        async def guarded() -> None:
            try:
                await fn(*args)
            except (TransportError, OSError, trio.ClosedResourceError) as e:
                log.info("%s: connection ends: %s", self.conn.peer, e)
                self.kill()

        nursery.start_soon(guarded)

    # -- requester -> server --------------------------------------------------------------------
    async def _from_requester(self, nursery: trio.Nursery) -> None:
        while True:
            rcv = await self.conn.receive()
            data = bytes(rcv.data)  # at most the inline threshold; the buffer goes back at once
            self.conn.post_recv(rcv.region)
            try:
                lean = read_header(memoryview(data))
                hdr, off = lean if lean is not None else decode_rdma_msg(data)
                call = parse_call(hdr, memoryview(data)[off:])
            except RpcRdmaVersionError as e:
                await self._send_error(e.xid, ERR_VERS)
                continue
            except RpcRdmaError as e:
                log.warning("%s: bad transport header: %s", self.conn.peer, e)
                if len(data) >= 4:
                    await self._send_error(_WORD.unpack_from(data)[0], ERR_CHUNK)
                continue
            # A CALL takes a credit; a REPLY (backchannel) does not. The type of a RDMA_NOMSG
            # message is only known once pulled, and only calls are sent that way.
            is_reply = call.proc == RDMA_MSG and _msg_type(call.inline) == rpcdef.REPLY
            if not is_reply:
                st = self.stats
                st.calls += 1
                st.outstanding += 1
                st.max_outstanding = max(st.max_outstanding, st.outstanding)
                if st.outstanding > self.credits:
                    st.credit_overruns += 1
                    log.warning(
                        "%s: %d calls outstanding, %d granted", self.conn.peer, st.outstanding, self.credits
                    )
                    self.kill()
                    return
                refusal = self.responder.take_refused_call()
                if refusal is not None:
                    log.info("%s: refusing call %#x with %s", self.conn.peer, call.xid, refusal.name)
                    st.outstanding -= 1
                    await self._send_error(call.xid, refusal)
                    continue
            post = getattr(self.conn, "post_rdma_read", None) if call.reads else None
            if post is not None:  # posted: their last completion hands the call to the forwarder
                await self._pull(call, is_reply, post)
            elif call.reads:  # its RDMA Reads are awaited while the next calls come in
                self._spawn(nursery, self._forward, call, is_reply)
            else:  # nothing to wait for but the socket to Ganesha: forwarded in this pass
                await self._forward(call, is_reply)

    def _take_sink(self, length: int) -> MemoryRegion:
        size = max(MIN_SINK, 1 << (length - 1).bit_length())
        free = self._free_sinks.get(size)
        if free:
            return free.pop()
        return self.conn.register(self._memory(size), Access.LOCAL_WRITE)

    def _memory(self, n: int) -> RecordBuffer:
        """A buffer for memory the requester reaches (RDMA Read sinks, the record buffers RDMA
        Writes take READ data from): shared with it where the provider can (the software one:
        the requester then copies with a plain memory copy, not ``process_vm_*``)."""
        shared = getattr(self.responder.provider, "shared_buffer", None)
        view = shared(n) if shared is not None else None
        return view if view is not None else bytearray(n)

    def _give_sink(self, sink: MemoryRegion, ok: bool) -> None:
        if ok and sink.valid:
            self._free_sinks.setdefault(sink.length, []).append(sink)
        else:  # an RDMA Read that failed may still be writing it: not used again
            self.conn.deregister(sink)

    async def _pull(self, call: ReceivedCall, is_reply: bool, post: Callable[..., Awaitable[None]]) -> None:
        """Post the RDMA Reads of ``call``'s Read chunks and return: the last completion (in the
        provider's receive loop) hands the call to the forwarder with the data pulled."""
        st = self.stats
        sinks = [self._take_sink(chunk.length) for chunk in call.reads]
        pulled = [sink.buffer[: chunk.length] for sink, chunk in zip(sinks, call.reads, strict=True)]
        left = [sum(len(chunk.segments) for chunk in call.reads)]
        failed: list[BaseException] = []

        def done(error: BaseException | None) -> None:
            if error is not None:
                failed.append(error)
            left[0] -= 1
            if left[0]:
                return
            if failed:  # the connection failed under a Read: the sinks are never used again
                for sink in sinks:
                    self._give_sink(sink, False)
                return
            st.read_chunks += len(call.reads)
            self._pulled_tx.send_nowait((call, is_reply, pulled, sinks))

        unposted = left[0]
        for chunk, sink in zip(call.reads, sinks, strict=True):
            pos = 0
            for seg in chunk.segments:
                try:
                    await post(sink, pos, seg.handle, seg.offset, seg.length, done)
                except BaseException as e:  # this one and the rest are never completed: failed
                    left[0] -= unposted - 1
                    done(e)
                    raise
                unposted -= 1
                pos += seg.length
                st.rdma_reads += 1
                st.rdma_read_bytes += seg.length

    async def _forward_pulled(self) -> None:
        """Forward the calls whose Read chunks have been pulled, one after the other (one task for
        the connection, not one per call); a sink goes back once its bytes are in the socket."""
        async for call, is_reply, pulled, sinks in self._pulled_rx:
            try:
                await self._relay(call, is_reply, pulled)
            finally:
                for sink in sinks:
                    self._give_sink(sink, True)

    async def _forward(self, call: ReceivedCall, is_reply: bool) -> None:
        st = self.stats
        sinks: list[MemoryRegion] = []
        ok = False
        try:
            pulled: list[memoryview] = []
            for chunk in call.reads:
                sink = self._take_sink(chunk.length)
                sinks.append(sink)
                pos = 0
                for seg in chunk.segments:
                    await self.conn.rdma_read(sink, pos, seg.handle, seg.offset, seg.length)
                    pos += seg.length
                    st.rdma_reads += 1
                    st.rdma_read_bytes += seg.length
                pulled.append(sink.buffer[: chunk.length])
            ok = True  # every RDMA Read completed: the device is done with the sinks
            st.read_chunks += len(call.reads)
            await self._relay(call, is_reply, pulled)
        finally:
            for s in sinks:
                self._give_sink(s, ok)

    async def _relay(self, call: ReceivedCall, is_reply: bool, pulled: Sequence[Buffer]) -> None:
        """The call rebuilt from its inline part and the data pulled, to the server."""
        st = self.stats
        try:
            message = assemble_call(call, pulled)
        except ChunkError as e:
            log.warning("%s: call %#x: %s", self.conn.peer, call.xid, e)
            if not is_reply:
                st.outstanding -= 1
            await self._send_error(call.xid, ERR_CHUNK)
            return
        assert self.tcp is not None
        if is_reply:
            st.callback_replies_relayed += 1
            await self.tcp.send(message)
            return
        if call.proc == RDMA_NOMSG:
            st.nomsg_calls += 1
        else:
            st.msg_calls += 1
        head = _head(message, 24)
        if len(head) >= 8 and _WORD.unpack_from(head, 4)[0] == rpcdef.REPLY:
            # a backchannel reply sent as RDMA_NOMSG: it took no credit after all
            st.outstanding -= 1
            st.calls -= 1
            st.callback_replies_relayed += 1
            await self.tcp.send(message)
            return
        proc = _WORD.unpack_from(head, 20)[0] if len(head) >= 24 else -1
        self._pending[call.xid] = _Pending(call, proc)
        await self.tcp.send(message)

    # -- server -> requester --------------------------------------------------------------------
    async def _from_server(self, nursery: trio.Nursery) -> None:
        """Relay the server's replies (and callbacks). Where the provider can hold posts back
        (the software one: ``hold_posts``), the RDMA Writes and Send of each reply are posted
        held, and all those posted go out together once no more of the server's replies are
        waiting to be read, as a server rings one doorbell for the work requests of the
        completions it took in one pass: one write to the requester's socket and one wake-up
        of the requester for them all."""
        assert self.tcp is not None
        ring = getattr(self.conn, "ring", None)
        if ring is not None:
            self.tcp.before_wait = ring
        while True:
            view, record = await self.tcp.receive()
            if view.nbytes < 8:
                self.tcp.give_back(record)
                continue
            xid, mtype = struct.unpack_from(">II", view)
            if mtype == rpcdef.CALL:
                self._spawn(nursery, self._relay_callback, xid, view, record)
                continue
            pending = self._pending.pop(xid, None)
            if pending is None:
                log.info("%s: server reply for unknown XID %#x dropped", self.conn.peer, xid)
                self.tcp.give_back(record)
                continue
            if ring is None:
                await self._reply(pending, view, record)
                continue
            self.conn.hold_posts = True  # type: ignore[attr-defined]
            try:
                await self._reply(pending, view, record)
            finally:
                self.conn.hold_posts = False  # type: ignore[attr-defined]

    async def _reply(self, pending: _Pending, reply: memoryview, record: RecordBuffer) -> None:
        """Place and send a reply that lies in ``record`` (a buffer of the record stream, given
        back once no RDMA Write reads from it any more)."""
        st = self.stats
        locator: DdpLocator | None = None
        if pending.proc == nfs4const.NFSPROC4_COMPOUND and any(c.target for c in pending.call.writes):
            locator = self.responder.ddp_locator  # only a Write chunk takes DDP items out of it
        items = locator(reply) if locator is not None else []
        try:
            enc = encode_reply(pending.call, reply, items, self.thresholds.send, self.credits)
        except ChunkError as e:
            log.warning("%s: reply %#x: %s", self.conn.peer, pending.call.xid, e)
            st.outstanding -= 1
            self._give_record(record)
            await self._send_error(pending.call.xid, ERR_CHUNK)
            return
        if self.responder.take_dropped_reply():
            log.info(
                "%s: dropping the connection instead of replying to %#x", self.conn.peer, pending.call.xid
            )
            self.kill()
            return
        writes = [RdmaWrite([data], seg.handle, seg.offset) for seg, data in enc.rdma_writes]
        st.rdma_writes += len(writes)
        st.rdma_write_bytes += sum(data.nbytes for _, data in enc.rdma_writes)
        st.write_chunks_filled += sum(
            1 for c in enc.header.chunks.rdma_writes if any(s.length for s in c.target)
        )
        if enc.header.proc == RDMA_NOMSG:
            st.reply_chunks_used += 1
        # the credit comes back as the reply leaves: the requester may send its next call as soon
        # as it sees this Send, possibly before our Send completion
        st.outstanding -= 1
        st.replies += 1
        st.sends += 1
        invalidate = choose_invalidation(enc.header) if self.remote_invalidation else None
        if invalidate is not None:
            st.sends_with_invalidate += 1
        await self._send([pack_header(enc.header), *enc.inline], invalidate, writes, record)

    def _give_record(self, record: RecordBuffer | None) -> None:
        if record is not None and self.tcp is not None:
            self.tcp.give_back(record)

    async def _send(
        self,
        pieces: Sequence[Buffer],
        invalidate: int | None = None,
        writes: Sequence[RdmaWrite] = (),
        record: RecordBuffer | None = None,
    ) -> None:
        """Marshal the pieces into a send buffer registered once and Send it from there, behind
        ``writes`` (the reply's RDMA Writes, chained in front of its Send as a server posts them:
        one completion for all). ``record``, where the Writes' data lies, goes back to the record
        stream when they are done (at once without Writes: the pieces are copied by then); after a
        fault it is never used again (the device may still read it)."""
        region = (
            self._free_sends.pop()
            if self._free_sends
            else self.conn.register(bytearray(self.thresholds.send), Access.LOCAL_WRITE)
        )
        buf, n = region.buffer, 0
        for piece in pieces:
            v = memoryview(piece).cast("B")
            buf[n : n + v.nbytes] = v
            n += v.nbytes
        if not writes:
            self._give_record(record)
            record = None
            unsignaled = getattr(self.conn, "send_region_unsignaled", None)
            if unsignaled is not None:  # nothing to wait for: the buffer is free once posted
                try:
                    await unsignaled(region, n, invalidate)
                except BaseException:
                    self.conn.deregister(region)  # not known to have left: never used again
                    raise
                self._free_sends.append(region)
                return
        post = getattr(self.conn, "post_send_region_after_writes", None)
        if post is not None:  # posted, not awaited: the completion gives the buffer back

            def done(error: BaseException | None) -> None:
                if error is None:
                    self._free_sends.append(region)
                    self._give_record(record)
                else:  # the device may still read it
                    self.conn.deregister(region)

            await post(writes, region, n, invalidate, done)
            return
        sent = False
        try:
            await self.conn.send_region_after_writes(writes, region, n, invalidate)
            sent = True
        finally:
            if sent:
                self._free_sends.append(region)
                self._give_record(record)
            else:  # the device may still read it
                self.conn.deregister(region)

    async def _relay_callback(self, xid: int, message: memoryview, record: RecordBuffer) -> None:
        hdr = encode_rdma_msg(make_msg(xid, self.credits, RDMA_MSG)).getvalue()
        if len(hdr) + message.nbytes > self.thresholds.send:
            log.warning(
                "%s: %d-byte callback exceeds the inline threshold; dropped", self.conn.peer, message.nbytes
            )
            self._give_record(record)
            return
        self.stats.callbacks_relayed += 1
        self.stats.sends += 1
        await self._send([hdr, message], record=record)

    async def _send_error(self, xid: int, err: int) -> None:
        self.stats.rdma_errors_sent += 1
        self.stats.sends += 1
        await self._send(
            [encode_rdma_msg(make_error(xid, self.credits, ERR_VERS if err == ERR_VERS else ERR_CHUNK)).getvalue()]
        )


def _msg_type(inline: memoryview) -> int:
    return int(_WORD.unpack_from(inline, 4)[0]) if inline.nbytes >= 8 else -1


def _head(parts: Sequence[Buffer], n: int) -> bytes:
    out = bytearray()
    for p in parts:
        out += memoryview(p)[: n - len(out)]
        if len(out) >= n:
            break
    return bytes(out)


# -- the responder -----------------------------------------------------------------------------
@dataclass(eq=False)
class Responder:
    """A running responder: its port, its connections and their statistics."""

    provider: Provider
    listener: Listener
    target: tuple[str, int]
    settings: ResponderSettings
    ddp_locator: DdpLocator = locate_nfs4_ddp_items
    connections: list[ResponderConnection] = field(default_factory=list)
    finished: ConnectionStats = field(default_factory=ConnectionStats)
    accepted: int = 0
    _drop_replies: int = 0
    _pass_replies: int = 0
    _refuse_calls: int = 0
    _pass_calls: int = 0
    _refusal: rpc_rdma_errcode = ERR_CHUNK
    _scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    @property
    def port(self) -> int:
        return self.listener.port

    @property
    def stats(self) -> ConnectionStats:
        """Totals over every connection so far (``max_outstanding``: the highest on any one)."""
        total = ConnectionStats()
        total.add(self.finished)
        for c in self.connections:
            total.add(c.stats)
        return total

    def kill_connections(self) -> int:
        """Drop every live connection now (the requester sees the connection lost)."""
        live = [c for c in self.connections if not c.closed]
        for c in live:
            c.kill()
        return len(live)

    def drop_replies(self, count: int = 1, after: int = 0) -> None:
        """After ``after`` more replies, the next ``count`` replies from the server are not
        delivered: the connection that should carry each is dropped instead (the server executed
        the call; the requester must send it again)."""
        self._pass_replies = after
        self._drop_replies = count

    def take_dropped_reply(self) -> bool:
        if self._drop_replies <= 0:
            return False
        if self._pass_replies > 0:
            self._pass_replies -= 1
            return False
        self._drop_replies -= 1
        return True

    def refuse_calls(self, count: int = 1, after: int = 0, error: rpc_rdma_errcode = ERR_CHUNK) -> None:
        """After ``after`` more calls, answer the next ``count`` calls with RDMA_ERROR ``error``
        (ERR_CHUNK or ERR_VERS) without forwarding them (the server never sees them)."""
        self._pass_calls = after
        self._refuse_calls = count
        self._refusal = error

    def take_refused_call(self) -> rpc_rdma_errcode | None:
        if self._refuse_calls <= 0:
            return None
        if self._pass_calls > 0:
            self._pass_calls -= 1
            return None
        self._refuse_calls -= 1
        return self._refusal

    def _private_data(self, request: bytes) -> bytes:
        return self.settings.private_data().encode()

    async def run(self, nursery: trio.Nursery) -> None:
        with self._scope:
            while True:
                conn = await self.listener.accept()
                self.accepted += 1
                thresholds = negotiate(self.settings.private_data(), conn.peer_private_data)
                rc = ResponderConnection(self, conn, thresholds)
                self.connections.append(rc)
                log.info(
                    "%s: connected (send %d, receive %d, peer private data: %s)",
                    conn.peer,
                    thresholds.send,
                    thresholds.recv,
                    thresholds.peer_sent_message,
                )
                nursery.start_soon(self._serve, rc)

    async def _serve(self, rc: ResponderConnection) -> None:
        try:
            await rc.serve(*self.target)
        finally:
            self.connections.remove(rc)
            self.finished.add(rc.stats)

    async def aclose(self) -> None:
        self._scope.cancel()
        for c in self.connections:
            c.kill()
        await self.listener.aclose()


async def serve_rdma(
    nursery: trio.Nursery,
    provider: Provider,
    listen_host: str,
    listen_port: int,
    target_host: str,
    target_port: int,
    *,
    credits: int = DEFAULT_CREDITS,
    inline_size: int = DEFAULT_INLINE,
    remote_invalidation: bool = True,
) -> Responder:
    """Listen on ``listen_host:listen_port`` (0: any free port, see ``.port``) and serve RDMA
    connections in ``nursery``, forwarding to the RPC server at ``target_host:target_port``."""
    settings = ResponderSettings(
        credits=credits,
        inline_send=inline_size,
        inline_recv=inline_size,
        remote_invalidation=remote_invalidation,
    )
    holder: list[Responder] = []

    def private_data(request: bytes) -> bytes:
        return holder[0]._private_data(request) if holder else settings.private_data().encode()

    listener = await provider.listen(nursery, listen_host, listen_port, private_data)
    responder = Responder(provider, listener, (target_host, target_port), settings)
    holder.append(responder)
    nursery.start_soon(responder.run, nursery)
    return responder


# -- as a process ------------------------------------------------------------------------------
def start_responder_process(
    target_host: str,
    target_port: int,
    listen_host: str = "127.0.0.1",
    listen_port: int | None = None,
    *,
    provider: str = "soft",
    credits: int = DEFAULT_CREDITS,
    inline_size: int = DEFAULT_INLINE,
    log_path: str | os.PathLike[str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, int]:
    """Start a detached responder process (its own session) and return ``(pid, port)`` once it
    listens. ``listen_port`` None picks a free port. Its log goes to ``log_path`` (else nowhere).
    End it with SIGTERM to the PID."""
    argv = [
        sys.executable, "-m", "pynfsrdma._testbed.rdma_responder",
        "--listen", f"{listen_host}:{listen_port or 0}",
        "--target", f"{target_host}:{target_port}",
        "--provider", provider, "--credits", str(credits), "--inline", str(inline_size),
    ]  # fmt: skip
    err = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, start_new_session=True
        )
    finally:
        if log_path is not None:
            err.close()  # type: ignore[union-attr]
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
    finally:
        proc.stdout.close()
    if not line.startswith(READY_LINE):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"RDMA responder did not start (exit status {proc.poll()}, said {line!r})")
    port = int(line.rsplit(":", 1)[1])
    return proc.pid, port


async def _main_async(args: argparse.Namespace) -> None:
    from .._transport.rdma import make_provider
    from .._transport.rdma.soft import SoftProvider

    provider = SoftProvider(one_host=False) if args.no_placement else make_provider(args.provider)
    async with trio.open_nursery() as nursery:
        responder = await serve_rdma(
            nursery, provider, args.listen[0], args.listen[1], args.target[0], args.target[1],
            credits=args.credits, inline_size=args.inline,
        )  # fmt: skip
        print(f"{READY_LINE} {args.listen[0]}:{responder.port}", flush=True)
        # nothing more goes to stdout: the starter reads one line and closes the pipe
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        await responder.aclose()
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m pynfsrdma._testbed.rdma_responder",
        description="RPC-over-RDMA responder forwarding to an NFS server over TCP",
    )
    ap.add_argument(
        "--listen", type=host_port, required=True, help="HOST:PORT to accept RDMA on (port 0: any)"
    )
    ap.add_argument("--target", type=host_port, required=True, help="HOST:PORT of the NFS server (TCP)")
    ap.add_argument("--provider", default="soft", help="verbs provider: soft or pyverbs")
    ap.add_argument("--credits", type=int, default=DEFAULT_CREDITS)
    ap.add_argument("--inline", type=int, default=DEFAULT_INLINE, help="inline send/receive size")
    ap.add_argument(
        "--no-placement", action="store_true",
        help="software provider: RDMA Read/Write data over its socket even on one host (so that a "
        "rate-limited link carries it), not copied straight between the two processes' memory",
    )  # fmt: skip
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.no_placement and args.provider != "soft":
        ap.error("--no-placement is for --provider soft")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    trio.run(_main_async, args)
    return 0


__all__ = [
    "ConnectionStats",
    "Responder",
    "ResponderConnection",
    "ResponderSettings",
    "compound_has_op",
    "locate_nfs4_ddp_items",
    "main",
    "serve_rdma",
    "start_responder_process",
]


if __name__ == "__main__":
    sys.exit(main())
