"""The block layout's bodies (RFC 5663 section 2): encodings computed by hand from the RFC's XDR, in
the shapes Linux nfsd writes them (fs/nfsd/blocklayoutxdr.c: one SIMPLE volume whose signature is the
XFS superblock UUID at byte 32; extents of 44 bytes), then decoded back."""

from __future__ import annotations

from typing import Any

import pytest

from pynfsrdma._proto.nfs4.const import layouttype4, pnfs_block_extent_state4, pnfs_block_volume_type4
from pynfsrdma._proto.nfs4.layout_block import (
    pnfs_block_concat_volume_info4,
    pnfs_block_deviceaddr4,
    pnfs_block_extent4,
    pnfs_block_layout4,
    pnfs_block_layoutupdate4,
    pnfs_block_sig_component4,
    pnfs_block_simple_volume_info4,
    pnfs_block_slice_volume_info4,
    pnfs_block_stripe_volume_info4,
)
from pynfsrdma._xdr import XdrError, XdrType

DEV = bytes(range(16))
UUID = bytes.fromhex("0f1e2d3c4b5a69788796a5b4c3d2e1f0")


def w(*words: int) -> bytes:
    return b"".join(x.to_bytes(4, "big") for x in words)


def u64(x: int) -> bytes:
    return x.to_bytes(8, "big")


def both_ways(t: XdrType[Any], value: Any, data: bytes) -> None:
    assert t.encode(value) == data
    assert t.decode(data) == value


def test_scsi_is_layout_type_5() -> None:
    assert layouttype4.LAYOUT4_SCSI == 5
    assert layouttype4.LAYOUT4_BLOCK_VOLUME == 3


def test_nfsds_simple_volume_the_uuid_at_byte_32() -> None:
    value = pnfs_block_deviceaddr4([
        (pnfs_block_volume_type4.PNFS_BLOCK_VOLUME_SIMPLE,
         pnfs_block_simple_volume_info4([pnfs_block_sig_component4(32, UUID)])),
    ])
    # volumes<1>: type SIMPLE (0), components<1>: sig_offset 32 (int64), contents<16>
    data = w(1) + w(0) + w(1) + u64(32) + w(16) + UUID
    both_ways(pnfs_block_deviceaddr4.XDR, value, data)


def test_a_signature_counted_from_the_volumes_end() -> None:
    value = pnfs_block_sig_component4(-512, b"abcde")
    data = u64((1 << 64) - 512) + w(5) + b"abcde\0\0\0"
    both_ways(pnfs_block_sig_component4.XDR, value, data)


def test_slice_concat_and_stripe_volumes_the_last_is_the_top() -> None:
    vt = pnfs_block_volume_type4
    value = pnfs_block_deviceaddr4([
        (vt.PNFS_BLOCK_VOLUME_SIMPLE, pnfs_block_simple_volume_info4([pnfs_block_sig_component4(0, b"AB")])),
        (vt.PNFS_BLOCK_VOLUME_SLICE, pnfs_block_slice_volume_info4(4096, 1 << 30, 0)),
        (vt.PNFS_BLOCK_VOLUME_CONCAT, pnfs_block_concat_volume_info4([1, 1])),
        (vt.PNFS_BLOCK_VOLUME_STRIPE, pnfs_block_stripe_volume_info4(65536, [1, 2])),
    ])
    data = (w(4)
            + w(0) + w(1) + u64(0) + w(2) + b"AB\0\0"
            + w(1) + u64(4096) + u64(1 << 30) + w(0)
            + w(2) + w(2, 1, 1)
            + w(3) + u64(65536) + w(2, 1, 2))
    both_ways(pnfs_block_deviceaddr4.XDR, value, data)


def test_an_unknown_volume_type_is_a_decode_error() -> None:
    with pytest.raises(XdrError):
        pnfs_block_deviceaddr4.XDR.decode(w(1, 4) + w(0))


def test_nfsds_layout_one_extent_is_44_bytes_after_the_count() -> None:
    st = pnfs_block_extent_state4
    value = pnfs_block_layout4([pnfs_block_extent4(DEV, 1 << 20, 4 << 20, 0x1234000, st.PNFS_BLOCK_INVALID_DATA)])
    data = w(1) + DEV + u64(1 << 20) + u64(4 << 20) + u64(0x1234000) + w(2)
    assert len(data) == 4 + 44
    both_ways(pnfs_block_layout4.XDR, value, data)


def test_several_extents_in_every_state() -> None:
    st = pnfs_block_extent_state4
    states = [st.PNFS_BLOCK_READWRITE_DATA, st.PNFS_BLOCK_READ_DATA, st.PNFS_BLOCK_INVALID_DATA,
              st.PNFS_BLOCK_NONE_DATA]
    extents = [pnfs_block_extent4(DEV, i * 4096, 4096, 0 if s == st.PNFS_BLOCK_NONE_DATA else 8192 * i, s)
               for i, s in enumerate(states)]
    data = w(4) + b"".join(DEV + u64(i * 4096) + u64(4096) + u64(0 if i == 3 else 8192 * i) + w(i)
                           for i in range(4))
    both_ways(pnfs_block_layout4.XDR, pnfs_block_layout4(extents), data)


def test_the_layoutcommit_body_lists_the_extents_written() -> None:
    st = pnfs_block_extent_state4
    value = pnfs_block_layoutupdate4([
        pnfs_block_extent4(DEV, 0, 8192, 1 << 20, st.PNFS_BLOCK_READWRITE_DATA),
        pnfs_block_extent4(DEV, 65536, 4096, 2 << 20, st.PNFS_BLOCK_READWRITE_DATA),
    ])
    data = (w(2) + DEV + u64(0) + u64(8192) + u64(1 << 20) + w(0)
            + DEV + u64(65536) + u64(4096) + u64(2 << 20) + w(0))
    both_ways(pnfs_block_layoutupdate4.XDR, value, data)
    # what nfsd4_block_decode_layoutupdate checks: the count matches the length, 44 bytes an extent
    assert int.from_bytes(data[:4], "big") * 44 == len(data) - 4
