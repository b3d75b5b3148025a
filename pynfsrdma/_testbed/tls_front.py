"""A TLS front for a plain NFS server: RPC-with-TLS (RFC 9289) as a server does it, relayed to a
server that has none (NFS-Ganesha 4.3 has none).

Each connection's first record must be the AUTH_TLS probe (a NULL call whose credential is
AUTH_TLS): the front answers "STARTTLS", does the TLS 1.3 handshake (ALPN "sunrpc"; with a trust
store for clients, only a client with a certificate it vouches for gets through: mutual TLS), and
then relays the decrypted stream to the server, and the server's replies back inside TLS. A
connection that starts with anything else is a plain one: it is counted and closed (or, with
``allow_plain``, relayed as it is). Every connection is recorded (:class:`FrontConnection`), so a
test can show that a client made no plain connection at all.

For the negative cases the front can answer the probe as a server without TLS would
(``answer="autherror"``: AUTH_ERROR; ``answer="accept"``: an accepted reply with no STARTTLS
verifier). :func:`make_certificates` makes a CA, the front's certificate and a client's with
openssl(1), in a directory of the caller's.
"""

from __future__ import annotations

import ssl
import struct
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

from .._proto.rpc import (
    AUTH_ERROR,
    AUTH_TLS,
    CALL,
    MSG_DENIED,
    NULL_AUTH,
    NULLPROC,
    REPLY,
    RM_LAST_FRAGMENT,
    RM_LENGTH_MASK,
    TLS_ALPN,
    auth_stat,
    decode_call_body,
    opaque_auth,
    pack_accepted_reply_header,
    pack_call_header,
    pack_starttls_reply,
)
from .._xdr import Packer, Unpacker, XdrError
from .listener import RelayEnds, accept_until_cancelled
from .record_proxy import frame, records

__all__ = ["ANSWERS", "FrontConnection", "ServerTls", "TlsFront", "make_certificates"]

_MARK: Final = struct.Struct(">I")
RELAY_CHUNK: Final = 256 * 1024
_NONE_CRED: Final = opaque_auth.XDR.encode(NULL_AUTH)
ANSWERS: Final = ("starttls", "autherror", "accept")  # what the front answers the AUTH_TLS probe with
MAX_PROBE: Final = 64 * 1024  # a first record longer than this is not a probe
LINGER: Final = 2.0  # seconds a connection whose handshake failed is read from before it is closed


@dataclass(slots=True)
class FrontConnection:
    """One connection the front accepted, and what it was."""

    peer: str
    kind: str = "empty"  # "tls" (probe, handshake, relayed), "plain" (a first record that is no probe),
    # "refused" (the probe was answered with no STARTTLS), "failed" (the handshake failed), "empty"
    tls_version: str | None = None
    alpn: str | None = None
    client_subject: str | None = None  # the client certificate's subject (mutual TLS)
    error: str | None = None
    bytes_to_server: int = 0
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    inject: Callable[[bytes], Awaitable[None]] | None = None  # sends a record to the client, while relayed


async def _receive_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes | None:
    """``n`` bytes (no more are taken from the stream), or None at its end."""
    buf = bytearray()
    while len(buf) < n:
        data = await stream.receive_some(n - len(buf))
        if not data:
            return None
        buf += data
    return bytes(buf)


async def _first_record(stream: trio.SocketStream) -> bytes | None:
    """The connection's first record (one fragment), read without taking anything after it."""
    mark = await _receive_exactly(stream, 4)
    if mark is None:
        return None
    (m,) = _MARK.unpack(mark)
    n = m & RM_LENGTH_MASK
    if not m & RM_LAST_FRAGMENT or n > MAX_PROBE:
        return mark  # (not a probe: what came is relayed or dropped as plain)
    body = await _receive_exactly(stream, n)
    return None if body is None else mark + body


def _probe_xid(record: bytes) -> int | None:
    """The XID of an AUTH_TLS probe (``record`` with its mark), or None for any other record."""
    try:
        u = Unpacker(memoryview(record)[4:])
        xid = u.uint32()
        if u.uint32() != CALL:
            return None
        body = decode_call_body(u)
    except XdrError:
        return None
    return xid if body.proc == NULLPROC and body.cred.flavor == AUTH_TLS else None


class ServerTls:
    """The server's side of TLS on a connection, over memory BIOs: unlike trio.SSLStream it sends
    the alert a failed handshake ends with (a client refused for its certificate learns why, as
    from a real server)."""

    def __init__(self, stream: trio.SocketStream, context: ssl.SSLContext) -> None:
        self.stream = stream
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self._send_lock = trio.Lock()

    async def _flush(self) -> None:
        async with self._send_lock:  # (taken before reading the BIO: what goes out keeps its order)
            data = self.outgoing.read()
            if data:
                await self.stream.send_all(data)

    async def _feed(self) -> bool:
        data = await self.stream.receive_some(RELAY_CHUNK)
        if not data:
            self.incoming.write_eof()
            return False
        self.incoming.write(data)
        return True

    async def handshake(self) -> None:
        while True:
            try:
                self.obj.do_handshake()
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._feed():
                    raise ConnectionError("the client closed the connection during the handshake") from None
                continue
            except ssl.SSLError:
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await self._flush()  # (the alert)
                raise
            await self._flush()
            return

    async def receive_some(self, max_bytes: int) -> bytes:
        while True:
            try:
                data = self.obj.read(max_bytes)
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._feed():
                    return b""
                continue
            except ssl.SSLZeroReturnError:
                return b""
            await self._flush()
            return data

    async def send_all(self, data: bytes) -> None:
        self.obj.write(data)
        await self._flush()


class TlsFront(RelayEnds):
    """RPC-with-TLS on ``listen_host:listen_port`` (0: a free port), relayed in plain text to the
    server at ``target_host:target_port``. ``certificate``/``private_key``: the front's (PEM);
    ``client_truststore``: when given, clients must show a certificate it vouches for (mtls)."""

    def __init__(self, listen_host: str, listen_port: int, target_host: str, target_port: int, *,
                 certificate: str | Path, private_key: str | Path, client_truststore: str | Path | None = None,
                 answer: str = "starttls", allow_plain: bool = False) -> None:
        if answer not in ANSWERS:
            raise ValueError(f"answer={answer}: one of {', '.join(ANSWERS)}")
        super().__init__(listen_host, listen_port, target_host, target_port)
        self.answer = answer
        self.allow_plain = allow_plain
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.set_alpn_protocols([TLS_ALPN])
        ctx.load_cert_chain(str(certificate), str(private_key))
        if client_truststore is not None:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(cafile=str(client_truststore))
        self.context = ctx
        self.connections: list[FrontConnection] = []
        self.callbacks_answered = 0
        self._callbacks: dict[int, _Reply] = {}
        self._next_xid = 0x43420001
        self._scope: trio.CancelScope | None = None

    def kinds(self) -> list[str]:
        """The kind of every connection so far, in order (``tls``, ``plain``, ...)."""
        return [c.kind for c in self.connections]

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        listener = await self.listen()
        self._scope = trio.CancelScope()
        await accept_until_cancelled(listener, self._scope, self._accepted, task_status, self)

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def cut(self) -> int:
        """End every open connection now (the client sees its connection reset); how many."""
        live = [c for c in self.connections if not c.scope.cancel_called and c.kind in ("tls", "plain")]
        for c in live:
            c.scope.cancel()
        return len(live)

    def _accepted(self, client: trio.SocketStream, nursery: trio.Nursery) -> None:
        host, port = client.socket.getpeername()[:2]
        conn = FrontConnection(f"{host}:{port}")
        self.connections.append(conn)
        nursery.start_soon(self._serve, client, conn)

    async def _serve(self, client: trio.SocketStream, conn: FrontConnection) -> None:
        with conn.scope:
            try:
                await self._serve_one(client, conn)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError) as e:
                conn.error = conn.error or str(e.__cause__ or e)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(client)

    async def _serve_one(self, client: trio.SocketStream, conn: FrontConnection) -> None:
        first = await _first_record(client)
        if first is None:
            return
        xid = _probe_xid(first)
        if xid is None:
            conn.kind = "plain"
            if self.allow_plain:
                await self._relay(client, first, conn)
            return
        reply = Packer()
        if self.answer == "starttls":
            pack_starttls_reply(reply, xid)
        elif self.answer == "accept":
            pack_accepted_reply_header(reply, xid)
        else:
            reply.uint32(xid)
            reply.uint32(REPLY)
            reply.uint32(MSG_DENIED)
            reply.uint32(AUTH_ERROR)
            reply.uint32(auth_stat.AUTH_BADCRED)
        if self.answer != "starttls":
            conn.kind = "refused"
        await client.send_all(frame(bytes(reply.buf)))
        if self.answer != "starttls":
            return
        tls = ServerTls(client, self.context)
        try:
            await tls.handshake()
        except (ssl.SSLError, ConnectionError) as e:
            conn.kind = "failed"
            conn.error = str(e)
            # (what the client sent meanwhile is read, not left unread: closing on it would reset the
            # connection, and the client might never see the alert)
            with trio.move_on_after(LINGER):
                while await client.receive_some(RELAY_CHUNK):
                    pass
            return
        conn.kind = "tls"
        conn.tls_version = tls.obj.version()
        conn.alpn = tls.obj.selected_alpn_protocol()
        peer_cert = tls.obj.getpeercert()
        if peer_cert:
            conn.client_subject = ",".join("=".join(kv) for rdn in peer_cert.get("subject", ()) for kv in rdn)
        await self._relay(tls, b"", conn)

    async def _relay(self, client: trio.abc.Stream | ServerTls, first: bytes, conn: FrontConnection) -> None:
        """Relay record by record (whole records, so that a callback can go in between them)."""
        server = await trio.open_tcp_stream(self.target_host, self.target_port)
        lock = trio.Lock()  # (one record at a time to the client: the server's, or a callback)

        async def inject(record: bytes) -> None:
            async with lock:
                await client.send_all(frame(record))

        try:
            async with trio.open_nursery() as nursery:

                async def to_server() -> None:
                    async for record in records(_Prefixed(client, first)):  # type: ignore[arg-type]
                        conn.bytes_to_server += len(record) + 4
                        xid = _reply_xid(record)
                        waiter = self._callbacks.pop(xid, None) if xid is not None else None
                        if waiter is not None:
                            waiter.set(record)
                        else:
                            await server.send_all(frame(record))

                async def to_client() -> None:
                    async for record in records(server):
                        async with lock:
                            await client.send_all(frame(record))

                async def pump(direction: Callable[[], Awaitable[None]]) -> None:
                    try:
                        await direction()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError):
                        pass
                    nursery.cancel_scope.cancel()

                conn.inject = inject
                nursery.start_soon(pump, to_server)
                nursery.start_soon(pump, to_client)
        finally:
            conn.inject = None
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(server)

    async def callback(self, prog: int, vers: int, proc: int = NULLPROC, timeout: float = 10.0) -> bytes:
        """Call the client back (the server's side of the backchannel) on the newest relayed
        connection: a call of ``prog``/``vers``/``proc`` with no arguments; the client's reply record."""
        live = [c for c in self.connections if c.inject is not None]
        if not live:
            raise RuntimeError("no relayed connection to call back on")
        xid = self._next_xid
        self._next_xid += 1
        waiter: _Reply = _Reply()
        self._callbacks[xid] = waiter
        call = Packer()
        pack_call_header(call, xid, prog, vers, proc, _NONE_CRED)
        inject = live[-1].inject
        assert inject is not None
        await inject(bytes(call.buf))
        with trio.fail_after(timeout):
            await waiter.event.wait()
        self.callbacks_answered += 1
        return waiter.record


class _Reply:
    def __init__(self) -> None:
        self.event = trio.Event()
        self.record = b""

    def set(self, record: bytes) -> None:
        self.record = record
        self.event.set()


def _reply_xid(record: bytes) -> int | None:
    """The XID of a reply record (None for a call, or a record too short)."""
    if len(record) < 8:
        return None
    xid, mtype = struct.unpack_from(">II", record)
    return xid if mtype == REPLY else None


class _Prefixed:
    """A stream whose first bytes are ``prefix`` (what was read of it already), then the stream's own."""

    def __init__(self, stream: Any, prefix: bytes) -> None:
        self.stream = stream
        self.prefix = prefix

    async def receive_some(self, max_bytes: int) -> bytes:
        if self.prefix:
            data, self.prefix = self.prefix, b""
            return data
        return bytes(await self.stream.receive_some(max_bytes))


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _issue(where: Path, name: str, subject: str, ca: str, ext: str) -> None:
    """``name``.pem and ``name``.key: a P-256 key and a certificate for ``subject`` signed by CA ``ca``."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
             "-subj", subject, "-out", f"{name}.csr", cwd=where)
    (where / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=where)


def make_certificates(where: Path, server_names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> dict[str, Path]:
    """Certificates for tests, made with openssl(1) in ``where``: a CA (``ca``), the server's
    (``server``: valid for ``server_names``, IP addresses and DNS names), a client's (``client``),
    and from another CA (``other-ca``) a server certificate (``rogue``) and a client one
    (``stranger``) that the first CA does not vouch for; and a server certificate of the right CA
    for another name only (``misnamed``: wrong.invalid). Returns each name's ``.pem`` (and
    ``NAME.key`` the key), by name."""
    where.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN=pynfsrdma test {ca}",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 cwd=where)
    sans = ",".join(f"IP:{n}" if n.replace(".", "").isdigit() or ":" in n else f"DNS:{n}" for n in server_names)
    server_ext = f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n"
    client_ext = "extendedKeyUsage=clientAuth\n"
    _issue(where, "server", "/CN=nfs server", "ca", server_ext)
    _issue(where, "misnamed", "/CN=wrong.invalid", "ca", "subjectAltName=DNS:wrong.invalid\nextendedKeyUsage=serverAuth\n")
    _issue(where, "client", "/CN=nfs client", "ca", client_ext)
    _issue(where, "rogue", "/CN=nfs server", "other-ca", server_ext)
    _issue(where, "stranger", "/CN=nfs stranger", "other-ca", client_ext)
    names = ("ca", "other-ca", "server", "misnamed", "client", "rogue", "stranger")
    out = {n: where / f"{n}.pem" for n in names}
    out.update({f"{n}.key": where / f"{n}.key" for n in names})
    return out
