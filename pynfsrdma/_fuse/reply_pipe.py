"""Pipes that READ replies go to /dev/fuse through: the reply's header is written into the pipe,
the transport splices the READ's data from its socket after it
(:class:`~pynfsrdma._transport.base.PayloadSink`), and one splice(2) moves the whole reply from the
pipe into the kernel's request. The data never passes through this process's memory.

Each READ being answered needs a pipe of its own. A pipe holds at most 1 MiB here (F_SETPIPE_SZ
beyond /proc/sys/fs/pipe-max-size needs CAP_SYS_RESOURCE), counted in 256 slots: the header takes
one, and the data from a socket takes one slot per piece of the socket's buffers it lies in (up to
32 KiB each on loopback, smaller on other links). A reply whose data does not fit is read back out
of the pipe and written as any other (the transport's fallback), so a READ of FUSE's largest size,
1 MiB, is spliced when its pieces fit and is still answered, with one copy more, when they do not.

A pipe given back while a transport still fills it is closed once the transport is done with it; a
pipe holding anything else is closed and a fresh one made when next needed, so that a reply never
goes out with bytes of another.
"""

from __future__ import annotations

import errno
import fcntl
import os

from .._client.read_sink import PayloadSink, SplicedPayload
from .kernel import replies

PIPE_SIZE = 1 << 20  # bytes asked for each pipe (the largest an unprivileged process may set)
MAX_PIPES = 32  # pipes at most (each READ being answered holds one)
HEADER = len(replies.data_header(0, 0))

EMPTY, FILLING, FILLED, DIRTY = range(4)


def _pipe() -> tuple[int, int]:
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:  # (a pipe of the default size: fewer replies fit, the others fall back)
        pass
    return r, w


class ReplyPipe(PayloadSink):
    """One pipe, for the READ reply to ``unique``."""

    def __init__(self) -> None:
        self.r, self.w = _pipe()
        self.unique = 0
        self.state = EMPTY
        self.length = 0
        self.fillings = 0
        self.retired = False  # given back while being filled: closed when the filling ends

    # -- PayloadSink ---------------------------------------------------------------------------------
    def begin(self, length: int) -> int | None:
        if self.state == FILLING or self.retired or self.r < 0:
            return None
        if self.state != EMPTY:
            self._renew()
        os.write(self.w, replies.data_header(self.unique, length))
        self.state = FILLING
        self.length = length
        self.fillings += 1
        return self.w

    def end(self, complete: bool) -> int:
        self.state = FILLED if complete and self.state == FILLING else DIRTY
        if self.retired:
            self.close()
        return self.fillings

    def holds(self, payload: SplicedPayload) -> bool:
        return (
            payload.sink is self
            and payload.filling == self.fillings
            and self.state == FILLED
            and payload.length == self.length
        )

    def take_back(self, into: memoryview) -> None:
        head = os.read(self.r, HEADER)
        if len(head) != HEADER:
            raise OSError(errno.EIO, "reply pipe lost its header")
        got = 0
        while got < into.nbytes:
            n = os.readv(self.r, [into[got:]])
            if n <= 0:
                raise OSError(errno.EIO, f"reply pipe held {got} bytes of {into.nbytes}")
            got += n
        self.state = EMPTY

    # -- the channel's side --------------------------------------------------------------------------
    def send(self, fd: int) -> int:
        """Move the reply (header and data) into the kernel's request on ``fd``, in one splice."""
        n = HEADER + self.length
        self.state = DIRTY  # (unless all of it went)
        sent = os.splice(self.r, fd, n)
        if sent == n:
            self.state = EMPTY
        return sent

    def _renew(self) -> None:
        """Drop whatever the pipe holds: a fresh pipe (the count of fillings goes on)."""
        self.close()
        self.r, self.w = _pipe()
        self.state = EMPTY

    def close(self) -> None:
        for fd in (self.r, self.w):
            if fd >= 0:
                os.close(fd)
        self.r = self.w = -1


class ReplyPipes:
    """The pipes of one channel: one is taken for each READ being answered, up to ``limit``."""

    def __init__(self, limit: int = MAX_PIPES) -> None:
        self.limit = limit
        self._free: list[ReplyPipe] = []
        self.in_use = 0
        self.spliced = 0  # replies sent from a pipe
        self.bytes_spliced = 0  # their data bytes

    def take(self, unique: int) -> ReplyPipe | None:
        if self._free:
            p = self._free.pop()
        elif self.in_use >= self.limit:
            return None
        else:
            try:
                p = ReplyPipe()
            except OSError:  # (out of file descriptors, or of pipe memory: no pipe, no splice)
                return None
        self.in_use += 1
        p.unique = unique
        return p

    def give_back(self, p: ReplyPipe) -> None:
        self.in_use -= 1
        if p.state == FILLING:
            p.retired = True  # (a transport still splices into it; it closes it when done)
        elif p.state == EMPTY and p.r >= 0:
            self._free.append(p)
        else:
            p.close()

    def close(self) -> None:
        for p in self._free:
            p.close()
        self._free.clear()


__all__ = ["MAX_PIPES", "PIPE_SIZE", "ReplyPipe", "ReplyPipes"]
