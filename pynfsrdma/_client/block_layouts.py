"""The block layout's I/O (RFC 5663), and the SCSI layout's (RFC 8154): READs and WRITEs straight to
the device the layout names, for :class:`~.read_write.ReadWrite` when a mount or client asked for pNFS.

The SCSI layout is the block layout with its units named by their SCSI designator (VPD page 0x83)
instead of a signature, a reservation key registered on each unit before its first I/O (the server
fences a client by preempting its key) and taken off when the client ID ends, and a LAYOUTCOMMIT of
file ranges. It is used when the export hands it out (``fs_layout_types``), the block layout when
not. A unit not found here, or one that refuses the registration: one log line, and the I/O through
the metadata server.

A READ or WRITE asks :meth:`BlockLayouts.read` / :meth:`BlockLayouts.write` first; None or False
means "through the metadata server" (no layout, one refused or recalled, a device not found here, an
extent the layout does not cover, an I/O error), never an error of its own. The decisions are
:mod:`.layouts`' and :mod:`.block_layout`'s; this module does the LAYOUTGETs, GETDEVICEINFOs,
LAYOUTCOMMITs and LAYOUTRETURNs they call for and the device I/O.

- Writes: whole blocks with O_DIRECT (an edge block of a READWRITE_DATA extent read first, of an
  INVALID_DATA one zeroed), answered UNSTABLE with this client's verifier; the COMMIT after them is
  an fdatasync of the device and a LAYOUTCOMMIT of the extents written and the new size.
- A file whose WRITE must go through the metadata server while a RW layout of it is held gives the
  layout back first (LAYOUTCOMMIT, LAYOUTRETURN): nfsd recalls every layout of a file an NFS WRITE
  changes, the writer's own too, and that WRITE would wait for the recall.
- A READ or WRITE to a device that fails is reported with LAYOUTERROR (on an NFSv4.2 session, until
  the server says it does not support it), the file's layouts are given back as above, and the I/O
  goes through the metadata server.
- CB_LAYOUTRECALL takes the range out of use at once; the return waits for the file's layout I/O
  in flight, commits what it wrote, and sends LAYOUTRETURN.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from typing import Any

import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.layout_block import pnfs_block_deviceaddr4, pnfs_block_layout4, pnfs_block_layoutupdate4
from .._proto.nfs4.layout_scsi import (
    pnfs_scsi_base_volume_info4,
    pnfs_scsi_deviceaddr4,
    pnfs_scsi_layout4,
    pnfs_scsi_layoutupdate4,
)
from .._proto.nfs4.types import stateid4
from .._rpc.auth import Credential
from . import block_devices
from .block_layout import (
    BadLayout,
    CommitList,
    DeviceRead,
    DeviceWrite,
    Uncovered,
    device_error,
    extents_of,
    holds_data,
    own_writes,
    plan_read,
    plan_write,
    written,
)
from .block_volumes import NoDevice, Piece, Volume, resolve, resolve_scsi, simple_paths
from .layout_driver import LayoutDriver
from .layout_ops import LayoutOps
from .layouts import READ, RW, AskLayout, ByLayout, LayoutCache, Segment
from .open_state import OpenFile

# a LAYOUTGET's stateid no longer known to the server (a restart, an expired lease)
STATEID_GONE = frozenset({c.NFS4ERR_BAD_STATEID, c.NFS4ERR_STALE_STATEID, c.NFS4ERR_EXPIRED,
                          c.NFS4ERR_OLD_STATEID})

log = logging.getLogger(__name__)
_NO_LOCK = contextlib.nullcontext()

BLOCK = c.LAYOUT4_BLOCK_VOLUME
SCSI = c.LAYOUT4_SCSI
POLL = 0.005  # seconds between looks at a file's layout I/O in flight (a recall, a give-back waits for it)
RECALL_WAIT = 30.0  # seconds a WRITE through the metadata server waits for a recall's return to finish
VERIFIER = b"pnfs-blk"  # the write verifier of writes by layout: they are stable once LAYOUTCOMMITted


class BlockLayouts(LayoutDriver):
    """The block layouts of one client: its cache of layouts, devices found, writes to commit."""

    def __init__(self, ops: LayoutOps, nursery: trio.Nursery, block_size: int = 4096) -> None:
        super().__init__(ops, nursery, LayoutCache(BLOCK, block_size))
        self.block_size = block_size
        self.volumes: dict[bytes, Volume | None] = {}  # deviceid -> its volume (None: not on this machine)
        self.devices: dict[str, block_devices.BlockDevice] = {}
        self.commits: dict[bytes, CommitList] = {}
        # per file: the blocks written by its layout since it was granted, committed or not (a
        # LAYOUTGET answered before their LAYOUTCOMMIT calls them INVALID_DATA: ``own_writes``)
        self.wrote: dict[bytes, CommitList] = {}
        self.sizes: dict[bytes, int] = {}
        self.candidates = block_devices.candidates
        self.find_designator = block_devices.find_designator
        self.layout_type = BLOCK  # SCSI once the export says it hands that out (``_pick``)
        self.picked = False
        self.keys: dict[str, int] = {}  # SCSI layout: the reservation key registered on each unit, by path
        self.unusable: dict[bytes, str] = {}  # deviceid -> why it is not used (stats' through_mds reason)
        self.lost: set[bytes] = set()  # files whose writes by layout could not be committed
        self.commit_locks: dict[bytes, trio.Lock] = {}  # per file: its LAYOUTCOMMITs one at a time
        self.edge_locks: dict[bytes, trio.Lock] = {}  # per file: read-modify-writes of edge blocks  # per file: its LAYOUTGETs and returns one at a time
        self.device_calls: Counter[str] = Counter()  # reads and writes, by device path
        self.device_bytes: Counter[str] = Counter()

    # -- what stats show ----------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "layout": "scsi" if self.layout_type == SCSI else "block",
            "devices": sorted(d for d in self.devices),
            "counts": dict(self.counts),
            "through_mds": dict(self.reasons),
        }

    def device_rows(self) -> list[dict[str, Any]]:
        """The block devices that carried I/O, as rows beside the paths ``pynfsrdma paths`` lists."""
        scsi = self.layout_type == SCSI
        return [{"state": "up", "address": path, "transport": "scsi layout" if scsi else "block layout",
                 "calls": self.device_calls[path], "bytes": self.device_bytes[path], "source": "pnfs layout",
                 "verification": "designator" if scsi else "signature"}
                for path in sorted(self.devices)]

    def _pick(self) -> None:
        """The layout type, once the export's ``fs_layout_types`` is known: SCSI where it is handed
        out (nfsd offers it beside the block layout on a unit with persistent reservations), else block."""
        types = self.ops.layout_types
        if self.picked or types is None:
            return
        self.picked = True
        if SCSI in types:
            self.layout_type = self.cache.layout_type = SCSI

    # -- layouts and devices ------------------------------------------------------------------------------
    async def _layout(self, of: OpenFile, fh: bytes, offset: int, length: int, iomode: int,
                      cred: Credential, fresh: bool = False) -> Segment | None:
        """The segment the I/O goes by; ``fresh``: a new LAYOUTGET for it even where a segment held
        covers its offset (that one ends before the I/O does)."""
        route = self.cache.route(fh, offset, length, iomode)
        if isinstance(route, ByLayout) and not fresh:
            return route.segment
        # one LAYOUTGET of a file at a time: the I/O that waited for it may find its range covered
        async with self.file_lock(fh):
            with self.cache.asking(fh):
                return await self._ask(of, fh, offset, length, iomode, cred, fresh)

    async def _ask(self, of: OpenFile, fh: bytes, offset: int, length: int, iomode: int,
                   cred: Credential, fresh: bool) -> Segment | None:
        route = self.cache.route(fh, offset, length, iomode)
        if isinstance(route, ByLayout):
            if not fresh or route.segment.end >= offset + length:
                return route.segment
            route = self.cache.ask_for(offset, length, iomode)
        if not isinstance(route, AskLayout):
            self.mds(route.reason)
            return None
        self._pick()
        types = self.ops.layout_types
        if types is not None and BLOCK not in types and SCSI not in types:
            why = "the export's file system hands out no block or SCSI layout (fs_layout_types: " \
                  f"{', '.join(str(t) for t in types) or 'none'})"
            self.cache.refuse(fh, why)
            self.mds(why)
            return None
        stateid = self._stateid(of, fh)
        try:
            try:
                self.counts["layoutget"] += 1
                res, size = await self.ops.layoutget(fh, stateid, self.layout_type, iomode, route.offset, route.length,
                                                     route.minlength, cred)
            except NFS4Error as e:
                # sent before a recovery and retried after it with the stateid of before: the layouts went
                # with the client ID and the open was reclaimed under a new stateid; ask with that one
                if e.status not in STATEID_GONE or self._stateid(of, fh) == stateid:
                    raise
                self.counts["layoutget"] += 1
                res, size = await self.ops.layoutget(fh, self._stateid(of, fh), self.layout_type, iomode, route.offset,
                                                     route.length, route.minlength, cred)
        except NFS4Error as e:
            # for now (the grace period after a server restart among them), not for the file
            if e.status in (c.NFS4ERR_LAYOUTTRYLATER, c.NFS4ERR_RECALLCONFLICT, c.NFS4ERR_DELAY, c.NFS4ERR_GRACE):
                self.mds(f"LAYOUTGET: {e.name}")
                return None
            self.cache.refuse(fh, f"LAYOUTGET: {e.name}")
            self.mds(f"LAYOUTGET: {e.name}")
            return None
        segs = []
        try:
            for lo in res.logr_layout:
                if lo.lo_content.loc_type != self.layout_type:
                    continue
                body = lo.lo_content.loc_body
                ext = extents_of(pnfs_block_layout4(pnfs_scsi_layout4.XDR.decode(body).sl_extents)
                                 if self.layout_type == SCSI else pnfs_block_layout4.XDR.decode(body), self.block_size)
                if fh in self.wrote:
                    own_writes(ext, self.wrote[fh].extents)
                for x in ext:
                    if await self._volume(x.device, cred) is None:
                        raise NoDevice(self.unusable.get(x.device, "no device here carries the layout's volume"))
                segs.append(Segment(lo.lo_offset, lo.lo_length, lo.lo_iomode, self.layout_type, ext))
        except (BadLayout, NoDevice, ValueError) as e:
            self.cache.granted(fh, res.logr_stateid, res.logr_return_on_close, [])
            self.cache.refuse(fh, str(e))
            self.mds(str(e))
            await self.return_all(fh, cred)
            return None
        # the server's size, or ours while writes by the layout wait for their LAYOUTCOMMIT
        self.sizes[fh] = max(size, self.sizes.get(fh, 0)) if self.dirty(fh) else size
        if not self.cache.granted(fh, res.logr_stateid, res.logr_return_on_close, segs):
            log.info("a LAYOUTGET reply older than the layout state held, or raced by a recall: not kept")
        elif fresh:
            for seg in segs:
                if seg.covers(offset) and seg.end >= offset + length and seg.iomode in (iomode, RW):
                    return seg
        route = self.cache.route(fh, offset, length, iomode)
        if isinstance(route, ByLayout):
            return route.segment
        self.mds("the layout granted does not cover the I/O")
        return None

    def _stateid(self, of: OpenFile, fh: bytes) -> stateid4:
        """What a LAYOUTGET of ``fh`` goes with: the layout stateid held, else the open's (RFC 8881 12.5.2)."""
        held = self.cache.files.get(fh)
        return held.stateid if held is not None and held.stateid is not None else of.stateid

    async def _volume(self, deviceid: bytes, cred: Credential) -> Volume | None:
        if deviceid in self.volumes:
            return self.volumes[deviceid]
        self.counts["getdeviceinfo"] += 1
        addr = await self.ops.getdeviceinfo(deviceid, self.layout_type, cred)
        try:
            if self.layout_type == SCSI:
                found = await trio.to_thread.run_sync(self._scsi_volume, addr.da_addr_body)
            else:
                tree = pnfs_block_deviceaddr4.XDR.decode(addr.da_addr_body)
                found = await trio.to_thread.run_sync(
                    lambda: resolve(tree, lambda comps: block_devices.find(comps, self.candidates())))
            for path in simple_paths(found):
                if path not in self.devices:
                    self.devices[path] = block_devices.BlockDevice(path)
        except (NoDevice, ValueError, OSError) as e:
            log.info("%s layout device %s: %s; I/O through the metadata server",
                     "SCSI" if self.layout_type == SCSI else "block", deviceid.hex(), e)
            self.volumes[deviceid] = None
            self.unusable[deviceid] = str(e)
            return None
        self.volumes[deviceid] = found
        return found

    def _scsi_volume(self, body: bytes) -> Volume:
        """A SCSI layout's volume (in a worker thread: it reads sysfs and talks to the units): its
        units found by their designators, and this client ID's key registered on each before any
        I/O. NoDevice when a unit is not here or refuses the registration."""
        want: dict[str, int] = {}

        def base(info: pnfs_scsi_base_volume_info4) -> tuple[str, int]:
            found = self.find_designator(info.sbv_code_set, info.sbv_designator_type, bytes(info.sbv_designator))
            if found is None:
                raise NoDevice(f"no SCSI device here has the designator {bytes(info.sbv_designator).hex()} "
                               f"(type {info.sbv_designator_type})")
            want[found[0]] = info.sbv_pr_key
            return found

        volume = resolve_scsi(pnfs_scsi_deviceaddr4.XDR.decode(body), base)
        for path, key in want.items():
            if self.keys.get(path) == key:
                continue
            try:
                block_devices.pr_register(path, key)
            except OSError as e:
                raise NoDevice(f"{path} refused the registration of our reservation key: {e.strerror}") from e
            self.keys[path] = key
            self.counts["pr_register"] += 1
        return volume

    def _unregister(self) -> None:
        """The reservation keys taken off the units (the client ID they were this client's for ends)."""
        for path, key in self.keys.items():
            try:
                block_devices.pr_unregister(path, key)
                self.counts["pr_unregister"] += 1
            except OSError as e:
                log.info("SCSI layout: unregistering our key on %s: %s", path, e)
        self.keys.clear()

    def forget_devices(self, items: list[Any]) -> None:
        """CB_NOTIFY_DEVICEID: the devices changed or deleted are looked up again when next used."""
        for item in items:
            dev = bytes(getattr(item, "ndc_deviceid", getattr(item, "ndd_deviceid", b"")))
            self.volumes.pop(dev, None)

    def _pieces(self, deviceid: bytes, offset: int, length: int) -> list[Piece]:
        v = self.volumes.get(deviceid)
        if v is None:
            raise NoDevice("device forgotten")
        return v.map(offset, length)

    # -- READ ---------------------------------------------------------------------------------------------
    async def read(self, of: OpenFile, fh: bytes, offset: int, count: int,
                   cred: Credential) -> tuple[memoryview, bool] | None:
        """A READ by the layout: (data, eof), or None for the metadata server."""
        self.cred = cred
        seg = await self._layout(of, fh, offset, count, READ, cred)
        if seg is None:
            return None
        size = self.sizes.get(fh, 0)
        plan = plan_read(seg.body, offset, count, size)
        if any(isinstance(p, Uncovered) for p in plan):  # (the segment ends inside the READ)
            seg = await self._layout(of, fh, offset, count, READ, cred, fresh=True)
            if seg is None:
                return None
            size = self.sizes.get(fh, 0)
            plan = plan_read(seg.body, offset, count, size)
        if any(isinstance(p, Uncovered) for p in plan):
            self.mds("the layout does not cover the READ")
            return None
        end = min(offset + count, size)
        bs = self.block_size
        a0 = offset - offset % bs
        a1 = max(a0, -(-end // bs) * bs)
        buf = block_devices.aligned(a1 - a0)
        view = memoryview(buf)
        self.cache.started(fh)
        if not self.cache.holds(fh, seg):  # (recalled while a LAYOUTGET for the rest of it was under way)
            self._ended(fh)
            self.mds("layout recalled")
            return None
        failed: OSError | NoDevice | None = None
        device = b""
        try:
            for p in plan:
                if not isinstance(p, DeviceRead):
                    continue  # zeros: the buffer is zeroed
                device = p.device
                lo = p.file_offset - p.file_offset % bs
                hi = -(-(p.file_offset + p.length) // bs) * bs
                pos = lo - a0
                for piece in self._pieces(p.device, p.storage_offset - (p.file_offset - lo), hi - lo):
                    await self.devices[piece.path].read_into(view[pos:pos + piece.length], piece.offset)
                    self.device_calls[piece.path] += 1
                    self.device_bytes[piece.path] += piece.length
                    pos += piece.length
        except (OSError, NoDevice) as e:
            failed = e
        finally:
            self._ended(fh)
        if failed is not None:
            log.warning("block layout READ of %d at %d: %s; through the metadata server", count, offset, failed)
            self.mds(f"device I/O error: {failed}")
            await self._device_failed(fh, device, offset, count, failed, c.OP_READ, cred)
            return None
        self.counts["read_bytes"] += max(0, end - offset)
        self.counts["reads"] += 1
        return view[offset - a0:max(offset, end) - a0], end >= size

    # -- WRITE --------------------------------------------------------------------------------------------
    async def write(self, of: OpenFile, offset: int, data: Any, cred: Credential) -> bool:
        """A WRITE by the layout (True: written to the device, to commit), or False for the metadata
        server (and then no RW layout of the file is held any more)."""
        self.cred = cred
        fh = of.fh
        src = memoryview(data).cast("B")
        n = src.nbytes
        seg = await self._layout(of, fh, offset, n, RW, cred)
        if seg is None:
            await self.give_back(fh, cred, "a WRITE went through the metadata server")
            return False
        plan = plan_write(seg.body, offset, n, self.block_size)
        if not all(isinstance(p, DeviceWrite) for p in plan):  # (the segment ends inside the WRITE)
            seg = await self._layout(of, fh, offset, n, RW, cred, fresh=True)
            if seg is not None:
                plan = plan_write(seg.body, offset, n, self.block_size)
        if seg is None or not all(isinstance(p, DeviceWrite) for p in plan):
            self.mds("the layout does not cover the WRITE")
            await self.give_back(fh, cred, "the layout does not cover the WRITE")
            return False
        self.cache.started(fh)
        if not self.cache.holds(fh, seg):  # (recalled while a LAYOUTGET for the rest of it was under way)
            self._ended(fh)
            self.mds("layout recalled")
            await self.give_back(fh, cred, "layout recalled")
            return False
        failed: OSError | NoDevice | None = None
        device = b""
        try:
            for p in plan:
                if isinstance(p, DeviceWrite):
                    device = p.device
                    await self._write_blocks(fh, seg, p, src, offset)
        except (OSError, NoDevice) as e:
            failed = e
        finally:
            self._ended(fh)
        if failed is not None:
            log.warning("block layout WRITE of %d at %d: %s; through the metadata server", n, offset, failed)
            self.mds(f"device I/O error: {failed}")
            await self._device_failed(fh, device, offset, n, failed, c.OP_WRITE, cred)
            return False
        self.sizes[fh] = max(self.sizes.get(fh, 0), offset + n)
        self.counts["write_bytes"] += n
        self.counts["writes"] += 1
        return True

    async def _write_blocks(self, fh: bytes, seg: Segment, p: DeviceWrite, src: memoryview, offset: int) -> None:
        """One extent's whole blocks: the edges read first where the blocks hold data (a READWRITE_DATA
        extent, or INVALID_DATA this client has written meanwhile), the caller's bytes copied into the
        aligned buffer, written, and the blocks marked written. Two partial writes of one file go one at
        a time (they may share a block: the later one must find the earlier one's bytes there, not fill
        them with zeros)."""
        bs = self.block_size
        buf = block_devices.aligned(p.length)
        view = memoryview(buf)[:p.length]
        async with _NO_LOCK if p.whole else self.edge_lock(fh):
            if not p.whole:
                for blk in {p.file_offset, p.file_offset + p.length - bs}:
                    if p.data_from <= blk and blk + bs <= p.data_to:
                        continue
                    at = blk - p.file_offset
                    if p.edges == "device" or holds_data(seg.body, blk):
                        await self._device_io(p.device, p.storage_offset + at, view[at:at + bs], False)
            # the one copy: the caller's bytes into the aligned buffer O_DIRECT needs
            view[p.data_from - p.file_offset:p.data_to - p.file_offset] = src[p.data_from - offset:p.data_to - offset]
            await self._device_io(p.device, p.storage_offset, view, True)
            # every segment of the file that maps these blocks reads them from the device now
            held = self.cache.files.get(fh)
            for s in [seg, *(held.segments if held is not None else [])]:
                written(s.body, p.file_offset, p.length)
            self.commits.setdefault(fh, CommitList()).add(p)
            self.wrote.setdefault(fh, CommitList()).add(p)

    def edge_lock(self, fh: bytes) -> trio.Lock:
        lock = self.edge_locks.get(fh)
        if lock is None:
            lock = self.edge_locks[fh] = trio.Lock()
        return lock

    async def _device_io(self, deviceid: bytes, offset: int, view: memoryview, write: bool) -> None:
        pos = 0
        for piece in self._pieces(deviceid, offset, view.nbytes):
            dev = self.devices[piece.path]
            part = view[pos:pos + piece.length]
            await (dev.write_from(part, piece.offset) if write else dev.read_into(part, piece.offset))
            self.device_calls[piece.path] += 1
            self.device_bytes[piece.path] += piece.length
            pos += piece.length

    async def _device_failed(self, fh: bytes, device: bytes, offset: int, length: int, error: OSError | NoDevice,
                             opnum: int, cred: Credential) -> None:
        """A READ or WRITE to a device failed: LAYOUTERROR reports it (where the server takes it), the
        file's layouts are given back (what was written before is committed first) and its I/O goes
        through the metadata server; the device is looked for again by the next GETDEVICEINFO."""
        held = self.cache.files.get(fh)
        if held is not None and held.stateid is not None:
            report = device_error(device, error if isinstance(error, OSError) else None, opnum)
            try:
                sent = await self.ops.layouterror(fh, held.stateid, offset, length, [report], cred)
            except NFS4Error as e:
                log.info("LAYOUTERROR: %s", e)
                sent = False
            self.counts["layouterror" if sent else "layouterror_not_taken"] += 1
        gone = self.volumes.pop(device, None)
        if gone is not None and self.layout_type == SCSI:
            # registered again by the next GETDEVICEINFO: a server that fenced this client (it
            # preempted the key: the unit answers RESERVATION CONFLICT) takes the key back then
            for path in simple_paths(gone):
                self.keys.pop(path, None)
        await self.give_back(fh, cred, f"device I/O error: {error}")

    def _ended(self, fh: bytes) -> None:
        self.cache.ended(fh)

    # -- COMMIT, return -----------------------------------------------------------------------------------
    def dirty(self, fh: bytes) -> bool:
        """Written by the layout and not LAYOUTCOMMITted yet (or a LAYOUTCOMMIT of it under way)."""
        lock = self.commit_locks.get(fh)
        return bool(self.commits.get(fh)) or (lock is not None and lock.locked())

    async def commit(self, fh: bytes, cred: Credential) -> None:
        """The device's cache flushed, then LAYOUTCOMMIT of what was written by the layout. When that
        fails (the layout is gone: revoked, returned meanwhile) the file is marked ``lost``: the
        COMMIT that follows goes to the metadata server, whose verifier differs from the layout
        writes', and the writer sends those pieces again (through the metadata server)."""
        # one commit of a file at a time (a recall's, a give-back's, a COMMIT's): the second finds
        # nothing left, or what was written since, once the first's LAYOUTCOMMIT is answered
        lock = self.commit_locks.get(fh)
        if lock is None:
            lock = self.commit_locks[fh] = trio.Lock()
        async with lock:
            pending = self.commits.get(fh)
            if not pending:
                return
            # what this commit covers, taken before the device's flush: writes that end meanwhile
            # are the next commit's
            offset, length = pending.range()
            body = pnfs_scsi_layoutupdate4.XDR.encode(pending.scsi_body()) if self.layout_type == SCSI \
                else pnfs_block_layoutupdate4.XDR.encode(pending.body())
            last = pending.last_write_offset
            pending.clear()
            try:
                for dev in self.devices.values():
                    await dev.sync()
                held = self.cache.files.get(fh)
                stateid = held.stateid if held is not None else None
                if stateid is None:
                    self._lost(fh, "no layout left to commit with")
                    return
                self.counts["layoutcommit"] += 1
                newsize = await self.ops.layoutcommit(fh, stateid, offset, length, last, self.layout_type, body,
                                                      cred)
            except OSError as e:
                self._lost(fh, f"LAYOUTCOMMIT: {e}")
                return
        if newsize is not None:
            self.sizes[fh] = newsize

    def _lost(self, fh: bytes, why: str) -> None:
        log.warning("writes by the block layout not committed (%s): sent again through the metadata server", why)
        self.mds(why)
        self.cache.refuse(fh, why)
        self.lost.add(fh)
        self.wrote.pop(fh, None)
        pending = self.commits.get(fh)
        if pending is not None:
            pending.clear()

    async def give_back(self, fh: bytes, cred: Credential, reason: str) -> None:
        """Before a WRITE of ``fh`` goes through the metadata server: no layout of it may be held then
        (nfsd would recall it and hold the WRITE, and its threads, until the return). New I/O of the
        file goes through the metadata server; the layout I/O in flight ends, what was written is
        committed, the layouts are returned, and a recall under way is waited for."""
        held = self.cache.files.get(fh)
        if held is None or held.stateid is None or not (held.segments or held.recalls or self.dirty(fh)):
            return
        async with self.file_lock(fh):
            self.cache.refuse(fh, reason)
            await self.drained(fh)
            if held.segments or self.dirty(fh):
                await self.commit(fh, cred)
                if held.segments:  # (else a recall's return, under way, takes the rest back)
                    await self.return_all(fh, cred)
            with trio.move_on_after(RECALL_WAIT):
                while held.recalls:
                    await trio.sleep(POLL)

    def returning(self, fh: bytes) -> None:
        # (what was written is committed before a return: a later layout says READWRITE_DATA there)
        self.wrote.pop(fh, None)

    async def commit_before_return(self, fh: bytes, cred: Credential) -> None:
        try:
            await self.commit(fh, cred)
        except NFS4Error as e:
            log.warning("LAYOUTCOMMIT before a recalled layout's return: %s", e)

    async def commit_at_close(self, fh: bytes, cred: Credential) -> None:
        await self.commit(fh, cred)

    def forget_all(self) -> None:
        """The client ID is gone, and its layouts with it: none is returned, and what was written by
        them and not committed is written again (as after a failed commit: the COMMIT goes to the
        metadata server, whose verifier makes the writer send it again), by a new layout where the
        server grants one (RFC 8881 12.7.4: nfsd takes no LAYOUTCOMMIT reclaim). Those blocks are
        INVALID_DATA in the new layout until written again by it (nothing remembers them here)."""
        self.wrote.clear()
        self.layouts_lost()
        if self.layout_type == SCSI:
            # the keys were the old client ID's (nfsd makes a unit's key of the client ID): off the
            # units, and the devices asked for again, with the new client ID's key
            self._unregister()
            self.volumes.clear()
        for fh, pending in self.commits.items():
            if pending:
                self.lost.add(fh)
                pending.clear()
                self.counts["uncommitted_lost"] += 1

    def close(self) -> None:
        self._unregister()
        for dev in self.devices.values():
            try:
                dev.close()
            except OSError:
                pass
        self.devices.clear()

