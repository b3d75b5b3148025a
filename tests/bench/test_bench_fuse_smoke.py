"""bench/bench_fuse.py runs end to end with tiny sizes (so it cannot rot): every row has a positive
figure for the mount and the FUSE ceiling on both channels, and for nfs-rs, and the mount daemon's CPU
per name, entry and file (untarred and read), and per GiB read and written, is printed. No timing is asserted; the figures belong to bench/ runs."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_fuse.py"
OPERATIONS = (
    "write 4 MiB buffered (dd bs=1M, fsync)",
    "write 4 MiB O_DIRECT (dd bs=1M, fsync)",
    "read 4 MiB buffered, cold (dd bs=1M)",
    "read 4 MiB O_DIRECT (dd bs=1M)",
    "lstat of 150 cold names, one after another",
    "ls -l of a cold 150-entry directory",
    "untar 60 small files (tar x)",
    "cat of the 60 untarred files, cold",
)


def test_bench_fuse_prints_every_row_with_figures() -> None:
    cmd = [sys.executable, str(SCRIPT), "--size-mib", "4", "--files", "150", "--tar-files", "60", "--json",
           "--channels", "native,pyfuse3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    payload = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    rows = payload["rows"]
    assert [r["operation"] for r in rows] == list(OPERATIONS)
    assert payload["channels"] == ["native", "pyfuse3"]
    for r in rows:
        assert r["pynfsrdma"] > 0 and r["nfsrs"] > 0 and r["vs_nfsrs"] > 0, r
        assert r["fuse_ceiling"] > 0 and r["vs_ceiling"] > 0, r
        for ch in ("native", "pyfuse3"):
            assert r["channels"][ch]["mount"]["best"] > 0 and r["channels"][ch]["ceiling"]["best"] > 0, r
        assert r["channel_ratio"]["mount"]["best"] > 0 and r["channel_ratio"]["ceiling"]["best"] > 0, r
    for op in OPERATIONS:  # the table too
        assert op in proc.stdout
    for ch in ("native", "pyfuse3"):  # the daemon's own CPU per request, on stderr
        assert re.search(rf"lstat, round 1, mount {ch}: .* the mount daemon's CPU \d+ µs per name", proc.stderr)
        assert re.search(rf"ls -l, round 1, mount {ch}: .* the mount daemon's CPU [\d.]+ µs per entry", proc.stderr)
        assert re.search(rf"untar, round 1, mount {ch}: .* the mount daemon's CPU [\d.]+ ms per file", proc.stderr)
        assert re.search(rf"cat, round 1, mount {ch}: .* the mount daemon's CPU [\d.]+ ms per file", proc.stderr)
        for line, of in itertools.product(("write", "write_direct", "read", "read_direct"), ("mount", "ceiling")):
            assert re.search(rf"^# {line}, {of} {ch}: per GiB the mount daemon took [\d.]+ s user and [\d.]+ s "
                             r"system CPU, NFS-Ganesha [\d.]+ s$", proc.stderr, re.M)
    # the FUSE requests per unit beside it (the native channel counts them; pyfuse3 does not)
    assert re.search(r"untar, round 1, mount native: .* FUSE requests per file [\d.]+ \(.*CREATE 1\.00", proc.stderr)
    assert re.search(r"ls -l, round 1, mount native: .* FUSE requests per entry [\d.]+ \(.*READDIRPLUS", proc.stderr)
    assert re.search(r"lstat, round 1, mount pyfuse3: .* FUSE requests per name not counted", proc.stderr)
