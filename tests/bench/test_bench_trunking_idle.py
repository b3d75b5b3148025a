"""The tools table's idle spells, from byte counters as `tc -s class` gives them (no links needed):
the longest time one link carried nothing in the transfer's direction while another carried data."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# (the bench is a script beside the package, not installed with it: loaded from its file)
_SPEC = importlib.util.spec_from_file_location(
    "bench_trunking", Path(__file__).resolve().parents[2] / "bench" / "bench_trunking.py")
assert _SPEC is not None and _SPEC.loader is not None
_BENCH = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_BENCH)
IDLE_BYTES, SAMPLE_EVERY, _LinkSampler = _BENCH.IDLE_BYTES, _BENCH.SAMPLE_EVERY, _BENCH._LinkSampler

MB = 1_000_000


def counters(down: list[int], up: list[int]) -> dict[str, int]:
    """One reading: the down classes 1:200.. and the up classes 1:100.. of four links (and HTB's root)."""
    reading = {"1:": sum(down) + sum(up)}
    reading.update({f"1:{0x200 + i:x}": b for i, b in enumerate(down)})
    reading.update({f"1:{0x100 + i:x}": b for i, b in enumerate(up)})
    return reading


def sampled(steps: list[list[int]]) -> _LinkSampler:
    """A sampler whose readings grow by ``steps`` (bytes per down class per reading; up: acks)."""
    s = _LinkSampler()
    totals = [0, 0, 0, 0]
    s.readings = [counters(totals, [0, 0, 0, 0])]
    for step in steps:
        totals = [t + b for t, b in zip(totals, step, strict=True)]
        s.readings.append(counters(totals, [1000, 1000, 1000, 1000]))
    return s


def test_a_link_idle_while_the_others_read_is_one_spell() -> None:
    full = 8 * MB  # 40 MB/s over a reading
    steps = [[full] * 4, [full, full, full, 0], [full, full, full, 0], [full, full, full, 100], [full] * 4,
             [full, 0, full, full]]  # fmt: skip
    s = sampled(steps)
    assert s.idle_spell("out") == 3 * SAMPLE_EVERY  # the last link, three readings in a row
    assert s.idle_spell("in") == 0  # the up classes carried nothing: no spell while none is busy


def test_all_links_quiet_together_is_no_spell() -> None:
    """The start of a copy into the page cache, or its end: nothing on any link is not a path left idle."""
    s = sampled([[0] * 4, [0] * 4, [8 * MB] * 4, [IDLE_BYTES - 1] * 4])
    assert s.idle_spell("out") == 0
    assert _LinkSampler().idle_spell("out") == 0  # no reading at all
