"""The FUSE kernel protocol, without I/O: the ABI (:mod:`.abi`), requests decoded from bytes
(:mod:`.requests`), replies and notifications encoded to bytes (:mod:`.replies`,
:mod:`.notify`) from plain records (:mod:`.records`), INIT negotiation (:mod:`.init`), and the
bookkeeping of FORGETs (:mod:`.forgets`) and INTERRUPTs (:mod:`.interrupts`). Nothing here imports
from outside this package. The shell that reads and writes /dev/fuse is
:mod:`pynfsrdma._fuse.devfuse`."""
