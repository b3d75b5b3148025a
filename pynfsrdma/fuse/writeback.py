"""Write gathering for one open: sequential writes become wsize UNSTABLE WRITEs, several in flight.

Data handed in by FUSE is ``bytes`` (immutable), so it is kept by reference: a gathered run of
pieces is sent as is when it is one piece, joined into one buffer when it is several (small writes).
Every unstable piece is kept until a COMMIT returns the verifier its WRITE returned; when the
verifier differs (the server restarted and may have lost it), the piece is sent again. Once
``commit_window`` bytes wait for a COMMIT, one is sent in the background while writes go on (the
server flushes that much to its disk meanwhile, instead of all of it at fsync or close), and the
writer waits for it only when another window has filled behind it: what is kept stays under about
two windows.
A failed background WRITE is reported by the next write, flush or fsync, as a local filesystem
reports write-back errors.

Small files take fewer round trips: when all the data is one run that fits in one WRITE, a commit
sends it FILE_SYNC with a GETATTR in the same COMPOUND (and no COMMIT), and a caller may take the run
(:meth:`WriteBack.take_sole_run`) to send it in its own COMPOUND (the mount's SETATTR does, for
``tar``'s write-then-utimensat). ``post_attrs`` keeps the attributes such a COMPOUND returned, as long
as nothing was written after them: closing the file needs no GETATTR then.

Attribute changes may wait with the data (:meth:`WriteBack.defer_setattr`): ``tar`` sets the times and
the mode of every file after writing it and before closing it; the mount keeps those changes (when
the caller owns the file, so the server cannot refuse them) and they go after the data, in the WRITE's
own COMPOUND, whenever the data is sent: at close, fsync, a GETATTR, or before the next write. A
refused SETATTR is reported there, as a failed WRITE is.
"""

from __future__ import annotations

import ctypes
import errno
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..client.attributes import FileAttrs, setattr_fattr4
from ..client.nfs4 import NFSv4, OpenFile
from ..errors import NFS4Error
from ..lock import Held
from ..proto.nfs4 import const as c
from ..proto.nfs4.types import fattr4
from ..rpc.auth import Credential

log = logging.getLogger(__name__)

# the server no longer knows the open behind a stateid (it restarted without a grace period to reclaim
# in, or the lease expired): the file is opened again and the I/O resent with the new stateid
STATE_LOST = frozenset(
    {c.NFS4ERR_STALE_STATEID, c.NFS4ERR_BAD_STATEID, c.NFS4ERR_EXPIRED, c.NFS4ERR_ADMIN_REVOKED}
)
MAX_REOPENS = 3
# reopen(the stateid that failed): make ``of.stateid`` a valid one again (single-flight in the caller)
Reopen = Callable[[Any], Awaitable[None]]

DEFAULT_IN_FLIGHT = 8
# COMMIT at least this often, so that the data kept for resends stays bounded and the server writes
# it to disk while more comes (a sequential write measured ~10% faster with 32 MiB than with 64 MiB)
COMMIT_WINDOW = 32 << 20

# glibc's mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # a write's payload (1 MiB at most) comes from the heap
TRIM_THRESHOLD = 4 * COMMIT_WINDOW  # free heap kept for the next payloads (what is kept is ~2 windows)


def _libc_function(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # not glibc: its defaults stay
        return None


def keep_payload_memory() -> bool:
    """Let freed write payloads be used again instead of going back to the kernel (for the mount
    daemon, once at start). pyfuse3 hands each write over as a new ``bytes`` (copied from its request
    buffer) that is kept until a COMMIT covers it; with glibc's defaults those megabytes were
    returned to the kernel as they were freed (brk, munmap) and every new one took its pages again
    by page faults, zeroed and charged: under the copy, the faults cost about four times the copy,
    a fifth of both cores in a 1 MiB sequential write. True if the settings took."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def return_payload_memory() -> None:
    """Give the free heap back to the kernel (after a large file is closed: what
    :func:`keep_payload_memory` keeps is for a write in progress)."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is not None:
        malloc_trim(0)


class WriteBack:
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
    ) -> None:
        self.nfs = nfs
        self.of = of
        self.cred = cred
        self._nursery = nursery
        self.wsize = wsize
        self.stable = stable
        self.commit_window = commit_window
        self.reopen = reopen
        self.answered = answered  # called when a WRITE of ours is answered (or fails)
        self._slots = trio.Semaphore(in_flight)
        self._run: list[bytes] = []
        self._run_off = 0
        self._run_len = 0
        self._busy = 0
        self._idle = trio.Event()
        self._idle.set()
        self._uncommitted: list[tuple[int, Any, bytes]] = []  # (offset, data, write verifier)
        self._uncommitted_bytes = 0
        self._commit_lock = trio.Lock()  # one COMMIT (and the resends after it) at a time
        self._committing: list[tuple[int, Any, bytes]] = []  # pieces whose COMMIT is in flight
        self._background: trio.Event | None = None  # set when the background COMMIT is over
        self._error: OSError | None = None
        self._held: trio.Event | None = None  # set while a caller has the run (take_sole_run)
        self.writes_sent = 0
        self.resends = 0
        # (attributes, when fetched) from a COMPOUND that had every WRITE of ours before it; None
        # once anything is written after it
        self.post_attrs: tuple[FileAttrs, float] | None = None
        self._accepted = 0  # write() calls so far (attributes are only as new as the last of them)
        # attribute changes (setattr_fattr4 keywords) made after the gathered data: sent after it
        self.setattrs: dict[str, Any] = {}
        self.bytes_accepted = 0  # bytes handed to write() so far

    @property
    def dirty(self) -> bool:
        """Data not yet on the server's stable storage (unsent, in flight or uncommitted)."""
        return bool(self._run or self._busy or self._uncommitted or self._committing or self._held)

    @property
    def unsent(self) -> bool:
        return bool(self._run or self._busy or self._held or self.setattrs)

    @property
    def gathered_end(self) -> int:
        """The end of the gathered data (0 when there is none)."""
        return self._run_off + self._run_len if self._run else 0

    def _sole_run(self) -> bool:
        """All the data not yet sent is one run that fits in one WRITE, and nothing else is in
        flight or waits for a COMMIT."""
        return bool(
            self._held is None
            and self._run
            and not self._busy
            and not self._uncommitted
            and not self._committing
            and self._run_len <= self.wsize
        )

    def defer_setattr(self, changes: dict[str, Any]) -> bool:
        """Keep attribute changes (``setattr_fattr4`` keywords; not the size, owner or group) to send
        after the gathered data, in its COMPOUND. Only while the data is a sole run (see
        :meth:`take_sole_run`); False (nothing kept) otherwise."""
        if not self._sole_run() or self._error is not None:
            return False
        self.setattrs.update(changes)
        return True

    async def _send_setattrs(self) -> None:
        """Send the gathered data with the deferred attribute changes after it, and wait for it."""
        changes, self.setattrs = self.setattrs, {}
        if not changes:
            return
        fattr = setattr_fattr4(**changes)
        if self._sole_run():
            await self._send_run(c.FILE_SYNC4, with_attrs=True, setattrs=fattr)
            await self._wait_idle()
            return
        await self._send_run()  # (a write came in between: data first, then the changes)
        await self._wait_idle()
        try:
            attrs = await self.nfs.setattr(self.of.fh, self.cred, **changes)
        except OSError as e:
            log.warning("SETATTR after the data failed: %s", e)
            if self._error is None:
                self._error = e
            return
        self.post_attrs = (attrs, trio.current_time())

    async def _wait_idle(self) -> None:
        """Wait until no WRITE is in flight (at once, without a trip through the scheduler, when none is)."""
        if self._busy:
            await self._idle.wait()

    async def _wait_held(self) -> None:
        while self._held is not None:
            await self._held.wait()

    def take_sole_run(self) -> tuple[int, bytes] | None:
        """All the data not yet sent, when it is one run that fits in one WRITE and nothing else is
        in flight or waits for a COMMIT: (offset, data), for the caller to send in a COMPOUND of its
        own. Writes wait until the caller hands it back with :meth:`return_run`."""
        if self.setattrs or not self._sole_run():
            return None
        pieces, off = self._run, self._run_off
        self._run, self._run_len = [], 0
        self._held = trio.Event()
        return off, pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def return_run(
        self,
        wrote: bool,
        rest: tuple[int, bytes] | None = None,
        attrs: tuple[FileAttrs, float] | None = None,
    ) -> None:
        """The caller of :meth:`take_sole_run` is done: it did (not) send a WRITE; ``rest`` (offset,
        data), what did not get written (a WRITE that failed or came back short), is gathered again;
        ``attrs`` (attributes, when fetched) came after the WRITE. Data the WRITE left UNSTABLE is
        handed over with :meth:`written_unstable` first."""
        if wrote:
            self.writes_sent += 1
            if self.answered is not None:
                self.answered()
        if rest is not None and rest[1]:
            off, data = rest
            self._run, self._run_off, self._run_len = [data], off, len(data)
        self.post_attrs = attrs if not self._run else None
        held, self._held = self._held, None
        if held is not None:
            held.set()

    def written_unstable(self, offset: int, data: Any, verf: bytes) -> None:
        """Data a caller wrote UNSTABLE in its own COMPOUND: kept until a COMMIT returns ``verf``."""
        self._uncommitted.append((offset, data, verf))
        self._uncommitted_bytes += len(data)

    def _raise_error(self) -> None:
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    async def write(self, offset: int, data: bytes) -> None:
        if self._held is not None:
            await self._wait_held()
        if self.setattrs:  # (times set before this write must not be undone by it)
            await self._send_setattrs()
        self._raise_error()
        self.post_attrs = None
        self._accepted += 1
        n = len(data)
        self.bytes_accepted += n
        if self._run and (offset != self._run_off + self._run_len or self._run_len + n > self.wsize):
            await self._send_run()
        if n >= self.wsize:  # a large write goes out as it is (by reference, no copy)
            await self._send(offset, data)
        else:
            if not self._run:
                self._run_off = offset
            self._run.append(data)
            self._run_len += n
            if self._run_len >= self.wsize:
                await self._send_run()
        if self._uncommitted_bytes >= self.commit_window:
            await self._commit_in_background()

    async def _commit_in_background(self) -> None:
        """A window's worth waits for a COMMIT: send one without waiting for it; wait only when the
        previous one is still out (so that at most about two windows are kept for resends)."""
        if self._background is not None:
            await self._background.wait()
            if self._uncommitted_bytes < self.commit_window:
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

    async def _send_run(
        self, stable: int | None = None, with_attrs: bool = False, setattrs: fattr4 | None = None
    ) -> None:
        if not self._run:
            return
        pieces, off = self._run, self._run_off
        self._run, self._run_len = [], 0
        await self._send(
            off, pieces[0] if len(pieces) == 1 else b"".join(pieces), stable, with_attrs, setattrs
        )

    async def _send(
        self,
        offset: int,
        data: bytes,
        stable: int | None = None,
        with_attrs: bool = False,
        setattrs: fattr4 | None = None,
    ) -> None:
        if not with_attrs:
            self.post_attrs = None
        view = memoryview(data)
        if with_attrs and self._busy == 0 and len(view) <= self.wsize:
            # the sole WRITE, and the caller waits for it: sent from the caller's task (no task
            # started, no hop back to the caller when it is answered)
            self._slots.acquire_nowait()  # (nothing in flight: a slot is free)
            self._idle = trio.Event()
            self._busy += 1
            await self._write_one(offset, view, stable, with_attrs, setattrs)
            return
        for pos in range(0, len(view), self.wsize):
            await self._slots.acquire()
            if self._busy == 0:
                self._idle = trio.Event()
            self._busy += 1
            self._nursery.start_soon(
                self._write_one, offset + pos, view[pos : pos + self.wsize], stable, with_attrs, setattrs
            )

    async def _write_one(
        self,
        offset: int,
        data: memoryview,
        stable: int | None = None,
        with_attrs: bool = False,
        setattrs: fattr4 | None = None,
    ) -> None:
        try:
            pos = 0
            reopens = 0
            while pos < len(data):
                stateid = self.of.stateid
                try:
                    if with_attrs:  # the only WRITE in flight: the attributes after it come along
                        accepted = self._accepted
                        count, committed, verf, attrs = await self.nfs.write_getattr(
                            self.of, offset + pos, data[pos:], self.cred, stable or self.stable, setattrs
                        )
                        if accepted == self._accepted:  # (nothing written meanwhile)
                            self.post_attrs = (attrs, trio.current_time())
                    else:
                        count, committed, verf = await self.nfs.write(
                            self.of, offset + pos, data[pos:], self.cred, stable or self.stable
                        )
                except NFS4Error as e:
                    if e.status not in STATE_LOST or self.reopen is None or reopens >= MAX_REOPENS:
                        raise
                    reopens += 1
                    await self.reopen(stateid)
                    continue
                self.writes_sent += 1
                if count <= 0:
                    raise OSError(errno.EIO, "the server wrote nothing")
                if committed == c.UNSTABLE4:
                    self._uncommitted.append((offset + pos, data[pos : pos + count], verf))
                    self._uncommitted_bytes += count
                pos += count
        except OSError as e:
            log.warning("WRITE at %d failed: %s", offset, e)
            if self._error is None:
                self._error = e
        finally:
            self._busy -= 1
            self._slots.release()
            if self.answered is not None:
                self.answered()
            if self._busy == 0:
                self._idle.set()

    async def drain(self) -> None:
        """Send what is gathered (and the attribute changes kept after it) and wait for every WRITE
        in flight."""
        if self._held is not None:
            await self._wait_held()
        await self._send_setattrs()
        await self._send_run()
        await self._wait_idle()

    async def commit(self) -> None:
        """Everything written so far onto stable storage; resend what a changed verifier lost."""
        if self._held is not None:
            await self._wait_held()
        await self._send_setattrs()  # (one COMPOUND with the data when it is a sole run: no COMMIT)
        if self._sole_run():
            # all there is fits in one WRITE (a small file at close): FILE_SYNC, and no COMMIT
            # round trip after it (the Linux client does the same); the attributes come along
            await self._send_run(c.FILE_SYNC4, with_attrs=True)
        await self.drain()
        if not self._uncommitted and not self._commit_lock.locked():
            self._raise_error()  # (nothing to COMMIT and none out: no lock to wait for)
            return
        async with Held(self._commit_lock):  # (after a background COMMIT, if one is out)
            for _ in range(3):
                if not self._uncommitted:
                    break
                await self._commit_once()
                await self._wait_idle()
        self._raise_error()

    async def _commit_once(self) -> None:
        """COMMIT what the server has acknowledged UNSTABLE so far; resend what a changed verifier
        lost (the resends go UNSTABLE again: the caller commits again). Under ``_commit_lock``."""
        if not self._uncommitted:
            return
        pending, self._uncommitted, self._uncommitted_bytes = self._uncommitted, [], 0
        self._committing = pending
        try:
            verf = await self.nfs.commit(self.of.fh, self.cred)
        except OSError:
            self._uncommitted = pending + self._uncommitted
            self._uncommitted_bytes = sum(len(d) for _, d, _ in self._uncommitted)
            raise
        finally:
            self._committing = []
        lost = [(o, d) for o, d, v in pending if v != verf]
        if lost:
            log.info(
                "COMMIT verifier %s differs from WRITE verifier(s) %s: resending",
                verf.hex(),
                sorted({v.hex() for _, _, v in pending}),
            )
        for o, d in lost:  # the server restarted between WRITE and COMMIT: send them again
            self.resends += 1
            await self._send(o, d)

    async def flush(self) -> None:
        if self.stable == c.UNSTABLE4:
            await self.commit()
        else:
            await self.drain()
        self._raise_error()
