"""The FUSE mount against the FUSE ceiling and nfs-rs, on one FUSE channel or two side by side, in one
run (issue 3, "Figures"; issue 16, the native channel against pyfuse3).

    .venv/bin/python bench/bench_fuse.py [--size-mib 1024] [--files 10000] [--tar-files 5000] [--json]
                                         [--only stat,ls,untar,cat,...] [--repeat N] [--rpc-counts]
                                         [--mount-option OPT] [--channels native,pyfuse3]

Starts its own NFS-Ganesha (testbed) and mounts it with ``python -m pynfsrdma._cli.main mount URL MNT -f
-o channel=CHANNEL`` (unmounted with ``fusermount3 -u``); then, through the mount:
- sequential write of SIZE, buffered and O_DIRECT (``dd if=/dev/zero bs=1M conv=fsync``: the time
  includes getting the data onto the server's stable storage);
- sequential read of SIZE (a file of incompressible data made on the server's disk), buffered and
  O_DIRECT (``dd of=/dev/null bs=1M``), the page cache dropped before each (``echo 3 >
  /proc/sys/vm/drop_caches``: root);
- ``lstat`` of the FILES names of a cold directory one after another (a LOOKUP each) and ``ls -l`` of
  it (the mount is made again and the kernel's caches dropped before each, so that neither the
  kernel nor the daemon remembers a name);
- untar of a source-like tree of TAR_FILES small files (generated at the start) with ``tar x``;
- ``cat`` of every file of that tree (``xargs cat``, the names in the tarball's order, on a new mount
  with the kernel's caches dropped: a LOOKUP, an OPEN, a READ and a CLOSE each; ``--only cat`` runs
  the untar line too).
The same work against a do-nothing file system on the same channel (``bench/null_fuse.py``: zeros
for reads, writes discarded, a FILES-entry directory, and a scratch directory that keeps the names
and attributes of what ``tar x`` makes but no data), the ceiling of FUSE through that channel; and
with the nfs-rs client where it applies (a library, not a mount, so it has no page cache: its one
read and one write figure stand on both the buffered and the O_DIRECT lines; its ``lstat`` is
``Client.stat``, its "ls -l" a ``scandir`` with attributes; its untar creates the same directories
and files with mkdir/open/write_at, its cat reads them with open/readinto_at).

Every line runs ``--repeat`` rounds. In each round every channel of ``--channels`` runs the mount's
lines and then the ceiling's, the channels taking turns at going first, and nfs-rs runs its
small-file lines (its data lines run in the first round only), with the server in the same state
for all: NFS-Ganesha reads the directory once before anyone is listing it for time, and the page
cache is dropped before each listing and each read. The table shows the best of the rounds and,
with more than one, their median; with two channels, the ratio of the first to the second. A
channel written ``CHANNEL+OPT+...`` mounts with those ``-o`` options as well, so that two settings
of one channel take turns in one run (``--channels native,native+nowriteback_cache``); ``io_uring``
and ``noio_uring`` go to the channel's ceiling as well, so that it takes requests the same way
(``--channels native+io_uring,native+noio_uring``, with the kernel's switch on: ``echo Y >
/sys/module/fuse/parameters/enable_uring``).
``--rpc-counts`` prints the mount's COMPOUNDs per untarred file, per file read by cat and per listed
entry (``pynfsrdma stats --json``). Each read and write line prints the CPU the mount daemon (or the ceiling's; user and
system) and NFS-Ganesha spent per GiB; each lstat, ``ls -l``, untar and cat round, the daemon's CPU per
name, entry or file (and for the last three, the share of CPU the host took).

Prints a table and, with --json, one JSON line (``pynfsrdma``, ``fuse_ceiling`` and ``nfsrs`` are the
best figures of the first channel).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nfs_rs

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import Measurement, align, stolen  # noqa: E402
from pynfsrdma import _control_socket as control_socket  # noqa: E402
from pynfsrdma._fuse.channel import CHANNELS, DEFAULT_CHANNEL  # noqa: E402
from pynfsrdma._testbed import Ganesha  # noqa: E402

MIB = 1 << 20
PY = sys.executable
MOUNT_WAIT = 30.0
NA = None  # an operation a client cannot do


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


# -- rows ---------------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One line of the table: its rounds on the mount and on the ceiling, per channel, and nfs-rs's."""

    operation: str
    unit: str
    channels: list[str]
    mount: dict[str, Measurement] = field(default_factory=dict)
    ceiling: dict[str, Measurement] = field(default_factory=dict)
    nfsrs_rounds: Measurement = field(default_factory=Measurement)

    def __post_init__(self) -> None:
        for ch in self.channels:
            self.mount.setdefault(ch, Measurement())
            self.ceiling.setdefault(ch, Measurement())

    @staticmethod
    def _best(m: Measurement) -> float | None:
        return m.best if m.samples else None

    @staticmethod
    def _ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    @property
    def ours(self) -> float | None:
        return self._best(self.mount[self.channels[0]])

    @property
    def ceiling_best(self) -> float | None:
        return self._best(self.ceiling[self.channels[0]])

    @property
    def nfsrs(self) -> float | None:
        return self._best(self.nfsrs_rounds)

    @property
    def vs_ceiling(self) -> float | None:
        return self._ratio(self.ours, self.ceiling_best)

    @property
    def vs_nfsrs(self) -> float | None:
        return self._ratio(self.ours, self.nfsrs)

    def channel_ratio(self, which: dict[str, Measurement]) -> dict[str, float | None]:
        """The first channel against the second, on the best rounds and on the medians."""
        a, b = (which[ch] for ch in self.channels[:2])
        return {
            "best": self._ratio(self._best(a), self._best(b)),
            "median": self._ratio(a.median if a.samples else None, b.median if b.samples else None),
        }

    def as_dict(self) -> dict[str, object]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 1)

        def m(x: Measurement) -> dict[str, object]:
            return {"best": r(self._best(x)), "median": r(x.median if x.samples else None),
                    "rounds": [round(v, 1) for v in x.samples]}

        out: dict[str, object] = {
            "operation": self.operation,
            "unit": self.unit,
            "pynfsrdma": r(self.ours),
            "fuse_ceiling": r(self.ceiling_best),
            "nfsrs": r(self.nfsrs),
            "vs_ceiling": self.vs_ceiling,
            "vs_nfsrs": self.vs_nfsrs,
            "channels": {ch: {"mount": m(self.mount[ch]), "ceiling": m(self.ceiling[ch])} for ch in self.channels},
        }
        if len(self.channels) > 1:
            out["channel_ratio"] = {"mount": self.channel_ratio(self.mount), "ceiling": self.channel_ratio(self.ceiling)}
        return out


def format_table(rows: list[Row]) -> str:
    channels = rows[0].channels if rows else [DEFAULT_CHANNEL]

    def f(m: Measurement, unit: str = "") -> str:
        if not m.samples:
            return "n/a"
        text = f"{m.best:,.0f}"
        if len(m.samples) > 1:
            text += f" ({m.median:,.0f})"
        return text + (" " + unit if unit else "")

    def q(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}x"

    header: list[str] = ["operation"]
    for ch in channels:
        header += [f"mount {ch}", f"ceiling {ch}"]
    header += ["nfs-rs", "mount/ceiling", "mount/nfs-rs"]
    if len(channels) > 1:
        header += [f"mount {channels[0]}/{channels[1]}", f"ceiling {channels[0]}/{channels[1]}"]
    lines = [tuple(header)]
    for r in rows:
        line = [r.operation]
        for ch in channels:
            line += [f(r.mount[ch], r.unit), f(r.ceiling[ch])]
        line += [f(r.nfsrs_rounds), q(r.vs_ceiling), q(r.vs_nfsrs)]
        if len(channels) > 1:
            for which in (r.mount, r.ceiling):
                ratio = r.channel_ratio(which)
                line.append(f"{q(ratio['best'])} ({q(ratio['median'])})" if len(which[channels[0]].samples) > 1
                            else q(ratio["best"]))
        lines.append(tuple(line))
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
    return sum(process_cpu(control_socket.query(str(mountpoint), "stats")["pid"]))


def fuse_requests(mountpoint: Path) -> dict[str, int]:
    """The FUSE requests the mount daemon of ``mountpoint`` has answered so far, by kind."""
    return dict(control_socket.query(str(mountpoint), "stats").get("fuse_requests", {}))


def requests_per_unit(before: dict[str, int], after: dict[str, int], per: int) -> str:
    """The FUSE requests answered between two readings of :func:`fuse_requests`, per unit of
    work: the total, then each kind (the most frequent first), e.g. ``9.3 (SETATTR 3.3, ...)``; a
    channel that counts none (pyfuse3) says so."""
    if not after:
        return "not counted by this channel"
    moved = {k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)}
    kinds = ", ".join(f"{k} {n / per:.2f}" for k, n in sorted(moved.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{sum(moved.values()) / per:.2f} ({kinds})"


def timed_read(what: str, path: Path, direct: bool, gib: float, daemon: int, server: int | None) -> float:
    """``dd_read``'s seconds; prints the CPU the mount daemon and the server spent per GiB on it (where
    a read's CPU goes on this machine: the README's budget against the ceiling)."""
    return timed_cpu(what, lambda: dd_read(path, direct), gib, daemon, server)


def timed_cpu(what: str, fn: Callable[[], object], gib: float, daemon: int, server: int | None) -> float:
    """``fn``'s seconds; prints the CPU the mount daemon (user, system) and the server spent per GiB
    it moved."""
    d0, s0 = process_cpu(daemon), process_cpu(server) if server else (0.0, 0.0)
    seconds = timed(fn)
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
        [PY, "-m", "pynfsrdma._cli.main", "stats", str(mountpoint), "--json"],
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
def mounted(cmd: list[str], mountpoint: Path, logfile: Path) -> Iterator[subprocess.Popen[bytes]]:
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
        yield proc
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


def tar_files(tarball: Path) -> list[tuple[str, int]]:
    """The regular files of ``tarball``: (name, size), in its order."""
    with tarfile.open(tarball) as tar:
        return [(m.name, m.size) for m in tar if m.isfile()]


def cat_all(directory: Path, files: list[tuple[str, int]]) -> None:
    """``cat`` of ``files`` (names under ``directory``), by ``xargs cat``."""
    names = "".join(f"{name}\0" for name, _ in files).encode()
    subprocess.run(["xargs", "-0", "cat"], input=names, stdout=subprocess.DEVNULL, check=True, cwd=directory)


def nfsrs_cat(client: nfs_rs.Client, dest: str, files: list[tuple[str, int]]) -> int:
    for name, size in files:
        buf = bytearray(size)
        with client.open(f"{dest}/{name}", "rb") as f:
            if size and f.readinto_at(buf, 0) != size:
                raise AssertionError(f"nfs-rs read less than {size} bytes of {name}")
    return len(files)


def lstat_all(directory: Path, count: int) -> None:
    """``lstat`` of ``f0000000`` ... one after another (a LOOKUP each in a cold directory)."""
    base = f"{directory}/f"
    for i in range(count):
        os.lstat(f"{base}{i:07d}")


# -- the run ------------------------------------------------------------------------------------------------
LINES = (
    ("write", "write {mib} MiB buffered (dd bs=1M, fsync)", "MB/s"),
    ("write_direct", "write {mib} MiB O_DIRECT (dd bs=1M, fsync)", "MB/s"),
    ("read", "read {mib} MiB buffered, cold (dd bs=1M)", "MB/s"),
    ("read_direct", "read {mib} MiB O_DIRECT (dd bs=1M)", "MB/s"),
    ("stat", "lstat of {files} cold names, one after another", "names/s"),
    ("ls", "ls -l of a cold {files}-entry directory", "entries/s"),
    ("untar", "untar {tar_files} small files (tar x)", "files/s"),
    ("cat", "cat of the {tar_files} untarred files, cold", "files/s"),
)
DATA_LINES = frozenset({"write", "write_direct", "read", "read_direct"})


def run(args: argparse.Namespace) -> list[Row]:
    channels: list[str] = args.channels
    size = args.size_mib * MIB
    mib = args.size_mib
    mb = size / 1e6
    gib = size / (1 << 30)
    rows = {
        k: Row(name.format(mib=mib, files=args.files, tar_files=args.tar_files), unit, channels)
        for k, name, unit in LINES
    }
    want = set(args.only.split(",")) if args.only else set(rows)
    if "cat" in want:
        want.add("untar")  # (cat reads the tree the round's untar made)
    unknown = want - set(rows)
    if unknown:
        raise SystemExit(f"--only: unknown line(s) {', '.join(sorted(unknown))} (lines: {', '.join(rows)})")
    rows = {k: r for k, r in rows.items() if k in want}
    data_lines = want & DATA_LINES
    scratch = Path(tempfile.mkdtemp(prefix="bench-fuse-"))
    try:
        tarball = scratch / "tree.tar"
        make_tarball(tarball, args.tar_files)
        tree = tar_files(tarball)
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
            log(f"NFS-Ganesha at {server.url}; data made in {d.local}; channels {', '.join(channels)}")
            client = nfs_rs.Client.connect(
                f"nfs://{server.host}:{server.port}{d.remote}?version=4.1&noresvport=true", uid=0, gid=0
            )
            mnt, nmnt = scratch / "mnt", scratch / "null"
            mnt.mkdir()
            nmnt.mkdir()
            here = mnt / d.local.name

            def mount_cmd(ch: str) -> list[str]:
                base, *extra = ch.split("+")
                cmd = [PY, "-m", "pynfsrdma._cli.main", "mount", server.url, str(mnt), "-f", "-o", f"channel={base}"]
                return cmd + [x for o in [*args.mount_option, *extra] for x in ("-o", o)]

            def mount_round(ch: str, r: int) -> None:
                cmd, logfile = mount_cmd(ch), scratch / f"mount-{ch}.log"
                if data_lines:
                    with mounted(cmd, mnt, logfile) as proc:
                        for k, direct in (("write", False), ("write_direct", True)):
                            if k in want:
                                write = functools.partial(dd_write, here / "w", mib, direct)
                                t = timed_cpu(f"{k}, mount {ch}", write, gib, proc.pid, server.pid)
                                rows[k].mount[ch].add(mb, t)
                                os.unlink(here / "w")
                        for k, direct in (("read", False), ("read_direct", True)):
                            if k in want:
                                drop_caches()
                                t = timed_read(f"{k}, mount {ch}", here / "big", direct, gib, proc.pid, server.pid)
                                rows[k].mount[ch].add(mb, t)
                if "stat" in want:  # a fresh mount: neither the kernel nor the daemon knows a name
                    with mounted(cmd, mnt, logfile):
                        drop_caches()
                        q0, c0 = fuse_requests(mnt), daemon_cpu(mnt)
                        rate = rows["stat"].mount[ch].add(args.files, timed(lambda: lstat_all(here / "dir", args.files)))
                        us_per_name = 1e6 * (daemon_cpu(mnt) - c0) / args.files
                        asked = requests_per_unit(q0, fuse_requests(mnt), args.files)
                        report_stats(mnt, "lstat", args.files)
                    log(f"lstat, round {r + 1}, mount {ch}: {rate:,.0f} names/s; the mount daemon's CPU "
                        f"{us_per_name:.0f} µs per name; FUSE requests per name {asked}")
                if "untar" in want:
                    dest = here / "untar" / f"{ch}-{r}"
                    with mounted(cmd, mnt, logfile):
                        dest.mkdir()
                        q0, s0, c0 = fuse_requests(mnt), stolen(), daemon_cpu(mnt)
                        t = timed(functools.partial(sh, "tar", "xf", str(tarball), "-C", str(dest)))
                        rate = rows["untar"].mount[ch].add(args.tar_files, t)
                        steal = steal_share(s0, t)
                        ms_per_file = 1000 * (daemon_cpu(mnt) - c0) / args.tar_files
                        asked = requests_per_unit(q0, fuse_requests(mnt), args.tar_files)
                        report_stats(mnt, "untar", args.tar_files)
                    log(
                        f"untar, round {r + 1}, mount {ch}: {rate:,.0f} files/s; CPU taken by the host: {steal:.0%};"
                        f" the mount daemon's CPU {ms_per_file:.2f} ms per file; FUSE requests per file {asked}"
                    )
                    if "cat" in want:
                        with mounted(cmd, mnt, logfile):
                            drop_caches()
                            q0, s0, c0 = fuse_requests(mnt), stolen(), daemon_cpu(mnt)
                            t = timed(functools.partial(cat_all, dest, tree))
                            rate = rows["cat"].mount[ch].add(len(tree), t)
                            ms_per_file = 1000 * (daemon_cpu(mnt) - c0) / len(tree)
                            asked = requests_per_unit(q0, fuse_requests(mnt), len(tree))
                            report_stats(mnt, "cat", len(tree))
                        log(f"cat, round {r + 1}, mount {ch}: {rate:,.0f} files/s; CPU taken by the host: "
                            f"{steal_share(s0, t):.0%}; the mount daemon's CPU {ms_per_file:.2f} ms per file; "
                            f"FUSE requests per file {asked}")
                if "ls" in want:
                    with mounted(cmd, mnt, logfile):
                        drop_caches()
                        n = 0

                        def ls_ours() -> None:
                            nonlocal n
                            n = ls_l(here / "dir")

                        q0, s0, c0 = fuse_requests(mnt), stolen(), daemon_cpu(mnt)
                        t = timed(ls_ours)
                        us_per_entry = 1e6 * (daemon_cpu(mnt) - c0) / args.files
                        asked = requests_per_unit(q0, fuse_requests(mnt), args.files)
                        rate = rows["ls"].mount[ch].add(args.files, t)
                        if n != args.files:
                            raise AssertionError(f"ls -l through the mount listed {n} of {args.files} entries")
                        report_stats(mnt, "ls -l", args.files)
                    log(f"ls -l, round {r + 1}, mount {ch}: {rate:,.0f} entries/s; CPU taken by the host: "
                        f"{steal_share(s0, t):.0%}; the mount daemon's CPU {us_per_entry:.1f} µs per entry; "
                        f"FUSE requests per entry {asked}")

            def ceiling_round(ch: str, r: int) -> None:
                base, *extra = ch.split("+")
                ncmd = [PY, str(REPO / "bench" / "null_fuse.py"), str(nmnt), "--size", str(size), "--files",
                        str(args.files), "--channel", base]
                # (the ceiling takes requests the way the mount does: -o io_uring / noio_uring)
                ncmd += [{"io_uring": "--io-uring", "noio_uring": "--no-io-uring"}[o]
                         for o in [*args.mount_option, *extra] if o in ("io_uring", "noio_uring")]
                rs = {k: rows[k].ceiling[ch] for k in rows}
                with mounted(ncmd, nmnt, scratch / f"null-{ch}.log") as proc:
                    for k, direct in (("write", False), ("write_direct", True)):
                        if k in want:
                            write = functools.partial(dd_write, nmnt / "sink", mib, direct)
                            rs[k].add(mb, timed_cpu(f"{k}, ceiling {ch}", write, gib, proc.pid, None))
                    for k, direct in (("read", False), ("read_direct", True)):
                        if k in want:
                            drop_caches()
                            rs[k].add(mb, timed_read(f"{k}, ceiling {ch}", nmnt / "zero", direct, gib, proc.pid, None))
                    if "stat" in want:
                        drop_caches()
                        rate = rs["stat"].add(args.files, timed(lambda: lstat_all(nmnt / "dir", args.files)))
                        log(f"lstat, round {r + 1}, ceiling {ch}: {rate:,.0f} names/s")
                    if "ls" in want:
                        drop_caches()
                        rate = rs["ls"].add(args.files, timed(lambda: ls_l(nmnt / "dir")))
                        log(f"ls -l, round {r + 1}, ceiling {ch}: {rate:,.0f} entries/s")
                    if "untar" in want:
                        dest = nmnt / "scratch" / f"p{r}"
                        dest.mkdir()
                        t = timed(functools.partial(sh, "tar", "xf", str(tarball), "-C", str(dest)))
                        made = sum(len(files) for _, _, files in os.walk(dest))
                        if made != args.tar_files:
                            raise AssertionError(f"null file system: untar made {made} files")
                        rate = rs["untar"].add(args.tar_files, t)
                        log(f"untar, round {r + 1}, ceiling {ch}: {rate:,.0f} files/s")
                        if "cat" in want:
                            drop_caches()
                            rate = rs["cat"].add(len(tree), timed(functools.partial(cat_all, dest, tree)))
                            log(f"cat, round {r + 1}, ceiling {ch}: {rate:,.0f} files/s")

            def nfsrs_round(r: int) -> None:
                if r == 0 and want & {"write", "write_direct"}:
                    data = bytes(size)
                    t0 = time.perf_counter()
                    with client.open("w", "wb") as wf:
                        n = wf.write_at(data, 0)
                    t = time.perf_counter() - t0
                    if n != size:
                        raise AssertionError(f"nfs-rs wrote {n} of {size}")
                    for k in want & {"write", "write_direct"}:
                        rows[k].nfsrs_rounds.add(mb, t)
                    del data
                    client.unlink("w")
                if r == 0 and want & {"read", "read_direct"}:
                    buf = bytearray(size)
                    t0 = time.perf_counter()
                    with client.open("big", "rb") as rf:
                        n = rf.readinto_at(buf, 0)
                    t = time.perf_counter() - t0
                    if n != size:
                        raise AssertionError(f"nfs-rs read {n} of {size}")
                    for k in want & {"read", "read_direct"}:
                        rows[k].nfsrs_rounds.add(mb, t)
                    del buf
                if "stat" in want:
                    t0 = time.perf_counter()
                    for i in range(args.files):
                        client.stat(f"dir/f{i:07d}")
                    rows["stat"].nfsrs_rounds.add(args.files, time.perf_counter() - t0)
                if "untar" in want:
                    s0, t0 = stolen(), time.perf_counter()
                    files = nfsrs_untar(client, tarball, f"untar/n{r}")
                    t = time.perf_counter() - t0
                    rate = rows["untar"].nfsrs_rounds.add(files, t)
                    log(f"untar, round {r + 1}, nfs-rs: {rate:,.0f} files/s; CPU taken by the host: {steal_share(s0, t):.0%}")
                if "cat" in want:
                    s0, t0 = stolen(), time.perf_counter()
                    files = nfsrs_cat(client, f"untar/n{r}", tree)
                    t = time.perf_counter() - t0
                    rate = rows["cat"].nfsrs_rounds.add(files, t)
                    log(f"cat, round {r + 1}, nfs-rs: {rate:,.0f} files/s; CPU taken by the host: {steal_share(s0, t):.0%}")
                if "ls" in want:
                    drop_caches()
                    t0 = time.perf_counter()
                    entries = list(client.scandir("dir"))
                    t = time.perf_counter() - t0
                    if len(entries) != args.files:
                        raise AssertionError(f"nfs-rs scandir listed {len(entries)} of {args.files} entries")
                    rows["ls"].nfsrs_rounds.add(len(entries), t)

            try:
                # the server reads the directory once before anyone is timed: the first listing
                # through NFS-Ganesha fills its own cache, which would favour whoever comes second
                if want & {"ls", "stat"} and len(list(client.scandir("dir"))) != args.files:
                    raise AssertionError("nfs-rs scandir: wrong number of entries")
                for r in range(args.repeat):
                    k = r % len(channels)
                    for ch in channels[k:] + channels[:k]:  # the channels take turns at going first
                        mount_round(ch, r)
                        ceiling_round(ch, r)
                    nfsrs_round(r)
                    log(f"round {r + 1} of {args.repeat} done")
            finally:
                client.close()
            shutil.rmtree(d.local / "untar")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return list(rows.values())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size-mib", type=int, default=1024, help="size of the sequential reads and writes")
    p.add_argument("--files", type=int, default=10_000, help="entries of the directory listed and statted")
    p.add_argument("--tar-files", type=int, default=5_000, help="files in the tarball unpacked")
    p.add_argument("--json", action="store_true", help="also print one JSON line")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every line, the channels and nfs-rs in turn; best and median of each",
    )
    p.add_argument(
        "--only",
        metavar="LINES",
        help="comma-separated lines to run: write, write_direct, read, read_direct, stat, ls, untar, cat (default: all)",
    )
    p.add_argument(
        "--channels",
        default=DEFAULT_CHANNEL,
        metavar="CHANNELS",
        help=f"comma-separated FUSE channels to run the mount and the ceiling on ({', '.join(CHANNELS)}; "
        f"default {DEFAULT_CHANNEL}); with two, the table compares the first to the second; CHANNEL+OPT+... "
        "mounts with those -o options too (native,native+nowriteback_cache: before and after in one run)",
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
        help="print the mount's NFS operation counts per name (lstat), per file (untar) and per entry (ls -l) to stderr",
    )
    a = p.parse_args(argv)
    a.channels = [c for c in a.channels.split(",") if c]
    bad = [c for c in a.channels if c.split("+")[0] not in CHANNELS]
    if bad or not a.channels or len(set(a.channels)) != len(a.channels):
        p.error(f"--channels: use one or two of {', '.join(CHANNELS)}, each once (CHANNEL+OPT+...: with those "
                "mount options too)")
    return a


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
    rounds = f"best of {args.repeat} rounds (median)" if args.repeat > 1 else "one round"
    print(f"({time.monotonic() - t0:.0f} s; {rounds}; ratios above 1 mean the mount, or the first channel, is faster)")
    if args.json:
        print(
            json.dumps(
                {
                    "size_mib": args.size_mib,
                    "files": args.files,
                    "tar_files": args.tar_files,
                    "channels": args.channels,
                    "repeat": args.repeat,
                    "nfs_rs_version": nfs_rs.__version__,
                    "rows": [r.as_dict() for r in rows],
                },
                sort_keys=True,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
