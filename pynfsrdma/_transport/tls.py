"""RPC-with-TLS (RFC 9289): ONC RPC records inside TLS 1.3 on a TCP connection.

A fresh TCP connection first carries the AUTH_TLS probe, a NULL call of the program the connection
is for (RFC 9289 section 4.1). A server that does TLS answers it with an AUTH_NONE verifier that
says "STARTTLS"; the TLS handshake then runs on that same connection (ALPN "sunrpc", TLS 1.3 only),
and from there on the RPC records, with their record marks, go inside TLS. Any other answer, a
certificate the trust store does not vouch for, a name that is not the server's: the connection is
closed and :class:`TlsRefused` names the server and what failed. Nothing ever falls back to plain
text.

``xprtsec=`` as nfs(5) names it: ``none`` (plain TCP), ``tls`` (the server's certificate checked),
``mtls`` (and ours shown to it). The files are named as tlshd.conf(5) names them:
``truststore=`` (its ``x509.truststore``: the CA certificates the server's certificate is checked
against; by default the system's), ``certificate=`` and ``private_key=`` (its ``x509.certificate``
and ``x509.private_key``: the client's, for mtls). The name checked in the server's certificate is
the one the user gave (the URL's host), for every address of the server the session connects to.

TLS runs over memory BIOs (Python's ``ssl.SSLObject``) on the same non-blocking socket plain TCP
uses, driven by trio's readiness waits. Sending encrypts the caller's WRITE payload from its own
buffer (no join); receiving decrypts each fragment straight into the buffer the decoder views, as
plain TCP's ``recv_into`` does (the head that comes with a record mark is copied, as there). No
splice: the socket's bytes are ciphertext.
"""

from __future__ import annotations

import errno
import math
import socket
import ssl
import struct
from typing import ClassVar, Final, cast

import trio

from .._proto.rpc import RM_LAST_FRAGMENT, RM_LENGTH_MASK, TLS_ALPN, pack_tls_probe, tls_probe_refusal
from .._xdr import Packer, Unpacker, XdrError
from .base import (
    NO_HINTS,
    ConnectionLost,
    ConnectTimeout,
    ReplyHints,
    SendTimeout,
    TransportError,
)
from .tcp import DEFAULT_MAX_RECORD, STAGE_READ, BufferPool, RecordStream, TcpTransport
from .xprtsec import TLS_OPTIONS, XPRTSEC_MODES, XprtSec, XprtSecError

_MARK: Final = struct.Struct(">I")
RECEIVE_CHUNK: Final = 256 * 1024  # TLS records taken from the socket at a time, at most
COALESCE: Final = 4096  # message segments shorter than this are joined before they are encrypted
PROBE_XID: Final = 0x544C5331  # the XID of the AUTH_TLS probe (any will do: it is the connection's first call)


class TlsRefused(TransportError):
    """The server would not do TLS, or its certificate failed the check (or ours, its check): the
    connection is closed and nothing is sent in plain text."""

    ERRNO: ClassVar[int] = errno.EACCES


class TlsSetupError(TransportError):
    """A file named by the TLS options cannot be used (missing, unreadable, not a certificate or key)."""

    ERRNO: ClassVar[int] = errno.EINVAL


def client_context(sec: XprtSec, peer: str) -> ssl.SSLContext:
    """The client's TLS context for ``sec``: TLS 1.3, ALPN "sunrpc", the server's certificate and name
    checked against the trust store, our certificate for mtls. TlsSetupError naming the file
    that cannot be used."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols([TLS_ALPN])
    try:
        if sec.truststore:
            what = f"truststore {sec.truststore}"
            ctx.load_verify_locations(cafile=sec.truststore)
        else:
            what = "the system's trust store"
            ctx.load_default_certs()
        if sec.certificate:
            what = f"certificate {sec.certificate}" + (f" and private_key {sec.private_key}"
                                                         if sec.private_key else "")
            ctx.load_cert_chain(sec.certificate, sec.private_key)
    except OSError as e:
        reason = e.strerror or getattr(e, "reason", None) or str(e)
        raise TlsSetupError(f"TLS: cannot use {what}: {reason}", peer) from None
    return ctx


async def connect_tls(
    host: str,
    port: int,
    server_name: str,
    context: ssl.SSLContext,
    prog: int,
    vers: int,
    timeout: float = 10.0,
    max_record: int = DEFAULT_MAX_RECORD,
) -> TlsTransport:
    """A TCP connection to ``host``:``port``, the AUTH_TLS probe for ``prog``/``vers`` on it, then
    the TLS handshake (the server's certificate must be valid for ``server_name``)."""
    tcp = await TcpTransport.connect(host, port, timeout=timeout, max_record=max_record)
    peer = tcp.peer
    tls: TlsSocket | None = None
    try:
        with trio.move_on_after(timeout) as probing:
            probe = Packer()
            probe.buf += pack_tls_probe(PROBE_XID, prog, vers)
            await tcp.send_call(PROBE_XID, probe)
            reply = await tcp.receive()
        if probing.cancelled_caught:
            raise ConnectTimeout(f"TLS: no answer to the AUTH_TLS probe within {timeout:g} s", peer)
        try:
            refusal = tls_probe_refusal(PROBE_XID, reply)
        except XdrError as e:
            refusal = f"its answer to the AUTH_TLS probe does not decode ({e})"
        if refusal is not None:
            raise TlsRefused(f"TLS refused: the server does not do RPC-with-TLS ({refusal})", peer)
        tls = TlsSocket(tcp.detach(), context, server_name)
        with trio.move_on_after(timeout) as shaking:
            try:
                await tls.handshake()
            except (ssl.SSLError, ssl.CertificateError) as e:
                raise TlsRefused(f"TLS handshake failed: {_why(e, server_name)}", peer) from None
            except OSError as e:
                raise TlsRefused(f"TLS handshake failed: {e.strerror or e}", peer) from None
        if shaking.cancelled_caught:
            raise ConnectTimeout(f"TLS: no handshake within {timeout:g} s", peer)
        alpn = tls.obj.selected_alpn_protocol()
        if alpn not in (None, TLS_ALPN):
            raise TlsRefused(f"TLS: the server chose ALPN {alpn!r}, not {TLS_ALPN!r}", peer)
        transport = TlsTransport(tls, peer, max_record)
        tls = None
        return transport
    except TransportError as e:
        if isinstance(e, ConnectionLost) and tls is None:  # (the server closed at the probe)
            raise TlsRefused("TLS refused: the server closed the connection at the AUTH_TLS probe", peer) from None
        raise
    finally:
        tcp.abort()
        if tls is not None:
            tls.close()


def _why(e: BaseException, server_name: str) -> str:
    """What an ssl failure says, in one line."""
    if isinstance(e, ssl.SSLCertVerificationError):
        msg = e.verify_message or str(e)
        if "mismatch" in msg:
            return f"the server's certificate is not valid for {server_name} ({msg})"
        return f"the server's certificate is not trusted ({msg})"
    if isinstance(e, ssl.SSLEOFError) or (isinstance(e, ssl.SSLError) and "EOF" in (e.reason or "")):
        return "the server closed the connection during the handshake"
    if isinstance(e, ssl.SSLError):
        reason = e.reason or str(e)
        if "ALERT" in reason.upper():
            return f"the server refused the handshake ({reason.lower().replace('_', ' ')})"
        return reason.lower().replace("_", " ")
    return str(e) or "the connection was closed during the handshake"


class TlsSocket:
    """TLS on a non-blocking socket through memory BIOs: what is decrypted goes straight into the
    buffer the caller names (``SSLObject.read`` into it), so a READ's data is not copied after it
    is decrypted; what is sent is encrypted from the caller's buffers.

    Everything that goes out (a record, or what TLS itself answers while reading, such as a key
    update) leaves the outgoing BIO under one lock, so TLS records go out in the order they were
    made."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_name: str) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_hostname=server_name)
        self.send_lock = trio.Lock()
        self.bytes_received = 0  # on the wire (TLS records)
        self.bytes_sent = 0
        self._closed = False

    async def _send_out(self, deadline: float = math.inf) -> None:
        """Send what the outgoing BIO holds (the caller holds ``send_lock``)."""
        out = memoryview(self.outgoing.read())
        while out.nbytes:
            try:
                n = self.sock.send(out)
            except BlockingIOError:
                with trio.move_on_at(deadline):
                    await trio.lowlevel.wait_writable(self.sock)
                    continue
                raise trio.TooSlowError from None
            self.bytes_sent += n
            out = out[n:]

    async def flush(self) -> None:
        if self.outgoing.pending:
            async with self.send_lock:
                await self._send_out()

    async def _fill(self) -> None:
        """More of the peer's TLS records into the incoming BIO (its end, when the peer closed)."""
        while True:
            try:
                data = self.sock.recv(RECEIVE_CHUNK)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)
                continue
            if data:
                self.bytes_received += len(data)
                self.incoming.write(data)
            else:
                self.incoming.write_eof()
            return

    async def handshake(self) -> None:
        while True:
            try:
                self.obj.do_handshake()
            except ssl.SSLWantReadError:
                await self.flush()
                await self._fill()
                continue
            except ssl.SSLError:
                with trio.move_on_after(1):
                    await self.flush()  # (our alert, if any)
                raise
            break
        await self.flush()

    async def read_into(self, view: memoryview) -> int:
        """Decrypt into ``view``: at least one byte, at most all of it; 0 at the peer's close_notify."""
        while True:
            try:
                n = cast(int, self.obj.read(view.nbytes, view))  # (with a buffer: the count)
            except ssl.SSLWantReadError:
                await self.flush()
                await self._fill()
                continue
            except ssl.SSLZeroReturnError:
                return 0
            if self.outgoing.pending:
                await self.flush()
            return n

    async def write(self, pieces: list[memoryview | bytearray], deadline: float) -> None:
        """Encrypt ``pieces`` (the caller holds ``send_lock``) and send them by ``deadline``
        (trio.TooSlowError when it passes)."""
        for piece in pieces:
            self.obj.write(piece)
        await self._send_out(deadline)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()


class TlsTransport(RecordStream):
    """One RPC-with-TLS connection: record-marked RPC messages inside a TLS session."""

    kind: ClassVar[str] = "tcp"  # (netid tcp: the same addresses and ports; the security is the connection's)

    def __init__(self, tls: TlsSocket, peer: str, max_record: int = DEFAULT_MAX_RECORD) -> None:
        self.tls = tls
        self.peer = peer
        self.max_record = max_record
        self._closed = False
        self._stage = memoryview(bytearray(STAGE_READ))
        self._staged = 0  # decrypted bytes received ahead into _stage, from _stage_at
        self._stage_at = 0
        self.pool = BufferPool()
        self._refused: TlsRefused | None = None  # the server's alert, once either side met it
        self.bytes_sent = 0
        self.bytes_received = 0
        self.bulk_bytes_sent = 0  # payload bytes encrypted from the caller's buffer, by reference

    def _lost(self, e: BaseException, what: str) -> TransportError:
        """The error of a connection TLS or the socket broke. In TLS 1.3 a server checks our
        certificate after our side of the handshake is done: its refusal comes as an alert in place
        of the first reply, and whichever of sending and receiving meets it first, both report it."""
        if self._refused is None and isinstance(e, ssl.SSLError) and "ALERT" in (e.reason or "").upper():
            self._refused = TlsRefused(f"TLS handshake failed: {_why(e, '')}", self.peer)
        if self._refused is not None:
            return self._refused
        if isinstance(e, trio.ClosedResourceError):
            return ConnectionLost("connection closed", self.peer)
        if isinstance(e, ssl.SSLEOFError):
            return ConnectionLost("closed by the server", self.peer)
        if isinstance(e, OSError) and e.strerror:
            return ConnectionLost(f"{what} ({e.strerror})", self.peer)
        return ConnectionLost(f"{what} ({e})", self.peer)

    @property
    def tls_version(self) -> str | None:
        return self.tls.obj.version()

    # -- sending --------------------------------------------------------------------------------------
    async def _send_record(self, msg: Packer, deadline: float = math.inf) -> None:
        segs = [memoryview(s).cast("B") for s in msg.segments()]
        total = sum(s.nbytes for s in segs)
        if total > RM_LENGTH_MASK:
            raise ValueError(f"RPC message of {total} bytes is too large for one record fragment")
        # the mark and the short segments go joined, each payload from its own buffer
        pieces: list[memoryview | bytearray] = []
        small = bytearray(_MARK.pack(RM_LAST_FRAGMENT | total))
        for seg in segs:
            if seg.nbytes < COALESCE:
                small += seg
            else:
                if small:
                    pieces.append(small)
                    small = bytearray()
                pieces.append(seg)
        if small:
            pieces.append(small)
        lock = self.tls.send_lock
        held = False
        with trio.move_on_at(deadline):
            await lock.acquire()
            held = True
        if not held:
            raise SendTimeout("no turn to send before the call's deadline", self.peer)
        try:
            if self._closed:
                raise ConnectionLost("connection is closed", self.peer)
            try:
                await self.tls.write(pieces, deadline)
            except trio.TooSlowError:
                self.abort()  # (a record left half sent breaks the stream's framing)
                raise SendTimeout("the server stopped reading before the call's deadline", self.peer) from None
            except (ssl.SSLError, OSError, trio.ClosedResourceError) as e:
                self.abort()
                raise self._lost(e, "connection lost while sending") from None
            except BaseException:
                self.abort()  # (cancelled: what was encrypted may be half sent)
                raise
        finally:
            lock.release()
        self.bytes_sent += total + 4
        self.bulk_bytes_sent += sum(seg.data.nbytes for seg in msg.bulk_segments)

    async def send_call(
        self, xid: int, msg: Packer, hints: ReplyHints = NO_HINTS, deadline: float = math.inf
    ) -> None:
        await self._send_record(msg, deadline)

    async def send_reply(self, xid: int, msg: Packer) -> None:
        await self._send_record(msg)

    # -- receiving ------------------------------------------------------------------------------------
    async def _read_into(self, view: memoryview, partial: bool) -> int:
        try:
            n = await self.tls.read_into(view)
        except (ssl.SSLError, OSError, trio.ClosedResourceError) as e:
            raise self._lost(e, "connection lost") from None
        if n == 0:
            raise ConnectionLost("closed by the server" + (" in the middle of a record" if partial else ""),
                                 self.peer)
        self.bytes_received += n
        return n

    async def _stage_mark(self, partial: bool) -> int:
        """The next record mark, from the staging buffer (filled by a read of up to STAGE_READ
        decrypted bytes when it holds less than a mark)."""
        stage, at, staged = self._stage, self._stage_at, self._staged
        if staged < 4:
            if staged:
                stage[:staged] = stage[at : at + staged]
            while staged < 4:
                staged += await self._read_into(stage[staged:], partial or staged > 0)
            at = 0
        mark: int = _MARK.unpack_from(stage, at)[0]
        self._stage_at, self._staged = at + 4, staged - 4
        return mark

    async def receive(self) -> Unpacker:
        # Each fragment is decrypted into a buffer of exactly its size; what came with its mark
        # (the head of a large one, all of a small one) is copied there from the staging buffer.
        if self._closed:
            raise ConnectionLost("connection is closed", self.peer)
        frags: list[memoryview] = []
        total = 0
        while True:
            mark = await self._stage_mark(bool(frags))
            n = mark & RM_LENGTH_MASK
            total += n
            if total > self.max_record:
                raise self.too_large(total)
            frag, got = self.fragment(n)
            while got < n:
                got += await self._read_into(frag[got:], True)
            frags.append(frag)
            if mark & RM_LAST_FRAGMENT:
                break
        await trio.lowlevel.checkpoint()
        if len(frags) == 1:
            return Unpacker(frags[0])
        return Unpacker(b"".join(frags))

    def abort(self) -> None:
        """Close at once (no close_notify: the peer sees the TCP connection end)."""
        if not self._closed:
            self._closed = True
            self.tls.close()


__all__ = ["TLS_OPTIONS", "XPRTSEC_MODES", "TlsRefused", "TlsSetupError", "TlsSocket", "TlsTransport", "XprtSec",
           "XprtSecError", "client_context", "connect_tls"]
