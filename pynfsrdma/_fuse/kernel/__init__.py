"""The FUSE kernel protocol, without I/O: the ABI (:mod:`.abi`), requests decoded from bytes
(:mod:`.requests`), replies and notifications encoded to bytes (:mod:`.replies`, :mod:`.notify`),
INIT negotiation (:mod:`.init`), and the bookkeeping of FORGETs (:mod:`.forgets`) and INTERRUPTs
(:mod:`.interrupts`). The shell that reads and writes /dev/fuse is :mod:`pynfsrdma._fuse.devfuse`."""
