"""The open-file engine: the I/O of one open file, for the FUSE mount and the path API alike.

Writes follow a :class:`~.write_plan.WritePlan` (what to send, when to COMMIT, what to send again);
:class:`FileWriter` carries its answers out: WRITEs several in flight, a COMMIT in the background
once a window's worth waits for one (the writer waits for it only when another window has filled
behind it), the open made again when the server lost it (:data:`STATE_LOST`). A failed background
WRITE or COMMIT is reported by the next write, flush or fsync, as a local file system reports
write-back errors. :func:`read_range` splits a read into rsize READs in flight together.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..errors import NFS4Error
from ..lock import Held
from ..proto.nfs4 import const as c
from ..rpc.auth import Credential
from .attributes import FileAttrs, setattr_fattr4
from .nfs4 import NFSv4, OpenFile
from .read_sink import as_bytes, payload_length
from .write_plan import COMMIT_WINDOW, Send, WritePlan

log = logging.getLogger(__name__)

# the server no longer knows the open behind a stateid (it restarted without a grace period to reclaim
# in, or the lease expired): the file is opened again and the I/O sent again with the new stateid
STATE_LOST = frozenset(
    {c.NFS4ERR_STALE_STATEID, c.NFS4ERR_BAD_STATEID, c.NFS4ERR_EXPIRED, c.NFS4ERR_ADMIN_REVOKED}
)
MAX_REOPENS = 3
DEFAULT_IN_FLIGHT = 8
COMMIT_ATTEMPTS = 3  # COMMITs (with the resends between them) before a flush gives up
# reopen(the stateid that failed): make ``of.stateid`` a valid one again (single-flight in the caller)
Reopen = Callable[[Any], Awaitable[None]]


class FileWriter:
    """Writes of one open file ``of`` (see the module's text). ``answered`` is called whenever a
    WRITE of ours is answered or fails (the mount's attribute cache counts them)."""

    def __init__(
        self,
        nfs: NFSv4,
        of: OpenFile,
        cred: Credential,
        nursery: trio.Nursery,
        wsize: int,
        in_flight: int = DEFAULT_IN_FLIGHT,
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
        self._slots = trio.Semaphore(in_flight)
        self._idle = trio.Event()
        self._idle.set()
        self._commit_lock = trio.Lock()  # one COMMIT (and the resends after it) at a time
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
        await self.drain()
        if not self.plan.uncommitted and not self._commit_lock.locked():
            self._raise_error()  # (nothing to COMMIT and none out: no lock to wait for)
            return
        async with Held(self._commit_lock):  # (after a background COMMIT, if one is out)
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
            await self.commit()
        else:
            await self.drain()
        self._raise_error()

    # -- a caller's own COMPOUND for the sole run (the mount's WRITE+SETATTR) -----------------------------
    def take_sole_run(self) -> tuple[int, Any] | None:
        """All the data not yet sent, when it is one run that fits in one WRITE and nothing else is
        in flight or waits for a COMMIT: (offset, data), for the caller to send in a COMPOUND of its
        own. Writes wait until the caller hands it back with :meth:`return_run`."""
        sole = self.plan.take_sole()
        if sole is not None:
            self._given_back = trio.Event()
        return sole

    def return_run(
        self, wrote: bool, rest: tuple[int, Any] | None = None, attrs: tuple[FileAttrs, float] | None = None
    ) -> None:
        """The caller of :meth:`take_sole_run` is done: it did (not) send a WRITE; ``rest`` (offset,
        data), what did not get written, is gathered again; ``attrs`` (attributes, when fetched) came
        after the WRITE. Data the WRITE left UNSTABLE is handed over with :meth:`written_unstable`."""
        if wrote:
            self.writes_sent += 1
            if self.answered is not None:
                self.answered()
        self.plan.give_back(rest)
        self.post_attrs = attrs if not self.plan.gathered_end else None
        given, self._given_back = self._given_back, None
        if given is not None:
            given.set()

    def written_unstable(self, offset: int, data: Any, verf: bytes) -> None:
        """Data a caller wrote UNSTABLE in its own COMPOUND: kept until a COMMIT returns ``verf``."""
        self.plan.answered(offset, data, c.UNSTABLE4, verf)

    # -- carrying the plan out ----------------------------------------------------------------------------
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
            attrs = await self.nfs.setattr(self.of.fh, self.cred, **changes)
        except OSError as e:
            log.warning("SETATTR after the data failed: %s", e)
            if self._error is None:
                self._error = e
            return
        self.post_attrs = (attrs, trio.current_time())

    async def _send(self, send: Send) -> None:
        """One WRITE per wsize of ``send.data``, each in a task of its own; the sole WRITE of a
        COMPOUND with the attributes goes from the caller's task (no task started, no hop back)."""
        if not send.with_attrs:
            self.post_attrs = None
        view = memoryview(send.data)
        wsize = self.plan.wsize
        if send.with_attrs and self.plan.in_flight == 0 and view.nbytes <= wsize:
            self._slots.acquire_nowait()  # (nothing in flight: a slot is free)
            self._started()
            await self._write_one(send.offset, view, send)
            return
        for pos in range(0, view.nbytes, wsize):
            await self._slots.acquire()
            self._started()
            self._nursery.start_soon(self._write_one, send.offset + pos, view[pos : pos + wsize], send)

    def _started(self) -> None:
        if self.plan.in_flight == 0:
            self._idle = trio.Event()
        self.plan.in_flight += 1

    async def _write_one(self, offset: int, data: memoryview, send: Send) -> None:
        try:
            pos = 0
            reopens = 0
            stable = send.stable or self.plan.stable
            while pos < len(data):
                stateid = self.of.stateid
                try:
                    if send.with_attrs:  # the only WRITE in flight: the attributes after it come along
                        accepted = self.plan.accepted
                        setattrs = setattr_fattr4(**send.setattrs) if send.setattrs else None
                        count, committed, verf, attrs = await self.nfs.write_getattr(
                            self.of, offset + pos, data[pos:], self.cred, stable, setattrs,
                            lock_owner=self.lock_owner, path=self.path,
                        )
                        if accepted == self.plan.accepted:  # (nothing written meanwhile)
                            self.post_attrs = (attrs, trio.current_time())
                    else:
                        count, committed, verf = await self.nfs.write(
                            self.of, offset + pos, data[pos:], self.cred, stable, lock_owner=self.lock_owner,
                            path=self.path,
                        )
                except NFS4Error as e:
                    if e.status not in STATE_LOST or self.reopen is None or reopens >= MAX_REOPENS:
                        raise
                    reopens += 1
                    await self.reopen(stateid)
                    continue
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
            self.plan.in_flight -= 1
            self._slots.release()
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
            async with Held(self._commit_lock):
                await self._commit_once()
        except OSError as e:  # the pieces are kept: the next flush or fsync commits (and reports)
            log.info("background COMMIT failed: %s", e)
        finally:
            self._background = None
            done.set()

    async def _commit_once(self) -> bool:
        """COMMIT what the server acknowledged UNSTABLE so far; send again what a changed verifier
        lost (UNSTABLE again: the caller commits again) and return True if it did. Under
        ``_commit_lock``."""
        pending = self.plan.commit_begins()
        if not pending:
            return False
        try:
            verf = await self.nfs.commit(self.of.fh, self.cred, path=self.path)
        except OSError:
            self.plan.commit_failed()
            raise
        resends = self.plan.commit_answered(verf)
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
    in_flight: int = DEFAULT_IN_FLIGHT,
) -> tuple[list[Any], bool]:
    """``size`` bytes at ``offset`` by ``read(offset, count)`` (one READ: data, eof), rsize READs
    kept ``in_flight`` at a time (the next one starts as soon as any is answered, so a slow path of
    a trunked session holds back no other): the replies' views in order (no copy), and whether the
    end of the file came. A short READ not at the end (a server's limit) is asked on from where it
    stopped; no READ starts past one that came back at the end or short."""
    views, eof = await _read_range(read, offset, size, maxread, in_flight)
    if len(views) > 1:  # (to be joined: a READ whose data was spliced into a pipe reads it back)
        views = [as_bytes(v) for v in views]
    return views, eof


async def _read_range(
    read: Callable[[int, int], Awaitable[tuple[Any, bool]]],
    offset: int,
    size: int,
    maxread: int,
    in_flight: int,
) -> tuple[list[Any], bool]:
    views: list[Any] = []
    pos, end = offset, offset + size
    while pos < end:
        spans = [(o, min(maxread, end - o)) for o in range(pos, end, maxread)]
        results: list[Any] = [None] * len(spans)
        if len(spans) == 1:
            results[0] = await read(*spans[0])
        else:
            try:
                await _read_spans(read, spans, results, in_flight)
            except BaseExceptionGroup as eg:  # (the first READ's error, as one READ would raise it)
                raise _first_error(eg) from None
        for (_, n), result in zip(spans, results, strict=True):
            if result is None:
                break  # (not started: an earlier READ ended short, and the rest is asked again)
            data, eof = result
            got = payload_length(data)
            if got:
                views.append(data)
            pos += got
            if eof or not got:
                return views, True
            if got < n:
                break  # a short READ: the rest is asked again from where it stopped
    return views, False


async def _read_spans(
    read: Callable[[int, int], Awaitable[tuple[Any, bool]]],
    spans: list[tuple[int, int]],
    results: list[Any],
    in_flight: int,
) -> None:
    """READ each of ``spans`` into ``results``, ``in_flight`` at a time; none is started past one
    that came back at the end of the file or short."""
    window = trio.Semaphore(in_flight)
    stop = len(spans)

    async def one(i: int, o: int, n: int) -> None:
        nonlocal stop
        try:
            data, eof = results[i] = await read(o, n)
            if eof or payload_length(data) < n:
                stop = min(stop, i + 1)
        finally:
            window.release()

    async with trio.open_nursery() as nursery:
        for i, (o, n) in enumerate(spans):
            await window.acquire()
            if i >= stop:
                window.release()
                break
            nursery.start_soon(one, i, o, n)


def _first_error(eg: BaseExceptionGroup) -> BaseException:
    e: BaseException = eg
    while isinstance(e, BaseExceptionGroup):
        e = e.exceptions[0]
    return e
