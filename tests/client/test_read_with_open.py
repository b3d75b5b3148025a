"""A READ of a file's first bytes in its OPEN's COMPOUND (``Opens.open``/``open_fh`` with ``read``):
after the OPEN, with the open's stateid (the current stateid), the data a view of the reply; over TCP
and over RPC-over-RDMA (the data in a Write chunk). The OPEN's reply is kept in the server's reply
cache, so the READ asks for no more than the session's ca_maxresponsesize_cached allows
(``first_read_most``); a READ the server fails after the OPEN (NFS-Ganesha refuses one whose reply
would not fit that cache: NFS4ERR_REP_TOO_BIG_TO_CACHE) leaves the file open and usable."""

from __future__ import annotations

import os

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.rdma_responder import serve_rdma
from pynfsrdma._transport.rdma.soft import SoftProvider


async def _reads_with_the_open(nfs: Client, export_path: ExportPath) -> None:
    small, large = os.urandom(5000), os.urandom(300_000)
    (export_path.local / "small").write_bytes(small)
    (export_path.local / "large").write_bytes(large)
    most = nfs.nfs.first_read_most()
    assert 64 * 1024 <= most <= nfs.nfs.client.session.max_response_size_cached
    # by name, the whole file and its eof
    of = await nfs.nfs.open(nfs.root_fh, "small", nfs.cred, check=c.ACCESS4_READ, read=most)
    assert of.first_read is not None and bytes(of.first_read[0]) == small and of.first_read[1]
    await nfs.nfs.close(of, nfs.cred)
    # by file handle, the first bytes of a larger file, not its end
    of = await nfs.nfs.open_fh(of.fh, nfs.cred, read=most)
    assert of.first_read is not None and bytes(of.first_read[0]) == small
    await nfs.nfs.close(of, nfs.cred)
    fh = (await nfs.nfs.open(nfs.root_fh, "large", nfs.cred)).fh
    of = await nfs.nfs.open_fh(fh, nfs.cred, read=most)
    assert of.first_read is not None and bytes(of.first_read[0]) == large[:most] and not of.first_read[1]
    # a READ the server fails after the OPEN: the file is open all the same, and reads through it
    of = await nfs.nfs.open(nfs.root_fh, "large", nfs.cred, check=c.ACCESS4_READ, read=most + 16 * 1024)
    assert of.first_read is None and of.attrs is not None and of.attrs.size == len(large)
    data, _ = await nfs.nfs.read_write.read(of, of.fh, 1000, 5000, nfs.cred)
    assert bytes(data) == large[1000:6000]
    await nfs.nfs.close(of, nfs.cred)
    await nfs.nfs.release_all()


async def test_an_opens_compound_reads_the_files_first_bytes(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(ganesha.url + export_path.remote.removeprefix("/export")) as nfs:
        await _reads_with_the_open(nfs, export_path)


async def test_an_opens_compound_reads_the_files_first_bytes_over_rpc_over_rdma(
        ganesha: Ganesha, export_path: ExportPath) -> None:
    async with trio.open_nursery() as nursery:
        r = await serve_rdma(nursery, SoftProvider(), "127.0.0.1", 0, ganesha.host, ganesha.port)
        try:
            url = f"nfs://127.0.0.1:{r.port}{export_path.remote}?proto=rdma&provider=soft"
            async with Client.connect(url) as nfs:
                await _reads_with_the_open(nfs, export_path)
            assert r.stats.rdma_write_bytes >= 5000 * 2 + 64 * 1024  # (the READs' data placed in Write chunks)
        finally:
            await r.aclose()
            nursery.cancel_scope.cancel()
