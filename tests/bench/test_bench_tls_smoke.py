"""bench/bench_tls.py runs end to end with a tiny size (so it cannot rot): a row per xprtsec mode (and
the row without the front), with positive figures. No timing is asserted; the figures belong to
bench/ runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_tls.py"


def test_bench_tls_prints_every_mode() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--size-mib", "2", "--repeat", "1", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("xprtsec") and "write 2 MiB" in lines[0]
    result = json.loads(lines[-1])
    assert [r["xprtsec"] for r in result["rows"]] == ["direct", "none", "tls", "mtls"]
    assert all(r["write_best"] > 0 and r["read_best"] > 0 for r in result["rows"])
