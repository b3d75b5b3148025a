"""The path API and the command line against NFS-Ganesha through the seeded mutating proxy, for as long
as you like, every result checked against the export's directory; prints counts by outcome.

    .venv/bin/python bench/fuzz_replies.py [--mutated 100000] [--minutes M] [--rate 0.2] [--seed 1]
                                           [--workers 4] [--mutations header,value,...] [--cli-every 100]
                                           [--memory-cap BYTES] [--json]

It starts its own NFS-Ganesha (the testbed) and a :class:`~pynfsrdma._testbed.mutating_proxy.MutatingProxy`
in front of it that changes ``--rate`` of the replies, one change each (every class of
:class:`~pynfsrdma._testbed.mutations.Mutation` unless ``--mutations`` names some: framing and values),
and runs :func:`~pynfsrdma._testbed.reply_fuzz.run_workload` until ``--mutated`` replies were changed
(or ``--minutes`` passed): ``--workers`` processes of the path API, each with its address space capped
(``--memory-cap``, RLIMIT_AS). Every few seconds a progress line; at the end the outcomes (right
results, errors by kind, and the failures: wrong results, exceptions other than an OSError with errno,
a MemoryError included, hangs, bad command line output), the changes by class, and each worker's peak
memory (VmHWM). The exit status is 1 if there was any failure or a worker's peak passed ``--max-peak``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import trio

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.mutating_proxy import MutatingProxy
from pynfsrdma._testbed.mutations import ALL, VALUES, Mutation, ReplyMutator
from pynfsrdma._testbed.reply_fuzz import MEMORY_CAP, Outcomes, WorkerSettings, run_workload


async def fuzz(args: argparse.Namespace, server: Ganesha, local: Path, remote: str) -> tuple[Outcomes, ReplyMutator,
                                                                                              float]:
    mutator = ReplyMutator(seed=args.seed, rate=args.rate, mutations=args.kinds)
    start = time.monotonic()

    def stop() -> bool:
        return args.mutated is not None and mutator.counts["mutated"] >= args.mutated

    async with trio.open_nursery() as nursery:
        proxy = await nursery.start(MutatingProxy("127.0.0.1", 0, server.host, server.port, mutator).run)

        async def progress() -> None:
            while True:
                await trio.sleep(args.progress)
                n = mutator.counts
                print(f"{time.monotonic() - start:7.0f} s: {n['replies']:,} replies, {n['mutated']:,} changed",
                      file=sys.stderr, flush=True)

        nursery.start_soon(progress)
        out = await run_workload(
            f"nfs://127.0.0.1:{proxy.port}", local, remote,
            WorkerSettings(seed=args.seed, seconds=args.minutes * 60 if args.minutes else None, timeo=args.timeo,
                           retrans=args.retrans, cli_every=args.cli_every,
                           values=any(k in VALUES for k in args.kinds)),
            workers=args.workers, stop=stop, memory_cap=args.memory_cap,
        )
        nursery.cancel_scope.cancel()
    return out, mutator, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mutated", type=int, default=None, help="stop after this many changed replies")
    p.add_argument("--minutes", type=float, default=None, help="stop after this long")
    p.add_argument("--rate", type=float, default=0.2, help="share of replies changed (default 0.2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=4, help="worker processes, one call in flight each (default 4)")
    p.add_argument("--mutations", default=",".join(m.value for m in ALL),
                   help="classes of change, comma-separated (default: all, values included)")
    p.add_argument("--memory-cap", type=int, default=MEMORY_CAP,
                   help=f"each worker's address space (RLIMIT_AS), bytes (default {MEMORY_CAP})")
    p.add_argument("--max-peak", type=int, default=200 << 20,
                   help="a worker's peak resident memory past this is a failure, bytes (default 200 MiB)")
    p.add_argument("--cli-every", type=int, default=100, help="each worker runs the command line every N calls")
    p.add_argument("--timeo", type=float, default=1.0, help="the clients' soft timeo, seconds (default 1)")
    p.add_argument("--retrans", type=int, default=2)
    p.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = p.parse_args(argv)
    try:
        args.kinds = [Mutation(k) for k in args.mutations.split(",") if k]
    except ValueError as e:
        p.error(str(e))
    if args.mutated is None and args.minutes is None:
        args.mutated = 10_000
    logging.basicConfig(level=logging.CRITICAL)  # (the misbehaviour it provokes is what is counted)
    with Ganesha() as server:
        d = server.new_directory(prefix="fuzz-")
        out, mutator, seconds = trio.run(fuzz, args, server, d.local, d.remote)
    summary = out.summary()
    counts = dict(sorted(mutator.counts.items()))
    print(f"seed {args.seed}, rate {args.rate}, {args.workers} workers, {seconds / 60:.1f} min")
    print(f"replies {counts.get('replies', 0):,}, changed {counts.get('mutated', 0):,}: " + ", ".join(
        f"{k} {v:,}" for k, v in counts.items() if k not in ("replies", "mutated", "messages")))
    print(f"calls {summary['calls']:,}: right {summary['right']:,}, errors {summary['errors']:,}, wrong "
          f"{summary['wrong']}, other exceptions {summary['escaped']}, hangs {summary['hangs']}; command line "
          f"runs {summary['cli_runs']:,}, bad output {summary['cli_bad']}")
    peaks = out.peaks
    print(f"peak memory of each worker (VmHWM): {', '.join(f'{p / (1 << 20):.0f} MiB' for p in peaks)}"
          f" (address space capped at {args.memory_cap / (1 << 20):.0f} MiB)")
    print(f"slowest call: {out.slowest[0]:.1f} s ({out.slowest[1]}); a soft request's budget "
          f"{args.timeo * (args.retrans + 1):g} s")
    over = [p for p in peaks if p > args.max_peak]
    print("errors by kind:")
    for kind, n in out.errors.most_common():
        print(f"  {n:8,}  {kind}: {out.samples[kind]}")
    for f in out.failures[:20]:
        print(f"FAILURE: {f}")
    if args.json:
        print(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "kinds"}, "outcomes": summary,
                          "changes": counts, "seconds": round(seconds, 1)}))
    return 1 if out.failures or over or len(peaks) < args.workers else 0


if __name__ == "__main__":
    sys.exit(main())
