"""Where one FUSE request's time goes, seen on the wire: the NFS server's share against the mount's
(daemon, kernel and application together), for serial work through the mount on each FUSE channel.

    .venv/bin/python bench/latency_split.py [--channels native,pyfuse3] [--only read_direct,stat]
                                            [--size-mib 256] [--files 5000] [--repeat 3] [--json]
                                            [--buffered-first]

Starts its own NFS-Ganesha (testbed), mounts it (``python -m pynfsrdma._cli.main mount URL MNT -f -o
channel=CHANNEL``) and runs one request at a time through the mount: ``dd iflag=direct bs=1M`` of a
file of SIZE (one FUSE READ, one NFS READ each) and ``lstat`` of FILES cold names (one FUSE LOOKUP,
one NFS LOOKUP each), the page cache dropped first (``--buffered-first``: the file is read buffered
through the same mount before, as ``bench_fuse.py`` does). Meanwhile ``dumpcap`` records the mount's TCP
connection to the server (headers only), and each call is split at the socket's timestamps:

- server: from the call to the first byte of its reply (the server's work, its wake-up, the network);
- transfer: from the first byte of the reply to its last (a 1 MiB READ reply comes in many segments);
- client: from the last byte of the reply to the next call (the daemon decoding the reply and
  answering the kernel, the kernel waking the application, the application's next system call,
  the kernel's next request, the daemon reading it and sending its call).

Every round runs each channel in turn (the order alternating); the table shows, for the best round
(the shortest mean period), the mean of each share over its calls and, in parentheses, their
median (the server's share has a long tail: the mean is what the throughput sees). Since the
requests are serial, the client share is all the mount can cut: a channel's gain on these lines is
at most (server + transfer + client) / (server + transfer).
Needs root (mounts, drop_caches, capture on ``lo``) and tshark's ``dumpcap``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_fuse import PY, drop_caches, lstat_all, mounted  # noqa: E402
from bench.common import align  # noqa: E402
from pynfsrdma._fuse.channel import CHANNELS  # noqa: E402
from pynfsrdma._testbed import Ganesha  # noqa: E402

MIB = 1 << 20
CAPTURE_START = 1.0  # seconds dumpcap gets to start listening
SHARES = ("period", "server", "transfer", "client")


@dataclass
class Split:
    """The calls of one capture, each split in shares (microseconds)."""

    shares: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in SHARES})

    @property
    def calls(self) -> int:
        return len(self.shares["server"])

    def median(self, share: str) -> float:
        v = self.shares[share]
        return statistics.median(v) if v else float("nan")

    def mean(self, share: str) -> float:
        v = self.shares[share]
        return statistics.mean(v) if v else float("nan")


def split_calls(segments: list[tuple[float, bool, int]]) -> Split:
    """``segments``: (time, from the server, payload bytes) of each TCP segment with a payload, in
    order. A call is a run of segments to the server; its reply the run from the server after it."""
    calls: list[list[float]] = []  # [call, first reply byte, last reply byte]
    cur: list[float] | None = None
    for t, from_server, _ in segments:
        if not from_server:
            if cur is None or len(cur) == 3:
                if cur is not None:
                    calls.append(cur)
                cur = [t]
        elif cur is not None:
            if len(cur) == 1:
                cur += [t, t]
            else:
                cur[2] = t
    if cur is not None and len(cur) == 3:
        calls.append(cur)
    s = Split()
    for i, (call, first, last) in enumerate(calls):
        s.shares["server"].append((first - call) * 1e6)
        s.shares["transfer"].append((last - first) * 1e6)
        if i + 1 < len(calls):
            s.shares["client"].append((calls[i + 1][0] - last) * 1e6)
            s.shares["period"].append((calls[i + 1][0] - call) * 1e6)
    return s


def read_capture(path: Path, server_port: int) -> list[tuple[float, bool, int]]:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-T", "fields", "-e", "frame.time_epoch", "-e", "tcp.srcport", "-e", "tcp.len"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    segments = []
    for line in out.splitlines():
        t, sport, n = line.split("\t")
        if n and int(n) > 0:
            segments.append((float(t), int(sport) == server_port, int(n)))
    return segments


class Capture:
    """dumpcap on ``lo`` for the server's port, headers only."""

    def __init__(self, path: Path, port: int) -> None:
        self.path = path
        self.proc = subprocess.Popen(
            ["dumpcap", "-q", "-i", "lo", "-s", "128", "-f", f"tcp port {port}", "-w", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(CAPTURE_START)

    def stop(self) -> None:
        time.sleep(0.2)
        self.proc.terminate()
        self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--channels", default="native,pyfuse3", help=f"comma-separated ({', '.join(CHANNELS)})")
    ap.add_argument("--only", default="read_direct,stat", help="read_direct, stat (default: both)")
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--buffered-first",
        action="store_true",
        help="read the file buffered through the same mount before its O_DIRECT read (as bench_fuse.py does)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("latency_split.py: needs root (FUSE mounts, drop_caches, capture on lo)")
    for tool in ("dumpcap", "tshark"):
        if shutil.which(tool) is None:
            raise SystemExit(f"latency_split.py: needs {tool} (Debian package tshark)")
    channels = args.channels.split(",")
    lines = args.only.split(",")
    unknown = set(lines) - {"read_direct", "stat"}
    if unknown:
        raise SystemExit(f"--only: unknown line(s) {', '.join(sorted(unknown))}")
    splits: dict[tuple[str, str], list[tuple[float, Split]]] = {}  # (line, channel) -> (us per request, split)
    scratch = Path(tempfile.mkdtemp(prefix="latency-split-"))
    try:
        with Ganesha() as server:
            d = server.new_directory(prefix="split-")
            block = os.urandom(MIB)
            with open(d.local / "big", "wb") as f:
                for _ in range(args.size_mib):
                    f.write(block)
            (d.local / "dir").mkdir()
            for i in range(args.files):
                (d.local / "dir" / f"f{i:07d}").touch()
            mnt = scratch / "mnt"
            mnt.mkdir()
            here = mnt / d.local.name
            for r in range(args.repeat):
                for ch in channels if r % 2 == 0 else channels[::-1]:
                    cmd = [PY, "-m", "pynfsrdma._cli.main", "mount", server.url, str(mnt), "-f", "-o", f"channel={ch}"]
                    for line in lines:
                        with mounted(cmd, mnt, scratch / f"mount-{ch}.log"):
                            if line == "read_direct" and args.buffered_first:
                                drop_caches()
                                subprocess.run(["dd", f"if={here / 'big'}", "of=/dev/null", "bs=1M"], check=True,
                                               capture_output=True)
                            drop_caches()
                            cap = Capture(scratch / f"{line}-{ch}-{r}.pcap", server.port)
                            t0 = time.perf_counter()
                            if line == "read_direct":
                                subprocess.run(
                                    ["dd", f"if={here / 'big'}", "of=/dev/null", "bs=1M", "iflag=direct"],
                                    check=True,
                                    capture_output=True,
                                )
                                n = args.size_mib
                            else:
                                lstat_all(here / "dir", args.files)
                                n = args.files
                            per = (time.perf_counter() - t0) / n * 1e6
                            cap.stop()
                        s = split_calls(read_capture(cap.path, server.port))
                        splits.setdefault((line, ch), []).append((per, s))
                        print(
                            f"# {line}, round {r + 1}, {ch}: {per:,.0f} us per request; {s.calls} calls; median us: "
                            + ", ".join(f"{k} {s.median(k):,.0f}" for k in SHARES)
                            + "; mean us: "
                            + ", ".join(f"{k} {s.mean(k):,.0f}" for k in SHARES),
                            file=sys.stderr,
                            flush=True,
                        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = [("line", "channel", "us/request", *(f"{k} us" for k in SHARES), "server+transfer share")]
    report = []
    for (line, ch), rounds in splits.items():
        best_per, best = min(rounds, key=lambda x: x[1].mean("period"))
        med_per = statistics.median(p for p, _ in rounds)
        wire = (best.mean("server") + best.mean("transfer")) / best.mean("period")
        table.append(
            (line, ch, f"{best_per:,.0f} ({med_per:,.0f})",
             *(f"{best.mean(k):,.0f} ({best.median(k):,.0f})" for k in SHARES), f"{wire:.0%}")
        )
        report.append({"line": line, "channel": ch, "us_per_request": round(best_per, 1),
                       "us_per_request_median_of_rounds": round(med_per, 1),
                       "mean": {k: round(best.mean(k), 1) for k in SHARES},
                       "median": {k: round(best.median(k), 1) for k in SHARES}})
    print(align(table))
    print(
        f"(us/request: the best of {args.repeat} rounds (their median); the shares: the mean of the calls of that"
        " round (their median), the share of the mean period; one request at a time)"
    )
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
