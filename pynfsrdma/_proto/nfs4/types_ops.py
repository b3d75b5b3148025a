"""Arguments and results of the NFSv4 file operations (RFC 8881 section 18.1 to 18.33, and 18.2x of 4.0).

Every ``XXX4args`` class carries ``OPNUM`` (its ``nfs_opnum4``); operations without arguments are empty
structs. Results are ``XXX4resok`` structs (or the RFC's other arm types); which arm a reply carries for
which status is described once, in compound.py. The data of READ, WRITE, READLINK and the target of a
symlink CREATE are DDP-eligible (``bulk``): decoded as memoryviews, encoded by reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar

from ..._xdr import Array, Enum, Union, XdrStruct, boolean, bulk, uint32, void, xdr_struct
from .attrs import DirEntries
from .const import (
    CLAIM_DELEG_CUR_FH,
    CLAIM_DELEG_PREV_FH,
    CLAIM_DELEGATE_CUR,
    CLAIM_DELEGATE_PREV,
    CLAIM_FH,
    CLAIM_NULL,
    CLAIM_PREVIOUS,
    EXCLUSIVE4,
    EXCLUSIVE4_1,
    GUARDED4,
    NF4BLK,
    NF4CHR,
    NF4DIR,
    NF4FIFO,
    NF4LNK,
    NF4SOCK,
    NFS_LIMIT_BLOCKS,
    NFS_LIMIT_SIZE,
    OPEN4_CREATE,
    OPEN_DELEGATE_NONE,
    OPEN_DELEGATE_NONE_EXT,
    OPEN_DELEGATE_READ,
    OPEN_DELEGATE_READ_ATTRS_DELEG,
    OPEN_DELEGATE_WRITE,
    OPEN_DELEGATE_WRITE_ATTRS_DELEG,
    UNCHECKED4,
    WND4_CONTENTION,
    WND4_RESOURCE,
    createmode4,
    limit_by4,
    nfs_lock_type4,
    nfs_opnum4,
    open_claim_type4,
    open_delegation_type4,
    opentype4,
    why_no_delegation4,
)
from .types_base import (
    bitmap4,
    cb_client4,
    change_info4,
    clientid4,
    component4,
    count4,
    fattr4,
    length4,
    linktext4,
    lock_owner4,
    nfs_client_id4,
    nfs_cookie4,
    nfs_fh4,
    nfs_ftype4_t,
    nfsace4,
    offset4,
    open_owner4,
    secinfo4,
    seqid4,
    specdata4,
    stable_how4_t,
    stateid4,
    verifier4,
)

nfs_lock_type4_t = Enum(nfs_lock_type4)
open_delegation_type4_t = Enum(open_delegation_type4)


# -- ACCESS (18.1) ------------------------------------------------------------------------------------------
@xdr_struct
class ACCESS4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_ACCESS
    access: Annotated[int, uint32]


@xdr_struct
class ACCESS4resok(XdrStruct):
    supported: Annotated[int, uint32]
    access: Annotated[int, uint32]


# -- CLOSE (18.2) -------------------------------------------------------------------------------------------
@xdr_struct
class CLOSE4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_CLOSE
    seqid: Annotated[int, seqid4]
    open_stateid: stateid4


# -- COMMIT (18.3) ------------------------------------------------------------------------------------------
@xdr_struct
class COMMIT4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_COMMIT
    offset: Annotated[int, offset4]
    count: Annotated[int, count4]


@xdr_struct
class COMMIT4resok(XdrStruct):
    writeverf: Annotated[bytes, verifier4]


# -- CREATE (18.4) ------------------------------------------------------------------------------------------
createtype4 = Union(
    nfs_ftype4_t,
    {
        NF4LNK: linktext4,  # linkdata
        NF4BLK: specdata4.XDR,  # devdata
        NF4CHR: specdata4.XDR,
        NF4SOCK: void,
        NF4FIFO: void,
        NF4DIR: void,
    },
    default=void,  # other types: the server answers NFS4ERR_BADTYPE
)


@xdr_struct
class CREATE4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_CREATE
    objtype: Annotated[tuple[int, Any], createtype4]
    objname: Annotated[str, component4]
    createattrs: fattr4


@xdr_struct
class CREATE4resok(XdrStruct):
    cinfo: change_info4
    attrset: Annotated[list[int], bitmap4]


# -- DELEGPURGE (18.5), DELEGRETURN (18.6) ------------------------------------------------------------------
@xdr_struct
class DELEGPURGE4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_DELEGPURGE
    clientid: Annotated[int, clientid4]


@xdr_struct
class DELEGRETURN4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_DELEGRETURN
    deleg_stateid: stateid4


# -- GETATTR (18.7), GETFH (18.8) ---------------------------------------------------------------------------
@xdr_struct
class GETATTR4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_GETATTR
    attr_request: Annotated[list[int], bitmap4]


@xdr_struct
class GETATTR4resok(XdrStruct):
    obj_attributes: fattr4


@xdr_struct
class GETFH4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_GETFH


@xdr_struct
class GETFH4resok(XdrStruct):
    object: Annotated[bytes, nfs_fh4]


# -- LINK (18.9) --------------------------------------------------------------------------------------------
@xdr_struct
class LINK4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_LINK
    newname: Annotated[str, component4]


@xdr_struct
class LINK4resok(XdrStruct):
    cinfo: change_info4


# -- LOCK (18.10), LOCKT (18.11), LOCKU (18.12) -------------------------------------------------------------
@xdr_struct
class open_to_lock_owner4(XdrStruct):
    open_seqid: Annotated[int, seqid4]
    open_stateid: stateid4
    lock_seqid: Annotated[int, seqid4]
    lock_owner: lock_owner4


@xdr_struct
class exist_lock_owner4(XdrStruct):
    lock_stateid: stateid4
    lock_seqid: Annotated[int, seqid4]


# (True, open_to_lock_owner4) for a new lock owner, (False, exist_lock_owner4) otherwise
locker4 = Union(boolean, {True: open_to_lock_owner4.XDR, False: exist_lock_owner4.XDR})


@xdr_struct
class LOCK4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_LOCK
    locktype: Annotated[int, nfs_lock_type4_t]
    reclaim: Annotated[bool, boolean]
    offset: Annotated[int, offset4]
    length: Annotated[int, length4]
    locker: Annotated[tuple[bool, Any], locker4]


@xdr_struct
class LOCK4denied(XdrStruct):
    offset: Annotated[int, offset4]
    length: Annotated[int, length4]
    locktype: Annotated[int, nfs_lock_type4_t]
    owner: lock_owner4


@xdr_struct
class LOCK4resok(XdrStruct):
    lock_stateid: stateid4


@xdr_struct
class LOCKT4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_LOCKT
    locktype: Annotated[int, nfs_lock_type4_t]
    offset: Annotated[int, offset4]
    length: Annotated[int, length4]
    owner: lock_owner4


@xdr_struct
class LOCKU4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_LOCKU
    locktype: Annotated[int, nfs_lock_type4_t]
    seqid: Annotated[int, seqid4]
    lock_stateid: stateid4
    offset: Annotated[int, offset4]
    length: Annotated[int, length4]


# -- LOOKUP (18.13), LOOKUPP (18.14), NVERIFY (18.15) -------------------------------------------------------
@xdr_struct
class LOOKUP4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_LOOKUP
    objname: Annotated[str, component4]


@xdr_struct
class LOOKUPP4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_LOOKUPP


@xdr_struct
class NVERIFY4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_NVERIFY
    obj_attributes: fattr4


# -- OPEN (18.16) -------------------------------------------------------------------------------------------
@xdr_struct
class creatverfattr(XdrStruct):
    cva_verf: Annotated[bytes, verifier4]
    cva_attrs: fattr4


createhow4 = Union(
    Enum(createmode4),
    {
        UNCHECKED4: fattr4.XDR,  # createattrs
        GUARDED4: fattr4.XDR,
        EXCLUSIVE4: verifier4,  # createverf
        EXCLUSIVE4_1: creatverfattr.XDR,  # ch_createboth
    },
)

# (OPEN4_CREATE, createhow4 value) or (OPEN4_NOCREATE, None)
openflag4 = Union(Enum(opentype4), {OPEN4_CREATE: createhow4}, default=void)


@xdr_struct
class nfs_modified_limit4(XdrStruct):
    num_blocks: Annotated[int, uint32]
    bytes_per_block: Annotated[int, uint32]


nfs_space_limit4 = Union(
    Enum(limit_by4),
    {NFS_LIMIT_SIZE: length4, NFS_LIMIT_BLOCKS: nfs_modified_limit4.XDR},
)


@xdr_struct
class open_claim_delegate_cur4(XdrStruct):
    delegate_stateid: stateid4
    file: Annotated[str, component4]


open_claim4 = Union(
    Enum(open_claim_type4),
    {
        CLAIM_NULL: component4,  # file
        CLAIM_PREVIOUS: open_delegation_type4_t,  # delegate_type
        CLAIM_DELEGATE_CUR: open_claim_delegate_cur4.XDR,  # delegate_cur_info
        CLAIM_DELEGATE_PREV: component4,  # file_delegate_prev
        CLAIM_FH: void,
        CLAIM_DELEG_PREV_FH: void,
        CLAIM_DELEG_CUR_FH: stateid4.XDR,  # oc_delegate_stateid
    },
)


@xdr_struct
class OPEN4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_OPEN
    seqid: Annotated[int, seqid4]
    share_access: Annotated[int, uint32]
    share_deny: Annotated[int, uint32]
    owner: open_owner4
    openhow: Annotated[tuple[int, Any], openflag4]
    claim: Annotated[tuple[int, Any], open_claim4]


@xdr_struct
class open_read_delegation4(XdrStruct):
    stateid: stateid4
    recall: Annotated[bool, boolean]
    permissions: nfsace4


@xdr_struct
class open_write_delegation4(XdrStruct):
    stateid: stateid4
    recall: Annotated[bool, boolean]
    space_limit: Annotated[tuple[int, Any], nfs_space_limit4]
    permissions: nfsace4


open_none_delegation4 = Union(
    Enum(why_no_delegation4),
    {
        WND4_CONTENTION: boolean,  # ond_server_will_push_deleg
        WND4_RESOURCE: boolean,  # ond_server_will_signal_avail
    },
    default=void,
)

open_delegation4 = Union(
    open_delegation_type4_t,
    {
        OPEN_DELEGATE_NONE: void,
        OPEN_DELEGATE_READ: open_read_delegation4.XDR,
        OPEN_DELEGATE_READ_ATTRS_DELEG: open_read_delegation4.XDR,
        OPEN_DELEGATE_WRITE: open_write_delegation4.XDR,
        OPEN_DELEGATE_WRITE_ATTRS_DELEG: open_write_delegation4.XDR,
        OPEN_DELEGATE_NONE_EXT: open_none_delegation4,  # od_whynone
    },
)


@xdr_struct
class OPEN4resok(XdrStruct):
    stateid: stateid4
    cinfo: change_info4
    rflags: Annotated[int, uint32]
    attrset: Annotated[list[int], bitmap4]
    delegation: Annotated[tuple[int, Any], open_delegation4]


# -- OPENATTR (18.17), OPEN_CONFIRM (4.0 only), OPEN_DOWNGRADE (18.18) -------------------------------------
@xdr_struct
class OPENATTR4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_OPENATTR
    createdir: Annotated[bool, boolean]


@xdr_struct
class OPEN_CONFIRM4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_OPEN_CONFIRM
    open_stateid: stateid4
    seqid: Annotated[int, seqid4]


@xdr_struct
class OPEN_CONFIRM4resok(XdrStruct):
    open_stateid: stateid4


@xdr_struct
class OPEN_DOWNGRADE4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_OPEN_DOWNGRADE
    open_stateid: stateid4
    seqid: Annotated[int, seqid4]
    share_access: Annotated[int, uint32]
    share_deny: Annotated[int, uint32]


@xdr_struct
class OPEN_DOWNGRADE4resok(XdrStruct):
    open_stateid: stateid4


# -- PUTFH (18.19), PUTPUBFH (18.20), PUTROOTFH (18.21) -----------------------------------------------------
@xdr_struct
class PUTFH4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_PUTFH
    object: Annotated[bytes, nfs_fh4]


@xdr_struct
class PUTPUBFH4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_PUTPUBFH


@xdr_struct
class PUTROOTFH4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_PUTROOTFH


# -- READ (18.22) -------------------------------------------------------------------------------------------
@xdr_struct
class READ4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_READ
    stateid: stateid4
    offset: Annotated[int, offset4]
    count: Annotated[int, count4]


@xdr_struct
class READ4resok(XdrStruct):
    eof: Annotated[bool, boolean]
    data: Annotated[Any, bulk]  # memoryview when decoded


# -- READDIR (18.23) ----------------------------------------------------------------------------------------
@xdr_struct
class READDIR4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_READDIR
    cookie: Annotated[int, nfs_cookie4]
    cookieverf: Annotated[bytes, verifier4]
    dircount: Annotated[int, count4]
    maxcount: Annotated[int, count4]
    attr_request: Annotated[list[int], bitmap4]


@xdr_struct
class entry4(XdrStruct):
    """A directory entry; the XDR chains entries by ``*nextentry``, dirlist4.entries holds them as a list."""

    cookie: Annotated[int, nfs_cookie4]
    name: Annotated[str, component4]
    attrs: fattr4


@xdr_struct
class dirlist4(XdrStruct):
    # entry4 *entries, *nextentry (a LinkedList); decoded: a DirList (entry4 values made when looked at)
    entries: Annotated[Sequence[entry4], DirEntries(entry4)]
    eof: Annotated[bool, boolean]


@xdr_struct
class READDIR4resok(XdrStruct):
    cookieverf: Annotated[bytes, verifier4]
    reply: dirlist4


# -- READLINK (18.24), REMOVE (18.25), RENAME (18.26) -------------------------------------------------------
@xdr_struct
class READLINK4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_READLINK


@xdr_struct
class READLINK4resok(XdrStruct):
    link: Annotated[Any, linktext4]  # memoryview when decoded


@xdr_struct
class REMOVE4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_REMOVE
    target: Annotated[str, component4]


@xdr_struct
class REMOVE4resok(XdrStruct):
    cinfo: change_info4


@xdr_struct
class RENAME4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_RENAME
    oldname: Annotated[str, component4]
    newname: Annotated[str, component4]


@xdr_struct
class RENAME4resok(XdrStruct):
    source_cinfo: change_info4
    target_cinfo: change_info4


# -- RENEW (4.0 only), RESTOREFH (18.27), SAVEFH (18.28), SECINFO (18.29) ----------------------------------
@xdr_struct
class RENEW4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_RENEW
    clientid: Annotated[int, clientid4]


@xdr_struct
class RESTOREFH4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_RESTOREFH


@xdr_struct
class SAVEFH4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_SAVEFH


@xdr_struct
class SECINFO4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_SECINFO
    name: Annotated[str, component4]


SECINFO4resok = Array(secinfo4)  # list of (flavor, rpcsec_gss_info | None)


# -- SETATTR (18.30) ----------------------------------------------------------------------------------------
@xdr_struct
class SETATTR4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_SETATTR
    stateid: stateid4
    obj_attributes: fattr4


# -- SETCLIENTID, SETCLIENTID_CONFIRM (4.0 only) ------------------------------------------------------------
@xdr_struct
class SETCLIENTID4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_SETCLIENTID
    client: nfs_client_id4
    callback: cb_client4
    callback_ident: Annotated[int, uint32]


@xdr_struct
class SETCLIENTID4resok(XdrStruct):
    clientid: Annotated[int, clientid4]
    setclientid_confirm: Annotated[bytes, verifier4]


@xdr_struct
class SETCLIENTID_CONFIRM4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_SETCLIENTID_CONFIRM
    clientid: Annotated[int, clientid4]
    setclientid_confirm: Annotated[bytes, verifier4]


# -- VERIFY (18.31), WRITE (18.32), RELEASE_LOCKOWNER (4.0 only), ILLEGAL (18.33) ---------------------------
@xdr_struct
class VERIFY4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_VERIFY
    obj_attributes: fattr4


@xdr_struct
class WRITE4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_WRITE
    stateid: stateid4
    offset: Annotated[int, offset4]
    stable: Annotated[int, stable_how4_t]
    data: Annotated[Any, bulk]  # any buffer; sent by reference (scatter/gather, RDMA read chunk)


@xdr_struct
class WRITE4resok(XdrStruct):
    count: Annotated[int, count4]
    committed: Annotated[int, stable_how4_t]
    writeverf: Annotated[bytes, verifier4]


@xdr_struct
class RELEASE_LOCKOWNER4args(XdrStruct):
    OPNUM: ClassVar[int] = nfs_opnum4.OP_RELEASE_LOCKOWNER
    lock_owner: lock_owner4


@xdr_struct
class ILLEGAL4args(XdrStruct):
    """The argument of an operation number the receiver does not know (it has none)."""

    OPNUM: ClassVar[int] = nfs_opnum4.OP_ILLEGAL


__all__ = [
    "ACCESS4args",
    "ACCESS4resok",
    "CLOSE4args",
    "COMMIT4args",
    "COMMIT4resok",
    "CREATE4args",
    "CREATE4resok",
    "DELEGPURGE4args",
    "DELEGRETURN4args",
    "GETATTR4args",
    "GETATTR4resok",
    "GETFH4args",
    "GETFH4resok",
    "ILLEGAL4args",
    "LINK4args",
    "LINK4resok",
    "LOCK4args",
    "LOCK4denied",
    "LOCK4resok",
    "LOCKT4args",
    "LOCKU4args",
    "LOOKUP4args",
    "LOOKUPP4args",
    "NVERIFY4args",
    "OPEN4args",
    "OPEN4resok",
    "OPENATTR4args",
    "OPEN_CONFIRM4args",
    "OPEN_CONFIRM4resok",
    "OPEN_DOWNGRADE4args",
    "OPEN_DOWNGRADE4resok",
    "PUTFH4args",
    "PUTPUBFH4args",
    "PUTROOTFH4args",
    "READ4args",
    "READ4resok",
    "READDIR4args",
    "READDIR4resok",
    "READLINK4args",
    "READLINK4resok",
    "RELEASE_LOCKOWNER4args",
    "REMOVE4args",
    "REMOVE4resok",
    "RENAME4args",
    "RENAME4resok",
    "RENEW4args",
    "RESTOREFH4args",
    "SAVEFH4args",
    "SECINFO4args",
    "SECINFO4resok",
    "SETATTR4args",
    "SETCLIENTID4args",
    "SETCLIENTID4resok",
    "SETCLIENTID_CONFIRM4args",
    "VERIFY4args",
    "WRITE4args",
    "WRITE4resok",
    "createhow4",
    "createtype4",
    "creatverfattr",
    "dirlist4",
    "entry4",
    "exist_lock_owner4",
    "locker4",
    "nfs_lock_type4_t",
    "nfs_modified_limit4",
    "nfs_space_limit4",
    "open_claim4",
    "open_claim_delegate_cur4",
    "open_delegation4",
    "open_delegation_type4_t",
    "open_none_delegation4",
    "open_read_delegation4",
    "open_to_lock_owner4",
    "open_write_delegation4",
    "openflag4",
]
