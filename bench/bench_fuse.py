"""The FUSE mount against the FUSE ceiling and nfs-rs, in one run (issue 3, "Figures").

    .venv/bin/python bench/bench_fuse.py [--size-mib 1024] [--files 10000] [--tar-files 5000] [--json]

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
writes discarded, a FILES-entry directory; it cannot untar: "n/a"), the ceiling of FUSE here; and
with the nfs-rs client where it applies (a library, not a mount, so it has no page cache: its one
read and one write figure stand on both the buffered and the O_DIRECT lines; its "ls -l" is a
``scandir`` with attributes; its untar creates the same directories and files with mkdir/open/write_at).

Each figure is one run (a default run takes about 3-4 minutes on 2 cores). Prints a table and, with
--json, one JSON line.
"""

from __future__ import annotations

import argparse
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

import nfs_rs

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import align  # noqa: E402
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
    try:
        tarball = scratch / "tree.tar"
        make_tarball(tarball, args.tar_files)
        with Ganesha() as server:
            d = server.new_directory(prefix="bench-")
            block = os.urandom(MIB)
            with open(d.local / "big", "wb") as f:
                for _ in range(mib):
                    f.write(block)
            (d.local / "dir").mkdir()
            for i in range(args.files):
                (d.local / "dir" / f"f{i:07d}").touch()
            (d.local / "untar").mkdir()
            log(f"NFS-Ganesha at {server.url}; data made in {d.local}")

            # -- the pynfsrdma mount
            mnt = scratch / "mnt"
            mnt.mkdir()
            cmd = [PY, "-m", "pynfsrdma.cli.main", "mount", server.url, str(mnt), "-f"]
            here = mnt / d.local.name
            with mounted(cmd, mnt, scratch / "mount.log"):
                rows["write"].ours = mb / timed(lambda: dd_write(here / "w", mib, False))
                os.unlink(here / "w")
                rows["write_direct"].ours = mb / timed(lambda: dd_write(here / "w", mib, True))
                os.unlink(here / "w")
                drop_caches()
                rows["read"].ours = mb / timed(lambda: dd_read(here / "big", False))
                drop_caches()
                rows["read_direct"].ours = mb / timed(lambda: dd_read(here / "big", True))
                rows["untar"].ours = args.tar_files / timed(
                    lambda: sh("tar", "xf", str(tarball), "-C", str(here / "untar"))
                )
            log("pynfsrdma: read, write, untar done; mounting again for a cold ls -l")
            with mounted(cmd, mnt, scratch / "mount.log"):
                drop_caches()
                n = 0

                def ls_ours() -> None:
                    nonlocal n
                    n = ls_l(here / "dir")

                rows["ls"].ours = args.files / timed(ls_ours)
                if n != args.files:
                    raise AssertionError(f"ls -l through the mount listed {n} of {args.files} entries")
            shutil.rmtree(d.local / "untar")

            # -- the FUSE ceiling
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
                rows["write"].ceiling = mb / timed(lambda: dd_write(nmnt / "sink", mib, False))
                rows["write_direct"].ceiling = mb / timed(lambda: dd_write(nmnt / "sink", mib, True))
                drop_caches()
                rows["read"].ceiling = mb / timed(lambda: dd_read(nmnt / "zero", False))
                drop_caches()
                rows["read_direct"].ceiling = mb / timed(lambda: dd_read(nmnt / "zero", True))
                drop_caches()
                rows["ls"].ceiling = args.files / timed(lambda: ls_l(nmnt / "dir"))
            log("FUSE ceiling done")

            # -- nfs-rs
            client = nfs_rs.Client.connect(
                f"nfs://{server.host}:{server.port}{d.remote}?version=4.1&noresvport=true", uid=0, gid=0
            )
            try:
                data = bytes(size)
                t0 = time.perf_counter()
                with client.open("w", "wb") as wf:
                    n = wf.write_at(data, 0)
                rate = mb / (time.perf_counter() - t0)
                if n != size:
                    raise AssertionError(f"nfs-rs wrote {n} of {size}")
                rows["write"].nfsrs = rows["write_direct"].nfsrs = rate
                del data
                client.unlink("w")
                t0 = time.perf_counter()
                buf = bytearray(size)
                with client.open("big", "rb") as rf:
                    n = rf.readinto_at(buf, 0)
                rate = mb / (time.perf_counter() - t0)
                if n != size:
                    raise AssertionError(f"nfs-rs read {n} of {size}")
                rows["read"].nfsrs = rows["read_direct"].nfsrs = rate
                del buf
                t0 = time.perf_counter()
                entries = list(client.scandir("dir"))
                rows["ls"].nfsrs = len(entries) / (time.perf_counter() - t0)
                if len(entries) != args.files:
                    raise AssertionError(f"nfs-rs scandir listed {len(entries)} of {args.files} entries")
                t0 = time.perf_counter()
                files = nfsrs_untar(client, tarball, "untar")
                rows["untar"].nfsrs = files / (time.perf_counter() - t0)
            finally:
                client.close()
            log("nfs-rs done")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return list(rows.values())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size-mib", type=int, default=1024, help="size of the sequential reads and writes")
    p.add_argument("--files", type=int, default=10_000, help="entries of the directory listed")
    p.add_argument("--tar-files", type=int, default=5_000, help="files in the tarball unpacked")
    p.add_argument("--json", action="store_true", help="also print one JSON line")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
