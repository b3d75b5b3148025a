"""What Kerberos costs: write and read of one file under sys, krb5, krb5i and krb5p, in one run against
one server.

    .venv/bin/python bench/bench_krb5.py [--size-mib 256] [--repeat 3] [--json]

It starts an MIT KDC and an NFS-Ganesha whose export takes all four flavours (the testbed's), makes a
user with a ticket, and measures, the flavours taking turns in each round (best and median of the
rounds reported):

- write of a SIZE file from memory: ``open("w")`` + ``File.pwrite(0, data)`` + ``close()`` (wsize
  UNSTABLE WRITEs in flight, then COMMIT);
- read of it back into memory: ``File.pread_views(0, SIZE)``.

Every write is checked on the server's disk and every read by its sha256 (outside the timings).
krb5 signs each call's header and each reply's verifier; krb5i also a MIC over every body (the client
joins a WRITE's payload to sign it and checks a READ's before handing it over); krb5p encrypts every
body.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import MIB, Measurement, align, check, make_data, sha256_file, sha256_of, stolen
from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.kdc import SERVER_HOST, Kdc

FLAVOURS = ("sys", "krb5", "krb5i", "krb5p")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def one_round(url: str, sec: str, data: bytes, digest: str, local: Path) -> tuple[float, float]:
    """Write and read back /f under ``sec``; (write seconds, read seconds)."""
    async with Client.connect(f"{url}?sec={sec}") as nfs:
        assert nfs.sec == sec, f"asked for {sec}, got {nfs.sec}"
        t0 = time.perf_counter()
        async with await nfs.open("/f", "w") as f:
            await f.pwrite(0, data)
        wrote = time.perf_counter() - t0
        check(f"{sec} write", sha256_file(local / "f"), digest)
        t0 = time.perf_counter()
        async with await nfs.open("/f", "r") as f:
            views, _eof = await f.pread_views(0, len(data))
        read = time.perf_counter() - t0
        check(f"{sec} read", sha256_of(views), digest)
        await nfs.remove("/f")
    return wrote, read


async def run(size: int, repeat: int) -> dict[str, tuple[Measurement, Measurement]]:
    results = {sec: (Measurement(), Measurement()) for sec in FLAVOURS}
    data = make_data(size)
    digest = sha256_of([data])
    with tempfile.TemporaryDirectory(prefix="bench-krb5-") as tmp, Kdc(Path(tmp) / "kdc") as kdc:
        os.environ.update(kdc.environment)
        keytab = kdc.service_keytab(f"nfs/{SERVER_HOST}")
        user, password = f"bench{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
        kdc.add_user(user, password)
        os.environ["KRB5CCNAME"] = kdc.kinit(user, password, Path(tmp) / "ccache")
        with Ganesha(Path(tmp) / "ganesha", sectype=FLAVOURS, keytab=keytab, environment=kdc.environment) as server:
            d = server.new_directory(prefix="bench-")
            url = f"nfs://{server.host}:{server.port}{d.remote}"
            log(f"NFS-Ganesha {server.host}:{server.port} (SecType {', '.join(FLAVOURS)}), KDC 127.0.0.1:{kdc.port}")
            for n in range(repeat):
                order = FLAVOURS[n % len(FLAVOURS):] + FLAVOURS[: n % len(FLAVOURS)]  # who goes first rotates
                for sec in order:
                    wrote, read = await one_round(url, sec, data, digest, d.local)
                    w, r = results[sec]
                    log(f"round {n + 1} {sec:6} write {w.add(size / 1e6, wrote):8.1f} MB/s  "
                        f"read {r.add(size / 1e6, read):8.1f} MB/s")
    return results


def table(results: dict[str, tuple[Measurement, Measurement]], size_mib: int) -> str:
    base_w, base_r = results["sys"][0].best, results["sys"][1].best
    lines = [("flavour", f"write {size_mib} MiB best (median)", f"read {size_mib} MiB best (median)",
              "write/sys", "read/sys")]
    for sec, (w, r) in results.items():
        lines.append((sec, f"{w.best:,.1f} ({w.median:,.1f}) MB/s", f"{r.best:,.1f} ({r.median:,.1f}) MB/s",
                      f"{w.best / base_w:.2f}x" if base_w else "-", f"{r.best / base_r:.2f}x" if base_r else "-"))
    return align(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--json", action="store_true", help="also print one JSON line")
    args = p.parse_args(argv)
    steal = stolen()
    results = trio.run(run, args.size_mib * MIB, args.repeat)
    print(table(results, args.size_mib))
    print(f"(CPU stolen by the hypervisor during the run: {stolen() - steal:.1f} s)")
    if args.json:
        import json

        print(json.dumps({"size_mib": args.size_mib, "repeat": args.repeat, "rows": [
            {"sec": sec, "write_best": round(w.best, 1), "write_median": round(w.median, 1),
             "read_best": round(r.best, 1), "read_median": round(r.median, 1),
             "write_samples": [round(s, 1) for s in w.samples], "read_samples": [round(s, 1) for s in r.samples]}
            for sec, (w, r) in results.items()]}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
