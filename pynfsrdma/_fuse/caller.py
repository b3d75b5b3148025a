"""What the process behind a FUSE request is doing: the system call it waits in.

A FUSE LOOKUP says only which name is wanted, not why. An ``open()`` or ``execve()`` of a name the
mount believes absent must ask the server (another client may have made it since), while a
``stat()`` may take the cached answer; ``/proc/PID/syscall`` tells the two apart. Opens that may
create (``O_CREAT``) are not counted: the kernel sends the create to us by name anyway.
"""

from __future__ import annotations

import os
import platform

# the system calls that open an existing file by name or execute one, by machine (asm/unistd.h):
# number -> the index of its flags argument (None: the flags cannot be read there: openat2, exec)
OPENING_CALLS: dict[str, dict[int, int | None]] = {
    "x86_64": {2: 1, 257: 2, 437: None, 59: None, 322: None},  # open, openat, openat2, execve, execveat
    "aarch64": {56: 2, 437: None, 221: None, 281: None},  # openat, openat2, execve, execveat
}
_CALLS = OPENING_CALLS.get(platform.machine())


def is_opening(pid: int) -> bool:
    """Whether process ``pid`` waits in a system call that opens an existing file or executes one
    (True when that cannot be told; False for the kernel's own requests, pid 0)."""
    if pid <= 0:
        return False
    if _CALLS is None:
        return True
    try:  # (os.open and os.read: a buffered file object costs as much again in fstat and ioctl)
        fd = os.open(f"/proc/{pid}/syscall", os.O_RDONLY | os.O_CLOEXEC)
        try:
            fields = os.read(fd, 200).split()
        finally:
            os.close(fd)
    except OSError:
        return True
    try:
        nr = int(fields[0])
    except (IndexError, ValueError):
        return True  # ("running": not in a system call we can name)
    if nr not in _CALLS:
        return False
    arg = _CALLS[nr]
    if arg is None:
        return True
    try:
        flags = int(fields[1 + arg], 16)
    except (IndexError, ValueError):
        return True
    return not flags & os.O_CREAT
