"""What the fsspec tests share besides their fixtures (conftest.py): a call's round trips, counted by the
client's own statistics."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pynfsrdma


def counted(client: pynfsrdma.SyncClient, call: Callable[[], Any],
            prime: Callable[[], Any] | None = None) -> tuple[Any, int, dict[str, int]]:
    """What ``call()`` returned, the RPCs it sent and the operations in them. ``prime`` runs just
    before the counting starts (after the garbage collection, which can take a second on a loaded
    host: long enough for a cached directory handle to age out)."""
    gc.collect()  # (files of earlier tests left to the garbage collector close now, not while counting)
    if prime is not None:
        prime()
    before = client.stats()
    out = call()
    after = client.stats()
    ops = {k: v - before["op_counts"].get(k, 0) for k, v in after["op_counts"].items()}
    return out, after["rpc"]["calls"] - before["rpc"]["calls"], {k: v for k, v in ops.items() if v}
