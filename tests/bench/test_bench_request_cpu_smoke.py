"""bench/bench_request_cpu.py runs end to end with a few calls (so it cannot rot): a figure for every
line, and the calls measured were answered from the replies captured (not by the server). No timing
is asserted; the figures belong to bench/ runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_request_cpu.py"
LINES = ["transport", "rpc_null", "compound_codec", "session", "clientid", "lookup", "stat", "read_4k", "write_4k",
         "write_attrs_4k", "create", "close_4", "readdir_entry", "readdirplus_entry", "info", "cat_small",
         "cat_range", "read_held_4k", "pipe_small"]


def test_bench_request_cpu_replays_every_line() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--calls", "20", "--repeat", "2", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    figures = result["us_per_call"]
    assert sorted(figures) == sorted(LINES)
    assert all(len(v) == 2 and all(x > 0 for x in v) for v in figures.values())
    # every call of the lines that go through the RPC layer (all but the codec's, the listing's
    # decoding and its packing), warm-up included, was answered in-process; the transport line's own
    # transport counts apart
    assert result["replayed"] >= (len(LINES) - 4) * 2 * (20 + 1)


def test_bench_request_cpu_refuses_an_unknown_line() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--only", "stat,statt"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "unknown line(s): statt" in proc.stderr.splitlines()[-1]
