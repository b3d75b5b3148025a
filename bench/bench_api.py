"""Our scripted-access API against nfs-rs, in the same run and against the same server.

    .venv/bin/python bench/bench_api.py [--size-mib 256] [--files 10000] [--url URL] [--json]

Without ``--url`` it starts its own NFS-Ganesha (the testbed) on loopback. Measured, each a few times
with the two clients taking turns (best and median reported):

- write of a SIZE file from memory: ours ``open("w")`` + ``File.pwrite(0, data)`` + ``close()``
  (wsize UNSTABLE WRITEs, ``window`` at once, then COMMIT); nfs-rs ``open("wb")`` +
  ``File.write_at(data, 0)`` (its 8 concurrent UNSTABLE WRITEs and COMMIT) + close;
- read of it back into memory: ours ``File.pread_views(0, SIZE)`` (views of the reply buffers, no
  copy); nfs-rs ``File.readinto_at(buffer, 0)`` into a buffer allocated inside the timing (one
  copy) -- both start with no memory for the data and end with all of it in memory;
- put, a local file to NFS: ours ``Client.put``; nfs-rs ``write_at`` of 64 MiB pieces read from the
  file (nfs-rs makes each call durable; ours commits every 32 MiB, the open-file engine's window);
- get, NFS to a local file: ours ``Client.get`` (reply buffers written to the file with pwrite);
  nfs-rs ``readinto_at`` into one reused 8 MiB buffer + pwrite (its guide's advice);
- stat of N files (created on the server's disk beforehand), one after the other: ours
  ``Client.stat``, nfs-rs ``Client.stat``;
- the same N stats with C of them in flight: ours with trio tasks, nfs-rs ``AsyncClient.stat``
  with asyncio tasks.

Every write and put is checked (sha256 of the file on the server's disk when the server is local,
else read back), every read and get (sha256 of what came back) and every stat (the sizes). Timings cover open to close and exclude
the checks. nfs-rs is synchronous Rust: its calls run in a worker thread so that our client's
connection (lease renewal, callbacks) stays served meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
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
from pynfsrdma._client.api import Client

STAT_DIR = "stat"
PUT_CHUNK = 64 * MIB  # = our COMMIT window (pynfsrdma._client.api.COMMIT_WINDOW)
GET_CHUNK = 8 * MIB  # = our default window (rsize x window)
NFSRS_ATTEMPTS = 3


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
    await nfs.makedirs("/" + STAT_DIR, exist_ok=True)
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


async def ours_put(nfs: Client, local: Path, name: str) -> float:
    t0 = time.perf_counter()
    await nfs.put(str(local), "/" + name)
    return time.perf_counter() - t0


async def ours_get(nfs: Client, name: str, local: Path) -> float:
    t0 = time.perf_counter()
    await nfs.get("/" + name, str(local))
    return time.perf_counter() - t0


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


def nfsrs_read(client: nfs_rs.Client, name: str, size: int) -> tuple[float, str]:
    """Into a buffer allocated here, inside the timing: like ours, it starts with no memory for the
    data (our READ replies land in buffers allocated as they arrive)."""
    t0 = time.perf_counter()
    buffer = bytearray(size)
    with client.open(name, "rb") as f:
        n = f.readinto_at(buffer, 0)
    elapsed = time.perf_counter() - t0
    if n != size:
        raise AssertionError(f"nfs-rs: read {n} bytes of {size}")
    return elapsed, sha256_of([buffer])


def nfsrs_put(client: nfs_rs.Client, local: Path, name: str) -> float:
    """Local file to NFS in PUT_CHUNK pieces (each write_at call is made durable by nfs-rs before it
    returns; the piece is the same as our COMMIT window, so both commit equally often)."""
    t0 = time.perf_counter()
    with open(local, "rb", buffering=0) as src, client.open(name, "wb") as f:
        offset = 0
        while chunk := src.read(PUT_CHUNK):
            offset += f.write_at(chunk, offset)
    return time.perf_counter() - t0


def nfsrs_get(client: nfs_rs.Client, name: str, local: Path) -> float:
    """NFS to a local file through one reused GET_CHUNK buffer (as nfs-rs's guide advises)."""
    t0 = time.perf_counter()
    buffer = bytearray(GET_CHUNK)
    view = memoryview(buffer)
    fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with client.open(name, "rb") as f:
            offset = 0
            while n := f.readinto_at(buffer, offset):
                done = 0
                while done < n:
                    done += os.pwrite(fd, view[done:n], offset + done)
                offset += n
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def nfsrs_stat_sequential(url: str, names: list[str]) -> tuple[float, int]:
    """nfs-rs's blocking client, connected for this measurement (as the concurrent one is), so that a
    measurement run again after nfs-rs gave up starts from a session of its own: a client whose slot
    nfs-rs lost track of (NFS4ERR_RETRY_UNCACHED_REP) failed every try after."""
    client = nfsrs_connect(url)
    try:
        total = 0
        t0 = time.perf_counter()
        for name in names:
            total += client.stat(f"{STAT_DIR}/{name}").size
        return time.perf_counter() - t0, total
    finally:
        client.close()


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


async def nfsrs_call(fn: Callable[..., Any], *args: Any) -> Any:
    """Run an nfs-rs measurement in a worker thread. Under load nfs-rs sometimes hands a transient
    failure to the caller (NfsRetryableError, or NfsUncertainOutcomeError for a WRITE) instead of
    retrying itself: the whole measurement is then run again, timed afresh, and the failure logged."""
    for attempt in range(1, NFSRS_ATTEMPTS + 1):
        try:
            return await in_thread(fn, *args)
        except (nfs_rs.NfsRetryableError, nfs_rs.NfsUncertainOutcomeError) as e:
            # both leave nothing to undo here: every measurement rewrites or rereads a whole file
            if attempt == NFSRS_ATTEMPTS:
                raise
            detail = ", ".join(
                f"{k}={getattr(e, k)!r}"
                for k in ("code_name", "operation", "completed_bytes")
                if hasattr(e, k)
            )
            log(f"  nfs-rs {fn.__name__}: {e!r} ({detail}; cause {e.__cause__!r}); measuring again")
            await trio.sleep(0.1 * attempt)
    raise AssertionError("unreachable")


# -- the run -------------------------------------------------------------------------------------------
def turns(rep: int) -> tuple[str, str]:
    """Who goes first alternates, so drift on a shared machine hits both clients alike."""
    return ("ours", "nfsrs") if rep % 2 == 0 else ("nfsrs", "ours")


class Transfers:
    """The data transfers: both clients on the same directory, taking turns."""

    def __init__(
        self, args: argparse.Namespace, target: Target, nfs: Client, client: nfs_rs.Client, scratch: Path
    ) -> None:
        self.args = args
        self.target = target
        self.nfs = nfs
        self.client = client
        self.scratch = scratch  # local files for put/get
        self.size = args.size_mib * MIB
        self.data = make_data(self.size)
        self.want = sha256_of([self.data])
        self.source = scratch / "source.bin"
        self.source.write_bytes(self.data)

    async def check_remote(self, who: str, name: str) -> None:
        """What a client wrote is on the server: read on the server's disk when it is ours, else
        read back through our client (untimed)."""
        if self.target.local_dir is not None:
            got = await in_thread(sha256_file, self.target.local_dir / name)
        else:
            _, got = await ours_read(self.nfs, name, self.size)
        check(f"{who}: {name} as written", got, self.want)

    async def run(self) -> list[Row]:
        mib, mb = self.args.size_mib, self.size / 1e6
        write = Row(f"write {mib} MiB from memory", "MB/s")
        read = Row(f"read {mib} MiB into memory", "MB/s")
        put = Row(f"put {mib} MiB (local file to NFS)", "MB/s")
        get = Row(f"get {mib} MiB (NFS to local file)", "MB/s")
        nfs, client = self.nfs, self.client
        for rep in range(self.args.repeat):
            for who in turns(rep):
                name = f"{who}-mem.bin"
                if who == "ours":
                    rate = write.ours.add(mb, await ours_write(nfs, name, self.data))
                else:
                    rate = write.nfsrs.add(mb, await nfsrs_call(nfsrs_write, client, name, self.data))
                await self.check_remote(who, name)
                log(f"  write #{rep + 1} {who}: {rate:,.1f} MB/s")
            for who in turns(rep):
                name = f"{who}-mem.bin"
                if who == "ours":
                    elapsed, got = await ours_read(nfs, name, self.size)
                    rate = read.ours.add(mb, elapsed)
                else:
                    elapsed, got = await nfsrs_call(nfsrs_read, client, name, self.size)
                    rate = read.nfsrs.add(mb, elapsed)
                check(f"{who}: {name} read back", got, self.want)
                log(f"  read  #{rep + 1} {who}: {rate:,.1f} MB/s")
            for who in turns(rep):
                name = f"{who}-file.bin"
                if who == "ours":
                    rate = put.ours.add(mb, await ours_put(nfs, self.source, name))
                else:
                    rate = put.nfsrs.add(mb, await nfsrs_call(nfsrs_put, client, self.source, name))
                await self.check_remote(who, name)
                log(f"  put   #{rep + 1} {who}: {rate:,.1f} MB/s")
            for who in turns(rep):
                name = f"{who}-file.bin"
                local = self.scratch / f"{who}-got.bin"
                if who == "ours":
                    rate = get.ours.add(mb, await ours_get(nfs, name, local))
                else:
                    rate = get.nfsrs.add(mb, await nfsrs_call(nfsrs_get, client, name, local))
                check(f"{who}: {name} copied to {local}", await in_thread(sha256_file, local), self.want)
                local.unlink()
                log(f"  get   #{rep + 1} {who}: {rate:,.1f} MB/s")
        return [write, read, put, get]


async def stat_rows(args: argparse.Namespace, target: Target, nfs: Client) -> list[Row]:
    names = stat_names(args.files)
    want = expected_stat_sizes(args.files)
    if target.local_dir is not None:
        await in_thread(create_stat_files_on_disk, target.local_dir / STAT_DIR, args.files)
    else:
        await create_stat_files_over_nfs(nfs, args.files, args.concurrency)
    seq = Row(f"stat {args.files} files, sequential", "ops/s")
    conc = Row(f"stat {args.files} files, {args.concurrency} in flight", "ops/s")
    for rep in range(args.repeat):
        for who in turns(rep):
            if who == "ours":
                elapsed, total = await ours_stat_sequential(nfs, names)
                rate = seq.ours.add(len(names), elapsed)
            else:
                elapsed, total = await nfsrs_call(nfsrs_stat_sequential, target.nfsrs_url, names)
                rate = seq.nfsrs.add(len(names), elapsed)
            if total != want:
                raise AssertionError(f"{who}: stat sizes add up to {total}, expected {want}")
            log(f"  stat  #{rep + 1} {who}: {rate:,.0f} ops/s")
        for who in turns(rep):
            if who == "ours":
                elapsed, total = await ours_stat_concurrent(nfs, names, args.concurrency)
                rate = conc.ours.add(len(names), elapsed)
            else:
                elapsed, total = await nfsrs_call(
                    nfsrs_stat_concurrent, target.nfsrs_url, names, args.concurrency
                )
                rate = conc.nfsrs.add(len(names), elapsed)
            if total != want:
                raise AssertionError(f"{who}: stat sizes add up to {total}, expected {want}")
            log(f"  stat* #{rep + 1} {who}: {rate:,.0f} ops/s")
    return [seq, conc]


async def run(args: argparse.Namespace, target: Target) -> list[Row]:
    if target.parent_url is not None:  # someone else's server: make our directory over NFS
        async with Client.connect(target.parent_url) as parent:
            await parent.makedirs(target.remote_dir[len(parent.url.path.rstrip("/")) :], exist_ok=True)
    log(
        f"bench: {target.description}, directory {target.remote_dir}; {args.size_mib} MiB, {args.files} files"
    )
    client = await in_thread(nfsrs_connect, target.nfsrs_url)
    try:
        async with Client.connect(target.ours_url, rsize=args.rsize, wsize=args.wsize) as nfs:
            if args.in_flight:
                nfs.window = args.in_flight
            log(
                f"bench: ours rsize/wsize {nfs.nfs.maxread}/{nfs.nfs.maxwrite}, {nfs.io_window(nfs.nfs.maxread)} in flight; "
                f"nfs-rs max_read/max_write {client.io_limits.max_read}/{client.io_limits.max_write}"
            )
            with tempfile.TemporaryDirectory(prefix="pynfsrdma-bench-") as scratch:
                rows = await Transfers(args, target, nfs, client, Path(scratch)).run()
            rows += await stat_rows(args, target, nfs)
    finally:
        await in_thread(client.close)
        if target.parent_url is not None:
            with trio.CancelScope(shield=True):
                async with Client.connect(target.parent_url) as parent:
                    await parent.rmtree(target.remote_dir[len(parent.url.path.rstrip("/")) :])
    return rows


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
