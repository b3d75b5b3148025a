"""Kerberos over RPC-over-RDMA (software provider -> responder -> NFS-Ganesha taking krb5, krb5i, krb5p):
under krb5 the WRITE and READ payloads still go by RDMA Read and Write chunks (only the header is
signed); under krb5i and krb5p a sealed body is one opaque that is not reduced (RFC 8166 section 9.2):
no Write chunks, calls too large for a Send go whole as a Position Zero Read chunk, large replies
come back in the Reply chunk."""

from __future__ import annotations

import pytest
from krb5_support import KERBEROS_SECTYPES, KerberosUser
from test_end_to_end import data_of, rdma_url, responder, transport_of

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

MiB = 1 << 20


@pytest.mark.parametrize("sec", KERBEROS_SECTYPES)
async def test_each_flavour_over_rdma(krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser,
                                      sec: str) -> None:
    data = data_of(3 * MiB + 4321, 5)
    async with responder(krb5_ganesha) as r, Client.connect(rdma_url(r, krb5_dir, sec=sec)) as nfs:
        assert nfs.sec == sec
        await nfs.write_file("/big", data)
        assert await nfs.read_file("/big") == data
        await nfs.rename("/big", "/moved")
        assert await nfs.listdir("/") == ["moved"]
        t = transport_of(nfs)
        placed = t.stats.placed_bytes
    assert (krb5_dir.local / "moved").read_bytes() == data
    s = r.stats
    if sec == "krb5":
        assert placed >= len(data) and s.rdma_write_bytes >= len(data)  # READ data into Write chunks
        assert s.read_chunks >= 3  # WRITE data pulled from Read chunks
    else:
        assert placed == 0 and t.stats.write_chunks == 0 and s.write_chunks_filled == 0
        assert t.stats.nomsg_calls >= 3  # each sealed 1 MiB WRITE went whole by RDMA Read
        assert t.stats.nomsg_replies >= 3 and s.reply_chunks_used >= 3  # each sealed READ reply
