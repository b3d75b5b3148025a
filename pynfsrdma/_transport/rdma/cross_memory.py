"""Cross Memory Attach: copying between this process's memory and another process's on the same
host (Linux ``process_vm_readv`` / ``process_vm_writev``), for the software provider.

On one host the software provider moves RDMA Read and Write data the way a NIC's DMA does: one
copy, straight between the two processes' memory, without the socket. The kernel makes the copy
in the calling process; the other process is not involved. It needs the right to trace the other
process (the same user, or CAP_SYS_PTRACE), and both must see one PID namespace: :func:`reaches`
proves both before a connection uses it.

``process_vm_*`` pins the other process's pages for every call: about 90-100 µs of CPU per MiB
here, against 23-25 µs for a copy between two mappings of this process. A process that serves
RDMA (the testbed responder) can therefore keep the memory its peers reach in a
:class:`SharedArena` (a memfd); a peer that maps it too (:class:`PeerMemory`, through
``/proc/PID/fd``, under the same right to trace) copies what lies there with a plain memory copy,
and everything else with ``process_vm_*`` as before.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import weakref
from collections.abc import Callable, Sequence
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


ARENA_SIZE: Final = 256 << 20  # a shared arena: a sparse memfd, pages as touched; its bound in use
_FIXED_SIZE: Final = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class SharedArena:
    """Memory of this process that a peer on the same host may map too (a memfd, shared): buffers
    are cut from it once (:meth:`take`) and kept by their owner's pools; it is never given back."""

    def __init__(self, size: int = ARENA_SIZE) -> None:
        self.fd = os.memfd_create("pynfsrdma-soft-rdma", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _FIXED_SIZE | fcntl.F_SEAL_SEAL)
        self._view = memoryview(mmap.mmap(self.fd, size))
        self.address = buffer_address(self._view)
        self.size = size
        self._used = 0

    def take(self, n: int) -> memoryview | None:
        """``n`` bytes (whole pages) of the arena, or None when it is used up."""
        n = (n + 0xFFF) & ~0xFFF
        if self._used + n > self.size:
            return None
        view = self._view[self._used : self._used + n]
        self._used += n
        return view


class PeerMemory:
    """Where the memory of process ``pid`` is reached: through our mapping of its
    :class:`SharedArena` (:meth:`map_arena`) for spans that lie there, else ``process_vm_*``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._arena: memoryview | None = None
        self._base = 0
        self.bytes_mapped = 0  # bytes copied through the mapping (the rest: process_vm_*)

    def map_arena(self, fd: int, address: int, size: int) -> bool:
        """Map the peer's arena (its memfd ``fd`` at ``address``); False if it cannot be reached.
        Only a memfd sealed against shrinking is mapped, and no more of it than it holds: a
        mapping past a file's end, or of a file that shrinks later, would fault on access."""
        try:
            mine = os.open(f"/proc/{self.pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if fcntl.fcntl(mine, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK == 0:
                return False
            size = min(size, os.fstat(mine).st_size)
            if size <= 0:
                return False
            self._arena = memoryview(mmap.mmap(mine, size))
        except (OSError, ValueError):
            return False
        finally:
            os.close(mine)
        self._base = address
        return True

    def _mapped(self, remote: Sequence[Span]) -> list[memoryview] | None:
        arena = self._arena
        if arena is None:
            return None
        views = []
        for address, length in remote:
            start = address - self._base
            if start < 0 or start + length > arena.nbytes:
                return None
            views.append(arena[start : start + length])
        return views

    def lend(self, address: int, length: int, on_return: Callable[[], None]) -> memoryview | None:
        """The peer's ``length`` bytes at ``address`` where they lie in our mapping of its arena,
        read-only and not copied; ``on_return()`` runs once no view of them is left. None when
        they do not lie there."""
        arena = self._arena
        start = address - self._base
        if arena is None or length <= 0 or start < 0 or start + length > arena.nbytes:
            return None
        lent = (ctypes.c_ubyte * length).from_buffer(arena, start)  # an object the views hold
        weakref.finalize(lent, on_return).atexit = False  # (nothing to give back at exit)
        return memoryview(lent).cast("B").toreadonly()

    def read_from(self, remote: Sequence[Span], into: memoryview) -> None:
        """Fill ``into`` from the peer's ``remote`` spans, in order."""
        views = self._mapped(remote)
        if views is None:
            read_from(self.pid, remote, into)
            return
        pos = 0
        for v in views:
            into[pos : pos + v.nbytes] = v
            pos += v.nbytes
        self.bytes_mapped += pos

    def write_to(self, remote: Sequence[Span], data: memoryview) -> None:
        """Place ``data`` into the peer's ``remote`` spans, in order."""
        views = self._mapped(remote)
        if views is None:
            write_to(self.pid, remote, data)
            return
        pos = 0
        for v in views:
            v[:] = data[pos : pos + v.nbytes]
            pos += v.nbytes
        self.bytes_mapped += pos


__all__ = ["ARENA_SIZE", "IOV_MAX", "PeerMemory", "SharedArena", "Span", "reaches", "read_from", "write_to"]
