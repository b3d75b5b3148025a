"""What a mount's daemon counted (``pynfsrdma stats`` through its control socket): COMPOUNDs named
by their main operation and every operation inside them, and the difference between two reads."""

from __future__ import annotations

import time
from pathlib import Path

from pynfsrdma import _control_socket as control_socket


def counts(mountpoint: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(COMPOUNDs by main operation, operations inside all COMPOUNDs) so far."""
    st = control_socket.query(str(mountpoint), "stats")
    return {k: v["calls"] for k, v in st["operations"].items()}, dict(st["op_counts"])


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def settle(mountpoint: Path, limit: float = 10.0) -> tuple[dict[str, int], dict[str, int]]:
    """The counts once they stop moving (FUSE's release, and so CLOSE, comes after close(2))."""
    last = counts(mountpoint)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = counts(mountpoint)
        if now == last:
            return now
        last = now
    return last
