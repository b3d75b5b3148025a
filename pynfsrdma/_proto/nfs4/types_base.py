"""NFSv4.1 basic data types (RFC 8881 section 3 and the attribute types of section 5), as XDR codecs.

Typedefs of the XDR are module-level :class:`XdrType` values with the RFC's name (``bitmap4``,
``nfs_fh4``, ``verifier4``...); structs are ``@xdr_struct`` classes with the RFC's field names; unions
are :class:`Union` values whose Python value is ``(discriminant, arm value)`` with ``None`` for a void
arm, e.g. ``(SET_TO_CLIENT_TIME4, nfstime4(1, 0))`` or ``(SET_TO_SERVER_TIME4, None)``.

Python values: uint32/uint64/int64 -> int; bool -> bool; fixed opaques (verifier4, sessionid4, the
``other`` of stateid4) and bounded opaques (nfs_fh4, owners) -> bytes; utf8string/component4 -> str
(UTF-8, undecodable bytes kept by surrogateescape); pathname4 -> list[str]; bitmap4 -> list[int] (words);
linktext4 is a DDP-eligible payload (RFC 8267): decoded as a memoryview, encoded by reference.
"""

from __future__ import annotations

from typing import Annotated

from ..._xdr import (
    Array,
    Bounded,
    Enum,
    Opaque,
    String,
    Union,
    VarOpaque,
    XdrStruct,
    boolean,
    bulk,
    int32,
    int64,
    struct_type,
    uint32,
    uint64,
    void,
    xdr_struct,
)
from ..rpc import AUTH_NONE, AUTH_SYS, auth_flavor, authsys_parms
from .const import (
    NFS4_BITMAP4_WORDS_MAX,
    NFS4_DEVICEID4_SIZE,
    NFS4_FHSIZE,
    NFS4_NSECONDS_MAX,
    NFS4_OPAQUE_LIMIT,
    NFS4_OTHER_SIZE,
    NFS4_SESSIONID_SIZE,
    NFS4_VERIFIER_SIZE,
    NL4_NAME,
    NL4_NETADDR,
    NL4_URL,
    SET_TO_CLIENT_TIME4,
    SET_TO_SERVER_TIME4,
    change_attr_type4,
    data_content4,
    fs4_status_type,
    layoutiomode4,
    layoutreturn_type4,
    layouttype4,
    netloc_type4,
    nfs_ftype4,
    nfsstat4,
    rpc_gss_svc_t,
    stable_how4,
    time_how4,
)

RPCSEC_GSS = auth_flavor.RPCSEC_GSS

# -- enums as XDR types (the IntEnum classes live in const) --------------------------------------------------
# Statuses decode to plain ints when a server sends one this table does not know yet.
nfsstat4_t = Enum(nfsstat4, open_=True)
nfs_ftype4_t = Enum(nfs_ftype4)
stable_how4_t = Enum(stable_how4)
layouttype4_t = Enum(layouttype4, open_=True)  # new layout types appear (RFC 8154 SCSI...)
layoutiomode4_t = Enum(layoutiomode4)

# -- typedefs (section 3.2) ---------------------------------------------------------------------------------
attrlist4 = VarOpaque()
bitmap4 = Array(uint32, NFS4_BITMAP4_WORDS_MAX)
changeid4 = uint64
clientid4 = uint64
count4 = uint32
length4 = uint64
mode4 = uint32
nfs_cookie4 = uint64
nfs_fh4 = VarOpaque(NFS4_FHSIZE)
offset4 = uint64
qop4 = uint32
sec_oid4 = VarOpaque()
sequenceid4 = uint32
seqid4 = uint32
sessionid4 = Opaque(NFS4_SESSIONID_SIZE)
slotid4 = uint32
utf8string = String()
utf8str_cis = utf8string
utf8str_cs = utf8string
utf8str_mixed = utf8string
component4 = utf8str_cs
linktext4 = bulk  # symlink contents: DDP-eligible (RFC 8267 section 4.2)
ascii_REQUIRED4 = utf8string
pathname4 = Array(component4)
verifier4 = Opaque(NFS4_VERIFIER_SIZE)
secret4 = String()
policy4 = uint32
nfs_lease4 = uint32
acetype4 = uint32
aceflag4 = uint32
acemask4 = uint32
aclflag4 = uint32
deviceid4 = Opaque(NFS4_DEVICEID4_SIZE)
gsshandle4_t = VarOpaque()
fs_charset_cap4 = uint32


nseconds4 = Bounded(uint32, NFS4_NSECONDS_MAX, "nfstime4 nseconds")


@xdr_struct
class nfstime4(XdrStruct):
    seconds: Annotated[int, int64]
    nseconds: Annotated[int, nseconds4]


attr_notice4 = nfstime4

settime4 = Union(
    Enum(time_how4),
    {SET_TO_CLIENT_TIME4: nfstime4.XDR, SET_TO_SERVER_TIME4: void},
    default=void,
)


@xdr_struct
class fsid4(XdrStruct):
    major: Annotated[int, uint64]
    minor: Annotated[int, uint64]


@xdr_struct
class change_policy4(XdrStruct):
    cp_major: Annotated[int, uint64]
    cp_minor: Annotated[int, uint64]


@xdr_struct
class fs_location4(XdrStruct):
    server: Annotated[list[str], Array(utf8str_cis)]
    rootpath: Annotated[list[str], pathname4]


@xdr_struct
class fs_locations4(XdrStruct):
    fs_root: Annotated[list[str], pathname4]
    locations: Annotated[list[fs_location4], Array(fs_location4.XDR)]


@xdr_struct
class nfsace4(XdrStruct):
    type: Annotated[int, acetype4]
    flag: Annotated[int, aceflag4]
    access_mask: Annotated[int, acemask4]
    who: Annotated[str, utf8str_mixed]


@xdr_struct
class nfsacl41(XdrStruct):
    na41_flag: Annotated[int, aclflag4]
    na41_aces: Annotated[list[nfsace4], Array(nfsace4.XDR)]


@xdr_struct
class mode_masked4(XdrStruct):
    mm_value_to_set: Annotated[int, mode4]
    mm_mask_bits: Annotated[int, mode4]


@xdr_struct
class specdata4(XdrStruct):
    specdata1: Annotated[int, uint32]  # major device number
    specdata2: Annotated[int, uint32]  # minor device number


@xdr_struct
class netaddr4(XdrStruct):
    na_r_netid: Annotated[str, String()]  # "tcp", "tcp6", "rdma", "rdma6"
    na_r_addr: Annotated[str, String()]  # universal address "h1.h2.h3.h4.p1.p2"


clientaddr4 = netaddr4


@xdr_struct
class nfs_impl_id4(XdrStruct):
    nii_domain: Annotated[str, utf8str_cis]
    nii_name: Annotated[str, utf8str_cs]
    nii_date: nfstime4


@xdr_struct
class stateid4(XdrStruct):
    seqid: Annotated[int, uint32]
    other: Annotated[bytes, Opaque(NFS4_OTHER_SIZE)]


@xdr_struct
class layout_content4(XdrStruct):
    loc_type: Annotated[int, layouttype4_t]
    loc_body: Annotated[bytes, VarOpaque()]


@xdr_struct
class layouthint4(XdrStruct):
    loh_type: Annotated[int, layouttype4_t]
    loh_body: Annotated[bytes, VarOpaque()]


@xdr_struct
class layout4(XdrStruct):
    lo_offset: Annotated[int, offset4]
    lo_length: Annotated[int, length4]
    lo_iomode: Annotated[int, layoutiomode4_t]
    lo_content: layout_content4


@xdr_struct
class device_addr4(XdrStruct):
    da_layout_type: Annotated[int, layouttype4_t]
    da_addr_body: Annotated[bytes, VarOpaque()]


@xdr_struct
class layoutupdate4(XdrStruct):
    lou_type: Annotated[int, layouttype4_t]
    lou_body: Annotated[bytes, VarOpaque()]


@xdr_struct
class layoutreturn_file4(XdrStruct):
    lrf_offset: Annotated[int, offset4]
    lrf_length: Annotated[int, length4]
    lrf_stateid: stateid4
    lrf_body: Annotated[bytes, VarOpaque()]


layoutreturn4 = Union(
    Enum(layoutreturn_type4),
    {layoutreturn_type4.LAYOUTRETURN4_FILE: layoutreturn_file4.XDR},
    default=void,
)


@xdr_struct
class fs4_status(XdrStruct):
    fss_absent: Annotated[bool, boolean]
    fss_type: Annotated[int, Enum(fs4_status_type)]
    fss_source: Annotated[str, utf8str_cs]
    fss_current: Annotated[str, utf8str_cs]
    fss_age: Annotated[int, int32]
    fss_version: nfstime4


@xdr_struct
class threshold_item4(XdrStruct):
    thi_layout_type: Annotated[int, layouttype4_t]
    thi_hintset: Annotated[list[int], bitmap4]
    thi_hintlist: Annotated[bytes, VarOpaque()]


@xdr_struct
class mdsthreshold4(XdrStruct):
    mth_hints: Annotated[list[threshold_item4], Array(threshold_item4.XDR)]


@xdr_struct
class retention_get4(XdrStruct):
    rg_duration: Annotated[int, uint64]
    rg_begin_time: Annotated[list[nfstime4], Array(nfstime4.XDR, 1)]


@xdr_struct
class retention_set4(XdrStruct):
    rs_enable: Annotated[bool, boolean]
    rs_duration: Annotated[list[int], Array(uint64, 1)]


netloc4 = Union(
    Enum(netloc_type4),
    {NL4_NAME: utf8str_cis, NL4_URL: utf8str_cis, NL4_NETADDR: netaddr4.XDR},
)


@xdr_struct
class labelformat_spec4(XdrStruct):
    lfs_lfs: Annotated[int, policy4]
    lfs_pi: Annotated[int, policy4]


@xdr_struct
class sec_label4(XdrStruct):
    slai_lfs: labelformat_spec4
    slai_data: Annotated[bytes, VarOpaque()]


@xdr_struct
class fattr4(XdrStruct):
    """Attributes: a bitmap and the XDR of each attribute it names, in bit order (see attrs.py)."""

    attrmask: Annotated[list[int], bitmap4]
    attr_vals: Annotated[bytes, attrlist4]


@xdr_struct
class change_info4(XdrStruct):
    atomic: Annotated[bool, boolean]
    before: Annotated[int, changeid4]
    after: Annotated[int, changeid4]


@xdr_struct
class cb_client4(XdrStruct):
    cb_program: Annotated[int, uint32]
    cb_location: netaddr4


@xdr_struct
class nfs_client_id4(XdrStruct):
    verifier: Annotated[bytes, verifier4]
    id: Annotated[bytes, VarOpaque(NFS4_OPAQUE_LIMIT)]


@xdr_struct
class client_owner4(XdrStruct):
    co_verifier: Annotated[bytes, verifier4]
    co_ownerid: Annotated[bytes, VarOpaque(NFS4_OPAQUE_LIMIT)]


@xdr_struct
class server_owner4(XdrStruct):
    so_minor_id: Annotated[int, uint64]
    so_major_id: Annotated[bytes, VarOpaque(NFS4_OPAQUE_LIMIT)]


@xdr_struct
class state_owner4(XdrStruct):
    clientid: Annotated[int, clientid4]
    owner: Annotated[bytes, VarOpaque(NFS4_OPAQUE_LIMIT)]


open_owner4 = state_owner4
lock_owner4 = state_owner4


@xdr_struct
class fs_locations_server4(XdrStruct):
    """One server of an fs_locations_item4; ``fls_info`` holds the FSLI4BX_* bytes (see attrs.py)."""

    fls_currency: Annotated[int, int32]
    fls_info: Annotated[bytes, VarOpaque()]
    fls_server: Annotated[str, utf8str_cis]


@xdr_struct
class fs_locations_item4(XdrStruct):
    fli_entries: Annotated[list[fs_locations_server4], Array(fs_locations_server4.XDR)]
    fli_rootpath: Annotated[list[str], pathname4]


@xdr_struct
class fs_locations_info4(XdrStruct):
    fli_flags: Annotated[int, uint32]
    fli_valid_for: Annotated[int, int32]
    fli_fs_root: Annotated[list[str], pathname4]
    fli_items: Annotated[list[fs_locations_item4], Array(fs_locations_item4.XDR)]


@xdr_struct
class gss_cb_handles4(XdrStruct):
    gcbp_service: Annotated[int, Enum(rpc_gss_svc_t)]
    gcbp_handle_from_server: Annotated[bytes, gsshandle4_t]
    gcbp_handle_from_client: Annotated[bytes, gsshandle4_t]


callback_sec_parms4 = Union(
    uint32,
    {AUTH_NONE: void, AUTH_SYS: struct_type(authsys_parms), RPCSEC_GSS: gss_cb_handles4.XDR},
)


@xdr_struct
class rpcsec_gss_info(XdrStruct):
    oid: Annotated[bytes, sec_oid4]
    qop: Annotated[int, qop4]
    service: Annotated[int, Enum(rpc_gss_svc_t)]


secinfo4 = Union(uint32, {RPCSEC_GSS: rpcsec_gss_info.XDR}, default=void)


# -- NFSv4.2 data types (RFC 7862 section 4) -----------------------------------------------------------------
@xdr_struct
class data_info4(XdrStruct):
    di_offset: Annotated[int, offset4]
    di_length: Annotated[int, length4]


@xdr_struct
class data4(XdrStruct):
    d_offset: Annotated[int, offset4]
    d_data: Annotated[bytes, VarOpaque()]


@xdr_struct
class write_response4(XdrStruct):
    wr_callback_id: Annotated[list[stateid4], Array(stateid4.XDR, 1)]
    wr_count: Annotated[int, length4]
    wr_committed: Annotated[int, stable_how4_t]
    wr_writeverf: Annotated[bytes, verifier4]


@xdr_struct
class app_data_block4(XdrStruct):
    adb_offset: Annotated[int, offset4]
    adb_block_size: Annotated[int, length4]
    adb_block_count: Annotated[int, length4]
    adb_reloff_blocknum: Annotated[int, length4]
    adb_block_num: Annotated[int, count4]
    adb_reloff_pattern: Annotated[int, length4]
    adb_pattern: Annotated[bytes, VarOpaque()]


change_attr_type4_t = Enum(change_attr_type4)
data_content4_t = Enum(data_content4)

# extended attributes (RFC 8276 section 8.3)
xattrkey4 = component4
xattrvalue4 = VarOpaque()


__all__ = [
    "aceflag4",
    "acemask4",
    "acetype4",
    "aclflag4",
    "app_data_block4",
    "ascii_REQUIRED4",
    "attr_notice4",
    "attrlist4",
    "bitmap4",
    "callback_sec_parms4",
    "cb_client4",
    "change_attr_type4_t",
    "change_info4",
    "change_policy4",
    "changeid4",
    "client_owner4",
    "clientaddr4",
    "clientid4",
    "component4",
    "count4",
    "data4",
    "data_content4_t",
    "data_info4",
    "device_addr4",
    "deviceid4",
    "fattr4",
    "fs4_status",
    "fs_charset_cap4",
    "fs_location4",
    "fs_locations4",
    "fs_locations_info4",
    "fs_locations_item4",
    "fs_locations_server4",
    "fsid4",
    "gss_cb_handles4",
    "gsshandle4_t",
    "labelformat_spec4",
    "layout4",
    "layout_content4",
    "layouthint4",
    "layoutiomode4_t",
    "layoutreturn4",
    "layoutreturn_file4",
    "layouttype4_t",
    "layoutupdate4",
    "length4",
    "linktext4",
    "lock_owner4",
    "mdsthreshold4",
    "mode4",
    "mode_masked4",
    "netaddr4",
    "netloc4",
    "nfs_client_id4",
    "nfs_cookie4",
    "nfs_fh4",
    "nfs_ftype4_t",
    "nfs_impl_id4",
    "nfs_lease4",
    "nfsace4",
    "nfsacl41",
    "nfsstat4_t",
    "nfstime4",
    "nseconds4",
    "offset4",
    "open_owner4",
    "pathname4",
    "policy4",
    "qop4",
    "retention_get4",
    "retention_set4",
    "rpcsec_gss_info",
    "sec_label4",
    "sec_oid4",
    "secinfo4",
    "secret4",
    "seqid4",
    "sequenceid4",
    "server_owner4",
    "sessionid4",
    "settime4",
    "slotid4",
    "specdata4",
    "stable_how4_t",
    "state_owner4",
    "stateid4",
    "threshold_item4",
    "utf8str_cis",
    "utf8str_cs",
    "utf8str_mixed",
    "utf8string",
    "verifier4",
    "write_response4",
    "xattrkey4",
    "xattrvalue4",
]
