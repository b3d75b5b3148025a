"""The SCSI layout's bodies (RFC 8154 section 2) and the SCSI it leans on: encodings computed by hand
from the RFC's XDR, in the shapes Linux nfsd writes them (fs/nfsd/blocklayoutxdr.c: one BASE volume,
code set binary, an NAA designator of 16 bytes, the key made of the client ID; a LAYOUTCOMMIT of
(offset, length) pairs), then decoded back; a Device Identification VPD page as a LIO unit answers it."""

from __future__ import annotations

from typing import Any

import pytest

from pynfsrdma._proto import scsi
from pynfsrdma._proto.nfs4.const import (
    layouttype4,
    pnfs_block_extent_state4,
    pnfs_scsi_code_set,
    pnfs_scsi_designator_type,
    pnfs_scsi_volume_type4,
)
from pynfsrdma._proto.nfs4.layout_block import pnfs_block_extent4, pnfs_block_slice_volume_info4
from pynfsrdma._proto.nfs4.layout_scsi import (
    pnfs_scsi_base_volume_info4,
    pnfs_scsi_deviceaddr4,
    pnfs_scsi_layout4,
    pnfs_scsi_layoutupdate4,
    pnfs_scsi_range4,
)
from pynfsrdma._xdr import XdrError, XdrType

NAA = bytes.fromhex("6001405abcdef0123456789abcdef012")
KEY = 0x6563_1a2b_0000_0003  # (cl_boot << 32) | cl_id


def w(*words: int) -> bytes:
    return b"".join(x.to_bytes(4, "big") for x in words)


def u64(x: int) -> bytes:
    return x.to_bytes(8, "big")


def both_ways(t: XdrType[Any], value: Any, data: bytes) -> None:
    assert t.encode(value) == data
    assert t.decode(data) == value


def test_the_numbers_are_rfc_8154s() -> None:
    assert layouttype4.LAYOUT4_SCSI == 5
    assert [int(x) for x in pnfs_scsi_volume_type4] == [1, 2, 3, 4]
    assert (pnfs_scsi_code_set.PS_CODE_SET_BINARY, pnfs_scsi_designator_type.PS_DESIGNATOR_EUI64,
            pnfs_scsi_designator_type.PS_DESIGNATOR_NAA) == (1, 2, 3)


def test_nfsds_device_address_one_base_volume() -> None:
    base = pnfs_scsi_base_volume_info4(pnfs_scsi_code_set.PS_CODE_SET_BINARY,
                                       pnfs_scsi_designator_type.PS_DESIGNATOR_NAA, NAA, KEY)
    addr = pnfs_scsi_deviceaddr4([(pnfs_scsi_volume_type4.PNFS_SCSI_VOLUME_BASE, base)])
    both_ways(pnfs_scsi_deviceaddr4.XDR, addr, w(1, 4, 1, 3, 16) + NAA + u64(KEY))


def test_a_slice_over_a_base_volume() -> None:
    eui = bytes(range(8))
    base = pnfs_scsi_base_volume_info4(1, 2, eui, 7)
    addr = pnfs_scsi_deviceaddr4([(4, base), (1, pnfs_block_slice_volume_info4(4096, 1 << 20, 0))])
    both_ways(pnfs_scsi_deviceaddr4.XDR, addr, w(2, 4, 1, 2, 8) + eui + u64(7) + w(1) + u64(4096) + u64(1 << 20) + w(0))


def test_an_unknown_volume_type_or_designator_type_is_refused() -> None:
    with pytest.raises(XdrError):
        pnfs_scsi_deviceaddr4.XDR.decode(w(1, 0))  # 0: the block layout's SIMPLE, not a SCSI volume type
    with pytest.raises(XdrError):
        pnfs_scsi_deviceaddr4.XDR.decode(w(1, 4, 1, 9, 0) + u64(1))


def test_layout_and_layoutupdate() -> None:
    ext = pnfs_block_extent4(bytes(16), 0, 1 << 20, 8 << 20, pnfs_block_extent_state4.PNFS_BLOCK_INVALID_DATA)
    both_ways(pnfs_scsi_layout4.XDR, pnfs_scsi_layout4([ext]),
              w(1) + bytes(16) + u64(0) + u64(1 << 20) + u64(8 << 20) + w(2))
    both_ways(pnfs_scsi_layoutupdate4.XDR,
              pnfs_scsi_layoutupdate4([pnfs_scsi_range4(0, 4096), pnfs_scsi_range4(1 << 20, 8192)]),
              w(2) + u64(0) + u64(4096) + u64(1 << 20) + u64(8192))


def vpd83(*descriptors: tuple[int, int, int, bytes]) -> bytes:
    """A Device Identification page: (code set, association, type, designator) per descriptor."""
    body = b"".join(bytes([cs, (assoc << 4) | typ, 0, len(d)]) + d for cs, assoc, typ, d in descriptors)
    return bytes([0, 0x83]) + len(body).to_bytes(2, "big") + body


def test_designators_of_a_lio_unit() -> None:
    # LIO answers an NAA designator of the unit, a relative target port and a T10 vendor designator
    page = vpd83((1, 0, 3, NAA), (1, 1, 4, b"\x00\x00\x00\x01"), (2, 0, 1, b"LIO-ORG fileio0"))
    assert scsi.designators(page) == [
        scsi.Designator(1, 0, 3, NAA), scsi.Designator(1, 1, 4, b"\x00\x00\x00\x01"),
        scsi.Designator(2, 0, 1, b"LIO-ORG fileio0")]


def test_a_page_that_is_not_0x83_or_is_cut_short_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Device Identification"):
        scsi.designators(bytes([0, 0x80, 0, 0]))
    body = bytes([1, 3, 0, 16]) + NAA[:6]  # a descriptor of 16 bytes on a page that holds 6 of them
    with pytest.raises(ValueError, match="runs past"):
        scsi.designators(bytes([0, 0x83, 0, len(body)]) + body)


def test_pr_register_argument_is_linuxs_struct() -> None:
    assert scsi.IOC_PR_REGISTER == 0x401870C8  # _IOW('p', 200, struct pr_registration) on x86-64
    arg = scsi.pr_registration(0, KEY, True)
    assert len(arg) == 24
    assert int.from_bytes(arg[0:8], "little") == 0
    assert int.from_bytes(arg[8:16], "little") == KEY
    assert int.from_bytes(arg[16:20], "little") == scsi.PR_FL_IGNORE_KEY
    assert scsi.pr_registration(KEY, 0, False)[16:20] == bytes(4)
