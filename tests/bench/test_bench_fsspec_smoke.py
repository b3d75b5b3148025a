"""The fsspec bench (ours against nfs4fs) runs end to end with tiny sizes (so it cannot rot): every row
is printed with positive figures for both back ends, and our RPCs per call are what the small-file
calls should cost. No timing is asserted; the figures belong to bench/ runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_fsspec.py"


def test_the_fsspec_bench_runs_and_counts_our_rpcs() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--files", "20", "--big-mib", "2", "--repeat", "2", "--json"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    payload = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    rows = {r["operation"]: r for r in payload["rows"]}
    assert list(rows) == [
        "pipe_file x 20 small files",
        "info x 20",
        "cat_file x 20 small files",
        "cat_file(start, end) x 20 ranges of 4 KiB",
        "cat_ranges, the same 20 ranges in one call",
        'open "rb", the same 20 ranges read from it',
        "rm(recursive=True) of 20 files",
        "walk of 2 directories, 20 files",
        "find of 2 directories, 20 files",
        "du of 2 directories, 20 files",
        "pipe_file of 2 MiB",
        "cat_file of 2 MiB",
    ]
    for row in rows.values():
        for key in ("ours_best_ms", "ours_median_ms", "nfs4fs_best_ms", "nfs4fs_median_ms", "ratio",
                    "ours_cpu_us_per_call", "nfs4fs_cpu_us_per_call"):
            assert row[key] > 0, (row["operation"], key)
    for name in ("pipe_file x 20 small files", "info x 20", "cat_file x 20 small files",
                 "cat_file(start, end) x 20 ranges of 4 KiB"):
        assert rows[name]["ours_rpcs_per_call"] == 1, rows[name]
    # the 20 ranges, 4 KiB apart, are one READ (up to rsize) of whole pages, its COMPOUND finding the
    # file by name (and a LOOKUP when the directory's handle was not cached)
    assert 1 <= rows["cat_ranges, the same 20 ranges in one call"]["ours_rpcs_per_call"] <= 2, rows
    # a file opened once: its info, then one COMPOUND by its handle per range (no OPEN, no CLOSE)
    assert rows['open "rb", the same 20 ranges read from it']["ours_rpcs_per_call"] <= 1.1, rows
    for name in ("walk", "find", "du"):  # one READDIR a directory; find and du the top's attributes first
        assert rows[f"{name} of 2 directories, 20 files"]["ours_rpcs_per_call"] <= 4, rows
    assert "ours speed / nfs4fs" in proc.stdout and "our RPCs/call" in proc.stdout
    assert "CPU/call nfs4fs, ours" in proc.stdout
