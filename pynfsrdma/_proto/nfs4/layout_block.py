"""The block layout's bodies (RFC 5663 section 2), carried opaque by the generic pNFS types.

- ``pnfs_block_deviceaddr4``: GETDEVICEINFO's ``da_addr_body`` for LAYOUT4_BLOCK_VOLUME, the volume
  tree (simple volumes found by their signature, slices, concatenations, stripes); the last volume of
  the array is the top of the tree (section 2.2.1).
- ``pnfs_block_layout4``: LAYOUTGET's ``loc_body``, the file's extents.
- ``pnfs_block_layoutupdate4``: LAYOUTCOMMIT's ``lou_body``, the extents written.

Same conventions as types_base: structs are ``@xdr_struct`` classes, a union's value is
``(discriminant, arm value)``.
"""

from __future__ import annotations

from typing import Annotated, Any

from ..._xdr import Array, Enum, Union, VarOpaque, XdrStruct, int64, uint32, xdr_struct
from .const import pnfs_block_extent_state4, pnfs_block_volume_type4
from .types_base import deviceid4, length4, offset4

pnfs_block_volume_type4_t = Enum(pnfs_block_volume_type4)
pnfs_block_extent_state4_t = Enum(pnfs_block_extent_state4)


# -- the volume topology (section 2.2.1) --------------------------------------------------------------------
@xdr_struct
class pnfs_block_sig_component4(XdrStruct):
    bsc_sig_offset: Annotated[int, int64]  # byte offset of the component; negative: from the volume's end
    bsc_contents: Annotated[bytes, VarOpaque()]  # the bytes found there


@xdr_struct
class pnfs_block_simple_volume_info4(XdrStruct):
    bsv_ds: Annotated[list[pnfs_block_sig_component4], Array(pnfs_block_sig_component4.XDR)]


@xdr_struct
class pnfs_block_slice_volume_info4(XdrStruct):
    bsv_start: Annotated[int, offset4]
    bsv_length: Annotated[int, length4]
    bsv_volume: Annotated[int, uint32]  # index of an earlier volume of the array


@xdr_struct
class pnfs_block_concat_volume_info4(XdrStruct):
    bcv_volumes: Annotated[list[int], Array(uint32)]


@xdr_struct
class pnfs_block_stripe_volume_info4(XdrStruct):
    bsv_stripe_unit: Annotated[int, length4]
    bsv_volumes: Annotated[list[int], Array(uint32)]


pnfs_block_volume4 = Union(
    pnfs_block_volume_type4_t,
    {
        pnfs_block_volume_type4.PNFS_BLOCK_VOLUME_SIMPLE: pnfs_block_simple_volume_info4.XDR,
        pnfs_block_volume_type4.PNFS_BLOCK_VOLUME_SLICE: pnfs_block_slice_volume_info4.XDR,
        pnfs_block_volume_type4.PNFS_BLOCK_VOLUME_CONCAT: pnfs_block_concat_volume_info4.XDR,
        pnfs_block_volume_type4.PNFS_BLOCK_VOLUME_STRIPE: pnfs_block_stripe_volume_info4.XDR,
    },
)


@xdr_struct
class pnfs_block_deviceaddr4(XdrStruct):
    bda_volumes: Annotated[list[tuple[int, Any]], Array(pnfs_block_volume4)]


# -- extents (section 2.3) ----------------------------------------------------------------------------------
@xdr_struct
class pnfs_block_extent4(XdrStruct):
    bex_vol_id: Annotated[bytes, deviceid4]
    bex_file_offset: Annotated[int, offset4]
    bex_length: Annotated[int, length4]
    bex_storage_offset: Annotated[int, offset4]
    bex_state: Annotated[int, pnfs_block_extent_state4_t]


@xdr_struct
class pnfs_block_layout4(XdrStruct):
    blo_extents: Annotated[list[pnfs_block_extent4], Array(pnfs_block_extent4.XDR)]


# -- LAYOUTCOMMIT (section 2.3.2) ---------------------------------------------------------------------------
@xdr_struct
class pnfs_block_layoutupdate4(XdrStruct):
    blu_commit_list: Annotated[list[pnfs_block_extent4], Array(pnfs_block_extent4.XDR)]


__all__ = [
    "pnfs_block_concat_volume_info4", "pnfs_block_deviceaddr4", "pnfs_block_extent4",
    "pnfs_block_extent_state4_t", "pnfs_block_layout4", "pnfs_block_layoutupdate4",
    "pnfs_block_sig_component4", "pnfs_block_simple_volume_info4", "pnfs_block_slice_volume_info4",
    "pnfs_block_stripe_volume_info4", "pnfs_block_volume4", "pnfs_block_volume_type4_t",
]
