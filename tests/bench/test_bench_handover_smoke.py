"""bench/bench_handover.py runs end to end against a server of its own (so it cannot rot): each line
gives a CPU time per call. No figure is asserted beyond that: the figures belong to bench/ runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_handover.py"


def test_bench_handover_times_every_line() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--calls", "3", "--repeat", "2", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert (out["calls"], out["repeat"]) == (3, 2)
    table = out["cpu_us_per_call"]
    assert sorted(table) == ["lstat_each", "lstat_in_loop", "noop"]
    for line, t in table.items():
        assert 0 <= t["best"] <= t["median"], line
