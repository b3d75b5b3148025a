"""The FUSE channel's floor: what the mount daemon spends on a request it answers without any RPC,
beside the FUSE ceiling's (``bench/null_fuse.py``) on the same channel (issue 26).

    .venv/bin/python bench/bench_floor.py [--calls 20000] [--repeat 3] [--channels native,native+io_uring]

Starts its own NFS-Ganesha (testbed), makes one file there and mounts it with ``python -m
pynfsrdma._cli.main mount URL MNT -f -o channel=CHANNEL -o actimeo=3600`` (so that every attribute
the daemon holds stays fresh for the whole run). Then, through the mount and through the ceiling,
CALLS ``statx(AT_STATX_FORCE_SYNC)`` of that file one after another: the kernel sends a GETATTR for
each whatever it caches, and the daemon answers each from its attribute cache (the mount's
``attr_hits`` must rise by CALLS, its COMPOUNDs by none). Prints, per round, the daemon's CPU (user
and system, from /proc) per request for both, and the requests per second; then the best and median
of the rounds. The mount and the ceiling take turns in every round.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_fuse import PY, log, mounted, process_cpu  # noqa: E402
from pynfsrdma import _control_socket as control_socket  # noqa: E402
from pynfsrdma._testbed import Ganesha  # noqa: E402

AT_FDCWD = -100
AT_STATX_FORCE_SYNC = 0x2000  # statx(2): ask the file system whatever the kernel caches
STATX_BASIC_STATS = 0x7FF
_libc = ctypes.CDLL(None, use_errno=True)


def statx_loop(path: Path, calls: int) -> float:
    """``calls`` statx(AT_STATX_FORCE_SYNC) of ``path``; the seconds they took."""
    buf = ctypes.create_string_buffer(256)
    name = os.fsencode(path)
    statx = _libc.statx
    t0 = time.perf_counter()
    for _ in range(calls):
        if statx(AT_FDCWD, name, AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, buf) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), str(path))
    return time.perf_counter() - t0


def stats(mnt: Path) -> dict:
    return control_socket.query(str(mnt), "stats")


def measure(pid: int, path: Path, calls: int) -> tuple[float, float]:
    """The daemon ``pid``'s CPU per call (µs) and calls per second, over ``calls`` statx of ``path``."""
    statx_loop(path, min(calls, 200))  # (warm: the name looked up, the attributes held)
    c0 = sum(process_cpu(pid))
    t = statx_loop(path, calls)
    return 1e6 * (sum(process_cpu(pid)) - c0) / calls, calls / t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--channels", default="native", help="comma-separated: native, native+io_uring, ...")
    args = p.parse_args(argv)
    channels = args.channels.split(",")
    results: dict[str, dict[str, list[float]]] = {
        ch: {"mount_us": [], "mount_rate": [], "ceiling_us": [], "ceiling_rate": []} for ch in channels}
    scratch = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    with Ganesha() as server:
        d = server.new_directory(prefix="floor-")
        (d.local / "f").write_bytes(b"x")
        mnt, nmnt = scratch / "mnt", scratch / "null"
        mnt.mkdir()
        nmnt.mkdir()
        for r in range(args.repeat):
            for ch in channels:
                base, *extra = ch.split("+")
                cmd = [PY, "-m", "pynfsrdma._cli.main", "mount", server.url, str(mnt), "-f", "-o",
                       f"channel={base}", "-o", "actimeo=3600"] + [x for o in extra for x in ("-o", o)]
                with mounted(cmd, mnt, scratch / "mount.log") as proc:
                    path = mnt / d.local.name / "f"
                    os.stat(path)
                    s0 = stats(mnt)
                    us, rate = measure(proc.pid, path, args.calls)
                    s1 = stats(mnt)
                hits = s1["cache"]["attr_hits"] - s0["cache"]["attr_hits"]
                rpcs = s1["rpc"]["calls"] - s0["rpc"]["calls"]
                results[ch]["mount_us"].append(us)
                results[ch]["mount_rate"].append(rate)
                log(f"round {r + 1}, mount {ch}: {us:.1f} µs of daemon CPU per GETATTR, {rate:,.0f}/s"
                    f" (attribute cache hits {hits}, RPCs {rpcs})")
                ncmd = [PY, str(REPO / "bench" / "null_fuse.py"), str(nmnt), "--files", "1", "--channel", base]
                ncmd += [{"io_uring": "--io-uring", "noio_uring": "--no-io-uring"}[o]
                         for o in extra if o in ("io_uring", "noio_uring")]
                with mounted(ncmd, nmnt, scratch / "null.log") as proc:
                    us, rate = measure(proc.pid, nmnt / "zero", args.calls)
                results[ch]["ceiling_us"].append(us)
                results[ch]["ceiling_rate"].append(rate)
                log(f"round {r + 1}, ceiling {ch}: {us:.1f} µs of daemon CPU per GETATTR, {rate:,.0f}/s")
    print(f"GETATTR answered from the daemon's attribute cache, {args.calls:,} a round, best (median) of "
          f"{args.repeat}")
    print("| channel | mount µs CPU/request | ceiling µs CPU/request | mount requests/s | ceiling requests/s |")
    print("|---|---|---|---|---|")
    for ch, v in results.items():
        def lo(xs: list[float]) -> str:
            return f"{min(xs):.1f} ({statistics.median(xs):.1f})"

        def hi(xs: list[float]) -> str:
            return f"{max(xs):,.0f} ({statistics.median(xs):,.0f})"

        print(f"| {ch} | {lo(v['mount_us'])} | {lo(v['ceiling_us'])} | {hi(v['mount_rate'])} | {hi(v['ceiling_rate'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
