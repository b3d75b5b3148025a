"""A file read or written by name in one COMPOUND, with no open kept: what scripts and fsspec do to
small files most of the time.

- :meth:`WholeFiles.read_named`: PUTFH (the directory), LOOKUP, GETFH, GETATTR (the size alone), READ
  with the anonymous stateid (RFC 8881 8.2.3: I/O without an open, checked by the server as an open
  would be). The size comes before the READ, so the caller knows what the data is read against.
- :meth:`WholeFiles.read_range_named`: PUTFH (the directory), LOOKUP, READ with the anonymous
  stateid: a range that fits in one READ, where neither the file handle nor the size is needed.
- :meth:`WholeFiles.read_range_and_fh` and :meth:`WholeFiles.read_held`: a file read by ranges with
  no open kept, by its handle (fsspec's files opened "rb"): the first range PUTFH (the directory),
  LOOKUP, GETFH, READ; each later one PUTFH (the handle), READ, the anonymous stateid each time. A
  name replaced meanwhile (RENAME over it) leaves the reader on the file it started with, or, once
  the server let that file go, FileNotFoundError: never the new file's bytes.
- :meth:`WholeFiles.write_named`: PUTFH (the directory), OPEN (create), GETFH, WRITE FILE_SYNC4 and
  CLOSE with the current stateid (RFC 8881 16.2.3.1.2: the stateid the OPEN just made).
  The open owner is one of its own, so no open of the caller's is touched by the CLOSE. An
  operation failing after the OPEN leaves the file open: a CLOSE goes for it at once.

Each of these COMPOUNDs is a prepared shape (:class:`.compound_shapes.CompoundShape`): its fixed
bytes encoded once, its reply of success decoded straight into what the caller reads (the READ's data
a view of the received message), any other reply decoded and checked by the general codec.
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import os
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import NFS4Error, ReplyError
from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import bitmap4_from, decode_fattr4
from .._proto.nfs4.compound import ResOp, result_of
from .._proto.nfs4.compound_shapes import AttrsAt, CompoundShape
from .._proto.nfs4.types import (
    CLOSE4args,
    GETATTR4args,
    GETFH4args,
    LOOKUP4args,
    OPEN4args,
    PUTFH4args,
    READ4args,
    SETATTR4args,
    WRITE4args,
    creatverfattr,
    fattr4,
    open_owner4,
    stateid4,
)
from .._rpc.auth import Credential
from .._transport.base import ReplyHints
from .attributes import NOW, setattr_fattr4
from .compounds import NO_HINTS, VERIFIER_SIZE
from .delegations import Delegations
from .open_state import ANONYMOUS_STATEID, CURRENT_STATEID, Delegation

log = logging.getLogger(__name__)

# a READ by name that fails with one of these met something it cannot read as it is: a symbolic
# link (SYMLINK, or INVAL from servers that say so), or a server that wants an open for I/O
# (BAD_STATEID for the anonymous stateid): the caller takes the longer way
NOT_BY_NAME = frozenset({c.NFS4ERR_SYMLINK, c.NFS4ERR_INVAL, c.NFS4ERR_WRONG_TYPE, c.NFS4ERR_BAD_STATEID})
OPEN_RESULT = 1  # where the OPEN's result is in a write_named COMPOUND (after the PUTFH)
FH_RESULT = 2  # and the GETFH's


SIZE_BITMAP = bitmap4_from((c.FATTR4_SIZE,))  # what a read to the end needs of the file's attributes
TIMES_TO_NOW = setattr_fattr4(atime_ns=NOW, mtime_ns=NOW)  # (encoded once: the encoders only read it)
_SIZE = struct.Struct(">Q")


def _size_at(buf: bytes, start: int, end: int) -> tuple[int | None, None]:
    """The values of a GETATTR of :data:`SIZE_BITMAP` (the size alone), as the general decoder reads
    them; None for values of another length (the general decoder's to judge)."""
    if end - start != _SIZE.size:
        return None, None
    return _SIZE.unpack_from(buf, start)[0], None


def _size_decoder(mask: Sequence[int]) -> AttrsAt:
    return _size_at


_CLOSE_CURRENT = CLOSE4args(0, CURRENT_STATEID)
# the COMPOUNDs below, prepared (see the module's docstring)
READ_NAMED_SHAPE = CompoundShape([PUTFH4args, LOOKUP4args, GETFH4args(), GETATTR4args(SIZE_BITMAP), READ4args],
                                 _size_decoder)
READ_RANGE_NAMED_SHAPE = CompoundShape([PUTFH4args, LOOKUP4args, READ4args])
READ_RANGE_AND_FH_SHAPE = CompoundShape([PUTFH4args, LOOKUP4args, GETFH4args(), READ4args])
READ_HELD_SHAPE = CompoundShape([PUTFH4args, READ4args])
WRITE_NAMED_SHAPE = CompoundShape([PUTFH4args, OPEN4args, GETFH4args(), WRITE4args, _CLOSE_CURRENT])
CREATE_NAMED_SHAPE = CompoundShape([PUTFH4args, OPEN4args, GETFH4args(), _CLOSE_CURRENT])  # (no data)


def _data_eof(values: tuple[Any, ...]) -> tuple[memoryview, bool]:
    """A READ shape's last value: the READ's (data, eof)."""
    data, eof = values[-1]
    return data, eof


def _read_results(res: list[ResOp]) -> tuple[memoryview, bool]:
    ok = result_of(res, c.OP_READ)
    return ok.data, bool(ok.eof)


@functools.lru_cache(maxsize=64)
def _created_or_truncated(mode: int) -> fattr4:
    """The attributes of an UNCHECKED4 create that truncates (mode, size 0), encoded once per mode:
    the same for every small file written whole (the encoders only read it)."""
    return setattr_fattr4(mode=mode, size=0)


@dataclass(slots=True)
class NamedRead:
    """What :meth:`WholeFiles.read_named` read: the file's handle and size, and the data (a view of
    the reply) with the READ's eof."""

    fh: bytes
    size: int
    data: memoryview
    eof: bool


def _named_read(values: tuple[Any, ...]) -> NamedRead:
    """What :data:`READ_NAMED_SHAPE` decoded, as :meth:`WholeFiles.read_named`'s parse gives it."""
    fh, size, (data, eof) = values
    return NamedRead(fh, size, data, eof)


def _fh_data_eof(values: tuple[Any, ...]) -> tuple[bytes, memoryview, bool]:
    """What :data:`READ_RANGE_AND_FH_SHAPE` decoded: (handle, data, eof)."""
    fh, (data, eof) = values
    return fh, data, eof


class WholeFiles:
    """Whole small files by name, one COMPOUND each: ``NFSv4.whole_files``, an object given the
    COMPOUND runner with the delegations it keeps (a WRITE's share access, a delegation the server
    gave anyway, returned)."""

    _once_owners = itertools.count(1)

    def __init__(self, compounds: Delegations) -> None:
        self.compounds = compounds

    def once_owner(self, cred: Credential) -> bytes:
        """An open owner for one OPEN that the same COMPOUND closes again."""
        user = cred.uid if cred.uid is not None else "none"
        return f"once-{user}-{os.getpid()}-{next(self._once_owners)}".encode()

    def read_named(self, dir_fh: bytes, name: str, offset: int, count: int, cred: Credential,
                   path: str | None = None) -> Awaitable[NamedRead | None]:
        """``count`` bytes (at most maxread) at ``offset`` of ``name`` in ``dir_fh``, with its file
        handle and size (a GETATTR of the size alone: the rest of a stat would go unread), in one
        COMPOUND. None when the name cannot be read so (:data:`NOT_BY_NAME`: a symbolic link, a
        server that wants an open)."""
        count = min(count, self.compounds.maxread)
        ops = READ_NAMED_SHAPE.ops(dir_fh, name, READ4args(ANONYMOUS_STATEID, offset, count))

        def parse(res: list[ResOp]) -> NamedRead:
            size = decode_fattr4(result_of(res, c.OP_GETATTR).obj_attributes).get(c.FATTR4_SIZE, 0)
            ok = result_of(res, c.OP_READ)
            return NamedRead(bytes(result_of(res, c.OP_GETFH).object), size, ok.data, bool(ok.eof))

        return self._by_name(ops, count, cred, path or name, parse, READ_NAMED_SHAPE, _named_read)

    def read_range_named(self, dir_fh: bytes, name: str, offset: int, count: int, cred: Credential,
                         path: str | None = None) -> Awaitable[tuple[memoryview, bool] | None]:
        """``count`` bytes (at most maxread) at ``offset`` of ``name`` in ``dir_fh``, and the READ's eof,
        in one COMPOUND of three operations (no GETFH, no GETATTR: nothing is asked of the server
        that the range does not need). None as for :meth:`read_named`."""
        count = min(count, self.compounds.maxread)
        ops = READ_RANGE_NAMED_SHAPE.ops(dir_fh, name, READ4args(ANONYMOUS_STATEID, offset, count))
        return self._by_name(ops, count, cred, path or name, _read_results, READ_RANGE_NAMED_SHAPE, _data_eof)

    def read_range_and_fh(self, dir_fh: bytes, name: str, offset: int, count: int, cred: Credential,
                          path: str | None = None) -> Awaitable[tuple[bytes, memoryview, bool] | None]:
        """As :meth:`read_range_named`, with the file's handle learned in the same COMPOUND (PUTFH,
        LOOKUP, GETFH, READ): (handle, data, eof), the handle naming the file the data came from, for
        the ranges after it (:meth:`read_held`)."""
        count = min(count, self.compounds.maxread)
        ops = READ_RANGE_AND_FH_SHAPE.ops(dir_fh, name, READ4args(ANONYMOUS_STATEID, offset, count))

        def parse(res: list[ResOp]) -> tuple[bytes, memoryview, bool]:
            return (bytes(result_of(res, c.OP_GETFH).object), *_read_results(res))

        return self._by_name(ops, count, cred, path or name, parse, READ_RANGE_AND_FH_SHAPE, _fh_data_eof)

    async def read_held(self, fh: bytes, offset: int, count: int, cred: Credential,
                        path: str | None = None) -> tuple[memoryview, bool]:
        """``count`` bytes (at most maxread) at ``offset`` of the file ``fh``, and the READ's eof: PUTFH,
        READ with the anonymous stateid, no open. The file read is the one the handle names, whatever
        its name names now; a file removed meanwhile (NFS4ERR_STALE: the handle names nothing any
        more) is FileNotFoundError (errno ENOENT) with ``path`` in it, as a read by name would say."""
        count = min(count, self.compounds.maxread)
        ops = READ_HELD_SHAPE.ops(fh, READ4args(ANONYMOUS_STATEID, offset, count))
        try:
            got: tuple[memoryview, bool] = await self.compounds.query(
                ops, cred, _read_results, ReplyHints(ddp_sizes=[count]), path=path, shape=READ_HELD_SHAPE,
                take=_data_eof)
        except NFS4Error as e:
            if e.status != c.NFS4ERR_STALE:
                raise
            raise FileNotFoundError(errno.ENOENT, f"{os.strerror(errno.ENOENT)} (removed: {e.name})",
                                    path) from None
        return got

    async def _by_name(self, ops: list[Any], count: int, cred: Credential, path: str,
                       parse: Callable[[list[ResOp]], Any], shape: CompoundShape,
                       take: Callable[[tuple[Any, ...]], Any]) -> Any:
        """What ``parse`` makes of the results of a READ by name's COMPOUND (``count`` bytes asked),
        or ``take`` of what its ``shape`` decoded; None when the name cannot be read so
        (:data:`NOT_BY_NAME`), NFS4Error for any other failure."""
        got: list[Any] = []

        def check(results: list[ResOp]) -> None:
            got.append(parse(results))

        def prepared(values: tuple[Any, ...]) -> None:
            got.append(take(values))

        try:
            res = await self.compounds.client.compound(ops, cred, ReplyHints(ddp_sizes=[count]), check=check,
                                                       shape=shape, prepared=prepared)
        except ReplyError as e:
            raise e.located(None, path) from None
        if res.status != c.NFS4_OK:
            failed = res.resarray[-1] if res.resarray else None
            if failed is not None and failed.opnum == c.OP_READ and res.status in NOT_BY_NAME:
                return None
            raise NFS4Error(res.status, failed.opnum if failed else None, path)
        return got[-1]

    async def write_named(self, dir_fh: bytes, name: str, data: Any, cred: Credential, *, mode: int = 0o644,
                          exclusive: bool = False, path: str | None = None) -> tuple[bytes, int]:
        """Create or truncate ``name`` in ``dir_fh`` and write ``data`` (at most maxwrite bytes) to it,
        stable, in one COMPOUND; with ``exclusive`` the name must be new (NFS4ERR_EXIST otherwise).
        Returns the file handle and the bytes written (the server may write fewer: the caller sends
        the rest); no GETATTR is asked for, as no caller needs the attributes after the write."""
        n = memoryview(data).nbytes
        if exclusive:
            how: tuple[int, Any] = (c.EXCLUSIVE4_1, creatverfattr(os.urandom(VERIFIER_SIZE),
                                                                  setattr_fattr4(mode=mode)))
        else:
            how = (c.UNCHECKED4, _created_or_truncated(mode))
        clientid = self.compounds.client.identity.clientid if self.compounds.client.identity else 0
        owner = open_owner4(clientid, self.once_owner(cred))
        access = self.compounds.share_access(c.OPEN4_SHARE_ACCESS_WRITE)
        opening = OPEN4args(0, access, c.OPEN4_SHARE_DENY_NONE, owner, (c.OPEN4_CREATE, how), (c.CLAIM_NULL, name))
        shape: CompoundShape | None = None
        ops: list[Any]
        if exclusive:
            # the server may keep the exclusive create's verifier in the file's times (RFC 8881
            # 18.16.4; NFS-Ganesha does): they are set to its "now" in the same COMPOUND
            ops = [PUTFH4args(dir_fh), opening, GETFH4args(), SETATTR4args(ANONYMOUS_STATEID, TIMES_TO_NOW)]
            if n:
                ops.append(WRITE4args(CURRENT_STATEID, 0, c.FILE_SYNC4, data))
            ops.append(_CLOSE_CURRENT)
        elif n:
            shape = WRITE_NAMED_SHAPE
            ops = shape.ops(dir_fh, opening, WRITE4args(CURRENT_STATEID, 0, c.FILE_SYNC4, data))
        else:
            shape = CREATE_NAMED_SHAPE
            ops = shape.ops(dir_fh, opening)
        done: list[tuple[bytes, int]] = []

        def prepared(values: tuple[Any, ...]) -> None:
            # (the reply of success, no delegation in it: the file handle, and the bytes written)
            done.append((values[1], values[2][0] if n else 0))

        try:
            res = await self.compounds.client.compound(ops, cred, NO_HINTS, payload=n, shape=shape,
                                                       prepared=prepared if shape is not None else None)
        except ReplyError as e:
            raise e.located(None, path or name) from None
        if done:
            return done[0]
        results = res.resarray
        opened = len(results) > OPEN_RESULT and results[OPEN_RESULT].status == c.NFS4_OK
        fh: bytes | None = None
        if opened:
            fh = await self._opened_fh(results, dir_fh, name, cred)
            granted = results[OPEN_RESULT].res.delegation
            if fh is not None and granted[0] != c.OPEN_DELEGATE_NONE and granted[0] != c.OPEN_DELEGATE_NONE_EXT:
                await self._give_back(fh, granted)
        if res.status != c.NFS4_OK:
            failed = results[-1] if results else None
            if fh is not None and failed is not None and failed.opnum != c.OP_CLOSE:
                await self._close_after(fh, results[OPEN_RESULT].res.stateid, cred)
            raise NFS4Error(res.status, failed.opnum if failed else None, path or name)
        written = int(result_of(results, c.OP_WRITE).count) if n else 0
        return bytes(result_of(results, c.OP_GETFH).object), written

    async def _opened_fh(self, results: list[ResOp], dir_fh: bytes, name: str, cred: Credential) -> bytes | None:
        """The file handle of the file a write_named OPEN opened: its GETFH's, or, when the COMPOUND
        stopped before that gave one, looked up by name (None when that fails too: the open is then
        the lease's to end)."""
        if len(results) > FH_RESULT and results[FH_RESULT].status == c.NFS4_OK:
            return bytes(results[FH_RESULT].res.object)
        try:
            res = await self.compounds.run([PUTFH4args(dir_fh), LOOKUP4args(name), GETFH4args()], cred)
        except (NFS4Error, ReplyError) as e:
            log.info("no file handle for an open to close: %s", e)
            return None
        return bytes(result_of(res, c.OP_GETFH).object)

    async def _close_after(self, fh: bytes, stateid: stateid4, cred: Credential) -> None:
        """CLOSE an open a write_named COMPOUND made and did not get to close (it failed before)."""
        try:
            await self.compounds.run([PUTFH4args(fh), CLOSE4args(0, stateid)], cred)
        except (NFS4Error, ReplyError) as e:
            log.info("CLOSE after a failed write: %s", e)

    async def _give_back(self, fh: bytes, granted: tuple[int, Any]) -> None:
        """A delegation the server gave on a write_named OPEN anyway (we asked for none): returned."""
        self.compounds.delegations[fh] = Delegation(int(granted[0]), granted[1].stateid, fh)
        await self.compounds.return_delegation(fh)
