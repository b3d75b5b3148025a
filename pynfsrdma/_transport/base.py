"""The interface every transport implements (TCP with record marking, RPC-over-RDMA v1).

A transport carries whole RPC messages over one connection. It knows nothing of XIDs beyond what
its framing needs (RPC-over-RDMA repeats the XID in its header), and nothing of NFS: it is told
how a call's bulk payloads lie (``Packer.bulk_segments``) and what the reply may hold
(:class:`ReplyHints`), which is all RPC-over-RDMA needs to choose chunks (RFC 8166, RFC 8267).

Faults are typed (:class:`TransportError` and subclasses) so that the session layer can decide:
retry on another path, reconnect, or fail the call.
"""

from __future__ import annotations

import abc
import errno
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from .._xdr import Packer, Unpacker


class TransportError(ConnectionError):
    """A fault of the connection; the session layer may retry the call elsewhere. An OSError whose
    ``errno`` says which kind (``ERRNO`` of its class)."""

    ERRNO: ClassVar[int] = errno.EIO

    def __init__(self, message: str, peer: str | None = None) -> None:
        text = f"{peer}: {message}" if peer else message
        super().__init__(self.ERRNO, text)
        self.peer = peer

    def __str__(self) -> str:
        return str(self.strerror)


class ConnectRefused(TransportError):
    """Nothing listens at the address (or the connection was refused)."""

    ERRNO = errno.ECONNREFUSED


class ConnectTimeout(TransportError):
    """The address did not answer the connection attempt in time."""

    ERRNO = errno.ETIMEDOUT


class ConnectionLost(TransportError):
    """The connection was reset or closed by the peer (possibly in the middle of a record)."""

    ERRNO = errno.ECONNRESET


class ProtocolViolation(TransportError):
    """The peer sent something that is not valid framing; the connection is unusable."""

    ERRNO = errno.EPROTO


class SendTimeout(TransportError):
    """A call could not be sent before its deadline (the peer stopped reading, or the transport's
    credits or send queue stayed full). If part of it went out, the connection is closed."""

    ERRNO = errno.ETIMEDOUT


class ReceiveInterrupted(Exception):
    """A wait for the next message's start was stopped by :meth:`Transport.interrupt_receive`
    (nothing was consumed; the connection lives on). Not a fault of the connection."""


class CallFailed(TransportError):
    """The transport could not carry this one call (an RPC-over-RDMA responder answered it with
    RDMA_ERROR / ERR_CHUNK); the connection stays up for the others. For the session layer a
    transport fault of that request: it may send it again, and fail it (EIO) if that fails too."""


@dataclass(frozen=True, slots=True)
class CallError:
    """What :meth:`Transport.receive` returns instead of a message when one call failed at the
    transport level (:class:`CallFailed`) and the connection did not: the RPC layer fails the
    call waiting for ``xid`` with ``error`` and goes on receiving."""

    xid: int
    error: CallFailed


class StableBuffer(bytearray):
    """Memory for WRITE payloads that its owner keeps at one size for many calls (never resized):
    the FUSE channel's request buffers. A transport may keep it registered between calls
    (RPC-over-RDMA's chunk memory), which a plain ``bytearray`` never is: a registration holds an
    export of the buffer, and a caller's bytearray must stay resizable.

    ``cached_refs`` counts the references such a cache holds, so that the owner can tell whether
    anyone else still holds a view of it (``sys.getrefcount(buf) - buf.cached_refs``)."""

    __slots__ = ("cached_refs",)

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.cached_refs = 0


class PayloadSink(abc.ABC):
    """Somewhere a reply's bulk payload can go without passing through this process's memory: a
    pipe, which the TCP transport fills by splice(2) straight from the socket. Whoever offers the
    sink decides what the pipe holds before the payload (:meth:`begin`) and what becomes of it.

    One payload at a time: :meth:`begin` returns None while another transport fills it.
    """

    @abc.abstractmethod
    def begin(self, length: int) -> int | None:
        """A payload of ``length`` bytes comes: the file descriptor of the pipe to write it into
        (what the pipe held before is dropped), or None to have it received as usual."""

    @abc.abstractmethod
    def end(self, complete: bool) -> int:
        """The payload :meth:`begin` announced is all in the pipe (``complete``), or it never will
        be (a connection cut, a pipe too full): what is in the pipe is dropped. Returns the number
        of this filling (:attr:`SplicedPayload.filling`)."""

    @abc.abstractmethod
    def holds(self, payload: SplicedPayload) -> bool:
        """The pipe holds ``payload``, whole, and nothing filled after it."""

    @abc.abstractmethod
    def take_back(self, into: memoryview) -> None:
        """Read the payload bytes the pipe holds (all of them, ``into.nbytes``) into ``into``; the
        pipe is then empty (the fallback when the pipe cannot take the whole payload)."""


#: what a locator returns for a reply head too short to tell where the payload starts
NEED_MORE: tuple[int, int] = (-1, -1)


@dataclass(slots=True)
class SpliceRequest:
    """Splice the bulk payload of this call's reply into ``sink`` where the transport can.

    ``locate(head)``: given the first bytes of the reply message (from its XID on), where the
    payload starts in the message and how long it is, :data:`NEED_MORE` when ``head`` is too short
    to tell, or None when the reply has no payload to splice (an error status, another shape). A
    sans-I/O decision of the layer that decodes the reply: the transport only acts on it.
    ``max_length``: a longer payload is not spliced (the decoder then refuses the reply as usual).
    """

    sink: PayloadSink
    locate: Callable[[memoryview], tuple[int, int] | None]
    max_length: int


class SplicedPayload:
    """A reply's payload that went into a :class:`PayloadSink`'s pipe instead of into the reply's
    buffer (what ``Unpacker.bulk()`` returns for it). It has a length and no bytes: whoever
    offered the sink sends the pipe on; :meth:`materialize` reads the bytes back when they are
    needed as bytes after all (a copy)."""

    __slots__ = ("_bytes", "filling", "length", "sink")

    def __init__(self, sink: PayloadSink, filling: int, length: int) -> None:
        self.sink = sink
        self.filling = filling
        self.length = length
        self._bytes: memoryview | None = None

    def __len__(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        return self.length

    @property
    def materialized(self) -> bool:
        return self._bytes is not None

    def materialize(self) -> memoryview:
        """The payload as bytes, read back out of the pipe (once; the pipe is then empty)."""
        if self._bytes is None:
            if not self.sink.holds(self):
                raise TransportError("the spliced payload is no longer in its pipe")
            buf = memoryview(bytearray(self.length))
            self.sink.take_back(buf)
            self.sink.end(False)
            self._bytes = buf
        return self._bytes


@dataclass(slots=True)
class ReplyHints:
    """What a call's reply may contain, for transports that place data directly (RDMA).

    ``ddp_sizes``: for each DDP-eligible item of the reply, in order (each READ's data, READLINK's
    link), the largest size it can have. ``max_reply``: an upper bound on the whole reply's size
    (without the DDP items) when it may be large (READDIR, a big GETATTR); 0 when small.
    ``splice``: a pipe the reply's one bulk payload may be spliced into (TCP; others ignore it).
    """

    ddp_sizes: list[int] = field(default_factory=list)
    max_reply: int = 0
    splice: SpliceRequest | None = None  # (TCP) where the payload may be spliced to


NO_HINTS = ReplyHints()


class Transport(abc.ABC):
    """One connection carrying RPC messages in both directions (fore and back channel)."""

    kind: ClassVar[str]  # "tcp" or "rdma"; as in netids
    peer: str  # "address:port"
    #: :meth:`receive` may be called by the task whose call waits for a reply (it takes its own
    #: reply without a pass through the scheduler) and cancelled there at any point: a
    #: cancellation before a message has begun loses nothing, one inside a message closes the
    #: connection (its framing would be lost); and :meth:`wait_receivable` and
    #: :meth:`interrupt_receive` are offered. Otherwise one receive loop reads the connection.
    caller_receives: ClassVar[bool] = False

    @abc.abstractmethod
    async def send_call(
        self, xid: int, msg: Packer, hints: ReplyHints = NO_HINTS, deadline: float = math.inf
    ) -> None:
        """Send an RPC call message (whose first word is ``xid``), by ``deadline`` (trio clock) or
        raise :class:`SendTimeout`."""

    @abc.abstractmethod
    async def send_reply(self, xid: int, msg: Packer) -> None:
        """Send an RPC reply message (backchannel: our reply to the server's callback)."""

    @abc.abstractmethod
    async def receive(self) -> Unpacker | CallError:
        """The next RPC message received (call or reply), positioned at its XID.

        For an RDMA reply, the unpacker's ``bulk()`` yields the data the server placed in the
        call's Write chunks. A :class:`CallError` says that one call failed while the connection
        lives on (TCP never returns one). Raises :class:`TransportError` when the connection fails.
        """

    async def wait_receivable(self) -> None:
        """Until a message has begun to arrive (or the connection ends), consuming nothing: a wait
        that can be cancelled without loss (transports with :attr:`caller_receives` only)."""
        raise NotImplementedError

    def interrupt_receive(self) -> None:
        """Stop the task waiting in :meth:`wait_receivable`, or in :meth:`receive` for a message's
        start, with :class:`ReceiveInterrupted` (a task not waiting there is not affected; one
        waiting inside a message sees the connection closed, as its framing would be lost): how
        a reader is stopped without a cancel scope of its own (transports with
        :attr:`caller_receives` only)."""
        raise NotImplementedError

    def abandon(self, xid: int) -> None:  # noqa: B027 - optional hook, default is right for TCP
        """Forget per-call state of a call whose reply will no longer be awaited."""

    def limit_records(self, size: int) -> None:  # noqa: B027 - optional hook: RDMA's buffers bound it
        """From now on a received message larger than ``size`` bytes ends the connection
        (:class:`ProtocolViolation`) before anything is allocated for it."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the connection; pending ``receive`` calls raise :class:`ConnectionLost`."""

    @property
    def tls_version(self) -> str | None:
        """The TLS version the connection runs under (RPC-with-TLS), None for none."""
        return None

    @property
    def max_payload(self) -> int:
        """The largest message this transport carries (0 for no limit of its own)."""
        return 0
