"""bench/bench_trunking.py runs end to end with tiny sizes (so it cannot rot): the no-link row and one
row per layout, each with positive figures and its links' sum. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.ganesha,
    pytest.mark.usefixtures("link_tools"),
]

REPO = Path(__file__).resolve().parents[2]


def test_bench_trunking_prints_every_layout() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_trunking", "--rate", "50", "--paths", "2", "--unequal", "60,30",
         "--size-mib", "2", "--repeat", "1", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)["rows"]
    assert [r["layout"] for r in rows] == [
        "no link (127.0.0.1): the CPU limit",
        "2 x 50 MB/s",
        "2 x 60/30 MB/s",
    ]
    assert [r["links_MBps"] for r in rows] == [None, 100.0, 90.0]
    for r in rows:
        assert r["write_best"] > 0 and r["read_best"] > 0
        assert len(r["write_samples"]) == len(r["read_samples"]) == 1
