"""The blocking client for plain scripts (no trio in sight): what ``pynfsrdma.connect`` returns.

    import pynfsrdma

    with pynfsrdma.connect("nfs://127.0.0.1:2049/export") as nfs:
        nfs.write_file("/hello.txt", b"hi")
        with nfs.open("/hello.txt", "r", encoding="utf-8") as f:
            print(f.read())

A private trio event loop runs in a background thread for the life of the connection; every call is
handed to it and waited for, so a client may be used from several threads at once. Errors are the
exceptions the async :class:`~pynfsrdma._client.api.Client` raises (OSError subclasses such as
FileNotFoundError). Files are Python's io objects (:mod:`.file_object`).
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import IO, Any, TypeVar

import trio

from .api import Client, Progress, single_error
from .attributes import FileAttrs, FsStat
from .batched import MERGE_GAP
from .connect_options import ConnectOptions, takes_connect_options
from .dir_entry import DirEntry
from .file_object import RawFile, api_mode, open_file
from .trees import Walk
from .url import NfsURL

T = TypeVar("T")

_pid = os.getpid()  # this process's id: noted once, and again in each forked child, never asked per call


def _note_child() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_note_child)


def process_id() -> int:
    """This process's id, as ``os.getpid()`` gives it, without asking the kernel (each blocking call
    checks it: a forked child has no loop thread of its parent's)."""
    return _pid


class _Waker:
    """The eventfd a caller's thread waits on for the outcome of its call (one per thread, made on
    its first call, closed when nothing refers to it any more: the thread ended, or a call it
    stopped waiting for was carried out).

    ``os.eventfd_write`` lets go of the GIL for the write that wakes the caller, where a lock's
    release keeps it: the caller woken takes the GIL and runs at once, and the loop's thread takes
    it back when the caller next waits, instead of the two threads waking each other by turns for
    the GIL until the loop's thread reaches its next I/O wait."""

    __slots__ = ("fd", "pid")

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_CLOEXEC)
        self.pid = _pid

    def __del__(self, close: Callable[[int], None] = os.close) -> None:
        close(self.fd)


_wakers = threading.local()


def _waker() -> _Waker:
    """This thread's waker (a new one in a forked child: the parent's is shared with it)."""
    waker: _Waker | None = getattr(_wakers, "waker", None)
    if waker is None or waker.pid != _pid:
        waker = _wakers.waker = _Waker()
    return waker


class _Call:
    """One call handed from a caller's thread to the loop: what to await, and its outcome, handed
    back by writing the caller's waker."""

    __slots__ = ("args", "fn", "kwargs", "ok", "value", "waker")

    def __init__(self, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any],
                 waker: _Waker) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.ok = False
        self.value: Any = None
        self.waker = waker

    def done(self) -> None:
        os.eventfd_write(self.waker.fd, 1)

    def fail(self, error: BaseException) -> None:
        self.value = error
        self.done()


def _lingered(fd: int, seconds: float) -> bool:
    """Whether the eventfd ``fd`` was written within ``seconds``, waited for in this thread (its
    count read if so)."""
    return bool(select.select((fd,), (), (), seconds)[0]) and _written(fd)


def _written(fd: int) -> bool:
    """Whether the eventfd ``fd`` (non-blocking) was written (its count read if so)."""
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        return False
    return True


class _Worker:
    """A task of the loop that carries out calls, and the call it is handed next."""

    __slots__ = ("call", "task")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.call: _Call | None = None


def _closed() -> RuntimeError:
    return RuntimeError("the connection is closed")


class _Loop:
    """A trio loop in a daemon thread that keeps one Client open.

    The calls of other threads are carried out by worker tasks of the loop that stay for the next
    call when one is done; an outcome wakes its caller through the caller's :class:`_Waker`. One
    worker, the listener, waits on an eventfd of its own: a call that finds it waiting is handed to
    it directly (the eventfd written, the listener woken by the loop's own I/O wait, the call
    carried out in the same step of the loop; its caller woken once the listener listens again).
    A call that comes while the listener is busy goes by a ``run_sync_soon`` callback that
    hands it to an idle worker (``trio.lowlevel.reschedule``) or a new one: there are as many
    workers as calls were ever in flight at once. (``trio.from_thread.run`` queues the call for a
    system task that starts a task for it, which a small call would mostly be; a callback costs
    the loop one more step than the listener.)"""

    TAKEN_AT_ONCE = 16  # calls the listener takes in a row without going through the loop's I/O wait
    # how long the listener, with no other call in flight, waits in the loop's thread for its
    # caller's next call before it waits through the loop's I/O wait (a script's next call mostly
    # comes within tens of microseconds of the last one's outcome)
    LINGER = 100e-6

    def __init__(self, options: ConnectOptions) -> None:
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._client: Client | None = None
        self._error: BaseException | None = None
        self._stop: trio.Event | None = None
        self._calls: trio.Nursery | None = None  # where the workers run
        self._idle: list[_Worker] = []  # workers waiting for a call
        self._workers = 0  # worker tasks, idle or not
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)  # the listener's
        self._door = threading.Lock()  # guards the three below, between the callers and the listener
        self._listening = False  # the listener takes the next call handed to it
        self._waiting = False  # ... and waits for it on _wake: a caller that hands it one writes _wake
        self._handed: _Call | None = None  # the call handed to the listener, not taken yet
        self._running_in: int | None = None  # the process whose thread runs the loop, while it runs
        self.calls_handed = 0  # calls handed to the loop so far (a count, not a lock: threads may race it)
        self.calls_taken_at_once = 0  # of those, taken by the listener without waiting (see _listen)
        self.calls_lingered = 0  # of those, taken by the listener while it lingered (see _listen)
        self._thread = threading.Thread(
            target=self._main, args=(options,), name="pynfsrdma-sync", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _main(self, options: ConnectOptions) -> None:
        self._running_in = _pid

        async def run() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            try:
                async with Client.from_options(options) as client, trio.open_nursery() as calls:
                    self._client = client
                    self._calls = calls
                    calls.start_soon(self._listen)
                    self._ready.set()
                    await self._stop.wait()
                    calls.cancel_scope.cancel()  # (calls still running when it closes fail saying so)
            except BaseException as e:  # reported to the caller of connect() or close()
                self._error = single_error(e) if isinstance(e, BaseExceptionGroup) else e
            finally:
                self._ready.set()

        try:
            trio.run(run)
        finally:
            self._running_in = None
            os.close(self._wake)

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("the connection is closed")
        return self._client

    @property
    def alive(self) -> bool:
        """The loop runs, in this process (a forked child has no thread of its parent's)."""
        return self._token is not None and self._running_in == _pid

    async def _carry_out(self, call: _Call) -> None:
        """Await ``call`` and keep its outcome in it (the task that carried it out, a worker or the
        listener, wakes the caller: when it is ready for the caller's next call)."""
        try:
            call.value = await call.fn(*call.args, **call.kwargs)
            call.ok = True
        except trio.Cancelled:
            call.fail(RuntimeError("the connection closed during the call"))
            raise
        except BaseException as e:  # (handed to the caller, as from_thread.run does)
            call.value = e

    async def _listen(self) -> None:
        """The listener: take a call handed to it directly, carry it out, take the next one.

        A caller woken by the outcome of its call takes the GIL from the loop's thread at once
        (:class:`_Waker`), and often hands its next call before giving the GIL back (about two
        calls in three of a script's calls one after another): the listener then finds that call
        handed and takes it in the same step, without going through the loop's I/O wait (a trio
        step, an epoll_ctl and an epoll_wait less a call), and the caller wrote no eventfd for it
        (a write and a read less). Only a listener that found no call waits for one on the
        eventfd, which the caller that hands it one then writes. At most :attr:`TAKEN_AT_ONCE`
        calls in a row go without a wait: then the listener lets the loop's other tasks run (a
        pass of the loop), even when the calls themselves never wait."""
        fd, door = self._wake, self._door
        finished: _Call | None = None
        streak = 0  # calls taken in a row without waiting
        try:
            while True:
                with door:
                    self._listening = True
                    self._waiting = False
                if finished is not None:  # (its caller woken now finds the listener listening)
                    finished.done()
                    finished = None
                call = self._handed  # (only the listener takes it: the caller that handed it is done)
                if call is not None:
                    self._handed = None
                else:
                    with door:  # (a call handed from now on comes with the eventfd written)
                        call, self._handed = self._handed, None
                        self._waiting = call is None
                    if call is None and self._workers == len(self._idle) and _lingered(fd, self.LINGER):
                        call, self._handed = self._handed, None
                        if call is None:
                            continue
                        self.calls_lingered += 1
                if call is not None:  # (taken without a wait)
                    if streak < self.TAKEN_AT_ONCE:
                        streak += 1
                        self.calls_taken_at_once += 1
                    else:  # (calls in a row without a wait: the loop's other tasks first; the call,
                        # taken, is carried out whatever comes, a cancellation failing it inside)
                        streak = 0
                        await trio.lowlevel.cancel_shielded_checkpoint()
                else:
                    streak = 0
                    await trio.lowlevel.wait_readable(fd)
                    _written(fd)
                    call, self._handed = self._handed, None
                    if call is None:
                        continue
                await self._carry_out(call)
                finished = call
                del call
        finally:  # (the loop closes: a call handed and not taken fails saying so)
            with door:
                self._listening = False
                left, self._handed = self._handed, None
            if left is not None:
                left.fail(_closed())

    async def _worker(self, call: _Call) -> None:
        """Carry out calls, the first one given, then each one an idle worker is handed."""
        idle = self._idle
        me = _Worker(trio.lowlevel.current_task())

        def abort(_: Any) -> trio.lowlevel.Abort:  # (the loop closes: an idle worker just ends)
            idle.remove(me)
            return trio.lowlevel.Abort.SUCCEEDED

        handed: _Call | None = call
        del call
        try:
            while handed is not None:
                await self._carry_out(handed)
                idle.append(me)
                handed.done()
                handed = None  # (the caller's waker is not kept alive by an idle worker)
                await trio.lowlevel.wait_task_rescheduled(abort)
                handed, me.call = me.call, None
        finally:
            self._workers -= 1

    def _hand_over(self, call: _Call) -> None:
        """On the loop (where a callback must not raise): ``call`` to an idle worker or a new one."""
        if self._idle:
            worker = self._idle.pop()
            worker.call = call
            trio.lowlevel.reschedule(worker.task)
            return
        calls = self._calls
        try:
            if calls is None:
                raise RuntimeError
            calls.start_soon(self._worker, call)
            self._workers += 1
        except RuntimeError:  # the nursery closed meanwhile
            call.fail(_closed())

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await fn(*args, **kwargs)`` on the loop, waited for in this thread."""
        token = self._token
        if token is None or self._calls is None or self._running_in != _pid:
            raise _closed()
        if threading.get_ident() == self._thread.ident:
            raise RuntimeError("the blocking client called from its own event loop")
        waker = _waker()
        call = _Call(fn, args, kwargs, waker)
        self.calls_handed += 1
        with self._door:
            direct = self._listening
            if direct:  # to the listener (woken if it waits: else it takes the call as it looks)
                self._listening = False
                self._handed = call
                if self._waiting:
                    os.eventfd_write(self._wake, 1)
        if not direct:
            try:
                token.run_sync_soon(self._hand_over, call)
            except trio.RunFinishedError:
                raise _closed() from None
        try:
            os.eventfd_read(waker.fd)
        except BaseException:
            # interrupted (KeyboardInterrupt): the loop still writes this waker when the call ends,
            # so the thread's next call waits on a new one
            _wakers.waker = None
            raise
        if call.ok:
            result: T = call.value
            return result
        raise call.value

    def close(self) -> None:
        if self._thread.is_alive() and self._stop is not None and self._token is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            self._thread.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err


class SyncClient:
    """The calls of :class:`~pynfsrdma._client.api.Client`, blocking; paths are relative to the export
    in the URL ("/" is its root)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``SyncClient(options)`` with a :class:`ConnectOptions`, or with :func:`connect`'s arguments."""
        given = args[0] if len(args) == 1 and not kwargs and isinstance(args[0], ConnectOptions) else None
        self._loop = _Loop(given if given is not None else ConnectOptions(*args, **kwargs))

    @property
    def client(self) -> Client:
        """The async :class:`~pynfsrdma._client.api.Client` underneath (for use on its own loop only)."""
        return self._loop.client

    @property
    def url(self) -> NfsURL:
        return self._loop.client.url

    @property
    def closed(self) -> bool:
        return not self._loop.alive

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return self._loop.call(fn, *args, **kwargs)

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await fn(client, *args)`` on the connection's loop, with ``client`` the async
        :class:`~pynfsrdma._client.api.Client`, waited for: several calls of the client for one
        hand-over between this thread and the loop's (each blocking call is one)."""
        return self._loop.call(fn, self._loop.client, *args)

    # -- metadata ---------------------------------------------------------------------------------------
    def stat(self, path: str) -> FileAttrs:
        """The attributes of ``path`` (a symbolic link: of its target), with ``st_size``, ``st_mtime``,
        ``st_mode`` ... as ``os.stat`` has them."""
        return self._run(self._loop.client.stat, path)

    def lstat(self, path: str) -> FileAttrs:
        return self._run(self._loop.client.lstat, path)

    def exists(self, path: str) -> bool:
        return self._run(self._loop.client.exists, path)

    def lexists(self, path: str) -> bool:
        return self._run(self._loop.client.lexists, path)

    def isdir(self, path: str) -> bool:
        return self._run(self._loop.client.isdir, path)

    def isfile(self, path: str) -> bool:
        return self._run(self._loop.client.isfile, path)

    def islink(self, path: str) -> bool:
        return self._run(self._loop.client.islink, path)

    def listdir(self, path: str = "/") -> list[str]:
        return self._run(self._loop.client.listdir, path)

    def scandir(self, path: str = "/") -> Iterator[DirEntry]:
        """The entries of a directory as ``os.scandir`` gives them, with the attributes READDIR brought."""
        return iter(self._run(self._loop.client.scandir, path))

    def walk(self, top: str = "/", topdown: bool = True, onerror: Callable[[OSError], Any] | None = None,
             followlinks: bool = False) -> Iterator[tuple[str, list[str], list[str]]]:
        """(dirpath, dirnames, filenames) for ``top`` and each directory below it, as ``os.walk``."""
        walk = Walk(top, topdown, onerror, followlinks)
        while (path := walk.next_directory()) is not None:
            try:
                walk.listed(path, list(self.scandir(path)))
            except OSError as e:
                walk.failed(e)
            yield from walk.results()
        yield from walk.results()

    def glob(self, pattern: str) -> list[str]:
        """The paths matching ``pattern`` (``*``, ``?``, ``[...]``, and ``**`` for any depth), sorted."""
        return self._run(self._loop.client.glob, pattern)

    def created(self, path: str) -> int | None:
        """When ``path`` was created (time_create, ns since the epoch); None when the server keeps no
        creation times."""
        return self._run(self._loop.client.created, path)

    def statfs(self, path: str = "/") -> FsStat:
        return self._run(self._loop.client.statfs, path)

    def setattr(self, path: str, *, follow: bool = True, **changes: Any) -> FileAttrs:
        return self._run(self._loop.client.setattr, path, follow=follow, **changes)

    def chmod(self, path: str, mode: int) -> FileAttrs:
        return self._run(self._loop.client.chmod, path, mode)

    def chown(self, path: str, uid: int | None = None, gid: int | None = None) -> FileAttrs:
        return self._run(self._loop.client.chown, path, uid, gid)

    def truncate(self, path: str, size: int) -> FileAttrs:
        return self._run(self._loop.client.truncate, path, size)

    def utime(self, path: str, atime_ns: int | str | None = None, mtime_ns: int | str | None = None) -> FileAttrs:
        return self._run(self._loop.client.utime, path, atime_ns, mtime_ns)

    def getxattr(self, path: str, name: str) -> bytes:
        return self._run(self._loop.client.getxattr, path, name)

    def setxattr(self, path: str, name: str, value: bytes, *, create: bool = False, replace: bool = False) -> None:
        self._run(self._loop.client.setxattr, path, name, value, create=create, replace=replace)

    def listxattr(self, path: str) -> list[str]:
        return self._run(self._loop.client.listxattr, path)

    def removexattr(self, path: str, name: str) -> None:
        self._run(self._loop.client.removexattr, path, name)

    # -- namespace --------------------------------------------------------------------------------------
    def mkdir(self, path: str, mode: int = 0o755) -> FileAttrs:
        return self._run(self._loop.client.mkdir, path, mode)

    def makedirs(self, path: str, mode: int = 0o755, exist_ok: bool = False) -> None:
        """As os.makedirs: an existing ``path`` is FileExistsError unless a directory and ``exist_ok``."""
        self._run(self._loop.client.makedirs, path, mode, exist_ok)

    def remove(self, path: str) -> None:
        """Remove a file or symbolic link, as os.remove (a directory: IsADirectoryError)."""
        self._run(self._loop.client.remove, path)

    unlink = remove

    def rmdir(self, path: str) -> None:
        self._run(self._loop.client.rmdir, path)

    def rmtree(self, path: str) -> None:
        self._run(self._loop.client.rmtree, path)

    def rename(self, src: str, dst: str) -> None:
        self._run(self._loop.client.rename, src, dst)

    def link(self, src: str, dst: str, *, follow_symlinks: bool = True) -> FileAttrs:
        return self._run(self._loop.client.link, src, dst, follow_symlinks=follow_symlinks)

    def symlink(self, target: str, path: str) -> FileAttrs:
        return self._run(self._loop.client.symlink, target, path)

    def readlink(self, path: str) -> str:
        return self._run(self._loop.client.readlink, path)

    # -- files ------------------------------------------------------------------------------------------
    def open(self, path: str, mode: str = "r", buffering: int = -1, encoding: str | None = None,
             errors: str | None = None, newline: str | None = None, *, perm: int = 0o644) -> IO[Any]:
        """Open as ``open()`` does: "r", "w", "a", "x" with "+" and "b" or "t"; binary modes give an
        ``io.BufferedReader``, ``BufferedWriter`` or ``BufferedRandom`` (a :class:`RawFile` with
        ``buffering=0``), text modes an ``io.TextIOWrapper`` with ``encoding``, ``errors`` and
        ``newline``. A new file gets the permissions ``perm``."""
        f = self._run(self._loop.client.open, path, api_mode(mode), perm)
        raw = RawFile(self._loop.call, f, mode)
        try:
            return open_file(raw, mode, buffering, encoding, errors, newline)
        except BaseException:
            raw.close()
            raise

    def read_file(self, path: str) -> bytes:
        return self._run(self._loop.client.read_file, path)

    def read_bytes(self, path: str, offset: int = 0, count: int | None = None) -> bytes:
        """``count`` bytes of ``path`` from ``offset`` (None: to the end) without opening it: one
        COMPOUND when they fit in one READ."""
        return self._run(self._loop.client.read_bytes, path, offset, count)

    def write_file(self, path: str, data: Any, perm: int = 0o644, *, exclusive: bool = False) -> None:
        """Write ``data`` as the whole file, stable when this returns (one COMPOUND up to wsize bytes);
        ``exclusive``: FileExistsError (EEXIST) if the name is taken."""
        self._run(self._loop.client.write_file, path, data, perm, exclusive=exclusive)

    def read_ranges(self, ranges: Sequence[tuple[str, int, int | None]], gap: int = MERGE_GAP
                    ) -> list[bytes | Exception]:
        """The bytes of each (path, offset, count), all at once (a file's ranges at most ``gap`` bytes
        apart read by one READ up to rsize; two READs of a file to a COMPOUND, one with ``batchreads=0``
        in the URL, as many as fit with ``batchreads=1``): an error in the place of a range that
        could not be read."""
        return self._run(self._loop.client.read_ranges, ranges, gap)

    def write_files(self, files: Sequence[tuple[str, Any]], perm: int = 0o644, *,
                    exclusive: bool = False) -> list[Exception | None]:
        """:meth:`write_file` of each (path, data), all at once: None or the error, for each."""
        return self._run(self._loop.client.write_files, files, perm, exclusive=exclusive)

    def remove_many(self, paths: Sequence[str]) -> list[Exception | None]:
        """Remove each path (a file, a link, an empty directory), all at once, several REMOVEs of a
        directory to a COMPOUND: None or the error, for each."""
        return self._run(self._loop.client.remove_many, paths)

    def scandir_many(self, paths: Sequence[str]) -> list[list[DirEntry] | Exception]:
        """:meth:`scandir` of each path, all at once (the first READDIRs of several directories in one
        COMPOUND): the entries, or the error, for each."""
        return self._run(self._loop.client.scandir_many, paths)

    def copy_file(self, src: str, dst: str, perm: int = 0o644, progress: Progress | None = None) -> int:
        """Copy ``src`` to ``dst`` on this server (the server copies, NFSv4.2 COPY, when it can)."""
        return self._run(self._loop.client.copy_file, src, dst, perm, progress)

    def get(self, remote: str, local: str, progress: Progress | None = None) -> int:
        return self._run(self._loop.client.get, remote, local, progress)

    def put(self, local: str, remote: str, progress: Progress | None = None, perm: int = 0o644) -> int:
        return self._run(self._loop.client.put, local, remote, progress, perm)

    def stats(self) -> dict[str, Any]:
        return self._loop.client.stats()

    # -- the connection ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the files left open, end the session and the client ID."""
        self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@takes_connect_options.function
def connect(options: ConnectOptions) -> SyncClient:
    """Connect to an NFSv4.1/4.2 export, blocking: ``with connect("nfs://host/export") as nfs: ...``.

    The keywords are :meth:`Client.connect`'s, documented and checked by
    :class:`~pynfsrdma._client.connect_options.ConnectOptions`: the URL (``nfs://host[:port]/export?vers=4.2&...``)
    or ``host``/``port``/``export``/``proto``; the AUTH_SYS identity (default: the URL's ``uid=``/``gid=``,
    else the caller's own); ``timeout`` to connect; ``hard``, ``timeo`` (seconds) and ``retrans`` as
    nfs(5); the largest READ and WRITE; the security flavours (``sec``, ``sec_path``), the Kerberos ticket
    cache and the machine's keytab (``ccache``, ``keytab``); RPC-with-TLS (``xprtsec`` none, tls or
    mtls; ``truststore``, ``certificate``, ``private_key``); ``pnfs`` (data by the block layout). An
    option that does not fit is a URLError, raised here, before the loop's thread starts.
    """
    return SyncClient(options)


__all__ = ["RawFile", "SyncClient", "connect", "process_id"]
