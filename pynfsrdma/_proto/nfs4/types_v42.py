"""Arguments and results of the NFSv4.2 operations (RFC 7862 section 15) and extended attributes (RFC 8276).

Same conventions as types_ops. A 4.1 server answers these with NFS4ERR_NOTSUPP or NFS4ERR_OP_ILLEGAL;
they are here so that a client can try them and a responder can decode them.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from ..._xdr import Array, Enum, Union, XdrStruct, boolean, uint64, void, xdr_struct
from .const import (
    NFS4_CONTENT_DATA,
    NFS4_CONTENT_HOLE,
    OP_ALLOCATE,
    OP_CLONE,
    OP_COPY,
    OP_COPY_NOTIFY,
    OP_DEALLOCATE,
    OP_GETXATTR,
    OP_IO_ADVISE,
    OP_LAYOUTERROR,
    OP_LAYOUTSTATS,
    OP_LISTXATTRS,
    OP_OFFLOAD_CANCEL,
    OP_OFFLOAD_STATUS,
    OP_READ_PLUS,
    OP_REMOVEXATTR,
    OP_SEEK,
    OP_SETXATTR,
    OP_WRITE_SAME,
    nfs_opnum4,
    setxattr_option4,
)
from .types_base import (
    app_data_block4,
    bitmap4,
    count4,
    data4,
    data_content4_t,
    data_info4,
    deviceid4,
    layoutupdate4,
    length4,
    netloc4,
    nfs_cookie4,
    nfsstat4_t,
    nfstime4,
    offset4,
    stable_how4_t,
    stateid4,
    write_response4,
    xattrkey4,
    xattrvalue4,
)


# -- ALLOCATE (15.1), COPY (15.2), COPY_NOTIFY (15.3), DEALLOCATE (15.4) ------------------------------------
@xdr_struct
class ALLOCATE4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_ALLOCATE
    aa_stateid: stateid4
    aa_offset: Annotated[int, offset4]
    aa_length: Annotated[int, length4]


@xdr_struct
class COPY4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_COPY
    ca_src_stateid: stateid4
    ca_dst_stateid: stateid4
    ca_src_offset: Annotated[int, offset4]
    ca_dst_offset: Annotated[int, offset4]
    ca_count: Annotated[int, length4]
    ca_consecutive: Annotated[bool, boolean]
    ca_synchronous: Annotated[bool, boolean]
    ca_source_server: Annotated[list[tuple[int, Any]], Array(netloc4)]


@xdr_struct
class copy_requirements4(XdrStruct):
    cr_consecutive: Annotated[bool, boolean]
    cr_synchronous: Annotated[bool, boolean]


@xdr_struct
class COPY4resok(XdrStruct):
    cr_response: write_response4
    cr_requirements: copy_requirements4


@xdr_struct
class COPY_NOTIFY4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_COPY_NOTIFY
    cna_src_stateid: stateid4
    cna_destination_server: Annotated[tuple[int, Any], netloc4]


@xdr_struct
class COPY_NOTIFY4resok(XdrStruct):
    cnr_lease_time: nfstime4
    cnr_stateid: stateid4
    cnr_source_server: Annotated[list[tuple[int, Any]], Array(netloc4)]


@xdr_struct
class DEALLOCATE4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_DEALLOCATE
    da_stateid: stateid4
    da_offset: Annotated[int, offset4]
    da_length: Annotated[int, length4]


# -- IO_ADVISE (15.5), LAYOUTERROR (15.6), LAYOUTSTATS (15.7) -----------------------------------------------
@xdr_struct
class IO_ADVISE4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_IO_ADVISE
    iaa_stateid: stateid4
    iaa_offset: Annotated[int, offset4]
    iaa_count: Annotated[int, length4]
    iaa_hints: Annotated[list[int], bitmap4]


@xdr_struct
class IO_ADVISE4resok(XdrStruct):
    ior_hints: Annotated[list[int], bitmap4]


@xdr_struct
class device_error4(XdrStruct):
    de_deviceid: Annotated[bytes, deviceid4]
    de_status: Annotated[int, nfsstat4_t]
    de_opnum: Annotated[int, Enum(nfs_opnum4)]


@xdr_struct
class LAYOUTERROR4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_LAYOUTERROR
    lea_offset: Annotated[int, offset4]
    lea_length: Annotated[int, length4]
    lea_stateid: stateid4
    lea_errors: Annotated[list[device_error4], Array(device_error4.XDR)]


@xdr_struct
class io_info4(XdrStruct):
    ii_count: Annotated[int, uint64]
    ii_bytes: Annotated[int, uint64]


@xdr_struct
class LAYOUTSTATS4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_LAYOUTSTATS
    lsa_offset: Annotated[int, offset4]
    lsa_length: Annotated[int, length4]
    lsa_stateid: stateid4
    lsa_read: io_info4
    lsa_write: io_info4
    lsa_deviceid: Annotated[bytes, deviceid4]
    lsa_layoutupdate: layoutupdate4


# -- OFFLOAD_CANCEL (15.8), OFFLOAD_STATUS (15.9) -----------------------------------------------------------
@xdr_struct
class OFFLOAD_CANCEL4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_OFFLOAD_CANCEL
    oca_stateid: stateid4


@xdr_struct
class OFFLOAD_STATUS4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_OFFLOAD_STATUS
    osa_stateid: stateid4


@xdr_struct
class OFFLOAD_STATUS4resok(XdrStruct):
    osr_count: Annotated[int, length4]
    osr_complete: Annotated[list[int], Array(nfsstat4_t, 1)]


# -- READ_PLUS (15.10), SEEK (15.11), WRITE_SAME (15.12), CLONE (15.13) -------------------------------------
@xdr_struct
class READ_PLUS4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_READ_PLUS
    rpa_stateid: stateid4
    rpa_offset: Annotated[int, offset4]
    rpa_count: Annotated[int, count4]


read_plus_content = Union(
    data_content4_t,
    {NFS4_CONTENT_DATA: data4.XDR, NFS4_CONTENT_HOLE: data_info4.XDR},
    default=void,
)


@xdr_struct
class read_plus_res4(XdrStruct):
    rpr_eof: Annotated[bool, boolean]
    rpr_contents: Annotated[list[tuple[int, Any]], Array(read_plus_content)]


@xdr_struct
class SEEK4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_SEEK
    sa_stateid: stateid4
    sa_offset: Annotated[int, offset4]
    sa_what: Annotated[int, data_content4_t]


@xdr_struct
class seek_res4(XdrStruct):
    sr_eof: Annotated[bool, boolean]
    sr_offset: Annotated[int, offset4]


@xdr_struct
class WRITE_SAME4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_WRITE_SAME
    wsa_stateid: stateid4
    wsa_stable: Annotated[int, stable_how4_t]
    wsa_adb: app_data_block4


@xdr_struct
class CLONE4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CLONE
    cl_src_stateid: stateid4
    cl_dst_stateid: stateid4
    cl_src_offset: Annotated[int, offset4]
    cl_dst_offset: Annotated[int, offset4]
    cl_count: Annotated[int, length4]


# -- extended attributes (RFC 8276 section 8.4) -------------------------------------------------------------
@xdr_struct
class GETXATTR4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_GETXATTR
    gxa_name: Annotated[str, xattrkey4]


@xdr_struct
class SETXATTR4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_SETXATTR
    sxa_option: Annotated[int, Enum(setxattr_option4)]
    sxa_key: Annotated[str, xattrkey4]
    sxa_value: Annotated[bytes, xattrvalue4]


@xdr_struct
class LISTXATTRS4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_LISTXATTRS
    lxa_cookie: Annotated[int, nfs_cookie4]
    lxa_maxcount: Annotated[int, count4]


@xdr_struct
class LISTXATTRS4resok(XdrStruct):
    lxr_cookie: Annotated[int, nfs_cookie4]
    lxr_names: Annotated[list[str], Array(xattrkey4)]
    lxr_eof: Annotated[bool, boolean]


@xdr_struct
class REMOVEXATTR4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_REMOVEXATTR
    rxa_name: Annotated[str, xattrkey4]


__all__ = [
    "ALLOCATE4args",
    "CLONE4args",
    "COPY4args",
    "COPY4resok",
    "COPY_NOTIFY4args",
    "COPY_NOTIFY4resok",
    "DEALLOCATE4args",
    "GETXATTR4args",
    "IO_ADVISE4args",
    "IO_ADVISE4resok",
    "LAYOUTERROR4args",
    "LAYOUTSTATS4args",
    "LISTXATTRS4args",
    "LISTXATTRS4resok",
    "OFFLOAD_CANCEL4args",
    "OFFLOAD_STATUS4args",
    "OFFLOAD_STATUS4resok",
    "READ_PLUS4args",
    "REMOVEXATTR4args",
    "SEEK4args",
    "SETXATTR4args",
    "WRITE_SAME4args",
    "copy_requirements4",
    "device_error4",
    "io_info4",
    "read_plus_content",
    "read_plus_res4",
    "seek_res4",
]
