"""File-level NFSv4.1 and NFSv4.2 operations on file handles, one COMPOUND each: :class:`NFSv4`, the
face the FUSE front end and the path-based API both stand on.

Each family of operations lives in a module of its own, named for what it holds in the protocol's
words: ``compounds`` (running a COMPOUND: errors, parsing in the session's checks, the stateid I/O
goes with), ``layout_ops`` (LAYOUTGET,
GETDEVICEINFO, LAYOUTCOMMIT, LAYOUTRETURN), ``delegations``, ``opens`` (OPEN, CLOSE): these are
still the rungs :class:`NFSv4` is built of. Objects of
their own, given the COMPOUND runner rather than rungs of the class ladder: ``names`` (the export,
LOOKUP, GETATTR, SETATTR, ACCESS: ``NFSv4.names``, made by ``Opens``, whose OPENs use it),
``byte_range_locks`` (LOCK, LOCKT, LOCKU: ``NFSv4.byte_range_locks``, made by ``Opens`` too, whose
CLOSEs let locks go),
``read_write`` (READ,
WRITE, COMMIT, by the block layouts with ``pnfs``: ``NFSv4.read_write``), ``state_recovery`` (reclaim after a server restart,
revoked state: ``NFSv4.state_recovery``, given the opens, delegations and locks it recovers),
``directories`` (READDIR, CREATE, REMOVE, RENAME, LINK, READLINK: ``NFSv4.directories``),
``nfs42`` (SEEK, ALLOCATE, DEALLOCATE, COPY, CLONE: ``NFSv4.nfs42``, given the READ/WRITE family
too), ``whole_files`` (a small file read or written by name in one COMPOUND:
``NFSv4.whole_files``), ``xattrs`` (RFC 8276: ``NFSv4.xattrs``) and ``batched`` (many READs of a
file, many REMOVEs in a directory, several to a COMPOUND: ``NFSv4.batched``). ``open_state`` holds
the state an OPEN leaves (:class:`OpenFile`, :class:`Delegation`).
"""

from __future__ import annotations

from .._session.client_id import ClientID
from .batched import Batched
from .compounds import VERIFIER_SIZE
from .delegations import HeldFile
from .directories import Directories, DirEntry, ListedEntry
from .layout_ops import LayoutOps
from .nfs42 import NFS42
from .open_state import ANONYMOUS_STATEID, Delegation, OpenFile, current
from .opens import Opens
from .read_write import ReadWrite
from .state_recovery import StateRecovery
from .whole_files import WholeFiles
from .xattrs import ExtendedAttributes

__all__ = ["ANONYMOUS_STATEID", "VERIFIER_SIZE", "Delegation", "DirEntry", "HeldFile", "ListedEntry", "NFSv4",
           "OpenFile", "current"]


class NFSv4(Opens, LayoutOps):
    """File-handle level operations over a :class:`~pynfsrdma._session.client_id.ClientID`'s session.
    Families of their own, given this object's COMPOUND runner: ``names`` (LOOKUP, GETATTR, SETATTR,
    ACCESS, the export), ``byte_range_locks`` (LOCK, LOCKT, LOCKU), ``read_write`` (READ, WRITE, COMMIT),
    ``state_recovery`` (reclaim, revoked state), ``directories`` (READDIR, CREATE, REMOVE, RENAME, LINK, READLINK), ``nfs42`` (SEEK,
    ALLOCATE, DEALLOCATE, COPY, CLONE: given the READ/WRITE family too), ``whole_files`` (a small
    file read or written by name in one COMPOUND), ``xattrs`` (the extended attributes) and
    ``batched`` (several READs, REMOVEs or first READDIRs to a COMPOUND)."""

    def __init__(self, client: ClientID) -> None:
        super().__init__(client)
        self.state_recovery = StateRecovery(self)
        self.read_write = ReadWrite(self)
        self.directories = Directories(self)
        self.nfs42 = NFS42(self, self.read_write)
        self.whole_files = WholeFiles(self)
        self.xattrs = ExtendedAttributes(self)
        self.batched = Batched(self)
