"""What to do when the server refuses a stateid of ours (sans I/O): one table for the request
loop of :meth:`.nfs4.NFSv4.run_with_open` and the loops that open a file again (the open-file
engine's WRITEs, the mount's READs).

- A request that waited in the session's recovery after a server restart carries the stateid from
  before, which the server calls stale or bad, while the open (or lock) was reclaimed meanwhile
  with a new one: it is sent again with that one (``replaced``), and only then.
- Otherwise the server no longer knows the open (it restarted without a grace period to reclaim
  in, or the lease expired and the state went): where the caller can, the file is opened again and
  the request sent again with the new stateid, at most :data:`MAX_REOPENS` times.
"""

from __future__ import annotations

import enum

from .._proto.nfs4 import const as c

# the stateid may have been replaced (reclaimed) while the request waited
STATEID_REPLACED = frozenset({c.NFS4ERR_STALE_STATEID, c.NFS4ERR_BAD_STATEID})
# the server no longer knows the state behind a stateid
STATE_LOST = frozenset(
    {c.NFS4ERR_STALE_STATEID, c.NFS4ERR_BAD_STATEID, c.NFS4ERR_EXPIRED, c.NFS4ERR_ADMIN_REVOKED}
)
MAX_REOPENS = 3


class Then(enum.Enum):
    FAIL = "the error is the caller's"
    RESEND = "send the request again with the stateid that replaced the one it carried"
    REOPEN = "open the file again, then send the request again with the new stateid"


def on_stateid_error(status: int, *, replaced: bool, reopens: int, can_reopen: bool) -> Then:
    """The decision on a request that failed with ``status``. ``replaced``: the stateid it would
    carry now differs from the one it carried; ``reopens``: opens made again for it so far;
    ``can_reopen``: the caller can open the file again."""
    if status in STATEID_REPLACED and replaced:
        return Then.RESEND
    if status in STATE_LOST and can_reopen and reopens < MAX_REOPENS:
        return Then.REOPEN
    return Then.FAIL
