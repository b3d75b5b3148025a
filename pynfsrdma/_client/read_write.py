"""File data, one COMPOUND each: READ, WRITE (the data sent by reference), COMMIT, and a WRITE
with the SETATTR and GETATTR the FUSE mount sends after it in the same COMPOUND."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import result_of
from .._proto.nfs4.types import (
    COMMIT4args,
    GETATTR4args,
    PUTFH4args,
    READ4args,
    SETATTR4args,
    WRITE4args,
    fattr4,
    stateid4,
)
from .._rpc.auth import Credential
from .._transport.base import ReplyHints, SpliceRequest
from . import read_sink
from .attributes import STAT_BITMAP, FileAttrs
from .compounds import Compounds, Parsed, last_attrs
from .open_state import ANONYMOUS_STATEID, OpenFile
from .read_payload import locate_read_data


class ReadWrite(Compounds):
    """READ, WRITE, COMMIT."""

    async def read(self, of: OpenFile | None, fh: bytes, offset: int, count: int,
                   cred: Credential, *, lock_owner: Hashable | None = None,
                   path: str | None = None) -> tuple[memoryview, bool]:
        """One READ of at most maxread bytes: (data as a view of the reply, eof). The data is a
        :class:`~.read_sink.SplicedPayload` instead when a pipe was offered for this READ
        (:mod:`.read_sink`) and the transport spliced the data into it."""
        count = min(count, self.maxread)
        hints = ReplyHints(ddp_sizes=[count])
        sink = read_sink.offered(offset, count)
        if sink is not None:
            hints.splice = SpliceRequest(sink, locate_read_data, count)
        res = await self.run_with_open(
            of, lambda s: [PUTFH4args(fh), READ4args(s, offset, count)], cred, hints,
            lock_owner=lock_owner, path=path,
        )
        ok = result_of(res, c.OP_READ)
        return ok.data, bool(ok.eof)

    async def write(self, of: OpenFile, offset: int, data: Any, cred: Credential,
                    stable: int = c.UNSTABLE4, *, lock_owner: Hashable | None = None,
                    path: str | None = None) -> tuple[int, int, bytes]:
        """One WRITE (data sent by reference): (count, committed, write verifier)."""
        n = memoryview(data).nbytes
        res = await self.run_with_open(
            of, lambda s: [PUTFH4args(of.fh), WRITE4args(s, offset, stable, data)], cred, payload=n,
            lock_owner=lock_owner, path=path,
        )
        ok = result_of(res, c.OP_WRITE)
        return int(ok.count), int(ok.committed), bytes(ok.writeverf)

    async def commit(self, fh: bytes, cred: Credential, offset: int = 0, count: int = 0,
                     path: str | None = None) -> bytes:
        res = await self.run([PUTFH4args(fh), COMMIT4args(offset, count)], cred, path=path)
        return bytes(result_of(res, c.OP_COMMIT).writeverf)

    async def write_getattr(
        self, of: OpenFile, offset: int, data: Any, cred: Credential, stable: int = c.FILE_SYNC4,
        setattrs: fattr4 | None = None, *, lock_owner: Hashable | None = None, path: str | None = None,
    ) -> tuple[int, int, bytes, FileAttrs]:
        """One WRITE, then (if given) a SETATTR of ``setattrs`` (not of the size: it goes with the
        anonymous stateid, as :meth:`setattr` sends it), then GETATTR, in one COMPOUND: (count,
        committed, write verifier, attributes after them)."""
        n = memoryview(data).nbytes

        def build(stateid: stateid4) -> list[Any]:
            ops: list[Any] = [PUTFH4args(of.fh), WRITE4args(stateid, offset, stable, data)]
            if setattrs is not None:
                ops.append(SETATTR4args(ANONYMOUS_STATEID, setattrs))
            ops.append(GETATTR4args(STAT_BITMAP))
            return ops

        attrs = Parsed(last_attrs)
        res = await self.run_with_open(of, build, cred, payload=n, lock_owner=lock_owner, check=attrs.check,
                                       path=path)
        ok = result_of(res, c.OP_WRITE)
        return int(ok.count), int(ok.committed), bytes(ok.writeverf), attrs.value

