"""File data, one COMPOUND each: READ, WRITE (the data sent by reference), COMMIT, and a WRITE
with the SETATTR and GETATTR the FUSE mount sends after it in the same COMPOUND. With pNFS on
(:meth:`ReadWrite.use_pnfs`), a READ or WRITE of an open file goes by the SCSI or block layout
(:mod:`.block_layouts`) or, on an export that hands out flexfiles layouts and neither, by the
flexfiles layout (:mod:`.flex_layouts`) when it can, and through the metadata server when not."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import trio

from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import ResOp, result_of
from .._proto.nfs4.compound_shapes import CompoundShape
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
from .attributes import STAT_BITMAP, FileAttrs, entry_attrs_decoder_at
from .block_layouts import VERIFIER, BlockLayouts
from .compounds import last_attrs
from .flex_layouts import VERIFIER as FLEX_VERIFIER
from .flex_layouts import FlexLayouts
from .layout_ops import LayoutOps
from .open_state import ANONYMOUS_STATEID, OpenFile
from .read_payload import read_data_locator
from .read_sink import PayloadSink

#: a READ of an open file: its COMPOUND encoded from prepared bytes, its reply of success decoded
#: straight into (data, eof), and where its data lies found by the same decoder
READ_SHAPE = CompoundShape([PUTFH4args, READ4args])
#: a WRITE of an open file: the same, its reply decoded into (count, committed, write verifier)
WRITE_SHAPE = CompoundShape([PUTFH4args, WRITE4args])
#: a WRITE with the attributes after it (and a SETATTR before them): (count, committed, write
#: verifier) and the attributes
WRITE_GETATTR_SHAPE = CompoundShape([PUTFH4args, WRITE4args, GETATTR4args(STAT_BITMAP)], entry_attrs_decoder_at)
WRITE_SETATTR_GETATTR_SHAPE = CompoundShape([PUTFH4args, WRITE4args, SETATTR4args, GETATTR4args(STAT_BITMAP)],
                                            entry_attrs_decoder_at)


def _data_eof(values: tuple[Any, ...]) -> tuple[Any, bool]:
    """What :data:`READ_SHAPE` decoded: the READ's (data, eof)."""
    data, eof = values[-1]
    return data, eof


def _written(values: tuple[Any, ...]) -> tuple[int, int, bytes]:
    """What :data:`WRITE_SHAPE` decoded: the WRITE's (count, committed, write verifier)."""
    written: tuple[int, int, bytes] = values[-1]
    return written


def _written_attrs(values: tuple[Any, ...]) -> tuple[int, int, bytes, FileAttrs]:
    """What :data:`WRITE_GETATTR_SHAPE` (or with SETATTR) decoded: the WRITE's (count, committed,
    write verifier) and the attributes."""
    (count, committed, verifier), attrs = values
    return count, committed, verifier, attrs


def _write_attrs_results(res: list[ResOp]) -> tuple[int, int, bytes, FileAttrs]:
    """The same from the general decoder's results."""
    ok = result_of(res, c.OP_WRITE)
    return int(ok.count), int(ok.committed), bytes(ok.writeverf), last_attrs(res)


def _write_results(res: list[ResOp]) -> tuple[int, int, bytes]:
    """The WRITE's (count, committed, write verifier) from the general decoder's results."""
    ok = result_of(res, c.OP_WRITE)
    return int(ok.count), int(ok.committed), bytes(ok.writeverf)


def _read_results(res: list[ResOp]) -> tuple[Any, bool]:
    """The READ's (data, eof) from the general decoder's results."""
    ok = result_of(res, c.OP_READ)
    return ok.data, bool(ok.eof)


class ReadWrite:
    """READ, WRITE, COMMIT: ``NFSv4.read_write``, an object given the COMPOUND runner with its layout
    operations (LAYOUTGET, LAYOUTCOMMIT, LAYOUTRETURN: for the block and flexfiles layouts, with ``pnfs``)."""

    def __init__(self, compounds: LayoutOps) -> None:
        self.compounds = compounds
        self.pnfs: BlockLayouts | None = None
        self.flex: FlexLayouts | None = None
        self._mds_writes: set[bytes] = set()  # files written through the metadata server since their COMMIT

    def use_pnfs(self, nursery: trio.Nursery) -> BlockLayouts:
        """READs and WRITEs by block layouts, or flexfiles layouts, where the server hands them out;
        the layouts are recalled through the back channel, committed and returned on close."""
        self.pnfs = BlockLayouts(self.compounds, nursery)
        self.flex = FlexLayouts(self.compounds, nursery)
        self.compounds.client.backchannel.on_layoutrecall = self._on_recall
        self.compounds.client.backchannel.on_notify_deviceid = self._forget_devices
        self.compounds.close_hooks.append(self._closing)
        self.compounds.client.reclaim_hooks.append(self._layouts_lost)
        return self.pnfs

    async def close_layouts(self) -> None:
        """At the client's end: the data servers' connections closed, our reservation keys taken off
        the SCSI units and the block devices closed (the path API and the mount alike)."""
        try:
            if self.flex is not None:
                await self.flex.aclose()
        finally:
            if self.pnfs is not None:
                self.pnfs.close()

    def _by_flex(self) -> FlexLayouts | None:
        """The flexfiles layouts, when the export hands them out and no SCSI or block layout (those first)."""
        types = self.compounds.layout_types
        if self.flex is None or types is None or c.LAYOUT4_FLEX_FILES not in types \
                or c.LAYOUT4_BLOCK_VOLUME in types or c.LAYOUT4_SCSI in types:
            return None
        return self.flex

    def pnfs_report(self) -> dict[str, Any]:
        """What ``stats`` shows of pNFS: the layout in use, its counts, why I/O went through the MDS."""
        flex = self._by_flex()
        if flex is not None:
            return flex.report()
        return self.pnfs.report() if self.pnfs is not None else {"enabled": False}

    def pnfs_rows(self) -> list[dict[str, Any]]:
        """The devices or data servers that carried I/O by layout, as rows beside the paths."""
        flex = self._by_flex()
        if flex is not None:
            return flex.device_rows()
        return self.pnfs.device_rows() if self.pnfs is not None else []

    def _on_recall(self, args: Any) -> int:
        if self.flex is not None and args.clora_type == c.LAYOUT4_FLEX_FILES:
            return self.flex.on_recall(args)
        assert self.pnfs is not None
        return self.pnfs.on_recall(args)

    def _forget_devices(self, items: list[Any]) -> None:
        for layouts in (self.pnfs, self.flex):
            if layouts is not None:
                layouts.forget_devices(items)

    async def _closing(self, fh: bytes, cred: Credential) -> None:
        if self.pnfs is not None:
            await self.pnfs.closing(fh, cred)
        if self.flex is not None:
            await self.flex.closing(fh, cred)

    async def _layouts_lost(self, client: Any) -> None:
        """A new client ID (the server restarted, or our lease ran out): the layouts went with the old one."""
        if self.pnfs is not None:
            self.pnfs.forget_all()
        if self.flex is not None:
            self.flex.forget_all()

    async def read(self, of: OpenFile | None, fh: bytes, offset: int, count: int,
                   cred: Credential, *, lock_owner: Hashable | None = None,
                   path: str | None = None, sink: PayloadSink | None = None) -> tuple[memoryview, bool]:
        """One READ of at most maxread bytes: (data as a view of the reply, eof). The data is a
        :class:`~.read_sink.SplicedPayload` instead when ``sink`` (a pipe for this READ's data:
        :mod:`.read_sink`) is given, the READ goes whole (``count`` within maxread) through the
        server, and the transport spliced the data into it."""
        asked, count = count, min(count, self.compounds.maxread)
        flex = self._by_flex()
        if flex is not None and of is not None:
            by_flex = await flex.read(of, fh, offset, count, cred)
            if by_flex is not None:
                return by_flex
        elif self.pnfs is not None and of is not None:
            by_layout = await self.pnfs.read(of, fh, offset, count, cred)
            if by_layout is not None:
                return by_layout
        hints = ReplyHints(ddp_sizes=[count])
        if sink is not None and count == asked:
            hints.splice = SpliceRequest(sink, read_data_locator(READ_SHAPE, count), count)
        data: tuple[memoryview, bool] = await self.compounds.query_with_open(
            of, lambda s: READ_SHAPE.ops(fh, READ4args(s, offset, count)), cred, _read_results, hints,
            lock_owner=lock_owner, path=path, shape=READ_SHAPE, take=_data_eof,
        )
        return data

    async def write(self, of: OpenFile, offset: int, data: Any, cred: Credential,
                    stable: int = c.UNSTABLE4, *, lock_owner: Hashable | None = None,
                    path: str | None = None) -> tuple[int, int, bytes]:
        """One WRITE (data sent by reference): (count, committed, write verifier)."""
        n = memoryview(data).nbytes
        flex = self._by_flex()
        if flex is not None:
            by_flex = await flex.write(of, offset, data, cred, stable)
            if by_flex is not None:
                return by_flex
            self._mds_writes.add(of.fh)
        elif self.pnfs is not None:
            if await self.pnfs.write(of, offset, data, cred):
                if stable == c.UNSTABLE4:
                    return n, c.UNSTABLE4, VERIFIER
                await self.pnfs.commit(of.fh, cred)
                if of.fh not in self.pnfs.lost:
                    return n, c.FILE_SYNC4, VERIFIER
                self.pnfs.lost.discard(of.fh)
                await self.pnfs.give_back(of.fh, cred, "LAYOUTCOMMIT failed")
            self._mds_writes.add(of.fh)
        return await self.compounds.query_with_open(
            of, lambda s: WRITE_SHAPE.ops(of.fh, WRITE4args(s, offset, stable, data)), cred, _write_results,
            payload=n, lock_owner=lock_owner, path=path, shape=WRITE_SHAPE, take=_written,
        )

    async def commit(self, fh: bytes, cred: Credential, offset: int = 0, count: int = 0,
                     path: str | None = None) -> bytes:
        """COMMIT: the write verifier to compare the WRITEs' with (the server's, or a layout's)."""
        return (await self.commit_verifiers(fh, cred, offset, count, path))[0]

    async def commit_verifiers(self, fh: bytes, cred: Credential, offset: int = 0, count: int = 0,
                               path: str | None = None) -> tuple[bytes, ...]:
        """COMMIT, and every write verifier it confirms: the server's, and a layout's too when the
        file was written both by a layout (committed by it: LAYOUTCOMMIT, or the data servers'
        COMMITs) and through the server since its last COMMIT (a recall in the middle of a
        transfer). What was written by the layout is then not sent again."""
        by_layout: tuple[bytes, ...] = ()
        flex = self._by_flex()
        if flex is not None:
            # (not dirty: nothing written by it, or committed already, by a recall's return)
            dirty = flex.dirty(fh)
            verifier = await flex.commit(fh, cred) if dirty else FLEX_VERIFIER
            if dirty and fh not in self._mds_writes:
                return (verifier,)
            by_layout = (verifier,) if verifier == FLEX_VERIFIER else ()
        elif self.pnfs is not None:
            dirty = self.pnfs.dirty(fh)
            if dirty:
                await self.pnfs.commit(fh, cred)
            if fh not in self.pnfs.lost:
                if dirty and fh not in self._mds_writes:
                    return (VERIFIER,)
                by_layout = (VERIFIER,)
        if self.pnfs is not None:
            # (after a LAYOUTCOMMIT that failed: the server's verifier makes the writer send those again)
            self.pnfs.lost.discard(fh)
        self._mds_writes.discard(fh)
        res = await self.compounds.run([PUTFH4args(fh), COMMIT4args(offset, count)], cred, path=path)
        return (bytes(result_of(res, c.OP_COMMIT).writeverf), *by_layout)

    async def write_getattr(
        self, of: OpenFile, offset: int, data: Any, cred: Credential, stable: int = c.FILE_SYNC4,
        setattrs: fattr4 | None = None, *, lock_owner: Hashable | None = None, path: str | None = None,
    ) -> tuple[int, int, bytes, FileAttrs]:
        """One WRITE, then (if given) a SETATTR of ``setattrs`` (not of the size: it goes with the
        anonymous stateid, as ``Names.setattr`` sends it), then GETATTR, in one COMPOUND: (count,
        committed, write verifier, attributes after them)."""
        n = memoryview(data).nbytes
        if self._by_flex() is not None:
            self._mds_writes.add(of.fh)
        elif self.pnfs is not None:  # (through the metadata server: a RW layout held would be recalled)
            await self.pnfs.give_back(of.fh, cred, "a WRITE with attributes went through the metadata server")
            self._mds_writes.add(of.fh)

        if setattrs is None:
            shape = WRITE_GETATTR_SHAPE

            def build(stateid: stateid4) -> list[Any]:
                return shape.ops(of.fh, WRITE4args(stateid, offset, stable, data))
        else:
            shape = WRITE_SETATTR_GETATTR_SHAPE
            setattr_args = SETATTR4args(ANONYMOUS_STATEID, setattrs)

            def build(stateid: stateid4) -> list[Any]:
                return shape.ops(of.fh, WRITE4args(stateid, offset, stable, data), setattr_args)

        return await self.compounds.query_with_open(
            of, build, cred, _write_attrs_results, payload=n, lock_owner=lock_owner, path=path, shape=shape,
            take=_written_attrs)

