"""One NFSv4.1 session: SEQUENCE on every COMPOUND, the slot table, and resending.

A request takes a slot and the slot's next sequence id, and keeps both until a reply arrives: when
its connection fails (or stalls past the per-try timeout) it is sent again on another live path,
or on the same path once it reconnects, with the SAME slot and sequence id (RFC 8881 section
2.10.6.2: the server answers a retry it already executed from its reply cache).

Every reply is checked against its request before anyone looks at it (``check_compound_res``: the
results, their operations and statuses; no bytes after the COMPOUND; SEQUENCE's session, slot and
sequence id; and whatever the caller's ``check`` decodes from the results, such as attributes). A
reply that breaks the protocol closes its connection (its framing can no longer be trusted) and the
request goes again, same slot and sequence id, on a fresh one: the server answers it from its reply
cache when it ran it. After MAX_VIOLATIONS such replies the request fails with
:class:`~pynfsrdma._errors.ProtocolError`, naming the server and the operation. One exception: a
reply whose SEQUENCE is this request's (session, slot, sequence id) but whose other results answer
another request is the reply the server cached for that other request; after a step back (the
sequence id was an interrupted request's, which may have reached the server after all) it is a false
retry, and the request machine (:mod:`.sequence`) has the request sent again as a new one.

A soft mount (:class:`RetryPolicy`) gives each request ``timeo`` x (``retrans`` + 1) to be answered.
Once one request has gone unanswered that long, the server is taken for gone: the requests waiting
(for a slot, for a path, for their reply on the connection that timed out) and those that follow fail
at once, until a reply comes again (the paths reconnect and bind in the background meanwhile).

What this class does not decide: what to do when the session itself is gone (BADSESSION and its
kin) or the client ID is stale. It raises :class:`SessionLost` and the owner recovers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from .. import _trace as trace
from .._errors import NFS4Error, ProtocolError, ReplyError
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import (
    COMPOUND4res,
    CompoundMismatch,
    ResOp,
    check_compound_res,
    decode_compound_res,
    encode_sequenced_args,
)
from .._proto.nfs4.compound_shapes import CompoundShape
from .._proto.nfs4.types import SEQUENCE4resok
from .._rpc.auth import Credential
from .._rpc.client import RpcConnection
from .._rpc.errors import RpcTimeout
from .._rpc.gss_auth import KerberosAccessError
from .._stats import CallTimes, OpStats, RpcStats, collector_for
from .._transport.base import NO_HINTS, CallFailed, ProtocolViolation, ReplyHints, TransportError
from .._xdr import Packer, Unpacker, XdrError
from .errors import ServerUnreachable, SessionError
from .path_choice import Mark
from .path_set import NoPathError, Path, PathSet
from .sequence import Act, Decision, Failed, Fault, Replied, Request, settles
from .slot_table import Slot, SlotTable

log = logging.getLogger(__name__)

# requests made only of these operations may be executed twice with the same outcome: their replies
# (READ data, directory pages) are not worth the server's reply cache, and a retry the server
# answers NFS4ERR_RETRY_UNCACHED_REP is simply sent again as a new request
IDEMPOTENT_OPS = frozenset(
    {
        c.OP_ACCESS,
        c.OP_GETATTR,
        c.OP_GETFH,
        c.OP_LOOKUP,
        c.OP_LOOKUPP,
        c.OP_NVERIFY,
        c.OP_PUTFH,
        c.OP_PUTPUBFH,
        c.OP_PUTROOTFH,
        c.OP_READ,
        c.OP_READDIR,
        c.OP_READLINK,
        c.OP_RESTOREFH,
        c.OP_SAVEFH,
        c.OP_SECINFO,
        c.OP_SECINFO_NO_NAME,
        c.OP_VERIFY,
        c.OP_COMMIT,
        c.OP_GETXATTR,  # (a value may be far larger than the server's cache holds: NFSv4.2)
        c.OP_LISTXATTRS,
    }
)

# operations whose time is mostly the server's work on its storage, not the path's round trip
STORAGE_WORK = frozenset({c.OP_COMMIT, c.OP_COPY, c.OP_CLONE, c.OP_ALLOCATE, c.OP_DEALLOCATE})
RESEND_PAUSE = 0.01  # before resending on the same (reconnecting) path
# room around a READ's or WRITE's data for the RPC and COMPOUND headers, in ca_maxrequestsize and
# ca_maxresponsesize (a session asks for rsize/wsize plus this, and reads no more than it allows)
COMPOUND_ROOM = 8 * 1024
# the replies a session asks the server to be able to keep in its reply cache (ca_maxresponsesize_cached):
# an OPEN's (not idempotent: its reply is kept) with a READ of a small file's first bytes after it
# (the mount's opens for reading), and room for the rest
CACHED_REPLY = 64 * 1024 + COMPOUND_ROOM

# what a caller's check of the results may raise for a reply it cannot use (XdrError: malformed
# attributes; ValueError: a value out of its type's range). Anything else it raises is a bug of ours,
# and is let through as such.
Check = Callable[[list[ResOp]], None]
#: takes what a shape's prepared decoder made of a reply (:meth:`.compound_shapes.CompoundShape.decode`)
Prepared = Callable[[tuple[Any, ...]], None]
_CHECK_ERRORS = (XdrError, ValueError)
# the operations that are not what a COMPOUND is about (named in errors only when nothing else is there)
_PLUMBING = frozenset({c.OP_SEQUENCE, c.OP_PUTFH, c.OP_PUTROOTFH, c.OP_PUTPUBFH, c.OP_SAVEFH, c.OP_RESTOREFH,
                       c.OP_GETFH, c.OP_GETATTR})


def is_idempotent(ops: Sequence[Any]) -> bool:
    """Whether running ``ops`` twice is the same as running them once (see IDEMPOTENT_OPS)."""
    for op in ops:  # noqa: SIM110  (a loop, not a generator: this runs for every request)
        if getattr(op, "OPNUM", None) not in IDEMPOTENT_OPS:
            return False
    return True


class SessionLost(Exception):
    """The session (or the client ID behind it) is gone; ``status`` says which."""

    def __init__(self, status: int) -> None:
        super().__init__(c.nfsstat4(status).name if status in _STATUS_NAMES else str(status))
        self.status = status


_STATUS_NAMES = frozenset(int(s) for s in c.nfsstat4)


SEND, PROBE, FAIL = "send", "probe", "fail"  # (RetryPolicy.admit)


def ops_facts(ops: Sequence[Any]) -> tuple[bool, int | None]:
    """Whether ``ops`` are idempotent (:func:`is_idempotent`) and the operation they are about
    (:func:`main_op`), in one pass."""
    idempotent = True
    main = None
    found = False
    for op in ops:
        n = getattr(op, "OPNUM", None)
        if idempotent and n not in IDEMPOTENT_OPS:
            idempotent = False
        if not found:
            main = n
            found = n not in _PLUMBING
    return idempotent, main


# the facts of each prepared shape's operations (ops_facts), found at its first request
_SHAPE_FACTS: dict[CompoundShape, tuple[bool, int | None]] = {}
_SHAPES_KEPT = 256  # (shapes are made once, at import: more than this would be shapes made per call)


def main_op(ops: Sequence[Any]) -> int | None:
    """The operation a COMPOUND is about, to name in an error: the first that is not plumbing
    (PUTFH, GETATTR...), else the last; an OPEN that CLOSEs went in front of is about the OPEN."""
    n = None
    for i, op in enumerate(ops):  # (a loop, not a list and a generator: this runs for every request)
        n = getattr(op, "OPNUM", None)
        if n not in _PLUMBING:
            if n == c.OP_CLOSE and any(getattr(o, "OPNUM", None) == c.OP_OPEN for o in ops[i + 1:]):
                return c.OP_OPEN
            return n
    return n


@dataclass(slots=True)
class RetryPolicy:
    """How long a request keeps trying (the mount options hard/soft, timeo, retrans), and, for a soft
    mount, whether the server is taken for gone (sans I/O: the sessions ask and tell it).

    Once a soft request went unanswered for its whole time, requests fail at once (:meth:`admit`
    says FAIL) until a reply comes (:meth:`answered`); but every ``timeo`` one request is let through
    as a probe (PROBE), with its whole time, so that a server that came back is found by the
    requests themselves too, not only by the connections' redialling."""

    timeo: float = 60.0  # seconds one try waits for its reply before the path is suspected
    retrans: int = 2  # soft: tries after the first before giving up
    hard: bool = True  # hard: keep trying until a path answers
    # soft: when a request (or the last probe) went unanswered for its whole time (None: answers come)
    unanswered_since: float | None = None
    probing: bool = False  # soft: a probe is out

    @property
    def budget(self) -> float:
        """How long a soft request waits to be answered, over all its tries."""
        return self.timeo * (self.retrans + 1)

    def deadline(self, now: float) -> float | None:
        """When a request made now gives up for want of an answer (None: never, a hard mount)."""
        return None if self.hard else now + self.timeo * (self.retrans + 1)  # (budget's, inline)

    @property
    def failing_fast(self) -> bool:
        """A soft request fails at once: one went unanswered, and nothing has been answered since."""
        return not self.hard and self.unanswered_since is not None

    def admit(self, now: float) -> str:
        """How a soft request made now goes: SEND (as usual), PROBE (the one that asks whether the
        server answers again; the caller ends it with :meth:`probed`), or FAIL (at once)."""
        if not self.failing_fast:
            return SEND
        assert self.unanswered_since is not None
        if self.probing or now - self.unanswered_since < self.timeo:
            return FAIL
        self.probing = True
        return PROBE

    def probed(self) -> None:
        self.probing = False

    def gave_up(self, now: float) -> None:
        """A soft request went unanswered for its whole time."""
        if not self.hard:
            self.unanswered_since = now

    def answered(self) -> None:
        """A reply came: requests wait for theirs again."""
        self.unanswered_since = None


class Session:
    """The fore channel of one session, spread over the paths of a :class:`PathSet`.

    :meth:`compound`'s arguments: ``payload`` is the request's bulk size (for choosing a path).
    ``cachethis`` None asks the server to keep the reply in its reply cache unless the request is
    idempotent (so that a resend after a lost connection is answered exactly once). ``pin``: send on
    that path only and let its faults through (a probe). ``check(results)`` runs on the results of
    ``ops`` of a successful reply; what it raises for a reply it cannot use is a protocol violation
    like any other. ``deadline``: when a soft request that began earlier (the caller's, resent after a
    pause) gives up; by default its ``timeo`` x (``retrans`` + 1) from its first send. Pauses the
    server asks for (SEQUENCE's NFS4ERR_DELAY) count: one that would end past the deadline fails the
    request with that status. ``shape``, ``prepared``: :meth:`_check`. It raises SessionLost when the
    session or client ID is gone, ServerUnreachable when a soft request ran out of time,
    ProtocolError when the server's replies kept breaking the protocol."""

    def __init__(
        self,
        sessionid: bytes,
        max_requests: int,
        paths: PathSet,
        policy: RetryPolicy,
        max_request_size: int = 1 << 20,
        max_response_size: int = 1 << 20,
        stats: RpcStats | None = None,
        group: int = 0,
        minorversion: int = c.NFS4_MINOR_VERSION_1,
        max_operations: int = 16,
        max_response_size_cached: int = 0,
    ) -> None:
        self.sessionid = sessionid
        self.max_operations = max_operations  # in one COMPOUND, SEQUENCE included (ca_maxoperations)
        self.minorversion = minorversion
        self.group = group  # the paths (Path.group) this session's requests may use
        self.table = SlotTable(max_requests)
        self.paths = paths
        self.policy = policy
        self.max_request_size = max_request_size
        self.max_response_size = max_response_size
        # the largest reply the server keeps in its reply cache (ca_maxresponsesize_cached): a request
        # that is not idempotent, whose reply it keeps, may ask no more (NFS4ERR_REP_TOO_BIG_TO_CACHE)
        self.max_response_size_cached = max_response_size_cached
        self._slot_waiters = trio.lowlevel.ParkingLot()
        self._parked = 0  # requests parked there (counted here: looked at by every request's end)
        self.status_flags = 0  # union of SEQ4_STATUS flags seen since the owner last looked
        self.flags_event = trio.Event()
        # the trio clock, read by the requests without finding the run's clock at each reading
        self.now: Callable[[], float] = trio.lowlevel.current_clock().current_time
        self.last_renewal = self.now()
        self.dead: int | None = None  # the status that killed the session
        self.resends = 0
        self.violations = 0  # replies (or connections) that broke the protocol
        self.replays = 0  # resends answered (the server may have executed the first send)
        # per-operation figures for `pynfsrdma stats`; shared by the sessions of one path set
        self.stats = stats if stats is not None else collector_for(paths)

    # -- slots ----------------------------------------------------------------------------------------
    async def _acquire(self, soft: bool) -> Slot:
        while True:
            if self.dead is not None:
                raise SessionLost(self.dead)
            if soft and self.policy.failing_fast:
                raise self._unreachable()
            slot = self.table.try_acquire()
            if slot is not None:
                return slot
            self._parked += 1
            try:
                await self._slot_waiters.park()
            finally:
                self._parked -= 1

    def _release(self, slot: Slot, *, completed: bool) -> None:
        self.table.release(slot, completed=completed)
        if self._parked:
            self._slot_waiters.unpark()

    def kill(self, status: int) -> None:
        """Mark the session unusable (every waiter fails with SessionLost)."""
        if self.dead is None:
            self.dead = status
        self._slot_waiters.unpark_all()

    def _servers(self) -> str:
        return ", ".join(p.address for p in self.paths.paths if p.group == self.group) or "the server"

    def _admit(self) -> bool:
        """A soft request while the server is taken for gone: it fails at once (raises), or goes
        as the probe that asks whether the server answers again (True), or as usual (False)."""
        admitted = self.policy.admit(trio.current_time())
        if admitted == FAIL:
            raise self._unreachable()
        return admitted == PROBE

    def _unreachable(self, why: str | None = None) -> ServerUnreachable:
        if why is None:
            why = f"no answer within {self.policy.budget:g} s (soft mount: failing at once until it answers again)"
            self.paths.wanted()  # (so that the question whether it answers again is asked soon)
        return ServerUnreachable(f"{self._servers()}: {why}")

    def _give_up(self, why: str) -> ServerUnreachable:
        """A soft request went unanswered for its whole time: the requests waiting and those to come
        fail at once until the server answers again."""
        self.policy.gave_up(trio.current_time())
        self._slot_waiters.unpark_all()
        for path in self.paths.live(self.group):
            # (a connection that answers nothing is dropped: reconnecting and binding it to the
            # session is the question whether the server answers again)
            self.paths.kill(path)
        self.paths.wake_waiters()
        return self._unreachable(why)

    # -- requests -------------------------------------------------------------------------------------
    async def compound(self, ops: Sequence[Any], cred: Credential, hints: ReplyHints = NO_HINTS, *, payload: int = 0,
                       tag: str = "", cachethis: bool | None = None, pin: Path | None = None,
                       check: Check | None = None, deadline: float | None = None, shape: CompoundShape | None = None,
                       prepared: Prepared | None = None) -> COMPOUND4res:
        """Send ``ops`` after a SEQUENCE; return the reply with SEQUENCE's result removed, the call timed for
        the statistics from here to its end (:mod:`pynfsrdma._stats`). The arguments, what it raises: the
        class's text. The loop: send, feed what came of it to the request's machine
        (:class:`.sequence.Request`), carry out its decision; a send that brings no reply is
        :meth:`_unanswered`'s."""
        started = self.now()
        out: _Outgoing | None = None
        gave_up = False
        try:
            out = self._outgoing(ops, cred, hints, payload, tag, cachethis, pin, shape, started, deadline)
            if out.slot is None:  # (no free slot: waited for; _outgoing takes a free one at once)
                out.slot = await self._acquire(out.soft)
                self._set_deadline(out, self.now(), deadline)
                out.seqid = self.table.begin(out.slot)
            sends = tries = 0  # the request's sends before this try (of a sequence id), and this try's
            previous: Path | None = None  # the path this try's last send went unanswered on
            while True:
                if out.pin is None and self.dead is None and (not out.soft or self.policy.unanswered_since is None):
                    path = self.paths.choose(out.payload, avoid=previous, group=self.group)  # (_path_chosen's, inline)
                else:
                    path = self._path_chosen(out, previous)
                if path is None:  # (no live path now: the one waited for; the common case awaits nothing)
                    path = await self._path_waited(out)
                rpc = path.rpc
                assert rpc is not None
                if not rpc.receiving and rpc.alive:  # (lost already, the end not yet seen: after a pause)
                    await trio.sleep(RESEND_PAUSE)
                    continue
                xid, p, start, timeout = self._start(out, path, rpc, previous, tries)
                tries += 1
                try:
                    mark = path.sending(xid, out.payload, start)
                    try:
                        u = await rpc.call_packed(xid, p, out.hints, timeout, now=start)
                    except BaseException:
                        path.ended(xid, out.payload)  # (answered, it ends in _received)
                        raise
                except (RpcTimeout, TransportError, trio.ClosedResourceError, KerberosAccessError, ReplyError) as e:
                    if await self._unanswered(out, path, e, xid, start, tries):
                        raise
                    previous = path
                    continue
                sends, resent, tries, previous = sends + tries, tries > 1, 0, None
                try:
                    res, answered = self._received(out, path, mark, p, u, xid, start, resent)
                    st, foreign = self._check(out, res, answered, check, prepared)
                except _CHECK_ERRORS as e:
                    self._after_bad_reply(out, self._violated(path, ops, e), e)
                    continue
                if foreign is None and settles(st, res.status):  # (the machine's DONE, whatever came before)
                    out.completed = True
                    return res
                time_left = None if out.deadline is None else out.deadline - self.now()
                decision = out.machine().feed(Replied(st, res.status, sends, out.slot.interrupted,
                                                    foreign=foreign is not None, resent=resent, time_left=time_left))
                if decision.act is Act.DONE:
                    out.completed = True
                    return res
                await self._carry_out(decision, out, path, st, foreign)
        except ServerUnreachable:
            gave_up = True
            raise
        finally:
            if out is not None:  # (_let_go's, inline: every request ends here)
                slot = out.slot
                if slot is not None:
                    self.table.release(slot, completed=out.completed)
                    if self._parked:
                        self._slot_waiters.unpark()
                if out.probe:
                    self.policy.probed()
            # (the request is its call's record; one refused before it was made has one of its own;
            # only a request sent more than once can have gone unanswered long enough for a major timeout)
            self.stats.call_ended(out if out is not None else self.stats.call_started(started, ops), ops, self.now(),
                                  gave_up=gave_up, major_timeout=None if pin is not None or out is None
                                  or out.sends < 2 else self.policy.budget)

    def _outgoing(self, ops: Sequence[Any], cred: Credential, hints: ReplyHints, payload: int, tag: str,
                  cachethis: bool | None, pin: Path | None, shape: CompoundShape | None, now: float,
                  deadline: float | None) -> _Outgoing:
        """The request :meth:`compound` carries (a soft one while the server is taken for gone fails
        here at once, or goes as the probe), made at ``now``: with a free slot, its sequence id and its
        deadline (:meth:`_set_deadline`) when one is free (else its slot is None: to wait for)."""
        policy = self.policy
        soft = not policy.hard and pin is None
        probe = False
        if soft and policy.unanswered_since is not None:
            # (a probe waits its whole time, whatever the others do)
            probe = self._admit()
            soft = not probe
        if shape is None:
            idempotent, main = ops_facts(ops)
        else:  # (a shape's operations are the same at every call: their facts found once)
            facts = _SHAPE_FACTS.get(shape)
            if facts is None:
                if len(_SHAPE_FACTS) >= _SHAPES_KEPT:
                    _SHAPE_FACTS.clear()
                facts = _SHAPE_FACTS[shape] = ops_facts(ops)
            idempotent, main = facts
        out = _Outgoing(now, self.stats.figures(ops, shape), shape, ops, cred, hints, idempotent,
                        payload or (sum(hints.ddp_sizes) if hints.ddp_sizes else 0),  # a READ's reply: its weight
                        tag, not idempotent if cachethis is None else cachethis, pin, soft,
                        main not in STORAGE_WORK)  # (its time is a round trip)
        if probe:
            out.probe = True
        elif soft and policy.unanswered_since is not None:  # (policy.failing_fast, for a soft request)
            out.failing_fast = True
            return out  # (no free slot taken: it fails once it looks for one)
        slot = self.table.take() if self.dead is None else None
        if slot is not None:
            out.slot, out.seqid = slot, slot.seqid
            # (as _set_deadline sets it)
            out.deadline = (None if pin is not None else deadline if deadline is not None
                            else None if policy.hard else now + policy.timeo * (policy.retrans + 1))
        return out

    def _set_deadline(self, out: _Outgoing, now: float, deadline: float | None) -> None:
        """When ``out`` gives up, its slot taken at ``now``: never when pinned, else the caller's
        ``deadline`` or the policy's from now (a hard mount's: never)."""
        if out.pin is not None:
            out.deadline = None
        elif deadline is not None:
            out.deadline = deadline
        else:
            out.deadline = None if self.policy.hard else self.policy.deadline(now)

    async def _carry_out(self, decision: Decision, out: _Outgoing, path: Path, st: int,
                         foreign: CompoundMismatch | None) -> None:
        """Carry out the machine's ``decision`` on a reply from ``path`` whose SEQUENCE status is
        ``st`` (``foreign``: what is wrong with its other results): the request goes again, on the
        same or another slot (returns), or ends (raises)."""
        act, slot = decision.act, out.slot
        assert slot is not None
        if act is Act.VIOLATION:
            assert foreign is not None
            self._after_bad_reply(out, self._violated(path, out.ops, foreign), foreign)
        elif act is Act.AGAIN:
            if decision.status == c.NFS4ERR_SEQ_FALSE_RETRY:
                log.info("%s: slot %d seq %d was answered for the interrupted request before it; "
                         "sending again as a new request", path.address, slot.slotid, out.seqid)
            out.seqid = self.table.begin(slot)
        elif act is Act.RESEND:
            await trio.sleep(decision.wait)
        elif act is Act.OUT_OF_TIME:
            # (not completed: the slot is marked interrupted, as a server that says DELAY has not
            # run the request, and one whose reply was lost on the way may have)
            raise NFS4Error(decision.status, main_op(out.ops))
        elif act is Act.STEP_BACK:
            # (the machine steps back only after an interrupted request: the table always can)
            self.table.misordered(slot)
            out.seqid = self.table.begin(slot)
        elif act is Act.OTHER_SLOT:
            self.table.update_from_server(max(0, slot.slotid - 1), max(0, slot.slotid - 1))
            self.table.refused(slot)
            self._release(slot, completed=True)
            out.slot = None  # (released: not again, should no other slot be had)
            out.slot = await self._acquire(out.soft)
            out.seqid = self.table.begin(out.slot)
        elif act in (Act.NEW_SESSION, Act.NEW_CLIENT):
            out.completed = True
            raise self._lost(st)
        elif act is Act.LOST:
            raise self._lost(st)
        else:
            out.completed = True
            raise SessionError(f"SEQUENCE failed: {_name(st)}")

    @staticmethod
    def _after_bad_reply(out: _Outgoing, error: ProtocolError, cause: BaseException | None) -> None:
        """A reply broke the protocol (its connection is closed): the request goes again on a new
        one, or fails with ``error`` (from ``cause``) as the machine decides."""
        if out.machine().feed(Failed(Fault.BAD_REPLY)).act is Act.PROTOCOL_ERROR:
            raise error from cause

    def _check(self, out: _Outgoing, res: COMPOUND4res, answered: float, check: Check | None,
               prepared: Prepared | None) -> tuple[int, CompoundMismatch | None]:
        """Check a reply to SEQUENCE + ``out``'s operations (raising XdrError if it breaks the protocol)
        and apply its SEQUENCE result (the reply came at ``answered``, trio clock); returns SEQUENCE's
        status, and what is wrong with the other results when SEQUENCE succeeded for this very request
        (session, slot, sequence id) but they do not answer the operations: a reply the server cached
        for another request (None: they do). When they do, SEQUENCE's result is removed from ``res``,
        and ``check`` (the caller's) runs on the results of the operations if the COMPOUND succeeded.

        A request of a prepared shape (:class:`.compound_shapes.CompoundShape`, ``out.shape``) whose
        reply of success the shape's decoder took (``out.replied``; ``res`` then holds no results)
        hands what it decoded to ``prepared`` instead; any other reply to it is checked as above."""
        ops, slot = out.ops, out.slot
        assert slot is not None
        if out.replied is not None:
            seq_ok, values = out.replied
            self._sequence_ok(seq_ok, slot, answered)
            assert prepared is not None
            prepared(values)
            return c.NFS4_OK, None
        if not res.resarray:
            if res.status == c.NFS4ERR_MINOR_VERS_MISMATCH:  # (the one reply with no result at all)
                raise NFS4Error(res.status, c.OP_SEQUENCE)
            raise CompoundMismatch(f"no SEQUENCE result (COMPOUND status {_name(res.status)})", c.OP_SEQUENCE)
        seq = res.resarray[0]
        try:
            check_compound_res([_SEQUENCE, *ops], res)
        except CompoundMismatch as e:
            if (seq.opnum == c.OP_SEQUENCE and seq.status == c.NFS4_OK and e.op != c.OP_SEQUENCE
                    and self._answers(seq.res, slot)):
                return c.NFS4_OK, e
            raise
        if seq.status == c.NFS4_OK:
            self._sequence_ok(seq.res, slot, answered)
            res.resarray = res.resarray[1:]
            if check is not None and res.status == c.NFS4_OK:
                check(res.resarray)
        return int(seq.status), None

    def _violated(self, path: Path, ops: Sequence[Any], e: BaseException) -> ProtocolError:
        """A reply from ``path`` broke the protocol: close the connection (its framing can no longer be
        trusted; it reconnects) and make the error the caller sees if the request gives up."""
        op = getattr(e, "op", None)
        if op is None or op == c.OP_SEQUENCE:  # (what the request was about, rather than its plumbing)
            op = main_op(ops) or op
        reason = str(e) if isinstance(e, XdrError) else f"unusable reply ({type(e).__name__}: {e})"
        rpc = path.rpc
        if rpc is not None:
            rpc.misbehaved("violation", f"{reason}; the connection is closed, the request goes again on a new one")
        self.violations += 1
        self.paths.kill(path)
        return ProtocolError(reason, path.address, op)
    def _lost(self, status: int) -> SessionLost:
        self.kill(status)
        return SessionLost(status)

    def _start(self, out: _Outgoing, path: Path, rpc: RpcConnection, previous: Path | None,
               tries: int) -> tuple[int, Packer, float, float]:
        """The request's next send on ``path`` (``tries``: its sends before with this sequence id,
        the last unanswered on ``previous``), encoded: its XID, its message, when it goes (trio
        clock, marked in the call's times) and how long it waits for its reply."""
        if tries:
            self.resends += 1
            self.stats.rpc_resent(previous.address if previous is not None else path.address)
            path.failovers += previous is not None and previous is not path
        else:  # (SEQUENCE's fields, the same in every send of this try of the request)
            slot = out.slot
            assert slot is not None
            out.sequence = (self.sessionid, out.seqid, slot.slotid, self.table.highest_in_use, out.cachethis)
        xid, p = rpc.start_call(c.NFSPROC4_COMPOUND, out.cred)
        if out.shape is not None:
            out.shape.encode_sequenced(p, out.tag, self.minorversion, *out.sequence, out.ops)
        else:
            encode_sequenced_args(p, out.tag, self.minorversion, *out.sequence, out.ops)
        start = self.now()
        out.sent(start, unanswered=tries > 0)
        timeout = self.policy.timeo
        if out.deadline is not None:
            timeout = max(0.001, min(timeout, out.deadline - start))
        return xid, p, start, timeout

    async def _unanswered(self, out: _Outgoing, path: Path, e: BaseException, xid: int, start: float,
                          tries: int) -> bool:
        """A send of ``out`` on ``path`` brought no reply but ``e``: the request goes again (returns
        False), fails (raises), or lets ``e`` through as it is (returns True)."""
        if isinstance(e, RpcTimeout):
            return self._timed_out(out, path, e, xid, start, tries)
        if isinstance(e, KerberosAccessError):
            # (no usable Kerberos credentials: the request never reached SEQUENCE, and the slot's
            # next request takes its sequence id again)
            assert out.slot is not None
            self.table.refused(out.slot)
            out.completed = True
            return True
        if isinstance(e, ReplyError):  # the server answered the RPC itself with an error
            self.policy.answered()
            raise e.located(main_op(out.ops)) from None
        # (ClosedResourceError: the connection was dropped, as stalled, during our send)
        assert isinstance(e, (TransportError, trio.ClosedResourceError))
        return await self._connection_failed(out, path, e, xid, start)

    def _path_chosen(self, out: _Outgoing, previous: Path | None) -> Path | None:
        """The path the request goes on now, as the session's paths choose it (None: no live path
        now, one is to be waited for: :meth:`_path_waited`)."""
        if self.dead is not None:
            raise SessionLost(self.dead)
        if out.soft and self.policy.unanswered_since is not None:  # (failing fast: not on the way of every call)
            raise self._unreachable()
        pin = out.pin
        if pin is None:
            return self.paths.choose(out.payload, avoid=previous, group=self.group)
        if pin.rpc is None or not pin.rpc.alive:
            raise TransportError("the pinned path is not connected", pin.address)
        return pin

    async def _path_waited(self, out: _Outgoing) -> Path:
        """The first path of the session's group to come live, waited for until the request's
        deadline (a soft request's: until the session fails fast)."""
        policy = self.policy
        try:
            return await self.paths.wait_live(
                out.deadline, group=self.group, give_up=(lambda: policy.failing_fast) if out.soft else None
            )
        except NoPathError as e:
            if out.soft and policy.failing_fast:
                raise self._unreachable() from e
            raise self._give_up(str(e)) from e

    def _timed_out(self, out: _Outgoing, path: Path, e: RpcTimeout, xid: int, start: float, tries: int) -> bool:
        """A send of the request went unanswered within its time: drop the stalled connection and
        resend (returns False), give up (raises), or let ``e`` through as it is (returns True)."""
        past = out.deadline is not None and trio.current_time() >= out.deadline
        act = out.machine().feed(Failed(Fault.TIMEOUT, past_deadline=past)).act
        if act is Act.RAISE:
            return True
        slot = out.slot
        assert slot is not None
        log.info("%s: request on slot %d seq %d timed out; resending", path.address, slot.slotid, out.seqid)
        path.last_error = str(e)
        trace.rpc_failed(xid, path.address, (_SEQUENCE, *out.ops), str(e), trio.current_time() - start)
        self.paths.kill(path)  # a stalled connection: drop it so it reconnects
        if act is Act.GIVE_UP:
            raise self._give_up(f"no reply after {tries} tries within {self.policy.budget:g} s") from e
        return False

    async def _connection_failed(self, out: _Outgoing, path: Path, e: Exception, xid: int, start: float) -> bool:
        """The request's connection ended (or refused it): resend, on another path if there is one
        (returns False), fail (raises), or let ``e`` through as it is (returns True)."""
        policy = self.policy
        fault = (Fault.VIOLATION if isinstance(e, ProtocolViolation)
                 else Fault.REFUSED if isinstance(e, CallFailed) else Fault.LOST)
        past = out.deadline is not None and trio.current_time() >= out.deadline
        act = out.machine().feed(Failed(fault, failing_fast=out.soft and policy.failing_fast, past_deadline=past)).act
        if act is Act.RAISE:
            return True
        trace.rpc_failed(xid, path.address, (_SEQUENCE, *out.ops), str(e), trio.current_time() - start)
        if fault is Fault.VIOLATION:
            self.violations += 1
        if act is Act.PROTOCOL_ERROR:
            raise ProtocolError(str(e).removeprefix(f"{path.address}: "), path.address, main_op(out.ops)) from e
        if act is Act.REFUSED:
            raise SessionError(f"{path.address}: the request was refused again: {e}") from e
        if act is Act.UNREACHABLE:
            raise self._unreachable() from e
        slot = out.slot
        assert slot is not None
        log.info("%s: connection lost with slot %d seq %d in flight (%s); resending",
                 path.address, slot.slotid, out.seqid, e)
        if act is Act.GIVE_UP:
            raise self._give_up(f"{e}") from e
        if self.paths.choose(out.payload, avoid=path, group=self.group) in (None, path):
            await trio.sleep(RESEND_PAUSE)  # no other path: do not spin on a dead one
        else:
            # a send that fails at once (EPIPE) does not yield: let the receive loops see
            # their connections end, or two dead paths that still look up take turns forever
            await trio.lowlevel.checkpoint()
        return False

    def _received(self, out: _Outgoing, path: Path, mark: Mark, p: Packer, u: Unpacker, xid: int, start: float,
                  resent: bool) -> tuple[COMPOUND4res, float]:
        """The reply ``u`` to the request's send ``p`` on ``path`` at ``start`` (``resent``: not its
        first with this sequence id): the path's and the policy's figures told, decoded, traced and
        counted; returns it and when it came. XdrError (its connection closed) if it is not one."""
        answered = self.now()
        seconds = answered - start
        sent = len(p)  # (the call's bytes, for the path's figures and the statistics)
        path.answered(xid, mark, sent, u, out.payload, start, answered, timed=out.timed)
        if self.policy.unanswered_since is not None:
            self.policy.answered()
        received = u.carried()  # (over RPC-over-RDMA, with what Write chunks brought)
        if resent:
            self.replays += 1
        shape = out.shape
        try:
            out.replied = None if shape is None else shape.decode(u, out.ops)
            if out.replied is not None:
                res = _SHAPED_REPLY
            else:
                res = decode_compound_res(u)
                u.done()  # (trailing bytes: a reply cut short inside, or something after it)
        except XdrError as e:
            trace.rpc_failed(xid, path.address, (_SEQUENCE, *out.ops), f"malformed reply: {e}", seconds)
            raise
        if trace.tracer() is not None:  # (the operations' list made only for a trace that is on)
            trace.rpc_done(xid, path.address, (_SEQUENCE, *out.ops), res.status, seconds)
        shaped = None if out.replied is None or shape is None else shape.data(out.replied[1])
        self.stats.rpc_done(path, out.ops, res, seconds, sent, received, resent, out, shaped)
        return res, answered

    def _answers(self, res: SEQUENCE4resok, slot: Slot) -> bool:
        """Whether a successful SEQUENCE result names this session, ``slot`` and its sequence id."""
        return res.sr_sessionid == self.sessionid and res.sr_slotid == slot.slotid and res.sr_sequenceid == slot.seqid

    def _sequence_ok(self, res: SEQUENCE4resok, slot: Slot, answered: float) -> None:
        if not (res.sr_sessionid == self.sessionid and res.sr_slotid == slot.slotid
                and res.sr_sequenceid == slot.seqid):  # (_answers, inline: every reply comes here)
            e = XdrError("SEQUENCE reply does not match the request (session, slot or sequence id)")
            e.op = c.OP_SEQUENCE  # type: ignore[attr-defined]
            raise e
        self.table.update_from_server(res.sr_highest_slotid, res.sr_target_highest_slotid)
        self.last_renewal = answered
        if res.sr_status_flags:
            self.status_flags |= res.sr_status_flags
            self.flags_event.set()


def _name(status: int) -> str:
    return c.nfsstat4(status).name if status in _STATUS_NAMES else str(status)


class _Outgoing(CallTimes):
    """One request as :meth:`Session.compound` carries it: what to send, its machine, its slot; and
    its call's times and figures for the statistics (it is its call's :class:`~pynfsrdma._stats.CallTimes`:
    one record per request). A class of slots with its arguments in order: it is made for every request."""

    __slots__ = ("cachethis", "completed", "cred", "deadline", "failing_fast", "hints", "idempotent", "ops",
                 "payload", "pin", "probe", "replied", "request", "seqid", "sequence", "shape", "slot", "soft", "tag",
                 "timed")

    def __init__(self, started: float, figures: OpStats, shape: CompoundShape | None, ops: Sequence[Any],
                 cred: Credential, hints: ReplyHints, idempotent: bool, payload: int, tag: str, cachethis: bool,
                 pin: Path | None, soft: bool, timed: bool) -> None:
        CallTimes.__init__(self, started, figures, shape)
        self.shape = shape  # the prepared COMPOUND it is, if one
        self.ops = ops
        self.cred = cred
        self.hints = hints
        self.idempotent = idempotent  # its operations may run twice
        self.payload = payload  # its bulk bytes (its weight on a path)
        self.tag = tag
        self.cachethis = cachethis
        self.pin = pin  # the one path it may go on (a probe), its faults let through
        self.soft = soft  # fail at once when the server is taken for gone meanwhile
        self.timed = timed  # its time is a round trip (not the server's storage work)
        self.probe = False  # it asks whether the server answers again (soft: the server taken for gone)
        self.failing_fast = False  # soft, when it began, while the server was taken for gone: no free slot taken
        self.slot: Slot | None = None
        self.seqid = 0
        self.deadline: float | None = None  # when it gives up (None: never)
        self.completed = False  # a reply to its sequence id came (its slot is released as such)
        self.request: Request | None = None  # its machine, once anything but a settling reply came (see machine)
        # its last reply as its shape's prepared decoder took it: SEQUENCE's result and what it decoded
        self.replied: tuple[SEQUENCE4resok, tuple[Any, ...]] | None = None
        # SEQUENCE's fields for the sends of its current try: session, sequence id, slot, highest slot, cachethis
        self.sequence: tuple[bytes, int, int, int, bool] = (b"", 0, 0, 0, False)

    def machine(self) -> Request:
        """The request's machine (:class:`.sequence.Request`): what it met so far, the decision on
        what comes. Made at its first event that :func:`.sequence.settles` does not settle: before
        that it has met nothing."""
        if self.request is None:
            self.request = Request(idempotent=self.idempotent, pinned=self.pin is not None)
        return self.request


# what a request whose reply its shape's decoder took returns: success, no results (what it decoded
# went to its ``prepared``). One for all: its holders read it, none changes it.
_SHAPED_REPLY = COMPOUND4res(c.NFS4_OK, "", [])


class _Sequence:
    """What stands for the SEQUENCE in front of a request's operations when its reply is checked."""

    OPNUM = c.OP_SEQUENCE


_SEQUENCE = _Sequence()
