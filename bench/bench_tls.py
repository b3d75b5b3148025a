"""What RPC-with-TLS costs: write and read of one file under xprtsec=none, tls and mtls, in one run
against one NFS-Ganesha behind the testbed's TLS front.

    .venv/bin/python bench/bench_tls.py [--size-mib 256] [--repeat 3] [--json]

NFS-Ganesha 4.3 has no TLS, so every mode goes through the same front (pynfsrdma._testbed.tls_front,
a process of its own): under ``none`` it relays the plain connection, under ``tls`` and ``mtls`` it
does the server's side of TLS 1.3 and relays what it decrypts. The ratios to ``none`` are what TLS
costs, on both ends (the front is Python too: a kernel server's TLS, kTLS under nfsd, costs the
server less). A ``direct`` row (no front) shows what the front itself costs. The modes take turns in
each round; best and median of the rounds are reported.

- write of a SIZE file from memory: ``open("w")`` + ``File.pwrite(0, data)`` + ``close()``;
- read of it back into memory: ``File.pread_views(0, SIZE)``.

Every write is checked on the server's disk and every read by its sha256 (outside the timings).
The client's own CPU time per MiB (least of the rounds) says what TLS costs the client whatever the
front and the server cost.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import MIB, Measurement, align, check, make_data, sha256_file, sha256_of, stolen
from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.tls_front import TlsFront, make_certificates

MODES = ("direct", "none", "tls", "mtls")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def serve_front(target: str, certs: Path, mtls: bool) -> None:
    """(--front) A TLS front as a process of its own: prints its port, stops at SIGTERM."""
    host, _, port = target.rpartition(":")
    front = TlsFront("127.0.0.1", 0, host, int(port), certificate=certs / "server.pem",
                     private_key=certs / "server.key", client_truststore=certs / "ca.pem" if mtls else None,
                     allow_plain=not mtls)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(front.run)
            print(front.port, flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def start_front(target: str, certs: Path, mtls: bool) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, __file__, "--front", target, "--certs", str(certs)]
                            + (["--mtls"] if mtls else []), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise RuntimeError(f"the TLS front did not start: {line!r}")
    return proc, int(line)


async def one_round(url: str, mode: str, data: bytes, digest: str, local: Path) -> tuple[float, float, float, float]:
    """Write and read back /f; (write seconds, read seconds, and the client's CPU seconds for each)."""
    async with Client.connect(url) as nfs:
        t0, c0 = time.perf_counter(), time.process_time()
        async with await nfs.open("/f", "w") as f:
            await f.pwrite(0, data)
        wrote, wrote_cpu = time.perf_counter() - t0, time.process_time() - c0
        check(f"{mode} write", sha256_file(local / "f"), digest)
        t0, c0 = time.perf_counter(), time.process_time()
        async with await nfs.open("/f", "r") as f:
            views, _eof = await f.pread_views(0, len(data))
        read, read_cpu = time.perf_counter() - t0, time.process_time() - c0
        check(f"{mode} read", sha256_of(views), digest)
        await nfs.remove("/f")
    return wrote, read, wrote_cpu, read_cpu


async def run(size: int, repeat: int) -> tuple[dict[str, tuple[Measurement, Measurement]], dict[str, list[float]]]:
    results = {mode: (Measurement(), Measurement()) for mode in MODES}
    cpu = {mode: [math.inf, math.inf] for mode in MODES}  # the client's least CPU ms per MiB: write, read
    data = make_data(size)
    digest = sha256_of([data])
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp, Ganesha(Path(tmp) / "ganesha") as server:
        certs = Path(tmp) / "certs"
        make_certificates(certs)
        d = server.new_directory(prefix="bench-")
        target = f"{server.host}:{server.port}"
        plain, plain_port = start_front(target, certs, mtls=False)
        mutual, mutual_port = start_front(target, certs, mtls=True)
        try:
            trust = f"truststore={certs / 'ca.pem'}"
            urls = {
                "direct": f"nfs://{target}{d.remote}",
                "none": f"nfs://127.0.0.1:{plain_port}{d.remote}?xprtsec=none",
                "tls": f"nfs://127.0.0.1:{plain_port}{d.remote}?xprtsec=tls&{trust}",
                "mtls": f"nfs://127.0.0.1:{mutual_port}{d.remote}?xprtsec=mtls&{trust}"
                        f"&certificate={certs / 'client.pem'}&private_key={certs / 'client.key'}",
            }
            log(f"NFS-Ganesha {target}; TLS fronts 127.0.0.1:{plain_port} (tls, and none relayed plain), "
                f"127.0.0.1:{mutual_port} (mtls)")
            for n in range(repeat):
                order = MODES[n % len(MODES):] + MODES[: n % len(MODES)]  # who goes first rotates
                for mode in order:
                    wrote, read, wrote_cpu, read_cpu = await one_round(urls[mode], mode, data, digest, d.local)
                    mib = size / MIB
                    cpu[mode] = [min(cpu[mode][0], wrote_cpu * 1000 / mib), min(cpu[mode][1], read_cpu * 1000 / mib)]
                    w, r = results[mode]
                    log(f"round {n + 1} {mode:6} write {w.add(size / 1e6, wrote):8.1f} MB/s  "
                        f"read {r.add(size / 1e6, read):8.1f} MB/s")
        finally:
            for proc in (plain, mutual):
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    return results, cpu


def table(results: dict[str, tuple[Measurement, Measurement]], cpu: dict[str, list[float]], size_mib: int) -> str:
    base_w, base_r = results["none"][0].best, results["none"][1].best
    lines = [("xprtsec", f"write {size_mib} MiB best (median)", f"read {size_mib} MiB best (median)",
              "write/none", "read/none", "client CPU ms/MiB write, read")]
    for mode, (w, r) in results.items():
        lines.append((mode if mode != "direct" else "(no front)", f"{w.best:,.1f} ({w.median:,.1f}) MB/s",
                      f"{r.best:,.1f} ({r.median:,.1f}) MB/s",
                      f"{w.best / base_w:.2f}x" if base_w else "-", f"{r.best / base_r:.2f}x" if base_r else "-",
                      f"{cpu[mode][0]:.2f}, {cpu[mode][1]:.2f}"))
    return align(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--json", action="store_true", help="also print one JSON line")
    p.add_argument("--front", metavar="HOST:PORT", help=argparse.SUPPRESS)  # (the front's own process)
    p.add_argument("--certs", help=argparse.SUPPRESS)
    p.add_argument("--mtls", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.front:
        trio.run(serve_front, args.front, Path(args.certs), args.mtls)
        return 0
    steal = stolen()
    results, cpu = trio.run(run, args.size_mib * MIB, args.repeat)
    print(table(results, cpu, args.size_mib))
    print(f"(CPU stolen by the hypervisor during the run: {stolen() - steal:.1f} s)")
    if args.json:
        import json

        print(json.dumps({"size_mib": args.size_mib, "repeat": args.repeat, "rows": [
            {"xprtsec": mode, "write_best": round(w.best, 1), "write_median": round(w.median, 1),
             "read_best": round(r.best, 1), "read_median": round(r.median, 1),
             "client_cpu_ms_per_mib_write": round(cpu[mode][0], 3), "client_cpu_ms_per_mib_read": round(cpu[mode][1], 3),
             "write_samples": [round(s, 1) for s in w.samples], "read_samples": [round(s, 1) for s in r.samples]}
            for mode, (w, r) in results.items()]}, sort_keys=True))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
