"""NFSv4.2's operations on a file's data (RFC 7862): SEEK (holes), ALLOCATE, DEALLOCATE (space),
COPY and CLONE (copies on the server). An operation the server said it does not support is not sent
again (NFS4ERR_NOTSUPP, EOPNOTSUPP: the caller does the work itself)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import ResOp, result_of
from .._proto.nfs4.types import (
    ALLOCATE4args,
    CLONE4args,
    COPY4args,
    DEALLOCATE4args,
    GETATTR4args,
    PUTFH4args,
    SAVEFH4args,
    SEEK4args,
    stateid4,
)
from .._rpc.auth import Credential
from .attributes import STAT_BITMAP, FileAttrs
from .compounds import Compounds, Parsed, last_attrs
from .copy_commit import CopyThen, on_commit, on_copy_reply
from .open_state import OpenFile, current
from .read_write import ReadWrite

log = logging.getLogger(__name__)

# the operations a server told us it does not support (NFSv4.2's optional ones) answer one of these
_NOT_SUPPORTED = frozenset({c.NFS4ERR_NOTSUPP, c.NFS4ERR_OP_ILLEGAL})


class NFS42:
    """SEEK, ALLOCATE, DEALLOCATE, COPY, CLONE: ``NFSv4.nfs42``, an object given the COMPOUND runner
    and the READ/WRITE family (a COPY's data is committed with its COMMIT)."""

    def __init__(self, compounds: Compounds, read_write: ReadWrite) -> None:
        self.compounds = compounds
        self.read_write = read_write

    def supports(self, opnum: int) -> bool:
        """Whether ``opnum`` (an NFSv4.2 operation) may be sent: the session is NFSv4.2 and the server
        has not answered it NFS4ERR_NOTSUPP before."""
        return self.compounds.client.options.minorversion >= c.NFS4_MINOR_VERSION_2 and opnum not in self.compounds.unsupported

    async def _run_v42(
        self, opnum: int, build: Callable[[stateid4], list[Any]], cred: Credential, path: str | None, *,
        of: OpenFile | None = None, lock_owner: Hashable | None = None,
        check: Callable[[list[ResOp]], None] | None = None,
    ) -> list[ResOp]:
        """Run an NFSv4.2 operation's COMPOUND (as ``Compounds.run_with_open`` does, with ``of``'s stateid),
        or raise NFS4ERR_NOTSUPP (EOPNOTSUPP) without sending it on an NFSv4.1 session or to a server
        that said it does not support it (remembered)."""
        if not self.supports(opnum):
            raise NFS4Error(c.NFS4ERR_NOTSUPP, opnum, path)
        try:
            return await self.compounds.run_with_open(of, build, cred, lock_owner=lock_owner, path=path, check=check)
        except NFS4Error as e:
            if e.status in _NOT_SUPPORTED and e.op in (opnum, c.OP_ILLEGAL):
                self.compounds.unsupported.add(opnum)
                raise NFS4Error(c.NFS4ERR_NOTSUPP, opnum, path) from None
            raise

    async def seek(self, of: OpenFile, offset: int, what: int, cred: Credential, path: str | None = None,
                   *, lock_owner: Hashable | None = None) -> int:
        """SEEK: where the first byte of data (NFS4_CONTENT_DATA) or of a hole (NFS4_CONTENT_HOLE) at or
        after ``offset`` is, as lseek's SEEK_DATA and SEEK_HOLE (the end of the file counts as a hole).
        ENXIO (NFS4ERR_NXIO) from the end of the file on, and for data when none follows."""
        res = await self._run_v42(
            c.OP_SEEK, lambda s: [PUTFH4args(of.fh), SEEK4args(s, offset, what)], cred, path,
            of=of, lock_owner=lock_owner,
        )
        ok = result_of(res, c.OP_SEEK)
        if what == c.NFS4_CONTENT_DATA and ok.sr_eof:
            raise NFS4Error(c.NFS4ERR_NXIO, c.OP_SEEK, path)
        return int(ok.sr_offset)

    async def allocate(self, of: OpenFile, offset: int, length: int, cred: Credential, path: str | None = None,
                       *, lock_owner: Hashable | None = None) -> FileAttrs:
        """ALLOCATE: reserve space for the range (as fallocate mode 0: the file grows if it ends
        before the range does); the file's attributes after it."""
        return await self._on_range(ALLOCATE4args, of, offset, length, cred, path, lock_owner)

    async def deallocate(self, of: OpenFile, offset: int, length: int, cred: Credential, path: str | None = None,
                         *, lock_owner: Hashable | None = None) -> FileAttrs:
        """DEALLOCATE: punch a hole (the range reads back as zeros; the size stays); the file's
        attributes after it."""
        return await self._on_range(DEALLOCATE4args, of, offset, length, cred, path, lock_owner)

    async def _on_range(
        self, op: type[ALLOCATE4args | DEALLOCATE4args], of: OpenFile, offset: int, length: int,
        cred: Credential, path: str | None, lock_owner: Hashable | None,
    ) -> FileAttrs:
        """Run ``op`` (ALLOCATE or DEALLOCATE) on a range of ``of`` with ``of``'s stateid; the file's
        attributes after it."""
        attrs = Parsed(last_attrs)
        await self._run_v42(
            op.OPNUM,
            lambda s: [PUTFH4args(of.fh), op(s, offset, length), GETATTR4args(STAT_BITMAP)],
            cred, path, of=of, lock_owner=lock_owner, check=attrs.check,
        )
        return attrs.value

    async def copy(
        self, src: OpenFile, dst: OpenFile, src_offset: int, dst_offset: int, count: int, cred: Credential,
        path: str | None = None,
    ) -> int:
        """COPY ``count`` bytes within the server, synchronously (the reply comes when the data is
        there), consecutively (a short copy is the first bytes of the range, so the rest is asked for
        from where it stopped). Data the reply calls UNSTABLE is committed, and copied again if the
        COMMIT shows another write verifier (the server restarted and may have lost it). Returns the
        bytes copied: fewer than ``count`` when the source ends first. NFS4ERR_NOTSUPP (EOPNOTSUPP)
        when the server has no COPY: the caller reads and writes instead."""
        if count <= 0:
            raise ValueError("COPY needs a count (RFC 7862's 0, 'to the end', is not offered)")
        done = 0
        changes = 0
        while done < count:
            n, committed, verifier = await self._copy_once(
                src, dst, src_offset + done, dst_offset + done, count - done, cred, path
            )
            then = on_copy_reply(n, committed)
            if then is CopyThen.COMMIT:
                then = on_commit(await self.read_write.commit(dst.fh, cred, dst_offset + done, n) == verifier, changes=changes)
            if then is CopyThen.FAIL:
                raise NFS4Error(c.NFS4ERR_IO, c.OP_COPY, path)
            if then is CopyThen.COPY_AGAIN:
                changes += 1
                log.info("COPY: the write verifier changed before COMMIT: copying again")
                continue
            if then is CopyThen.END_OF_SOURCE:
                break
            done += n
        return done

    async def _copy_once(
        self, src: OpenFile, dst: OpenFile, src_offset: int, dst_offset: int, count: int, cred: Credential,
        path: str | None,
    ) -> tuple[int, int, bytes]:
        def ops(_: stateid4) -> list[Any]:
            args = COPY4args(current(src.stateid), current(dst.stateid), src_offset, dst_offset, count,
                             True, True, [])
            return [PUTFH4args(src.fh), SAVEFH4args(), PUTFH4args(dst.fh), args]

        try:
            res = await self._run_v42(c.OP_COPY, ops, cred, path)
        except NFS4Error as e:
            if e.status == c.NFS4ERR_OFFLOAD_NO_REQS:  # it cannot copy synchronously and consecutively
                self.compounds.unsupported.add(c.OP_COPY)
                raise NFS4Error(c.NFS4ERR_NOTSUPP, c.OP_COPY, path) from None
            raise
        w = result_of(res, c.OP_COPY).cr_response
        if w.wr_callback_id:  # gone asynchronous although asked not to: no CB_OFFLOAD to wait for here
            raise NFS4Error(c.NFS4ERR_SERVERFAULT, c.OP_COPY, path)
        return int(w.wr_count), int(w.wr_committed), bytes(w.wr_writeverf)

    async def clone(
        self, src: OpenFile, dst: OpenFile, src_offset: int, dst_offset: int, count: int, cred: Credential,
        path: str | None = None,
    ) -> FileAttrs:
        """CLONE: ``dst``'s range shares ``src``'s blocks (``count`` 0: to the end of the source); the
        destination's attributes after it. NFS4ERR_NOTSUPP (EOPNOTSUPP) when the server cannot."""
        attrs = Parsed(last_attrs)
        await self._run_v42(
            c.OP_CLONE,
            lambda _: [PUTFH4args(src.fh), SAVEFH4args(), PUTFH4args(dst.fh),
                       CLONE4args(current(src.stateid), current(dst.stateid), src_offset, dst_offset, count),
                       GETATTR4args(STAT_BITMAP)],
            cred, path, check=attrs.check,
        )
        return attrs.value
