"""Byte-range locks (RFC 8881 section 9), one COMPOUND each: LOCK (blocking locks asked for again,
sooner when CB_NOTIFY_LOCK says), LOCKT, LOCKU with FREE_STATEID, reclaim after a server restart,
and the locks recorded as lost when the server lost them. What to do when LOCK meets lost state is
``lost_lock_state``'s decision; the lock owners and ranges are ``locks``' (sans-I/O)."""

from __future__ import annotations

import errno
import logging
import weakref
from collections.abc import Hashable
from typing import Any

import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import result_of
from .._proto.nfs4.types import FREE_STATEID4args, LOCK4args, LOCKT4args, LOCKU4args, PUTFH4args, lock_owner4
from .._rpc.auth import Credential
from .compounds import NO_HINTS
from .delegations import Delegations
from .locks import TO_EOF, LockConflict, LockDenied, LockState, plain_lock_type
from .lost_lock_state import LockThen, on_lock_error
from .lost_state import STATE_LOST
from .open_state import OpenFile, current

log = logging.getLogger(__name__)

# what LOCKU meets when the server no longer has the lock state (or the open) it names
_LOCK_STATE_GONE = STATE_LOST
# a blocked lock (a LOCK with READW_LT/WRITEW_LT answered NFS4ERR_DENIED) is asked for again after
# LOCK_POLL_FIRST, then twice as long each time, up to LOCK_POLL_MAX; up to LOCK_POLL_NOTIFIED when the
# server said at OPEN that it may send CB_NOTIFY_LOCK (which wakes the waiter at once; the RFC lets it
# be lost, so the waiter still asks now and then: RFC 8881 9.6, 20.11)
LOCK_POLL_FIRST = 0.1
LOCK_POLL_MAX = 5.0
LOCK_POLL_NOTIFIED = 30.0


class ByteRangeLocks:
    """LOCK, LOCKT, LOCKU, and the lock states they keep: ``NFSv4.byte_range_locks``, an object given
    the COMPOUND runner with its delegations (a file's delegation goes back before its first LOCK)."""

    def __init__(self, compounds: Delegations) -> None:
        self.compounds = compounds
        # one LOCK or LOCKU of a lock state at a time (each moves its stateid's seqid on)
        self._lock_serial: weakref.WeakKeyDictionary[LockState, trio.Lock] = weakref.WeakKeyDictionary()
        # blocked locks waiting, by (file handle, lock owner name): set by CB_NOTIFY_LOCK
        self._lock_waiters: dict[tuple[bytes, bytes], set[trio.Event]] = {}
        compounds.client.backchannel.on_notify_lock = self._notify_lock

    async def lock(
        self, of: OpenFile, owner: Hashable, locktype: int, offset: int, length: int, cred: Credential, *,
        wait: bool = False, reclaim: bool = False, path: str | None = None,
    ) -> None:
        """LOCK ``length`` bytes (TO_EOF: to end of file, however it grows) from ``offset`` of the file
        open as ``of``, READ_LT or WRITE_LT, for the lock owner of ``owner`` (any hashable key: FUSE's
        lock_owner, a key per open file for flock, ...). What that owner held under the range is
        replaced (an upgrade or downgrade). A conflicting lock raises :class:`LockDenied` (EAGAIN)
        carrying it; with ``wait`` the lock is asked for again (READW_LT/WRITEW_LT, sooner when a
        CB_NOTIFY_LOCK says it may be free) until granted: trio cancellation ends the wait, and a
        lock granted while the caller was being cancelled is given back, the owner then holding what
        it held before. Locks whose state the server lost raise :class:`LockLost` (EIO)."""
        locktype = plain_lock_type(locktype)
        if of.closed:
            raise OSError(errno.EBADF, "lock on a closed file", path)
        if of.local:  # locks need open state of the file's own on the server
            await self.compounds.return_delegation(of.fh)
        st = self.compounds.locks.state(of, owner)
        st.users += 1
        try:
            st.check(path)
            if wait:
                await self._lock_wait(st, locktype, offset, length, cred, path)
            else:
                await self._lock_once(st, locktype, offset, length, cred, reclaim=reclaim, path=path)
        finally:
            st.users -= 1
            self._settle(st)  # (a lock owner's first LOCK on this open, refused: no state is left)

    async def lockt(
        self, of: OpenFile, owner: Hashable, locktype: int, offset: int, length: int, cred: Credential,
        path: str | None = None,
    ) -> LockConflict | None:
        """LOCKT: the lock that would stand in the way of ``owner`` locking the range (the owner's own
        locks never do), or None."""
        name = lock_owner4(self._clientid(), self.compounds.locks.owner_name(owner))
        args = LOCKT4args(plain_lock_type(locktype), offset, length, name)
        res = await self.compounds.client.compound([PUTFH4args(of.fh), args], cred, NO_HINTS)
        r = res.resarray[-1] if res.resarray else None
        if res.status == c.NFS4_OK:
            return None
        if r is not None and r.opnum == c.OP_LOCKT and r.status == c.NFS4ERR_DENIED and r.res is not None:
            return LockConflict.from_denied(r.res)
        raise NFS4Error(res.status, r.opnum if r is not None else None, path)

    async def locku(
        self, of: OpenFile, owner: Hashable, offset: int, length: int, cred: Credential, path: str | None = None,
    ) -> None:
        """LOCKU the range for ``owner`` (``0, TO_EOF``: every lock it holds on the file, as FUSE's
        flush and release need). When nothing is left, the lock stateid is freed in the same COMPOUND
        (FREE_STATEID: in NFSv4.1 a lock stateid outlives its last lock until freed, RFC 8881 8.2.4).
        Unlocking what the server lost already sends nothing and clears the loss once nothing is left."""
        st = self.compounds.locks.get(of, owner)
        if st is None:
            return
        st.users += 1
        try:
            await self._locku(st, offset, length, cred, path)
        finally:
            st.users -= 1
            self._settle(st)

    async def _locku(self, st: LockState, offset: int, length: int, cred: Credential, path: str | None) -> None:
        async with self._serial(st):
            sent = st.stateid
            if sent is None or st.lost is not None:
                st.unlocked(None, offset, length)
                if not st.ranges:
                    st.lost = None  # nothing left that was lost
                return
            free = st.ranges.covered_by(offset, length)
            ops: list[Any] = [PUTFH4args(st.of.fh), LOCKU4args(c.WRITE_LT, 0, sent, offset, length)]
            if free:
                ops.append(FREE_STATEID4args(current(sent)))
            with trio.CancelScope(shield=True):  # (its outcome moves the stateid on: wait for it)
                res = await self.compounds.client.compound(ops, cred, NO_HINTS)
            done = {r.opnum: r for r in res.resarray}
            unlocked = done.get(c.OP_LOCKU)
            if unlocked is not None and unlocked.status == c.NFS4_OK:
                st.unlocked(unlocked.res, offset, length)
                if not free:
                    return
                freed = done.get(c.OP_FREE_STATEID)
                if freed is not None and freed.status == c.NFS4_OK:
                    st.stateid = None
                else:  # the server holds locks we did not know of: the stateid stays (freed at CLOSE)
                    log.info("FREE_STATEID of a lock state after its last unlock: %s",
                             NFS4Error(res.status, c.OP_FREE_STATEID, path))
                return
            if res.status in _LOCK_STATE_GONE:
                # the server has none of these locks any more: what was unlocked is unlocked
                st.unlocked(None, offset, length)
                if st.ranges:
                    self.lose_lock_state(st, f"the server no longer had them ({NFS4Error(res.status).name})")
                else:
                    st.stateid = None
                return
            raise NFS4Error(res.status, unlocked.opnum if unlocked is not None else None, path)

    async def reclaim_locks(self, st: LockState, cred: Credential) -> None:
        """LOCK with reclaim each range ``st`` held before the server restarted (its open was just
        reclaimed: the first LOCK introduces the lock owner again with the new open stateid)."""
        if st.lost is not None:
            return  # lost before: stays lost until the owner unlocks
        held = list(st.ranges)
        st.stateid = None
        if not held:
            self._settle(st)
            return
        for offset, length, locktype in held:
            try:
                await self._send_lock(st, locktype, offset, length, cred, reclaim=True)
            except NFS4Error as e:
                self.lose_lock_state(st, f"not reclaimed after a server restart ({e.name})")
                return
        self.compounds.lock_counts["reclaimed"] += 1

    def lock_state(self, of: OpenFile, owner: Hashable) -> LockState | None:
        """The locks ``owner`` holds on ``of`` (None: none), with ``lost`` set when the server lost them."""
        return self.compounds.locks.get(of, owner)

    def _clientid(self) -> int:
        return self.compounds.client.identity.clientid if self.compounds.client.identity else 0

    def _serial(self, st: LockState) -> trio.Lock:
        lock = self._lock_serial.get(st)
        if lock is None:
            lock = self._lock_serial[st] = trio.Lock()
        return lock

    async def _send_lock(
        self, st: LockState, locktype: int, offset: int, length: int, cred: Credential, *,
        reclaim: bool = False, path: str | None = None,
    ) -> None:
        """One LOCK for ``st``; its outcome is waited for whatever the caller's cancellation (it moves
        the lock stateid on, and a lock granted unknown to us would stay until the file is closed)."""
        args = LOCK4args(locktype, reclaim, offset, length, st.locker(self._clientid()))
        with trio.CancelScope(shield=True):
            res = await self.compounds.client.compound([PUTFH4args(st.of.fh), args], cred, NO_HINTS, _recovering=reclaim)
        r = res.resarray[-1] if res.resarray else None
        if res.status == c.NFS4_OK and r is not None and r.opnum == c.OP_LOCK:
            st.granted(r.res.lock_stateid, offset, length, locktype)
            self.compounds.lock_counts["granted"] += 1
            return
        if r is not None and r.opnum == c.OP_LOCK and r.status == c.NFS4ERR_DENIED and r.res is not None:
            self.compounds.lock_counts["denied"] += 1
            raise LockDenied(LockConflict.from_denied(r.res), c.OP_LOCK, path)
        raise NFS4Error(res.status, r.opnum if r is not None else None, path)

    async def _lock_once(
        self, st: LockState, locktype: int, offset: int, length: int, cred: Credential, *,
        reclaim: bool = False, path: str | None = None,
    ) -> None:
        async with self._serial(st):
            before = st.ranges.within(offset, length)
            attempts = 0
            while True:
                attempts += 1
                st.check(path)
                basis = st.stateid if st.stateid is not None else st.of.stateid
                try:
                    await self._send_lock(st, locktype, offset, length, cred, reclaim=reclaim, path=path)
                    break
                except NFS4Error as e:
                    then = on_lock_error(
                        e.status, denied=isinstance(e, LockDenied), attempts=attempts,
                        replaced=(st.stateid if st.stateid is not None else st.of.stateid) != basis,
                        holds_ranges=bool(st.ranges), has_lock_stateid=st.stateid is not None,
                    )
                    if then is LockThen.FAIL:
                        raise
                    if then is LockThen.LOSE:
                        self.lose_lock_state(st, f"the server no longer had them ({e.name})")
                        st.check(path)  # (raises LockLost)
                        raise
                    if then is LockThen.NEW_LOCK_OWNER:
                        st.stateid = None
            try:
                await trio.lowlevel.checkpoint_if_cancelled()
            except trio.Cancelled:
                with trio.CancelScope(shield=True):
                    await self._put_back(st, offset, length, before, cred)
                raise

    async def _put_back(
        self, st: LockState, offset: int, length: int,
        before: tuple[list[tuple[int, int, int]], list[tuple[int, int]]], cred: Credential,
    ) -> None:
        """Make the range as ``before`` had it (a lock granted while its caller was being cancelled):
        what was held goes back to its type (a downgrade, always granted), the rest is unlocked, and
        a lock state left with nothing is freed with the last LOCKU."""
        held, gaps = before
        try:
            for o, n, t in held:
                await self._send_lock(st, t, o, n, cred)
            for o, n in gaps:
                if st.stateid is None:
                    break
                free = st.ranges.covered_by(o, n)
                ops: list[Any] = [PUTFH4args(st.of.fh), LOCKU4args(c.WRITE_LT, 0, st.stateid, o, n)]
                if free:
                    ops.append(FREE_STATEID4args(current(st.stateid)))
                res = await self.compounds.client.compound(ops, cred, NO_HINTS)
                if res.status != c.NFS4_OK:
                    raise NFS4Error(res.status, res.resarray[-1].opnum if res.resarray else None)
                st.unlocked(result_of(res.resarray, c.OP_LOCKU), o, n)
                if free:
                    st.stateid = None
        except NFS4Error as e:
            log.warning("a lock granted to a cancelled request could not be given back: %s", e)

    async def _lock_wait(
        self, st: LockState, locktype: int, offset: int, length: int, cred: Credential, path: str | None,
    ) -> None:
        blocking = c.READW_LT if locktype == c.READ_LT else c.WRITEW_LT
        key = (st.of.fh, st.owner.name)
        delay = LOCK_POLL_FIRST
        while True:
            woken = trio.Event()
            waiters = self._lock_waiters.setdefault(key, set())
            waiters.add(woken)  # (before asking: a CB_NOTIFY_LOCK right after the refusal is not missed)
            try:
                try:
                    await self._lock_once(st, blocking, offset, length, cred, path=path)
                    return
                except LockDenied:
                    pass
                with trio.move_on_after(delay):
                    await woken.wait()
            finally:
                waiters.discard(woken)
                if not waiters and self._lock_waiters.get(key) is waiters:
                    del self._lock_waiters[key]
            if st.of.closed:
                raise OSError(errno.EBADF, "the file was closed while a lock was waited for", path)
            delay = min(delay * 2, LOCK_POLL_NOTIFIED if st.of.may_notify_lock else LOCK_POLL_MAX)

    def _notify_lock(self, fh: bytes, owner: lock_owner4) -> None:
        """CB_NOTIFY_LOCK (RFC 8881 20.11): a lock this owner waits for on this file may be free; its
        waiters ask again now (a hint: it grants nothing)."""
        self.compounds.lock_counts["notified"] += 1
        for woken in self._lock_waiters.get((bytes(fh), bytes(owner.owner)), ()):
            woken.set()

    def release_ops(self, of: OpenFile) -> list[Any]:
        """The operations that give up every lock held on ``of`` (LOCKU of all, FREE_STATEID), to go
        before its CLOSE in one COMPOUND (after PUTFH of its file)."""
        ops: list[Any] = []
        for st in self.compounds.locks.of_open(of):
            if st.stateid is None or st.lost is not None:
                continue
            if st.ranges:
                ops.append(LOCKU4args(c.WRITE_LT, 0, st.stateid, 0, TO_EOF))
            ops.append(FREE_STATEID4args(current(st.stateid)))
        return ops

    def forget_locks(self, of: OpenFile) -> None:
        for st in self.compounds.locks.of_open(of):
            self.compounds.locks.forget(st)

    def _settle(self, st: LockState) -> None:
        """Forget ``st`` once it is idle (see :attr:`LockState.idle`)."""
        if st.idle:
            self.compounds.locks.forget(st)

    def lose_lock_state(self, st: LockState, why: str) -> None:
        log.warning("byte-range locks of lock owner %r lost: %s", st.owner.name.decode(), why)
        st.lose(why)
        self.compounds.lock_counts["lost"] += 1

    def lose_locks(self, of: OpenFile, why: str) -> None:
        for st in self.compounds.locks.of_open(of):
            if st.ranges and st.lost is None:
                self.lose_lock_state(st, why)
            elif not st.ranges:
                st.stateid = None
                self._settle(st)

