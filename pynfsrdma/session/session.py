"""One NFSv4.1 session: SEQUENCE on every COMPOUND, the slot table, and resending.

A request takes a slot and the slot's next sequence id, and keeps both until a reply arrives: when
its connection fails (or stalls past the per-try timeout) it is sent again on another live path,
or on the same path once it reconnects, with the SAME slot and sequence id (RFC 8881 section
2.10.6.2: the server answers a retry it already executed from its reply cache).

What this class does not decide: what to do when the session itself is gone (BADSESSION and its
kin) or the client ID is stale. It raises :class:`SessionLost` and the owner recovers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import trio

from .. import trace
from ..proto.nfs4 import const as c
from ..proto.nfs4.compound import COMPOUND4args, COMPOUND4res, decode_compound_res, encode_compound_args
from ..proto.nfs4.types import SEQUENCE4args, SEQUENCE4resok
from ..rpc.auth import Credential
from ..rpc.errors import RpcTimeout
from ..stats import RpcStats, collector_for
from ..transport.base import NO_HINTS, CallFailed, ReplyHints, TransportError
from ..xdr import XdrError
from .errors import ServerUnreachable, SessionError
from .paths import NoPathError, Path, PathSet
from .slot_table import Slot, SlotTable

log = logging.getLogger(__name__)

# SEQUENCE statuses after which the session cannot be used (the owner makes a new one)
SESSION_LOST = frozenset({c.NFS4ERR_BADSESSION, c.NFS4ERR_DEADSESSION, c.NFS4ERR_CONN_NOT_BOUND_TO_SESSION})
# statuses meaning the client ID is gone
CLIENT_LOST = frozenset({c.NFS4ERR_STALE_CLIENTID, c.NFS4ERR_EXPIRED})

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

MAX_DELAY_BACKOFF = 5.0
MAX_REFUSED = 1  # resends of a request its transport refused (CallFailed) before failing it
RESEND_PAUSE = 0.01  # before resending on the same (reconnecting) path
MAX_MISORDERED_RETRIES = 2
MAX_BADSLOT_RETRIES = 4
MAX_UNCACHED_RETRIES = 2


def is_idempotent(ops: Sequence[Any]) -> bool:
    """Whether running ``ops`` twice is the same as running them once (see IDEMPOTENT_OPS)."""
    return all(getattr(op, "OPNUM", None) in IDEMPOTENT_OPS for op in ops)


class SessionLost(Exception):
    """The session (or the client ID behind it) is gone; ``status`` says which."""

    def __init__(self, status: int) -> None:
        super().__init__(c.nfsstat4(status).name if status in _STATUS_NAMES else str(status))
        self.status = status


_STATUS_NAMES = frozenset(int(s) for s in c.nfsstat4)


@dataclass(slots=True)
class RetryPolicy:
    """How long a request keeps trying (the mount options hard/soft, timeo, retrans)."""

    timeo: float = 60.0  # seconds one try waits for its reply before the path is suspected
    retrans: int = 2  # soft: tries after the first before giving up
    hard: bool = True  # hard: keep trying until a path answers


@dataclass(slots=True)
class SequenceFlags:
    """What SEQ4_STATUS flags asked of the owner; read and cleared by it."""

    flags: int = 0


class Session:
    """The fore channel of one session, spread over the paths of a :class:`PathSet`."""

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
        self._slot_waiters = trio.lowlevel.ParkingLot()
        self.status_flags = 0  # union of SEQ4_STATUS flags seen since the owner last looked
        self.flags_event = trio.Event()
        self.last_renewal = trio.current_time()
        self.dead: int | None = None  # the status that killed the session
        self.resends = 0
        self.replays = 0  # resends answered (the server may have executed the first send)
        # per-operation figures for `pynfsrdma stats`; shared by the sessions of one path set
        self.stats = stats if stats is not None else collector_for(paths)

    # -- slots ----------------------------------------------------------------------------------------
    async def _acquire(self) -> Slot:
        while True:
            if self.dead is not None:
                raise SessionLost(self.dead)
            slot = self.table.try_acquire()
            if slot is not None:
                return slot
            await self._slot_waiters.park()

    def _release(self, slot: Slot, *, completed: bool) -> None:
        self.table.release(slot, completed=completed)
        self._slot_waiters.unpark()

    def kill(self, status: int) -> None:
        """Mark the session unusable (every waiter fails with SessionLost)."""
        if self.dead is None:
            self.dead = status
        self._slot_waiters.unpark_all()

    # -- requests -------------------------------------------------------------------------------------
    async def compound(
        self,
        ops: Sequence[Any],
        cred: Credential,
        hints: ReplyHints = NO_HINTS,
        *,
        payload: int = 0,
        tag: str = "",
        cachethis: bool | None = None,
        pin: Path | None = None,
    ) -> COMPOUND4res:
        """Send ``ops`` after a SEQUENCE; return the reply with SEQUENCE's result removed.

        ``payload`` is the request's bulk size (for choosing a path). ``cachethis`` None asks the
        server to keep the reply in its reply cache unless the request is idempotent (so that a
        resend after a lost connection is answered exactly once). ``pin``: send on that path only
        and let its faults through (a probe). Raises SessionLost when the session or client ID is
        gone, ServerUnreachable when a soft request ran out of time.
        """
        payload = payload or sum(hints.ddp_sizes)  # a READ's reply is its weight on a path
        idempotent = is_idempotent(ops)
        if cachethis is None:
            cachethis = not idempotent
        slot = await self._acquire()
        completed = False
        try:
            misordered = 0
            badslot = 0
            uncached = 0
            seqid = self.table.begin(slot)
            while True:
                res, tries = await self._send(slot, seqid, ops, cred, hints, payload, tag, cachethis, pin)
                seq = res.resarray[0] if res.resarray else None
                if seq is None or seq.opnum != c.OP_SEQUENCE:
                    raise SessionError("the server's reply does not start with SEQUENCE")
                st = seq.status
                retry_uncached = st == c.NFS4ERR_RETRY_UNCACHED_REP or (
                    st == c.NFS4_OK and res.status == c.NFS4ERR_RETRY_UNCACHED_REP
                )
                if retry_uncached and tries > 1 and idempotent and uncached < MAX_UNCACHED_RETRIES:
                    # the first send was executed and its reply not cached: run it again anew
                    uncached += 1
                    if st == c.NFS4_OK:
                        self._sequence_ok(seq.res, slot)
                    seqid = self.table.begin(slot)
                    continue
                if st == c.NFS4_OK:
                    completed = True
                    self._sequence_ok(seq.res, slot)
                    res.resarray = res.resarray[1:]
                    return res
                if st == c.NFS4ERR_DELAY:
                    # the server is still working on this slot's request: resend the same seqid
                    await trio.sleep(min(MAX_DELAY_BACKOFF, 0.05 * (2 ** min(misordered + badslot, 6))))
                    continue
                if st == c.NFS4ERR_SEQ_MISORDERED and misordered < MAX_MISORDERED_RETRIES:
                    misordered += 1
                    if self.table.misordered(slot):
                        seqid = self.table.begin(slot)
                        continue
                    raise self._lost(c.NFS4ERR_SEQ_MISORDERED)
                if st == c.NFS4ERR_BADSLOT and badslot < MAX_BADSLOT_RETRIES:
                    # the server has fewer slots than we thought: shrink, move to a lower slot
                    badslot += 1
                    self.table.update_from_server(max(0, slot.slotid - 1), max(0, slot.slotid - 1))
                    slot.seqid = (slot.seqid - 1) % (1 << 32)  # this seqid was not consumed
                    self._release(slot, completed=True)
                    slot = await self._acquire()
                    seqid = self.table.begin(slot)
                    continue
                if st in SESSION_LOST or st in CLIENT_LOST:
                    completed = True
                    raise self._lost(st)
                if st == c.NFS4ERR_SEQ_FALSE_RETRY:
                    # a reply cached under this seqid belongs to another request: our slot
                    # bookkeeping disagrees with the server's; the session must be replaced
                    raise self._lost(st)
                completed = True
                raise SessionError(f"SEQUENCE failed: {_name(st)}")
        finally:
            self._release(slot, completed=completed)

    def _lost(self, status: int) -> SessionLost:
        self.kill(status)
        return SessionLost(status)

    async def _send(
        self,
        slot: Slot,
        seqid: int,
        ops: Sequence[Any],
        cred: Credential,
        hints: ReplyHints,
        payload: int,
        tag: str,
        cachethis: bool,
        pin: Path | None = None,
    ) -> tuple[COMPOUND4res, int]:
        """Send one request until some path answers it, resending with the same slot/seqid.

        Returns the reply and the number of sends it took."""
        policy = self.policy
        deadline = None if policy.hard else trio.current_time() + policy.timeo * (policy.retrans + 1)
        args = COMPOUND4args(
            tag,
            self.minorversion,
            [
                SEQUENCE4args(
                    self.sessionid, seqid, slot.slotid, max(self.table.highest_in_use, slot.slotid), cachethis
                ),
                *ops,
            ],
        )
        tries = 0
        refused = 0
        previous: Path | None = None
        while True:
            if self.dead is not None:
                raise SessionLost(self.dead)
            path = pin if pin is not None else self.paths.choose(payload, avoid=previous, group=self.group)
            if pin is not None and (pin.rpc is None or not pin.rpc.alive):
                raise TransportError("the pinned path is not connected", pin.address)
            if path is None:
                try:
                    path = await self.paths.wait_live(deadline, group=self.group)
                except NoPathError as e:
                    raise ServerUnreachable(str(e)) from e
            rpc = path.rpc
            assert rpc is not None
            if rpc._watchdog is None and rpc.alive:
                # the connection's receive loop has ended and is about to fail its calls (between
                # its watchdog's end and RpcConnection.run's finally): it is lost, wait for that
                await trio.sleep(RESEND_PAUSE)
                continue
            if tries:
                self.resends += 1
                self.stats.rpc_resent(previous.address if previous is not None else path.address)
                path.failovers += previous is not None and previous is not path
            tries += 1
            xid, p = rpc.start_call(c.NFSPROC4_COMPOUND, cred)
            encode_compound_args(p, args)
            path.bytes_in_flight += payload
            path.calls += 1
            start = trio.current_time()
            path._sent[xid] = start
            timeout = policy.timeo
            if deadline is not None:
                timeout = max(0.001, min(timeout, deadline - start))
            try:
                u = await rpc.call_packed(xid, p, hints, timeout)
            except RpcTimeout as e:
                if pin is not None:
                    raise
                log.info(
                    "%s: request on slot %d seq %d timed out; resending", path.address, slot.slotid, seqid
                )
                path.last_error = str(e)
                trace.rpc_failed(xid, path.address, args.argarray, str(e), trio.current_time() - start)
                self.paths.kill(path)  # a stalled connection: drop it so it reconnects
                previous = path
                if deadline is not None and trio.current_time() >= deadline:
                    raise ServerUnreachable(f"{path.address}: no reply after {tries} tries") from e
                continue
            except (TransportError, trio.ClosedResourceError) as e:
                # (ClosedResourceError: the connection was dropped, as stalled, during our send)
                if pin is not None:
                    raise
                if isinstance(e, CallFailed):
                    # the transport refused this one call (RPC-over-RDMA ERR_CHUNK); the server did
                    # not run it. Once may be a passing fault; twice, the request itself is at fault.
                    refused += 1
                    if refused > MAX_REFUSED:
                        trace.rpc_failed(xid, path.address, args.argarray, str(e), trio.current_time() - start)
                        raise SessionError(f"{path.address}: the request was refused again: {e}") from e
                log.info(
                    "%s: connection lost with slot %d seq %d in flight (%s); resending",
                    path.address,
                    slot.slotid,
                    seqid,
                    e,
                )
                trace.rpc_failed(xid, path.address, args.argarray, str(e), trio.current_time() - start)
                previous = path
                if deadline is not None and trio.current_time() >= deadline:
                    raise ServerUnreachable(f"{path.address}: {e}") from e
                if self.paths.choose(payload, avoid=path, group=self.group) in (None, path):
                    await trio.sleep(RESEND_PAUSE)  # no other path: do not spin on a dead one
                continue
            finally:
                path.bytes_in_flight -= payload
                path._sent.pop(xid, None)
            path.observe_rtt(trio.current_time() - start)
            if tries > 1:
                self.replays += 1
            received = u.remaining()
            try:
                res = decode_compound_res(u)
            except XdrError as e:
                trace.rpc_failed(
                    xid, path.address, args.argarray, f"malformed reply: {e}", trio.current_time() - start
                )
                raise SessionError(f"{path.address}: malformed COMPOUND reply: {e}") from e
            seconds = trio.current_time() - start
            trace.rpc_done(xid, path.address, args.argarray, res.status, seconds)
            self.stats.rpc_done(path, ops, res, seconds, len(p), received, tries > 1)
            return res, tries

    def _sequence_ok(self, res: SEQUENCE4resok, slot: Slot) -> None:
        if (
            res.sr_sessionid != self.sessionid
            or res.sr_slotid != slot.slotid
            or res.sr_sequenceid != slot.seqid
        ):
            raise SessionError("SEQUENCE reply does not match the request (session, slot or sequence id)")
        self.table.update_from_server(res.sr_highest_slotid, res.sr_target_highest_slotid)
        self.last_renewal = trio.current_time()
        if res.sr_status_flags:
            self.status_flags |= res.sr_status_flags
            self.flags_event.set()


def _name(status: int) -> str:
    return c.nfsstat4(status).name if status in _STATUS_NAMES else str(status)
