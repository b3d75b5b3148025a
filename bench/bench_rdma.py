"""READ and WRITE over RPC-over-RDMA (software provider, through the responder) beside TCP.

    .venv/bin/python bench/bench_rdma.py [--size-mib 64] [--runs 3] [--credits 32] [--inline 4096] [--json]

Starts its own NFS-Ganesha (the testbed) and an RPC-over-RDMA responder in this process (software
provider over loopback, forwarding to Ganesha over TCP). The same client API runs over both paths:
``proto=tcp`` straight to Ganesha, ``proto=rdma`` through the responder. Per run: a SIZE file
written from memory (``File.pwrite`` + close) and read back (``File.pread_views``, zero copy), each
checked by sha256 (the write on the server's disk, the read on what came back).

Reported: throughput best (median) per path, and for RDMA the operations per NFS call of each
kind: RDMA Reads (WRITE data pulled from Read chunks), RDMA Writes (READ data placed in Write
chunks), Sends, and how many of those Sends were Send With Invalidate (remote invalidation of the
call's Write or Reply chunk registration, RFC 8797). The software provider emulates RDMA over a
TCP socket in Python, so its figures measure this implementation's overhead, not an RDMA fabric.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
from dataclasses import dataclass, field

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.rdma_responder import ConnectionStats, serve_rdma
from pynfsrdma._transport.rdma.soft import SoftProvider

MIB = 1 << 20


@dataclass
class Result:
    path: str
    op: str
    rates: list[float] = field(default_factory=list)  # MB/s
    calls: int = 0
    rdma_reads: int = 0
    rdma_writes: int = 0
    sends: int = 0
    sends_with_invalidate: int = 0

    def per_call(self, n: int) -> str:
        return f"{n / self.calls:.2f}" if self.calls else "-"

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "op": self.op,
            "best_mbps": round(max(self.rates), 1),
            "median_mbps": round(statistics.median(self.rates), 1),
            "samples": [round(r, 1) for r in self.rates],
            "calls": self.calls,
            "rdma_reads_per_call": self.rdma_reads / self.calls if self.calls else None,
            "rdma_writes_per_call": self.rdma_writes / self.calls if self.calls else None,
            "sends_per_call": self.sends / self.calls if self.calls else None,
            "sends_with_invalidate_per_call": self.sends_with_invalidate / self.calls if self.calls else None,
        }


def _delta(after: ConnectionStats, before: ConnectionStats, name: str) -> int:
    return int(getattr(after, name)) - int(getattr(before, name))


async def _run_path(
    path: str, url: str, data: bytes, runs: int, local_dir: str, responder: object
) -> list[Result]:
    write = Result(path, "WRITE")
    read = Result(path, "READ")
    want = hashlib.sha256(data).hexdigest()
    async with Client.connect(url) as nfs:
        for i in range(runs):
            name = f"/{path}-{i}"
            before = responder.stats if responder is not None else None  # type: ignore[attr-defined]
            t0 = trio.current_time()
            async with await nfs.open(name, "w") as f:
                await f.pwrite(0, data)
            write.rates.append(len(data) / (trio.current_time() - t0) / 1e6)
            mid = responder.stats if responder is not None else None  # type: ignore[attr-defined]
            with open(os.path.join(local_dir, name.lstrip("/")), "rb") as disk:
                if hashlib.sha256(disk.read()).hexdigest() != want:
                    raise AssertionError(f"{path} WRITE: data on the server differs")
            t0 = trio.current_time()
            async with await nfs.open(name, "r") as f:
                views, _ = await f.pread_views(0, len(data))
            read.rates.append(len(data) / (trio.current_time() - t0) / 1e6)
            after = responder.stats if responder is not None else None  # type: ignore[attr-defined]
            h = hashlib.sha256()
            for v in views:
                h.update(v)
            if h.hexdigest() != want:
                raise AssertionError(f"{path} READ: data read back differs")
            if before is not None and mid is not None and after is not None:
                for res, a, b in ((write, mid, before), (read, after, mid)):
                    res.calls += _delta(a, b, "calls")
                    res.rdma_reads += _delta(a, b, "rdma_reads")
                    res.rdma_writes += _delta(a, b, "rdma_writes")
                    res.sends += _delta(a, b, "sends")
                    res.sends_with_invalidate += _delta(a, b, "sends_with_invalidate")
            await nfs.remove(name)
    return [write, read]


def format_table(results: list[Result]) -> str:
    header = (
        "path", "op", "best (median) MB/s", "calls", "RDMA Read/call", "RDMA Write/call", "Send/call",
        "SendInv/call",
    )  # fmt: skip
    rows = [header]
    for r in results:
        rows.append(
            (
                r.path,
                r.op,
                f"{max(r.rates):,.1f} ({statistics.median(r.rates):,.1f})",
                str(r.calls) if r.calls else "-",
                r.per_call(r.rdma_reads),
                r.per_call(r.rdma_writes),
                r.per_call(r.sends),
                r.per_call(r.sends_with_invalidate),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        lines.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[Result]:
    data = os.urandom(args.size_mib * MIB)
    with Ganesha() as server:
        d = server.new_directory(prefix="bench-rdma-")
        async with trio.open_nursery() as nursery:
            responder = await serve_rdma(
                nursery, SoftProvider(), "127.0.0.1", 0, server.host, server.port,
                credits=args.credits, inline_size=args.inline,
            )  # fmt: skip
            tcp_url = f"nfs://{server.host}:{server.port}{d.remote}"
            rdma_url = (
                f"nfs://127.0.0.1:{responder.port}{d.remote}?proto=rdma&provider=soft&inline={args.inline}"
            )
            results = await _run_path("tcp", tcp_url, data, args.runs, str(d.local), None)
            results += await _run_path("rdma", rdma_url, data, args.runs, str(d.local), responder)
            await responder.aclose()
            nursery.cancel_scope.cancel()
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--credits", type=int, default=32)
    ap.add_argument("--inline", type=int, default=4096)
    ap.add_argument("--json", action="store_true", help="one JSON line instead of the table")
    args = ap.parse_args(argv)
    results = trio.run(main_async, args)
    if args.json:
        print(
            json.dumps({"size_mib": args.size_mib, "runs": args.runs, "rows": [r.as_dict() for r in results]})
        )
    else:
        print(f"{args.size_mib} MiB, {args.runs} runs; RDMA = software provider through the responder\n")
        print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
