"""The client's state after the server lost or revoked some of it (RFC 8881 8.4.2, 8.6.2, 10.2.1): opens
reclaimed with CLAIM_PREVIOUS during the grace period after a server restart, with the byte-range
locks held on them; revoked stateids found with TEST_STATEID and freed, the opens and locks that
stood on them failed. What cannot be reclaimed is recorded as lost, never dropped in silence."""

from __future__ import annotations

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import result_of
from .._proto.nfs4.types import (
    FREE_STATEID4args,
    OPEN4args,
    PUTFH4args,
    TEST_STATEID4args,
    open_owner4,
    stateid4,
)
from .._session.client_id import ClientID
from .opens import Opens


class StateRecovery:
    """Reclaim after a server restart; revoked state: ``NFSv4.state_recovery``, an object given the
    COMPOUND runner with the state it recovers (opens, delegations, byte-range locks); it hooks
    itself to the runner's client ID."""

    def __init__(self, compounds: Opens) -> None:
        self.compounds = compounds
        compounds.client.reclaim_hooks.append(self._reclaim)
        compounds.client.state_revoked_hooks.append(self._revoked)

    async def _reclaim(self, client: ClientID) -> None:
        """After a server restart: reclaim every open with CLAIM_PREVIOUS during the grace period, and
        the byte-range locks held on it (LOCK with reclaim). What cannot be reclaimed is reported and
        recorded as lost (I/O by the lock owner then fails with EIO), never dropped in silence."""
        clientid = client.identity.clientid if client.identity else 0
        # delegations are not reclaimed: opens made under them are reclaimed as opens of their own
        for d in self.compounds.delegations.values():
            d.returning = True
            d.returned.set()
        self.compounds.delegations.clear()
        for of in list(self.compounds.opens.values()):
            args = OPEN4args(0, of.access | c.OPEN4_SHARE_ACCESS_WANT_NO_DELEG, c.OPEN4_SHARE_DENY_NONE,
                             open_owner4(clientid, of.owner), (c.OPEN4_NOCREATE, None),
                             (c.CLAIM_PREVIOUS, c.OPEN_DELEGATE_NONE))
            try:
                res = await self.compounds.run([PUTFH4args(of.fh), args], client.machine_cred, recovering=True)
            except NFS4Error as e:
                of.closed = True  # could not be reclaimed: further I/O on it fails cleanly
                self.compounds.opens.pop(id(of), None)
                self.compounds.byte_range_locks.lose_locks(of, f"the open they stood on was not reclaimed after a server restart ({e.name})")
                continue
            of.stateid, of.local = result_of(res, c.OP_OPEN).stateid, False
            self.compounds.reclaimed += 1
            for st in self.compounds.locks.of_open(of):
                await self.compounds.byte_range_locks.reclaim_locks(st, of.cred or client.machine_cred)

    async def _revoked(self, client: ClientID) -> None:
        """Some state was revoked: find which with TEST_STATEID, free it, and fail the opens that
        stood on it (an open made under a revoked delegation too: its data may be stale) and the
        locks (their owners' I/O fails with EIO)."""
        unique: dict[bytes, stateid4] = {}
        for of in self.compounds.opens.values():
            unique.setdefault(bytes(of.stateid.other), of.stateid)
        for d in self.compounds.delegations.values():
            unique.setdefault(bytes(d.stateid.other), d.stateid)
        for st in self.compounds.locks.all():
            if st.stateid is not None:
                unique.setdefault(bytes(st.stateid.other), st.stateid)
        if not unique:
            return
        stateids = list(unique.values())
        res = await self.compounds.run([TEST_STATEID4args(stateids)], client.machine_cred)
        codes = result_of(res, c.OP_TEST_STATEID).tsr_status_codes
        bad = set()
        for sid, code in zip(stateids, codes, strict=False):
            if code != c.NFS4_OK:
                await self.compounds.run([FREE_STATEID4args(sid)], client.machine_cred)
                bad.add(bytes(sid.other))
        for st in self.compounds.locks.all():
            if st.stateid is not None and bytes(st.stateid.other) in bad:
                self.compounds.byte_range_locks.lose_lock_state(st, "revoked by the server")
        for of in list(self.compounds.opens.values()):
            if bytes(of.stateid.other) in bad:
                of.closed = True
                self.compounds.opens.pop(id(of), None)
                self.compounds.byte_range_locks.lose_locks(of, "the open they stood on was revoked by the server")
        for fh, d in list(self.compounds.delegations.items()):
            if bytes(d.stateid.other) in bad:
                del self.compounds.delegations[fh]
                d.returning = True
                d.returned.set()

