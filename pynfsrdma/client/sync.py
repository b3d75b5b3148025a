"""A blocking wrapper of the async API for plain scripts (no trio in sight).

    from pynfsrdma.client.sync import connect

    with connect("nfs://127.0.0.1:2049/export") as nfs:
        nfs.write_file("/hello.txt", b"hi")
        with nfs.open("/hello.txt") as f:
            print(f.read())

A private trio event loop runs in a background thread for the life of the connection; every method
call is handed to it and waited for. Errors are the same exceptions the async API raises.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from .api import Client, File, single_error
from .attributes import FileAttrs
from .locks import LockConflict

T = TypeVar("T")


class _Loop:
    """A trio loop in a daemon thread that keeps one Client open."""

    def __init__(self, connect_args: tuple[Any, ...], connect_kwargs: dict[str, Any]) -> None:
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._client: Client | None = None
        self._error: BaseException | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(
            target=self._main, args=(connect_args, connect_kwargs), name="pynfsrdma-sync", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _main(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        async def run() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            try:
                async with Client.connect(*args, **kwargs) as client:
                    self._client = client
                    self._ready.set()
                    await self._stop.wait()
            except BaseException as e:  # reported to the caller of connect() or close()
                self._error = single_error(e) if isinstance(e, BaseExceptionGroup) else e
            finally:
                self._ready.set()

        trio.run(run)

    @property
    def client(self) -> Client:
        assert self._client is not None
        return self._client

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if self._token is None or not self._thread.is_alive():
            raise RuntimeError("the connection is closed")
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def close(self) -> None:
        if self._thread.is_alive() and self._stop is not None and self._token is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            self._thread.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err


class SyncFile:
    def __init__(self, loop: _Loop, f: File) -> None:
        self._loop = loop
        self._f = f

    def read(self, count: int = -1) -> bytes:
        return self._loop.call(self._f.read, count)

    def pread(self, offset: int, count: int) -> bytes:
        return self._loop.call(self._f.pread, offset, count)

    def write(self, data: Any) -> int:
        return self._loop.call(self._f.write, data)

    def pwrite(self, offset: int, data: Any) -> int:
        return self._loop.call(self._f.pwrite, offset, data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def fsync(self) -> None:
        self._loop.call(self._f.fsync)

    def seek_data(self, offset: int) -> int:
        return self._loop.call(self._f.seek_data, offset)

    def seek_hole(self, offset: int) -> int:
        return self._loop.call(self._f.seek_hole, offset)

    def allocate(self, offset: int, length: int) -> FileAttrs:
        return self._loop.call(self._f.allocate, offset, length)

    def punch_hole(self, offset: int, length: int) -> FileAttrs:
        return self._loop.call(self._f.punch_hole, offset, length)

    def lock(self, type: int, offset: int = 0, length: int = 0, wait: bool = False) -> None:
        self._loop.call(self._f.lock, type, offset, length, wait)

    def unlock(self, offset: int = 0, length: int = 0) -> None:
        self._loop.call(self._f.unlock, offset, length)

    def test_lock(self, type: int, offset: int = 0, length: int = 0) -> LockConflict | None:
        return self._loop.call(self._f.test_lock, type, offset, length)

    flush = fsync

    def close(self) -> None:
        self._loop.call(self._f.close)

    def __enter__(self) -> SyncFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncClient:
    """The methods of :class:`~pynfsrdma.client.api.Client`, blocking."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = _Loop(args, kwargs)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._loop.client, name)
        if not callable(attr):
            return attr

        def blocking(*args: Any, **kwargs: Any) -> Any:
            async def go() -> Any:
                return await attr(*args, **kwargs)

            return self._loop.call(go)

        return blocking

    def open(self, path: str, mode: str = "r", perm: int = 0o644) -> SyncFile:
        return SyncFile(self._loop, self._loop.call(self._loop.client.open, path, mode, perm))

    def close(self) -> None:
        self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(*args: Any, **kwargs: Any) -> SyncClient:
    """Like :meth:`Client.connect` (same arguments), blocking."""
    return SyncClient(*args, **kwargs)
