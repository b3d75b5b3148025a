"""Trunking under RPC-with-TLS: no trunked path is ever plain.

The client reaches the trunking advertiser through the testbed's TLS front. The advertiser names a
TCP address (a plain path proxy, which relays the AUTH_TLS probe to NFS-Ganesha, which refuses it)
and an RDMA address (the RDMA responder, software provider). Under xprtsec=tls the session keeps its
one TLS path: the TCP address is tried with TLS and not used when TLS is refused, and the RDMA
address is left out (RPC-with-TLS is for stream transports). Without xprtsec the same advertiser
gives the session both other paths (tests/trunking/test_rdma_paths.py), so the count can tell.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from test_rdma_paths import rdma_responder
from tls_support import RunningFront, tls_query

from pynfsrdma._client.api import Client
from pynfsrdma._testbed.advertiser import AdvertisedAddress
from pynfsrdma._transport.tls import TlsTransport


async def test_under_tls_an_address_without_tls_and_an_rdma_address_are_not_used(
    ganesha, advertised, export_path, tls_front: Callable[..., RunningFront], tls_certs: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with rdma_responder(ganesha) as responder:
        rdma_address = f"127.0.0.1:{responder.port}"
        adv = await advertised(1, extra=[AdvertisedAddress(rdma_address, order=1, rdma=True)])
        front = tls_front(adv.advertiser)
        url = f"nfs://127.0.0.1:{front.port}{export_path.remote}?{tls_query(tls_certs)}&provider=soft"
        async with Client.connect(url) as nfs:
            assert nfs.trunking is not None
            with trio.fail_after(10):
                await nfs.trunking.settled.wait()
            await nfs.write_file("/f", b"one path, under TLS")
            live = nfs.trunking.paths.live()
            assert [p.address for p in live] == [f"127.0.0.1:{front.port}"]
            assert all(isinstance(p.rpc.transport, TlsTransport) for p in live if p.rpc is not None)
            assert not any(p.transport_kind == "rdma" for p in nfs.trunking.paths.paths)
        assert front.kinds() == ["tls"]
    assert (export_path.local / "f").read_bytes() == b"one path, under TLS"
    assert "rdma trunking addresses are left out: every connection of this session is under TLS" in caplog.text
    assert "TLS refused" in caplog.text  # (the plain proxy's address: tried with TLS, refused, not used)
