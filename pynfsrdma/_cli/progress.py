"""The progress of a transfer, through tqdm: on a terminal only (nothing when standard error is piped),
as wide as the terminal is, with MiB done of the total, the rate and the time left."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

REFRESH = 0.1  # seconds between redraws
# "big.iso:  42%|█████▍       | 27.0MiB of 64.0MiB, 512MiB/s, ETA 00:01" ({bar} takes the width left)
FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}iB of {total_fmt}iB, {rate_fmt}, ETA {remaining}"


class ProgressBar:
    def __init__(self, total: int, label: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        out = stream or sys.stderr
        self._done = 0
        self._bar = tqdm(
            total=total,
            desc=label,
            unit="iB",  # with 1024 and scaling: KiB, MiB, GiB
            unit_scale=True,
            unit_divisor=1024,
            bar_format=FORMAT,
            dynamic_ncols=True,  # the terminal's width, read at each redraw
            mininterval=REFRESH,
            file=out,
            leave=True,
            disable=not (enabled and out.isatty()),
        )

    def update(self, done: int) -> None:
        """``done`` bytes of the total are through."""
        if done > self._done:
            self._bar.update(done - self._done)
            self._done = done

    def done(self) -> None:
        self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()


__all__ = ["ProgressBar"]
