"""Sans-I/O pieces of the path proxies: the fault a path is in, and the token bucket behind ``throttle``.

A path is in one *mode* (passing traffic, cut, or stalled) and may in addition carry a per-chunk
delay and a bandwidth limit. ``restore`` returns it to plain passing. Nothing here touches a socket,
so the decisions are tested without any.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "COMMANDS",
    "Fault",
    "FaultCommandError",
    "Mode",
    "TokenBucket",
    "apply_command",
    "parse_fault_words",
]


class Mode(enum.Enum):
    """What a path does with connections and bytes."""

    PASS = "pass"  # forward everything
    CUT = "cut"  # reset every connection, reset new ones at once
    STALL = "stall"  # black hole: read nothing, forward nothing, in both directions


@dataclass(frozen=True)
class Fault:
    """The complete fault state of one path."""

    mode: Mode = Mode.PASS
    delay_ms: float = 0.0
    throttle_kbps: float | None = None  # kilobytes (1000 bytes) per second, per direction

    @property
    def is_clear(self) -> bool:
        return self.mode is Mode.PASS and self.delay_ms == 0 and self.throttle_kbps is None

    def describe(self) -> str:
        if self.is_clear:
            return "ok"
        parts = [] if self.mode is Mode.PASS else [self.mode.value]
        if self.delay_ms:
            parts.append(f"delay {self.delay_ms:g} ms")
        if self.throttle_kbps is not None:
            parts.append(f"throttle {self.throttle_kbps:g} KB/s")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "delay_ms": self.delay_ms, "throttle_kbps": self.throttle_kbps}


class FaultCommandError(ValueError):
    """A fault command that cannot be understood."""


# command name -> number of numeric arguments it takes
COMMANDS: dict[str, int] = {"cut": 0, "stall": 0, "restore": 0, "delay": 1, "throttle": 1}


def apply_command(fault: Fault, command: str, value: float | None = None) -> Fault:
    """The fault state after ``command`` (cut, stall, delay MS, throttle KBPS, restore).

    ``delay 0`` removes the delay and ``throttle 0`` removes the bandwidth limit; cut and stall
    replace each other; ``restore`` clears everything.
    """
    if command not in COMMANDS:
        raise FaultCommandError(f"unknown fault {command!r} (expected one of: {', '.join(COMMANDS)})")
    if COMMANDS[command]:
        if value is None:
            raise FaultCommandError(f"{command} needs a number")
        if value < 0 or value != value or value == float("inf"):
            raise FaultCommandError(f"{command} needs a finite number >= 0, not {value}")
    if command == "cut":
        return replace(fault, mode=Mode.CUT)
    if command == "stall":
        return replace(fault, mode=Mode.STALL)
    if command == "delay":
        assert value is not None
        return replace(fault, delay_ms=float(value))
    if command == "throttle":
        assert value is not None
        return replace(fault, throttle_kbps=float(value) if value > 0 else None)
    return Fault()


def parse_fault_words(
    words: Sequence[str], commands: Mapping[str, int] = COMMANDS
) -> tuple[str, float | None]:
    """``["delay", "50"]`` -> ``("delay", 50.0)``; ``["cut"]`` -> ``("cut", None)``. ``commands``:
    the faults known (name -> number of numeric arguments), the proxies' by default."""
    if not words:
        raise FaultCommandError(f"missing fault (expected one of: {', '.join(commands)})")
    command, args = words[0].lower(), list(words[1:])
    if command not in commands:
        raise FaultCommandError(f"unknown fault {words[0]!r} (expected one of: {', '.join(commands)})")
    if len(args) != commands[command]:
        need = "a number" if commands[command] else "no argument"
        raise FaultCommandError(f"{command} takes {need}")
    if not args:
        return command, None
    try:
        value = float(args[0])
    except ValueError:
        raise FaultCommandError(f"{command}: {args[0]!r} is not a number") from None
    if value < 0 or value != value or value == float("inf"):
        raise FaultCommandError(f"{command} needs a finite number >= 0, not {value}")
    return command, value


class TokenBucket:
    """A token bucket measured in bytes.

    ``reserve(n, now)`` takes ``n`` bytes from the bucket and returns how many seconds the caller must
    wait before sending them. The bucket may go into debt, so a chunk larger than the burst is allowed
    and simply waits longer; the long-run rate is ``rate`` bytes per second.
    """

    def __init__(self, rate: float, burst: float | None = None) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(rate / 20, 1500.0))
        self.tokens = self.burst
        self._last: float | None = None

    def reserve(self, n: int, now: float) -> float:
        if self._last is not None and now > self._last:
            self.tokens = min(self.burst, self.tokens + (now - self._last) * self.rate)
        if self._last is None or now > self._last:
            self._last = now
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    @property
    def chunk(self) -> int:
        """The largest piece worth sending in one go (keeps the flow smooth under a low rate)."""
        return max(1, int(self.burst))
