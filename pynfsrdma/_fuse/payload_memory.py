"""The mount daemon's heap for write payloads (glibc's malloc, through ctypes).

FUSE hands every write over in a buffer of its own that is kept until a COMMIT covers it; with
glibc's defaults those megabytes went back to the kernel as they were freed (brk, munmap) and every
new one took its pages again by page faults, zeroed and charged: under the copy, the faults cost
about four times the copy, a fifth of both cores in a 1 MiB sequential write.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .._client.write_plan import COMMIT_WINDOW

# glibc's mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # a write's payload (1 MiB at most) comes from the heap
TRIM_THRESHOLD = 4 * COMMIT_WINDOW  # free heap kept for the next payloads (what is kept is ~2 windows)


def _libc_function(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # not glibc: its defaults stay
        return None


def keep_payload_memory() -> bool:
    """Let freed write payloads be used again instead of going back to the kernel (for the mount
    daemon, once at start). pyfuse3 hands each write over as a new ``bytes`` (copied from its request
    buffer) that is kept until a COMMIT covers it; with glibc's defaults those megabytes were
    returned to the kernel as they were freed (brk, munmap) and every new one took its pages again
    by page faults, zeroed and charged: under the copy, the faults cost about four times the copy,
    a fifth of both cores in a 1 MiB sequential write. True if the settings took."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def return_payload_memory() -> None:
    """Give the free heap back to the kernel (after a large file is closed: what
    :func:`keep_payload_memory` keeps is for a write in progress)."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is not None:
        malloc_trim(0)
