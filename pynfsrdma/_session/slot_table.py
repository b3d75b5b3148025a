"""The fore channel slot table of an NFSv4.1 session (RFC 8881 section 2.10.6), sans I/O.

Each slot carries one request at a time and a sequence id. The rules kept here:

* a new request on a slot uses the slot's last sequence id + 1; a retry of the same request
  (after a lost connection: on another path) uses the same slot and the same sequence id, so the
  server answers it from its reply cache when it already executed it;
* a request whose reply never came (cancelled, timed out) leaves its slot *interrupted*: the
  server may have executed it and cached the reply under that sequence id, so the next request on
  the slot must not reuse it. It takes the next one; if the server answers SEQ_MISORDERED, it never
  saw the interrupted request, and the request is sent again with the interrupted sequence id;
* the server's highest_slotid bounds the slots in use; target_highest_slotid asks us to shrink
  (or allows us to grow) the table; slots above it are retired once free;
* on the back channel we are the replier: :func:`arrival` says what a request's sequence id means
  for the slot it came on (a new request, a retry to answer from the slot's cached reply, or
  misordered).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .._proto.nfs4 import const as c

SEQID_MODULUS = c.SEQUENCEID_MODULUS


@dataclass(slots=True)
class Slot:
    slotid: int
    seqid: int = 0  # the sequence id of the last request sent on this slot (0: none yet)
    in_use: bool = False
    interrupted: bool = False  # the last request's outcome is unknown

    def next_seqid(self) -> int:
        return (self.seqid + 1) % SEQID_MODULUS or 1


@dataclass(slots=True)
class SlotTable:
    """Which slots exist, which are free, and their sequence ids."""

    max_slots: int  # ca_maxrequests granted by CREATE_SESSION
    slots: dict[int, Slot] = field(default_factory=dict)
    target_highest: int = -1  # the server's target_highest_slotid (-1: use all)
    _free: list[int] = field(default_factory=list)
    _busy: set[int] = field(default_factory=set)  # slot ids with a request outstanding
    # the highest of them (-1: none), kept as they change: every request's SEQUENCE says it
    highest_in_use: int = -1

    def __post_init__(self) -> None:
        if self.max_slots < 1:
            raise ValueError("a session has at least one slot")
        self.target_highest = self.max_slots - 1
        for i in range(self.max_slots):
            self.slots[i] = Slot(i)
        self._free = list(range(self.max_slots - 1, -1, -1))  # pop() hands out the lowest first

    @property
    def limit(self) -> int:
        """How many slots may be in use at once now."""
        return min(self.max_slots, self.target_highest + 1)

    @property
    def in_use(self) -> int:
        return len(self._busy)

    def try_acquire(self) -> Slot | None:
        """A free slot under the current limit, lowest first; None if none."""
        limit = min(self.max_slots, self.target_highest + 1)
        free = self._free
        if free and free[-1] < limit:  # (the slot freed last: the one a request one after another takes)
            sid = free.pop()
            slot = self.slots[sid]
            slot.in_use = True
            self._busy.add(sid)
            if sid > self.highest_in_use:
                self.highest_in_use = sid
            return slot
        for i in range(len(free) - 2, -1, -1):
            sid = free[i]
            if sid < limit:
                del free[i]
                slot = self.slots[sid]
                slot.in_use = True
                self._busy.add(sid)
                if sid > self.highest_in_use:
                    self.highest_in_use = sid
                return slot
        return None

    def take(self) -> Slot | None:
        """A free slot (as :meth:`try_acquire` chooses it) with its new request's sequence id set, as
        :meth:`begin` sets it (``slot.seqid``); None if none. (One call for what every request does.)"""
        free = self._free
        if free and free[-1] < min(self.max_slots, self.target_highest + 1):
            sid = free.pop()
            slot = self.slots[sid]
            slot.in_use = True
            self._busy.add(sid)
            if sid > self.highest_in_use:
                self.highest_in_use = sid
        else:
            taken = self.try_acquire()
            if taken is None:
                return None
            slot = taken
        slot.seqid = (slot.seqid + 1) % SEQID_MODULUS or 1
        return slot

    def begin(self, slot: Slot) -> int:
        """The sequence id to send for a new request on ``slot`` (sets it on the slot)."""
        slot.seqid = slot.next_seqid()
        return slot.seqid

    def release(self, slot: Slot, *, completed: bool) -> None:
        """Give the slot back. ``completed``: a reply to its request arrived (any status except
        SEQ_MISORDERED and BADSLOT, which the caller handles before releasing); otherwise the
        request's fate is unknown and the slot is marked interrupted."""
        if completed:
            slot.interrupted = False
        else:
            slot.interrupted = True
        slot.in_use = False
        busy = self._busy
        busy.discard(slot.slotid)
        if slot.slotid == self.highest_in_use:
            self.highest_in_use = max(busy, default=-1)
        self._free.append(slot.slotid)

    def refused(self, slot: Slot) -> None:
        """The server refused the request on ``slot`` before its sequence id counted (BADSLOT): the
        slot's next request takes that sequence id again."""
        slot.seqid = (slot.seqid - 1) % SEQID_MODULUS

    def misordered(self, slot: Slot) -> bool:
        """SEQ_MISORDERED came back for ``slot``'s current request. If the slot's previous request
        was interrupted, the server never saw it: step back so the request is sent with that
        sequence id, and return True (retry). Otherwise the slot's state is lost: return False."""
        if slot.interrupted:
            slot.interrupted = False
            slot.seqid = (slot.seqid - 1) % SEQID_MODULUS
            # begin() will add one again: the retry carries the interrupted request's seqid
            slot.seqid = (slot.seqid - 1) % SEQID_MODULUS
            return True
        return False

    def update_from_server(self, highest_slotid: int, target_highest_slotid: int) -> None:
        """Apply SEQUENCE's sr_highest_slotid and sr_target_highest_slotid."""
        highest = min(highest_slotid, self.max_slots - 1)
        target = min(target_highest_slotid, highest)
        self.target_highest = max(0, target)

    def reset(self) -> None:
        """A new session: every slot starts over."""
        for s in self.slots.values():
            s.seqid = 0
            s.interrupted = False


class Arrival(enum.Enum):
    NEW = "the next request on the slot"
    RETRY = "the slot's last request again: answer with its cached reply"
    MISORDERED = "neither: NFS4ERR_SEQ_MISORDERED"


def arrival(last_seqid: int, cached: bool, seqid: int) -> Arrival:
    """What a request with ``seqid`` is on a slot of ours whose last request had ``last_seqid``
    (``cached``: its reply is kept), RFC 8881 section 2.10.6.1."""
    if seqid == last_seqid and cached:
        return Arrival.RETRY
    if seqid == (last_seqid + 1) % SEQID_MODULUS:
        return Arrival.NEW
    return Arrival.MISORDERED
