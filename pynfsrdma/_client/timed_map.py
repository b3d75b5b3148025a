"""A mapping whose entries expire: the caches of names and callers, for the mount and the path API."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TimedMap(Generic[K, V]):
    """A mapping whose entries last ``ttl`` seconds from when they were put, and that keeps the
    ``maxsize`` newest. A lookup is one dict lookup and a clock read (cachetools' TTLCache, which
    expires its whole timeline on each access, cost about 3.5 µs a lookup here, several per FUSE
    request); an expired entry goes when it is looked up or pushed out by newer ones."""

    __slots__ = ("_d", "_maxsize", "_timer", "_ttl")

    def __init__(self, maxsize: int, ttl: float, timer: Callable[[], float] = time.monotonic) -> None:
        self._d: dict[K, tuple[V, float]] = {}
        self._maxsize = maxsize
        self._ttl = ttl
        self._timer = timer

    def get(self, key: K) -> V | None:
        hit = self._d.get(key)
        if hit is None:
            return None
        if hit[1] <= self._timer():
            del self._d[key]
            return None
        return hit[0]

    def __setitem__(self, key: K, value: V) -> None:
        d = self._d
        d.pop(key, None)  # (a renewed entry becomes the newest)
        d[key] = (value, self._timer() + self._ttl)
        if len(d) > self._maxsize:
            del d[next(iter(d))]

    def pop(self, key: K) -> V | None:
        hit = self._d.pop(key, None)
        return None if hit is None else hit[0]

    def items(self) -> Iterator[tuple[K, V]]:
        """The entries not yet expired."""
        now = self._timer()
        return ((k, v) for k, (v, until) in list(self._d.items()) if until > now)

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)
