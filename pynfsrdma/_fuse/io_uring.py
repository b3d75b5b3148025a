"""An io_uring of the Linux kernel, from Python by its three system calls (``io_uring_setup``,
``io_uring_enter``; ``include/uapi/linux/io_uring.h``) and its rings mapped into memory, with no
library of its own: 128-byte submission entries (``IORING_SETUP_SQE128``), for the passthrough
commands (``IORING_OP_URING_CMD``) of FUSE over io_uring (:mod:`.uring_channel`).

One thread submits and reaps (the caller's: the ring is not locked). The ring's descriptor is
readable when completions wait, so a trio task waits for them with ``wait_readable``.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import struct
from collections.abc import Iterator
from typing import Any

# -- the kernel's ABI (x86_64 and aarch64 system call numbers: the same since 5.1 on both) ------------
SYS_IO_URING_SETUP = 425
SYS_IO_URING_ENTER = 426
IORING_SETUP_SQE128 = 1 << 10
IORING_FEAT_SINGLE_MMAP = 1 << 0
IORING_ENTER_GETEVENTS = 1 << 0
IORING_OFF_SQ_RING = 0
IORING_OFF_CQ_RING = 0x8000000
IORING_OFF_SQES = 0x10000000
IORING_OP_URING_CMD = 46
SQE_SIZE = 128  # with IORING_SETUP_SQE128
SQE_CMD_SIZE = 80
# io_uring_sqe (128 bytes) for a URING_CMD: opcode, flags, ioprio, fd, cmd_op, pad, addr, len,
# uring_cmd_flags, user_data, buf_index, personality, file_index, then the command's 80 bytes
SQE_URING_CMD = struct.Struct(f"=BBHiIIQIIQHHi{SQE_CMD_SIZE}s")
assert SQE_URING_CMD.size == SQE_SIZE
CQE = struct.Struct("=Qii")  # user_data, res, flags
# io_uring_params: sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd,
# resv[3], then io_sqring_offsets (head, tail, ring_mask, ring_entries, flags, dropped, array, resv1,
# user_addr) and io_cqring_offsets (head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1,
# user_addr)
PARAMS = struct.Struct("=IIIIIII12x" + "IIIIIIIIQ" + "IIIIIIIIQ")
MACHINES = ("x86_64", "aarch64")


class RingError(OSError):
    """The ring could not be made (no io_uring here, or it is turned off)."""


def _syscall(*argtypes: Any) -> Any:
    """syscall(2) as a function of these argument types (a function object of its own)."""
    f = ctypes.CDLL(None, use_errno=True)["syscall"]
    f.restype = ctypes.c_long
    f.argtypes = [ctypes.c_long, *argtypes]
    return f


class Ring:
    """A submission ring of ``entries`` 128-byte entries and its completion ring."""

    def __init__(self, entries: int) -> None:
        if platform.machine() not in MACHINES:
            raise RingError(0, f"io_uring system calls are not known on {platform.machine()}")
        setup = _syscall(ctypes.c_long, ctypes.c_char_p)
        # io_uring_enter(fd, to_submit, min_complete, flags, argp, argsz)
        self._enter = _syscall(*[ctypes.c_long] * 6)
        params = ctypes.create_string_buffer(PARAMS.size)
        PARAMS.pack_into(params, 0, 0, 0, IORING_SETUP_SQE128, *([0] * 22))
        fd = setup(SYS_IO_URING_SETUP, entries, params)
        if fd < 0:
            e = ctypes.get_errno()
            raise RingError(e, f"io_uring_setup: {os.strerror(e)}")
        self.fd = int(fd)
        try:
            self._map(PARAMS.unpack_from(params.raw, 0))
        except BaseException:
            os.close(self.fd)
            raise
        self._sq_pending = 0  # entries filled in, not yet handed to the kernel
        self._closed = False

    def _map(self, p: tuple[int, ...]) -> None:
        sq_entries, cq_entries, _flags, _cpu, _idle, features, _wq = p[:7]
        sq_head, sq_tail, sq_mask, _sq_n, _sq_flags, _dropped, sq_array = p[7:14]
        cq_head, cq_tail, cq_mask, _cq_n, _overflow, cqes = p[16:22]
        if not features & IORING_FEAT_SINGLE_MMAP:
            raise RingError(0, "io_uring without IORING_FEAT_SINGLE_MMAP (kernel before 5.4)")
        size = max(sq_array + sq_entries * 4, cqes + cq_entries * CQE.size)
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        self._rings = mmap.mmap(self.fd, size, mmap.MAP_SHARED | mmap.MAP_POPULATE, prot, offset=IORING_OFF_SQ_RING)
        self._sqes = mmap.mmap(self.fd, sq_entries * SQE_SIZE, mmap.MAP_SHARED | mmap.MAP_POPULATE, prot,
                               offset=IORING_OFF_SQES)
        self.sq_entries = sq_entries
        self.cq_entries = cq_entries
        r = memoryview(self._rings)
        self._sq_head = r[sq_head : sq_head + 4].cast("I")
        self._sq_tail = r[sq_tail : sq_tail + 4].cast("I")
        self._sq_mask = r[sq_mask : sq_mask + 4].cast("I")[0]
        self._sq_array = r[sq_array : sq_array + sq_entries * 4].cast("I")
        self._cq_head = r[cq_head : cq_head + 4].cast("I")
        self._cq_tail = r[cq_tail : cq_tail + 4].cast("I")
        self._cq_mask = r[cq_mask : cq_mask + 4].cast("I")[0]
        self._cqes = r[cqes : cqes + cq_entries * CQE.size]
        self._views = [self._sq_head, self._sq_tail, self._sq_array, self._cq_head, self._cq_tail, self._cqes,
                       r]

    # -- submitting ----------------------------------------------------------------------------------
    def queue_command(self, fd: int, cmd_op: int, user_data: int, cmd: bytes, addr: int = 0, length: int = 0) -> None:
        """Fill in an IORING_OP_URING_CMD for the file ``fd`` (``cmd``: its command bytes, 80 at
        most); it goes to the kernel at the next :meth:`submit`. Submits first when the ring is full."""
        if (self._sq_tail[0] - self._sq_head[0]) & 0xFFFFFFFF >= self.sq_entries:
            self.submit()
        tail = self._sq_tail[0]
        index = tail & self._sq_mask
        SQE_URING_CMD.pack_into(self._sqes, index * SQE_SIZE, IORING_OP_URING_CMD, 0, 0, fd, cmd_op, 0, addr, length,
                                0, user_data, 0, 0, 0, cmd)
        self._sq_array[index] = index
        self._sq_tail[0] = (tail + 1) & 0xFFFFFFFF  # (x86 and arm64 stores through Python stay in order)
        self._sq_pending += 1

    def submit(self, wait: int = 0) -> int:
        """Hand the entries filled in to the kernel (and wait for ``wait`` completions)."""
        n = self._sq_pending
        if n == 0 and wait == 0:
            return 0
        flags = IORING_ENTER_GETEVENTS if wait else 0
        while True:
            r = self._enter(SYS_IO_URING_ENTER, self.fd, n, wait, flags, 0, 0)
            if r >= 0:
                break
            e = ctypes.get_errno()
            if e == errno.EINTR:
                continue
            raise OSError(e, f"io_uring_enter: {os.strerror(e)}")
        self._sq_pending -= min(int(r), n)
        return int(r)

    @property
    def pending(self) -> int:
        """Entries filled in and not yet submitted."""
        return self._sq_pending

    # -- reaping -------------------------------------------------------------------------------------
    def completions(self) -> Iterator[tuple[int, int]]:
        """The completions waiting, as (user_data, res), each taken off the ring as it is read."""
        mask = self._cq_mask
        while True:
            head = self._cq_head[0]
            if head == self._cq_tail[0]:
                return
            user_data, res, _flags = CQE.unpack_from(self._cqes, (head & mask) * CQE.size)
            self._cq_head[0] = (head + 1) & 0xFFFFFFFF
            yield user_data, res

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for v in self._views:
            v.release()
        self._views = []
        self._rings.close()
        self._sqes.close()
        os.close(self.fd)


def buffer_address(buf: mmap.mmap) -> int:
    """The address of ``buf``'s memory (a mapping stays where it is until it is closed)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))
