"""FUSE_INTERRUPT bookkeeping: which requests are being answered, and interrupts that came for a
request not (or no longer) among them.

An INTERRUPT names the request to interrupt by its unique id. If that request is being answered, its
handle (whatever the caller registered, e.g. a cancel scope) is returned to be cancelled; the request
is then answered EINTR, or normally if it finished first. If it is not, the interrupt is remembered:
should the request come after all, it starts interrupted; otherwise one request later the interrupt is
answered EAGAIN, which makes the kernel send it again if its request is still waiting (the kernel's
rule in ``fuse_dev_do_write``; an interrupt of a request already answered is no longer in the kernel,
and its EAGAIN is refused with ENOENT).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from .requests import Interrupt

H = TypeVar("H")

MAX_REMEMBERED = 1024  # interrupts kept for requests not seen; the oldest go first


class Interrupts(Generic[H]):
    __slots__ = ("_early", "_running", "due")

    def __init__(self) -> None:
        self._running: dict[int, H] = {}
        self._early: OrderedDict[int, int] = OrderedDict()  # target unique -> the interrupt's unique
        self.due: list[int] = []  # interrupts to answer EAGAIN (see take_due)

    def __len__(self) -> int:
        return len(self._running)

    def started(self, unique: int, handle: H) -> bool:
        """Request ``unique`` is being answered; True if it was interrupted already."""
        self._running[unique] = handle
        if self._early:
            if self._early.pop(unique, None) is not None:
                return True
            # an interrupt seen before this request whose own request has not come: ask again
            self.due.append(self._early.popitem(last=False)[1])
        return False

    def finished(self, unique: int) -> None:
        self._running.pop(unique, None)

    def interrupt(self, req: Interrupt) -> H | None:
        """The handle of the request to interrupt, or None (the interrupt is remembered)."""
        handle = self._running.get(req.target)
        if handle is not None:
            return handle
        self._early[req.target] = req.unique
        while len(self._early) > MAX_REMEMBERED:
            self.due.append(self._early.popitem(last=False)[1])
        return None

    def take_due(self) -> list[int]:
        """Unique ids of interrupts to answer EAGAIN now."""
        due, self.due = self.due, []
        return due

    def running(self) -> list[H]:
        return list(self._running.values())
