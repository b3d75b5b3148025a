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

Sending passes the caller's WRITE payload to the TLS layer by reference (it is encrypted from the
caller's buffer); receiving decrypts into TLS's own chunks, which are joined into the record's
buffer: one copy that plain TCP does not make, and no splice (the socket's bytes are ciphertext).
"""

from __future__ import annotations

import errno
import math
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

import trio

from .._proto.rpc import RM_LAST_FRAGMENT, RM_LENGTH_MASK, TLS_ALPN, pack_tls_probe, tls_probe_refusal
from .._xdr import Packer, Unpacker, XdrError
from .base import (
    NO_HINTS,
    ConnectionLost,
    ConnectTimeout,
    ProtocolViolation,
    ReplyHints,
    SendTimeout,
    Transport,
    TransportError,
)
from .tcp import DEFAULT_MAX_RECORD, TcpTransport

_MARK: Final = struct.Struct(">I")
XPRTSEC_MODES: Final = ("none", "tls", "mtls")
#: the URL and mount options of RPC-with-TLS
TLS_OPTIONS: Final = ("xprtsec", "truststore", "certificate", "private_key")
RECEIVE_CHUNK: Final = 64 * 1024  # asked of TLS when nothing of the next record is known yet
COALESCE: Final = 4096  # message segments shorter than this are joined before they are encrypted
PROBE_XID: Final = 0x544C5331  # the XID of the AUTH_TLS probe (any will do: it is the connection's first call)


class TlsRefused(TransportError):
    """The server would not do TLS, or its certificate failed the check (or ours, its check): the
    connection is closed and nothing is sent in plain text."""

    ERRNO: ClassVar[int] = errno.EACCES


class TlsSetupError(TransportError):
    """A file named by the TLS options cannot be used (missing, unreadable, not a certificate or key)."""

    ERRNO: ClassVar[int] = errno.EINVAL


class XprtSecError(ValueError):
    """The TLS options do not make sense together (``xprtsec=mtls`` with no certificate, ...)."""


@dataclass(frozen=True, slots=True)
class XprtSec:
    """What a connection's transport security is to be (nfs(5)'s ``xprtsec=``) and the files it uses."""

    mode: str = "none"
    truststore: str | None = None
    certificate: str | None = None
    private_key: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str | None]) -> XprtSec:
        """From URL or mount options (:data:`TLS_OPTIONS`); XprtSecError for what does not fit."""
        mode = options.get("xprtsec") or "none"
        if mode not in XPRTSEC_MODES:
            raise XprtSecError(f"xprtsec={mode}: use one of {', '.join(XPRTSEC_MODES)}")
        files = {k: options.get(k) for k in ("truststore", "certificate", "private_key")}
        for k, v in files.items():
            if v == "":
                raise XprtSecError(f"{k} needs a file ({k}=/path/to/file.pem)")
        sec = cls(mode, files["truststore"], files["certificate"], files["private_key"])
        if mode == "mtls" and not sec.certificate:
            raise XprtSecError("xprtsec=mtls needs the client's certificate= (and private_key= unless it holds the key)")
        if mode != "mtls" and (sec.certificate or sec.private_key):
            raise XprtSecError(f"certificate= and private_key= are for xprtsec=mtls, not xprtsec={mode}")
        if mode == "none" and sec.truststore:
            raise XprtSecError("truststore= is for xprtsec=tls or mtls")
        return sec

    @property
    def on(self) -> bool:
        return self.mode != "none"

    def context(self, peer: str) -> ssl.SSLContext:
        """The client's TLS context: TLS 1.3, ALPN "sunrpc", the server's certificate and name
        checked against the trust store, our certificate for mtls. TlsSetupError naming the file
        that cannot be used."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.set_alpn_protocols([TLS_ALPN])
        try:
            if self.truststore:
                what = f"truststore {self.truststore}"
                ctx.load_verify_locations(cafile=self.truststore)
            else:
                what = "the system's trust store"
                ctx.load_default_certs()
            if self.certificate:
                what = f"certificate {self.certificate}" + (f" and private_key {self.private_key}"
                                                             if self.private_key else "")
                ctx.load_cert_chain(self.certificate, self.private_key)
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
    sock: trio.socket.SocketType | None = None
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
        sock = trio.socket.from_stdlib_socket(tcp.detach())
        ssl_stream = trio.SSLStream(trio.SocketStream(sock), context, server_hostname=server_name)
        with trio.move_on_after(timeout) as shaking:
            try:
                await ssl_stream.do_handshake()
            except trio.BrokenResourceError as e:
                raise TlsRefused(f"TLS handshake failed: {_why(e, server_name)}", peer) from None
        if shaking.cancelled_caught:
            raise ConnectTimeout(f"TLS: no handshake within {timeout:g} s", peer)
        alpn = ssl_stream.selected_alpn_protocol()
        if alpn not in (None, TLS_ALPN):
            raise TlsRefused(f"TLS: the server chose ALPN {alpn!r}, not {TLS_ALPN!r}", peer)
        transport = TlsTransport(ssl_stream, peer, max_record)
        sock = None
        return transport
    except TransportError as e:
        if isinstance(e, ConnectionLost) and sock is None:  # (the server closed at the probe)
            raise TlsRefused("TLS refused: the server closed the connection at the AUTH_TLS probe", peer) from None
        raise
    finally:
        tcp.abort()
        if sock is not None:
            sock.close()


def _why(e: BaseException, server_name: str) -> str:
    """What an ssl failure inside trio's BrokenResourceError says, in one line."""
    cause = e.__cause__ or e.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        msg = cause.verify_message or str(cause)
        if "mismatch" in msg:
            return f"the server's certificate is not valid for {server_name} ({msg})"
        return f"the server's certificate is not trusted ({msg})"
    if isinstance(cause, ssl.SSLEOFError) or (isinstance(cause, ssl.SSLError) and "EOF" in (cause.reason or "")):
        return "the server closed the connection during the handshake"
    if isinstance(cause, ssl.SSLError):
        reason = cause.reason or str(cause)
        if "ALERT" in reason.upper():
            return f"the server refused the handshake ({reason.lower().replace('_', ' ')})"
        return reason.lower().replace("_", " ")
    if isinstance(cause, OSError):
        return cause.strerror or str(cause)
    return str(e) or "the connection was closed during the handshake"


class TlsTransport(Transport):
    """One RPC-with-TLS connection: record-marked RPC messages inside a TLS session."""

    kind: ClassVar[str] = "tcp"  # (netid tcp: the same addresses and ports; the security is the connection's)

    def __init__(self, stream: trio.SSLStream[trio.SocketStream], peer: str,
                 max_record: int = DEFAULT_MAX_RECORD) -> None:
        self.stream = stream
        self.peer = peer
        self.max_record = max_record
        self._send_lock = trio.Lock()
        self._closed = False
        self._pending = memoryview(b"")  # decrypted bytes received ahead of the record asked for
        self._refused: TlsRefused | None = None  # the server's alert, once either side met it
        self.bytes_sent = 0
        self.bytes_received = 0
        self.bulk_bytes_sent = 0  # payload bytes encrypted from the caller's buffer, by reference

    def _lost(self, e: trio.BrokenResourceError | trio.ClosedResourceError, what: str) -> TransportError:
        """The error of a connection TLS broke. In TLS 1.3 a server checks our certificate after our
        side of the handshake is done: its refusal comes as an alert in place of the first reply,
        and whichever of sending and receiving meets it first, both report it."""
        cause = e.__cause__
        if self._refused is None and isinstance(cause, ssl.SSLError) and "ALERT" in (cause.reason or "").upper():
            self._refused = TlsRefused(f"TLS handshake failed: {_why(e, '')}", self.peer)
        if self._refused is not None:
            return self._refused
        if isinstance(e, trio.ClosedResourceError):
            return ConnectionLost("connection closed", self.peer)
        return ConnectionLost(f"{what} ({cause or 'broken'})", self.peer)

    @property
    def tls_version(self) -> str | None:
        return self.stream.version()

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
        held = False
        with trio.move_on_at(deadline):
            await self._send_lock.acquire()
            held = True
        if not held:
            raise SendTimeout("no turn to send before the call's deadline", self.peer)
        started = False
        try:
            if self._closed:
                raise ConnectionLost("connection is closed", self.peer)
            with trio.move_on_at(deadline) as sending:
                for piece in pieces:
                    started = True
                    await self.stream.send_all(piece)
            if sending.cancelled_caught:
                self.abort()  # (a record left half sent breaks the stream's framing)
                raise SendTimeout("the server stopped reading before the call's deadline", self.peer)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
            self.abort()
            raise self._lost(e, "connection lost while sending") from None
        except BaseException:
            if started:
                self.abort()
            raise
        finally:
            self._send_lock.release()
        self.bytes_sent += total + 4
        self.bulk_bytes_sent += sum(seg.data.nbytes for seg in msg.bulk_segments)

    async def send_call(
        self, xid: int, msg: Packer, hints: ReplyHints = NO_HINTS, deadline: float = math.inf
    ) -> None:
        await self._send_record(msg, deadline)

    async def send_reply(self, xid: int, msg: Packer) -> None:
        await self._send_record(msg)

    # -- receiving ------------------------------------------------------------------------------------
    async def _chunk(self, want: int, partial: bool) -> memoryview:
        """The next decrypted bytes (at most ``want``; never none)."""
        try:
            data = await self.stream.receive_some(want)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise self._lost(e, "connection lost") from None
        if not data:
            raise ConnectionLost("closed by the server" + (" in the middle of a record" if partial else ""),
                                 self.peer)
        self.bytes_received += len(data)
        return memoryview(data)

    async def _take(self, n: int, partial: bool) -> memoryview:
        """The next ``n`` bytes of the stream: a view of what came already when it holds them all,
        else a buffer of their own filled from TLS."""
        pending = self._pending
        if pending.nbytes >= n:
            self._pending = pending[n:]
            return pending[:n]
        buf = memoryview(bytearray(n))
        got = pending.nbytes
        buf[:got] = pending
        self._pending = memoryview(b"")
        while got < n:
            chunk = await self._chunk(n - got, partial or got > 0)
            k = min(chunk.nbytes, n - got)
            buf[got : got + k] = chunk[:k]
            if k < chunk.nbytes:
                self._pending = chunk[k:]
            got += k
        return buf

    async def receive(self) -> Unpacker:
        if self._closed:
            raise ConnectionLost("connection is closed", self.peer)
        frags: list[memoryview] = []
        total = 0
        while True:
            if self._pending.nbytes < 4:
                # (a small reply and its mark come in one TLS record: ask for more than the mark)
                head = await self._chunk(RECEIVE_CHUNK, bool(frags) or self._pending.nbytes > 0)
                self._pending = memoryview(bytes(self._pending) + bytes(head)) if self._pending.nbytes else head
                continue
            mark: int = _MARK.unpack_from(self._pending)[0]
            self._pending = self._pending[4:]
            n = mark & RM_LENGTH_MASK
            total += n
            if total > self.max_record:
                raise ProtocolViolation(
                    f"record of {total} bytes exceeds the limit of {self.max_record} (not an RPC server?)",
                    self.peer,
                )
            frags.append(await self._take(n, True))
            if mark & RM_LAST_FRAGMENT:
                break
        await trio.lowlevel.checkpoint()
        if len(frags) == 1:
            return Unpacker(frags[0])
        return Unpacker(b"".join(frags))

    def limit_records(self, size: int) -> None:
        self.max_record = size

    async def aclose(self) -> None:
        self.abort()
        await trio.lowlevel.checkpoint()

    def abort(self) -> None:
        """Close at once (no close_notify: the peer sees the TCP connection end)."""
        if not self._closed:
            self._closed = True
            sock = self.stream.transport_stream.socket
            trio.lowlevel.notify_closing(sock)
            sock.close()


__all__ = ["TLS_OPTIONS", "XPRTSEC_MODES", "TlsRefused", "TlsSetupError", "TlsTransport", "XprtSec", "XprtSecError",
           "connect_tls"]
