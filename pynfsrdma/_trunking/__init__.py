"""Session trunking: the server's addresses (discovered or given), verified, used together.

- :mod:`.fs_locations` -- multipath lists in fs_locations_info / fs_locations (sans I/O)
- :mod:`.verification` -- is an address the same server? (decision sans I/O; binding)
- :mod:`.discovery` -- discovery on the pseudo-fs root and :class:`Trunking`, the owner of the paths
"""

from .discovery import Trunking, TrunkingOptionError, TrunkingOptions, discover
from .fs_locations import Candidate, MultipathList

__all__ = ["Candidate", "MultipathList", "Trunking", "TrunkingOptionError", "TrunkingOptions", "discover"]
