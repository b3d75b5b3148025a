"""Trunking over links: sequential write, read and put of one file over 1..4 paths of the same rate, over
unequal rates and over TCP paths with an RPC-over-RDMA one, each against the sum of the link rates; a
link slowed and paths cut during transfers.

    .venv/bin/python -m bench.bench_trunking [--rate 40] [--unequal 40,20,10,10] [--mixed 20,20,40]
                                             [--paths 1,2,3,4] [--size-mib 512] [--repeat 3]
                                             [--[no-]one-link] [--[no-]put] [--faults 4]
                                             [--rate-to MBPS]
                                             [--cuts 10] [--down 0.5] [--interval 0.5] [--json]

Each layout is a link testbed (``pynfsrdma testbed up --paths N --link-rate ...``: NFS-Ganesha in a
network namespace of its own, each path a kernel rate limit; root). The client runs inside the
namespace, mounts the first path and finds the others by trunking discovery; it writes the file
(closing it: the data is on the server) and reads it back as a stream (``File.iter_views``: the
replies' buffers, no copy), ``--repeat`` times, and checks the data by sha256 every time (after
the clock stops). With ``--put`` (the default) it also copies a local file of that size to the
server, ``--repeat`` times each way, taking turns at going first: ``Client.put`` (a pipeline: the next block is read
while the WRITEs before it are in flight) and, to say what the pipeline adds, a put window by window
(a window of the local file read, ``File.pwrite`` of it, which returns once its WRITEs are answered,
then the next); each copy is checked by sha256 of the file on the server's disk. ``--mixed``: a
layout whose last link is RPC-over-RDMA (``testbed up --rdma``: the software provider, its queue
pair a TCP connection shaped by the link as the others) and the others TCP, in one session. The first row, over 127.0.0.1 in the namespace through no link at all, is what the
client and the server make of this machine's CPUs: no layout can go above it. A row of one link as
fast as the most equal links together (``--one-link``) says what one connection makes of that rate:
what trunking adds is measured against it.

Then, on ``--faults`` links of ``--rate`` each: the file is read while the bytes each link carries
back are read from the kernel every 250 ms, and 1.5 s in the last link is slowed to ``--rate-to``
(``testbed fault ADDRESS rate MBPS``): the share per link per window, before and after. Last, one
path after another is cut (``testbed fault ADDRESS cut``, restored ``--down`` s later) while a file is
written and read back again and again and two workers create and rename small files: the stall
after each cut (how long the READs, WRITEs and operations in flight at the cut took to finish after
it; median and worst), the operations lost or repeated, and whether every transfer came back intact.

``--tools`` instead runs everyday tools (cp, cat, dd bs=128k, rsync, tar x) both ways through the
mount in the namespace, quiet and with a core kept busy, and while each runs reads every link's byte
counter every 0.2 s: a second table gives the longest time one link carried nothing (under 64 KiB a
reading) while another carried data, the sign of a path the chooser left idle.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[1]


# -- inside the namespace ---------------------------------------------------------------------------


async def _connected(nfs: Any, paths: int) -> list[Any]:
    """The session's paths, once trunking discovery has ``paths`` of them up."""
    from pynfsrdma._session.path_set import PathState

    assert nfs.trunking is not None
    with trio.fail_after(20):
        await nfs.trunking.settled.wait()
        while len([p for p in nfs.trunking.paths.paths if p.state is PathState.UP]) < paths:
            await nfs.trunking.paths.wait_changed()
    return list(nfs.trunking.paths.paths)


async def _put_window_by_window(nfs: Any, local: str, remote: str) -> int:
    """A put that waits for each window of WRITEs to be answered before it reads the next window."""
    chunk = nfs.nfs.maxwrite
    total = 0
    async with await nfs.open(remote, "w") as f:
        with open(local, "rb", buffering=0) as src:
            while blk := src.read(chunk * nfs.io_window(chunk)):
                await f.pwrite(total, blk)
                total += len(blk)
    return total


async def _puts(nfs: Any, data: bytes, repeat: int, export_dir: str) -> dict[str, list[float]]:
    """``Client.put`` and the put window by window, in turn, of a local file of ``data``."""
    digest = hashlib.sha256(data).hexdigest()
    out: dict[str, list[float]] = {"put_MBps": [], "put_window_MBps": []}
    with tempfile.NamedTemporaryFile(prefix="bench-put-", dir="/tmp") as local:
        local.write(data)
        local.flush()
        for i in range(repeat):
            order = ("put_MBps", "put_window_MBps")
            for key in order if i % 2 == 0 else order[::-1]:  # (each goes first every other time)
                name = f"/bench-put-{os.getpid()}-{i}-{key}"
                t = time.perf_counter()
                if key == "put_MBps":
                    n = await nfs.put(local.name, name)
                else:
                    n = await _put_window_by_window(nfs, local.name, name)
                out[key].append(len(data) / (time.perf_counter() - t) / 1e6)
                on_disk = hashlib.sha256((Path(export_dir) / name.lstrip("/")).read_bytes()).hexdigest()
                if n != len(data) or on_disk != digest:
                    raise AssertionError(f"{key}: the file on the server differs from the local one")
                await nfs.remove(name)
    return out


async def _client(url: str, paths: int, size: int, repeat: int, export_dir: str | None = None) -> dict[str, Any]:
    from pynfsrdma._client.api import Client

    data = os.urandom(size)
    digest = hashlib.sha256(data).digest()
    writes: list[float] = []
    reads: list[float] = []
    async with Client.connect(url, hard=True, timeo=60) as nfs:
        if paths > 1:
            await _connected(nfs, paths)
        if nfs.trunking is not None:
            kinds = sorted(p.transport_kind for p in nfs.trunking.paths.live())
            if "rdma" in url and "rdma" not in kinds:
                raise AssertionError(f"no RDMA path among the live ones ({kinds})")
        for i in range(repeat):
            name = f"/bench-{os.getpid()}-{i}"
            t = time.perf_counter()
            async with await nfs.open(name, "w") as f:
                await f.write(data)
            writes.append(size / (time.perf_counter() - t) / 1e6)
            t = time.perf_counter()
            views = []  # (the replies' own buffers: a streamed read copies nothing)
            async with await nfs.open(name, "r") as f:
                async for _, view in f.iter_views():
                    views.append(view)
            reads.append(size / (time.perf_counter() - t) / 1e6)
            check = hashlib.sha256()
            for view in views:
                check.update(view)
            if check.digest() != digest or sum(v.nbytes for v in views) != size:
                raise AssertionError("the data read back differ from the data written")
            del views
            await nfs.remove(name)
        puts = await _puts(nfs, data, repeat, export_dir) if export_dir else {}
    return {"write_MBps": writes, "read_MBps": reads, **puts}


async def _counters() -> dict[str, int]:
    from pynfsrdma._testbed.links import class_bytes

    done = await trio.run_process(["tc", "-s", "class", "show", "dev", "lo"], capture_stdout=True)
    return class_bytes(done.stdout.decode())


def _record_calls(nfs: Any, spans: list[tuple[float, float]]) -> None:
    """Every READ and WRITE of ``nfs`` (the NFSv4 layer's READ and WRITE family) adds its (start, end) to ``spans``."""
    for name in ("read", "write"):
        call = getattr(nfs, name)

        async def recorded(*args: Any, _call: Any = call, **kwargs: Any) -> Any:
            start = trio.current_time()
            result = await _call(*args, **kwargs)
            spans.append((start, trio.current_time()))
            return result

        setattr(nfs, name, recorded)


async def _failover(nfs: Any, addresses: list[str], state_dir: str, size: int, cuts: int, down: float,
                    interval: float) -> dict[str, Any]:
    """Cut one path after another (``testbed fault ADDRESS cut``, restored after ``down`` s) while the
    file is written and read back over the links again and again, and while workers create and rename
    small files: how long the READs, WRITEs and operations in flight at each cut took to finish after
    it, the operations lost or repeated, and whether every transfer's data came back intact."""
    from pynfsrdma._testbed import daemon
    from pynfsrdma._testbed.failover_workload import CreateRename, stall_times

    data = os.urandom(size)
    digest = hashlib.sha256(data).digest()
    spans: list[tuple[float, float]] = []
    fault_times: list[float] = []
    report: dict[str, Any] = {"cuts": cuts, "down_s": down, "completed": 0, "lost": 0, "repeated": 0,
                              "transfers": 0, "transfers_intact": 0, "errors": []}
    _record_calls(nfs.nfs.read_write, spans)
    work = f"/failover-{os.getpid()}"
    await nfs.mkdir(work)
    load = CreateRename(nfs, work, spans)
    done = load.done

    async def transfers() -> None:
        i = 0
        while not done.is_set():
            name = f"{work}/big-{i}"
            async with await nfs.open(name, "w") as f:
                await f.write(data)
            back = await nfs.read_file(name)
            report["transfers"] += 1
            report["transfers_intact"] += hashlib.sha256(back).digest() == digest
            del back
            await nfs.remove(name)
            i += 1

    async def scenario() -> None:
        await trio.sleep(interval)
        for i in range(cuts):
            victim = addresses[i % len(addresses)]
            fault_times.append(trio.current_time())
            await trio.to_thread.run_sync(daemon.fault, state_dir, victim, ["cut"])
            await trio.sleep(down)
            await trio.to_thread.run_sync(daemon.fault, state_dir, victim, ["restore"])
            await trio.sleep(interval)
        done.set()

    async with trio.open_nursery() as n:
        for w in range(2):
            n.start_soon(load.worker, w)
        n.start_soon(transfers)
        n.start_soon(scenario)
    report["completed"], report["repeated"], report["errors"] = load.completed, load.repeated, load.errors
    report["lost"] = await load.lost()
    await nfs.rmtree(work)
    stalls = stall_times(spans, fault_times)
    report["stalls_s"] = [round(x, 3) for x in stalls]
    report["stall_median_s"] = round(statistics.median(stalls), 3) if stalls else 0.0
    report["stall_worst_s"] = round(max(stalls, default=0.0), 3)
    report["errors"] = report["errors"][:5]
    return report


async def _rate_change(nfs: Any, paths: int, state_dir: str, address: str, index: int, rate: float,
                       size: int, before: float = 1.5, after: float = 2.0, step: float = 0.25) -> dict[str, Any]:
    """Read the file over the links (again and again) while the bytes each link carries back are
    read every ``step`` s; ``before`` s in, ``testbed fault ADDRESS rate MBPS`` slows one link."""
    from pynfsrdma._testbed import daemon

    name = f"/rate-{os.getpid()}"
    async with await nfs.open(name, "w") as f:
        await f.write(os.urandom(size))
    classes = [f"1:{0x200 + i:x}" for i in range(paths)]
    windows: list[dict[str, Any]] = []
    changed_at = -1.0
    with trio.CancelScope() as reading:

        async def sample() -> None:
            nonlocal changed_at
            t0 = trio.current_time()
            last = await _counters()
            tick = t0
            while tick - t0 < before + after:
                tick += step
                if changed_at < 0 and tick - t0 > before:
                    await trio.to_thread.run_sync(daemon.fault, state_dir, address, ["rate", f"{rate:g}"])
                    changed_at = trio.current_time() - t0
                await trio.sleep_until(tick)
                now = await _counters()
                moved = [now.get(c, 0) - last.get(c, 0) for c in classes]
                total = sum(moved) or 1
                windows.append({"t_s": round(tick - t0, 2), "MBps": [round(m / step / 1e6, 1) for m in moved],
                                "share": [round(m / total, 3) for m in moved]})
                last = now
            reading.cancel()

        async def read() -> None:
            while True:
                await nfs.read_file(name)

        async with trio.open_nursery() as n:
            n.start_soon(sample)
            n.start_soon(read)
    await trio.to_thread.run_sync(daemon.fault, state_dir, address, ["restore"])
    await nfs.remove(name)
    return {"address": address, "index": index, "rate_MBps": rate, "changed_at_s": round(changed_at, 2),
            "windows": windows}


async def _faults_client(args: argparse.Namespace) -> dict[str, Any]:
    from pynfsrdma._client.api import Client

    state = json.loads((Path(args.state_dir) / "state.json").read_text())
    addresses = [p["address"] for p in state["paths"]]
    async with Client.connect(args.client, hard=True, timeo=60) as nfs:
        await _connected(nfs, len(addresses))
        out: dict[str, Any] = {}
        out["rate_change"] = await _rate_change(nfs, len(addresses), args.state_dir, addresses[-1],
                                                len(addresses) - 1, args.rate_to, args.size_mib * MIB)
        out["failover"] = await _failover(nfs, addresses, args.state_dir, args.failover_mib * MIB, args.cuts,
                                          args.down, args.interval)
    return out


def client_main(args: argparse.Namespace) -> int:
    if args.state_dir:
        report = trio.run(_faults_client, args)
    else:
        report = trio.run(_client, args.client, args.client_paths, args.size_mib * MIB, args.repeat, args.export_dir)
    json.dump(report, sys.stdout)
    return 0


# -- the mount and everyday tools, inside the namespace ----------------------------------------------
# (name, direction, command): "in" copies SRC (a local file) onto the mount's DST, "out" the mount's SRC
# to DST; TAR is a tarball of a few large files, DIR a fresh directory for it
TOOLS: list[tuple[str, str, list[str]]] = [
    ("cp", "in", ["cp", "{src}", "{dst}"]),
    ("cat", "out", ["sh", "-c", 'cat "$0" > "$1"', "{src}", "{dst}"]),
    ("dd bs=128k", "in", ["dd", "if={src}", "of={dst}", "bs=128k", "status=none"]),
    ("dd bs=128k", "out", ["dd", "if={src}", "of={dst}", "bs=128k", "status=none"]),
    ("rsync", "in", ["rsync", "--inplace", "{src}", "{dst}"]),
    ("rsync", "out", ["rsync", "--inplace", "{src}", "{dst}"]),
    ("tar x", "in", ["tar", "xf", "{tar}", "-C", "{dir}"]),
    ("tar x", "out", ["tar", "xf", "{tar}", "-C", "{dir}"]),
]
TAR_MEMBERS = 4  # the tarball's large files


def _spin() -> subprocess.Popen[bytes]:
    """A process that keeps one core busy until it is ended (by its pid)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


SAMPLE_EVERY = 0.2  # seconds between two readings of the links' byte counters during a tool's run
IDLE_BYTES = 64 * 1024  # bytes a link carries in SAMPLE_EVERY below which it counts as idle


class _LinkSampler:
    """The links' byte counters (``tc -s class``, inside the namespace) every SAMPLE_EVERY seconds
    in a thread, while a tool runs; :meth:`idle_spell`: the longest time a link carried (almost)
    nothing in the transfer's direction while another link carried data."""

    def __init__(self) -> None:
        import threading

        self.readings: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from pynfsrdma._testbed.links import class_bytes

        while True:
            done = subprocess.run(["tc", "-s", "class", "show", "dev", "lo"], capture_output=True, check=False)
            self.readings.append(class_bytes(done.stdout.decode()))
            if self._stop.wait(SAMPLE_EVERY):
                return

    def __enter__(self) -> _LinkSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def idle_spell(self, way: str) -> float:
        """Seconds: the longest run of readings in which one link of the transfer's direction ("in":
        to the server, the up classes 1:1xx; "out": the down classes 1:2xx) carried under IDLE_BYTES
        while another carried four times that."""
        prefix = "1:1" if way == "in" else "1:2"
        classes = sorted(c for c in (self.readings[0] if self.readings else {}) if c.startswith(prefix) and len(c) == 5)
        run = {c: 0 for c in classes}
        longest = 0
        for before, after in zip(self.readings, self.readings[1:], strict=False):
            moved = {c: after.get(c, 0) - before.get(c, 0) for c in classes}
            others_busy = sum(m >= 4 * IDLE_BYTES for m in moved.values())
            for c, m in moved.items():
                idle = m < IDLE_BYTES and others_busy > 0
                run[c] = run[c] + 1 if idle else 0
                longest = max(longest, run[c])
        return longest * SAMPLE_EVERY


def _tools_client(url: str, size: int, repeat: int, settings: list[str]) -> dict[str, Any]:
    """Each tool of TOOLS both ways through a mount of ``url`` with each of ``settings`` (mount options;
    they take turns at going first), quiet and with a core kept busy, ``repeat`` rounds: MB/s of each.
    The mount is made again for each tool (its caches cold); the page cache is dropped before each
    "out", so that the data comes over the links."""
    from bench.bench_fuse import drop_caches, mounted

    have = {name for name, _, cmd in TOOLS if shutil.which(cmd[0])}
    work = Path(tempfile.mkdtemp(prefix="bt-tools-", dir="/tmp"))
    mnt = work / "mnt"
    mnt.mkdir()
    src = work / "src"
    with open(src, "wb") as f:
        block = os.urandom(MIB)
        for _ in range(size // MIB):
            f.write(block)
    members = work / "members"
    members.mkdir()
    for i in range(TAR_MEMBERS):
        with open(members / f"part{i}", "wb") as f:
            for _ in range(size // MIB // TAR_MEMBERS):
                f.write(os.urandom(MIB))
    tarball = work / "in.tar"
    subprocess.run(["tar", "cf", str(tarball), "-C", str(members), "."], check=True)
    shutil.rmtree(members)
    results: dict[str, Any] = {"missing": sorted({name for name, _, _ in TOOLS} - have), "rates": {}, "idle": {}}
    try:
        for r in range(repeat):
            for busy in (False, True):
                spinner = _spin() if busy else None
                try:
                    k = r % len(settings)
                    for setting in settings[k:] + settings[:k]:
                        cmd = [sys.executable, "-m", "pynfsrdma._cli.main", "mount", url, str(mnt), "-f"]
                        cmd += ["-o", setting] if setting else []
                        for name, way, template in TOOLS:
                            if name not in have:
                                continue
                            with mounted(cmd, mnt, work / "mount.log"):
                                remote = mnt / f"t-{r}"
                                remote.mkdir(exist_ok=True)
                                local = work / "out"
                                if way == "in":
                                    fill = {"src": src, "dst": remote / "f", "tar": tarball, "dir": remote}
                                else:  # (put there first, through the mount, not timed)
                                    shutil.copyfile(tarball if name == "tar x" else src, remote / "f")
                                    local.mkdir(exist_ok=True)
                                    fill = {"src": remote / "f", "dst": local / "f", "tar": remote / "f", "dir": local}
                                    drop_caches()
                                argv = [a.format(**fill) for a in template]
                                with _LinkSampler() as sampler:
                                    t0 = time.perf_counter()
                                    subprocess.run(argv, check=True)
                                    t = time.perf_counter() - t0
                                shutil.rmtree(remote)
                                shutil.rmtree(local, ignore_errors=True)
                            key = f"{name} {way}|{setting or 'default'}|{'busy' if busy else 'quiet'}"
                            results["rates"].setdefault(key, []).append(size / t / 1e6)
                            results["idle"].setdefault(key, []).append(sampler.idle_spell(way))
                finally:
                    if spinner is not None:
                        spinner.kill()
                        spinner.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def run_tools(rates: list[float], size_mib: int, repeat: int, settings: list[str]) -> dict[str, Any]:
    """The tools table on one link testbed of ``rates``."""
    from pynfsrdma._testbed import daemon

    state_dir = Path(tempfile.mkdtemp(prefix="bt-", dir="/tmp"))
    try:
        state, _ = daemon.up(state_dir, paths=len(rates), link_rates=",".join(f"{r:g}" for r in rates))
        report = _client_command(state, "--tools-client", state["url"], "--size-mib", str(size_mib),
                                 "--repeat", str(repeat), "--settings", ";".join(settings))
    finally:
        daemon.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    report["links_MBps"] = sum(rates)
    report["layout"] = f"{len(rates)} x {rates[0]:g} MB/s" if len(rates) > 1 else f"one {rates[0]:g} MB/s link"
    return report


def format_tools(report: dict[str, Any], settings: list[str]) -> str:
    """Best MB/s (median) of each tool each way, per setting, quiet and with a core kept busy, and
    the best as a share of the links."""
    total = report["links_MBps"]
    names = [s or "default" for s in settings]
    cols = [f"{n}, {load}" for n in names for load in ("quiet", "busy")]
    lines = [f"{report['layout']} ({total:g} MB/s in all): best (median) MB/s, best/links"
             + (f"; not installed: {', '.join(report['missing'])}" if report["missing"] else ""),
             "| tool | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name, way, _ in TOOLS:
        cells = []
        for n in names:
            for load in ("quiet", "busy"):
                samples = report["rates"].get(f"{name} {way}|{n}|{load}")
                cells.append(f"{max(samples):.0f} ({statistics.median(samples):.0f}) {max(samples) / total:.2f}"
                             if samples else "-")
        if any(c != "-" for c in cells):
            lines.append(f"| {name} {way} | " + " | ".join(cells) + " |")
    lines += ["", f"The longest time one link carried under {IDLE_BYTES // 1024} KiB per {SAMPLE_EVERY:g} s while another"
              " carried data (each link's kernel byte counter), s, worst of the rounds",
              "| tool | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name, way, _ in TOOLS:
        cells = []
        for n in names:
            for load in ("quiet", "busy"):
                spells = report.get("idle", {}).get(f"{name} {way}|{n}|{load}")
                cells.append(f"{max(spells):.1f}" if spells else "-")
        if any(c != "-" for c in cells):
            lines.append(f"| {name} {way} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- outside: one link testbed per layout ---------------------------------------------------------


def _client_command(state: dict[str, Any], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [*state["client_prefix"], sys.executable, "-m", "bench.bench_trunking", *args],
        cwd=REPO, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the client failed: {done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def run_layout(
    rates: list[float] | None, size_mib: int, repeat: int, put: bool = False, rdma: bool = False
) -> dict[str, Any]:
    """``rates`` None: one path to 127.0.0.1 of a one-link testbed's namespace, through no link;
    ``rdma``: the last link is RPC-over-RDMA."""
    from pynfsrdma._testbed import daemon

    state_dir = Path(tempfile.mkdtemp(prefix="bt-", dir="/tmp"))
    try:
        link_rates = ",".join(f"{r:g}" for r in (rates or [1000.0]))
        state, _ = daemon.up(state_dir, paths=len(rates or [0]), link_rates=link_rates, rdma=rdma)
        url, paths = (state["url"], len(rates)) if rates else (state["direct_url"], 1)
        extra = ["--export-dir", state["export_dir"]] if put else []
        report = _client_command(state, "--client", url, "--client-paths", str(paths), "--size-mib", str(size_mib),
                                 "--repeat", str(repeat), *extra)
    finally:
        daemon.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    total = sum(rates) if rates else None
    row: dict[str, Any] = {
        "layout": "no link (127.0.0.1): the CPU limit" if rates is None else f"{len(rates)} x "
        + ("/".join(f"{r:g}" for r in rates) if len(set(rates)) > 1 else f"{rates[0]:g}")
        + " MB/s" + (" (last RDMA)" if rdma else ""),
        "links_MBps": total,
    }
    for op in ("write", "read", "put", "put_window"):
        if f"{op}_MBps" not in report:
            continue
        samples = report[f"{op}_MBps"]
        row[f"{op}_best"] = round(max(samples), 1)
        row[f"{op}_median"] = round(statistics.median(samples), 1)
        row[f"{op}_samples"] = [round(s, 1) for s in samples]
        if total:
            row[f"{op}_of_links"] = round(max(samples) / total, 2)
            row[f"{op}_median_of_links"] = round(statistics.median(samples) / total, 2)
    return row


def run_faults(rates: list[float], args: argparse.Namespace) -> dict[str, Any]:
    """On one link testbed: a link slowed during a read (the share per link per window), then paths
    cut one after another during transfers (stalls, operations lost or repeated)."""
    from pynfsrdma._testbed import daemon

    state_dir = Path(tempfile.mkdtemp(prefix="bt-", dir="/tmp"))
    try:
        state, _ = daemon.up(state_dir, paths=len(rates), link_rates=",".join(f"{r:g}" for r in rates))
        report = _client_command(
            state, "--client", state["url"], "--state-dir", str(state_dir), "--size-mib", str(args.size_mib),
            "--rate-to", f"{args.rate_to or rates[-1] / 4:g}", "--failover-mib", str(args.failover_mib),
            "--cuts", str(args.cuts), "--down", f"{args.down:g}", "--interval", f"{args.interval:g}",
        )  # fmt: skip
    finally:
        daemon.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    report["rates"] = rates
    return report


def format_rate_change(rc: dict[str, Any], rates: list[float]) -> str:
    n = len(rates)
    after = list(rates)
    after[rc["index"]] = rc["rate_MBps"]
    lines = [
        f"link {rc['address']} slowed from {rates[rc['index']]:g} to {rc['rate_MBps']:g} MB/s at "
        f"{rc['changed_at_s']:.2f} s; its share should go from {rates[rc['index']] / sum(rates):.2f} to "
        f"{after[rc['index']] / sum(after):.2f}",
        "t (s)  " + "  ".join(f"link{i + 1} MB/s share" for i in range(n)),
    ]
    for w in rc["windows"]:
        mark = " <- rate changed" if w["t_s"] - 0.25 < rc["changed_at_s"] <= w["t_s"] else ""
        cells = "  ".join(f"{m:10.1f} {s:5.2f}" for m, s in zip(w["MBps"], w["share"], strict=True))
        lines.append(f"{w['t_s']:5.2f}  {cells}{mark}")
    return "\n".join(lines)


def format_failover(f: dict[str, Any], rates: list[float]) -> str:
    return (
        f"failover over {len(rates)} x {rates[0]:g} MB/s links, {f['cuts']} cuts of {f['down_s']:g} s during "
        f"{f['transfers']} write+read transfers ({f['transfers_intact']} intact): stall median "
        f"{f['stall_median_s'] * 1000:.0f} ms, worst {f['stall_worst_s'] * 1000:.0f} ms; {f['completed']} "
        f"operations, {f['lost']} lost, {f['repeated']} repeated"
    )


def _of_links(row: dict[str, Any], op: str) -> str:
    if not row["links_MBps"]:
        return "-"
    return f"{row[f'{op}_of_links']:.2f} / {row[f'{op}_median_of_links']:.2f}"


def format_rows(rows: list[dict[str, Any]]) -> str:
    ops = [op for op in ("write", "read", "put", "put_window") if any(f"{op}_best" in r for r in rows)]
    head = ["layout", "links MB/s"]
    for op in ops:
        head += [f"{op.replace('_', ' by ')} best", "median", "x links"]
    # ("x links": the best and the median over the sum of the link rates)
    lines = [head]
    for r in rows:
        line = [r["layout"], f"{r['links_MBps']:g}" if r["links_MBps"] else "-"]
        for op in ops:
            if f"{op}_best" in r:
                line += [f"{r[f'{op}_best']:.1f}", f"{r[f'{op}_median']:.1f}", _of_links(r, op)]
            else:
                line += ["-", "-", "-"]
        lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_trunking", description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--rate", type=float, default=40.0, help="MB/s of each link in the equal layouts")
    p.add_argument("--unequal", default="40,20,10,10", help="MB/s per link of the unequal layout ('' for none)")
    p.add_argument("--mixed", default="20,20,40",
                   help="MB/s per link of a layout whose last link is RPC-over-RDMA, the others TCP ('' for none)")
    p.add_argument("--paths", default="1,2,3,4", help="numbers of equal links to measure")
    p.add_argument("--one-link", action=argparse.BooleanOptionalAction, default=True,
                   help="also one link as fast as the most equal links together (default: yes)")
    p.add_argument("--put", action=argparse.BooleanOptionalAction, default=True,
                   help="also Client.put and a put window by window of a local file (default: yes)")
    p.add_argument("--size-mib", type=int, default=512)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--faults", type=int, default=4, metavar="N",
                   help="links of the fault runs (rate change, failover); 0: none")
    p.add_argument("--rate-to", type=float, default=0.0, help="MB/s the last link is slowed to (default rate/4)")
    p.add_argument("--cuts", type=int, default=10)
    p.add_argument("--down", type=float, default=0.5, help="seconds a cut path stays cut")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between a restore and the next cut")
    p.add_argument("--failover-mib", type=int, default=64, help="size of the file transferred during the cuts")
    p.add_argument("--json", action="store_true")
    p.add_argument("--tools", action="store_true",
                   help="instead: cp, cat, dd bs=128k, rsync and tar x of large files, both ways, through the "
                   "mount, quiet and with a core kept busy, over --paths links of --rate each (a layout each); "
                   "with, for each, the longest time one link sat idle while another carried data")
    p.add_argument("--settings", default="writeback_cache;nowriteback_cache",
                   help="with --tools: ';'-separated mount option sets to compare, taking turns in one run")
    p.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)  # (the run inside a namespace)
    p.add_argument("--tools-client", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--client-paths", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--state-dir", help=argparse.SUPPRESS)
    p.add_argument("--export-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = args.settings.split(";")
    if args.tools_client:
        json.dump(_tools_client(args.tools_client, args.size_mib * MIB, args.repeat, settings), sys.stdout)
        return 0
    if args.client:
        return client_main(args)
    from pynfsrdma._testbed.netns import missing_tools

    why = missing_tools()
    if why is not None:
        print(f"bench_trunking: {why}", file=sys.stderr)
        return 2
    equal = [int(n) for n in args.paths.split(",") if n]
    if args.tools:
        reports = []
        for n in equal:
            reports.append(run_tools([args.rate] * n, args.size_mib, args.repeat, settings))
            if not args.json:
                print(format_tools(reports[-1], settings), flush=True)
                print(flush=True)
        if args.json:
            print(json.dumps({"size_mib": args.size_mib, "repeat": args.repeat, "tools": reports}))
        return 0
    layouts: list[tuple[list[float] | None, bool]] = [(None, False)]
    layouts += [([args.rate] * n, False) for n in equal]
    if args.one_link and max(equal, default=1) > 1:
        layouts.append(([args.rate * max(equal)], False))  # what the client and server make of that rate on one path
    if args.unequal:
        layouts.append(([float(r) for r in args.unequal.split(",")], False))
    if args.mixed:
        layouts.append(([float(r) for r in args.mixed.split(",")], True))
    rows = []
    for rates, rdma in layouts:
        rows.append(run_layout(rates, args.size_mib, args.repeat, args.put, rdma))
        if not args.json:
            print(format_rows(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    faults: dict[str, Any] | None = None
    if args.faults:
        faults = run_faults([args.rate] * args.faults, args)
    if args.json:
        print(json.dumps({"size_mib": args.size_mib, "repeat": args.repeat, "rows": rows, "faults": faults}))
        return 0
    what = "write, read and put" if args.put else "write and read"
    print(f"sequential {what} of {args.size_mib} MiB, {args.repeat} times each (MB/s)")
    print(format_rows(rows))
    if faults is not None:
        print()
        print(format_rate_change(faults["rate_change"], faults["rates"]))
        print()
        print(format_failover(faults["failover"], faults["rates"]))
        f = faults["failover"]
        if f["lost"] or f["repeated"] or f["transfers_intact"] != f["transfers"]:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
