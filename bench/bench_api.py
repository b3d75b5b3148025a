"""Our scripted-access API against nfs-rs, in the same run and against the same server.

    .venv/bin/python bench/bench_api.py [--size-mib 256] [--files 10000] [--url URL] [--json]

Without ``--url`` it starts its own NFS-Ganesha (the testbed) on loopback. Measured, each a few times
with the two clients taking turns (best and median reported):

- sequential write of a SIZE file with the data in memory: ours ``open("w")`` + ``File.pwrite(0, data)``
  + ``close()`` (UNSTABLE WRITEs, ``in_flight`` at once, COMMIT); nfs-rs ``open("wb")`` +
  ``File.write_at(data, 0)`` (its 8 concurrent UNSTABLE WRITEs and COMMIT) + close;
- sequential read of it back into memory: ours ``File.pread_views(0, SIZE)`` (views of the reply
  buffers, no copy); nfs-rs ``File.readinto_at(buffer, 0)`` into a preallocated buffer (one copy);
- stat of N files (created on the server's disk beforehand), one after the other: ours
  ``Client.stat``, nfs-rs ``Client.stat``;
- the same N stats with C of them in flight: ours with trio tasks, nfs-rs ``AsyncClient.stat``
  with asyncio tasks.

Every write is checked (sha256 of the file on the server's disk, when the server is local), every
read (sha256 of what came back) and every stat (the sizes). Timings cover open to close and exclude
the checks. nfs-rs is synchronous Rust: its calls run in a worker thread so that our client's
connection (lease renewal, callbacks) stays served meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nfs_rs

from bench.common import (
    MIB,
    Row,
    Target,
    bench_target,
    check,
    format_table,
    json_line,
    make_data,
    sha256_file,
    sha256_of,
)
from pynfsrdma.client.api import Client

STAT_DIR = "stat"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def stat_names(count: int) -> list[str]:
    return [f"s{i:06d}" for i in range(count)]


def stat_size(i: int) -> int:
    """File i of the stat set holds i % 97 bytes, so the sizes a stat returns can be checked."""
    return i % 97


def expected_stat_sizes(count: int) -> int:
    return sum(stat_size(i) for i in range(count))


def create_stat_files_on_disk(directory: Path, count: int) -> None:
    directory.mkdir(exist_ok=True)
    for i, name in enumerate(stat_names(count)):
        with open(directory / name, "wb") as f:
            f.write(b"x" * stat_size(i))


async def create_stat_files_over_nfs(nfs: Client, count: int, concurrency: int) -> None:
    await nfs.makedirs("/" + STAT_DIR)
    limit = trio.Semaphore(concurrency)

    async def one(i: int, name: str) -> None:
        async with limit:
            await nfs.write_file(f"/{STAT_DIR}/{name}", b"x" * stat_size(i))

    async with trio.open_nursery() as nursery:
        for i, name in enumerate(stat_names(count)):
            nursery.start_soon(one, i, name)


# -- our client --------------------------------------------------------------------------------------------
async def ours_write(nfs: Client, name: str, data: bytes) -> float:
    t0 = time.perf_counter()
    async with await nfs.open("/" + name, "w") as f:
        await f.pwrite(0, data)
    return time.perf_counter() - t0


async def ours_read(nfs: Client, name: str, size: int) -> tuple[float, str]:
    t0 = time.perf_counter()
    async with await nfs.open("/" + name, "r") as f:
        views, _eof = await f.pread_views(0, size)
    elapsed = time.perf_counter() - t0
    got = sum(v.nbytes for v in views)
    if got != size:
        raise AssertionError(f"ours: read {got} bytes of {size}")
    return elapsed, sha256_of(views)


async def ours_stat_sequential(nfs: Client, names: list[str]) -> tuple[float, int]:
    total = 0
    t0 = time.perf_counter()
    for name in names:
        total += (await nfs.stat(f"/{STAT_DIR}/{name}")).size
    return time.perf_counter() - t0, total


async def ours_stat_concurrent(nfs: Client, names: list[str], concurrency: int) -> tuple[float, int]:
    sizes = [0] * len(names)
    limit = trio.Semaphore(concurrency)

    async def one(i: int, name: str) -> None:
        async with limit:
            sizes[i] = (await nfs.stat(f"/{STAT_DIR}/{name}")).size

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i, name in enumerate(names):
            nursery.start_soon(one, i, name)
    return time.perf_counter() - t0, sum(sizes)


# -- nfs-rs (synchronous; run in a worker thread) ---------------------------------------------------
def nfsrs_connect(url: str) -> nfs_rs.Client:
    return nfs_rs.Client.connect(url, uid=0, gid=0)


def nfsrs_write(client: nfs_rs.Client, name: str, data: bytes) -> float:
    t0 = time.perf_counter()
    with client.open(name, "wb") as f:
        n = f.write_at(data, 0)
    elapsed = time.perf_counter() - t0
    if n != len(data):
        raise AssertionError(f"nfs-rs: wrote {n} bytes of {len(data)}")
    return elapsed


def nfsrs_read(client: nfs_rs.Client, name: str, buffer: bytearray) -> tuple[float, str]:
    t0 = time.perf_counter()
    with client.open(name, "rb") as f:
        n = f.readinto_at(buffer, 0)
    elapsed = time.perf_counter() - t0
    if n != len(buffer):
        raise AssertionError(f"nfs-rs: read {n} bytes of {len(buffer)}")
    return elapsed, sha256_of([buffer])


def nfsrs_stat_sequential(client: nfs_rs.Client, names: list[str]) -> tuple[float, int]:
    total = 0
    t0 = time.perf_counter()
    for name in names:
        total += client.stat(f"{STAT_DIR}/{name}").size
    return time.perf_counter() - t0, total


def nfsrs_stat_concurrent(url: str, names: list[str], concurrency: int) -> tuple[float, int]:
    """nfs-rs's asyncio client (it belongs to the loop that made it: connect inside the loop)."""

    async def main() -> tuple[float, int]:
        client = await nfs_rs.AsyncClient.connect(url, uid=0, gid=0)
        try:
            limit = asyncio.Semaphore(concurrency)

            async def one(name: str) -> int:
                async with limit:
                    return (await client.stat(f"{STAT_DIR}/{name}")).size

            t0 = time.perf_counter()
            sizes = await asyncio.gather(*(one(n) for n in names))
            return time.perf_counter() - t0, sum(sizes)
        finally:
            await client.close()

    return asyncio.run(main())


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await trio.to_thread.run_sync(fn, *args)


# -- the run -------------------------------------------------------------------------------------------
async def run(args: argparse.Namespace, target: Target) -> list[Row]:
    size = args.size_mib * MIB
    mb = size / 1e6
    names = stat_names(args.files)
    want_stat = expected_stat_sizes(args.files)
    if target.parent_url is not None:  # someone else's server: make our directory over NFS
        async with Client.connect(target.parent_url) as parent:
            await parent.makedirs(target.remote_dir[len(parent.url.path.rstrip("/")) :])

    log(
        f"bench: {target.description}, directory {target.remote_dir}; {args.size_mib} MiB, {args.files} files"
    )
    data = make_data(size)
    want = sha256_of([data])
    write = Row(f"write {args.size_mib} MiB", "MB/s")
    read = Row(f"read {args.size_mib} MiB", "MB/s")
    stat_seq = Row(f"stat {args.files} files, sequential", "ops/s")
    stat_conc = Row(f"stat {args.files} files, {args.concurrency} in flight", "ops/s")

    client = await in_thread(nfsrs_connect, target.nfsrs_url)
    try:
        async with Client.connect(target.ours_url, rsize=args.rsize, wsize=args.wsize) as nfs:
            if args.in_flight:
                nfs.in_flight = args.in_flight
            log(
                f"bench: ours rsize/wsize {nfs.nfs.maxread}/{nfs.nfs.maxwrite}, {nfs.in_flight} in flight; "
                f"nfs-rs max_read/max_write {client.io_limits.max_read}/{client.io_limits.max_write}"
            )
            for rep in range(args.repeat):
                # take turns, alternating who goes first, so drift on a shared machine hits both alike
                order = ("ours", "nfsrs") if rep % 2 == 0 else ("nfsrs", "ours")
                for who in order:
                    if who == "ours":
                        rate = write.ours.add(mb, await ours_write(nfs, "ours.bin", data))
                    else:
                        rate = write.nfsrs.add(mb, await in_thread(nfsrs_write, client, "nfsrs.bin", data))
                    if target.local_dir is not None:
                        local = target.local_dir / f"{who}.bin"
                        check(f"{who}: file written", await in_thread(sha256_file, local), want)
                    log(f"  write #{rep + 1} {who}: {rate:,.1f} MB/s")
                for who in order:
                    if who == "ours":
                        elapsed, got = await ours_read(nfs, "ours.bin", size)
                        rate = read.ours.add(mb, elapsed)
                    else:
                        buffer = bytearray(size)  # fresh (zeroed) each time, as our reply buffers are
                        elapsed, got = await in_thread(nfsrs_read, client, "nfsrs.bin", buffer)
                        rate = read.nfsrs.add(mb, elapsed)
                    check(f"{who}: data read back", got, want)
                    log(f"  read  #{rep + 1} {who}: {rate:,.1f} MB/s")

            if target.local_dir is not None:
                await in_thread(create_stat_files_on_disk, target.local_dir / STAT_DIR, args.files)
            else:
                await create_stat_files_over_nfs(nfs, args.files, args.concurrency)
            for rep in range(args.repeat):
                order = ("ours", "nfsrs") if rep % 2 == 0 else ("nfsrs", "ours")
                for who in order:
                    if who == "ours":
                        elapsed, total = await ours_stat_sequential(nfs, names)
                        rate = stat_seq.ours.add(len(names), elapsed)
                    else:
                        elapsed, total = await in_thread(nfsrs_stat_sequential, client, names)
                        rate = stat_seq.nfsrs.add(len(names), elapsed)
                    if total != want_stat:
                        raise AssertionError(f"{who}: stat sizes add up to {total}, expected {want_stat}")
                    log(f"  stat  #{rep + 1} {who}: {rate:,.0f} ops/s")
                for who in order:
                    if who == "ours":
                        elapsed, total = await ours_stat_concurrent(nfs, names, args.concurrency)
                        rate = stat_conc.ours.add(len(names), elapsed)
                    else:
                        elapsed, total = await in_thread(
                            nfsrs_stat_concurrent, target.nfsrs_url, names, args.concurrency
                        )
                        rate = stat_conc.nfsrs.add(len(names), elapsed)
                    if total != want_stat:
                        raise AssertionError(f"{who}: stat sizes add up to {total}, expected {want_stat}")
                    log(f"  stat* #{rep + 1} {who}: {rate:,.0f} ops/s")
    finally:
        await in_thread(client.close)
        if target.parent_url is not None:
            with trio.CancelScope(shield=True):
                async with Client.connect(target.parent_url) as parent:
                    await parent.rmtree(target.remote_dir[len(parent.url.path.rstrip("/")) :])
    return [write, read, stat_seq, stat_conc]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--size-mib", type=int, default=256, help="file size for the write and read (default 256)")
    p.add_argument("--files", type=int, default=10000, help="number of files to stat (default 10000)")
    p.add_argument(
        "--url", help="benchmark against this server (nfs://host:port/path) instead of a local one"
    )
    p.add_argument("--repeat", type=int, default=3, help="runs of each measurement per client (default 3)")
    p.add_argument("--concurrency", type=int, default=32, help="stats in flight in the concurrent run")
    p.add_argument("--in-flight", type=int, default=0, help="our READs/WRITEs in flight (default: the API's)")
    p.add_argument("--rsize", type=int, default=MIB, help="our rsize (default 1 MiB)")
    p.add_argument("--wsize", type=int, default=MIB, help="our wsize (default 1 MiB)")
    p.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = p.parse_args(argv)
    if args.size_mib < 1 or args.files < 1 or args.repeat < 1 or args.concurrency < 1:
        p.error("--size-mib, --files, --repeat and --concurrency must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    with bench_target(args.url) as target:
        rows = trio.run(run, args, target)
    print(format_table(rows))
    print(f"(best and median of {args.repeat} runs; ratio of the best runs, above 1 means ours is faster)")
    if args.json:
        print(
            json_line(
                rows,
                size_mib=args.size_mib,
                files=args.files,
                repeat=args.repeat,
                concurrency=args.concurrency,
                server=target.description,
                nfs_rs_version=nfs_rs.__version__,
                cpus=os.cpu_count(),
            )
        )
    log(f"bench: done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
