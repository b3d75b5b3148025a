"""Cross Memory Attach: copying between this process's memory and another process's on the same
host (Linux ``process_vm_readv`` / ``process_vm_writev``), for the software provider.

On one host the software provider moves RDMA Read and Write data the way a NIC's DMA does: one
copy, straight between the two processes' memory, without the socket. The kernel makes the copy
in the calling process; the other process is not involved. It needs the right to trace the other
process (the same user, or CAP_SYS_PTRACE), and both must see one PID namespace: :func:`reaches`
proves both before a connection uses it.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence
from typing import Final

from .provider import buffer_address

IOV_MAX: Final = 1024  # the most iovecs one call takes (Linux UIO_MAXIOV)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_process_vm_readv = _libc.process_vm_readv
_process_vm_writev = _libc.process_vm_writev
for _call in (_process_vm_readv, _process_vm_writev):
    _call.argtypes = [
        ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.c_ulong,
    ]  # fmt: skip
    _call.restype = ctypes.c_ssize_t

Span = tuple[int, int]  # (address, length) in the other process


def _copy(write: bool, pid: int, local: memoryview, remote: Sequence[Span]) -> None:
    """Copy between ``local`` (bytes of this process) and ``remote`` spans of process ``pid``,
    whose lengths add up to ``local``'s; OSError if any byte cannot be reached."""
    call = _process_vm_writev if write else _process_vm_readv
    base = buffer_address(local) if local.nbytes else 0
    done = 0
    for first in range(0, len(remote), IOV_MAX):
        batch = remote[first : first + IOV_MAX]
        n = sum(length for _, length in batch)
        liov = _IoVec(base + done, n)
        riov = (_IoVec * len(batch))(*(_IoVec(a, length) for a, length in batch))
        got = call(pid, ctypes.byref(liov), 1, riov, len(batch), 0)
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        if got != n:  # the other process's memory ends inside a span
            raise OSError(errno.EFAULT, f"{got} of {n} bytes reached in process {pid}")
        done += n
    if done != local.nbytes:
        raise ValueError(f"{done} bytes of spans for a {local.nbytes}-byte buffer")


def read_from(pid: int, remote: Sequence[Span], into: memoryview) -> None:
    """Fill ``into`` from the ``remote`` spans of process ``pid``, in order."""
    _copy(False, pid, into, remote)


def write_to(pid: int, remote: Sequence[Span], data: memoryview) -> None:
    """Place ``data`` into the ``remote`` spans of process ``pid``, in order."""
    _copy(True, pid, data, remote)


def reaches(pid: int, address: int, expect: bytes) -> bool:
    """Whether process ``pid`` is reachable here and holds ``expect`` at ``address`` (a token the
    other side showed: a PID of another namespace or without the right to trace it fails)."""
    got = bytearray(len(expect))
    try:
        read_from(pid, [(address, len(expect))], memoryview(got))
    except OSError:
        return False
    return bytes(got) == expect


__all__ = ["IOV_MAX", "Span", "reaches", "read_from", "write_to"]
