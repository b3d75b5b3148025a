"""NFSv4 is a face over families, not a ladder that grows: a family of file-handle operations is an
object NFSv4 holds (``nfs.names``, ``nfs.byte_range_locks``, ``nfs.read_write``, ``nfs.state_recovery``, ``nfs.directories``, ``nfs.nfs42``, ``nfs.whole_files``, ``nfs.xattrs``,
``nfs.batched``), given the COMPOUND runner. The rungs still left are named here; a new one fails
this test."""

from __future__ import annotations

from pynfsrdma._client.nfs4 import NFSv4

# the classes NFSv4 is still made of, by inheritance: each one that leaves the ladder leaves this list
RUNGS_LEFT = {"NFSv4", "Opens", "Delegations",
              "LayoutOps", "Compounds", "object"}


def test_no_new_rung_on_the_nfsv4_ladder() -> None:
    rungs = {cls.__name__ for cls in NFSv4.__mro__}
    assert rungs - RUNGS_LEFT == set(), f"new rungs under NFSv4: {sorted(rungs - RUNGS_LEFT)}; make them objects NFSv4 holds"
    assert RUNGS_LEFT - rungs == set(), f"rungs gone from NFSv4: {sorted(RUNGS_LEFT - rungs)}; take them off RUNGS_LEFT"
