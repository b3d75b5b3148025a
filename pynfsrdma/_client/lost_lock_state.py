"""What to do when a LOCK is refused because the server no longer has the state it names (sans
I/O): one table for the loop of
:meth:`NFSv4.byte_range_locks.lock <.byte_range_locks.ByteRangeLocks.lock>` that sends LOCK
(RFC 8881 section 9), which only carries the decision out.

- A LOCK denied (NFS4ERR_DENIED) is the caller's: a conflict, not lost state.
- Any other status but one of :data:`~.lost_state.STATE_LOST` is the caller's too.
- A LOCK that waited in the session's recovery after a server restart carries the stateid from
  before, while the lock state (or the open it stands on) was reclaimed meanwhile with a new one:
  it is sent again with that one.
- The server lost a lock state that still held ranges: the locks are recorded as lost (the owner's
  I/O then fails with EIO until it unlocks), and the LOCK fails so.
- The server lost a lock state holding nothing: the lock owner is introduced again with the open's
  stateid (open_to_lock_owner4) and the LOCK sent again; when the LOCK went with the open's
  stateid already, it is the open that is gone, and the error is the caller's.
- A LOCK is sent :data:`LOCK_ATTEMPTS` times at most.
"""

from __future__ import annotations

import enum

from .lost_state import STATE_LOST

LOCK_ATTEMPTS = 3


class LockThen(enum.Enum):
    FAIL = "the error is the caller's"
    RESEND = "send the LOCK again with the stateid that replaced the one it carried"
    LOSE = "record the owner's locks on the file as lost; the LOCK fails with LockLost"
    NEW_LOCK_OWNER = "forget the lock stateid; send the LOCK again with the open's (open_to_lock_owner4)"


def on_lock_error(status: int, *, denied: bool, attempts: int, replaced: bool, holds_ranges: bool,
                  has_lock_stateid: bool) -> LockThen:
    """The decision on a LOCK that failed with ``status``. ``denied``: the server refused it for a
    conflicting lock; ``attempts``: LOCKs sent so far, this one included; ``replaced``: the stateid it
    would carry now differs from the one it carried; ``holds_ranges``: the lock owner holds ranges of
    the file; ``has_lock_stateid``: it went with a lock stateid (not the open's)."""
    if denied or status not in STATE_LOST or attempts >= LOCK_ATTEMPTS:
        return LockThen.FAIL
    if replaced:
        return LockThen.RESEND
    if holds_ranges:
        return LockThen.LOSE
    if not has_lock_stateid:
        return LockThen.FAIL
    return LockThen.NEW_LOCK_OWNER
