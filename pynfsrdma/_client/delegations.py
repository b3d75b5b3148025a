"""Delegations (RFC 8881 10.2, 10.4): asking for them at OPEN, recording those granted, returning
them (DELEGRETURN) when recalled (CB_RECALL, CB_RECALL_ANY), at unmount, or before an OPEN they do
not cover; the opens made under one are OPENed for real first. CB_GETATTR on a file we hold a
write delegation of is answered from what we hold (:func:`cb_getattr_attrs`).

Attribute delegations (RFC 9754): when the server supports the time_deleg attributes, OPENs that
want delegations ask for one (OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS); under an
OPEN_DELEGATE_*_ATTRS_DELEG the holder keeps the access and modify times its reads and writes set,
answers CB_GETATTR with them and gives them back with a SETATTR before the DELEGRETURN, in the same
COMPOUND (:func:`delegreturn_ops`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import attrs_in, encode_fattr4
from .._proto.nfs4.compound import result_of
from .._proto.nfs4.types import (
    DELEGRETURN4args,
    OPEN4args,
    PUTFH4args,
    SETATTR4args,
    fattr4,
    open_owner4,
    stateid4,
)
from .._session.client_id import ClientID
from .compounds import Compounds
from .open_state import READ_DELEGATIONS, WRITE_DELEGATIONS, Delegation, OpenFile

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeldFile:
    """What the holder of a write delegation knows of the file that the server may not: its size as
    the holder's writes left it, and whether it has written data the server has not seen yet."""

    size: int
    dirty: bool


def cb_getattr_attrs(d: Delegation | None, held: HeldFile | None, requested: Sequence[int]) -> fattr4 | None:
    """The answer to CB_GETATTR (RFC 8881 10.4.3, 20.1): only the holder of a write delegation
    answers (None: NFS4ERR_BADHANDLE), with the size it sees and the change attribute the
    delegation was granted with, bumped while it has data the server has not seen (the server then
    knows the file was modified). Under an attribute delegation (RFC 9754) the access and modify
    times the holder keeps are answered too, as time_deleg_access/modify, when asked for and set.
    Of the attributes asked for, those are answered."""
    if d is None or not d.write or held is None:
        return None
    asked = set(attrs_in(requested))
    attrs: dict[int, Any] = {}
    if c.FATTR4_CHANGE in asked:
        attrs[c.FATTR4_CHANGE] = d.change + 1 if held.dirty else d.change
    if c.FATTR4_SIZE in asked:
        attrs[c.FATTR4_SIZE] = held.size
    attrs.update((a, t) for a, t in d.kept_times().items() if a in asked)
    return encode_fattr4(attrs)


def delegreturn_ops(fh: bytes, d: Delegation) -> list[Any]:
    """The COMPOUND that gives ``d`` back: PUTFH, DELEGRETURN; under an attribute delegation whose
    holder kept times, a SETATTR of them (time_deleg_access/modify, with the delegation's stateid)
    comes before the DELEGRETURN (RFC 9754), so the server holds the times our reads and writes set,
    not those of when the data reached it."""
    ops: list[Any] = [PUTFH4args(fh)]
    kept = d.kept_times() if d.timestamps else {}
    if kept:
        ops.append(SETATTR4args(d.stateid, encode_fattr4(kept)))
    ops.append(DELEGRETURN4args(d.stateid))
    return ops


class Delegations(Compounds):
    """Delegations granted, recalled and returned."""

    def __init__(self, client: ClientID) -> None:
        super().__init__(client)
        client.backchannel.on_recall = self._recall
        client.backchannel.on_recall_any = self._recall_any
        client.backchannel.on_getattr = self._cb_getattr
        # what the layer above knows of a delegated file (its size, unsent data): see HeldFile
        self.held_file: Callable[[bytes], Awaitable[HeldFile | None]] | None = None

    def share_access(self, access: int) -> int:
        """OPEN's share_access: with ``want_delegations`` the server chooses (no want bits, as the
        Linux client sends), and is asked for delegated timestamps when it supports them
        (``deleg_timestamps``); otherwise we say we want none."""
        if not self.want_delegations:
            return access | c.OPEN4_SHARE_ACCESS_WANT_NO_DELEG
        return access | c.OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS if self.deleg_timestamps else access

    def note_read(self, fh: bytes, now_ns: int) -> None:
        """A read of ``fh`` at ``now_ns``: its access time, kept under an attribute delegation."""
        d = self.delegations.get(fh)
        if d is not None:
            d.accessed(now_ns)

    def note_write(self, fh: bytes, now_ns: int) -> None:
        """A write to ``fh`` at ``now_ns``: its modify time, kept under a write attribute delegation."""
        d = self.delegations.get(fh)
        if d is not None:
            d.modified(now_ns)

    def keeps_times(self, fh: bytes) -> bool:
        """Whether we hold a write attribute delegation on ``fh`` (not being returned): its size and
        times are ours to tell, a stat after our writes needs no GETATTR and no flush."""
        d = self.delegations.get(fh)
        return d is not None and d.timestamps and d.write and not d.returning

    def forget_times(self, fh: bytes) -> None:
        """Times of ``fh`` set explicitly (a SETATTR): those kept until now must not undo them."""
        d = self.delegations.get(fh)
        if d is not None:
            d.atime_ns = d.mtime_ns = None

    def kept_times(self, fh: bytes) -> tuple[int | None, int | None]:
        """The access and modify times (ns) kept under an attribute delegation on ``fh`` (None: not
        kept): the server's own are older than ours while we hold it."""
        d = self.delegations.get(fh)
        return (d.atime_ns, d.mtime_ns) if d is not None else (None, None)

    def took_delegation(self, of: OpenFile, granted: tuple[int, Any]) -> None:
        """Record the delegation an OPEN's reply carries (if any) for ``of``'s file."""
        dtype, arm = granted
        if dtype not in READ_DELEGATIONS and dtype not in WRITE_DELEGATIONS:
            return
        d = Delegation(int(dtype), arm.stateid, of.fh, change=of.attrs.change if of.attrs is not None else 0)
        old = self.delegations.get(of.fh)
        if old is not None and old.stateid.other == d.stateid.other:
            old.type, old.stateid = d.type, d.stateid  # the same delegation (upgraded)
            of.delegation = old
            return
        self.delegations[of.fh] = d
        of.delegation = d
        self.delegation_counts["granted"] += 1
        if d.timestamps:
            self.delegation_counts["timestamps"] += 1
        if arm.recall:  # granted on a reclaim, but the server wants it back at once
            self.client.nursery.start_soon(self.return_delegation, of.fh)

    def delegation_for(self, fh: bytes, access: int) -> Delegation | None:
        """The delegation held on ``fh`` if it covers an open with ``access``."""
        d = self.delegations.get(fh)
        return d if d is not None and d.covers(access) else None

    async def return_delegation(self, fh: bytes, stateid: stateid4 | None = None) -> None:
        """Give the delegation on ``fh`` back (DELEGRETURN): first the opens made under it are OPENed
        for real (CLAIM_DELEG_CUR_FH) so they outlive it, then the return hooks send dirty data.
        Single-flight: a second caller waits for the first. ``stateid`` names a delegation we do not
        know (a recall of one we let go already): it is returned as it is."""
        d = self.delegations.get(fh)
        if d is None or (stateid is not None and d.stateid.other != stateid.other):
            if stateid is not None:
                await self._delegreturn(fh, stateid)
            return
        if d.returning:
            await d.returned.wait()
            return
        d.returning = True
        try:
            clientid = self.client.identity.clientid if self.client.identity else 0
            for of in list(self.opens.values()):
                if not (of.local and of.fh == fh and not of.closed):
                    continue
                args = OPEN4args(0, of.access | c.OPEN4_SHARE_ACCESS_WANT_NO_DELEG, c.OPEN4_SHARE_DENY_NONE,
                                 open_owner4(clientid, of.owner), (c.OPEN4_NOCREATE, None),
                                 (c.CLAIM_DELEG_CUR_FH, d.stateid))
                res = await self.run([PUTFH4args(fh), args], of.cred or self.client.machine_cred)
                of.stateid, of.local = result_of(res, c.OP_OPEN).stateid, False
            for hook in self.delegation_return_hooks:
                await hook(fh)
            await self._delegreturn(fh, d.stateid, d)
            self.delegation_counts["returned"] += 1
        finally:
            if self.delegations.get(fh) is d:
                del self.delegations[fh]
            d.returned.set()

    async def return_delegations(self) -> None:
        """Give every delegation back (at unmount, before the client ID goes)."""
        for fh in list(self.delegations):
            await self.return_delegation(fh)

    async def _delegreturn(self, fh: bytes, stateid: stateid4, d: Delegation | None = None) -> None:
        ops = delegreturn_ops(fh, d) if d is not None else [PUTFH4args(fh), DELEGRETURN4args(stateid)]
        if len(ops) > 2:
            self.delegation_counts["times_returned"] += 1
        with trio.move_on_after(30):
            try:
                await self.run(ops, self.client.machine_cred)
            except NFS4Error as e:
                log.info("DELEGRETURN: %s (the server has let the delegation go)", e)

    async def _cb_getattr(self, fh: bytes, requested: list[int]) -> fattr4 | None:
        """CB_GETATTR: answered from what we hold (:func:`cb_getattr_attrs`)."""
        t0 = trio.current_time()
        d = self.delegations.get(fh)
        held = await self.held_file(fh) if self.held_file is not None and d is not None else None
        counts = self.delegation_counts
        counts["getattrs"] += 1
        counts["getattr_ms"] = max(counts["getattr_ms"], round((trio.current_time() - t0) * 1000))
        return cb_getattr_attrs(d, held, requested)

    async def _recall(self, fh: bytes, stateid: Any, truncate: bool) -> None:
        """CB_RECALL (acknowledged already by the backchannel): return the delegation."""
        self.delegation_counts["recalled"] += 1
        await self.return_delegation(fh, stateid)

    async def _recall_any(self, keep: int, mask: int) -> None:
        for fh in list(self.delegations)[keep:]:
            await self.return_delegation(fh)

