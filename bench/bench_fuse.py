"""The FUSE mount against the FUSE ceiling and nfs-rs, in one run (issue 3, "Figures").

    .venv/bin/python bench/bench_fuse.py [--size-mib 1024] [--files 10000] [--tar-files 5000] [--json]
                                         [--only ls,untar,...] [--repeat N] [--rpc-counts] [--mount-option OPT]

Starts its own NFS-Ganesha (testbed) and mounts it with ``python -m pynfsrdma.cli.main mount URL MNT -f``
(unmounted with ``fusermount3 -u``); then, through the mount:
- sequential write of SIZE, buffered and O_DIRECT (``dd if=/dev/zero bs=1M conv=fsync``: the time
  includes getting the data onto the server's stable storage);
- sequential read of SIZE (a file of incompressible data made on the server's disk), buffered and
  O_DIRECT (``dd of=/dev/null bs=1M``), the page cache dropped before each (``echo 3 >
  /proc/sys/vm/drop_caches``: root);
- ``ls -l`` of a cold directory of FILES entries (the mount is made again and the kernel's caches
  dropped first, so that neither the kernel nor the daemon remembers a name);
- untar of a source-like tree of TAR_FILES small files (generated at the start) with ``tar x``.
The same work against a do-nothing pyfuse3 file system (``bench/null_fuse.py``: zeros for reads,
writes discarded, a FILES-entry directory, and a scratch directory that keeps the names and
attributes of what ``tar x`` makes but no data), the ceiling of FUSE here; and
with the nfs-rs client where it applies (a library, not a mount, so it has no page cache: its one
read and one write figure stand on both the buffered and the O_DIRECT lines; its "ls -l" is a
``scandir`` with attributes; its untar creates the same directories and files with mkdir/open/write_at).

The small-file lines (``ls -l``, untar) run the mount and nfs-rs in turn, ``--repeat`` times (best of
each), with the server in the same state for both: NFS-Ganesha reads the directory once before anyone
is listing it for time, and the page cache is dropped before each listing. ``--rpc-counts`` prints the
mount's COMPOUNDs per untarred file and per listed entry (``pynfsrdma stats --json``).
Each read line prints the CPU the mount daemon (user, system) and NFS-Ganesha spent per GiB.

Each other figure is one run (a default run takes about 3-4 minutes on 2 cores). Prints a table and,
with --json, one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nfs_rs

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import align, stolen  # noqa: E402
from pynfsrdma import control  # noqa: E402
from pynfsrdma.testbed import Ganesha  # noqa: E402

MIB = 1 << 20
PY = sys.executable
MOUNT_WAIT = 30.0
NA = None  # an operation a client cannot do


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


# -- rows ---------------------------------------------------------------------------------------------------
@dataclass
class Row:
    operation: str
    unit: str
    ours: float | None = None
    ceiling: float | None = None
    nfsrs: float | None = None

    @staticmethod
    def _ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    @property
    def vs_ceiling(self) -> float | None:
        return self._ratio(self.ours, self.ceiling)

    @property
    def vs_nfsrs(self) -> float | None:
        return self._ratio(self.ours, self.nfsrs)

    def as_dict(self) -> dict[str, object]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 1)

        return {
            "operation": self.operation,
            "unit": self.unit,
            "pynfsrdma": r(self.ours),
            "fuse_ceiling": r(self.ceiling),
            "nfsrs": r(self.nfsrs),
            "vs_ceiling": self.vs_ceiling,
            "vs_nfsrs": self.vs_nfsrs,
        }


def format_table(rows: list[Row]) -> str:
    def f(x: float | None, unit: str = "") -> str:
        return "n/a" if x is None else f"{x:,.1f}{unit}"

    def q(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}x"

    header = ("operation", "pynfsrdma mount", "FUSE ceiling", "nfs-rs", "mount/ceiling", "mount/nfs-rs")
    lines = [header] + [
        (
            r.operation,
            f(r.ours, " " + r.unit),
            f(r.ceiling, " " + r.unit),
            f(r.nfsrs, " " + r.unit),
            q(r.vs_ceiling),
            q(r.vs_nfsrs),
        )
        for r in rows
    ]
    return align(lines)


# -- helpers ------------------------------------------------------------------------------------------------
def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def steal_share(before: float, seconds: float) -> float:
    """The share of the machine's CPUs the host took during the last ``seconds`` (from ``stolen()``
    taken before them)."""
    return (stolen() - before) / max(seconds, 1e-9) / (os.cpu_count() or 1)


def process_cpu(pid: int) -> tuple[float, float]:
    """Seconds of user and of system CPU process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck


def daemon_cpu(mountpoint: Path) -> float:
    """Seconds of CPU (user and system) the mount daemon of ``mountpoint`` has used so far."""
    return sum(process_cpu(control.query(str(mountpoint), "stats")["pid"]))


def timed_read(what: str, path: Path, direct: bool, gib: float, daemon: int, server: int | None) -> float:
    """``dd_read``'s seconds; prints the CPU the mount daemon and the server spent per GiB on it (where
    a read's CPU goes on this machine: the README's budget against the ceiling)."""
    d0, s0 = process_cpu(daemon), process_cpu(server) if server else (0.0, 0.0)
    seconds = timed(lambda: dd_read(path, direct))
    d1, s1 = process_cpu(daemon), process_cpu(server) if server else (0.0, 0.0)
    log(
        f"{what}: per GiB the mount daemon took {(d1[0] - d0[0]) / gib:.2f} s user and "
        f"{(d1[1] - d0[1]) / gib:.2f} s system CPU, NFS-Ganesha {(sum(s1) - sum(s0)) / gib:.2f} s"
    )
    return seconds


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sh(*cmd: str) -> None:
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")


def dd_read(path: Path, direct: bool) -> None:
    sh("dd", f"if={path}", "of=/dev/null", "bs=1M", *(["iflag=direct"] if direct else []))


def dd_write(path: Path, mib: int, direct: bool) -> None:
    sh(
        "dd",
        "if=/dev/zero",
        f"of={path}",
        "bs=1M",
        f"count={mib}",
        "conv=fsync",
        *(["oflag=direct"] if direct else []),
    )


def ls_l(path: Path) -> int:
    p = subprocess.run(["ls", "-l", str(path)], capture_output=True, text=True, check=True)
    return len(p.stdout.splitlines()) - 1  # the "total" line


RPC_COUNTS = False  # --rpc-counts


def report_stats(mountpoint: Path, what: str, per: int) -> None:
    """With --rpc-counts: the mount's COMPOUNDs and operations (``pynfsrdma stats --json``) per unit."""
    if not RPC_COUNTS:
        return
    p = subprocess.run(
        [PY, "-m", "pynfsrdma.cli.main", "stats", str(mountpoint), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if p.returncode != 0:
        log(f"stats of {mountpoint}: {p.stderr.strip()}")
        return
    report = json.loads(p.stdout)
    log(f"{what}: {json.dumps(summarise_stats(report, per))}")


def summarise_stats(report: dict[str, Any], per: int) -> dict[str, Any]:
    """COMPOUNDs since the mount (in all, per unit, by main operation) and operations inside them."""
    total = report["rpc"]["calls"]
    return {
        "compounds": total,
        "per_unit": round(total / per, 2),
        "compounds_by_operation": {k: v["calls"] for k, v in report["operations"].items()},
        "operations": report["op_counts"],
    }


def is_mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


@contextmanager
def mounted(cmd: list[str], mountpoint: Path, logfile: Path) -> Iterator[None]:
    """Run a FUSE daemon in the foreground as a subprocess; unmount and reap it at the end."""
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        deadline = time.monotonic() + MOUNT_WAIT
        while not is_mounted(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[2:4]} did not mount: {logfile.read_text()[-2000:]}")
            time.sleep(0.05)
        os.stat(mountpoint)
        yield
    finally:
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", str(mountpoint)], check=False)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def make_tarball(path: Path, count: int, seed: int = 1) -> int:
    """A source-like tree: COUNT small text files (200 B - 12 KiB) in nested directories."""
    rnd = random.Random(seed)
    words = [b"static", b"int", b"return", b"struct", b"if", b"else", b"for", b"void", b"char", b"0x1f"]
    per_dir = 50
    with tarfile.open(path, "w") as tar:
        dirs = set()
        for i in range(count):
            d = f"src/mod{i // (per_dir * 10):02d}/sub{(i // per_dir) % 10}"
            for k in range(1, len(d.split("/")) + 1):
                part = "/".join(d.split("/")[:k])
                if part not in dirs:
                    dirs.add(part)
                    ti = tarfile.TarInfo(part)
                    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
                    tar.addfile(ti)
            n = rnd.randint(200, 12 * 1024)
            body = b" ".join(rnd.choice(words) for _ in range(n // 5 + 1))[:n]
            ti = tarfile.TarInfo(f"{d}/file{i:05d}.c")
            ti.size, ti.mode, ti.mtime = len(body), 0o644, 1_700_000_000
            tar.addfile(ti, io.BytesIO(body))
    return count


# -- nfs-rs -------------------------------------------------------------------------------------------------
def nfsrs_untar(client: nfs_rs.Client, tarball: Path, dest: str) -> int:
    files = 0
    client.mkdir(dest)
    with tarfile.open(tarball) as tar:
        for m in tar:
            p = f"{dest}/{m.name}"
            if m.isdir():
                client.mkdir(p)
            elif m.isfile():
                src = tar.extractfile(m)
                assert src is not None
                data = src.read()
                with client.open(p, "wb") as f:
                    if data:
                        f.write_at(data, 0)
                files += 1
    return files


# -- the run ------------------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> list[Row]:
    size = args.size_mib * MIB
    mib = args.size_mib
    mb = size / 1e6
    scratch = Path(tempfile.mkdtemp(prefix="bench-fuse-"))
    rows = {
        k: Row(name, unit)
        for k, name, unit in [
            ("write", f"write {mib} MiB buffered (dd bs=1M, fsync)", "MB/s"),
            ("write_direct", f"write {mib} MiB O_DIRECT (dd bs=1M, fsync)", "MB/s"),
            ("read", f"read {mib} MiB buffered, cold (dd bs=1M)", "MB/s"),
            ("read_direct", f"read {mib} MiB O_DIRECT (dd bs=1M)", "MB/s"),
            ("ls", f"ls -l of a cold {args.files}-entry directory", "entries/s"),
            ("untar", f"untar {args.tar_files} small files (tar x)", "files/s"),
        ]
    }
    want = set(args.only.split(",")) if args.only else set(rows)
    unknown = want - set(rows)
    if unknown:
        raise SystemExit(f"--only: unknown line(s) {', '.join(sorted(unknown))} (lines: {', '.join(rows)})")
    rows = {k: r for k, r in rows.items() if k in want}
    data_lines = want & {"write", "write_direct", "read", "read_direct"}
    try:
        tarball = scratch / "tree.tar"
        make_tarball(tarball, args.tar_files)
        with Ganesha() as server:
            d = server.new_directory(prefix="bench-")
            if data_lines:
                block = os.urandom(MIB)
                with open(d.local / "big", "wb") as f:
                    for _ in range(mib):
                        f.write(block)
            (d.local / "dir").mkdir()
            for i in range(args.files):
                (d.local / "dir" / f"f{i:07d}").touch()
            (d.local / "untar").mkdir()
            log(f"NFS-Ganesha at {server.url}; data made in {d.local}")
            client = nfs_rs.Client.connect(
                f"nfs://{server.host}:{server.port}{d.remote}?version=4.1&noresvport=true", uid=0, gid=0
            )
            mnt = scratch / "mnt"
            mnt.mkdir()
            cmd = [PY, "-m", "pynfsrdma.cli.main", "mount", server.url, str(mnt), "-f"]
            cmd += [x for o in args.mount_option for x in ("-o", o)]
            here = mnt / d.local.name
            try:
                # -- the pynfsrdma mount: sequential data
                if data_lines:
                    with mounted(cmd, mnt, scratch / "mount.log"):
                        if "write" in want:
                            rows["write"].ours = mb / timed(lambda: dd_write(here / "w", mib, False))
                            os.unlink(here / "w")
                        if "write_direct" in want:
                            rows["write_direct"].ours = mb / timed(lambda: dd_write(here / "w", mib, True))
                            os.unlink(here / "w")
                        if want & {"read", "read_direct"}:
                            daemon = control.query(str(mnt), "stats")["pid"]
                            gib = size / (1 << 30)
                        if "read" in want:
                            drop_caches()
                            t = timed_read("read", here / "big", False, gib, daemon, server.pid)
                            rows["read"].ours = mb / t
                        if "read_direct" in want:
                            drop_caches()
                            t = timed_read("read_direct", here / "big", True, gib, daemon, server.pid)
                            rows["read_direct"].ours = mb / t

                # -- small files: the mount and nfs-rs take turns (best of --repeat), with the
                # server in the same state for both
                # the server reads the directory once before anyone is timed: the first listing
                # through NFS-Ganesha fills its own cache, which would favour whoever comes second
                if "ls" in want and len(list(client.scandir("dir"))) != args.files:
                    raise AssertionError("nfs-rs scandir: wrong number of entries")
                for r in range(args.repeat):
                    if "untar" in want:
                        dest = here / "untar" / f"p{r}"
                        with mounted(cmd, mnt, scratch / "mount.log"):
                            dest.mkdir()
                            s0, c0 = stolen(), daemon_cpu(mnt)
                            rate = args.tar_files / timed(
                                functools.partial(sh, "tar", "xf", str(tarball), "-C", str(dest))
                            )
                            ours_steal = steal_share(s0, args.tar_files / rate)
                            ms_per_file = 1000 * (daemon_cpu(mnt) - c0) / args.tar_files
                            report_stats(mnt, "untar", args.tar_files)
                        rows["untar"].ours = max(rows["untar"].ours or 0, rate)
                        s0, t0 = stolen(), time.perf_counter()
                        files = nfsrs_untar(client, tarball, f"untar/n{r}")
                        other = files / (time.perf_counter() - t0)
                        other_steal = steal_share(s0, files / other)
                        rows["untar"].nfsrs = max(rows["untar"].nfsrs or 0, other)
                        log(
                            f"untar, round {r + 1}: mount {rate:,.0f}, nfs-rs {other:,.0f} files/s ({rate / other:.2f}x);"
                            f" CPU taken by the host: {ours_steal:.0%}, {other_steal:.0%};"
                            f" the mount daemon's CPU {ms_per_file:.2f} ms per file"
                        )
                    if "ls" in want:
                        # a fresh mount: neither the kernel nor the daemon knows a name
                        with mounted(cmd, mnt, scratch / "mount.log"):
                            drop_caches()
                            n = 0

                            def ls_ours() -> None:
                                nonlocal n
                                n = ls_l(here / "dir")

                            s0 = stolen()
                            rate = args.files / timed(ls_ours)
                            ours_steal = steal_share(s0, args.files / rate)
                            if n != args.files:
                                raise AssertionError(
                                    f"ls -l through the mount listed {n} of {args.files} entries"
                                )
                            report_stats(mnt, "ls -l", args.files)
                        rows["ls"].ours = max(rows["ls"].ours or 0, rate)
                        drop_caches()
                        s0, t0 = stolen(), time.perf_counter()
                        entries = list(client.scandir("dir"))
                        other = len(entries) / (time.perf_counter() - t0)
                        other_steal = steal_share(s0, len(entries) / other)
                        if len(entries) != args.files:
                            raise AssertionError(
                                f"nfs-rs scandir listed {len(entries)} of {args.files} entries"
                            )
                        rows["ls"].nfsrs = max(rows["ls"].nfsrs or 0, other)
                        log(
                            f"ls -l, round {r + 1}: mount {rate:,.0f}, nfs-rs {other:,.0f} entries/s ({rate / other:.2f}x);"
                            f" CPU taken by the host: {ours_steal:.0%}, {other_steal:.0%}"
                        )

                # -- nfs-rs: sequential data
                if want & {"write", "write_direct"}:
                    data = bytes(size)
                    t0 = time.perf_counter()
                    with client.open("w", "wb") as wf:
                        n = wf.write_at(data, 0)
                    rate = mb / (time.perf_counter() - t0)
                    if n != size:
                        raise AssertionError(f"nfs-rs wrote {n} of {size}")
                    for k in want & {"write", "write_direct"}:
                        rows[k].nfsrs = rate
                    del data
                    client.unlink("w")
                if want & {"read", "read_direct"}:
                    t0 = time.perf_counter()
                    buf = bytearray(size)
                    with client.open("big", "rb") as rf:
                        n = rf.readinto_at(buf, 0)
                    rate = mb / (time.perf_counter() - t0)
                    if n != size:
                        raise AssertionError(f"nfs-rs read {n} of {size}")
                    for k in want & {"read", "read_direct"}:
                        rows[k].nfsrs = rate
                    del buf
                log("pynfsrdma and nfs-rs done")
            finally:
                client.close()
            shutil.rmtree(d.local / "untar")

            # -- the FUSE ceiling
            if want:
                nmnt = scratch / "null"
                nmnt.mkdir()
                ncmd = [
                    PY,
                    str(REPO / "bench" / "null_fuse.py"),
                    str(nmnt),
                    "--size",
                    str(size),
                    "--files",
                    str(args.files),
                ]
                with mounted(ncmd, nmnt, scratch / "null.log"):
                    if "write" in want:
                        rows["write"].ceiling = mb / timed(lambda: dd_write(nmnt / "sink", mib, False))
                    if "write_direct" in want:
                        rows["write_direct"].ceiling = mb / timed(lambda: dd_write(nmnt / "sink", mib, True))
                    if "read" in want:
                        drop_caches()
                        rows["read"].ceiling = mb / timed(lambda: dd_read(nmnt / "zero", False))
                    if "read_direct" in want:
                        drop_caches()
                        rows["read_direct"].ceiling = mb / timed(lambda: dd_read(nmnt / "zero", True))
                    if "ls" in want:
                        best = 0.0
                        for _ in range(args.repeat):
                            drop_caches()
                            best = max(best, args.files / timed(lambda: ls_l(nmnt / "dir")))
                        rows["ls"].ceiling = best
                    if "untar" in want:
                        best = 0.0
                        for r in range(args.repeat):
                            dest = nmnt / "scratch" / f"p{r}"
                            dest.mkdir()
                            best = max(
                                best,
                                args.tar_files
                                / timed(functools.partial(sh, "tar", "xf", str(tarball), "-C", str(dest))),
                            )
                            made = sum(len(files) for _, _, files in os.walk(dest))
                            if made != args.tar_files:
                                raise AssertionError(f"null file system: untar made {made} files")
                        rows["untar"].ceiling = best
                log("FUSE ceiling done")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return list(rows.values())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size-mib", type=int, default=1024, help="size of the sequential reads and writes")
    p.add_argument("--files", type=int, default=10_000, help="entries of the directory listed")
    p.add_argument("--tar-files", type=int, default=5_000, help="files in the tarball unpacked")
    p.add_argument("--json", action="store_true", help="also print one JSON line")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the small-file lines (ls -l, untar) this many times, the mount and nfs-rs in turn; best of each",
    )
    p.add_argument(
        "--only",
        metavar="LINES",
        help="comma-separated lines to run: write, write_direct, read, read_direct, ls, untar (default: all)",
    )
    p.add_argument(
        "--mount-option",
        action="append",
        default=[],
        metavar="OPT",
        help="a -o option for the mount (repeatable)",
    )
    p.add_argument(
        "--rpc-counts",
        action="store_true",
        help="print the mount's NFS operation counts per file (untar) and per entry (ls -l) to stderr",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    global RPC_COUNTS
    RPC_COUNTS = args.rpc_counts
    if os.geteuid() != 0:
        print("bench_fuse.py: needs root (FUSE mounts, drop_caches)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    rows = run(args)
    print(format_table(rows))
    print(f"({time.monotonic() - t0:.0f} s; ratios above 1 mean the mount is faster)")
    if args.json:
        print(
            json.dumps(
                {
                    "size_mib": args.size_mib,
                    "files": args.files,
                    "tar_files": args.tar_files,
                    "nfs_rs_version": nfs_rs.__version__,
                    "rows": [r.as_dict() for r in rows],
                },
                sort_keys=True,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
