"""Client ID trunking (RFC 8881 section 2.10.5) against a real NFS-Ganesha.

One address of the multipath list leads through a second trunking advertiser in its test-only
rewriting mode, which makes EXCHANGE_ID there answer another server owner minor id: to the client it
is another instance of the same server. The client must open a second session on the same client ID
there (Ganesha accepts it), spread requests over both sessions, and recover each session on its own.
"""

from __future__ import annotations

import hashlib
import os

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.types import DESTROY_SESSION4args
from pynfsrdma._testbed import open_paths
from pynfsrdma._testbed.advertiser import AdvertisedAddress, TrunkingAdvertiser

MiB = 1 << 20
OTHER_MINOR = 7


async def test_a_second_session_on_the_client_id_over_another_server_instance(
    ganesha, advertised, export_path
) -> None:
    async with trio.open_nursery() as nursery:
        rewriting = TrunkingAdvertiser(
            "127.0.0.1", 0, ganesha.host, ganesha.port, rewrite_minor_id=OTHER_MINOR
        )
        await nursery.start(rewriting.run)
        instance = await open_paths(nursery, rewriting.host, rewriting.port, 1, first=7)
        other = f"{instance.addresses[0]}:{instance.port}"
        adv = await advertised(1, extra=[AdvertisedAddress(other, order=1)])
        async with Client.connect(adv.url(export_path.remote), timeo=30, hard=True) as nfs:
            trunking = nfs.trunking
            assert trunking is not None
            with trio.fail_after(10):
                await trunking.settled.wait()
            cid = nfs.clientid
            assert rewriting.stats.minor_ids_rewritten >= 1
            snap = {p["address"]: p for p in trunking.snapshot()}
            assert snap[other]["verification"] == "client ID trunking"
            assert snap[other]["group"] == 1 and snap[adv.address(0)]["group"] == 0
            assert trunking.verifier.trunked_sessions_opened == 1
            first, second = cid.session, cid.session_of(1)
            assert first is not None and second is not None and first.sessionid != second.sessionid
            paths = {p.address: p for p in trunking.paths.live()}
            assert paths[other].bound_session == second.sessionid
            assert paths[adv.address(0)].bound_session == first.sessionid

            # requests are spread over both sessions, each over its own paths
            data = os.urandom(16 * MiB)
            await nfs.write_file("/both", data)
            assert hashlib.sha256(await nfs.read_file("/both")).digest() == hashlib.sha256(data).digest()
            assert paths[other].calls > 0 and paths[adv.address(0)].calls > 0

            # the second session is destroyed on the server: only it is recovered, on its own path
            res = await cid.raw_compound(paths[other], [DESTROY_SESSION4args(second.sessionid)])
            assert res.status == c.NFS4_OK
            recoveries = cid.recoveries
            after = os.urandom(8 * MiB)  # WRITEs in parallel: some go over the second session
            await nfs.write_file("/after", after)
            third = cid.session_of(1)
            assert third is not None and third is not second and third.sessionid != second.sessionid
            assert cid.session is first and cid.recoveries > recoveries
            assert paths[other].bound_session == third.sessionid
            assert await nfs.read_file("/after") == after
        assert (export_path.local / "both").read_bytes() == data
        nursery.cancel_scope.cancel()
