"""Kerberos on the wire, checked from outside the client:

- tshark (loopback capture) decodes every RPCSEC_GSS call and reply as well-formed: the context's
  creation (INIT with its token, the reply's handle, window and token), DATA calls with their
  sequence numbers under each service, and the context's DESTROY at the end;
- under krb5p a known string written to a file and read back appears nowhere in the capture, while
  under sys (the same workload, the AUTH_SYS server) it does;
- under krb5i a proxy that flips one byte of the server's READ replies makes the read fail cleanly
  (EIO, no data) when it flips every one, and costs a resend when it flips one; the same proxy under
  sys hands back wrong data, which is what integrity is for.
"""

from __future__ import annotations

import errno
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from krb5_support import KerberosUser
from test_tshark import capture, decode, values

from pynfsrdma._client.api import Client, single_error
from pynfsrdma._proto import rpcsec_gss as gss
from pynfsrdma._proto.rpc import auth_flavor
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.record_proxy import RecordProxy, frame


def secret_text() -> bytes:
    return f"pynfsrdma-secret-{uuid.uuid4().hex}\n".encode() * 64


async def write_and_read(url: str, data: bytes) -> str:
    async with Client.connect(url) as nfs:
        await nfs.write_file("/secret.txt", data)
        assert await nfs.read_file("/secret.txt") == data
        assert await nfs.listdir("/") == ["secret.txt"]
        return nfs.sec


@pytest.mark.parametrize("sec", ["krb5", "krb5i", "krb5p"])
async def test_rpcsec_gss_headers_decode_and_privacy_hides_the_data(
    krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser, tmp_path: Path, sec: str
) -> None:
    port = krb5_ganesha.port
    pcap = tmp_path / "krb5.pcapng"
    data = secret_text()
    with capture(port, pcap):
        assert await write_and_read(f"nfs://127.0.0.1:{port}{krb5_dir.remote}?sec={sec}", data) == sec
    assert (krb5_dir.local / "secret.txt").read_bytes() == data

    bad = decode(pcap, port, '_ws.malformed || _ws.expert.severity == "Error"')
    assert not bad, "frames that do not decode:\n" + "\n".join("\t".join(b) for b in bad[:20])
    rows = decode(pcap, port, f"rpc.auth.flavor == {int(auth_flavor.RPCSEC_GSS)} && rpc.msgtyp == 0",
                  "rpc.authgss.procedure", "rpc.authgss.service", "rpc.authgss.seqnum")
    procs = [v for row in rows for v in values(row[0])]
    assert procs.count(gss.RPCSEC_GSS_INIT) == 1, "one context made"
    assert procs.count(gss.RPCSEC_GSS_DESTROY) == 1, "and destroyed at the end"
    data_rows = [row for row in rows if values(row[0]) == [gss.RPCSEC_GSS_DATA]]
    assert len(data_rows) > 5
    assert {v for row in data_rows for v in values(row[1])} == {gss.FLAVORS[sec].service}
    # (under krb5i the body's sequence number is decoded too: it must be the credential's)
    assert all(len(set(values(row[2]))) == 1 for row in data_rows)
    seqs = [values(row[2])[0] for row in data_rows]
    assert len(set(seqs)) == len(seqs), "a sequence number of its own for every call"
    created = decode(pcap, port, "rpc.authgss.window", "rpc.authgss.window", "rpc.authgss.major")
    assert len(created) == 1 and values(created[0][1]) == [gss.GSS_S_COMPLETE] and values(created[0][0])[0] > 0

    raw = pcap.read_bytes()
    marker = data[:40]
    if sec == "krb5p":
        assert marker not in raw, "under krb5p the file's text must not be on the wire"
    else:
        assert marker in raw, "krb5 and krb5i sign the data but do not hide it"


async def test_under_sys_the_same_text_is_on_the_wire(ganesha: Ganesha, export_path: ExportPath,
                                                        tmp_path: Path) -> None:
    pcap = tmp_path / "sys.pcapng"
    data = secret_text()
    with capture(ganesha.port, pcap):
        assert await write_and_read(f"nfs://127.0.0.1:{ganesha.port}{export_path.remote}", data) == "sys"
    assert data[:40] in pcap.read_bytes()


class FlipProxy(RecordProxy):
    """Flips one byte in the middle of the server's large replies (READ replies of 64 KiB and more),
    ``times`` times (None: every one)."""

    def __init__(self, target: Ganesha, times: int | None) -> None:
        super().__init__("127.0.0.1", 0, target.host, target.port)
        self.times = times
        self.flipped = 0

    def to_client(self, state: Any, record: bytes) -> bytes:
        if len(record) >= 64 * 1024 and (self.times is None or self.flipped < self.times):
            self.flipped += 1
            changed = bytearray(record)
            changed[len(changed) // 2] ^= 0x01
            record = bytes(changed)
        return frame(record)


async def read_through(proxy: FlipProxy, remote: str, sec: str) -> tuple[bytes, int]:
    """Read /f through ``proxy``: the data, and the replies the session found broken."""
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            async with Client.connect(f"nfs://127.0.0.1:{proxy.port}{remote}?sec={sec}", timeo=10) as nfs:
                got = await nfs.read_file("/f")
                assert nfs.clientid.session is not None
                violations = nfs.clientid.session.violations
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as eg:  # (the proxy's nursery: the client's own error is what is asked about)
        raise single_error(eg) from None
    return got, violations


async def test_krb5i_turns_a_flipped_reply_byte_into_an_error_not_wrong_data(
    krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser
) -> None:
    data = bytes(range(256)) * 1024  # 256 KiB: READ replies large enough to be flipped
    (krb5_dir.local / "f").write_bytes(data)
    proxy = FlipProxy(krb5_ganesha, times=None)
    with pytest.raises(OSError) as info:
        await read_through(proxy, krb5_dir.remote, "krb5i")
    assert info.value.errno == errno.EIO
    assert "fails its RPCSEC_GSS checks" in str(info.value) and "Message Integrity Check" in str(info.value)
    assert proxy.flipped >= 2  # (each flipped reply ended its connection; the resends were flipped too)

    once = FlipProxy(krb5_ganesha, times=1)
    got, violations = await read_through(once, krb5_dir.remote, "krb5i")
    assert once.flipped == 1 and got == data and violations == 1


async def test_under_sys_the_same_flip_goes_unnoticed(ganesha: Ganesha, export_path: ExportPath) -> None:
    data = bytes(range(256)) * 1024
    (export_path.local / "f").write_bytes(data)
    proxy = FlipProxy(ganesha, times=1)
    got, violations = await read_through(proxy, export_path.remote, "sys")
    assert proxy.flipped == 1 and got != data and len(got) == len(data) and violations == 0
