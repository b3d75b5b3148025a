"""Write gathering for one open: sequential writes become wsize UNSTABLE WRITEs, several in flight.

Data handed in by FUSE is ``bytes`` (immutable), so it is kept by reference: a gathered run of
pieces is sent as is when it is one piece, joined into one buffer when it is several (small writes).
Every unstable piece is kept until a COMMIT returns the verifier its WRITE returned; when the
verifier differs (the server restarted and may have lost it), the piece is sent again, FILE_SYNC.
A failed background WRITE is reported by the next write, flush or fsync, as a local filesystem
reports write-back errors.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..client.nfs4 import NFSv4, OpenFile
from ..errors import NFS4Error
from ..proto.nfs4 import const as c
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
COMMIT_WINDOW = 64 << 20  # COMMIT at least this often, so the data kept for resends stays bounded


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
    ) -> None:
        self.nfs = nfs
        self.of = of
        self.cred = cred
        self._nursery = nursery
        self.wsize = wsize
        self.stable = stable
        self.commit_window = commit_window
        self.reopen = reopen
        self._slots = trio.Semaphore(in_flight)
        self._run: list[bytes] = []
        self._run_off = 0
        self._run_len = 0
        self._busy = 0
        self._idle = trio.Event()
        self._idle.set()
        self._uncommitted: list[tuple[int, Any, bytes]] = []  # (offset, data, write verifier)
        self._uncommitted_bytes = 0
        self._error: OSError | None = None
        self.writes_sent = 0
        self.resends = 0

    @property
    def dirty(self) -> bool:
        """Data not yet on the server's stable storage (unsent, in flight or uncommitted)."""
        return bool(self._run or self._busy or self._uncommitted)

    @property
    def unsent(self) -> bool:
        return bool(self._run or self._busy)

    def _raise_error(self) -> None:
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    async def write(self, offset: int, data: bytes) -> None:
        self._raise_error()
        n = len(data)
        if self._run and (offset != self._run_off + self._run_len or self._run_len + n > self.wsize):
            await self._send_run()
        if n >= self.wsize:  # a large write goes out as it is (by reference, no copy)
            await self._send(offset, data)
            return
        if not self._run:
            self._run_off = offset
        self._run.append(data)
        self._run_len += n
        if self._run_len >= self.wsize:
            await self._send_run()
        if self._uncommitted_bytes >= self.commit_window:
            await self.commit()

    async def _send_run(self, stable: int | None = None) -> None:
        if not self._run:
            return
        pieces, off = self._run, self._run_off
        self._run, self._run_len = [], 0
        await self._send(off, pieces[0] if len(pieces) == 1 else b"".join(pieces), stable)

    async def _send(self, offset: int, data: bytes, stable: int | None = None) -> None:
        view = memoryview(data)
        for pos in range(0, len(view), self.wsize):
            await self._slots.acquire()
            if self._busy == 0:
                self._idle = trio.Event()
            self._busy += 1
            self._nursery.start_soon(self._write_one, offset + pos, view[pos : pos + self.wsize], stable)

    async def _write_one(self, offset: int, data: memoryview, stable: int | None = None) -> None:
        try:
            pos = 0
            reopens = 0
            while pos < len(data):
                stateid = self.of.stateid
                try:
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
            if self._busy == 0:
                self._idle.set()

    async def drain(self) -> None:
        """Send what is gathered and wait for every WRITE in flight."""
        await self._send_run()
        await self._idle.wait()

    async def commit(self) -> None:
        """Everything written so far onto stable storage; resend what a changed verifier lost."""
        if self._run and not self._busy and not self._uncommitted and self._run_len <= self.wsize:
            # all there is fits in one WRITE (a small file at close): FILE_SYNC, and no COMMIT
            # round trip after it (the Linux client does the same)
            await self._send_run(c.FILE_SYNC4)
        await self.drain()
        for _ in range(3):
            if not self._uncommitted:
                break
            pending, self._uncommitted, self._uncommitted_bytes = self._uncommitted, [], 0
            try:
                verf = await self.nfs.commit(self.of.fh, self.cred)
            except OSError:
                self._uncommitted = pending + self._uncommitted
                self._uncommitted_bytes = sum(len(d) for _, d, _ in self._uncommitted)
                raise
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
            await self._idle.wait()
        self._raise_error()

    async def flush(self) -> None:
        if self.stable == c.UNSTABLE4:
            await self.commit()
        else:
            await self.drain()
        self._raise_error()
