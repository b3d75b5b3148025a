"""Files of the blocking client as Python's own io objects: what ``open()`` returns for a local file.

:class:`RawFile` is an ``io.RawIOBase`` over an open :class:`~pynfsrdma._client.api.File`: ``readinto``
fills the caller's buffer straight from the READ replies, ``write`` sends the caller's buffer as it is.
:func:`open_file` stacks ``io.BufferedReader``/``BufferedWriter``/``BufferedRandom`` and
``io.TextIOWrapper`` on it as ``open()`` does, so ``csv``, ``json``, ``zipfile``, ``tarfile``, pandas and
pyarrow take it like a local file.
"""

from __future__ import annotations

import io
import os
from collections.abc import Awaitable, Callable
from typing import IO, Any, TypeVar, cast

from .api import File
from .attributes import FileAttrs
from .locks import LockConflict
from .open_file import DEFAULT_WINDOW

T = TypeVar("T")
Call = Callable[..., Any]  # runs ``fn(*args)`` (a coroutine function) on the client's event loop

OPEN_MODES = ("r", "r+", "w", "w+", "a", "a+", "x", "x+")


def api_mode(mode: str) -> str:
    """The mode of :meth:`Client.open` for an ``open()`` mode ("rb" -> "r", "w+t" -> "w+"); ValueError
    for a mode ``open()`` would refuse."""
    base = mode.replace("b", "").replace("t", "")
    if base not in OPEN_MODES or len(mode) - len(base) > 1 or len(set(mode)) != len(mode):
        raise ValueError(f"invalid mode: {mode!r}")
    return base


class RawFile(io.RawIOBase):
    """An open NFS file as an ``io.RawIOBase``; the File's own calls (``pread``, ``pwrite``, ``fsync``,
    ``lock`` ...) are here too."""

    def __init__(self, call: Call, f: File, mode: str) -> None:
        super().__init__()
        self._call = call
        self._f = f
        self.mode = mode

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        result: T = self._call(fn, *args)
        return result

    @property
    def name(self) -> str:
        return self._f.path

    @property
    def file(self) -> File:
        """The async :class:`~pynfsrdma._client.api.File` underneath."""
        return self._f

    def readable(self) -> bool:
        self._check_open()
        return self._f.readable

    def writable(self) -> bool:
        self._check_open()
        return self._f.writable

    def seekable(self) -> bool:
        self._check_open()
        return True

    def tell(self) -> int:
        self._check_open()
        return self._f.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._check_open()
        if whence == os.SEEK_SET and offset < 0:
            raise ValueError(f"negative seek position {offset}")
        return self._f.seek(offset, whence)

    def readinto(self, buffer: Any) -> int:
        self._check_open()
        return self._run(self._f.readinto, buffer)

    def readall(self) -> bytes:
        self._check_open()
        return self._run(self._f.read, -1)

    def write(self, data: Any) -> int:
        self._check_open()
        return self._run(self._f.write, data)

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()
        finally:
            try:
                self._run(self._f.close)
            except RuntimeError:
                pass  # the client is closed (it closed the file), or this is its own loop collecting garbage

    # -- the File's own calls ----------------------------------------------------------------------------
    def pread(self, offset: int, count: int) -> bytes:
        return self._run(self._f.pread, offset, count)

    def pwrite(self, offset: int, data: Any) -> int:
        return self._run(self._f.pwrite, offset, data)

    def fsync(self) -> None:
        """Make what was written durable on the server (COMMIT)."""
        self._run(self._f.fsync)

    def seek_data(self, offset: int) -> int:
        return self._run(self._f.seek_data, offset)

    def seek_hole(self, offset: int) -> int:
        return self._run(self._f.seek_hole, offset)

    def allocate(self, offset: int, length: int) -> FileAttrs:
        return self._run(self._f.allocate, offset, length)

    def punch_hole(self, offset: int, length: int) -> FileAttrs:
        return self._run(self._f.punch_hole, offset, length)

    def lock(self, type: int, offset: int = 0, length: int = 0, wait: bool = False) -> None:
        self._run(self._f.lock, type, offset, length, wait)

    def unlock(self, offset: int = 0, length: int = 0) -> None:
        self._run(self._f.unlock, offset, length)

    def test_lock(self, type: int, offset: int = 0, length: int = 0) -> LockConflict | None:
        return self._run(self._f.test_lock, type, offset, length)

    def __repr__(self) -> str:
        return f"<pynfsrdma.RawFile name={self.name!r} mode={self.mode!r}{' closed' if self.closed else ''}>"


def open_file(raw: RawFile, mode: str, buffering: int = -1, encoding: str | None = None,
              errors: str | None = None, newline: str | None = None) -> IO[Any]:
    """``raw`` wrapped as ``open(..., mode, buffering, encoding, errors, newline)`` would wrap a local
    file: unbuffered (``buffering=0``, binary only), buffered, or text. The default buffer is the size of
    the READs (reading) or of the WRITEs a flush sends in flight together (writing)."""
    text = "b" not in mode
    if buffering == 0:
        if text:
            raise ValueError("can't have unbuffered text I/O")
        return cast(IO[Any], raw)
    if buffering == 1 and not text:
        buffering = -1  # line buffering is for text, as open() has it
    f = raw.file
    nfs = f.client.nfs
    if buffering < 0:
        buffering = nfs.maxwrite * (f.client.window or DEFAULT_WINDOW) if raw.writable() else nfs.maxread
    size = max(buffering, io.DEFAULT_BUFFER_SIZE) if buffering > 1 else io.DEFAULT_BUFFER_SIZE
    buffered: io.BufferedIOBase
    if raw.readable() and raw.writable():
        buffered = io.BufferedRandom(raw, size)
    elif raw.writable():
        buffered = io.BufferedWriter(raw, size)
    else:
        buffered = io.BufferedReader(raw, size)
    if not text:
        return cast(IO[Any], buffered)
    return io.TextIOWrapper(buffered, io.text_encoding(encoding), errors, newline, line_buffering=buffering == 1)


__all__ = ["RawFile", "api_mode", "open_file"]
