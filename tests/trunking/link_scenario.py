"""Run INSIDE a link testbed's namespace (its ``client_prefix``): mount the testbed's URL, wait until
trunking discovery has every path up, write SIZE random bytes to NAME and read them back, and print a
JSON report for test_link_scheduling.py: the bytes each link carried (the kernel's HTB class counters)
while writing and while reading, and whether the data read back is the data written.

``--cut ADDRESS STATE_DIR``: once that path has carried 2 MiB of the write, it is cut as
``pynfsrdma testbed fault ADDRESS cut`` does (ss -K, new connections refused), and the write goes on
until that is done; the report then also gives the bytes each path carried after the cut.

``--slow ADDRESS MBPS STATE_DIR``: once the read has carried a fifth of the file, that link's rate
changes as ``pynfsrdma testbed fault ADDRESS rate MBPS`` does; the report then also gives the bytes
each link carried back between 35% and 90% of the read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._session.path_set import PathState
from pynfsrdma._testbed import daemon
from pynfsrdma._testbed.links import class_bytes

MiB = 1 << 20
SLOW_AT, MEASURE_FROM, MEASURE_TO = 0.2, 0.35, 0.9  # of the read: see slow_when_carrying


def counters() -> dict[str, int]:
    out = subprocess.run(["tc", "-s", "class", "show", "dev", "lo"], capture_output=True, text=True, check=True)
    return class_bytes(out.stdout)


async def counters_soon() -> dict[str, int]:
    done = await trio.run_process(["tc", "-s", "class", "show", "dev", "lo"], capture_stdout=True)
    return class_bytes(done.stdout.decode())


def carried(before: dict[str, int], after: dict[str, int], classes: list[str]) -> list[int]:
    return [after.get(c, 0) - before.get(c, 0) for c in classes]


async def scenario(args: argparse.Namespace) -> dict[str, object]:
    paths = args.paths
    up_classes = [f"1:{0x100 + i:x}" for i in range(paths)]
    down_classes = [f"1:{0x200 + i:x}" for i in range(paths)]
    data = os.urandom(args.size)
    report: dict[str, object] = {}
    async with Client.connect(args.url, timeo=30, hard=True) as nfs:
        trunking = nfs.trunking
        assert trunking is not None
        with trio.fail_after(20):
            await trunking.settled.wait()
            while len([p for p in trunking.paths.paths if p.state is PathState.UP]) < paths:
                await trunking.paths.wait_changed()
        report["addresses"] = [p.address for p in trunking.paths.paths]
        report["transports"] = {p.address: p.transport_kind for p in trunking.paths.paths}
        cut_at: dict[str, int] = {}
        cutting = False
        before = counters()

        async def cut_when_carrying(victim: str) -> None:
            nonlocal cutting
            index = int(victim.rsplit(".", 1)[1]) - 2
            while True:
                now = await counters_soon()
                if now.get(up_classes[index], 0) - before.get(up_classes[index], 0) >= 2 * MiB:
                    break
                await trio.sleep(0.01)
            cutting = True
            await trio.to_thread.run_sync(daemon.fault, args.cut[1], victim, ["cut"])
            cut_at.update(await counters_soon())

        async with trio.open_nursery() as nursery:
            if args.cut:
                nursery.start_soon(cut_when_carrying, args.cut[0])
            async with await nfs.open(f"/{args.name}", "w") as f:
                await f.write(data)
            if not cutting:  # the write is over before the path carried enough of it
                nursery.cancel_scope.cancel()
        written = counters()
        report["write"] = carried(before, written, up_classes)
        if cut_at:
            report["after_cut"] = carried(cut_at, written, up_classes)
        slowed: dict[str, dict[str, int]] = {}

        async def slow_when_carrying(victim: str, rate: str) -> None:
            # the rate changes once the read has carried SLOW_AT; the shares are taken of what the
            # links carry from MEASURE_FROM to MEASURE_TO after it (what was queued at the old rate
            # and the read's last calls left out)
            marks = {"changed": SLOW_AT, "from": MEASURE_FROM, "to": MEASURE_TO}
            for name, fraction in marks.items():
                while True:
                    now = await counters_soon()
                    if sum(carried(written, now, down_classes)) >= fraction * args.size:
                        break
                    await trio.sleep(0.01)
                if name == "changed":
                    await trio.to_thread.run_sync(daemon.fault, args.slow[2], victim, ["rate", rate])
                slowed[name] = now

        async with trio.open_nursery() as nursery:
            if args.slow:
                nursery.start_soon(slow_when_carrying, args.slow[0], args.slow[1])
            back = await nfs.read_file(f"/{args.name}")
            nursery.cancel_scope.cancel()
        report["read"] = carried(written, counters(), down_classes)
        if "to" in slowed:
            report["after_slow"] = carried(slowed["from"], slowed["to"], down_classes)
        report["read_back_ok"] = hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
        report["sha256"] = hashlib.sha256(data).hexdigest()
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("paths", type=int)
    parser.add_argument("size", type=int)
    parser.add_argument("name")
    parser.add_argument("--cut", nargs=2, metavar=("ADDRESS", "STATE_DIR"))
    parser.add_argument("--slow", nargs=3, metavar=("ADDRESS", "MBPS", "STATE_DIR"))
    report = trio.run(scenario, parser.parse_args())
    json.dump(report, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
