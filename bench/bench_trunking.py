"""Trunking over links: sequential write and read of one file over 1..4 paths of the same rate and over
unequal rates, each against the sum of the link rates.

    .venv/bin/python -m bench.bench_trunking [--rate 40] [--unequal 40,20,10,10] [--paths 1,2,3,4]
                                             [--size-mib 128] [--repeat 3] [--json]

Each layout is a link testbed (``pynfsrdma testbed up --paths N --link-rate ...``: NFS-Ganesha in a
network namespace of its own, each path a kernel rate limit; root). The client runs inside the
namespace, mounts the first path and finds the others by trunking discovery; it writes the file
(closing it: the data is on the server) and reads it back, ``--repeat`` times, and checks the data by
sha256 every time. The first row, over 127.0.0.1 in the namespace through no link at all, is what the
client and the server make of this machine's CPUs: no layout can go above it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[1]


# -- inside the namespace ---------------------------------------------------------------------------


async def _client(url: str, paths: int, size: int, repeat: int) -> dict[str, Any]:
    from pynfsrdma.client.api import Client
    from pynfsrdma.session.path_set import PathState

    data = os.urandom(size)
    digest = hashlib.sha256(data).digest()
    writes: list[float] = []
    reads: list[float] = []
    async with Client.connect(url, hard=True, timeo=60) as nfs:
        if nfs.trunking is not None:
            with trio.fail_after(20):
                await nfs.trunking.settled.wait()
                while len([p for p in nfs.trunking.paths.paths if p.state is PathState.UP]) < paths:
                    await nfs.trunking.paths.wait_changed()
        for i in range(repeat):
            name = f"/bench-{os.getpid()}-{i}"
            t = time.perf_counter()
            async with await nfs.open(name, "w") as f:
                await f.write(data)
            writes.append(size / (time.perf_counter() - t) / 1e6)
            t = time.perf_counter()
            back = await nfs.read_file(name)
            reads.append(size / (time.perf_counter() - t) / 1e6)
            if hashlib.sha256(back).digest() != digest:
                raise AssertionError("the data read back differ from the data written")
            await nfs.remove(name)
    return {"write_MBps": writes, "read_MBps": reads}


def client_main(args: argparse.Namespace) -> int:
    report = trio.run(_client, args.client, args.client_paths, args.size_mib * MIB, args.repeat)
    json.dump(report, sys.stdout)
    return 0


# -- outside: one link testbed per layout ---------------------------------------------------------


def run_layout(rates: list[float] | None, size_mib: int, repeat: int) -> dict[str, Any]:
    """``rates`` None: one path to 127.0.0.1 of a one-link testbed's namespace, through no link."""
    from pynfsrdma.testbed import daemon

    state_dir = Path(tempfile.mkdtemp(prefix="bt-", dir="/tmp"))
    try:
        link_rates = ",".join(f"{r:g}" for r in (rates or [1000.0]))
        state, _ = daemon.up(state_dir, paths=len(rates or [0]), link_rates=link_rates)
        url, paths = (state["url"], len(rates)) if rates else (state["direct_url"], 1)
        done = subprocess.run(
            [*state["client_prefix"], sys.executable, "-m", "bench.bench_trunking", "--client", url,
             "--client-paths", str(paths), "--size-mib", str(size_mib), "--repeat", str(repeat)],
            cwd=REPO, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"the client failed: {done.stderr[-2000:]}")
        report: dict[str, Any] = json.loads(done.stdout)
    finally:
        daemon.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    total = sum(rates) if rates else None
    row: dict[str, Any] = {
        "layout": "no link (127.0.0.1): the CPU limit" if rates is None else f"{len(rates)} x "
        + ("/".join(f"{r:g}" for r in rates) if len(set(rates)) > 1 else f"{rates[0]:g}")
        + " MB/s",
        "links_MBps": total,
    }
    for op in ("write", "read"):
        samples = report[f"{op}_MBps"]
        row[f"{op}_best"] = round(max(samples), 1)
        row[f"{op}_median"] = round(statistics.median(samples), 1)
        row[f"{op}_samples"] = [round(s, 1) for s in samples]
        if total:
            row[f"{op}_of_links"] = round(max(samples) / total, 2)
    return row


def format_rows(rows: list[dict[str, Any]]) -> str:
    head = ["layout", "links MB/s", "write best", "median", "x links", "read best", "median", "x links"]
    lines = [head]
    for r in rows:
        lines.append([
            r["layout"], f"{r['links_MBps']:g}" if r["links_MBps"] else "-",
            f"{r['write_best']:.1f}", f"{r['write_median']:.1f}", f"{r.get('write_of_links', 0):.2f}",
            f"{r['read_best']:.1f}", f"{r['read_median']:.1f}", f"{r.get('read_of_links', 0):.2f}",
        ])  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_trunking", description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--rate", type=float, default=40.0, help="MB/s of each link in the equal layouts")
    p.add_argument("--unequal", default="40,20,10,10", help="MB/s per link of the unequal layout ('' for none)")
    p.add_argument("--paths", default="1,2,3,4", help="numbers of equal links to measure")
    p.add_argument("--size-mib", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)  # (the run inside a namespace)
    p.add_argument("--client-paths", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.client:
        return client_main(args)
    from pynfsrdma.testbed.netns import missing_tools

    why = missing_tools()
    if why is not None:
        print(f"bench_trunking: {why}", file=sys.stderr)
        return 2
    layouts: list[list[float] | None] = [None]
    layouts += [[args.rate] * int(n) for n in args.paths.split(",") if n]
    if args.unequal:
        layouts.append([float(r) for r in args.unequal.split(",")])
    rows = []
    for rates in layouts:
        rows.append(run_layout(rates, args.size_mib, args.repeat))
        if not args.json:
            print(format_rows(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"size_mib": args.size_mib, "repeat": args.repeat, "rows": rows}))
    else:
        print(format_rows(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
