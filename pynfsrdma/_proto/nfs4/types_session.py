"""Arguments and results of the operations new in NFSv4.1 (RFC 8881 sections 18.34 to 18.51).

Client IDs and sessions (EXCHANGE_ID, CREATE_SESSION, SEQUENCE, BIND_CONN_TO_SESSION, DESTROY_*,
RECLAIM_COMPLETE, BACKCHANNEL_CTL, SET_SSV), state (FREE_STATEID, TEST_STATEID, WANT_DELEGATION,
GET_DIR_DELEGATION), SECINFO_NO_NAME and the pNFS layout operations. Same conventions as types_ops.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from ..._xdr import Array, Bounded, Enum, Union, VarOpaque, XdrStruct, boolean, uint32, void, xdr_struct
from .const import (
    CLAIM_DELEG_PREV_FH,
    CLAIM_FH,
    CLAIM_PREVIOUS,
    GDD4_OK,
    GDD4_UNAVAIL,
    NFS4_OPAQUE_LIMIT,
    NFS4_SLOTS_MAX,
    OP_BACKCHANNEL_CTL,
    OP_BIND_CONN_TO_SESSION,
    OP_CREATE_SESSION,
    OP_DESTROY_CLIENTID,
    OP_DESTROY_SESSION,
    OP_EXCHANGE_ID,
    OP_FREE_STATEID,
    OP_GET_DIR_DELEGATION,
    OP_GETDEVICEINFO,
    OP_GETDEVICELIST,
    OP_LAYOUTCOMMIT,
    OP_LAYOUTGET,
    OP_LAYOUTRETURN,
    OP_RECLAIM_COMPLETE,
    OP_SECINFO_NO_NAME,
    OP_SEQUENCE,
    OP_SET_SSV,
    OP_TEST_STATEID,
    OP_WANT_DELEGATION,
    SP4_MACH_CRED,
    SP4_NONE,
    SP4_SSV,
    channel_dir_from_client4,
    channel_dir_from_server4,
    gddrnf4_status,
    open_claim_type4,
    secinfo_style4,
    state_protect_how4,
)
from .types_base import (
    bitmap4,
    callback_sec_parms4,
    clientid4,
    count4,
    device_addr4,
    deviceid4,
    gsshandle4_t,
    layout4,
    layoutiomode4_t,
    layoutreturn4,
    layouttype4_t,
    layoutupdate4,
    length4,
    nfs_cookie4,
    nfs_impl_id4,
    nfsstat4_t,
    nfstime4,
    offset4,
    sec_oid4,
    sequenceid4,
    server_owner4,
    sessionid4,
    slotid4,
    stateid4,
    verifier4,
)
from .types_base import client_owner4 as client_owner4
from .types_ops import open_delegation4, open_delegation_type4_t

# -- BACKCHANNEL_CTL (18.33) --------------------------------------------------------------------------------


@xdr_struct
class BACKCHANNEL_CTL4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_BACKCHANNEL_CTL
    bca_cb_program: Annotated[int, uint32]
    bca_sec_parms: Annotated[list[tuple[int, Any]], Array(callback_sec_parms4)]


# -- BIND_CONN_TO_SESSION (18.34) ---------------------------------------------------------------------------
@xdr_struct
class BIND_CONN_TO_SESSION4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_BIND_CONN_TO_SESSION
    bctsa_sessid: Annotated[bytes, sessionid4]
    bctsa_dir: Annotated[int, Enum(channel_dir_from_client4)]
    bctsa_use_conn_in_rdma_mode: Annotated[bool, boolean]


@xdr_struct
class BIND_CONN_TO_SESSION4resok(XdrStruct):
    bctsr_sessid: Annotated[bytes, sessionid4]
    bctsr_dir: Annotated[int, Enum(channel_dir_from_server4)]
    bctsr_use_conn_in_rdma_mode: Annotated[bool, boolean]


# -- EXCHANGE_ID (18.35) ------------------------------------------------------------------------------------
@xdr_struct
class state_protect_ops4(XdrStruct):
    spo_must_enforce: Annotated[list[int], bitmap4]
    spo_must_allow: Annotated[list[int], bitmap4]


@xdr_struct
class ssv_sp_parms4(XdrStruct):
    ssp_ops: state_protect_ops4
    ssp_hash_algs: Annotated[list[bytes], Array(sec_oid4)]
    ssp_encr_algs: Annotated[list[bytes], Array(sec_oid4)]
    ssp_window: Annotated[int, uint32]
    ssp_num_gss_handles: Annotated[int, uint32]


state_protect_how4_t = Enum(state_protect_how4)

# (SP4_NONE, None) | (SP4_MACH_CRED, state_protect_ops4) | (SP4_SSV, ssv_sp_parms4)
state_protect4_a = Union(
    state_protect_how4_t,
    {SP4_NONE: void, SP4_MACH_CRED: state_protect_ops4.XDR, SP4_SSV: ssv_sp_parms4.XDR},
)


@xdr_struct
class EXCHANGE_ID4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_EXCHANGE_ID
    eia_clientowner: client_owner4
    eia_flags: Annotated[int, uint32]
    eia_state_protect: Annotated[tuple[int, Any], state_protect4_a]
    eia_client_impl_id: Annotated[list[nfs_impl_id4], Array(nfs_impl_id4.XDR, 1)]


@xdr_struct
class ssv_prot_info4(XdrStruct):
    spi_ops: state_protect_ops4
    spi_hash_alg: Annotated[int, uint32]
    spi_encr_alg: Annotated[int, uint32]
    spi_ssv_len: Annotated[int, uint32]
    spi_window: Annotated[int, uint32]
    spi_handles: Annotated[list[bytes], Array(gsshandle4_t)]


state_protect4_r = Union(
    state_protect_how4_t,
    {SP4_NONE: void, SP4_MACH_CRED: state_protect_ops4.XDR, SP4_SSV: ssv_prot_info4.XDR},
)


@xdr_struct
class EXCHANGE_ID4resok(XdrStruct):
    eir_clientid: Annotated[int, clientid4]
    eir_sequenceid: Annotated[int, sequenceid4]
    eir_flags: Annotated[int, uint32]
    eir_state_protect: Annotated[tuple[int, Any], state_protect4_r]
    eir_server_owner: server_owner4
    eir_server_scope: Annotated[bytes, VarOpaque(NFS4_OPAQUE_LIMIT)]
    eir_server_impl_id: Annotated[list[nfs_impl_id4], Array(nfs_impl_id4.XDR, 1)]


# -- CREATE_SESSION (18.36) ---------------------------------------------------------------------------------
# a channel's slot count: one slot object each, so bounded where it is decoded
slots4 = Bounded(count4, NFS4_SLOTS_MAX, "ca_maxrequests")


@xdr_struct
class channel_attrs4(XdrStruct):
    ca_headerpadsize: Annotated[int, count4]
    ca_maxrequestsize: Annotated[int, count4]
    ca_maxresponsesize: Annotated[int, count4]
    ca_maxresponsesize_cached: Annotated[int, count4]
    ca_maxoperations: Annotated[int, count4]
    ca_maxrequests: Annotated[int, slots4]
    ca_rdma_ird: Annotated[list[int], Array(uint32, 1)]


@xdr_struct
class CREATE_SESSION4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CREATE_SESSION
    csa_clientid: Annotated[int, clientid4]
    csa_sequence: Annotated[int, sequenceid4]
    csa_flags: Annotated[int, uint32]
    csa_fore_chan_attrs: channel_attrs4
    csa_back_chan_attrs: channel_attrs4
    csa_cb_program: Annotated[int, uint32]
    csa_sec_parms: Annotated[list[tuple[int, Any]], Array(callback_sec_parms4)]


@xdr_struct
class CREATE_SESSION4resok(XdrStruct):
    csr_sessionid: Annotated[bytes, sessionid4]
    csr_sequence: Annotated[int, sequenceid4]
    csr_flags: Annotated[int, uint32]
    csr_fore_chan_attrs: channel_attrs4
    csr_back_chan_attrs: channel_attrs4


# -- DESTROY_SESSION (18.37), FREE_STATEID (18.38) ----------------------------------------------------------
@xdr_struct
class DESTROY_SESSION4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_DESTROY_SESSION
    dsa_sessionid: Annotated[bytes, sessionid4]


@xdr_struct
class FREE_STATEID4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_FREE_STATEID
    fsa_stateid: stateid4


# -- GET_DIR_DELEGATION (18.39) -----------------------------------------------------------------------------
@xdr_struct
class GET_DIR_DELEGATION4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_GET_DIR_DELEGATION
    gdda_signal_deleg_avail: Annotated[bool, boolean]
    gdda_notification_types: Annotated[list[int], bitmap4]
    gdda_child_attr_delay: nfstime4  # attr_notice4
    gdda_dir_attr_delay: nfstime4  # attr_notice4
    gdda_child_attributes: Annotated[list[int], bitmap4]
    gdda_dir_attributes: Annotated[list[int], bitmap4]


@xdr_struct
class GET_DIR_DELEGATION4resok(XdrStruct):
    gddr_cookieverf: Annotated[bytes, verifier4]
    gddr_stateid: stateid4
    gddr_notification: Annotated[list[int], bitmap4]
    gddr_child_attributes: Annotated[list[int], bitmap4]
    gddr_dir_attributes: Annotated[list[int], bitmap4]


# (GDD4_OK, GET_DIR_DELEGATION4resok) | (GDD4_UNAVAIL, bool will_signal_deleg_avail)
GET_DIR_DELEGATION4res_non_fatal = Union(
    Enum(gddrnf4_status),
    {GDD4_OK: GET_DIR_DELEGATION4resok.XDR, GDD4_UNAVAIL: boolean},
)


# -- GETDEVICEINFO (18.40), GETDEVICELIST (18.41) -----------------------------------------------------------
@xdr_struct
class GETDEVICEINFO4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_GETDEVICEINFO
    gdia_device_id: Annotated[bytes, deviceid4]
    gdia_layout_type: Annotated[int, layouttype4_t]
    gdia_maxcount: Annotated[int, count4]
    gdia_notify_types: Annotated[list[int], bitmap4]


@xdr_struct
class GETDEVICEINFO4resok(XdrStruct):
    gdir_device_addr: device_addr4
    gdir_notification: Annotated[list[int], bitmap4]


@xdr_struct
class GETDEVICELIST4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_GETDEVICELIST
    gdla_layout_type: Annotated[int, layouttype4_t]
    gdla_maxdevices: Annotated[int, count4]
    gdla_cookie: Annotated[int, nfs_cookie4]
    gdla_cookieverf: Annotated[bytes, verifier4]


@xdr_struct
class GETDEVICELIST4resok(XdrStruct):
    gdlr_cookie: Annotated[int, nfs_cookie4]
    gdlr_cookieverf: Annotated[bytes, verifier4]
    gdlr_deviceid_list: Annotated[list[bytes], Array(deviceid4)]
    gdlr_eof: Annotated[bool, boolean]


# -- LAYOUTCOMMIT (18.42), LAYOUTGET (18.43), LAYOUTRETURN (18.44) ------------------------------------------
newtime4 = Union(boolean, {True: nfstime4.XDR, False: void})
newoffset4 = Union(boolean, {True: offset4, False: void})
newsize4 = Union(boolean, {True: length4, False: void})


@xdr_struct
class LAYOUTCOMMIT4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_LAYOUTCOMMIT
    loca_offset: Annotated[int, offset4]
    loca_length: Annotated[int, length4]
    loca_reclaim: Annotated[bool, boolean]
    loca_stateid: stateid4
    loca_last_write_offset: Annotated[tuple[bool, Any], newoffset4]
    loca_time_modify: Annotated[tuple[bool, Any], newtime4]
    loca_layoutupdate: layoutupdate4


@xdr_struct
class LAYOUTCOMMIT4resok(XdrStruct):
    locr_newsize: Annotated[tuple[bool, Any], newsize4]


@xdr_struct
class LAYOUTGET4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_LAYOUTGET
    loga_signal_layout_avail: Annotated[bool, boolean]
    loga_layout_type: Annotated[int, layouttype4_t]
    loga_iomode: Annotated[int, layoutiomode4_t]
    loga_offset: Annotated[int, offset4]
    loga_length: Annotated[int, length4]
    loga_minlength: Annotated[int, length4]
    loga_stateid: stateid4
    loga_maxcount: Annotated[int, count4]


@xdr_struct
class LAYOUTGET4resok(XdrStruct):
    logr_return_on_close: Annotated[bool, boolean]
    logr_stateid: stateid4
    logr_layout: Annotated[list[layout4], Array(layout4.XDR)]


@xdr_struct
class LAYOUTRETURN4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_LAYOUTRETURN
    lora_reclaim: Annotated[bool, boolean]
    lora_layout_type: Annotated[int, layouttype4_t]
    lora_iomode: Annotated[int, layoutiomode4_t]
    lora_layoutreturn: Annotated[tuple[int, Any], layoutreturn4]


layoutreturn_stateid = Union(boolean, {True: stateid4.XDR, False: void})


# -- SECINFO_NO_NAME (18.45) --------------------------------------------------------------------------------
@xdr_struct
class SECINFO_NO_NAME4args(XdrStruct):
    """The XDR's ``typedef secinfo_style4 SECINFO_NO_NAME4args``, as a one-field struct."""

    OPNUM: ClassVar[int] = OP_SECINFO_NO_NAME
    style: Annotated[int, Enum(secinfo_style4)]


# -- SEQUENCE (18.46) ---------------------------------------------------------------------------------------
@xdr_struct
class SEQUENCE4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_SEQUENCE
    sa_sessionid: Annotated[bytes, sessionid4]
    sa_sequenceid: Annotated[int, sequenceid4]
    sa_slotid: Annotated[int, slotid4]
    sa_highest_slotid: Annotated[int, slotid4]
    sa_cachethis: Annotated[bool, boolean]


@xdr_struct
class SEQUENCE4resok(XdrStruct):
    sr_sessionid: Annotated[bytes, sessionid4]
    sr_sequenceid: Annotated[int, sequenceid4]
    sr_slotid: Annotated[int, slotid4]
    sr_highest_slotid: Annotated[int, slotid4]
    sr_target_highest_slotid: Annotated[int, slotid4]
    sr_status_flags: Annotated[int, uint32]


# -- SET_SSV (18.47) ----------------------------------------------------------------------------------------
@xdr_struct
class SET_SSV4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_SET_SSV
    ssa_ssv: Annotated[bytes, VarOpaque()]
    ssa_digest: Annotated[bytes, VarOpaque()]


@xdr_struct
class SET_SSV4resok(XdrStruct):
    ssr_digest: Annotated[bytes, VarOpaque()]


# -- TEST_STATEID (18.48) -----------------------------------------------------------------------------------
@xdr_struct
class TEST_STATEID4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_TEST_STATEID
    ts_stateids: Annotated[list[stateid4], Array(stateid4.XDR)]


@xdr_struct
class TEST_STATEID4resok(XdrStruct):
    tsr_status_codes: Annotated[list[int], Array(nfsstat4_t)]


# -- WANT_DELEGATION (18.49) --------------------------------------------------------------------------------
deleg_claim4 = Union(
    Enum(open_claim_type4),
    {CLAIM_FH: void, CLAIM_DELEG_PREV_FH: void, CLAIM_PREVIOUS: open_delegation_type4_t},
)


@xdr_struct
class WANT_DELEGATION4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_WANT_DELEGATION
    wda_want: Annotated[int, uint32]
    wda_claim: Annotated[tuple[int, Any], deleg_claim4]


WANT_DELEGATION4resok = open_delegation4


# -- DESTROY_CLIENTID (18.50), RECLAIM_COMPLETE (18.51) -----------------------------------------------------
@xdr_struct
class DESTROY_CLIENTID4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_DESTROY_CLIENTID
    dca_clientid: Annotated[int, clientid4]


@xdr_struct
class RECLAIM_COMPLETE4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_RECLAIM_COMPLETE
    rca_one_fs: Annotated[bool, boolean]


__all__ = [
    "BACKCHANNEL_CTL4args",
    "BIND_CONN_TO_SESSION4args",
    "BIND_CONN_TO_SESSION4resok",
    "CREATE_SESSION4args",
    "CREATE_SESSION4resok",
    "DESTROY_CLIENTID4args",
    "DESTROY_SESSION4args",
    "EXCHANGE_ID4args",
    "EXCHANGE_ID4resok",
    "FREE_STATEID4args",
    "GETDEVICEINFO4args",
    "GETDEVICEINFO4resok",
    "GETDEVICELIST4args",
    "GETDEVICELIST4resok",
    "GET_DIR_DELEGATION4args",
    "GET_DIR_DELEGATION4res_non_fatal",
    "GET_DIR_DELEGATION4resok",
    "LAYOUTCOMMIT4args",
    "LAYOUTCOMMIT4resok",
    "LAYOUTGET4args",
    "LAYOUTGET4resok",
    "LAYOUTRETURN4args",
    "RECLAIM_COMPLETE4args",
    "SECINFO_NO_NAME4args",
    "SEQUENCE4args",
    "SEQUENCE4resok",
    "SET_SSV4args",
    "SET_SSV4resok",
    "TEST_STATEID4args",
    "TEST_STATEID4resok",
    "WANT_DELEGATION4args",
    "WANT_DELEGATION4resok",
    "channel_attrs4",
    "deleg_claim4",
    "layoutreturn_stateid",
    "newoffset4",
    "newsize4",
    "newtime4",
    "ssv_prot_info4",
    "ssv_sp_parms4",
    "state_protect4_a",
    "state_protect4_r",
    "state_protect_how4_t",
    "state_protect_ops4",
]
