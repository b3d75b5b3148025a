"""The open-file engine: the I/O of one open file, for the FUSE mount and the path API alike.

Writes follow a :class:`~.write_plan.WritePlan` (what to send, when to COMMIT, what to send again);
:class:`FileWriter` carries its answers out: WRITEs several in flight (as many as fill every live
path of the session: :meth:`NFSv4.io_window <.nfs4.NFSv4.io_window>`), a COMMIT in the background
once a window's worth waits for one (the writer waits for it only when another window has filled
behind it), the open made again when the server lost it (:func:`with_reopens`, as
:mod:`.lost_state` decides). A failed background
WRITE or COMMIT is reported by the next write, flush or fsync, as a local file system reports
write-back errors. :func:`read_range` splits a read into rsize READs kept in flight as a pipeline,
and :func:`read_stream` streams a file by one.
"""

from __future__ import annotations

import collections
import errno
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from .._errors import NFS4Error
from .._lock import Held
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential
from .attributes import FileAttrs, setattr_fattr4
from .lost_state import Then, on_stateid_error
from .nfs4 import NFSv4, OpenFile
from .read_sink import as_bytes, payload_length
from .write_plan import COMMIT_WINDOW, Send, WritePlan

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_WINDOW = 8
# calls to keep in flight: a number, or asked again as each call goes out (NFSv4.io_window)
Window = int | Callable[[], int]
COMMIT_ATTEMPTS = 3  # COMMITs (with the resends between them) before a flush gives up
# reopen(the stateid that failed): make ``of.stateid`` a valid one again (single-flight in the caller)
Reopen = Callable[[Any], Awaitable[None]]


async def with_reopens(of: OpenFile, reopen: Reopen | None, call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, a request with ``of``'s stateid; when the server no longer knows the open, it is
    made again by ``reopen`` and the request sent again (as :func:`.lost_state.on_stateid_error`
    decides)."""
    reopens = 0
    while True:
        stateid = of.stateid
        try:
            return await call()
        except NFS4Error as e:
            then = on_stateid_error(e.status, replaced=False, reopens=reopens, can_reopen=reopen is not None)
            if then is not Then.REOPEN or reopen is None:
                raise
            reopens += 1
            await reopen(stateid)


class FileWriter:
    """Writes of one open file ``of`` (see the module's text). ``answered`` is called whenever a
    WRITE of ours is answered or fails (the mount's attribute cache counts them). ``window``:
    WRITEs in flight at most; None, as many as fill the session's live paths (asked as each goes)."""

    def __init__(
        self,
        nfs: NFSv4,
        of: OpenFile,
        cred: Credential,
        nursery: trio.Nursery,
        wsize: int,
        window: int | None = None,
        stable: int = c.UNSTABLE4,
        commit_window: int = COMMIT_WINDOW,
        reopen: Reopen | None = None,
        answered: Callable[[], None] | None = None,
        lock_owner: Any = None,
        path: str | None = None,
    ) -> None:
        self.nfs = nfs
        self.path = path  # (what errors name)
        self.of = of
        self.cred = cred
        self._nursery = nursery
        self.plan = WritePlan(wsize, stable, commit_window)
        self.reopen = reopen
        self.answered = answered
        self.lock_owner = lock_owner
        self._window = window
        self._room = trio.lowlevel.ParkingLot()  # writes waiting for a WRITE in flight to be answered
        self._idle = trio.Event()
        self._idle.set()
        # one COMMIT (and the resends after it) at a time; made for the first (a small file has none)
        self._commit_lock: trio.Lock | None = None
        self._background: trio.Event | None = None  # set when the background COMMIT is over
        self._error: OSError | None = None
        self._given_back: trio.Event | None = None  # set when a caller hands the sole run back
        self.writes_sent = 0
        self.resends = 0
        # (attributes, when fetched) from a COMPOUND that had every WRITE of ours before it; None
        # once anything is written after it
        self.post_attrs: tuple[FileAttrs, float] | None = None

    # -- what the plan says ---------------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        return self.plan.dirty

    @property
    def unsent(self) -> bool:
        return self.plan.unsent

    @property
    def gathered_end(self) -> int:
        return self.plan.gathered_end

    @property
    def setattrs(self) -> dict[str, Any]:
        return self.plan.setattrs

    @property
    def bytes_accepted(self) -> int:
        return self.plan.bytes_accepted

    def defer_setattr(self, changes: dict[str, Any]) -> bool:
        """Keep attribute changes to send after the gathered data (see WritePlan.defer)."""
        return self._error is None and self.plan.defer(changes)

    # -- writing ----------------------------------------------------------------------------------------
    async def write(self, offset: int, data: Any) -> None:
        """Hand ``data`` over (kept by reference until stable on the server)."""
        await self._wait_given_back()
        if self.plan.setattrs:  # (times set before this write must not be undone by it)
            await self._send_setattrs()
        self._raise_error()
        self.post_attrs = None
        for send in self.plan.write(offset, data):
            await self._send(send)
        if self.plan.commit_due:
            await self._commit_in_background()

    async def drain(self) -> None:
        """Send what is gathered (and the attribute changes kept after it) and wait for every WRITE
        in flight."""
        await self._wait_given_back()
        await self._send_setattrs()
        run = self.plan.take_any_run()
        if run is not None:
            await self._send(run)
        await self._wait_idle()

    async def written(self) -> None:
        """:meth:`drain`, then the error of a WRITE that failed, if one did."""
        await self.drain()
        self._raise_error()

    async def commit(self) -> None:
        """Everything written so far onto stable storage; what a changed verifier lost is sent again."""
        await self._wait_given_back()
        await self._send_setattrs()  # (one COMPOUND with the data when it is a sole run: no COMMIT)
        final = self.plan.final_send()
        if final is not None:
            await self._send(final)
        if self.plan.unsent:  # (a write came in meanwhile, or a WRITE is still out)
            await self.drain()
        if not self.plan.uncommitted and (self._commit_lock is None or not self._commit_lock.locked()):
            if self._error is not None:
                self._raise_error()  # (nothing to COMMIT and none out: no lock to wait for)
            return
        async with Held(self._commit_held()):  # (after a background COMMIT, if one is out)
            lost = 0  # COMMITs whose verifier said the server lost what it was sent
            for _ in range(COMMIT_ATTEMPTS):
                if not self.plan.uncommitted:
                    break
                lost += await self._commit_once()
                await self._wait_idle()
        self._raise_error()
        # (data still uncommitted otherwise is what other writers of the file sent meanwhile)
        if lost == COMMIT_ATTEMPTS:
            raise OSError(errno.EIO, "the server's write verifier kept changing: it keeps losing what it was sent",
                          self.path)

    async def flush(self) -> None:
        """close(2) and fsync(2): the data on stable storage (or sent FILE_SYNC), errors reported."""
        if self.plan.stable == c.UNSTABLE4:
            if not self.plan.dirty and not self.plan.setattrs and self._error is None \
                    and (self._commit_lock is None or not self._commit_lock.locked()):
                return  # (the release after a close's flush: all there is is on stable storage)
            await self.commit()  # (which reports a WRITE's error itself)
        else:
            await self.drain()
            self._raise_error()

    # -- the sole run with attribute changes, in one COMPOUND (``tar``'s write then utimensat) ----------
    async def write_with_setattr(self, changes: dict[str, Any]) -> FileAttrs | None:
        """All the data not yet sent, when it is one run that fits in one WRITE and nothing else is in
        flight or waits for a COMMIT, goes FILE_SYNC in one COMPOUND with the attribute changes
        (``setattr_fattr4`` keywords): PUTFH, WRITE, SETATTR, GETATTR. The attributes after it; None
        when there is no such run, or the WRITE did not go in full (what is left is gathered again
        and goes the usual way, then the changes must be sent again). Writes wait meanwhile. A failed
        SETATTR raises; a failed WRITE leaves the data gathered (the usual way sends it again and
        reports its error as it does)."""
        sole = self.plan.take_sole()
        if sole is None:
            return None
        self._given_back = trio.Event()
        off, data = sole
        wrote = False
        rest: tuple[int, Any] | None = sole
        post: tuple[FileAttrs, float] | None = None
        try:
            count, committed, verf, attrs = await self.nfs.read_write.write_getattr(
                self.of, off, data, self.cred, c.FILE_SYNC4, setattr_fattr4(**changes),
                lock_owner=self.lock_owner, path=self.path,
            )
            wrote = True
            if committed == c.UNSTABLE4:  # (kept until a COMMIT returns ``verf``)
                self.plan.answered(off, memoryview(data)[:count], c.UNSTABLE4, verf)
            rest = (off + count, data[count:]) if count < len(data) else None
            post = (attrs, trio.current_time())
        except NFS4Error as e:
            if e.op == c.OP_SETATTR:  # (the WRITE went: written again with the rest, the same bytes)
                raise
            return None
        finally:
            if wrote:
                self.writes_sent += 1
                if self.answered is not None:
                    self.answered()
            self.plan.give_back(rest)
            self.post_attrs = post if not self.plan.gathered_end else None
            given, self._given_back = self._given_back, None
            if given is not None:
                given.set()
        return attrs if rest is None else None

    # -- carrying the plan out ----------------------------------------------------------------------------
    def window(self) -> int:
        """WRITEs to keep in flight now."""
        return self._window if self._window is not None else self.nfs.io_window(self.plan.wsize)

    async def _wait_given_back(self) -> None:
        while self._given_back is not None:
            await self._given_back.wait()

    async def _wait_idle(self) -> None:
        """Until no WRITE is in flight (at once, without a trip through the scheduler, when none is)."""
        if self.plan.in_flight:
            await self._idle.wait()

    def _raise_error(self) -> None:
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    async def _send_setattrs(self) -> None:
        """Send the gathered data with the deferred attribute changes after it, and wait for it."""
        changes, together = self.plan.take_setattrs()
        if not changes:
            return
        if together is not None:
            await self._send(together)
            await self._wait_idle()
            return
        run = self.plan.take_any_run()  # (a write came in between: data first, then the changes)
        if run is not None:
            await self._send(run)
        await self._wait_idle()
        try:
            attrs = await self.nfs.names.setattr(self.of.fh, self.cred, **changes)
        except OSError as e:
            log.warning("SETATTR after the data failed: %s", e)
            if self._error is None:
                self._error = e
            return
        self.post_attrs = (attrs, trio.current_time())

    async def _send(self, send: Send) -> None:
        """One WRITE per wsize of ``send.data``, each in a task of its own (the first started
        without a turn of the scheduler when there is room for it); the sole WRITE of a COMPOUND
        with the attributes goes from the caller's task (no task started, no hop back)."""
        if not send.with_attrs:
            self.post_attrs = None
        view = memoryview(send.data)
        wsize = self.plan.wsize
        if send.with_attrs and self.plan.in_flight == 0 and view.nbytes <= wsize:
            self._started()  # (nothing in flight: there is room)
            await self._write_one(send.offset, view, send)
            return
        for pos in range(0, view.nbytes, wsize):
            if pos:  # (the first goes at once where there is room: a FUSE WRITE answered with no switch)
                await trio.lowlevel.checkpoint()  # (each further WRITE a turn of the scheduler, room or not)
            while self.plan.in_flight >= self.window():
                await self._room.park()
            self._started()
            self._nursery.start_soon(self._write_one, send.offset + pos, view[pos : pos + wsize], send)

    def _started(self) -> None:
        if self.plan.in_flight == 0:
            self._idle = trio.Event()
        self.plan.write_started()

    async def _write_one(self, offset: int, data: memoryview, send: Send) -> None:
        try:
            pos = 0
            stable = send.stable or self.plan.stable

            async def one_write() -> tuple[int, int, bytes]:
                if send.with_attrs:  # the only WRITE in flight: the attributes after it come along
                    accepted = self.plan.accepted
                    setattrs = setattr_fattr4(**send.setattrs) if send.setattrs else None
                    count, committed, verf, attrs = await self.nfs.read_write.write_getattr(
                        self.of, offset + pos, data[pos:], self.cred, stable, setattrs,
                        lock_owner=self.lock_owner, path=self.path,
                    )
                    if accepted == self.plan.accepted:  # (nothing written meanwhile)
                        self.post_attrs = (attrs, trio.current_time())
                    return count, committed, verf
                return await self.nfs.read_write.write(
                    self.of, offset + pos, data[pos:], self.cred, stable, lock_owner=self.lock_owner,
                    path=self.path,
                )

            while pos < len(data):
                count, committed, verf = await with_reopens(self.of, self.reopen, one_write)
                self.writes_sent += 1
                if count <= 0:
                    raise OSError(errno.EIO, "the server wrote nothing", self.path)
                self.plan.answered(offset + pos, data[pos : pos + count], committed, verf)
                pos += count
        except OSError as e:
            log.warning("WRITE at %d failed: %s", offset, e)
            if self._error is None:
                self._error = e
        finally:
            self.plan.write_ended()
            self._room.unpark()
            if self.answered is not None:
                self.answered()
            if self.plan.in_flight == 0:
                self._idle.set()

    async def _commit_in_background(self) -> None:
        """A window's worth waits for a COMMIT: send one without waiting for it; wait only when the
        previous one is still out (so that at most about two windows are kept for resends)."""
        if self._background is not None:
            await self._background.wait()
            if not self.plan.commit_due:
                return
        self._background = trio.Event()
        self._nursery.start_soon(self._background_commit, self._background)

    async def _background_commit(self, done: trio.Event) -> None:
        try:
            async with Held(self._commit_held()):
                await self._commit_once()
        except OSError as e:  # the pieces are kept: the next flush or fsync commits (and reports)
            log.info("background COMMIT failed: %s", e)
        finally:
            self._background = None
            done.set()

    def _commit_held(self) -> trio.Lock:
        if self._commit_lock is None:
            self._commit_lock = trio.Lock()
        return self._commit_lock

    async def _commit_once(self) -> bool:
        """COMMIT what the server acknowledged UNSTABLE so far; send again what a changed verifier
        lost (UNSTABLE again: the caller commits again) and return True if it did. Under
        ``_commit_lock``."""
        pending = self.plan.commit_begins()
        if not pending:
            return False
        try:
            verf, *by_layout = await self.nfs.read_write.commit_verifiers(self.of.fh, self.cred, path=self.path)
        except OSError:
            self.plan.commit_failed()
            raise
        resends = self.plan.commit_answered(verf, *by_layout)
        if resends:
            log.info(
                "COMMIT verifier %s differs from WRITE verifier(s) %s: resending",
                verf.hex(),
                sorted({p.verifier.hex() for p in pending}),
            )
        for send in resends:  # the server restarted between WRITE and COMMIT: send them again
            self.resends += 1
            await self._send(send)
        return bool(resends)


async def read_range(
    read: Callable[[int, int], Awaitable[tuple[Any, bool]]],
    offset: int,
    size: int,
    maxread: int,
    window: Window = DEFAULT_WINDOW,
) -> tuple[list[Any], bool]:
    """``size`` bytes at ``offset`` by ``read(offset, count)`` (one READ: data, eof), rsize READs
    kept ``window`` at a time (a number, or a function asked as each READ goes out; the next one
    starts as soon as any is answered, so a slow path of a trunked session holds back no other):
    the replies' views in order (no copy), and whether the end of the file came. A short READ not
    at the end (a server's limit) is asked on from where it stopped; no READ starts past one that
    came back at the end or short. Each READ's span is made as it goes out: ``size`` may be a
    server's number (a file's size, to read to its end), and nothing is sized by it."""
    views, eof = await _read_range(read, offset, size, maxread, window)
    if len(views) > 1:  # (to be joined: a READ whose data was spliced into a pipe reads it back)
        views = [as_bytes(v) for v in views]
    return views, eof


async def _read_range(
    read: Callable[[int, int], Awaitable[tuple[Any, bool]]],
    offset: int,
    size: int,
    maxread: int,
    window: Window,
) -> tuple[list[Any], bool]:
    window_now = _as_function(window)
    maxread = max(1, maxread)
    views: list[Any] = []
    pos, end = offset, offset + size
    while pos < end:
        if end - pos <= maxread:
            spans = [_Span(pos, end - pos)]
            spans[0].result = await read(pos, end - pos)
        else:
            try:
                spans = await _read_spans(read, pos, end, maxread, window_now)
            except BaseExceptionGroup as eg:  # (the first READ's error, as one READ would raise it)
                raise _first_error(eg) from None
        for span in spans:
            assert span.result is not None
            data, eof = span.result
            got = payload_length(data)
            if got:
                views.append(data)
            pos += got
            if eof or not got:
                return views, True
            if got < span.count:
                break  # a short READ: the rest is asked again from where it stopped
    return views, False


def _as_function(window: Window) -> Callable[[], int]:
    if callable(window):
        return window
    return lambda: window


class _Span:
    """One READ of :func:`_read_spans`: ``count`` bytes at ``offset``, and its reply once answered."""

    __slots__ = ("count", "offset", "result")

    def __init__(self, offset: int, count: int) -> None:
        self.offset = offset
        self.count = count
        self.result: tuple[Any, bool] | None = None


async def _read_spans(
    read: Callable[[int, int], Awaitable[tuple[Any, bool]]],
    pos: int,
    end: int,
    maxread: int,
    window: Callable[[], int],
) -> list[_Span]:
    """READ ``[pos, end)`` by ``maxread`` spans, ``window()`` at a time, each span made as its READ
    goes out: none is made past one that came back at the end of the file or short, so that what
    is held is what came back and a window more, whatever ``end`` says (a size from a reply). The
    spans sent, in order, with their replies."""
    room = trio.lowlevel.ParkingLot()
    running = 0
    stopped = False
    spans: list[_Span] = []

    async def one(span: _Span) -> None:
        nonlocal stopped, running
        try:
            data, eof = span.result = await read(span.offset, span.count)
            if eof or payload_length(data) < span.count:
                stopped = True
        finally:
            running -= 1
            room.unpark()

    async with trio.open_nursery() as nursery:
        while pos < end:
            while running >= max(1, window()):
                await room.park()
            if stopped:
                break
            span = _Span(pos, min(maxread, end - pos))
            spans.append(span)
            running += 1
            nursery.start_soon(one, span)
            pos += span.count
    return spans


class _Read:
    """One READ of a :class:`ReadStream`: ``[offset, offset + count)``, its reply once ``done``."""

    __slots__ = ("count", "done", "error", "offset", "result", "scope")

    def __init__(self, offset: int, count: int) -> None:
        self.offset = offset
        self.count = count
        self.done = trio.Event()
        self.scope = trio.CancelScope()
        self.result: tuple[Any, bool] | None = None
        self.error: Exception | None = None


class ReadStream:
    """A file read from ``offset`` on as a pipeline of rsize READs: the next READ starts as soon
    as any is answered, up to ``window()`` READs sent and not yet taken (a function, asked as each
    goes out), and :meth:`next` hands the replies' views over in the file's order, no copy made.

    READs go no further than ``size()`` (the file's size as known; it may grow meanwhile): the last
    one to reach it says whether the end came (a server says so with the data), and only when it
    did not does one more READ go past it, one at a time. A short READ not at the end (a server's limit) is asked
    on from where it stopped, ahead of those already sent after it; a READ at the end drops those
    after it. The READs run in ``nursery`` (a caller's background nursery: the stream outlives no
    call of :meth:`next`, but its READs are in flight between them); :meth:`close` ends them."""

    def __init__(
        self,
        read: Callable[[int, int], Awaitable[tuple[Any, bool]]],
        offset: int,
        maxread: int,
        window: Window,
        size: Callable[[], int],
        nursery: trio.Nursery,
    ) -> None:
        self._read = read
        self._next = offset  # where the next READ starts
        self._maxread = max(1, maxread)
        self._window = _as_function(window)
        self._size = size
        self._nursery = nursery
        self._pending: collections.deque[_Read] = collections.deque()  # in the file's order
        self._ended = False

    def _start(self, r: _Read) -> None:
        self._nursery.start_soon(self._run, r)

    async def _run(self, r: _Read) -> None:
        with r.scope:
            try:
                r.result = await self._read(r.offset, r.count)
            except Exception as e:  # (handed to the reader in the file's order)
                r.error = e
        r.done.set()

    def _fill(self) -> None:
        window = max(1, self._window())
        pending = self._pending
        while not self._ended and len(pending) < window:
            size = self._size()
            if pending and self._next >= size:
                break  # past the known end, only once every READ before it is taken: one at a time
            count = self._maxread - self._next % self._maxread  # (to an rsize boundary)
            if self._next < size:
                count = min(count, size - self._next)
            r = _Read(self._next, count)
            pending.append(r)
            self._next += count
            self._start(r)

    async def next(self) -> Any | None:
        """The next reply's data (a view of the reply buffer), or None at the end of the file."""
        pending = self._pending
        while True:
            self._fill()
            if not pending:
                return None
            r = pending[0]
            await r.done.wait()
            pending.popleft()
            if r.error is not None:
                self.close()
                raise r.error
            assert r.result is not None
            data, eof = r.result
            got = memoryview(data).nbytes
            if eof or not got:
                self.close()  # (what was asked after it is past the end)
            elif got < r.count:  # a short READ: the rest of it first, ahead of those after it
                rest = _Read(r.offset + got, r.count - got)
                pending.appendleft(rest)
                self._start(rest)
            if got:
                return data
            if self._ended:
                return None

    def close(self) -> None:
        """No more READs; those in flight are cancelled and their replies dropped."""
        self._ended = True
        while self._pending:
            self._pending.pop().scope.cancel()


def _first_error(eg: BaseExceptionGroup) -> BaseException:
    e: BaseException = eg
    while isinstance(e, BaseExceptionGroup):
        e = e.exceptions[0]
    return e
