"""FORGET and BATCH_FORGET: the kernel lets go of lookups of nodes. They have no reply; the node
counts they carry are gathered here so that the operations hear of several at once (one call per batch
of requests read together, not one per FORGET)."""

from __future__ import annotations

from .requests import BatchForget, Forget, Request


class Forgets:
    """Forgotten lookups, by node, not yet handed to the operations."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[int, int] = {}

    def add(self, req: Request) -> None:
        """A FORGET or BATCH_FORGET request."""
        pending = self._pending
        if isinstance(req, Forget):
            pending[req.nodeid] = pending.get(req.nodeid, 0) + req.nlookup
        elif isinstance(req, BatchForget):
            for nodeid, nlookup in req.forgets:
                pending[nodeid] = pending.get(nodeid, 0) + nlookup
        else:
            raise TypeError(f"not a forget: {req!r}")

    def __len__(self) -> int:
        """Nodes with lookups gathered."""
        return len(self._pending)

    def take(self) -> list[tuple[int, int]]:
        """Everything gathered, as (node, lookups) pairs, and start again."""
        out = list(self._pending.items())
        self._pending.clear()
        return out
