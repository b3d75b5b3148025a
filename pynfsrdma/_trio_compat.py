"""What differs between the trio releases we run on: Debian 12 ships trio 0.22, PyPI has newer ones.

trio 0.23 renamed ``trio.to_thread.run_sync``'s ``cancellable=`` to ``abandon_on_cancel=`` (and later
releases drop the old name). Every call that may leave a thread behind on cancellation goes through
:func:`run_sync_abandoning`, which uses whichever name the installed trio knows.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")

_ABANDON_KEYWORD = (
    "abandon_on_cancel"
    if "abandon_on_cancel" in inspect.signature(trio.to_thread.run_sync).parameters
    else "cancellable"
)


async def run_sync_abandoning(fn: Callable[..., T], *args: Any, limiter: trio.CapacityLimiter | None = None) -> T:
    """``fn(*args)`` in a worker thread (one of ``limiter``'s, if given); a cancellation returns at once
    and leaves the thread to finish on its own (its result is dropped)."""
    keyword: dict[str, Any] = {_ABANDON_KEYWORD: True, "limiter": limiter}
    result: T = await trio.to_thread.run_sync(fn, *args, **keyword)
    return result


__all__ = ["run_sync_abandoning"]
