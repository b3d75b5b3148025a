"""The backchannel: the server's callbacks (CB_NULL, CB_COMPOUND) on our fore-channel connections.

CB_SEQUENCE is checked against the back channel's own slot table (replays get the cached reply,
misordered requests NFS4ERR_SEQ_MISORDERED). CB_RECALL and CB_RECALL_ANY are acknowledged at once
and the delegations are returned in the background by the registered hooks (the client layer
owns delegations); CB_GETATTR asks a hook for the attributes of a delegated file; CB_NOTIFY_LOCK
(a lock a blocked LOCK waits for may be free) is acknowledged and handed to a hook that wakes the
waiter (the client layer owns locks). CB_LAYOUTRECALL is answered by a hook of the client's
layouts (NFS4_OK, the layouts returned in the background, or NFS4ERR_NOMATCHING_LAYOUT, also when
no layouts are held); CB_NOTIFY_DEVICEID's items go to a hook that forgets the devices.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from .._proto import rpc as rpcdef
from .._proto.nfs4 import callback as cb
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import ResOp
from .._xdr import Packer, Unpacker, XdrError
from .slot_table import Arrival, arrival

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(__name__)

RecallHook = Callable[[bytes, Any, bool], Awaitable[None]]  # (fh, stateid, truncate)
RecallAnyHook = Callable[[int, int], Awaitable[None]]  # (objects_to_keep, type_mask)
GetattrHook = Callable[[bytes, list[int]], Awaitable[Any]]  # (fh, bitmap) -> fattr4 or None
NotifyLockHook = Callable[[bytes, Any], None]  # (fh, lock_owner4): wake whoever waits for that lock
# CB_LAYOUTRECALL4args -> its status now (NFS4_OK: the returns follow in the background)
LayoutRecallHook = Callable[[Any], int]
NotifyDeviceHook = Callable[[list[Any]], None]  # (notify_deviceid_change4 / _delete4 items): forget them


@dataclass(slots=True)
class _CbSlot:
    seqid: int = 0
    reply: bytes | None = None  # the cached encoded CB_COMPOUND4res


class Backchannel:
    """The server's callbacks on the session that ``session()`` returns (the first one); what they
    start in the background runs in ``nursery``."""

    def __init__(self, nursery: trio.Nursery, session: Callable[[], Session | None]) -> None:
        self.nursery = nursery
        self.session = session
        self.slots: list[_CbSlot] = []
        self.on_recall: RecallHook | None = None
        self.on_recall_any: RecallAnyHook | None = None
        self.on_getattr: GetattrHook | None = None
        self.on_notify_lock: NotifyLockHook | None = None
        self.on_layoutrecall: LayoutRecallHook | None = None
        self.on_notify_deviceid: NotifyDeviceHook | None = None
        self.calls = 0
        self._tasks: trio.Nursery | None = None
        self.minorversion = c.NFS4_MINOR_VERSION_1  # the session's: its CB_COMPOUNDs carry it too

    def reset(self, nslots: int) -> None:
        """A new session: a fresh back channel slot table."""
        self.slots = [_CbSlot() for _ in range(max(0, nslots))]

    async def handle_rpc(self, xid: int, body: rpcdef.call_body, u: Unpacker) -> Packer | None:
        """Answer one callback RPC; returns the whole encoded reply message."""
        self.calls += 1
        reply = Packer()
        if body.prog != c.CB_PROGRAM:
            rpcdef.pack_accepted_reply_header(reply, xid, rpcdef.accept_stat.PROG_UNAVAIL)
            return reply
        if body.proc == c.CB_NULL:
            rpcdef.pack_accepted_reply_header(reply, xid)
            return reply
        if body.proc != c.CB_COMPOUND:
            rpcdef.pack_accepted_reply_header(reply, xid, rpcdef.accept_stat.PROC_UNAVAIL)
            return reply
        try:
            args = cb.decode_cb_compound_args(u)
        except XdrError as e:
            log.warning("malformed CB_COMPOUND: %s", e)
            rpcdef.pack_accepted_reply_header(reply, xid, rpcdef.accept_stat.GARBAGE_ARGS)
            return reply
        rpcdef.pack_accepted_reply_header(reply, xid)
        reply.buf += await self.compound(args)
        return reply

    async def compound(self, args: Any) -> bytes:
        """Process a decoded CB_COMPOUND4args; return the encoded CB_COMPOUND4res."""
        results: list[ResOp] = []
        status: int = c.NFS4_OK
        slot: _CbSlot | None = None
        if args.minorversion != self.minorversion:
            return _encode(c.NFS4ERR_MINOR_VERS_MISMATCH, args.tag, [])
        for i, op in enumerate(args.argarray):
            opnum = getattr(type(op), "OPNUM", c.OP_CB_ILLEGAL)
            if i == 0 and opnum != c.OP_CB_SEQUENCE:
                status = c.NFS4ERR_OP_NOT_IN_SESSION
                results.append(ResOp(opnum, status, None))
                break
            if opnum == c.OP_CB_SEQUENCE:
                if i != 0:
                    status = c.NFS4ERR_SEQUENCE_POS
                    results.append(ResOp(opnum, status, None))
                    break
                st, res, slot, cached = self._sequence(op)
                if cached is not None:
                    return cached
                results.append(ResOp(opnum, st, res))
                if st != c.NFS4_OK:
                    status = st
                    break
                continue
            st, res = await self._op(opnum, op)
            results.append(ResOp(opnum, st, res))
            if st != c.NFS4_OK:
                status = st
                break
        encoded = _encode(status, args.tag, results)
        if slot is not None:
            slot.reply = encoded
        return encoded

    def _sequence(self, op: Any) -> tuple[int, Any, _CbSlot | None, bytes | None]:
        s = self.session()
        if s is None or bytes(op.csa_sessionid) != s.sessionid:
            return c.NFS4ERR_BADSESSION, None, None, None
        if not 0 <= op.csa_slotid < len(self.slots):
            return c.NFS4ERR_BADSLOT, None, None, None
        slot = self.slots[op.csa_slotid]
        came = arrival(slot.seqid, slot.reply is not None, op.csa_sequenceid)
        if came is Arrival.RETRY:
            return c.NFS4_OK, None, None, slot.reply
        if came is Arrival.MISORDERED:
            return c.NFS4ERR_SEQ_MISORDERED, None, None, None
        slot.seqid = op.csa_sequenceid
        slot.reply = None
        hi = len(self.slots) - 1
        res = cb.CB_SEQUENCE4resok(s.sessionid, op.csa_sequenceid, op.csa_slotid, hi, hi)
        return c.NFS4_OK, res, slot, None

    async def _op(self, opnum: int, op: Any) -> tuple[int, Any]:
        if opnum == c.OP_CB_RECALL:
            if self.on_recall is None:
                return c.NFS4ERR_BADHANDLE, None
            # acknowledge now, return the delegation in the background (it needs the fore channel)
            self.nursery.start_soon(self.on_recall, bytes(op.fh), op.stateid, op.truncate)
            return c.NFS4_OK, None
        if opnum == c.OP_CB_RECALL_ANY:
            if self.on_recall_any is not None:
                self.nursery.start_soon(
                    self.on_recall_any, op.craa_objects_to_keep, _mask_value(op.craa_type_mask)
                )
            return c.NFS4_OK, None
        if opnum == c.OP_CB_GETATTR:
            if self.on_getattr is None:
                return c.NFS4ERR_BADHANDLE, None
            attrs = await self.on_getattr(bytes(op.fh), op.attr_request)
            if attrs is None:
                return c.NFS4ERR_BADHANDLE, None
            return c.NFS4_OK, cb.CB_GETATTR4resok(attrs)
        if opnum == c.OP_CB_NOTIFY_LOCK:
            # a hint (RFC 8881 20.11): answered NFS4_OK whether or not anyone still waits
            if self.on_notify_lock is not None:
                self.on_notify_lock(bytes(op.cnla_fh), op.cnla_lock_owner)
            return c.NFS4_OK, None
        if opnum == c.OP_CB_LAYOUTRECALL:
            # RFC 8881 20.3.3: NOMATCHING_LAYOUT when the client holds none of what is recalled
            if self.on_layoutrecall is None:
                return c.NFS4ERR_NOMATCHING_LAYOUT, None
            return self.on_layoutrecall(op), None
        if opnum == c.OP_CB_NOTIFY_DEVICEID:
            try:
                items = cb.device_notifications(op)
            except XdrError:
                return c.NFS4ERR_BADXDR, None
            if self.on_notify_deviceid is not None:
                self.on_notify_deviceid(items)
            return c.NFS4_OK, None
        return c.NFS4ERR_NOTSUPP, None


def _mask_value(mask: list[int]) -> int:
    v = 0
    for i, w in enumerate(mask):
        v |= w << (32 * i)
    return v


def _encode(status: int, tag: str, results: list[ResOp]) -> bytes:
    p = Packer()
    cb.encode_cb_compound_res(p, cb.CB_COMPOUND4res(status, tag, results))
    return p.getvalue()

