"""The flexible file layout's I/O (RFC 8435): READs and WRITEs by NFSv3 to the data servers the layout
names, for :class:`~.read_write.ReadWrite` when a mount or client asked for pNFS and the export hands
out flexfiles layouts (and no block layout: :mod:`.block_layouts` is preferred where both are).

A READ or WRITE asks :meth:`FlexLayouts.read` / :meth:`FlexLayouts.write` first; None means "through
the metadata server" (no layout, one refused or recalled, a data server that failed), never an error
of its own. The decisions are :mod:`.layouts`' (the cache, shared with the block layout) and
:mod:`.flex_layout`'s; the data servers' calls are :mod:`.data_servers`'.

- Reads go to one mirror; writes to every mirror. A RW layout with ``FF_FLAGS_NO_READ_IO`` serves
  writes only: a read asks for a READ layout (Linux nfsd gives that one the owner's uid + 1).
- Writes go UNSTABLE (FILE_SYNC when the caller asked for stable) and answer with this client's
  verifier ``VERIFIER``; the COMMIT after them is an NFSv3 COMMIT to each data server written. Its
  answer is ``VERIFIER`` while every data server's verifier is the one its writes returned, else
  ``CHANGED``: a data server lost what it had not committed, and the writer sends it again. Then
  LAYOUTCOMMIT, unless the layout says ``FF_FLAGS_NO_LAYOUTCOMMIT``.
- A data server's error: LAYOUTERROR (an NFSv4.2 session), what the file wrote by the layout is
  committed where it can be, the layout is returned, and the file's I/O goes through the metadata
  server until its next open.
- CB_LAYOUTRECALL takes the range out of use at once; the return waits for the file's layout I/O in
  flight and commits what it wrote first.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import trio

from .._errors import NFS4Error
from .._proto import nfs3
from .._proto.nfs4 import const as c
from .._proto.nfs4.layout_flexfiles import NFS_VERSION3, ff_device_addr4, ff_layout4
from .._proto.nfs4.types_v42 import device_error4
from .._rpc.auth import Credential
from .data_servers import DataServerError, DataServers, host_port
from .flex_layout import (
    BadLayout,
    DsIO,
    FlexBody,
    flex_body,
    plan_read,
    plan_write,
    reads_by_layout,
    wants_layoutcommit,
)
from .layout_driver import LayoutDriver
from .layout_ops import LayoutOps
from .layouts import READ, RW, AskLayout, ByLayout, LayoutCache, Segment
from .open_state import OpenFile

log = logging.getLogger(__name__)

FLEX = c.LAYOUT4_FLEX_FILES
POLL = 0.005  # seconds between looks at a file's layout I/O in flight (a recall's return waits for it)
VERIFIER = b"pnfs-ff\0"  # the write verifier of writes by layout while the data servers' hold
CHANGED = b"pnfs-ff!"  # a COMMIT's answer when a data server's verifier changed: write again
STATEID_GONE = frozenset({c.NFS4ERR_BAD_STATEID, c.NFS4ERR_STALE_STATEID, c.NFS4ERR_EXPIRED,
                          c.NFS4ERR_OLD_STATEID})
_LATER = frozenset({c.NFS4ERR_LAYOUTTRYLATER, c.NFS4ERR_RECALLCONFLICT, c.NFS4ERR_DELAY, c.NFS4ERR_GRACE})


@dataclass(slots=True)
class Device:
    """A data server as GETDEVICEINFO described it: where, and the largest READ and WRITE it takes."""

    where: tuple[str, int]
    rsize: int
    wsize: int


@dataclass(slots=True)
class Written:
    """What a file wrote by the layout since its last commit: the data servers (with the verifier
    their writes returned and the credential to commit with), the range, and whether a data server's
    verifier changed meanwhile."""

    servers: dict[tuple[tuple[str, int], bytes], tuple[bytes, int, int]] = field(default_factory=dict)
    start: int = -1
    end: int = 0
    changed: bool = False
    layoutcommit: bool = False


def device_address(addr: ff_device_addr4) -> Device:
    """The data server's first TCP address and its NFSv3 sizes; ``BadLayout`` when it speaks no NFSv3."""
    versions = [v for v in addr.ffda_versions if v.ffdv_version == NFS_VERSION3]
    if not versions:
        spoken = ", ".join(f"{v.ffdv_version}.{v.ffdv_minorversion}" for v in addr.ffda_versions) or "none"
        raise BadLayout(f"the data server speaks no NFSv3 (versions: {spoken})")
    for na in addr.ffda_netaddrs:
        try:
            where = host_port(na)
        except ValueError:
            continue
        v = versions[0]
        return Device(where, max(4096, int(v.ffdv_rsize)), max(4096, int(v.ffdv_wsize)))
    raise BadLayout("the data server has no TCP address")


def layouterror_status(error: DataServerError) -> int:
    """LAYOUTERROR's status for a data server's failure: its NFSv3 status where NFSv4 has the same one
    (RFC 1813 and 8881 share these numbers), NFS4ERR_NXIO when it could not be reached."""
    if error.status is None:
        return c.NFS4ERR_NXIO
    same: dict[int, int] = {nfs3.nfsstat3.NFS3ERR_IO: c.NFS4ERR_IO, nfs3.nfsstat3.NFS3ERR_NXIO: c.NFS4ERR_NXIO,
            nfs3.nfsstat3.NFS3ERR_ACCES: c.NFS4ERR_ACCESS, nfs3.nfsstat3.NFS3ERR_PERM: c.NFS4ERR_PERM,
            nfs3.nfsstat3.NFS3ERR_NOSPC: c.NFS4ERR_NOSPC, nfs3.nfsstat3.NFS3ERR_STALE: c.NFS4ERR_STALE,
            nfs3.nfsstat3.NFS3ERR_DQUOT: c.NFS4ERR_DQUOT, nfs3.nfsstat3.NFS3ERR_ROFS: c.NFS4ERR_ROFS}
    return same.get(error.status, c.NFS4ERR_IO)


class FlexLayouts(LayoutDriver):
    """The flexfiles layouts of one client: its cache of layouts, data servers, writes to commit."""

    def __init__(self, ops: LayoutOps, nursery: trio.Nursery) -> None:
        super().__init__(ops, nursery, LayoutCache(FLEX, block_size=1))
        self.devices: dict[bytes, Device | None] = {}  # deviceid -> where (None: not usable here)
        self.servers = DataServers(nursery)
        self.written: dict[bytes, Written] = {}
        self.ds_calls: Counter[str] = Counter()  # READ/WRITE/COMMIT calls, by data server address
        self.ds_bytes: Counter[str] = Counter()

    # -- what stats show ----------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "layout": "flexfiles",
            "data_servers": sorted(self.ds_calls),
            "counts": dict(self.counts),
            "through_mds": dict(self.reasons),
        }

    def device_rows(self) -> list[dict[str, Any]]:
        """The data servers that carried I/O, as rows beside the paths ``pynfsrdma paths`` lists."""
        return [{"state": "up", "address": where, "transport": "flexfiles data server (NFSv3, tcp)",
                 "calls": self.ds_calls[where], "bytes": self.ds_bytes[where], "source": "pnfs layout",
                 "verification": "none"} for where in sorted(self.ds_calls)]

    # -- layouts and devices ------------------------------------------------------------------------------
    def _held(self, fh: bytes, offset: int, length: int, iomode: int) -> Segment | AskLayout | str:
        """The segment an I/O goes by, the LAYOUTGET to send first, or why it goes through the MDS."""
        route = self.cache.route(fh, offset, length, iomode)
        if isinstance(route, AskLayout):
            return route
        if not isinstance(route, ByLayout):
            return route.reason
        if iomode == RW or reads_by_layout(route.segment.body, route.segment.iomode == RW):
            return route.segment
        held = self.cache.files.get(fh)
        for seg in held.segments if held is not None else []:
            if seg.covers(offset) and seg.iomode == READ:
                return seg
        return self.cache.ask_for(offset, length, READ)

    async def _layout(self, of: OpenFile, fh: bytes, offset: int, length: int, iomode: int,
                      cred: Credential) -> Segment | None:
        held = self._held(fh, offset, length, iomode)
        if not isinstance(held, AskLayout):
            return self._by(held)
        async with self.file_lock(fh):  # one LAYOUTGET of a file at a time: the I/O that waited may find it held
            held = self._held(fh, offset, length, iomode)
            if not isinstance(held, AskLayout):
                return self._by(held)
            with self.cache.asking(fh):
                return await self._ask(of, fh, held, offset, length, iomode, cred)

    def _by(self, held: Segment | str) -> Segment | None:
        """The segment held, or None and the reason counted for the metadata server."""
        if isinstance(held, Segment):
            return held
        self.mds(held)
        return None

    async def _ask(self, of: OpenFile, fh: bytes, ask: AskLayout, offset: int, length: int, iomode: int,
                   cred: Credential) -> Segment | None:
        types = self.ops.layout_types
        if types is not None and FLEX not in types:
            why = "the export's file system hands out no flexfiles layout (fs_layout_types: " \
                  f"{', '.join(str(t) for t in types) or 'none'})"
            self.cache.refuse(fh, why)
            self.mds(why)
            return None
        held_sid = self.cache.files.get(fh)
        stateid = held_sid.stateid if held_sid is not None and held_sid.stateid is not None else of.stateid
        try:
            try:
                self.counts["layoutget"] += 1
                res, _ = await self.ops.layoutget(fh, stateid, FLEX, ask.iomode, ask.offset, ask.length,
                                                  ask.minlength, cred)
            except NFS4Error as e:
                if e.status not in STATEID_GONE or stateid == of.stateid:
                    raise
                self.counts["layoutget"] += 1  # (the layout stateid went with a restart: the open's)
                res, _ = await self.ops.layoutget(fh, of.stateid, FLEX, ask.iomode, ask.offset, ask.length,
                                                  ask.minlength, cred)
        except NFS4Error as e:
            self.mds(f"LAYOUTGET: {e.name}")
            if e.status not in _LATER:
                self.cache.refuse(fh, f"LAYOUTGET: {e.name}")
            return None
        segs = []
        try:
            for lo in res.logr_layout:
                if lo.lo_content.loc_type != FLEX:
                    continue
                body = flex_body(ff_layout4.XDR.decode(lo.lo_content.loc_body))
                for mirror in body.mirrors:
                    for ds in mirror:
                        if await self._device(ds.deviceid, cred) is None:
                            raise BadLayout("a data server of the layout cannot be used here")
                segs.append(Segment(lo.lo_offset, lo.lo_length, lo.lo_iomode, FLEX, body))
        except (BadLayout, ValueError) as e:
            self.cache.granted(fh, res.logr_stateid, res.logr_return_on_close, [])
            self.cache.refuse(fh, str(e))
            self.mds(str(e))
            await self.return_all(fh, cred)
            return None
        if not self.cache.granted(fh, res.logr_stateid, res.logr_return_on_close, segs):
            log.info("a LAYOUTGET reply older than the layout state held, or raced by a recall: not kept")
        held = self._held(fh, offset, length, iomode)
        if isinstance(held, Segment):
            return held
        self.mds("the layout granted does not cover the I/O")
        return None

    async def _device(self, deviceid: bytes, cred: Credential) -> Device | None:
        if deviceid in self.devices:
            return self.devices[deviceid]
        self.counts["getdeviceinfo"] += 1
        addr = await self.ops.getdeviceinfo(deviceid, FLEX, cred)
        try:
            dev: Device | None = device_address(ff_device_addr4.XDR.decode(addr.da_addr_body))
        except (BadLayout, ValueError) as e:
            log.info("flexfiles data server %s: %s; I/O through the metadata server", deviceid.hex(), e)
            dev = None
        self.devices[deviceid] = dev
        return dev

    def forget_devices(self, items: list[Any]) -> None:
        """CB_NOTIFY_DEVICEID: the devices changed or deleted are looked up again when next used."""
        for item in items:
            self.devices.pop(bytes(getattr(item, "ndc_deviceid", getattr(item, "ndd_deviceid", b""))), None)

    # -- READ ---------------------------------------------------------------------------------------------
    async def read(self, of: OpenFile, fh: bytes, offset: int, count: int,
                   cred: Credential) -> tuple[memoryview, bool] | None:
        """A READ by the layout from one mirror: (data, eof), or None for the metadata server."""
        self.cred = cred
        if count <= 0:
            return None
        seg = await self._layout(of, fh, offset, count, READ, cred)
        if seg is None:
            return None
        body: FlexBody = seg.body
        plan = plan_read(body, offset, count)
        io = plan[0]
        self.cache.started(fh)
        if not self.cache.holds(fh, seg):  # (recalled while its data server was looked up)
            self.cache.ended(fh)
            self.mds("layout recalled")
            return None
        try:
            parts = []
            eof = False
            for io in plan:
                data, eof = await self._read_piece(io)
                parts.append(data)
                if data.nbytes < io.length:
                    eof = True
                    break
        except DataServerError as e:
            failed: DataServerError | None = e
        else:
            failed = None
        finally:
            self.cache.ended(fh)
        if failed is not None:
            await self._failed(fh, io, failed, c.OP_READ, cred)
            return None
        self.counts["reads"] += 1
        data = parts[0] if len(parts) == 1 else memoryview(b"".join(parts))  # (striped: one join)
        self.counts["read_bytes"] += data.nbytes
        return data, eof

    async def _read_piece(self, io: DsIO) -> tuple[memoryview, bool]:
        dev = self.devices.get(io.server.deviceid)
        if dev is None:
            raise DataServerError("the data server was forgotten (CB_NOTIFY_DEVICEID)")
        if io.length <= dev.rsize:
            data, eof = await self.servers.read(dev.where, io.server.fh, io.offset, io.length, io.server.uid,
                                                io.server.gid)
            self._count(dev, data.nbytes)
            return data, eof
        parts = []
        eof = False
        for at in range(io.offset, io.offset + io.length, dev.rsize):
            n = min(dev.rsize, io.offset + io.length - at)
            data, eof = await self.servers.read(dev.where, io.server.fh, at, n, io.server.uid, io.server.gid)
            self._count(dev, data.nbytes)
            parts.append(data)
            if data.nbytes < n:
                eof = True
                break
        return memoryview(b"".join(parts)), eof

    def _count(self, dev: Device, nbytes: int) -> None:
        where = f"{dev.where[0]}:{dev.where[1]}"
        self.ds_calls[where] += 1
        self.ds_bytes[where] += nbytes

    # -- WRITE --------------------------------------------------------------------------------------------
    async def write(self, of: OpenFile, offset: int, data: Any, cred: Credential,
                    stable: int) -> tuple[int, int, bytes] | None:
        """A WRITE by the layout to every mirror: (count, committed, verifier), or None for the metadata
        server. ``stable``: the NFSv4 stable_how asked (UNSTABLE4, DATA_SYNC4 or FILE_SYNC4)."""
        self.cred = cred
        fh = of.fh
        src = memoryview(data).cast("B")
        n = src.nbytes
        if n == 0:
            return None
        seg = await self._layout(of, fh, offset, n, RW, cred)
        if seg is None:
            return None
        body: FlexBody = seg.body
        how = nfs3.stable_how.UNSTABLE if stable == c.UNSTABLE4 else nfs3.stable_how.FILE_SYNC
        w = self.written.setdefault(fh, Written())
        committed = int(nfs3.stable_how.FILE_SYNC)
        self.cache.started(fh)
        if not self.cache.holds(fh, seg):  # (recalled while its data server was looked up)
            self.cache.ended(fh)
            self.mds("layout recalled")
            return None
        failed: DataServerError | None = None
        io: DsIO | None = None
        try:
            for io in plan_write(body, offset, n):
                dev = self.devices.get(io.server.deviceid)
                if dev is None:
                    raise DataServerError("the data server was forgotten (CB_NOTIFY_DEVICEID)")
                for at in range(io.offset, io.offset + io.length, dev.wsize):
                    k = min(dev.wsize, io.offset + io.length - at)
                    _, how_done, verf = await self.servers.write(dev.where, io.server.fh, at,
                                                                 src[at - offset:at - offset + k], how,
                                                                 io.server.uid, io.server.gid)
                    self._count(dev, k)
                    committed = min(committed, how_done)
                    key = (dev.where, io.server.fh)
                    seen = w.servers.get(key)
                    if seen is not None and seen[0] != verf:
                        w.changed = True
                    w.servers[key] = (verf, io.server.uid, io.server.gid)
        except DataServerError as e:
            failed = e
        finally:
            self.cache.ended(fh)
        if failed is not None:
            assert io is not None
            await self._failed(fh, io, failed, c.OP_WRITE, cred)
            return None
        w.start = offset if w.start < 0 else min(w.start, offset)
        w.end = max(w.end, offset + n)
        w.layoutcommit = w.layoutcommit or wants_layoutcommit(body)
        self.counts["writes"] += 1
        self.counts["write_bytes"] += n
        if committed == nfs3.stable_how.FILE_SYNC:
            await self._layoutcommit(fh, w, cred)
            return n, c.FILE_SYNC4, VERIFIER
        return n, c.UNSTABLE4, VERIFIER

    # -- COMMIT -------------------------------------------------------------------------------------------
    def dirty(self, fh: bytes) -> bool:
        w = self.written.get(fh)
        return w is not None and bool(w.servers or w.layoutcommit)

    async def commit(self, fh: bytes, cred: Credential) -> bytes:
        """COMMIT to each data server the file was written to, then LAYOUTCOMMIT where the layout
        wants one: ``VERIFIER`` when every data server kept what it was sent, else ``CHANGED``."""
        async with self.file_lock(fh):
            w = self.written.pop(fh, None)
            if w is None:
                return VERIFIER
            changed = w.changed
            for (where, ds_fh), (verf, uid, gid) in w.servers.items():
                try:
                    self.counts["ds_commits"] += 1
                    got = await self.servers.commit(where, ds_fh, uid, gid)
                except DataServerError as e:
                    log.warning("flexfiles COMMIT: %s; what was written is sent again", e)
                    self.mds(f"data server COMMIT failed: {e}")
                    return CHANGED
                self.ds_calls[f"{where[0]}:{where[1]}"] += 1
                changed = changed or got != verf
            if changed:
                self.counts["verifier_changed"] += 1
                return CHANGED
            try:
                await self._layoutcommit(fh, w, cred)
            except NFS4Error as e:
                log.warning("LAYOUTCOMMIT: %s; what was written is sent again", e)
                return CHANGED
            return VERIFIER

    async def _layoutcommit(self, fh: bytes, w: Written, cred: Credential) -> None:
        held = self.cache.files.get(fh)
        if not w.layoutcommit or w.start < 0 or held is None or held.stateid is None:
            return
        self.counts["layoutcommit"] += 1
        await self.ops.layoutcommit(fh, held.stateid, w.start, w.end - w.start, w.end - 1, FLEX, b"", cred)
        w.layoutcommit = False

    # -- failures, returns, recalls ----------------------------------------------------------------------
    async def _failed(self, fh: bytes, io: DsIO, error: DataServerError, opnum: int, cred: Credential) -> None:
        """A data server failed: LAYOUTERROR, the layout given back, the file's I/O through the MDS."""
        log.warning("flexfiles %s: %s; through the metadata server", "READ" if opnum == c.OP_READ else "WRITE", error)
        self.mds(f"data server error: {error}")
        held = self.cache.files.get(fh)
        if held is not None and held.refused is not None:
            return  # (another READ or WRITE of the file failed first: it reports and returns the layout)
        self.cache.refuse(fh, f"data server error: {error}")
        if held is not None and held.stateid is not None:
            try:
                sent = await self.ops.layouterror(fh, held.stateid, io.offset, io.length,
                                                  [device_error4(io.server.deviceid, layouterror_status(error), opnum)],
                                                  cred)
            except NFS4Error as e:
                log.info("LAYOUTERROR: %s", e)
                sent = False
            self.counts["layouterror" if sent else "layouterror_not_taken"] += 1
        self.devices.pop(io.server.deviceid, None)
        await self.return_all(fh, cred)

    async def commit_before_return(self, fh: bytes, cred: Credential) -> None:
        if self.dirty(fh) and await self.commit(fh, cred) == CHANGED:
            self.counts["uncommitted_lost"] += 1  # (the writer's COMMIT sees the change: it writes again)
            self.written.setdefault(fh, Written()).changed = True

    async def commit_at_close(self, fh: bytes, cred: Credential) -> None:
        if self.dirty(fh) and await self.commit(fh, cred) == CHANGED:
            log.warning("writes by the flexfiles layout lost by a data server before the close")

    def forget_all(self) -> None:
        """The client ID is gone, and its layouts with it: none is returned; what was written by them
        and not committed is written again (the next COMMIT answers ``CHANGED``)."""
        self.layouts_lost()
        for w in self.written.values():
            w.changed = True

    async def aclose(self) -> None:
        await self.servers.aclose()
