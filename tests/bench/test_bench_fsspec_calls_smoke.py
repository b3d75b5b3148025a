"""bench/bench_fsspec_calls.py runs end to end against a server of its own (so it cannot rot): each
line's calls are counted, by layer, and the layers add up to the whole. No count is asserted beyond
that: the figures belong to bench/ runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_fsspec_calls.py"


def test_bench_fsspec_calls_counts_every_line_by_layer() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--calls", "3", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    per_call = json.loads(proc.stdout.splitlines()[-1])["per_call"]
    assert sorted(per_call) == ["cat_file", "cat_range", "info", "pipe_file"]
    for line, counts in per_call.items():
        layers = {k: v for k, v in counts.items() if k.startswith("  ")}
        assert counts["python calls"] > 0 and counts["C calls"] > 0, line
        # every call of ours lands in some layer: the session and the RPC layer are always on the path
        assert layers["  session"] > 0 and layers["  RPC"] > 0 and layers["  transport"] > 0, line
        assert abs(sum(layers.values()) - counts["python calls"]) < 1e-6 * counts["python calls"] + 0.5, line
