"""READ and WRITE over RPC-over-RDMA (software provider, through the responder) beside TCP.

    .venv/bin/python bench/bench_rdma.py [--size-mib 64] [--runs 3] [--warmup 1] [--credits 32]
                                         [--inline 4096] [--responder-process] [--json]

Starts its own NFS-Ganesha (the testbed) and an RPC-over-RDMA responder (software provider over
loopback, forwarding to Ganesha over TCP), in this process or, with ``--responder-process``, in one
of its own, as Ganesha is (the client and the responder then share no core's time). The same client API runs over both paths:
``proto=tcp`` straight to Ganesha, ``proto=rdma`` through the responder. Per run: a SIZE file
written from memory (``File.pwrite`` + close) and read back (``File.pread_views``, zero copy), each
checked by sha256 (the write on the server's disk, the read on what came back). Four paths, their
runs taken in turn (one round of each, then the next round) so that a busy host slows them alike,
after ``--warmup`` rounds of the same that are not counted: a client's first rounds touch fresh
memory for what it reads (about 16,000 minor page faults per 64 MiB of TCP replies, one a page, until the
allocator keeps the pages; the RDMA path's sinks come from a pool), and a path measured in that
state is measured against another that is past it (``faults/MiB``: this process's minor page
faults per MiB moved, median):
``tcp``; ``tcp-hop``, TCP through the testbed's TCP proxy placed as the responder is (in this
process, or with ``--responder-process`` in one of its own): the same extra hop for every byte
without RPC-over-RDMA, so that RDMA / tcp-hop is what our RDMA code costs beyond the hop; ``rdma``,
whose chunk memory stays registered and is reached through a memory window per call; and
``rdma-pinned0``, the same with ``pinned=0``: every chunk registered for its call, as before chunk
memory was kept (the Sends come from registered buffers on both).

Reported: throughput best (median) per path and this process's CPU time per MiB moved (median;
with ``--responder-process`` that is the client alone, without it the responder and proxy too);
for RDMA, ``dev ms/MiB``: the part of it the client's software provider spent as the device, carrying
out the responder's RDMA Reads and Writes of the client's memory (checks, copies, loans: what a
NIC's DMA engine does without the host's CPU; ``ProviderCounters.device_ns``), so that the client's
own CPU per MiB is the difference;
with ``--responder-process`` also the CPU time per MiB of the process in the middle (``hop CPU``:
the responder's for ``rdma``, the proxy's for ``tcp-hop``; user + system time from
``/proc/PID/stat``, in clock ticks of 10 ms: 0.16 ms/MiB at 64 MiB),
then ``rdma`` over ``tcp`` and over ``tcp-hop``: ``rdma / tcp-hop`` is the like-with-like ratio
(the same extra process for every byte), ``rdma / tcp`` counts that hop against RDMA. For RDMA also
the operations per NFS call of each
kind: RDMA Reads (WRITE data pulled from Read chunks), RDMA Writes (READ data placed in Write
chunks), Sends, and how many of those Sends were Send With Invalidate (remote invalidation of the
call's Write or Reply chunk registration, RFC 8797); and from the client's provider: memory
registrations, memory windows bound and bytes the provider copied, per call (the measured rounds:
zero registrations per call once warm), and the reads and writes of its socket per call (``sock
rd/call``, ``sock wr/call``: system calls, reads that found the socket empty included): the
software provider's per-frame cost as counts, steadier than times on a loaded host. The software
provider emulates RDMA over a TCP socket in Python, so its figures measure this implementation's overhead, not an RDMA fabric.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import hashlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import trio

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.procs import wait_pid_gone
from pynfsrdma._testbed.proxy import Proxy
from pynfsrdma._testbed.rdma_responder import ConnectionStats, Responder, serve_rdma, start_responder_process
from pynfsrdma._transport.rdma.provider import ProviderCounters
from pynfsrdma._transport.rdma.soft import SoftProvider
from pynfsrdma._transport.rdma.transport import RdmaTransport

MIB = 1 << 20


@dataclass
class Result:
    path: str
    op: str
    rates: list[float] = field(default_factory=list)  # MB/s
    cpu_ms_per_mib: list[float] = field(default_factory=list)  # this process's CPU time per MiB moved
    faults_per_mib: list[float] = field(default_factory=list)  # this process's minor page faults
    hop_cpu_ms_per_mib: list[float] = field(default_factory=list)  # the responder's or proxy's process
    device_ms_per_mib: list[float] = field(default_factory=list)  # of this process's, the emulated NIC's
    calls: int = 0
    rdma_reads: int = 0
    rdma_writes: int = 0
    sends: int = 0
    sends_with_invalidate: int = 0
    responder_counted: bool = False  # the responder's columns were measured (in this process)
    registrations: int = 0  # the client provider's
    binds: int = 0
    bytes_copied: int = 0
    frame_reads: int = 0  # the client provider's reads and writes of its socket (system calls)
    frame_writes: int = 0

    def per_call(self, n: int, responder: bool = False) -> str:
        return f"{n / self.calls:.2f}" if self.calls and (self.responder_counted or not responder) else "-"

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "op": self.op,
            "best_mbps": round(max(self.rates), 1),
            "median_mbps": round(statistics.median(self.rates), 1),
            "samples": [round(r, 1) for r in self.rates],
            "cpu_ms_per_mib": round(statistics.median(self.cpu_ms_per_mib), 2),
            "faults_per_mib": round(statistics.median(self.faults_per_mib), 1),
            "hop_cpu_ms_per_mib": (
                round(statistics.median(self.hop_cpu_ms_per_mib), 2) if self.hop_cpu_ms_per_mib else None
            ),
            "device_cpu_ms_per_mib": (
                round(statistics.median(self.device_ms_per_mib), 2) if self.device_ms_per_mib else None
            ),
            "calls": self.calls,
            "rdma_reads_per_call": self.rdma_reads / self.calls if self.calls else None,
            "rdma_writes_per_call": self.rdma_writes / self.calls if self.calls else None,
            "sends_per_call": self.sends / self.calls if self.calls else None,
            "sends_with_invalidate_per_call": self.sends_with_invalidate / self.calls if self.calls else None,
            "registrations_per_call": self.registrations / self.calls if self.calls else None,
            "binds_per_call": self.binds / self.calls if self.calls else None,
            "bytes_copied_per_call": self.bytes_copied / self.calls if self.calls else None,
            "frame_reads_per_call": self.frame_reads / self.calls if self.calls else None,
            "frame_writes_per_call": self.frame_writes / self.calls if self.calls else None,
        }


def _delta(after: ConnectionStats, before: ConnectionStats, name: str) -> int:
    return int(getattr(after, name)) - int(getattr(before, name))


def _client_counters(nfs: Client) -> tuple[ProviderCounters, int] | None:
    """The client provider's counters and the transport's calls so far (None over TCP)."""
    path = nfs.clientid.paths.paths[0]
    t = path.rpc.transport if path.rpc is not None else None
    return (dataclasses.replace(t.conn.counters), t.stats.calls) if isinstance(t, RdmaTransport) else None


def minor_faults() -> int:
    """Minor page faults of this process so far (each a page of memory touched for the first time)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def keep_freed_memory() -> None:
    """Have glibc's allocator keep what this process frees (no trim, no mmap per MiB buffer): the
    paths' reply buffers then land in memory touched before, whatever ran in between. Without it,
    a TCP READ run faults in fresh pages for its replies or not by the allocator's state after the
    runs before it, and that alone doubled one run in three."""
    libc = ctypes.CDLL(None)
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    libc.mallopt(m_mmap_threshold, 32 * MIB)  # glibc's largest: 1 MiB replies come from the heap
    libc.mallopt(m_trim_threshold, 1 << 30)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _round(
    nfs: Client, path: str, i: int, data: bytes, local_dir: str, responder: Responder | None,
    write: Result, read: Result, hop_pid: int | None = None,
) -> None:  # fmt: skip
    want = hashlib.sha256(data).hexdigest()
    name = f"/{path}-{i}"
    before = responder.stats if responder is not None else None
    c0 = _client_counters(nfs)
    mib = len(data) / MIB
    h0 = process_cpu(hop_pid) if hop_pid is not None else 0.0
    t0, p0, f0 = trio.current_time(), time.process_time(), minor_faults()
    async with await nfs.open(name, "w") as f:
        await f.pwrite(0, data)
    write.rates.append(len(data) / (trio.current_time() - t0) / 1e6)
    write.cpu_ms_per_mib.append((time.process_time() - p0) * 1e3 / mib)
    write.faults_per_mib.append((minor_faults() - f0) / mib)
    if hop_pid is not None:
        h1 = process_cpu(hop_pid)
        write.hop_cpu_ms_per_mib.append((h1 - h0) * 1e3 / mib)
    mid = responder.stats if responder is not None else None
    c1 = _client_counters(nfs)
    with open(os.path.join(local_dir, name.lstrip("/")), "rb") as disk:
        if hashlib.sha256(disk.read()).hexdigest() != want:
            raise AssertionError(f"{path} WRITE: data on the server differs")
    t0, p0, f0 = trio.current_time(), time.process_time(), minor_faults()
    async with await nfs.open(name, "r") as f:
        views, _ = await f.pread_views(0, len(data))
    read.rates.append(len(data) / (trio.current_time() - t0) / 1e6)
    read.cpu_ms_per_mib.append((time.process_time() - p0) * 1e3 / mib)
    read.faults_per_mib.append((minor_faults() - f0) / mib)
    if hop_pid is not None:
        read.hop_cpu_ms_per_mib.append((process_cpu(hop_pid) - h1) * 1e3 / mib)
    after = responder.stats if responder is not None else None
    c2 = _client_counters(nfs)
    h = hashlib.sha256()
    for v in views:
        h.update(v)
    if h.hexdigest() != want:
        raise AssertionError(f"{path} READ: data read back differs")
    if before is not None and mid is not None and after is not None:
        for res, a, b in ((write, mid, before), (read, after, mid)):
            res.responder_counted = True
            res.rdma_reads += _delta(a, b, "rdma_reads")
            res.rdma_writes += _delta(a, b, "rdma_writes")
            res.sends += _delta(a, b, "sends")
            res.sends_with_invalidate += _delta(a, b, "sends_with_invalidate")
    if c0 is not None and c1 is not None and c2 is not None:
        for res, (ca, na), (cb, nb) in ((write, c1, c0), (read, c2, c1)):
            res.calls += na - nb
            res.registrations += ca.registrations - cb.registrations
            res.binds += ca.binds - cb.binds
            res.bytes_copied += ca.bytes_copied - cb.bytes_copied
            res.frame_reads += ca.frame_reads - cb.frame_reads
            res.frame_writes += ca.frame_writes - cb.frame_writes
            res.device_ms_per_mib.append((ca.device_ns - cb.device_ns) / 1e6 / mib)
    await nfs.remove(name)


def format_table(results: list[Result]) -> str:
    header = (
        "path", "op", "best (median) MB/s", "CPU ms/MiB", "dev ms/MiB", "faults/MiB", "hop CPU ms/MiB", "calls", "RDMA Read/call", "RDMA Write/call", "Send/call",
        "SendInv/call", "reg/call", "bind/call", "copied B/call", "sock rd/call", "sock wr/call",
    )  # fmt: skip
    rows = [header]
    for r in results:
        rows.append(
            (
                r.path,
                r.op,
                f"{max(r.rates):,.1f} ({statistics.median(r.rates):,.1f})",
                f"{statistics.median(r.cpu_ms_per_mib):.2f}",
                f"{statistics.median(r.device_ms_per_mib):.2f}" if r.device_ms_per_mib else "-",
                f"{statistics.median(r.faults_per_mib):.0f}",
                f"{statistics.median(r.hop_cpu_ms_per_mib):.2f}" if r.hop_cpu_ms_per_mib else "-",
                str(r.calls) if r.calls else "-",
                r.per_call(r.rdma_reads, True),
                r.per_call(r.rdma_writes, True),
                r.per_call(r.sends, True),
                r.per_call(r.sends_with_invalidate, True),
                r.per_call(r.registrations),
                r.per_call(r.binds),
                r.per_call(r.bytes_copied),
                r.per_call(r.frame_reads),
                r.per_call(r.frame_writes),
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


def ratios(results: list[Result]) -> dict[str, dict[str, tuple[float, float]]]:
    """``rdma`` over ``tcp`` and over ``tcp-hop``, per operation: (best, median).

    ``rdma / tcp-hop`` is the like-with-like ratio: both carry every byte through one more process
    (the responder, the proxy) on its way to Ganesha, which only speaks TCP; ``rdma / tcp`` also
    counts that hop against RDMA."""
    by = {(r.path, r.op): r for r in results}
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for base in ("tcp", "tcp-hop"):
        for op in ("WRITE", "READ"):
            a, b = by.get(("rdma", op)), by.get((base, op))
            if a is None or b is None:
                continue
            out.setdefault(f"rdma/{base}", {})[op] = (
                max(a.rates) / max(b.rates),
                statistics.median(a.rates) / statistics.median(b.rates),
            )
    return out


def format_ratios(results: list[Result]) -> str:
    lines = []
    for name, ops in ratios(results).items():
        parts = [f"{op} {best:.2f} ({median:.2f})" for op, (best, median) in ops.items()]
        note = "  (like with like: the same extra hop)" if name == "rdma/tcp-hop" else ""
        lines.append(f"{name:<13} best (median): " + ", ".join(parts) + note)
    return "\n".join(lines)


async def _measure(
    args: argparse.Namespace,
    data: bytes,
    d: object,
    tcp_url: str,
    hop_port: int,
    port: int,
    responder: Responder | None,
    hop_pids: dict[str, int] | None = None,
) -> list[Result]:
    rdma_url = f"nfs://127.0.0.1:{port}{d.remote}?proto=rdma&provider=soft&inline={args.inline}"  # type: ignore[attr-defined]
    paths = [
        ("tcp", tcp_url, None),
        ("tcp-hop", f"nfs://127.0.0.1:{hop_port}{d.remote}", None),  # type: ignore[attr-defined]
        ("rdma", rdma_url, responder),
        ("rdma-pinned0", rdma_url + "&pinned=0", responder),
    ]
    results: list[Result] = []
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client.connect(url)) for _, url, _ in paths]
        pairs = [(Result(name, "WRITE"), Result(name, "READ")) for name, _, _ in paths]
        for i in range(-args.warmup, 0):  # the same rounds, not counted
            for nfs, (name, _, r) in zip(clients, paths, strict=True):
                spare = Result(name, "WRITE"), Result(name, "READ")
                await _round(nfs, name, i, data, str(d.local), r, *spare)  # type: ignore[attr-defined]
        for i in range(args.runs):
            for nfs, (name, _, r), (w, rd) in zip(clients, paths, pairs, strict=True):
                pid = (hop_pids or {}).get(name)
                await _round(nfs, name, i, data, str(d.local), r, w, rd, pid)  # type: ignore[attr-defined]
        for w, rd in pairs:
            results += [w, rd]
    return results


async def main_async(args: argparse.Namespace) -> list[Result]:
    data = os.urandom(args.size_mib * MIB)
    with Ganesha() as server:
        d = server.new_directory(prefix="bench-rdma-")
        tcp_url = f"nfs://{server.host}:{server.port}{d.remote}"
        if args.responder_process:
            pid, port = start_responder_process(
                server.host, server.port, credits=args.credits, inline_size=args.inline
            )
            hop = subprocess.Popen(
                [sys.executable, "-m", "pynfsrdma._testbed.proxy", "--listen", "127.0.0.1:0",
                 "--target", f"{server.host}:{server.port}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
            try:
                assert hop.stdout is not None
                ready = hop.stdout.readline().decode()  # "proxy 127.0.0.1:PORT -> ... ready"
                hop_port = int(ready.split()[1].rsplit(":", 1)[1])
                pids = {"tcp-hop": hop.pid, "rdma": pid, "rdma-pinned0": pid}
                return await _measure(args, data, d, tcp_url, hop_port, port, None, pids)
            finally:
                for p in (pid, hop.pid):
                    os.kill(p, signal.SIGTERM)
                    wait_pid_gone(p, 10)
                hop.wait()
        async with trio.open_nursery() as nursery:
            responder = await serve_rdma(
                nursery, SoftProvider(), "127.0.0.1", 0, server.host, server.port,
                credits=args.credits, inline_size=args.inline,
            )  # fmt: skip
            proxy = Proxy("127.0.0.1", 0, server.host, server.port)
            await nursery.start(proxy.run)
            results = await _measure(args, data, d, tcp_url, proxy.port, responder.port, responder)
            proxy.stop()
            await responder.aclose()
            nursery.cancel_scope.cancel()
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--warmup", type=int, default=1,
        help="rounds of every path before the measured ones, not counted (default 1)",
    )  # fmt: skip
    ap.add_argument("--credits", type=int, default=32)
    ap.add_argument("--inline", type=int, default=4096)
    ap.add_argument(
        "--responder-process", action="store_true",
        help="run the responder (and tcp-hop's proxy) in a process of its own, as Ganesha is; the "
        "responder's counts are then not shown",
    )  # fmt: skip
    ap.add_argument("--json", action="store_true", help="one JSON line instead of the table")
    args = ap.parse_args(argv)
    keep_freed_memory()
    results = trio.run(main_async, args)
    if args.json:
        print(
            json.dumps(
                {
                    "size_mib": args.size_mib,
                    "runs": args.runs,
                    "rows": [r.as_dict() for r in results],
                    "ratios": {
                        k: {op: {"best": round(b, 2), "median": round(m, 2)} for op, (b, m) in v.items()}
                        for k, v in ratios(results).items()
                    },
                }
            )
        )
    else:
        where = "in a process of its own" if args.responder_process else "in this process"
        print(
            f"{args.size_mib} MiB, {args.runs} runs; RDMA = software provider through the responder ({where})\n"
        )
        print(format_table(results))
        print()
        print(format_ratios(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
