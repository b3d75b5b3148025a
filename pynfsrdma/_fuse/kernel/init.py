"""FUSE_INIT: agreeing on the protocol version and the features with the kernel.

The kernel offers its version and the features it has (``fuse_init_in``); the reply names the version
both speak (the smaller minor) and the features asked for, out of those offered (``fuse_init_out``).
Minors 7.31 to 7.45 are spoken; an older kernel is refused, and a kernel of a newer major is answered
with major 7 alone, after which it sends INIT again (the header's rule for major versions).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

from . import abi
from .replies import error
from .requests import Init, Options

MAX_PAGES = 256  # the kernel's largest request unless root raised fs.fuse.max_pages_limit: 1 MiB
PAGE_SIZE = 4096
MAX_WRITE = MAX_PAGES * PAGE_SIZE
# the kernel's background requests (its read-ahead, and the writeback cache's WRITEs) when the reply
# leaves them at 0: FUSE_DEFAULT_MAX_BACKGROUND, and a congestion threshold of three quarters of it
KERNEL_MAX_BACKGROUND = 12
# bytes the background requests may hold at most (each up to a request of max_pages): the bound on
# what a sized max_background costs the daemon's memory
BACKGROUND_BYTES = 64 << 20

# what this client asks for when the kernel offers it (the writeback cache, FUSE_WRITEBACK_CACHE, is
# asked for by the channel when the mount wants it)
WANTED = (
    abi.FUSE_ASYNC_READ
    | abi.FUSE_BIG_WRITES
    | abi.FUSE_ATOMIC_O_TRUNC
    | abi.FUSE_PARALLEL_DIROPS
    | abi.FUSE_ASYNC_DIO
    | abi.FUSE_DO_READDIRPLUS
    | abi.FUSE_AUTO_INVAL_DATA
    | abi.FUSE_HANDLE_KILLPRIV_V2
    | abi.FUSE_MAX_PAGES
)
LOCKS = abi.FUSE_POSIX_LOCKS | abi.FUSE_FLOCK_LOCKS  # only when the file system answers lock requests


@dataclass(slots=True)
class Wanted:
    """What to ask the kernel for."""

    flags: int = WANTED
    max_write: int = MAX_WRITE
    max_pages: int = MAX_PAGES
    max_readahead: int | None = None  # None: as the kernel offers (its bdi's window then)
    max_background: int = 0  # 0: the kernel's default
    congestion_threshold: int = 0
    time_gran: int = 1  # nanosecond timestamps


def sized(flags: int, max_pages: int, read_ahead: int) -> Wanted:
    """What to ask for with requests of ``max_pages`` pages (the kernel takes no more than its
    ``fs.fuse.max_pages_limit``: ask for that, read by the channel) and a read-ahead window of
    ``read_ahead`` bytes at most (INIT's ``max_readahead``: the kernel keeps the smaller of it and
    its bdi's window, which the mount sets).

    The kernel reads ahead in background requests, and stops sending read-ahead while
    ``congestion_threshold`` of them are out; the writeback cache's WRITEs are background requests
    too. So the threshold lets a whole window of read-ahead requests be out, and ``max_background``
    as many again for writeback beside it, within :data:`BACKGROUND_BYTES` (never below the
    kernel's own default)."""
    max_pages = max(1, min(max_pages, abi.MAX_PAGES_FIELD))
    request = max_pages * PAGE_SIZE
    window = -(-max(read_ahead, request) // request)  # read-ahead requests a window holds
    most = max(KERNEL_MAX_BACKGROUND, BACKGROUND_BYTES // request)
    max_background = max(KERNEL_MAX_BACKGROUND, min(2 * window, most))
    congestion = max(max_background * 3 // 4, min(window, max_background))
    return Wanted(flags=flags, max_write=request, max_pages=max_pages, max_readahead=read_ahead,
                  max_background=max_background, congestion_threshold=congestion)


@dataclass(slots=True)
class Negotiated:
    """What was agreed: the minor both speak and the features in force."""

    major: int = abi.FUSE_KERNEL_VERSION
    minor: int = 0
    flags: int = 0
    max_write: int = 0
    max_readahead: int = 0
    max_pages: int = 0
    max_background: int = 0  # 0: the kernel's default
    congestion_threshold: int = 0
    options: Options = field(default_factory=Options)

    def has(self, flag: int) -> bool:
        return bool(self.flags & flag)


class InitRefused(Exception):
    """The kernel's protocol version cannot be spoken; ``reply`` tells the kernel so."""

    def __init__(self, message: str, reply: bytes) -> None:
        super().__init__(message)
        self.reply = reply


def negotiate(req: Init, wanted: Wanted) -> tuple[bytes, Negotiated | None]:
    """The reply to ``req`` and what is agreed; None when the kernel is to send INIT again (it speaks
    a newer major). Raises :class:`InitRefused` for a kernel too old."""
    if req.major > abi.FUSE_KERNEL_VERSION:
        # answer with our major only; the kernel then sends INIT again with it
        return _init_out(req.unique, abi.FUSE_KERNEL_VERSION, abi.FUSE_KERNEL_MINOR_VERSION), None
    if req.major < abi.FUSE_KERNEL_VERSION or req.minor < abi.FUSE_OLDEST_MINOR_VERSION:
        raise InitRefused(
            f"the kernel speaks FUSE {req.major}.{req.minor}; "
            f"{abi.FUSE_KERNEL_VERSION}.{abi.FUSE_OLDEST_MINOR_VERSION} or later is needed",
            error(req.unique, errno.EPROTO),
        )
    minor = min(req.minor, abi.FUSE_KERNEL_MINOR_VERSION)
    flags = req.flags & wanted.flags
    # (the kernel takes the smaller of the reply's and the window its bdi has: read_ahead_kb, which
    # the mount may have raised before it answers INIT, above what the kernel offered)
    readahead = req.max_readahead if wanted.max_readahead is None else wanted.max_readahead
    max_pages = wanted.max_pages if flags & abi.FUSE_MAX_PAGES else 0
    if flags >> 32:
        flags |= abi.FUSE_INIT_EXT
    agreed = Negotiated(
        minor=minor,
        flags=flags,
        max_write=wanted.max_write,
        max_readahead=readahead,
        max_pages=max_pages,
        max_background=wanted.max_background,
        congestion_threshold=wanted.congestion_threshold,
        options=Options(setxattr_ext=bool(flags & abi.FUSE_SETXATTR_EXT)),
    )
    reply = _init_out(
        req.unique,
        abi.FUSE_KERNEL_VERSION,
        minor,
        readahead,
        flags,
        wanted.max_background,
        wanted.congestion_threshold,
        wanted.max_write,
        wanted.time_gran,
        max_pages,
    )
    return reply, agreed


def _init_out(
    unique: int,
    major: int,
    minor: int,
    max_readahead: int = 0,
    flags: int = 0,
    max_background: int = 0,
    congestion_threshold: int = 0,
    max_write: int = 0,
    time_gran: int = 0,
    max_pages: int = 0,
) -> bytes:
    body = abi.INIT_OUT.pack(
        major,
        minor,
        max_readahead,
        flags & 0xFFFFFFFF,
        max_background,
        congestion_threshold,
        max_write,
        time_gran,
        max_pages,
        0,  # map_alignment
        flags >> 32,
        0,  # max_stack_depth
        0,  # request_timeout
    )
    return abi.OUT_HEADER.pack(abi.OUT_HEADER.size + len(body), 0, unique) + body
