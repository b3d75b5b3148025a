"""The SCSI layout's bodies (RFC 8154 section 2), carried opaque by the generic pNFS types.

- ``pnfs_scsi_deviceaddr4``: GETDEVICEINFO's ``da_addr_body`` for LAYOUT4_SCSI, the volume tree:
  base volumes (a logical unit named by its SCSI designator, with the reservation key the client
  registers on it before its first I/O), slices, concatenations and stripes as in the block layout;
  the last volume of the array is the top of the tree (section 2.3).
- ``pnfs_scsi_layout4``: LAYOUTGET's ``loc_body``, the file's extents (the block layout's extents).
- ``pnfs_scsi_layoutupdate4``: LAYOUTCOMMIT's ``lou_body``, the file ranges written (section 2.3.3).

Same conventions as types_base: structs are ``@xdr_struct`` classes, a union's value is
``(discriminant, arm value)``.
"""

from __future__ import annotations

from typing import Annotated, Any

from ..._xdr import Array, Enum, Union, VarOpaque, XdrStruct, uint64, xdr_struct
from .const import pnfs_scsi_code_set, pnfs_scsi_designator_type, pnfs_scsi_volume_type4
from .layout_block import (
    pnfs_block_concat_volume_info4,
    pnfs_block_extent4,
    pnfs_block_slice_volume_info4,
    pnfs_block_stripe_volume_info4,
)
from .types_base import length4, offset4

pnfs_scsi_volume_type4_t = Enum(pnfs_scsi_volume_type4)
pnfs_scsi_code_set_t = Enum(pnfs_scsi_code_set)
pnfs_scsi_designator_type_t = Enum(pnfs_scsi_designator_type)


# -- the volume topology (section 2.3) ----------------------------------------------------------------------
@xdr_struct
class pnfs_scsi_base_volume_info4(XdrStruct):
    sbv_code_set: Annotated[int, pnfs_scsi_code_set_t]
    sbv_designator_type: Annotated[int, pnfs_scsi_designator_type_t]
    sbv_designator: Annotated[bytes, VarOpaque()]  # the designator's bytes, as VPD page 0x83 holds them
    sbv_pr_key: Annotated[int, uint64]  # the reservation key to register on the unit


pnfs_scsi_volume4 = Union(
    pnfs_scsi_volume_type4_t,
    {
        pnfs_scsi_volume_type4.PNFS_SCSI_VOLUME_BASE: pnfs_scsi_base_volume_info4.XDR,
        pnfs_scsi_volume_type4.PNFS_SCSI_VOLUME_SLICE: pnfs_block_slice_volume_info4.XDR,
        pnfs_scsi_volume_type4.PNFS_SCSI_VOLUME_CONCAT: pnfs_block_concat_volume_info4.XDR,
        pnfs_scsi_volume_type4.PNFS_SCSI_VOLUME_STRIPE: pnfs_block_stripe_volume_info4.XDR,
    },
)


@xdr_struct
class pnfs_scsi_deviceaddr4(XdrStruct):
    sda_volumes: Annotated[list[tuple[int, Any]], Array(pnfs_scsi_volume4)]


# -- extents (section 2.4): the block layout's ---------------------------------------------------------------
@xdr_struct
class pnfs_scsi_layout4(XdrStruct):
    sl_extents: Annotated[list[pnfs_block_extent4], Array(pnfs_block_extent4.XDR)]


# -- LAYOUTCOMMIT (section 2.3.3): the file ranges written ---------------------------------------------------
@xdr_struct
class pnfs_scsi_range4(XdrStruct):
    sr_file_offset: Annotated[int, offset4]
    sr_length: Annotated[int, length4]


@xdr_struct
class pnfs_scsi_layoutupdate4(XdrStruct):
    slu_commit_list: Annotated[list[pnfs_scsi_range4], Array(pnfs_scsi_range4.XDR)]


__all__ = [
    "pnfs_scsi_base_volume_info4", "pnfs_scsi_code_set_t", "pnfs_scsi_designator_type_t",
    "pnfs_scsi_deviceaddr4", "pnfs_scsi_layout4", "pnfs_scsi_layoutupdate4", "pnfs_scsi_range4",
    "pnfs_scsi_volume4", "pnfs_scsi_volume_type4_t",
]
