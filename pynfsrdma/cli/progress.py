"""A progress bar for long transfers: shown on a terminal, silent when standard error is piped."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, total: int, label: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total = total
        self.label = label[:30]
        self.enabled = enabled and self.stream.isatty()
        self.start = time.monotonic()
        self._last = 0.0

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and done < self.total:
            return
        self._last = now
        rate = done / max(now - self.start, 1e-6)
        frac = done / self.total if self.total else 1.0
        width = 30
        bar = "#" * int(frac * width)
        self.stream.write(
            f"\r{self.label:30} [{bar:<{width}}] {frac * 100:5.1f}% {done / 1e6:9.1f} MB {rate / 1e6:7.1f} MB/s"
        )
        self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.update(self.total)
            self.stream.write("\n")
            self.stream.flush()
