"""The benchmark script runs end to end with tiny sizes (so it cannot rot): every row is printed, with
positive figures for both clients. No timing is asserted; the figures belong to bench/ runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._testbed import Ganesha

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_api.py"
OPERATIONS = (
    "write 4 MiB from memory",
    "read 4 MiB into memory",
    "put 4 MiB (local file to NFS)",
    "get 4 MiB (NFS to local file)",
    "stat 200 files, sequential",
    "stat 200 files, 8 in flight",
)


def run_bench(*extra: str) -> tuple[list[dict[str, Any]], str]:
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--size-mib",
            "4",
            "--files",
            "200",
            "--repeat",
            "2",
            "--concurrency",
            "8",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    payload = json.loads(next(line for line in lines if line.startswith("{")))
    return payload["rows"], proc.stdout


def check_rows(rows: list[dict[str, Any]], table: str) -> None:
    assert [r["operation"] for r in rows] == list(OPERATIONS)
    for row in rows:
        for key in ("ours_best", "ours_median", "nfsrs_best", "nfsrs_median", "ratio"):
            value = row[key]
            assert isinstance(value, (int, float)) and value > 0, (row["operation"], key, value)
        assert len(row["ours_samples"]) == len(row["nfsrs_samples"]) == 2
        assert row["operation"] in table  # the human-readable table has the row too


@pytest.mark.slow
def test_bench_with_its_own_server() -> None:
    """Default mode: the script starts (and removes) its own NFS-Ganesha."""
    rows, table = run_bench()
    check_rows(rows, table)


@pytest.mark.slow
def test_bench_against_a_url(ganesha: Ganesha) -> None:
    """--url mode: it makes its own directory over NFS on that server, and removes it afterwards."""
    before = set(ganesha.export_dir.iterdir())
    rows, table = run_bench("--url", ganesha.url)
    check_rows(rows, table)
    assert set(ganesha.export_dir.iterdir()) == before
