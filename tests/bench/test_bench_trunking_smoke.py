"""bench/bench_trunking.py runs end to end with tiny sizes (so it cannot rot): the no-link row, one row
per layout (one with an RPC-over-RDMA link) and one of a link as fast as the equal ones together, each
with positive figures for write, read and the two puts, and its links' sum; the share per link around a rate change and the failover run's stalls, with nothing
lost or repeated and every transfer intact. No timing is asserted."""

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
        [sys.executable, "-m", "bench.bench_trunking", "--rate", "50", "--paths", "2", "--unequal", "60,30", "--mixed", "30,60",
         "--size-mib", "2", "--repeat", "1", "--faults", "2", "--cuts", "2", "--failover-mib", "2", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    rows = report["rows"]
    assert [r["layout"] for r in rows] == [
        "no link (127.0.0.1): the CPU limit",
        "2 x 50 MB/s",
        "1 x 100 MB/s",
        "2 x 60/30 MB/s",
        "2 x 30/60 MB/s (last RDMA)",
    ]
    assert [r["links_MBps"] for r in rows] == [None, 100.0, 100.0, 90.0, 90.0]
    for r in rows:
        assert r["write_best"] > 0 and r["read_best"] > 0
        assert r["put_best"] > 0 and r["put_window_best"] > 0
        assert len(r["write_samples"]) == len(r["read_samples"]) == len(r["put_samples"]) == 1
    faults = report["faults"]
    assert faults["rates"] == [50.0, 50.0]
    rc = faults["rate_change"]
    assert rc["address"] == "127.0.0.3" and rc["rate_MBps"] == 12.5 and rc["changed_at_s"] > 0
    assert rc["windows"] and all(len(w["share"]) == 2 for w in rc["windows"])
    f = faults["failover"]
    assert len(f["stalls_s"]) == 2
    assert f["lost"] == 0 and f["repeated"] == 0 and f["completed"] > 0
    assert f["transfers"] > 0 and f["transfers_intact"] == f["transfers"]
