"""Read-ahead for one open file: sequential reads become rsize READs sent ahead (sans-I/O decisions).

The kernel asks FUSE for buffered data in read-ahead requests of ``read_ahead_kb`` (128 KiB unless
raised), one after the other; one READ COMPOUND each leaves the link idle between them. Once an open
file has been read sequentially (``trigger`` requests each starting where the previous one ended),
:class:`ReadAhead` plans READs of whole rsize extents ahead of the reader, aligned to rsize, several
in flight, up to a window that starts at ``min_window`` and grows by one extent for every extent the
reader consumes, up to ``max_window``. Requests inside the window are served from the replies: a
slice of the reply's view when one extent holds the request (no copy), joined when it spans two.

The window is dropped (:meth:`ReadAhead.drop`) on a seek, on a write to the file, when the file's
change attribute moves, and when the file is released; a READ still in flight for a dropped extent
is let finish and its reply is thrown away. Nothing here survives the open: close-to-open
consistency is the open's business, and a new open starts with no window.

The I/O shell (:mod:`.operations`) sends the planned READs and fills in each :class:`Extent`
(``finish``); the plan itself is plain computation.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import trio

DEFAULT_TRIGGER = 2  # sequential requests before reading ahead
DEFAULT_MIN_WINDOW_EXTENTS = 2
DEFAULT_MAX_WINDOW = 8 << 20  # bytes ahead of the reader at most (8 READs of 1 MiB in flight)
# the mount's window (PYNFSRDMA_READ_AHEAD=BYTES overrides it, 0 turns read-ahead off: for measuring)
READ_AHEAD_WINDOW = int(os.environ.get("PYNFSRDMA_READ_AHEAD") or DEFAULT_MAX_WINDOW)
BEHIND_EXTENTS = 2  # a request this close behind the reader is reordered, not a seek
# The kernel's own read-ahead window for the mount (its bdi's read_ahead_kb, set once the mount is up):
# as far ahead as the READs that fill every live path reach, never below the kernel's default, and at
# most KERNEL_READ_AHEAD_MOST (what the kernel's background requests are sized for at INIT, which
# bounds the memory they hold)
KERNEL_READ_AHEAD_LEAST = 128 << 10
KERNEL_READ_AHEAD_MOST = 32 << 20


def kernel_window(rsize: int, ios: int, least: int, most: int = KERNEL_READ_AHEAD_MOST) -> int:
    """The kernel's read-ahead window in bytes (whole KiB): the ``ios`` READs of ``rsize`` that keep
    every live path's bandwidth-delay product in flight (``NFSv4.io_window``), at least ``least``
    and :data:`KERNEL_READ_AHEAD_LEAST`, at most ``most``."""
    window = max(least, KERNEL_READ_AHEAD_LEAST, ios * rsize)
    return min(window, most) // 1024 * 1024


class Extent:
    """One READ sent ahead: ``[offset, offset + size)``; its reply once ``done`` is set."""

    __slots__ = ("data", "done", "eof", "error", "offset", "size")

    def __init__(self, offset: int, size: int) -> None:
        self.offset = offset
        self.size = size
        self.data: Any = None  # the reply's data (a memoryview of the reply buffer)
        self.eof = False
        self.error: BaseException | None = None
        self.done = trio.Event()

    @property
    def end(self) -> int:
        return self.offset + self.size

    def finish(self, data: Any = None, eof: bool = False, error: BaseException | None = None) -> None:
        self.data, self.eof, self.error = data, eof, error
        self.done.set()

    def __repr__(self) -> str:
        return f"Extent({self.offset}, {self.size})"


def assemble(extents: list[Extent], offset: int, size: int) -> Any | None:
    """The bytes ``[offset, offset + size)`` from finished extents (covering it, in order): a slice of
    one reply's view when one extent holds them, joined otherwise; short at end of file. None when
    the replies do not hold them (an error, or a short reply before end of file)."""
    end = offset + size
    pos = offset
    pieces: list[Any] = []
    for e in extents:
        if pos >= end:
            break
        if e.error is not None or e.data is None or pos < e.offset:
            return None
        start = pos - e.offset
        take = min(len(e.data) - start, end - pos)
        if take > 0:
            pieces.append(e.data[start : start + take])
            pos += take
        if pos < end and start + max(take, 0) < e.size:
            if e.eof:
                break  # nothing more in the file: a short read
            return None  # a short reply in the middle: the caller reads the rest itself
    else:
        if pos < end:
            return None
    if len(pieces) == 1:
        return pieces[0]
    return b"".join(pieces)  # (b"" at end of file)


class HeldBytes:
    """The bytes every :class:`OpenedBytes` of a mount holds, within ``limit``."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def room(self, n: int) -> bool:
        return self.held + n <= self.limit


class OpenedBytes:
    """The first bytes of a file, read in the COMPOUND of the OPEN that opened it (``data``, a view
    of the reply; ``eof``: they are the whole file), for the kernel's READs of them through that
    open, which :meth:`take` answers: each once, and never past what was read unless that is the
    end of the file. They are as fresh as the OPEN (close-to-open); the file's data changing or
    about to (a write or a truncate through the mount, an open for writing, the change attribute
    moving) drops them (:meth:`drop`, by :meth:`.inodes.Inode.drop_readahead`), as it drops what
    was read ahead, and so does the release of the open. ``held`` counts them while they are held."""

    __slots__ = ("data", "eof", "held")

    def __init__(self, data: Any, eof: bool, held: HeldBytes) -> None:
        self.data: Any = data
        self.eof = eof
        self.held = held
        held.held += len(data)

    def take(self, offset: int, size: int) -> Any | None:
        """The bytes ``[offset, offset + size)`` (fewer at the end of the file), a slice of the
        reply's view; None when they are not all here (the caller reads them). Bytes up to the end
        of a request go with it: what is left after it is kept only while there is some."""
        data = self.data
        if data is None:
            return None
        end = offset + size
        n = len(data)
        if end > n and not self.eof:
            self.drop()
            return None
        got = data[offset:end]
        if end >= n:
            self.drop()
        return got

    def drop(self) -> None:
        if self.data is not None:
            self.held.held -= len(self.data)
            self.data = None


@dataclass(eq=False)
class ReadAhead:
    """The read-ahead state of one open file."""

    rsize: int
    max_window: int = DEFAULT_MAX_WINDOW
    trigger: int = DEFAULT_TRIGGER
    min_window: int = 0  # 0: DEFAULT_MIN_WINDOW_EXTENTS extents
    extents: deque[Extent] = field(default_factory=deque)
    next_offset: int = 0  # where the reader's next request starts if it reads on
    streak: int = 0  # sequential requests so far
    window: int = 0
    # counters
    hits: int = 0  # requests served from the window
    sent: int = 0  # extents planned
    drops: int = 0  # windows dropped with extents in them

    def __post_init__(self) -> None:
        if self.min_window <= 0:
            self.min_window = DEFAULT_MIN_WINDOW_EXTENTS * self.rsize
        self.max_window = max(self.max_window, self.rsize)
        self.min_window = min(self.min_window, self.max_window)
        self.window = self.min_window

    def drop(self) -> None:
        """Forget every extent (their replies, if they come, are not used) and start over."""
        if self.extents:
            self.drops += 1
        self.extents.clear()
        self.streak = 0
        self.window = self.min_window

    def _covered(self, offset: int, end: int) -> bool:
        return bool(self.extents) and self.extents[0].offset <= offset and end <= self.extents[-1].end

    def request(self, offset: int, size: int, file_size: int) -> tuple[list[Extent], list[Extent]]:
        """A read of ``[offset, offset + size)`` arrives; ``file_size`` as last known.

        Returns (the extents that hold it, in order, or [] to read it directly; the extents to send
        now). Called as the request arrives, before anything is awaited, so that concurrent requests
        are seen in the kernel's order."""
        end = offset + size
        if self._covered(offset, end) or offset == self.next_offset:
            self.streak += 1
            self.next_offset = max(self.next_offset, end)
        elif self.next_offset - BEHIND_EXTENTS * self.rsize <= offset < self.next_offset:
            return [], []  # slightly behind the reader (requests reordered): read it directly
        else:  # a seek
            self.drop()
            self.streak = 1
            self.next_offset = end
            return [], []
        # extents the reader has passed are let go (their buffers with them); the window grows
        while self.extents and self.extents[0].end <= offset:
            self.extents.popleft()
            self.window = min(self.max_window, self.window + self.rsize)
        if self.streak < self.trigger:
            return [], []
        new: list[Extent] = []
        if self.extents and self.extents[-1].end < offset:
            self.extents.clear()  # the reader jumped over the window's end
        pos = self.extents[-1].end if self.extents else offset
        limit = min(max(end, offset + self.window), file_size)
        while pos < limit:
            n = self.rsize - pos % self.rsize  # up to the next rsize boundary
            e = Extent(pos, n)
            self.extents.append(e)
            new.append(e)
            pos += n
        self.sent += len(new)
        if not self._covered(offset, end):
            return [], new
        cover = [e for e in self.extents if e.offset < end and e.end > offset]
        self.hits += 1
        return cover, new
