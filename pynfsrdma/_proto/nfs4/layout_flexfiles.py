"""The flexible file layout's bodies (RFC 8435 sections 4-5), carried opaque by the generic pNFS types.

- ``ff_device_addr4``: GETDEVICEINFO's ``da_addr_body`` for LAYOUT4_FLEX_FILES: the data server's
  addresses and the NFS versions it speaks, each with its rsize and wsize (section 4.1).
- ``ff_layout4``: LAYOUTGET's ``loc_body``: the stripe unit, the mirrors (each a list of data servers:
  device, stateid, file handles, the synthetic user and group to reach them with) and the flags
  (section 5.1).

Same conventions as types_base: structs are ``@xdr_struct`` classes with the RFC's field names.
"""

from __future__ import annotations

import enum
from typing import Annotated

from ..._xdr import Array, XdrStruct, boolean, uint32, xdr_struct
from .types_base import deviceid4, length4, netaddr4, nfs_fh4, stateid4, utf8str_mixed


class ff_flags4(enum.IntFlag):
    """``ffl_flags`` (section 5.1)."""

    FF_FLAGS_NO_LAYOUTCOMMIT = 0x00000001  # the server wants no LAYOUTCOMMIT after writes
    FF_FLAGS_NO_IO_THRU_MDS = 0x00000002  # I/O through the metadata server only when the layout fails
    FF_FLAGS_NO_READ_IO = 0x00000004  # a RW layout is for WRITEs only: reads ask for a READ layout
    FF_FLAGS_WRITE_ONE_MIRROR = 0x00000008  # a WRITE to one mirror is enough (the server copies it)


# the versions a data server speaks (RFC 1813's NFSv3: version 3, minor version 0)
NFS_VERSION3 = 3


# -- GETDEVICEINFO (section 4.1) ----------------------------------------------------------------------------
@xdr_struct
class ff_device_versions4(XdrStruct):
    ffdv_version: Annotated[int, uint32]
    ffdv_minorversion: Annotated[int, uint32]
    ffdv_rsize: Annotated[int, uint32]
    ffdv_wsize: Annotated[int, uint32]
    ffdv_tightly_coupled: Annotated[bool, boolean]


@xdr_struct
class ff_device_addr4(XdrStruct):
    ffda_netaddrs: Annotated[list[netaddr4], Array(netaddr4.XDR)]  # multipath_list4
    ffda_versions: Annotated[list[ff_device_versions4], Array(ff_device_versions4.XDR)]


# -- LAYOUTGET (section 5.1) --------------------------------------------------------------------------------
@xdr_struct
class ff_data_server4(XdrStruct):
    ffds_deviceid: Annotated[bytes, deviceid4]
    ffds_efficiency: Annotated[int, uint32]
    ffds_stateid: stateid4
    ffds_fh_vers: Annotated[list[bytes], Array(nfs_fh4)]
    ffds_user: Annotated[str, utf8str_mixed]  # fattr4_owner: the synthetic uid, as a number
    ffds_group: Annotated[str, utf8str_mixed]  # fattr4_owner_group: the synthetic gid


@xdr_struct
class ff_mirror4(XdrStruct):
    ffm_data_servers: Annotated[list[ff_data_server4], Array(ff_data_server4.XDR)]


@xdr_struct
class ff_layout4(XdrStruct):
    ffl_stripe_unit: Annotated[int, length4]
    ffl_mirrors: Annotated[list[ff_mirror4], Array(ff_mirror4.XDR)]
    ffl_flags: Annotated[int, uint32]  # ff_flags4
    ffl_stats_collect_hint: Annotated[int, uint32]


__all__ = [
    "NFS_VERSION3", "ff_data_server4", "ff_device_addr4", "ff_device_versions4", "ff_flags4", "ff_layout4",
    "ff_mirror4",
]
