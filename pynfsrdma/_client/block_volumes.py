"""The block and SCSI layouts' volumes (RFC 5663 2.2, RFC 8154 2.3), sans-I/O: a GETDEVICEINFO
address's volume tree made into a map from the layout's storage offsets to (device path, offset on it).

Simple volumes are found by their signature: every component's bytes at its offset (a negative
offset counts from the device's end) must be on the device; the device is looked for by a ``find``
the I/O edge gives (:mod:`.block_devices`). Slice, concat and stripe volumes are built over the
volumes before them in the array; the last volume is the top (2.2.1)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._proto.nfs4 import const as c
from .._proto.nfs4.layout_block import pnfs_block_deviceaddr4, pnfs_block_sig_component4
from .._proto.nfs4.layout_scsi import pnfs_scsi_base_volume_info4, pnfs_scsi_deviceaddr4

SIMPLE = c.pnfs_block_volume_type4.PNFS_BLOCK_VOLUME_SIMPLE
SLICE = c.pnfs_block_volume_type4.PNFS_BLOCK_VOLUME_SLICE
CONCAT = c.pnfs_block_volume_type4.PNFS_BLOCK_VOLUME_CONCAT
STRIPE = c.pnfs_block_volume_type4.PNFS_BLOCK_VOLUME_STRIPE
SCSI_BASE = c.pnfs_scsi_volume_type4.PNFS_SCSI_VOLUME_BASE  # (its slice, concat, stripe: the numbers above)
SECTOR = 512  # every O_DIRECT offset and length is a multiple of it
# how deep a volume tree may be: a server's tree is a few levels; one that names its volumes
# again and again could otherwise make a walk of it cost 2**depth (each volume is built once, with
# its size and devices, so that nothing walks it again but a mapping, which is bounded by the I/O)
MAX_DEPTH = 16


class NoDevice(LookupError):
    """A volume this machine has no device for (the I/O goes through the metadata server)."""


def signature_matches(components: list[pnfs_block_sig_component4], read: Callable[[int, int], bytes],
                      size: int) -> bool:
    """Do a device of ``size`` bytes, read by ``read(offset, count)``, hold every component?"""
    for comp in components:
        off = comp.bsc_sig_offset if comp.bsc_sig_offset >= 0 else size + comp.bsc_sig_offset
        want = bytes(comp.bsc_contents)
        if off < 0 or off + len(want) > size or read(off, len(want)) != want:
            return False
    return bool(components)


@dataclass(frozen=True, slots=True)
class Piece:
    path: str  # the device
    offset: int  # on the device
    length: int


@dataclass(slots=True)
class Simple:
    path: str
    size: int

    @property
    def paths(self) -> frozenset[str]:
        return frozenset((self.path,))

    def map(self, offset: int, length: int) -> list[Piece]:
        if offset + length > self.size:
            raise NoDevice(f"{self.path}: {offset}+{length} is past its end ({self.size})")
        return [Piece(self.path, offset, length)]


@dataclass(slots=True)
class Slice:
    volume: Volume
    start: int
    size: int

    @property
    def paths(self) -> frozenset[str]:
        return self.volume.paths

    def map(self, offset: int, length: int) -> list[Piece]:
        if offset + length > self.size:
            raise NoDevice(f"slice: {offset}+{length} is past its end ({self.size})")
        return self.volume.map(self.start + offset, length)


@dataclass(slots=True)
class Concat:
    volumes: list[Volume]
    size: int = 0
    paths: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.size = sum(v.size for v in self.volumes)
        self.paths = frozenset().union(*(v.paths for v in self.volumes))

    def map(self, offset: int, length: int) -> list[Piece]:
        out: list[Piece] = []
        base = 0
        for v in self.volumes:
            lo, hi = max(offset, base), min(offset + length, base + v.size)
            if lo < hi:
                out += v.map(lo - base, hi - lo)
            base += v.size
        if sum(p.length for p in out) != length:
            raise NoDevice(f"concat: {offset}+{length} is past its end")
        return out


@dataclass(slots=True)
class Stripe:
    unit: int
    volumes: list[Volume]
    size: int = 0
    paths: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.size = min(v.size for v in self.volumes) // self.unit * self.unit * len(self.volumes)
        self.paths = frozenset().union(*(v.paths for v in self.volumes))

    def map(self, offset: int, length: int) -> list[Piece]:
        out: list[Piece] = []
        pos, end = offset, offset + length
        n = len(self.volumes)
        while pos < end:
            unit_no, within = divmod(pos, self.unit)
            take = min(self.unit - within, end - pos)
            row, col = divmod(unit_no, n)
            out += self.volumes[col].map(row * self.unit + within, take)
            pos += take
        return out


Volume = Simple | Slice | Concat | Stripe
Find = Callable[[list[pnfs_block_sig_component4]], tuple[str, int] | None]
FindBase = Callable[[pnfs_scsi_base_volume_info4], tuple[str, int]]  # (path, size) of a SCSI base volume


def resolve(addr: pnfs_block_deviceaddr4, find: Find) -> Volume:
    """The top volume of ``addr``; NoDevice when a simple volume is on no device here, or the tree
    is not one (an index that is not of an earlier volume, an empty array, deeper than MAX_DEPTH),
    or a slice or stripe unit is not of whole sectors (O_DIRECT could not do its I/O)."""
    def simple(info: Any) -> tuple[str, int]:
        found = find(list(info.bsv_ds))
        if found is None:
            raise NoDevice("no block device here carries the volume's signature")
        return found

    return _tree(addr.bda_volumes, SIMPLE, simple)


def resolve_scsi(addr: pnfs_scsi_deviceaddr4, find_base: FindBase) -> Volume:
    """The top volume of a SCSI layout's ``addr`` (RFC 8154 2.3): its base volumes are the units
    ``find_base`` finds by their designator (it raises NoDevice for one not here); slices,
    concatenations and stripes as in the block layout (the same types, the same numbers)."""
    return _tree(addr.sda_volumes, SCSI_BASE, find_base)


def _tree(volumes: list[tuple[int, Any]], leaf_kind: int, leaf: Callable[[Any], tuple[str, int]]) -> Volume:
    built: list[Volume] = []
    depths: list[int] = []
    for i, (kind, info) in enumerate(volumes):
        depth = 1

        def earlier(j: int, i: int = i) -> Volume:
            nonlocal depth
            if not 0 <= j < i:
                raise NoDevice(f"volume {i} names volume {j}, which is not before it")
            depth = max(depth, depths[j] + 1)
            if depth > MAX_DEPTH:
                raise NoDevice(f"volume {i}: a tree deeper than {MAX_DEPTH} volumes")
            return built[j]

        v: Volume
        if kind == leaf_kind:
            v = Simple(*leaf(info))
        elif kind == SLICE:
            if info.bsv_start % SECTOR or info.bsv_length % SECTOR:
                raise NoDevice(f"volume {i}: a slice of {info.bsv_length} bytes at {info.bsv_start}, "
                               f"not of whole {SECTOR}-byte sectors")
            v = Slice(earlier(info.bsv_volume), info.bsv_start, info.bsv_length)
        elif kind == CONCAT:
            v = Concat([earlier(j) for j in info.bcv_volumes])
        elif kind == STRIPE:
            if not info.bsv_volumes or info.bsv_stripe_unit <= 0:
                raise NoDevice(f"volume {i}: a stripe of no volumes or no unit")
            if info.bsv_stripe_unit % SECTOR:
                raise NoDevice(f"volume {i}: a stripe unit of {info.bsv_stripe_unit} bytes, "
                               f"not of whole {SECTOR}-byte sectors")
            v = Stripe(info.bsv_stripe_unit, [earlier(j) for j in info.bsv_volumes])
        else:
            raise NoDevice(f"volume {i}: unknown type {kind}")
        built.append(v)
        depths.append(depth)
    if not built:
        raise NoDevice("a device address with no volume")
    return built[-1]


def simple_paths(v: Any) -> set[str]:
    """The device paths a volume is made of."""
    return set(v.paths)
