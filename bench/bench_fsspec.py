"""Our fsspec back end (``nfs://``) against nfs4fs (``nfs4://``, PyPI's fsspec back end over a vectorized
NFSv4 client), in the same run and against the same server.

    .venv/bin/python bench/bench_fsspec.py [--files 300] [--big-mib 128] [--repeat 3] [--url URL] [--json]

Without ``--url`` it starts its own NFS-Ganesha (the testbed) on loopback. Each call below is timed
a few times, the two back ends taking turns (which one goes first alternates), and reported as the
best and median time of the whole batch, with the ratio of the best times (nfs4fs's time over ours:
above 1 means ours is faster), the least CPU time a call took on each side (this process's CPU,
all its threads: the server runs elsewhere; steadier than the times on a loaded host) and the RPCs
each of our calls sent (our client's own counters):

- ``pipe_file`` of N small files (1 KiB each), one call each;
- ``info`` of those N files, one call each;
- ``cat_file`` of those N files whole, one call each;
- ``cat_file(path, start, end)``: N ranges of 4 KiB of one file, one call each;
- ``cat_ranges``: the same N ranges in one call (how pyarrow and fsspec's parquet reader fetch);
- a file opened ``"rb"`` (no read cache, 4 KiB blocks) and the same N ranges read from it, seek and
  read each (its RPCs per range count the open's ``info`` too);
- ``rm(recursive=True)`` of a directory of N files (made before the timing);
- ``walk``, ``find`` and ``du`` of a tree of N small files in N/10 directories (made before the timing);
- ``pipe_file`` and ``cat_file`` of one BIG MiB file.

Everything read is compared with what was written, and what was written is read back.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fsspec

from bench.common import MIB, IntegrityError, Measurement, align, bench_target, stolen
from pynfsrdma.fsspec import NFSFileSystem

SMALL = 1024
RANGE = 4096


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Row:
    """One fsspec call measured through both back ends: seconds per batch, and our RPCs per call."""

    operation: str
    calls: int  # calls in a batch
    ours: Measurement = field(default_factory=Measurement)
    theirs: Measurement = field(default_factory=Measurement)
    rpcs: list[float] = field(default_factory=list)  # ours, per call, each run
    cpu: dict[str, list[float]] = field(default_factory=lambda: {"ours": [], "nfs4fs": []})  # s per call, each run

    @property
    def ratio(self) -> float:
        """nfs4fs's best time over ours: above 1 means ours is faster."""
        return self.ours.best / self.theirs.best if self.theirs.best else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "operation": self.operation,
            "ours_best_ms": round(1000 / self.ours.best, 2),
            "ours_median_ms": round(1000 / self.ours.median, 2),
            "nfs4fs_best_ms": round(1000 / self.theirs.best, 2),
            "nfs4fs_median_ms": round(1000 / self.theirs.median, 2),
            "ratio": round(self.ratio, 3),
            "ours_rpcs_per_call": round(max(self.rpcs), 2),
            "ours_cpu_us_per_call": round(1e6 * min(self.cpu["ours"]), 1),
            "nfs4fs_cpu_us_per_call": round(1e6 * min(self.cpu["nfs4fs"]), 1),
        }


def format_table(rows: list[Row]) -> str:
    lines = [("fsspec call", "nfs4fs best (median)", "ours best (median)", "ours speed / nfs4fs",
              "CPU/call nfs4fs, ours", "our RPCs/call")]
    for r in rows:
        lines.append((
            r.operation,
            f"{1000 / r.theirs.best:,.1f} ({1000 / r.theirs.median:,.1f}) ms",
            f"{1000 / r.ours.best:,.1f} ({1000 / r.ours.median:,.1f}) ms",
            f"{r.ratio:.2f}x",
            f"{_us(min(r.cpu['nfs4fs']))}, {_us(min(r.cpu['ours']))}",
            f"{max(r.rpcs):g}",
        ))
    return align(lines)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} us" if seconds < 0.01 else f"{seconds * 1e3:,.1f} ms"


class Side:
    """One back end: its file system and how it names a path of the bench directory."""

    def __init__(self, name: str, fs: Any, prefix: str, rpcs: Callable[[], int] | None) -> None:
        self.name = name
        self.fs = fs
        self.prefix = prefix
        self.rpcs = rpcs

    def path(self, *names: str) -> str:
        return "/".join([self.prefix, *names]) if self.prefix else "/".join(names)


def timed(side: Side, call: Callable[[], Any]) -> tuple[Any, float, float, int]:
    """What ``call()`` returned, the seconds it took, the CPU seconds this process spent meanwhile,
    and the RPCs our client sent."""
    before = side.rpcs() if side.rpcs else 0
    cpu = time.process_time()
    t = time.perf_counter()
    out = call()
    seconds = time.perf_counter() - t
    cpu = time.process_time() - cpu
    return out, seconds, cpu, (side.rpcs() - before) if side.rpcs else 0


def expect(what: str, got: Any, want: Any) -> None:
    if got != want:
        raise IntegrityError(f"{what}: what came back is not what was written")


class Bench:
    def __init__(self, args: argparse.Namespace, ours: Side, theirs: Side, local: Path | None) -> None:
        self.args = args
        self.sides = (ours, theirs)
        self.local = local
        n = args.files
        self.small = {f"f{i:04d}": os.urandom(SMALL) for i in range(n)}
        self.ranges_data = os.urandom(n * 2 * RANGE)
        self.starts = [i * 2 * RANGE for i in range(n)]
        self.ends = [s + RANGE for s in self.starts]
        self.big = os.urandom(args.big_mib * MIB)
        n = args.files
        self.tree_dirs = max(1, n // 10)
        self.tree = {f"d{i % self.tree_dirs:03d}/{name}": data for i, (name, data) in enumerate(self.small.items())}
        self.rows = [
            Row(f"pipe_file x {n} small files", n),
            Row(f"info x {n}", n),
            Row(f"cat_file x {n} small files", n),
            Row(f"cat_file(start, end) x {n} ranges of 4 KiB", n),
            Row(f"cat_ranges, the same {n} ranges in one call", 1),
            Row(f'open "rb", the same {n} ranges read from it', n),
            Row(f"rm(recursive=True) of {n} files", 1),
            Row(f"walk of {self.tree_dirs} directories, {n} files", 1),
            Row(f"find of {self.tree_dirs} directories, {n} files", 1),
            Row(f"du of {self.tree_dirs} directories, {n} files", 1),
            Row(f"pipe_file of {args.big_mib} MiB", 1),
            Row(f"cat_file of {args.big_mib} MiB", 1),
        ]

    def run(self) -> list[Row]:
        for side in self.sides:
            side.fs.makedirs(side.path("small"), exist_ok=True)
            side.fs.pipe_file(side.path("ranges"), self.ranges_data)
            for d in range(self.tree_dirs):
                side.fs.makedirs(side.path("walk", f"d{d:03d}"), exist_ok=True)
            side.fs.pipe({side.path("walk", name): data for name, data in self.tree.items()})
        for rep in range(self.args.repeat):
            order = self.sides if rep % 2 == 0 else self.sides[::-1]
            for side in order:
                side.fs.ls(side.path("small"))  # (what a script does first: the directory is known)
                self.round(side, rep)
            log(f"bench: round {rep + 1} of {self.args.repeat} done ({stolen():.0f} s of CPU stolen so far)")
        return self.rows

    def measure(self, row: Row, side: Side, call: Callable[[], Any]) -> Any:
        out, seconds, cpu, rpcs = timed(side, call)
        row.cpu[side.name].append(cpu / row.calls)
        if side is self.sides[0]:
            row.ours.add(1, seconds)
            row.rpcs.append(rpcs / row.calls)
        else:
            row.theirs.add(1, seconds)
        return out

    def round(self, side: Side, rep: int) -> None:
        fs, n = side.fs, self.args.files
        rows = iter(self.rows)
        names = list(self.small)
        paths = [side.path("small", name) for name in names]

        def pipe_each() -> None:
            for p, name in zip(paths, names, strict=True):
                fs.pipe_file(p, self.small[name])

        self.measure(next(rows), side, pipe_each)
        infos = self.measure(next(rows), side, lambda: [fs.info(p) for p in paths])
        expect("info", [i["size"] for i in infos], [SMALL] * n)
        got = self.measure(next(rows), side, lambda: [fs.cat_file(p) for p in paths])
        expect("cat_file", got, [self.small[name] for name in names])
        rpath = side.path("ranges")
        got = self.measure(next(rows), side, lambda: [fs.cat_file(rpath, s, e) for s, e in
                                                     zip(self.starts, self.ends, strict=True)])
        want = [self.ranges_data[s:e] for s, e in zip(self.starts, self.ends, strict=True)]
        expect("cat_file(start, end)", got, want)
        got = self.measure(next(rows), side, lambda: fs.cat_ranges([rpath] * n, self.starts, self.ends))
        expect("cat_ranges", got, want)

        def read_opened() -> list[bytes]:
            with fs.open(rpath, "rb", block_size=RANGE, cache_type="none") as f:
                out = []
                for s in self.starts:
                    f.seek(s)
                    out.append(f.read(RANGE))
                return out

        got = self.measure(next(rows), side, read_opened)
        expect('open "rb" and read', got, want)
        tree = side.path(f"tree-{rep}")
        fs.makedirs(tree, exist_ok=True)
        fs.pipe({f"{tree}/{name}": self.small[name] for name in names})
        self.measure(next(rows), side, lambda: fs.rm(tree, recursive=True))
        if fs.exists(tree):
            raise IntegrityError(f"rm(recursive=True): {tree} is still there")
        top = side.path("walk")
        relative = sorted(self.tree)

        def below(paths: Any) -> list[str]:  # (nfs4fs names them from its root, we from the server's)
            return sorted(str(p).rstrip("/").split("/walk/", 1)[-1] for p in paths)

        walked = self.measure(next(rows), side, lambda: list(fs.walk(top)))
        expect("walk", below(f"{d}/{f}" for d, _, files in walked for f in files), relative)
        found = self.measure(next(rows), side, lambda: fs.find(top))
        expect("find", below(found), relative)
        total = self.measure(next(rows), side, lambda: fs.du(top))
        expect("du", total, sum(len(v) for v in self.tree.values()))
        bpath = side.path("big")
        self.measure(next(rows), side, lambda: fs.pipe_file(bpath, self.big))
        got = self.measure(next(rows), side, lambda: fs.cat_file(bpath))
        expect(f"cat_file of {self.args.big_mib} MiB", got, self.big)
        fs.rm_file(bpath)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--files", type=int, default=300, help="small files, and ranges (default 300)")
    p.add_argument("--big-mib", type=int, default=128, help="size of the big file (default 128)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each measurement per back end (default 3)")
    p.add_argument("--url", help="benchmark against this server (nfs://host:port/path) instead of a local one")
    p.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = p.parse_args(argv)
    if args.files < 1 or args.big_mib < 1 or args.repeat < 1:
        p.error("--files, --big-mib and --repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    import json

    import nfs4fs

    args = parse_args(argv)
    started = time.perf_counter()
    with bench_target(args.url) as target:
        u = urlsplit(target.ours_url)
        host, port = u.hostname or "127.0.0.1", u.port or 2049
        if target.parent_url is not None:  # someone else's server: make our directory over NFS
            NFSFileSystem(host, port).makedirs(target.remote_dir, exist_ok=True)
        ours_fs = NFSFileSystem(host, port, skip_instance_cache=True)  # (cat_ranges: two READs a COMPOUND)
        ours_fs.makedirs(f"{target.remote_dir}/ours", exist_ok=True)
        ours_fs.makedirs(f"{target.remote_dir}/n4", exist_ok=True)
        ours = Side("ours", ours_fs, f"{target.remote_dir}/ours", lambda: int(ours_fs.client.stats()["rpc"]["calls"]))
        theirs_fs = fsspec.filesystem("nfs4", host=f"{host}:{port}", root=target.remote_dir.lstrip("/") + "/n4",
                                      auth="auth_sys", minor_version=1, skip_instance_cache=True,
                                      read_all_max_total_bytes=max(16, args.big_mib) * MIB)  # (cat_file's cap)
        theirs = Side("nfs4fs", theirs_fs, "", None)
        log(f"bench: {target.description}, directory {target.remote_dir}; {args.files} files, "
            f"{args.big_mib} MiB; nfs4fs {nfs4fs.__version__}")
        try:
            rows = Bench(args, ours, theirs, target.local_dir).run()
        finally:
            if target.parent_url is not None:
                ours_fs.rm(target.remote_dir, recursive=True)
            ours_fs.client.close()
    print(format_table(rows))
    print(f"(best and median of {args.repeat} runs, the two taking turns; above 1x ours is faster)")
    if args.json:
        print(json.dumps({"files": args.files, "big_mib": args.big_mib, "repeat": args.repeat,
                          "server": target.description, "nfs4fs_version": nfs4fs.__version__,
                          "cpus": os.cpu_count(), "rows": [r.as_dict() for r in rows]}, sort_keys=True))
    log(f"bench: done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
