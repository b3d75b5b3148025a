"""The NFSv4.1 callback program (RFC 8881 sections 16.2.3 and 20): CB_NULL and CB_COMPOUND.

The server calls the client on the session's backchannel with program ``csa_cb_program`` (chosen by the
client in CREATE_SESSION; ``NFS4_CALLBACK`` is only the XDR's placeholder), version ``NFS_CB``, procedures
``CB_NULL`` and ``CB_COMPOUND``. Same conventions as compound.py: every ``CB_XXX4args`` class carries
``OPNUM`` (an ``nfs_cb_opnum4``) and results are :class:`ResOp` objects whose ``res`` is the NFS4_OK arm
(CB_SEQUENCE4resok, CB_GETATTR4resok) or None.

API: ``encode_cb_compound_args(p, args)``, ``decode_cb_compound_args(u)``, ``encode_cb_compound_res(p, res)``,
``decode_cb_compound_res(u)`` (or ``CB_COMPOUND4args.XDR`` / ``CB_COMPOUND4res.XDR``).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from ..._xdr import (
    Array,
    ClassUnion,
    Enum,
    Packer,
    Union,
    Unpacker,
    VarOpaque,
    XdrStruct,
    XdrType,
    boolean,
    int32,
    uint32,
    void,
    xdr_struct,
)
from .compound import OpResult, ResOp, ResOpType
from .const import (
    LAYOUTRECALL4_ALL,
    LAYOUTRECALL4_FILE,
    LAYOUTRECALL4_FSID,
    NFS4_OK,
    NOTIFY4_ADD_ENTRY,
    NOTIFY4_CHANGE_CHILD_ATTRS,
    NOTIFY4_CHANGE_COOKIE_VERIFIER,
    NOTIFY4_CHANGE_DIR_ATTRS,
    NOTIFY4_REMOVE_ENTRY,
    NOTIFY4_RENAME_ENTRY,
    NOTIFY_DEVICEID4_CHANGE,
    NOTIFY_DEVICEID4_DELETE,
    OP_CB_GETATTR,
    OP_CB_ILLEGAL,
    OP_CB_LAYOUTRECALL,
    OP_CB_NOTIFY,
    OP_CB_NOTIFY_DEVICEID,
    OP_CB_NOTIFY_LOCK,
    OP_CB_OFFLOAD,
    OP_CB_PUSH_DELEG,
    OP_CB_RECALL,
    OP_CB_RECALL_ANY,
    OP_CB_RECALL_SLOT,
    OP_CB_RECALLABLE_OBJ_AVAIL,
    OP_CB_SEQUENCE,
    OP_CB_WANTS_CANCELLED,
    layoutrecall_type4,
)
from .types import (
    bitmap4,
    component4,
    deviceid4,
    fattr4,
    fsid4,
    layoutiomode4_t,
    layouttype4_t,
    length4,
    lock_owner4,
    nfs_cookie4,
    nfs_fh4,
    nfsstat4_t,
    offset4,
    open_delegation4,
    sequenceid4,
    sessionid4,
    slotid4,
    stateid4,
    utf8str_cs,
    verifier4,
    write_response4,
)


# -- CB_GETATTR (20.1), CB_RECALL (20.2) --------------------------------------------------------------------
@xdr_struct
class CB_GETATTR4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_GETATTR
    fh: Annotated[bytes, nfs_fh4]
    attr_request: Annotated[list[int], bitmap4]


@xdr_struct
class CB_GETATTR4resok(XdrStruct):
    obj_attributes: fattr4


@xdr_struct
class CB_RECALL4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_RECALL
    stateid: stateid4
    truncate: Annotated[bool, boolean]
    fh: Annotated[bytes, nfs_fh4]


# -- CB_LAYOUTRECALL (20.3) ---------------------------------------------------------------------------------
@xdr_struct
class layoutrecall_file4(XdrStruct):
    lor_fh: Annotated[bytes, nfs_fh4]
    lor_offset: Annotated[int, offset4]
    lor_length: Annotated[int, length4]
    lor_stateid: stateid4


layoutrecall4 = Union(
    Enum(layoutrecall_type4),
    {LAYOUTRECALL4_FILE: layoutrecall_file4.XDR, LAYOUTRECALL4_FSID: fsid4.XDR, LAYOUTRECALL4_ALL: void},
)


@xdr_struct
class CB_LAYOUTRECALL4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_LAYOUTRECALL
    clora_type: Annotated[int, layouttype4_t]
    clora_iomode: Annotated[int, layoutiomode4_t]
    clora_changed: Annotated[bool, boolean]
    clora_recall: Annotated[tuple[int, Any], layoutrecall4]


# -- CB_NOTIFY (20.4) ---------------------------------------------------------------------------------------
# notify4.notify_vals holds, for each bit of notify_mask (a notify_type4), the XDR of one of the structs
# below; a directory-delegation client decodes them with these codecs.
@xdr_struct
class notify_entry4(XdrStruct):
    ne_file: Annotated[str, component4]
    ne_attrs: fattr4


@xdr_struct
class prev_entry4(XdrStruct):
    pe_prev_entry: notify_entry4
    pe_prev_entry_cookie: Annotated[int, nfs_cookie4]


@xdr_struct
class notify_remove4(XdrStruct):
    nrm_old_entry: notify_entry4
    nrm_old_entry_cookie: Annotated[int, nfs_cookie4]


@xdr_struct
class notify_add4(XdrStruct):
    nad_old_entry: Annotated[list[notify_remove4], Array(notify_remove4.XDR, 1)]
    nad_new_entry: notify_entry4
    nad_new_entry_cookie: Annotated[list[int], Array(nfs_cookie4, 1)]
    nad_prev_entry: Annotated[list[prev_entry4], Array(prev_entry4.XDR, 1)]
    nad_last_entry: Annotated[bool, boolean]


@xdr_struct
class notify_attr4(XdrStruct):
    na_changed_entry: notify_entry4


@xdr_struct
class notify_rename4(XdrStruct):
    nrn_old_entry: notify_remove4
    nrn_new_entry: notify_add4


@xdr_struct
class notify_verifier4(XdrStruct):
    nv_old_cookieverf: Annotated[bytes, verifier4]
    nv_new_cookieverf: Annotated[bytes, verifier4]


@xdr_struct
class notify4(XdrStruct):
    notify_mask: Annotated[list[int], bitmap4]
    notify_vals: Annotated[bytes, VarOpaque()]  # notifylist4


# codecs of the notify_vals items of CB_NOTIFY, by notify_type4 (one item per bit of notify_mask)
NOTIFY4_ITEMS = {
    NOTIFY4_CHANGE_CHILD_ATTRS: notify_attr4.XDR,
    NOTIFY4_CHANGE_DIR_ATTRS: notify_attr4.XDR,
    NOTIFY4_REMOVE_ENTRY: notify_remove4.XDR,
    NOTIFY4_ADD_ENTRY: notify_add4.XDR,
    NOTIFY4_RENAME_ENTRY: notify_rename4.XDR,
    NOTIFY4_CHANGE_COOKIE_VERIFIER: notify_verifier4.XDR,
}


@xdr_struct
class CB_NOTIFY4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_NOTIFY
    cna_stateid: stateid4
    cna_fh: Annotated[bytes, nfs_fh4]
    cna_changes: Annotated[list[notify4], Array(notify4.XDR)]


# -- CB_PUSH_DELEG (20.5), CB_RECALL_ANY (20.6), CB_RECALLABLE_OBJ_AVAIL (20.7), CB_RECALL_SLOT (20.8) -------
@xdr_struct
class CB_PUSH_DELEG4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_PUSH_DELEG
    cpda_fh: Annotated[bytes, nfs_fh4]
    cpda_delegation: Annotated[tuple[int, Any], open_delegation4]


@xdr_struct
class CB_RECALL_ANY4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_RECALL_ANY
    craa_objects_to_keep: Annotated[int, uint32]
    craa_type_mask: Annotated[list[int], bitmap4]  # bits RCA4_TYPE_MASK_*


@xdr_struct
class CB_RECALLABLE_OBJ_AVAIL4args(XdrStruct):
    """The XDR's ``typedef CB_RECALL_ANY4args CB_RECALLABLE_OBJ_AVAIL4args`` (same fields)."""

    OPNUM: ClassVar[int] = OP_CB_RECALLABLE_OBJ_AVAIL
    craa_objects_to_keep: Annotated[int, uint32]
    craa_type_mask: Annotated[list[int], bitmap4]


@xdr_struct
class CB_RECALL_SLOT4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_RECALL_SLOT
    rsa_target_highest_slotid: Annotated[int, slotid4]


# -- CB_SEQUENCE (20.9) -------------------------------------------------------------------------------------
@xdr_struct
class referring_call4(XdrStruct):
    rc_sequenceid: Annotated[int, sequenceid4]
    rc_slotid: Annotated[int, slotid4]


@xdr_struct
class referring_call_list4(XdrStruct):
    rcl_sessionid: Annotated[bytes, sessionid4]
    rcl_referring_calls: Annotated[list[referring_call4], Array(referring_call4.XDR)]


@xdr_struct
class CB_SEQUENCE4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_SEQUENCE
    csa_sessionid: Annotated[bytes, sessionid4]
    csa_sequenceid: Annotated[int, sequenceid4]
    csa_slotid: Annotated[int, slotid4]
    csa_highest_slotid: Annotated[int, slotid4]
    csa_cachethis: Annotated[bool, boolean]
    csa_referring_call_lists: Annotated[list[referring_call_list4], Array(referring_call_list4.XDR)]


@xdr_struct
class CB_SEQUENCE4resok(XdrStruct):
    csr_sessionid: Annotated[bytes, sessionid4]
    csr_sequenceid: Annotated[int, sequenceid4]
    csr_slotid: Annotated[int, slotid4]
    csr_highest_slotid: Annotated[int, slotid4]
    csr_target_highest_slotid: Annotated[int, slotid4]


# -- CB_WANTS_CANCELLED (20.10), CB_NOTIFY_LOCK (20.11), CB_NOTIFY_DEVICEID (20.12) -------------------------
@xdr_struct
class CB_WANTS_CANCELLED4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_WANTS_CANCELLED
    cwca_contended_wants_cancelled: Annotated[bool, boolean]
    cwca_resourced_wants_cancelled: Annotated[bool, boolean]


@xdr_struct
class CB_NOTIFY_LOCK4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_NOTIFY_LOCK
    cnla_fh: Annotated[bytes, nfs_fh4]
    cnla_lock_owner: lock_owner4


@xdr_struct
class notify_deviceid_delete4(XdrStruct):
    ndd_layouttype: Annotated[int, layouttype4_t]
    ndd_deviceid: Annotated[bytes, deviceid4]


@xdr_struct
class notify_deviceid_change4(XdrStruct):
    ndc_layouttype: Annotated[int, layouttype4_t]
    ndc_deviceid: Annotated[bytes, deviceid4]
    ndc_immediate: Annotated[bool, boolean]


# codecs of the notify_vals items of CB_NOTIFY_DEVICEID, by notify_deviceid_type4
NOTIFY_DEVICEID4_ITEMS: dict[int, XdrType[Any]] = {
    NOTIFY_DEVICEID4_CHANGE: notify_deviceid_change4.XDR,
    NOTIFY_DEVICEID4_DELETE: notify_deviceid_delete4.XDR,
}


@xdr_struct
class CB_NOTIFY_DEVICEID4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_NOTIFY_DEVICEID
    cnda_changes: Annotated[list[notify4], Array(notify4.XDR)]


def device_notifications(args: CB_NOTIFY_DEVICEID4args) -> list[notify_deviceid_change4 | notify_deviceid_delete4]:
    """The items of CB_NOTIFY_DEVICEID, decoded: each ``notify4`` carries one item per bit of its mask,
    in the bits' order (RFC 8881 20.12); a bit with no codec here ends that ``notify4``."""
    out: list[notify_deviceid_change4 | notify_deviceid_delete4] = []
    for n in args.cnda_changes:
        u = Unpacker(memoryview(bytes(n.notify_vals)))
        kinds = [w * 32 + b for w, bits in enumerate(n.notify_mask) for b in range(32) if bits >> b & 1]
        for kind in kinds:
            codec = NOTIFY_DEVICEID4_ITEMS.get(kind)
            if codec is None:
                break
            out.append(codec.unpack(u))
    return out


# -- CB_OFFLOAD (RFC 7862 section 16.1) ---------------------------------------------------------------------
offload_info4 = Union(nfsstat4_t, {NFS4_OK: write_response4.XDR}, default=length4)  # else coa_bytes_copied


@xdr_struct
class CB_OFFLOAD4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_OFFLOAD
    coa_fh: Annotated[bytes, nfs_fh4]
    coa_stateid: stateid4
    coa_offload_info: Annotated[tuple[int, Any], offload_info4]


@xdr_struct
class CB_ILLEGAL4args(XdrStruct):
    OPNUM: ClassVar[int] = OP_CB_ILLEGAL


CB_ARGS_CLASSES: tuple[type, ...] = (
    CB_GETATTR4args,
    CB_RECALL4args,
    CB_LAYOUTRECALL4args,
    CB_NOTIFY4args,
    CB_PUSH_DELEG4args,
    CB_RECALL_ANY4args,
    CB_RECALLABLE_OBJ_AVAIL4args,
    CB_RECALL_SLOT4args,
    CB_SEQUENCE4args,
    CB_WANTS_CANCELLED4args,
    CB_NOTIFY_LOCK4args,
    CB_NOTIFY_DEVICEID4args,
    CB_OFFLOAD4args,
    CB_ILLEGAL4args,
)
CB_ARGS_BY_OPNUM: dict[int, type] = {c.OPNUM: c for c in CB_ARGS_CLASSES}  # type: ignore[attr-defined]

nfs_cb_argop4 = ClassUnion(uint32, list(CB_ARGS_CLASSES), "OPNUM")

CB_RESULTS: tuple[OpResult, ...] = (
    OpResult(OP_CB_GETATTR, CB_GETATTR4resok),
    OpResult(OP_CB_RECALL),
    OpResult(OP_CB_LAYOUTRECALL),
    OpResult(OP_CB_NOTIFY),
    OpResult(OP_CB_PUSH_DELEG),
    OpResult(OP_CB_RECALL_ANY),
    OpResult(OP_CB_RECALLABLE_OBJ_AVAIL),
    OpResult(OP_CB_RECALL_SLOT),
    OpResult(OP_CB_SEQUENCE, CB_SEQUENCE4resok),
    OpResult(OP_CB_WANTS_CANCELLED),
    OpResult(OP_CB_NOTIFY_LOCK),
    OpResult(OP_CB_NOTIFY_DEVICEID),
    OpResult(OP_CB_OFFLOAD),
    OpResult(OP_CB_ILLEGAL),
)

nfs_cb_resop4 = ResOpType(CB_RESULTS, "nfs_cb_resop4")


@xdr_struct
class CB_COMPOUND4args(XdrStruct):
    tag: Annotated[str, utf8str_cs]
    minorversion: Annotated[int, uint32]
    callback_ident: Annotated[
        int, uint32
    ]  # unused in NFSv4.1 (section 20): the session identifies the client
    argarray: Annotated[list[Any], Array(nfs_cb_argop4)]


@xdr_struct
class CB_COMPOUND4res(XdrStruct):
    status: Annotated[int, int32]
    tag: Annotated[str, utf8str_cs]
    resarray: Annotated[list[ResOp], Array(nfs_cb_resop4)]


def encode_cb_compound_args(p: Packer, args: CB_COMPOUND4args) -> None:
    CB_COMPOUND4args.XDR.pack(p, args)


def decode_cb_compound_args(u: Unpacker) -> CB_COMPOUND4args:
    args: CB_COMPOUND4args = CB_COMPOUND4args.XDR.unpack(u)
    return args


def encode_cb_compound_res(p: Packer, res: CB_COMPOUND4res) -> None:
    CB_COMPOUND4res.XDR.pack(p, res)


def decode_cb_compound_res(u: Unpacker) -> CB_COMPOUND4res:
    res: CB_COMPOUND4res = CB_COMPOUND4res.XDR.unpack(u)
    return res
