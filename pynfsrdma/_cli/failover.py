"""``pynfsrdma failover-test URL``: a scripted multipath failover scenario and what it cost.

It starts N path proxies (127.0.0.2, .3, ... in this process) in front of the URL's server (which
must be on loopback), connects over all of them (``addrs=``), and runs a workload of
non-idempotent operations (exclusive create + write + close, rename) from several workers while it
cuts (or stalls) one path after another and restores it. It reports:

- stall time per fault: how long the operations in flight when the fault hit took to finish
  (median and worst);
- operations completed; *lost*: acknowledged operations whose effect is missing from the final
  tree; *repeated*: operations that failed with EEXIST/ENOENT, the mark of one executed twice.

    pynfsrdma failover-test nfs://127.0.0.1:2049/export/dir --paths 3 --faults 10 --fault cut
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from .output import print_json

__all__ = ["FailoverReport", "handler", "register", "run_failover"]

PROG = "pynfsrdma failover-test"


@dataclass
class FailoverReport:
    paths: int
    fault: str
    faults: int
    operations_completed: int = 0
    operations_lost: int = 0
    operations_repeated: int = 0
    errors: list[str] = field(default_factory=list)
    stall_times_s: list[float] = field(default_factory=list)
    resends: int = 0
    duration_s: float = 0.0

    @property
    def stall_median_s(self) -> float:
        return statistics.median(self.stall_times_s) if self.stall_times_s else 0.0

    @property
    def stall_worst_s(self) -> float:
        return max(self.stall_times_s, default=0.0)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["stall_median_s"] = round(self.stall_median_s, 4)
        d["stall_worst_s"] = round(self.stall_worst_s, 4)
        d["stall_times_s"] = [round(x, 4) for x in self.stall_times_s]
        return d

    def text(self) -> str:
        return (
            f"{self.faults} x {self.fault} over {self.paths} paths in {self.duration_s:.1f} s: "
            f"{self.operations_completed} operations completed, {self.operations_lost} lost, "
            f"{self.operations_repeated} repeated, {self.resends} requests resent; stall after a fault: "
            f"median {self.stall_median_s * 1000:.0f} ms, worst {self.stall_worst_s * 1000:.0f} ms"
        )


async def run_failover(
    url: str,
    *,
    paths: int = 3,
    faults: int = 10,
    fault: str = "cut",
    interval: float = 0.5,
    down: float = 0.3,
    workers: int = 4,
    first_host: int = 2,
    stalltimeo: float = 0.5,
) -> FailoverReport:
    """Run the scenario against the server of ``url`` (a directory on it is used and removed)."""
    import trio

    from .._client.api import Client
    from .._client.url import parse_url
    from .._testbed.failover_workload import CreateRename, stall_times
    from .._testbed.proxied_paths import open_paths

    u = parse_url(url)
    report = FailoverReport(paths, fault, faults)
    spans: list[tuple[float, float]] = []  # (start, end) of every completed operation
    fault_times: list[float] = []
    async with trio.open_nursery() as nursery:
        pp = await open_paths(nursery, u.host, u.port, paths, first=first_host)
        addrs = ",".join(f"{a}:{pp.port}" for a in pp.addresses[1:])
        base = f"nfs://{pp.addresses[0]}:{pp.port}{u.path}?notrunkdiscovery&stalltimeo={stalltimeo}"
        url_all = base + (f"&addrs={addrs}" if addrs else "")
        work = f"/failover-{os.getpid()}-{trio.current_time():.0f}"
        async with Client.connect(url_all, hard=True, timeo=60) as nfs:
            assert nfs.trunking is not None
            with trio.move_on_after(10):
                await nfs.trunking.settled.wait()
            await nfs.mkdir(work)
            load = CreateRename(nfs, work, spans)

            async def scenario() -> None:
                await trio.sleep(interval)
                for i in range(faults):
                    proxy = pp[i % paths]
                    fault_times.append(trio.current_time())
                    proxy.apply(fault)
                    await trio.sleep(down)
                    proxy.restore()
                    await trio.sleep(interval)
                load.done.set()

            t0 = trio.current_time()
            async with trio.open_nursery() as n:
                for w in range(workers):
                    n.start_soon(load.worker, w)
                n.start_soon(scenario)
            report.duration_s = trio.current_time() - t0
            report.operations_completed, report.operations_repeated = load.completed, load.repeated
            report.errors = load.errors
            report.operations_lost = await load.lost()
            session = nfs.clientid.session
            report.resends = session.resends if session is not None else 0
            await nfs.rmtree(work)
        nursery.cancel_scope.cancel()
    report.stall_times_s = stall_times(spans, fault_times)
    return report


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "failover-test",
        help="cut/stall paths one after another while a workload runs; report stall time, lost and repeated",
        description="Start N path proxies (127.0.0.2, ...) in front of the URL's server, connect over all of "
        "them, and fault them one after another while workers create and rename files.",
    )
    p.add_argument("url", help="a directory on a loopback server (nfs://127.0.0.1:PORT/export)")
    p.add_argument("--paths", type=int, default=3, help="path proxies (default 3)")
    p.add_argument("--faults", type=int, default=10, help="faults to inject, round robin (default 10)")
    p.add_argument("--fault", choices=("cut", "stall"), default="cut")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between faults (default 0.5)")
    p.add_argument("--down", type=float, default=0.3, help="seconds a path stays faulty (default 0.3)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--stalltimeo", type=float, default=0.5, help="stall detection, seconds (default 0.5)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=handler, sends_rpcs=True)


def handler(args: argparse.Namespace) -> int:
    if args.paths < 1 or args.faults < 0 or args.workers < 1:
        print(f"{PROG}: --paths and --workers must be >= 1, --faults >= 0", file=sys.stderr)
        return 2
    import trio

    report = trio.run(
        lambda: run_failover(
            args.url,
            paths=args.paths,
            faults=args.faults,
            fault=args.fault,
            interval=args.interval,
            down=args.down,
            workers=args.workers,
            stalltimeo=args.stalltimeo,
        )
    )
    if args.json:
        print_json(report.to_json())
    else:
        print(report.text())
    return 0 if report.operations_lost == 0 and report.operations_repeated == 0 else 1
