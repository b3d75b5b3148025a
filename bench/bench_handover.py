"""What handing each blocking call to the client's loop thread costs, against a real server.

    .venv/bin/python bench/bench_handover.py [--calls 2000] [--repeat 5] [--json]

Starts its own NFS-Ganesha (testbed) on loopback, connects the blocking client
(:func:`pynfsrdma.connect`), writes one small file, and times, as the CPU time of this process (all
its threads, ``resource.getrusage``; the server runs elsewhere) per call:

- ``noop``: a coroutine that does nothing, handed to the loop and waited for (``SyncClient.run``):
  the hand-over alone, with no wait for a server;
- ``lstat_each``: ``lstat`` of the file, one blocking call each (what a script's ``fs.info`` does);
- ``lstat_in_loop``: the same calls made one after another inside one coroutine on the loop (one
  hand-over for all of them): the client's own work and the socket's, without the hand-over.

``lstat_each - lstat_in_loop`` is what the hand-over costs a call that waits for a server: the two
threads woken and put to sleep in turn around the server's reply. Each line runs CALLS calls,
REPEAT times, the lines taking turns; the table gives the least and the median CPU per call, in
microseconds. Real TCP, a real server: on a busy host repeat the run.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pynfsrdma
from bench.common import bench_target
from pynfsrdma._client.api import Client

LINES = ("noop", "lstat_each", "lstat_in_loop")
SMALL = 1024
WARM = 200  # calls of each line before timing (caches and prepared shapes made)


def cpu_seconds() -> float:
    """This process's CPU time so far (user and system, all threads)."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000, help="calls per line and repeat (default 2000)")
    ap.add_argument("--repeat", type=int, default=5, help="repeats of each line (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    args = ap.parse_args(argv)
    if args.calls < 1 or args.repeat < 1:
        ap.error("--calls and --repeat must be at least 1")
    calls = args.calls
    with bench_target(None) as target, pynfsrdma.connect(target.ours_url) as nfs:
        nfs.write_file("/small", b"x" * SMALL)

        async def noop(client: Client) -> None:
            return None

        async def lstats(client: Client, n: int) -> None:
            for _ in range(n):
                await client.lstat("/small")

        def each(n: int) -> None:
            for _ in range(n):
                nfs.lstat("/small")

        todo: dict[str, Callable[[int], Any]] = {
            "noop": lambda n: [nfs.run(noop) for _ in range(n)],
            "lstat_each": each,
            "lstat_in_loop": lambda n: nfs.run(lstats, n),
        }
        for run in todo.values():
            run(WARM)
        seen: dict[str, list[float]] = {name: [] for name in LINES}
        for _ in range(args.repeat):
            for name in LINES:
                before = cpu_seconds()
                todo[name](calls)
                seen[name].append((cpu_seconds() - before) / calls * 1e6)
    table = {name: {"best": min(v), "median": statistics.median(v)} for name, v in seen.items()}
    if args.json:
        print(json.dumps({"calls": calls, "repeat": args.repeat, "cpu_us_per_call": table}, sort_keys=True))
        return 0
    print(f"{'line':14s} {'CPU us/call best':>16s} {'median':>8s}")
    for name, t in table.items():
        print(f"{name:14s} {t['best']:16.1f} {t['median']:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
