"""What to do with each reply of a synchronous, consecutive COPY (RFC 7862 section 15.2) and the
COMMIT after it (sans I/O): one table for the loop of :meth:`NFSv4.nfs42.copy <.nfs42.NFS42.copy>`, which
only carries the decisions out.

- A COPY that copied nothing has met the end of the source: the copy is done.
- Bytes the reply calls UNSTABLE4 are committed (COMMIT of the destination's range) before they
  count; bytes written DATA_SYNC4 or FILE_SYNC4 count at once.
- A COMMIT whose write verifier is the COPY's confirms the bytes. Another verifier means the server
  restarted in between and may have lost them: the range is copied again, as the Linux client
  writes again, up to :data:`COPY_ATTEMPTS` verifier changes in one copy, then the copy fails (EIO).
"""

from __future__ import annotations

import enum

from .._proto.nfs4 import const as c

# a COPY whose data was not committed and whose COMMIT then shows another write verifier (the server
# restarted in between, and may have lost it) is done again, this many times at most
COPY_ATTEMPTS = 3


class CopyThen(enum.Enum):
    COMMIT = "COMMIT the destination's range, and compare the write verifiers"
    COPIED = "the bytes are copied: go on from after them"
    END_OF_SOURCE = "the source ended: the copy is done"
    COPY_AGAIN = "the write verifier changed: copy the same range again"
    FAIL = "the verifier kept changing: the copy fails with EIO"


def on_copy_reply(count: int, committed: int) -> CopyThen:
    """The decision on a COPY's reply: ``count`` bytes copied, ``committed`` how (stable_how4)."""
    if count and committed == c.UNSTABLE4:
        return CopyThen.COMMIT
    return CopyThen.COPIED if count else CopyThen.END_OF_SOURCE


def on_commit(same_verifier: bool, *, changes: int) -> CopyThen:
    """The decision after the COMMIT of a COPY's UNSTABLE4 bytes: ``same_verifier``, the COMMIT's write
    verifier is the COPY's; ``changes``, the verifier changes this copy met before this one."""
    if same_verifier:
        return CopyThen.COPIED
    return CopyThen.FAIL if changes + 1 >= COPY_ATTEMPTS else CopyThen.COPY_AGAIN
