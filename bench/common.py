"""Shared pieces of the benchmarks: repeated measurements, the comparison table, checksums, and the
server to run against (a local NFS-Ganesha from the testbed, or a URL given by the user)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pynfsrdma._client.url import parse_url
from pynfsrdma._testbed import Ganesha

MIB = 1 << 20


@dataclass
class Measurement:
    """The rates (units per second) of repeated runs of one operation by one client."""

    samples: list[float] = field(default_factory=list)

    def add(self, units: float, seconds: float) -> float:
        rate = units / seconds if seconds > 0 else float("inf")
        self.samples.append(rate)
        return rate

    @property
    def best(self) -> float:
        return max(self.samples) if self.samples else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else 0.0


@dataclass
class Row:
    """One operation measured through both clients."""

    operation: str
    unit: str  # "MB/s" or "ops/s"
    ours: Measurement = field(default_factory=Measurement)
    nfsrs: Measurement = field(default_factory=Measurement)

    @property
    def ratio(self) -> float:
        """ours / nfs-rs on the best runs: above 1 means we are faster."""
        return self.ours.best / self.nfsrs.best if self.nfsrs.best else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "operation": self.operation,
            "unit": self.unit,
            "ours_best": round(self.ours.best, 1),
            "ours_median": round(self.ours.median, 1),
            "nfsrs_best": round(self.nfsrs.best, 1),
            "nfsrs_median": round(self.nfsrs.median, 1),
            "ratio": round(self.ratio, 3),
            "ours_samples": [round(s, 1) for s in self.ours.samples],
            "nfsrs_samples": [round(s, 1) for s in self.nfsrs.samples],
        }


def format_table(rows: Iterable[Row]) -> str:
    """A plain-text table: best (median) for each client and the ratio of the best runs."""
    header = ("operation", "ours best (median)", "nfs-rs best (median)", "ours/nfs-rs")
    lines = [header]
    for r in rows:
        lines.append(
            (
                r.operation,
                f"{r.ours.best:,.1f} ({r.ours.median:,.1f}) {r.unit}",
                f"{r.nfsrs.best:,.1f} ({r.nfsrs.median:,.1f}) {r.unit}",
                f"{r.ratio:.2f}x",
            )
        )
    return align(lines)


def align(lines: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, the first left-aligned, a rule under the header row."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for n, line in enumerate(lines):
        out.append(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths, strict=True))
            )
        )
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def json_line(rows: Iterable[Row], **extra: object) -> str:
    return json.dumps({**extra, "rows": [r.as_dict() for r in rows]}, sort_keys=True)


# -- data and checksums ---------------------------------------------------------------------------------
def stolen() -> float:
    """Seconds of CPU the hypervisor took from this machine so far (all CPUs; /proc/stat "steal").
    On a shared host it comes and goes, and every figure with it: the benches print its share."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def make_data(size: int) -> bytes:
    """Incompressible test data (a read-only buffer, so our WRITE path can send it without copying)."""
    return os.urandom(size)


def sha256_of(buffers: Iterable[memoryview | bytes | bytearray]) -> str:
    h = hashlib.sha256()
    for b in buffers:
        h.update(b)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


class IntegrityError(AssertionError):
    """What a client wrote or read back is not what was sent."""


def check(what: str, got: str, want: str) -> None:
    if got != want:
        raise IntegrityError(f"{what}: sha256 {got} != expected {want}")


# -- the server -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """Where a run works: a fresh directory on the server, as each client names it."""

    ours_url: str  # nfs://host:port/export/bench-xxxx (our client; paths relative to it)
    nfsrs_url: str  # nfs://host:port/export/bench-xxxx?version=4.1&noresvport=true
    local_dir: Path | None  # the same directory on this machine's disk, when the server is ours
    remote_dir: str  # /export/bench-xxxx
    description: str
    parent_url: str | None = None  # with a user's URL: where to create (and at the end remove) remote_dir


def nfsrs_url(host: str, port: int, path: str) -> str:
    """nfs-rs's URL for the same directory (it needs the version and an unprivileged source port)."""
    return f"nfs://{host}:{port}{path}?version=4.1&noresvport=true"


@contextlib.contextmanager
def bench_target(url: str | None) -> Iterator[Target]:
    """A fresh directory to benchmark in: inside a local NFS-Ganesha started for the run (removed
    afterwards), or, with ``url``, a subdirectory the caller creates over NFS under that URL's path."""
    if url is None:
        with Ganesha() as server:
            d = server.new_directory(prefix="bench-")
            yield Target(
                ours_url=f"nfs://{server.host}:{server.port}{d.remote}",
                nfsrs_url=nfsrs_url(server.host, server.port, d.remote),
                local_dir=d.local,
                remote_dir=d.remote,
                description=f"local NFS-Ganesha (testbed) at {server.host}:{server.port}",
            )
        return
    u = parse_url(url)
    remote = u.path.rstrip("/") + f"/bench-{uuid.uuid4().hex[:8]}"
    yield Target(
        ours_url=f"nfs://{u.address}{remote}",
        nfsrs_url=nfsrs_url(u.host, u.port, remote),
        local_dir=None,
        remote_dir=remote,
        description=f"{u.address}{u.path}",
        parent_url=f"nfs://{u.address}{u.path}",
    )
