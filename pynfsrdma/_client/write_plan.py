"""What an open file's writes become on the wire, without I/O: the planner of the open-file engine
(:mod:`.open_file` carries its answers out).

Writes handed in are gathered into runs: a run grows while writes follow one another and fits in
one WRITE (``wsize``); a write that does not follow, or would overflow, sends the run first; a write
of ``wsize`` or more goes out as it is. Data is kept by reference (no copy) until it is stable on
the server: a WRITE answered FILE_SYNC or DATA_SYNC, or an UNSTABLE one whose write verifier a later
COMMIT returns. A COMMIT that returns another verifier (the server restarted and may have lost the
data) sends those pieces again. Once ``commit_window`` bytes wait for a COMMIT, one is due, so that
the data kept stays bounded.

A file written in one run that fits in one WRITE (a small file at close) is sent FILE_SYNC with the
file's attributes in the same COMPOUND and no COMMIT after it; attribute changes made after the data
(times and mode: ``tar``) may wait with it and go in that COMPOUND too (:meth:`WritePlan.defer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._proto.nfs4 import const as c

COMMIT_WINDOW = 32 << 20  # bytes waiting for a COMMIT that make one due
STABLE_ANSWERS = frozenset({c.FILE_SYNC4, c.DATA_SYNC4})


@dataclass(slots=True)
class Send:
    """Send ``data`` (a bytes-like object, by reference) at ``offset``: one WRITE per ``wsize`` of it.
    ``stable``: the stability asked (None: the plan's own); ``with_attrs``: the file's attributes in
    the same COMPOUND (the only WRITE in flight); ``setattrs``: attribute changes to send after it
    in that COMPOUND (setattr_fattr4 keywords)."""

    offset: int
    data: Any
    stable: int | None = None
    with_attrs: bool = False
    setattrs: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return memoryview(self.data).nbytes


@dataclass(slots=True)
class Unstable:
    """Data the server has but may lose until a COMMIT returns ``verifier``."""

    offset: int
    data: Any
    verifier: bytes


class WritePlan:
    """The write state of one open file (see the module's text). Not thread-safe; no I/O."""

    def __init__(self, wsize: int, stable: int = c.UNSTABLE4, commit_window: int = COMMIT_WINDOW) -> None:
        self.wsize = wsize
        self.stable = stable
        self.commit_window = commit_window
        self._run: list[Any] = []
        self._run_off = 0
        self._run_len = 0
        self._in_flight = 0  # WRITEs sent and not yet answered (write_started, write_ended)
        self.held = False  # a caller took the sole run (take_sole_run) and has not handed it back
        self.uncommitted: list[Unstable] = []
        self.uncommitted_bytes = 0
        self.committing: list[Unstable] = []  # pieces whose COMMIT is on its way
        self.setattrs: dict[str, Any] = {}  # attribute changes waiting with the data (defer)
        self.accepted = 0  # writes handed in so far
        self.bytes_accepted = 0
        self.end = 0  # the end of the data handed in so far

    # -- state --------------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """WRITEs sent and not yet answered (as the engine tells: :meth:`write_started`,
        :meth:`write_ended`)."""
        return self._in_flight

    @property
    def dirty(self) -> bool:
        """Data not yet on the server's stable storage (gathered, in flight or uncommitted)."""
        return bool(self._run or self._in_flight or self.uncommitted or self.committing or self.held)

    @property
    def unsent(self) -> bool:
        """Data or attribute changes not yet answered by the server."""
        return bool(self._run or self._in_flight or self.held or self.setattrs)

    @property
    def gathered_end(self) -> int:
        """The end of the gathered data (0 when there is none)."""
        return self._run_off + self._run_len if self._run else 0

    def sole_run(self) -> bool:
        """All the data not yet sent is one run that fits in one WRITE, and nothing else is in
        flight or waits for a COMMIT."""
        return bool(
            not self.held
            and self._run
            and not self._in_flight
            and not self.uncommitted
            and not self.committing
            and self._run_len <= self.wsize
        )

    @property
    def commit_due(self) -> bool:
        return self.uncommitted_bytes >= self.commit_window

    # -- events ---------------------------------------------------------------------------------------
    def write_started(self) -> None:
        """A WRITE (of a :class:`Send`'s data) went out."""
        self._in_flight += 1

    def write_ended(self) -> None:
        """A WRITE that went out is over: answered (:meth:`answered` said what it wrote) or failed."""
        if self._in_flight <= 0:
            raise RuntimeError("a WRITE ended that never started")
        self._in_flight -= 1

    def write(self, offset: int, data: Any) -> list[Send]:
        """``data`` (kept by reference) is to go at ``offset``: what to send now."""
        n = memoryview(data).nbytes
        self.accepted += 1
        self.bytes_accepted += n
        self.end = max(self.end, offset + n)
        out: list[Send] = []
        if self._run and (offset != self._run_off + self._run_len or self._run_len + n > self.wsize):
            out.append(self.take_run())
        if n >= self.wsize:  # a large write goes out as it is (by reference, no copy)
            out.append(Send(offset, data))
            return out
        if not self._run:
            self._run_off = offset
        self._run.append(data)
        self._run_len += n
        if self._run_len >= self.wsize:
            out.append(self.take_run())
        return out

    def take_run(self, stable: int | None = None, with_attrs: bool = False,
                 setattrs: dict[str, Any] | None = None) -> Send:
        """The gathered run, to send now (one piece as it is, several joined). There must be one."""
        pieces, off = self._run, self._run_off
        self._run, self._run_len = [], 0
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        return Send(off, data, stable, with_attrs, setattrs or {})

    def take_any_run(self) -> Send | None:
        return self.take_run() if self._run else None

    def defer(self, changes: dict[str, Any]) -> bool:
        """Keep attribute changes (setattr_fattr4 keywords: times and mode) to go after the gathered
        data, in its COMPOUND. Only while the data is a sole run; False (nothing kept) otherwise."""
        if not self.sole_run():
            return False
        self.setattrs.update(changes)
        return True

    def take_setattrs(self) -> tuple[dict[str, Any], Send | None]:
        """The deferred changes, and the sole run to send FILE_SYNC with them in one COMPOUND (None:
        the data, if any, goes first on its own, then the changes by themselves)."""
        changes, self.setattrs = self.setattrs, {}
        if changes and self.sole_run():
            return changes, self.take_run(c.FILE_SYNC4, with_attrs=True, setattrs=changes)
        return changes, None

    def final_send(self) -> Send | None:
        """At a commit: all there is fits in one WRITE (a small file at close): FILE_SYNC with the
        attributes, and no COMMIT after it."""
        return self.take_run(c.FILE_SYNC4, with_attrs=True) if self.sole_run() else None

    def take_sole(self) -> tuple[int, Any] | None:
        """All the data not yet sent, when it is a sole run and no attribute change waits: (offset,
        data) for the caller to send in a COMPOUND of its own; writes wait until :meth:`give_back`."""
        if self.setattrs or not self.sole_run():
            return None
        send = self.take_run()
        self.held = True
        return send.offset, send.data

    def give_back(self, rest: tuple[int, Any] | None) -> None:
        """The caller of :meth:`take_sole` is done; ``rest`` (offset, data) did not get written."""
        self.held = False
        if rest is not None and memoryview(rest[1]).nbytes:
            off, data = rest
            self._run, self._run_off, self._run_len = [data], off, memoryview(data).nbytes

    def answered(self, offset: int, data: Any, committed: int, verifier: bytes) -> None:
        """A WRITE of ``data`` at ``offset`` was answered with ``committed`` and ``verifier``."""
        if committed not in STABLE_ANSWERS:
            self.uncommitted.append(Unstable(offset, data, verifier))
            self.uncommitted_bytes += memoryview(data).nbytes

    def commit_begins(self) -> list[Unstable]:
        """The pieces a COMMIT now on its way covers (none: no COMMIT is needed)."""
        pending, self.uncommitted, self.uncommitted_bytes = self.uncommitted, [], 0
        self.committing = pending
        return pending

    def commit_failed(self) -> None:
        """The COMMIT failed: its pieces wait for the next one."""
        self.uncommitted = self.committing + self.uncommitted
        self.uncommitted_bytes = sum(memoryview(p.data).nbytes for p in self.uncommitted)
        self.committing = []

    def commit_answered(self, verifier: bytes, *also: bytes) -> list[Send]:
        """The COMMIT returned ``verifier`` (and confirmed ``also``: a layout's, for what was written by
        it): the pieces written under another one are sent again."""
        pending, self.committing = self.committing, []
        kept = {verifier, *also}
        return [Send(p.offset, p.data) for p in pending if p.verifier not in kept]
