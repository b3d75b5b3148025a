"""bench_fuse.py's FUSE requests per unit of work, from two readings of the mount's ``fuse_requests``
(``pynfsrdma stats --json``): what its lstat, ls -l and untar lines print beside the daemon's CPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # (the bench imports bench.common)
# (the bench is a script beside the package, not installed with it: loaded from its file)
_SPEC = importlib.util.spec_from_file_location("bench_fuse", REPO / "bench" / "bench_fuse.py")
assert _SPEC is not None and _SPEC.loader is not None
_BENCH = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("bench_fuse", _BENCH)  # (its dataclasses look their module up by name)
_SPEC.loader.exec_module(_BENCH)
requests_per_unit = _BENCH.requests_per_unit


def test_requests_per_file_are_the_total_then_each_kind_most_frequent_first() -> None:
    before = {"LOOKUP": 3, "GETATTR": 10, "INIT": 1}
    after = {"LOOKUP": 23, "GETATTR": 30, "CREATE": 20, "SETATTR": 66, "INIT": 1}
    assert requests_per_unit(before, after, 20) == (
        "6.30 (SETATTR 3.30, CREATE 1.00, GETATTR 1.00, LOOKUP 1.00)"
    )


def test_a_channel_that_counts_no_requests_says_so() -> None:
    assert requests_per_unit({}, {}, 100) == "not counted by this channel"
