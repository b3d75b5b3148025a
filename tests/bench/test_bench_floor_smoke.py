"""bench/bench_floor.py runs end to end with few calls (so it cannot rot): the mount answers every
GETATTR of the loop from its attribute cache, with no RPC, and the table has the daemon's CPU per
request for the mount and the FUSE ceiling. No timing is asserted; the figures belong to bench/ runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_floor.py"
CALLS = 3_000  # (the daemon CPU is read in 10 ms ticks: enough calls for several)


@pytest.mark.fuse
def test_bench_floor_answers_every_getattr_from_the_cache() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--calls", str(CALLS), "--repeat", "1"],
                          capture_output=True, text=True, timeout=180, cwd=REPO)
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    m = re.search(r"round 1, mount native: ([\d.]+) µs of daemon CPU per GETATTR, [\d,]+/s "
                  r"\(attribute cache hits (\d+), RPCs (\d+)\)", proc.stderr)
    assert m, proc.stderr
    assert float(m[1]) > 0
    assert int(m[2]) >= CALLS and int(m[3]) == 0, m[0]  # (the warm-up's statx are counted too)
    assert re.search(r"round 1, ceiling native: [\d.]+ µs of daemon CPU per GETATTR", proc.stderr), proc.stderr
    assert re.search(r"^\| native \| [\d.]+ \([\d.]+\) \| [\d.]+ \([\d.]+\) \| [\d,]+ \([\d,]+\) \| [\d,]+ \([\d,]+\) \|$",
                     proc.stdout, re.M), proc.stdout
