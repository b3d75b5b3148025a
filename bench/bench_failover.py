"""Multipath figures: failover stall time over N cuts, and write/read throughput with 1, 2 and 4 paths.

    .venv/bin/python -m bench.bench_failover [--cuts 20] [--size-mib 64] [--json]

Everything runs against a local NFS-Ganesha started for the run, through in-process path proxies
(127.0.0.2, ...). Failover: `pynfsrdma failover-test`'s scenario (workers creating and renaming
files while paths are cut one after another): stall time median and worst, operations lost and
repeated (both must be 0). Throughput: one file written and read back over N paths (addrs=),
checked by sha256 on the server's disk; and over one TCP path plus one RPC-over-RDMA path (software
provider, through the RDMA responder) that trunking discovery found (the trunking advertiser lists it
as an FSLI4TF_RDMA entry).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import trio

from pynfsrdma._cli.failover import run_failover
from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha, open_paths
from pynfsrdma._testbed.advertiser import AdvertisedAddress, TrunkingAdvertiser
from pynfsrdma._testbed.rdma_responder import serve_rdma
from pynfsrdma._transport.rdma.soft import SoftProvider

from .common import MIB, make_data


async def throughput(server: Ganesha, paths: int, size: int) -> dict[str, float]:
    d = server.new_directory(prefix="bench-")
    data = make_data(size)
    async with trio.open_nursery() as nursery:
        pp = await open_paths(nursery, server.host, server.port, paths)
        addrs = ",".join(f"{a}:{pp.port}" for a in pp.addresses[1:])
        url = f"nfs://{pp.addresses[0]}:{pp.port}{d.remote}?notrunkdiscovery" + (
            f"&addrs={addrs}" if addrs else ""
        )
        async with Client.connect(url, hard=True, timeo=60) as nfs:
            assert nfs.trunking is not None
            await nfs.trunking.settled.wait()
            nfs.window = 8 * paths
            t = time.perf_counter()
            async with await nfs.open("/f", "w") as f:
                await f.write(data)
            write_s = time.perf_counter() - t
            t = time.perf_counter()
            back = await nfs.read_file("/f")
            read_s = time.perf_counter() - t
        nursery.cancel_scope.cancel()
    if hashlib.sha256(back).digest() != hashlib.sha256(data).digest():
        raise AssertionError("read back data differ")
    if hashlib.sha256((d.local / "f").read_bytes()).digest() != hashlib.sha256(data).digest():
        raise AssertionError("the file on the server's disk differs")
    return {"paths": paths, "write_MBps": size / write_s / 1e6, "read_MBps": size / read_s / 1e6}


async def tcp_and_rdma(server: Ganesha, size: int) -> dict[str, object]:
    """Throughput over one TCP path and one RDMA path of the same session (found by discovery)."""
    d = server.new_directory(prefix="bench-")
    data = make_data(size)
    async with trio.open_nursery() as nursery:
        responder = await serve_rdma(nursery, SoftProvider(), "127.0.0.1", 0, server.host, server.port)
        adv = TrunkingAdvertiser("127.0.0.1", 0, server.host, server.port)
        await nursery.start(adv.run)
        pp = await open_paths(nursery, adv.host, adv.port, 1)
        adv.addresses = [
            AdvertisedAddress(f"{pp.addresses[0]}:{pp.port}"),
            AdvertisedAddress(f"127.0.0.1:{responder.port}", rdma=True),
        ]
        url = f"nfs://{pp.addresses[0]}:{pp.port}{d.remote}?provider=soft"
        async with Client.connect(url, hard=True, timeo=60) as nfs:
            assert nfs.trunking is not None
            await nfs.trunking.settled.wait()
            kinds = sorted(p.transport_kind for p in nfs.trunking.paths.live())
            nfs.window = 16
            t = time.perf_counter()
            async with await nfs.open("/f", "w") as f:
                await f.write(data)
            write_s = time.perf_counter() - t
            t = time.perf_counter()
            back = await nfs.read_file("/f")
            read_s = time.perf_counter() - t
            calls = {p.transport_kind: p.calls for p in nfs.trunking.paths.paths}
        await responder.aclose()
        nursery.cancel_scope.cancel()
    if hashlib.sha256(back).digest() != hashlib.sha256(data).digest():
        raise AssertionError("read back data differ")
    return {
        "paths": "+".join(kinds),
        "write_MBps": size / write_s / 1e6,
        "read_MBps": size / read_s / 1e6,
        "calls": calls,
    }


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    with Ganesha() as server:
        d = server.new_directory(prefix="failover-")
        report = await run_failover(
            f"nfs://{server.host}:{server.port}{d.remote}",
            paths=3,
            faults=args.cuts,
            fault="cut",
            interval=args.interval,
            down=args.down,
        )
        out["failover"] = report.to_json()
        out["throughput"] = [await throughput(server, n, args.size_mib * MIB) for n in (1, 2, 4)]
        out["tcp_and_rdma"] = await tcp_and_rdma(server, args.size_mib * MIB)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_failover", description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--cuts", type=int, default=20)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--down", type=float, default=0.3)
    p.add_argument("--size-mib", type=int, default=64)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = trio.run(main_async, args)
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    f = out["failover"]
    assert isinstance(f, dict)
    print(
        f"failover, {f['faults']} cuts over {f['paths']} paths: stall median {f['stall_median_s'] * 1000:.0f} ms, "
        f"worst {f['stall_worst_s'] * 1000:.0f} ms; {f['operations_completed']} operations, "
        f"{f['operations_lost']} lost, {f['operations_repeated']} repeated, {f['resends']} resent"
    )
    print("paths  write MB/s  read MB/s")
    for row in out["throughput"]:  # type: ignore[attr-defined]
        print(f"{row['paths']:5d}  {row['write_MBps']:10.0f}  {row['read_MBps']:9.0f}")
    mixed = out["tcp_and_rdma"]
    assert isinstance(mixed, dict)
    print(
        f"{mixed['paths']}: write {mixed['write_MBps']:.0f} MB/s, read {mixed['read_MBps']:.0f} MB/s "
        f"(calls per transport: {mixed['calls']})"
    )
    ok = f["operations_lost"] == 0 and f["operations_repeated"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
