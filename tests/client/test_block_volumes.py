"""The block layout's volume tree (RFC 5663 2.2.1) made into a map from storage offsets to devices:
slices, concatenations and stripes over simple volumes, and the trees a server must not send (a
volume naming a later one, units not of whole sectors, a tree that names its volumes again and
again to make every walk of it cost 2**depth): each such address means "no device here", and the
I/O goes through the metadata server."""

from __future__ import annotations

import pytest

from pynfsrdma._client.block_volumes import (
    CONCAT,
    MAX_DEPTH,
    SIMPLE,
    SLICE,
    STRIPE,
    NoDevice,
    Piece,
    resolve,
    simple_paths,
)
from pynfsrdma._proto.nfs4.layout_block import (
    pnfs_block_concat_volume_info4,
    pnfs_block_deviceaddr4,
    pnfs_block_sig_component4,
    pnfs_block_simple_volume_info4,
    pnfs_block_slice_volume_info4,
    pnfs_block_stripe_volume_info4,
)

MIB = 1 << 20
DEVICES = {b"disk-a": ("/dev/a", 8 * MIB), b"disk-b": ("/dev/b", 8 * MIB)}


def find(components: list[pnfs_block_sig_component4]) -> tuple[str, int] | None:
    return DEVICES.get(bytes(components[0].bsc_contents))


def simple(sig: bytes) -> tuple[int, object]:
    return (SIMPLE, pnfs_block_simple_volume_info4([pnfs_block_sig_component4(32, sig)]))


def address(*volumes: tuple[int, object]) -> pnfs_block_deviceaddr4:
    return pnfs_block_deviceaddr4(list(volumes))


def test_slices_concatenation_and_stripe_map_to_the_right_device_offsets() -> None:
    a, b = simple(b"disk-a"), simple(b"disk-b")
    sliced = address(a, b, (SLICE, pnfs_block_slice_volume_info4(MIB, 2 * MIB, 0)),
                     (SLICE, pnfs_block_slice_volume_info4(0, MIB, 1)),
                     (CONCAT, pnfs_block_concat_volume_info4([2, 3])))
    top = resolve(sliced, find)
    assert top.size == 3 * MIB and simple_paths(top) == {"/dev/a", "/dev/b"}
    # 4 KiB across the join: the end of a's slice, then the start of b's
    assert top.map(2 * MIB - 2048, 4096) == [Piece("/dev/a", 3 * MIB - 2048, 2048), Piece("/dev/b", 0, 2048)]
    with pytest.raises(NoDevice, match="past its end"):
        top.map(3 * MIB - 512, 1024)

    striped = resolve(address(a, b, (STRIPE, pnfs_block_stripe_volume_info4(64 * 1024, [0, 1]))), find)
    assert striped.size == 16 * MIB
    # units 0, 1, 2 of the stripe: a's first, b's first, a's second
    assert striped.map(64 * 1024 - 512, 64 * 1024 + 1024) == [
        Piece("/dev/a", 64 * 1024 - 512, 512), Piece("/dev/b", 0, 64 * 1024), Piece("/dev/a", 64 * 1024, 512)]


@pytest.mark.parametrize(("volumes", "error"), [
    ((), "a device address with no volume"),
    ((simple(b"nowhere"),), "no block device here carries the volume's signature"),
    ((simple(b"disk-a"), (CONCAT, pnfs_block_concat_volume_info4([0, 2]))), "volume 1 names volume 2, which is not before it"),
    ((simple(b"disk-a"), (SLICE, pnfs_block_slice_volume_info4(0, 1000, 0))),
     "volume 1: a slice of 1000 bytes at 0, not of whole 512-byte sectors"),
    ((simple(b"disk-a"), (SLICE, pnfs_block_slice_volume_info4(7, 4096, 0))),
     "volume 1: a slice of 4096 bytes at 7, not of whole 512-byte sectors"),
    ((simple(b"disk-a"), (STRIPE, pnfs_block_stripe_volume_info4(1, [0, 0]))),
     "volume 1: a stripe unit of 1 bytes, not of whole 512-byte sectors"),
    ((simple(b"disk-a"), (STRIPE, pnfs_block_stripe_volume_info4(4096, []))), "volume 1: a stripe of no volumes or no unit"),
])
def test_a_tree_that_cannot_be_used_means_no_device(volumes: tuple[tuple[int, object], ...], error: str) -> None:
    with pytest.raises(NoDevice) as ei:
        resolve(address(*volumes), find)
    assert str(ei.value) == error


def test_a_tree_naming_its_volumes_again_and_again_is_refused_at_once() -> None:
    """Each volume a concatenation of the one before, twice: 60 levels would be 2**60 walks of a
    volume if its size or devices were computed by walking it."""
    volumes = [simple(b"disk-a")] + [(CONCAT, pnfs_block_concat_volume_info4([i, i])) for i in range(60)]
    with pytest.raises(NoDevice, match=f"^volume {MAX_DEPTH}: a tree deeper than {MAX_DEPTH} volumes$"):
        resolve(address(*volumes), find)
    # the deepest tree allowed is built, sized and mapped without walking it again
    top = resolve(address(*volumes[:MAX_DEPTH]), find)
    assert top.size == 2 ** (MAX_DEPTH - 1) * 8 * MIB and simple_paths(top) == {"/dev/a"}
    assert top.map(top.size - 4096, 4096) == [Piece("/dev/a", 8 * MIB - 4096, 4096)]
