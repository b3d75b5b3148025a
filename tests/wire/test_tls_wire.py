"""RPC-with-TLS on the wire, checked from outside the client with tshark (a loopback capture between
the client and the testbed's TLS front):

- under xprtsec=tls a known text written to a file and read back appears nowhere in the capture,
  while under xprtsec=none (the same workload, through a front that relays plain connections) it does;
- tshark decodes the AUTH_TLS probe as an RPC NULL call with flavor AUTH_TLS (7) and its reply's
  verifier as "STARTTLS", then the TLS 1.3 handshake with ALPN "sunrpc", then only TLS application
  data records: no NFS COMPOUND goes in the clear.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from test_tshark import capture, decode
from tls_support import RunningFront, tls_query

from pynfsrdma._client.api import Client
from pynfsrdma._proto import rpc
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def secret_text() -> bytes:
    return f"pynfsrdma-secret-{uuid.uuid4().hex}\n".encode() * 64


async def write_and_read(url: str, data: bytes) -> None:
    async with Client.connect(url) as nfs:
        await nfs.write_file("/secret.txt", data)
        assert await nfs.read_file("/secret.txt") == data


def tls_frames(pcap: Path, port: int, display_filter: str, *fields: str) -> list[list[str]]:
    """``decode`` with the front's port read as TLS (after the probe, which is RPC)."""
    args = ["tshark", "-r", str(pcap), "-o", "tcp.reassemble_out_of_order:TRUE", "-d", f"tcp.port=={port},tls",
            "-Y", display_filter]
    if fields:
        args += ["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
        for f in fields:
            args += ["-e", f]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"tshark -r failed: {proc.stderr}"
    return [line.split("\t") for line in proc.stdout.splitlines() if line.strip()]


async def test_under_tls_the_text_is_not_on_the_wire_and_tshark_sees_tls(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Callable[..., RunningFront], tls_certs: dict[str, Path],
    tmp_path: Path,
) -> None:
    front = tls_front(ganesha)
    pcap = tmp_path / "tls.pcapng"
    data = secret_text()
    with capture(front.port, pcap):
        await write_and_read(f"nfs://127.0.0.1:{front.port}{export_path.remote}?{tls_query(tls_certs)}", data)
    assert (export_path.local / "secret.txt").read_bytes() == data
    raw = pcap.read_bytes()
    assert data[:40] not in raw, "under xprtsec=tls the file's text must not be on the wire"

    probe = decode(pcap, front.port, f"rpc.auth.flavor == {int(rpc.AUTH_TLS)} && rpc.msgtyp == 0", "rpc.procedure")
    assert [row[0] for row in probe] == [str(rpc.NULLPROC)], "one AUTH_TLS NULL call"
    # its reply: accepted, an AUTH_NONE verifier of 8 bytes, which are "STARTTLS"
    assert decode(pcap, front.port, "rpc.msgtyp == 1", "rpc.auth.flavor", "rpc.auth.length") == [
        [str(int(rpc.AUTH_NONE)), str(len(rpc.STARTTLS))]]
    assert rpc.STARTTLS in raw
    # (the probe is NFS's NULL procedure: what must not decode is any COMPOUND, call or reply)
    assert decode(pcap, front.port, f"nfs && rpc.procedure == {c.NFSPROC4_COMPOUND}") == [], "no COMPOUND in the clear"

    hello = tls_frames(pcap, front.port, "tls.handshake.type == 1", "tls.handshake.extensions_alpn_str")
    assert [row[0] for row in hello] == [rpc.TLS_ALPN], "the ClientHello asks for ALPN sunrpc"
    server = tls_frames(pcap, front.port, "tls.handshake.type == 2", "tls.handshake.extensions.supported_version")
    assert [row[0] for row in server] == ["0x0304"], "the ServerHello says TLS 1.3"
    records = tls_frames(pcap, front.port, "tls.record.opaque_type == 23", "tls.record.length")
    lengths = [int(n) for row in records for n in row[0].split(",")]
    assert sum(lengths) > 2 * len(data), "the data went both ways inside TLS application data records"


async def test_under_none_the_same_text_is_on_the_wire(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Callable[..., RunningFront], tmp_path: Path
) -> None:
    front = tls_front(ganesha, allow_plain=True)
    pcap = tmp_path / "none.pcapng"
    data = secret_text()
    with capture(front.port, pcap):
        await write_and_read(f"nfs://127.0.0.1:{front.port}{export_path.remote}?xprtsec=none", data)
    assert data[:40] in pcap.read_bytes()
    assert decode(pcap, front.port, f"nfs && rpc.procedure == {c.NFSPROC4_COMPOUND}"), "COMPOUNDs in the clear"
    assert tls_frames(pcap, front.port, "tls.handshake") == []
