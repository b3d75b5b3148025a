"""Session trunking against a real NFS-Ganesha: discovery through the trunking advertiser, verification,
and failover through path proxies that really reset and stall connections."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import random

import pytest
import trio

from pynfsrdma._client.api import Client
from pynfsrdma._session.path_set import PathState
from pynfsrdma._testbed import open_paths
from pynfsrdma._testbed.advertiser import AdvertisedAddress

MiB = 1 << 20


def live_addresses(nfs: Client) -> list[str]:
    assert nfs.trunking is not None
    return sorted(p.address for p in nfs.trunking.paths.live())


async def settled(nfs: Client) -> None:
    assert nfs.trunking is not None
    with trio.fail_after(10):
        await nfs.trunking.settled.wait()


async def test_discovery_through_the_advertiser_binds_every_tcp_address(
    advertised, export_path, caplog
) -> None:
    adv = await advertised(3, extra=[AdvertisedAddress("127.0.0.9:20049", rdma=True)])
    caplog.set_level(logging.INFO, "pynfsrdma._trunking")
    async with Client.connect(adv.url(export_path.remote), timeo=10, hard=True) as nfs:
        await settled(nfs)
        # no RDMA device here and no provider= option: the RDMA entry is left out, and the log says why
        assert "RDMA-flagged trunking addresses are left out: no RDMA device" in caplog.text
        assert adv.advertiser.stats.replies_rewritten >= 1
        assert nfs.trunking is not None and nfs.trunking.multipath.source == "fs_locations_info"
        assert live_addresses(nfs) == sorted(adv.address(i) for i in range(3))  # not the RDMA entry
        snap = {p["address"]: p for p in nfs.trunking.snapshot()}
        assert snap[adv.address(1)]["verification"] == "session trunking"
        assert (snap[adv.address(0)]["order"], snap[adv.address(2)]["order"]) == (3, 1)
        # every path carries requests of the one session
        await nfs.write_file("/f", os.urandom(8 * MiB))
        for _ in range(3):
            await nfs.stat("/f")
        assert all(p.calls > 0 for p in nfs.trunking.paths.live())


async def test_legacy_fs_locations_list_is_used(advertised, export_path) -> None:
    adv = await advertised(2)
    adv.advertiser.legacy_only = True
    async with Client.connect(adv.url(export_path.remote), timeo=10) as nfs:
        await settled(nfs)
        assert nfs.trunking is not None and nfs.trunking.multipath.source == "fs_locations"
        assert live_addresses(nfs) == sorted([adv.address(0), adv.address(1)])


async def test_addresses_by_hand_nconnect_and_no_discovery(advertised, export_path) -> None:
    adv = await advertised(3)
    url = adv.url(export_path.remote, notrunkdiscovery="", addrs=adv.address(2), nconnect=2)
    async with Client.connect(url, timeo=10) as nfs:
        await settled(nfs)
        assert live_addresses(nfs) == sorted([adv.address(0)] * 2 + [adv.address(2)] * 2)
        assert adv.advertiser.stats.calls_rewritten == 0
    url = adv.url(export_path.remote, max_connect=2)
    async with Client.connect(url, timeo=10) as nfs:
        await settled(nfs)
        assert live_addresses(nfs) == sorted([adv.address(0), adv.address(1)])  # the higher read order


async def test_a_candidate_leading_to_another_server_is_rejected(
    advertised, export_path, ganesha_factory
) -> None:
    other = ganesha_factory(server_owner="other")
    async with trio.open_nursery() as nursery:
        elsewhere = await open_paths(nursery, other.host, other.port, 1, first=9)
        impostor = f"{elsewhere.addresses[0]}:{elsewhere.port}"
        adv = await advertised(2, extra=[AdvertisedAddress(impostor, order=9)])
        async with Client.connect(adv.url(export_path.remote), timeo=10) as nfs:
            await settled(nfs)
            assert live_addresses(nfs) == sorted([adv.address(0), adv.address(1)])
            assert nfs.trunking is not None
            rejected = [p for p in nfs.trunking.snapshot() if p["address"] == impostor]
            assert rejected and rejected[0]["verification"] == "another server"
            assert "another server" in rejected[0]["last_error"] and "other" in rejected[0]["last_error"]
            await nfs.write_file("/seen-by-the-right-server", b"ok")
        assert (export_path.local / "seen-by-the-right-server").read_bytes() == b"ok"
        nursery.cancel_scope.cancel()


async def test_cut_one_path_during_a_large_write(advertised, export_path) -> None:
    adv = await advertised(3)
    data = os.urandom(64 * MiB)
    async with Client.connect(adv.url(export_path.remote), timeo=30, hard=True) as nfs:
        await settled(nfs)
        assert nfs.trunking is not None
        victim = next(p for p in nfs.trunking.paths.paths if p.address == adv.address(1))
        session = nfs.clientid.session
        assert session is not None

        async def cut_when_busy() -> None:
            while victim.bytes_in_flight == 0:
                await trio.sleep(0.001)
            adv.paths[1].cut()

        async with trio.open_nursery() as n:
            n.start_soon(cut_when_busy)
            async with await nfs.open("/big", "w") as f:
                await f.write(data)
        assert victim.state is not PathState.UP or victim.connects > 1
        assert session.resends >= 1  # the cut path's requests went again on another path
        adv.paths[1].restore()
    assert hashlib.sha256((export_path.local / "big").read_bytes()).digest() == hashlib.sha256(data).digest()


async def test_a_stalled_path_is_dropped_and_io_goes_on(advertised, export_path) -> None:
    adv = await advertised(3)
    data = os.urandom(24 * MiB)
    # timeo is long: only the stall watch (stalltimeo) can move the stalled requests in time
    async with Client.connect(adv.url(export_path.remote, stalltimeo=0.5), timeo=600, hard=True) as nfs:
        await settled(nfs)
        assert nfs.trunking is not None
        victim = next(p for p in nfs.trunking.paths.paths if p.address == adv.address(0))

        async def stall_when_busy() -> None:
            while victim.bytes_in_flight == 0:
                await trio.sleep(0.001)
            adv.paths[0].stall()

        async with trio.open_nursery() as n:
            n.start_soon(stall_when_busy)
            async with await nfs.open("/stalled", "w") as f:
                await f.write(data)
        assert victim.stalls >= 1
        adv.paths[0].restore()
        assert await nfs.read_file("/stalled") == data


async def test_all_paths_cut_for_five_seconds_then_restored_hard(advertised, export_path) -> None:
    adv = await advertised(3)
    data = os.urandom(16 * MiB)
    async with Client.connect(adv.url(export_path.remote), timeo=30, hard=True) as nfs:
        await settled(nfs)
        results: list[object] = []

        async def workload() -> None:
            await nfs.write_file("/during-outage", data)
            results.append(await nfs.stat("/during-outage"))

        async with trio.open_nursery() as n:
            for p in adv.paths:
                p.cut()
            n.start_soon(workload)
            await trio.sleep(5)
            assert not results  # nothing can have completed with every path cut
            adv.paths.restore_all()
        assert len(results) == 1
    assert (export_path.local / "during-outage").read_bytes() == data


async def test_all_paths_down_soft_gives_eio_after_timeo(advertised, export_path) -> None:
    adv = await advertised(2)
    async with Client.connect(adv.url(export_path.remote), timeo=1, retrans=0, hard=False) as nfs:
        await settled(nfs)
        for p in adv.paths:
            p.cut()
        with pytest.raises(OSError) as ei:
            await nfs.stat("/")
        assert ei.value.errno == errno.EIO
        adv.paths.restore_all()


async def test_exactly_once_under_random_cuts(advertised, export_path) -> None:
    adv = await advertised(3)
    rounds = 40
    rng = random.Random(4)
    async with Client.connect(adv.url(export_path.remote), timeo=30, hard=True) as nfs:
        await settled(nfs)
        session = nfs.clientid.session
        assert session is not None
        done = trio.Event()

        async def chaos() -> None:
            while not done.is_set():
                victims = rng.sample(range(3), rng.choice([1, 1, 2]))
                for v in victims:
                    adv.paths[v].cut()
                await trio.sleep(rng.uniform(0.005, 0.05))
                for v in victims:
                    adv.paths[v].restore()
                await trio.sleep(rng.uniform(0.005, 0.05))

        async def workload() -> None:
            for i in range(rounds):
                async with await nfs.open(f"/f{i}", "x") as f:  # exclusive create: EEXIST if run twice
                    await f.write(b"%d" % i)
                await nfs.link(f"/f{i}", f"/l{i}")  # EEXIST if run twice
                await nfs.rename(f"/f{i}", f"/g{i}")  # ENOENT if run twice
                await nfs.remove(f"/l{i}")  # ENOENT if run twice
                await nfs.mkdir(f"/d{i}")  # EEXIST if run twice
                await nfs.rmdir(f"/d{i}")
            done.set()

        async with trio.open_nursery() as n:
            n.start_soon(chaos)
            await workload()
        adv.paths.restore_all()
        assert session.resends > 0  # the cuts did hit requests in flight
        assert sorted(await nfs.listdir("/")) == sorted(f"g{i}" for i in range(rounds))
    for i in range(rounds):
        assert (export_path.local / f"g{i}").read_bytes() == b"%d" % i


async def test_discovery_is_repeated_when_a_path_goes_down(advertised, export_path) -> None:
    adv = await advertised(3)
    listed = adv.advertiser.addresses
    adv.advertiser.addresses = listed[:2]  # the server names two addresses at mount time
    async with Client.connect(adv.url(export_path.remote), timeo=10, hard=True) as nfs:
        await settled(nfs)
        trunking = nfs.trunking
        assert trunking is not None and trunking.discoveries == 1
        assert live_addresses(nfs) == sorted([adv.address(0), adv.address(1)])
        trunking.options.rediscover_gap = 0.2
        adv.advertiser.addresses = listed  # ... and a third one later
        adv.paths[1].cut()  # a connection goes away: discovery runs again and finds the third
        with trio.fail_after(10):
            while adv.address(2) not in live_addresses(nfs):
                await trunking.paths.wait_changed()
        assert trunking.discoveries == 2
        adv.paths[1].restore()
