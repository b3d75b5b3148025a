"""RPC-with-TLS (RFC 9289) through the path API, against the real NFS-Ganesha behind the testbed's TLS
front (NFS-Ganesha 4.3 has no TLS of its own):

- xprtsec=tls and xprtsec=mtls carry a whole round (write, read back, list) with every connection
  under TLS 1.3 with ALPN "sunrpc", and the data lands on the server;
- every connection of the session is a TLS one: a trunked second address, a connection cut and made
  again; the front counts each connection the client makes, and under xprtsec=tls none is plain
  (under xprtsec=none the same count says plain: the count can tell);
- a server that refuses TLS (the real Ganesha answers the AUTH_TLS probe with AUTH_ERROR; a front
  that answers with no STARTTLS), an untrusted certificate, a certificate for another name, mtls
  without a certificate or with one the server does not trust, a trust store that is not there:
  each is one line naming the server and what failed, and nothing but the probe reached the server;
- the backchannel rides the TLS connection: a callback sent inside TLS is answered inside TLS;
- proto=rdma with xprtsec=tls is refused before anything is sent.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from tls_support import RunningFront, tls_query

from pynfsrdma._client.api import Client
from pynfsrdma._client.url import URLError
from pynfsrdma._proto import rpc
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._transport.tls import TlsTransport
from pynfsrdma._xdr import Packer, Unpacker

Front = Callable[..., RunningFront]


def transports(nfs: Client) -> list[object]:
    """The transport of every connected path of the client's session."""
    return [p.rpc.transport for p in nfs.clientid.paths.paths if p.rpc is not None]


async def round_trip(url: str, where: ExportPath, name: str = "f") -> Client:
    data = os.urandom(3 * (1 << 20) + 321)  # several READs and WRITEs of 1 MiB
    async with Client.connect(url) as nfs:
        await nfs.write_file(f"/{name}", data)
        assert await nfs.read_file(f"/{name}") == data
        assert name in await nfs.listdir("/")
        kinds = transports(nfs)
        assert kinds and all(isinstance(t, TlsTransport) for t in kinds), kinds
        assert all(t.tls_version == "TLSv1.3" for t in kinds if isinstance(t, TlsTransport))
    assert (where.local / name).read_bytes() == data
    return nfs


async def test_tls_round_trip(ganesha: Ganesha, export_path: ExportPath, tls_front: Front,
                              tls_certs: dict[str, Path]) -> None:
    front = tls_front(ganesha)
    await round_trip(f"nfs://127.0.0.1:{front.port}{export_path.remote}?{tls_query(tls_certs)}", export_path)
    conns = front.connections
    assert [c.kind for c in conns] == ["tls"]
    assert conns[0].tls_version == "TLSv1.3" and conns[0].alpn == "sunrpc"
    assert conns[0].client_subject is None and conns[0].bytes_to_server > 3 * (1 << 20)


async def test_mtls_round_trip_shows_the_client_certificate(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Front, tls_certs: dict[str, Path]
) -> None:
    front = tls_front(ganesha, client_ca="ca")
    url = f"nfs://127.0.0.1:{front.port}{export_path.remote}?{tls_query(tls_certs, 'mtls', client='client')}"
    await round_trip(url, export_path)
    assert front.kinds() == ["tls"]
    assert front.connections[0].client_subject == "commonName=nfs client"


async def test_the_backchannel_rides_the_tls_connection(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Front, tls_certs: dict[str, Path]
) -> None:
    # (NFS-Ganesha 4.3 calls back only for delegations, which its VFS backend never grants: the
    # front calls the client back itself, inside TLS, as a server's backchannel does in NFSv4.1)
    front = tls_front(ganesha)
    async with Client.connect(f"nfs://127.0.0.1:{front.port}{export_path.remote}?{tls_query(tls_certs)}") as nfs:
        reply = await trio.to_thread.run_sync(front.callback, c.CB_PROGRAM, c.NFS_CB, c.CB_NULL)
        u = Unpacker(memoryview(reply))
        assert rpc.read_to_results(u), "CB_NULL answered with SUCCESS"
        assert nfs.clientid.backchannel.calls == 1
        await nfs.write_file("/after-callback", b"still fine")
    assert front.kinds() == ["tls"]
    assert (export_path.local / "after-callback").read_bytes() == b"still fine"


async def test_connect_arguments_say_the_same_as_the_url(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Front, tls_certs: dict[str, Path]
) -> None:
    front = tls_front(ganesha, client_ca="ca")
    async with Client.connect(f"nfs://127.0.0.1:{front.port}{export_path.remote}", xprtsec="mtls",
                              truststore=str(tls_certs["ca"]), certificate=str(tls_certs["client"]),
                              private_key=str(tls_certs["client.key"])) as nfs:
        await nfs.write_file("/g", b"by arguments")
    assert (export_path.local / "g").read_bytes() == b"by arguments"
    assert front.kinds() == ["tls"]


async def test_trunked_paths_and_a_cut_connection_are_tls_and_nothing_is_plain(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Front, tls_certs: dict[str, Path]
) -> None:
    first = tls_front(ganesha)
    second = tls_front(ganesha, listen_host="127.0.0.2")
    url = (f"nfs://127.0.0.1:{first.port}{export_path.remote}?{tls_query(tls_certs)}"
           f"&addrs=127.0.0.2:{second.port}&notrunkdiscovery")
    data = os.urandom(8 * (1 << 20))
    async with Client.connect(url) as nfs:
        with trio.fail_after(20):
            while len([p for p in nfs.clientid.paths.paths if p.state.value == "up"]) < 2:
                await trio.sleep(0.05)
        await nfs.write_file("/before", data)
        cut = first.cut() + second.cut()
        assert cut == 2
        await nfs.write_file("/after", data)  # (on connections made again, through TLS again)
        assert await nfs.read_file("/after") == data
        assert all(isinstance(t, TlsTransport) for t in transports(nfs))
        assert sum(p.connects for p in nfs.clientid.paths.paths) >= 3
        assert [p["tls"] for p in nfs.stats()["paths"]] == ["TLSv1.3", "TLSv1.3"]  # (pynfsrdma paths --json)
    assert (export_path.local / "after").read_bytes() == data
    for front in (first, second):
        kinds = front.kinds()
        assert "plain" not in kinds, kinds
        assert kinds.count("tls") >= 1 and set(kinds) <= {"tls"}, kinds
        assert sum(c.bytes_to_server for c in front.connections) > (1 << 20), "both paths carried data"
    assert len(first.kinds()) + len(second.kinds()) >= 3, "the cut connections were made again"


async def test_the_count_sees_plain_connections_under_xprtsec_none(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Front
) -> None:
    front = tls_front(ganesha, allow_plain=True)
    async with Client.connect(f"nfs://127.0.0.1:{front.port}{export_path.remote}?xprtsec=none") as nfs:
        await nfs.write_file("/plain", b"in the clear")
        assert not any(isinstance(t, TlsTransport) for t in transports(nfs))
    assert front.kinds() == ["plain"]


async def connect_error(url: str) -> OSError:
    with pytest.raises(OSError) as info:
        async with Client.connect(url, timeout=10):
            pass
    return info.value


async def test_a_server_without_tls_is_refused_never_spoken_to_in_plain(
    ganesha: Ganesha, export_path: ExportPath, tls_certs: dict[str, Path]
) -> None:
    e = await connect_error(f"nfs://127.0.0.1:{ganesha.port}{export_path.remote}?{tls_query(tls_certs)}")
    assert e.errno == errno.EACCES
    assert str(e) == (f"127.0.0.1:{ganesha.port}: TLS refused: the server does not do RPC-with-TLS "
                      "(authentication error (AUTH_REJECTEDCRED))")


@pytest.mark.parametrize(("answer", "reason"), [
    ("autherror", "authentication error (AUTH_BADCRED)"),
    ("accept", "its reply has no STARTTLS verifier"),
])
async def test_a_probe_answered_without_starttls_is_refused(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Front, tls_certs: dict[str, Path], answer: str,
    reason: str,
) -> None:
    front = tls_front(ganesha, answer=answer)
    e = await connect_error(f"nfs://127.0.0.1:{front.port}{export_path.remote}?{tls_query(tls_certs)}")
    assert e.errno == errno.EACCES
    assert str(e) == f"127.0.0.1:{front.port}: TLS refused: the server does not do RPC-with-TLS ({reason})"
    assert front.kinds() == ["refused"] and front.connections[0].bytes_to_server == 0


@pytest.mark.parametrize(("server_cert", "query", "client_ca", "says"), [
    ("rogue", {}, None, "TLS handshake failed: the server's certificate is not trusted (unable to get local "
                        "issuer certificate)"),
    ("misnamed", {}, None, "TLS handshake failed: the server's certificate is not valid for 127.0.0.1 "
                           "(IP address mismatch, certificate is not valid for '127.0.0.1'.)"),
    ("server", {}, "ca", "TLS handshake failed: the server refused the handshake (tlsv13 alert certificate "
                         "required)"),
    ("server", {"client": "stranger"}, "ca", "TLS handshake failed: the server refused the handshake (tlsv1 alert "
                                             "unknown ca)"),
])
async def test_certificate_failures_are_one_line_naming_the_server(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Front, tls_certs: dict[str, Path], server_cert: str,
    query: dict[str, str], client_ca: str | None, says: str,
) -> None:
    front = tls_front(ganesha, server_cert=server_cert, client_ca=client_ca)
    mode = "mtls" if query else "tls"
    e = await connect_error(f"nfs://127.0.0.1:{front.port}{export_path.remote}?"
                            f"{tls_query(tls_certs, mode, client=query.get('client'))}")
    assert e.errno == errno.EACCES
    assert str(e) == f"127.0.0.1:{front.port}: {says}"
    assert all(c.bytes_to_server == 0 for c in front.connections)
    assert "tls" not in front.kinds() or client_ca is not None


async def test_a_missing_trust_store_or_key_is_named(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Front, tls_certs: dict[str, Path], tmp_path: Path
) -> None:
    front = tls_front(ganesha)
    base = f"nfs://127.0.0.1:{front.port}{export_path.remote}"
    e = await connect_error(f"{base}?xprtsec=tls&truststore={tmp_path}/nothing.pem")
    assert e.errno == errno.EINVAL
    assert str(e) == f"127.0.0.1:{front.port}: TLS: cannot use truststore {tmp_path}/nothing.pem: No such file or directory"
    e = await connect_error(f"{base}?xprtsec=mtls&truststore={tls_certs['ca']}&certificate={tls_certs['client']}"
                            f"&private_key={tmp_path}/none.key")
    assert e.errno == errno.EINVAL
    assert f"TLS: cannot use certificate {tls_certs['client']} and private_key {tmp_path}/none.key" in str(e)
    assert front.connections == []


@pytest.mark.parametrize(("query", "says"), [
    ("xprtsec=tls&proto=rdma", "xprtsec=tls needs proto=tcp: RPC-with-TLS (RFC 9289) is for stream transports, "
                               "not RDMA"),
    ("xprtsec=ssl", "xprtsec=ssl: use one of none, tls, mtls"),
    ("xprtsec=mtls", "xprtsec=mtls needs the client's certificate="),
    ("xprtsec=tls&certificate=/c.pem", "certificate= and private_key= are for xprtsec=mtls, not xprtsec=tls"),
])
async def test_options_that_do_not_fit_are_refused_before_connecting(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Front, query: str, says: str
) -> None:
    front = tls_front(ganesha)
    with pytest.raises(URLError, match="^" + says.replace("(", r"\(").replace(")", r"\)")):
        async with Client.connect(f"nfs://127.0.0.1:{front.port}{export_path.remote}?{query}"):
            pass
    assert front.connections == []


async def test_a_server_that_says_starttls_and_then_closes_is_named(tls_certs: dict[str, Path]) -> None:
    async def server(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
        task_status.started(listener.socket.getsockname()[1])
        conn = await listener.accept()
        probe = await conn.receive_some(4096)
        reply = Packer()
        rpc.pack_starttls_reply(reply, int.from_bytes(probe[4:8], "big"))
        await conn.send_all((rpc.RM_LAST_FRAGMENT | len(reply.buf)).to_bytes(4, "big") + bytes(reply.buf))
        await conn.receive_some(4096)  # (the ClientHello, left unanswered)
        await conn.aclose()
        await listener.aclose()

    async with trio.open_nursery() as nursery:
        port = await nursery.start(server)
        e = await connect_error(f"nfs://127.0.0.1:{port}/?{tls_query(tls_certs)}")
    assert e.errno == errno.EACCES
    assert str(e) == f"127.0.0.1:{port}: TLS handshake failed: the server closed the connection during the handshake"
