"""bench/bench_krb5.py runs end to end with a tiny size (so it cannot rot): a row per flavour, with
positive figures. No timing is asserted; the figures belong to bench/ runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_krb5.py"


def test_bench_krb5_prints_every_flavour() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--size-mib", "2", "--repeat", "1", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("flavour") and "write 2 MiB" in lines[0]
    result = json.loads(lines[-1])
    assert [r["sec"] for r in result["rows"]] == ["sys", "krb5", "krb5i", "krb5p"]
    assert all(r["write_best"] > 0 and r["read_best"] > 0 for r in result["rows"])
