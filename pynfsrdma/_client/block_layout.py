"""The block layout's extents (RFC 5663 section 2.3), sans-I/O: which bytes of a READ or WRITE go to
which storage blocks, which read as zeros, which the layout does not cover (those go through the
metadata server), and what LAYOUTCOMMIT reports afterwards.

- ``extents_of``: a LAYOUTGET body's extents, checked: sorted, block-aligned, and not overlapping
  (a 2025 nfsd handed out overlapping extents; a layout that has them is refused, ``BadLayout``).
- ``plan_read``: READ_DATA and READWRITE_DATA extents are read from the device, INVALID_DATA and
  NONE_DATA read as zeros (2.3.1), nothing past the file's size.
- ``plan_write``: whole blocks only; the bytes of an edge block outside the write are the device's
  (read first) in a READWRITE_DATA extent and zeros in an INVALID_DATA one (2.3.2). READ_DATA and
  NONE_DATA extents, or none, leave the range uncovered.
- ``written``: an INVALID_DATA range written is READWRITE_DATA from then on (read from the device),
  in every segment held and, by ``own_writes``, in a segment granted later (2.3.2), and goes into
  the ``CommitList``, whose ``body`` is LAYOUTCOMMIT's ``pnfs_block_layoutupdate4``:
  READWRITE_DATA extents only, block-aligned and merged (nfsd refuses anything else with NFS4ERR_INVAL);
  ``scsi_body``: the SCSI layout's ``pnfs_scsi_layoutupdate4`` (RFC 8154), the file ranges written.
- ``device_error``: what LAYOUTERROR (RFC 7862 15.6) reports of a READ or WRITE to a device that failed.
"""

from __future__ import annotations

import errno
import itertools
from dataclasses import dataclass, field

from .._proto.nfs4 import const as c
from .._proto.nfs4.layout_block import pnfs_block_extent4, pnfs_block_layout4, pnfs_block_layoutupdate4
from .._proto.nfs4.layout_scsi import pnfs_scsi_layoutupdate4, pnfs_scsi_range4
from .._proto.nfs4.types import device_error4

READWRITE_DATA = c.pnfs_block_extent_state4.PNFS_BLOCK_READWRITE_DATA
READ_DATA = c.pnfs_block_extent_state4.PNFS_BLOCK_READ_DATA
INVALID_DATA = c.pnfs_block_extent_state4.PNFS_BLOCK_INVALID_DATA
NONE_DATA = c.pnfs_block_extent_state4.PNFS_BLOCK_NONE_DATA

_READABLE = (READWRITE_DATA, READ_DATA)
_WRITABLE = (READWRITE_DATA, INVALID_DATA)


class BadLayout(ValueError):
    """A block layout this client will not use (its I/O goes through the metadata server)."""


@dataclass(slots=True)
class Extent:
    device: bytes  # the deviceid4 of its volume
    file_offset: int
    length: int
    storage_offset: int
    state: int

    @property
    def end(self) -> int:
        return self.file_offset + self.length

    def storage_at(self, file_offset: int) -> int:
        return self.storage_offset + (file_offset - self.file_offset)


def extents_of(body: pnfs_block_layout4, block_size: int) -> list[Extent]:
    """The extents of a LAYOUTGET's block layout body, sorted by file offset; ``BadLayout`` if two
    overlap, one is empty, or one is not aligned to ``block_size``."""
    out = sorted((Extent(bytes(e.bex_vol_id), e.bex_file_offset, e.bex_length, e.bex_storage_offset, e.bex_state)
                  for e in body.blo_extents), key=lambda e: e.file_offset)
    for e in out:
        if e.length == 0:
            raise BadLayout(f"empty extent at {e.file_offset}")
        storage = e.storage_offset if e.state != NONE_DATA else 0
        if (e.file_offset | e.length | storage) % block_size:
            raise BadLayout(f"extent at {e.file_offset} is not aligned to {block_size}-byte blocks")
    for a, b in itertools.pairwise(out):
        if b.file_offset < a.end:
            raise BadLayout(f"extents overlap at {b.file_offset}")
    return out


@dataclass(frozen=True, slots=True)
class DeviceRead:
    device: bytes
    file_offset: int
    storage_offset: int
    length: int


@dataclass(frozen=True, slots=True)
class Zeros:
    file_offset: int
    length: int


@dataclass(frozen=True, slots=True)
class Uncovered:
    """Bytes the layout does not cover: they go through the metadata server."""

    file_offset: int
    length: int


@dataclass(frozen=True, slots=True)
class DeviceWrite:
    """Whole blocks to write: ``file_offset``/``storage_offset``/``length`` are block-aligned; the
    caller's data fills ``data_from``..``data_to`` (file offsets) and the rest of the blocks holds
    what ``edges`` says: the device's bytes (``"device"``: read them first) or ``"zeros"``."""

    device: bytes
    file_offset: int
    storage_offset: int
    length: int
    data_from: int
    data_to: int
    edges: str

    @property
    def whole(self) -> bool:
        return self.data_from == self.file_offset and self.data_to == self.file_offset + self.length


def _walk(extents: list[Extent], start: int, end: int) -> list[tuple[int, int, Extent | None]]:
    """``start``..``end`` cut at the extents' bounds: (from, to, extent or None for a gap)."""
    out: list[tuple[int, int, Extent | None]] = []
    if end <= start:
        return out
    pos = start
    for e in extents:
        if e.end <= pos:
            continue
        if e.file_offset >= end:
            break
        if e.file_offset > pos:
            out.append((pos, e.file_offset, None))
            pos = e.file_offset
        to = min(e.end, end)
        out.append((pos, to, e))
        pos = to
    if pos < end:
        out.append((pos, end, None))
    return out


def plan_read(extents: list[Extent], offset: int, length: int, size: int) -> list[DeviceRead | Zeros | Uncovered]:
    """A READ of ``length`` bytes at ``offset`` of a file of ``size`` bytes (nothing past the size)."""
    end = min(offset + length, size)
    out: list[DeviceRead | Zeros | Uncovered] = []
    for a, b, e in _walk(extents, offset, max(offset, end)):
        if e is None:
            out.append(Uncovered(a, b - a))
        elif e.state in _READABLE:
            out.append(DeviceRead(e.device, a, e.storage_at(a), b - a))
        else:
            out.append(Zeros(a, b - a))
    return out


def plan_write(extents: list[Extent], offset: int, length: int, block_size: int) -> list[DeviceWrite | Uncovered]:
    """A WRITE of ``length`` bytes at ``offset`` as whole-block device writes, with what fills the edges."""
    start = offset - offset % block_size
    end = -(-(offset + length) // block_size) * block_size
    out: list[DeviceWrite | Uncovered] = []
    for a, b, e in _walk(extents, start, end):
        lo, hi = max(a, offset), min(b, offset + length)
        if e is None or e.state not in _WRITABLE:
            if hi > lo:
                out.append(Uncovered(lo, hi - lo))
            continue
        edges = "device" if e.state == READWRITE_DATA else "zeros"
        out.append(DeviceWrite(e.device, a, e.storage_at(a), b - a, lo, max(lo, hi), edges))
    return out


def holds_data(extents: list[Extent], file_offset: int) -> bool:
    """Whether the block at ``file_offset`` holds data on the device (READWRITE_DATA: written before,
    by anyone, or by this client since the layout came), not zeros to be (INVALID_DATA)."""
    return any(e.file_offset <= file_offset < e.end and e.state == READWRITE_DATA for e in extents)


def written(extents: list[Extent], file_offset: int, length: int) -> None:
    """Blocks ``file_offset``..+``length`` were written: INVALID_DATA there becomes READWRITE_DATA."""
    end = file_offset + length
    out: list[Extent] = []
    for e in extents:
        if e.state != INVALID_DATA or e.end <= file_offset or e.file_offset >= end:
            out.append(e)
            continue
        lo, hi = max(e.file_offset, file_offset), min(e.end, end)
        if e.file_offset < lo:
            out.append(Extent(e.device, e.file_offset, lo - e.file_offset, e.storage_offset, INVALID_DATA))
        out.append(Extent(e.device, lo, hi - lo, e.storage_at(lo), READWRITE_DATA))
        if hi < e.end:
            out.append(Extent(e.device, hi, e.end - hi, e.storage_at(hi), INVALID_DATA))
    merged: list[Extent] = []
    for e in out:
        m = merged[-1] if merged else None
        if m is not None and m.device == e.device and m.state == e.state and m.end == e.file_offset \
                and m.storage_at(m.end) == e.storage_offset:
            m.length += e.length
        else:
            merged.append(e)
    extents[:] = merged


def own_writes(extents: list[Extent], wrote: list[Extent]) -> None:
    """A new layout's ``extents``, with the blocks this client wrote by the file's layout (``wrote``)
    and the server may not have seen committed yet: INVALID_DATA there becomes READWRITE_DATA where
    the extent maps them to the same storage. RFC 5663 2.3.2: the client must remember which blocks
    of an INVALID_DATA extent it wrote; a LAYOUTGET before their LAYOUTCOMMIT still calls them
    INVALID_DATA (nfsd: XFS's unwritten extents), and read as zeros, or zeroed around a partial
    write, they would lose what was written."""
    for w in wrote:
        hits = [(max(x.file_offset, w.file_offset), min(x.end, w.end)) for x in extents
                if x.state == INVALID_DATA and x.device == w.device and x.file_offset < w.end
                and w.file_offset < x.end and x.storage_at(w.file_offset) == w.storage_offset]
        for lo, hi in hits:
            written(extents, lo, hi - lo)


@dataclass(slots=True)
class CommitList:
    """What was written by the layout and not yet LAYOUTCOMMITted."""

    extents: list[Extent] = field(default_factory=list)
    last_write_offset: int = -1  # the last byte written, -1 if none

    def add(self, w: DeviceWrite) -> None:
        self.last_write_offset = max(self.last_write_offset, w.data_to - 1)
        self.extents.append(Extent(w.device, w.file_offset, w.length, w.storage_offset, READWRITE_DATA))
        self.extents.sort(key=lambda e: (e.device, e.file_offset))
        merged: list[Extent] = []
        for e in self.extents:
            m = merged[-1] if merged else None
            if m is not None and m.device == e.device and e.file_offset <= m.end \
                    and e.storage_at(m.end) == m.storage_at(m.end):
                if e.end > m.end:
                    m.length = e.end - m.file_offset
                continue
            merged.append(Extent(e.device, e.file_offset, e.length, e.storage_offset, e.state))
        self.extents = merged

    def __bool__(self) -> bool:
        return bool(self.extents)

    def body(self) -> pnfs_block_layoutupdate4:
        return pnfs_block_layoutupdate4([
            pnfs_block_extent4(e.device, e.file_offset, e.length, e.storage_offset, READWRITE_DATA)
            for e in self.extents])

    def scsi_body(self) -> pnfs_scsi_layoutupdate4:
        """The SCSI layout's LAYOUTCOMMIT body (RFC 8154 2.3.3): the file ranges written, in order."""
        ranges: list[pnfs_scsi_range4] = []
        for e in sorted(self.extents, key=lambda e: e.file_offset):
            last = ranges[-1] if ranges else None
            if last is not None and e.file_offset <= last.sr_file_offset + last.sr_length:
                last.sr_length = max(last.sr_length, e.end - last.sr_file_offset)
            else:
                ranges.append(pnfs_scsi_range4(e.file_offset, e.length))
        return pnfs_scsi_layoutupdate4(ranges)

    def range(self) -> tuple[int, int]:
        """The file range the commit covers (LAYOUTCOMMIT's loca_offset, loca_length)."""
        lo = min(e.file_offset for e in self.extents)
        return lo, max(e.end for e in self.extents) - lo

    def clear(self) -> None:
        self.extents = []
        self.last_write_offset = -1


_GONE = frozenset({errno.ENXIO, errno.ENODEV, errno.ENOENT})  # the device is not there (any more)


def device_error(deviceid: bytes, error: OSError | None, opnum: int) -> device_error4:
    """LAYOUTERROR's report of a failed READ or WRITE (``opnum``) to the device ``deviceid``:
    NFS4ERR_NXIO when the device is gone (ENXIO, ENODEV, ENOENT, or ``error`` None: no device here
    carries the volume any more), NFS4ERR_NOSPC when it is full, NFS4ERR_IO for any other failure."""
    if error is None or error.errno in _GONE:
        status = c.NFS4ERR_NXIO
    elif error.errno == errno.ENOSPC:
        status = c.NFS4ERR_NOSPC
    else:
        status = c.NFS4ERR_IO
    return device_error4(deviceid, status, opnum)
