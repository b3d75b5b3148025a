"""Kerberos over RPC-with-TLS: sec=krb5 (and krb5p) with xprtsec=tls, against the real KDC and the
Kerberos NFS-Ganesha behind the testbed's TLS front. The RPCSEC_GSS context is made and used inside
TLS, and every connection is a TLS one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from krb5_support import KerberosUser
from tls_support import RunningFront, tls_query

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._transport.tls import TlsTransport


@pytest.mark.parametrize("sec", ["krb5", "krb5p"])
async def test_kerberos_inside_tls(krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser,
                                   tls_front: Callable[..., RunningFront], tls_certs: dict[str, Path],
                                   sec: str) -> None:
    front = tls_front(krb5_ganesha)
    data = os.urandom((1 << 20) + 3)
    url = f"nfs://{krb5_ganesha.host}:{front.port}{krb5_dir.remote}?sec={sec}&{tls_query(tls_certs)}"
    async with Client.connect(url) as nfs:
        assert nfs.sec == sec
        await nfs.write_file("/k", data)
        assert await nfs.read_file("/k") == data
        paths = [p for p in nfs.clientid.paths.paths if p.rpc is not None]
        assert paths and all(isinstance(p.rpc.transport, TlsTransport) for p in paths)
    assert (krb5_dir.local / "k").read_bytes() == data
    kinds = front.kinds()
    assert kinds and set(kinds) == {"tls"}, kinds
