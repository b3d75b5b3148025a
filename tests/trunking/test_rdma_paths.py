"""One session over a TCP path and an RPC-over-RDMA path, found by trunking discovery.

The trunking advertiser lists a TCP path (a proxy in front of it) and the RDMA responder (software
provider, in front of the same NFS-Ganesha) as an FSLI4TF_RDMA entry; the client mounts over TCP with
``provider=soft``. Then each path is cut in turn while a large write runs: it finishes on the other
path (requests moved between transports are encoded again for the new path), and the data is right.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._session.path_set import Path, PathState
from pynfsrdma._testbed.advertiser import AdvertisedAddress
from pynfsrdma._testbed.rdma_responder import Responder, serve_rdma
from pynfsrdma._transport.rdma.soft import SoftProvider
from pynfsrdma._transport.rdma.transport import RdmaTransport

MiB = 1 << 20


@asynccontextmanager
async def rdma_responder(ganesha) -> AsyncIterator[Responder]:
    async with trio.open_nursery() as nursery:
        r = await serve_rdma(nursery, SoftProvider(), "127.0.0.1", 0, ganesha.host, ganesha.port)
        try:
            yield r
        finally:
            await r.aclose()
            nursery.cancel_scope.cancel()


async def busy(path: Path) -> None:
    while path.bytes_in_flight == 0:
        await trio.sleep(0.001)


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


async def test_a_tcp_and_an_rdma_path_in_one_session_fail_over_to_each_other(
    ganesha, advertised, export_path
) -> None:
    async with rdma_responder(ganesha) as responder:
        rdma_address = f"127.0.0.1:{responder.port}"
        adv = await advertised(1, extra=[AdvertisedAddress(rdma_address, order=1, rdma=True)])
        async with Client.connect(adv.url(export_path.remote, provider="soft"), timeo=30, hard=True) as nfs:
            assert nfs.trunking is not None
            with trio.fail_after(10):
                await nfs.trunking.settled.wait()
            live = {p.transport_kind: p for p in nfs.trunking.paths.live()}
            assert sorted(live) == ["rdma", "tcp"]
            tcp, rdma = live["tcp"], live["rdma"]
            assert rdma.address == rdma_address and isinstance(rdma.rpc.transport, RdmaTransport)
            snap = {p["address"]: p for p in nfs.trunking.snapshot()}
            assert snap[rdma_address]["verification"] == "session trunking"
            assert snap[rdma_address]["transport"] == "rdma"
            session = nfs.clientid.session
            assert session is not None and tcp.bound_session == rdma.bound_session == session.sessionid

            # 1. the TCP path is cut during a large write: it finishes over RDMA
            data = os.urandom(24 * MiB)
            resends = session.resends
            async with trio.open_nursery() as n:

                async def cut() -> None:
                    await busy(tcp)
                    adv.paths[0].cut()

                n.start_soon(cut)
                async with await nfs.open("/over-both", "w") as f:
                    await f.write(data)
            assert tcp.state is not PathState.UP
            assert session.resends > resends
            assert rdma.state is PathState.UP and rdma.calls > 0
            # read back over RDMA alone: the READ data comes through Write chunks
            assert sha(await nfs.read_file("/over-both")) == sha(data)
            assert sha((export_path.local / "over-both").read_bytes()) == sha(data)
            adv.paths[0].restore()
            with trio.fail_after(10):
                while tcp.state is not PathState.UP:
                    await nfs.trunking.paths.wait_changed()

            # 2. the RDMA connection is killed during a large write: it finishes over TCP
            data = os.urandom(24 * MiB)
            resends, tcp_calls, rdma_connects = session.resends, tcp.calls, rdma.connects
            async with trio.open_nursery() as n:

                async def kill() -> None:
                    await busy(rdma)
                    assert responder.kill_connections() >= 1

                n.start_soon(kill)
                async with await nfs.open("/over-tcp", "w") as f:
                    await f.write(data)
            assert session.resends > resends
            assert tcp.calls > tcp_calls
            assert sha((export_path.local / "over-tcp").read_bytes()) == sha(data)
            # the RDMA path comes back, is bound again, and carries requests again
            with trio.fail_after(10):
                while not (rdma.state is PathState.UP and rdma.connects > rdma_connects):
                    await nfs.trunking.paths.wait_changed()
            assert rdma.bound_session == session.sessionid
            assert sha(await nfs.read_file("/over-tcp")) == sha(data)
