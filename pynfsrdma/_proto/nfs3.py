"""NFS version 3 (RFC 1813), the part a flexfiles data server is reached with (RFC 8435 section 3):
READ, WRITE and COMMIT, their arguments and results, and the attributes in the results (decoded
and kept: a data server's attributes are not the file's, the metadata server's are).

Same conventions as the NFSv4 types: structs are ``@xdr_struct`` classes with the RFC's field names,
a union's value is ``(discriminant, arm value)``; WRITE's data is sent by reference and READ's data
decodes as a view of the reply (``bulk``).
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Final

from .._xdr import (
    Opaque,
    Optional,
    Union,
    VarOpaque,
    XdrStruct,
    boolean,
    bulk,
    uint32,
    uint64,
    xdr_struct,
)

NFS_PROGRAM: Final = 100003
NFS_V3: Final = 3
NFS3_FHSIZE: Final = 64
NFS3_WRITEVERFSIZE: Final = 8


class nfsproc3(enum.IntEnum):
    NFSPROC3_NULL = 0
    NFSPROC3_READ = 6
    NFSPROC3_WRITE = 7
    NFSPROC3_COMMIT = 21


class nfsstat3(enum.IntEnum):
    NFS3_OK = 0
    NFS3ERR_PERM = 1
    NFS3ERR_NOENT = 2
    NFS3ERR_IO = 5
    NFS3ERR_NXIO = 6
    NFS3ERR_ACCES = 13
    NFS3ERR_EXIST = 17
    NFS3ERR_XDEV = 18
    NFS3ERR_NODEV = 19
    NFS3ERR_NOTDIR = 20
    NFS3ERR_ISDIR = 21
    NFS3ERR_INVAL = 22
    NFS3ERR_FBIG = 27
    NFS3ERR_NOSPC = 28
    NFS3ERR_ROFS = 30
    NFS3ERR_MLINK = 31
    NFS3ERR_NAMETOOLONG = 63
    NFS3ERR_NOTEMPTY = 66
    NFS3ERR_DQUOT = 69
    NFS3ERR_STALE = 70
    NFS3ERR_REMOTE = 71
    NFS3ERR_BADHANDLE = 10001
    NFS3ERR_NOT_SYNC = 10002
    NFS3ERR_BAD_COOKIE = 10003
    NFS3ERR_NOTSUPP = 10004
    NFS3ERR_TOOSMALL = 10005
    NFS3ERR_SERVERFAULT = 10006
    NFS3ERR_BADTYPE = 10007
    NFS3ERR_JUKEBOX = 10008


class stable_how(enum.IntEnum):
    UNSTABLE = 0
    DATA_SYNC = 1
    FILE_SYNC = 2


def status_name(status: int) -> str:
    try:
        return nfsstat3(status).name
    except ValueError:
        return f"NFSv3 status {status}"


nfs_fh3 = VarOpaque(NFS3_FHSIZE)
writeverf3 = Opaque(NFS3_WRITEVERFSIZE)


@xdr_struct
class specdata3(XdrStruct):
    specdata1: Annotated[int, uint32]
    specdata2: Annotated[int, uint32]


@xdr_struct
class nfstime3(XdrStruct):
    seconds: Annotated[int, uint32]
    nseconds: Annotated[int, uint32]


@xdr_struct
class fattr3(XdrStruct):
    type: Annotated[int, uint32]
    mode: Annotated[int, uint32]
    nlink: Annotated[int, uint32]
    uid: Annotated[int, uint32]
    gid: Annotated[int, uint32]
    size: Annotated[int, uint64]
    used: Annotated[int, uint64]
    rdev: specdata3
    fsid: Annotated[int, uint64]
    fileid: Annotated[int, uint64]
    atime: nfstime3
    mtime: nfstime3
    ctime: nfstime3


@xdr_struct
class wcc_attr(XdrStruct):
    size: Annotated[int, uint64]
    mtime: nfstime3
    ctime: nfstime3


post_op_attr = Optional(fattr3.XDR)
pre_op_attr = Optional(wcc_attr.XDR)


@xdr_struct
class wcc_data(XdrStruct):
    before: Annotated[Any, pre_op_attr]
    after: Annotated[Any, post_op_attr]


# -- READ (RFC 1813 3.3.6) ----------------------------------------------------------------------------------
@xdr_struct
class READ3args(XdrStruct):
    file: Annotated[bytes, nfs_fh3]
    offset: Annotated[int, uint64]
    count: Annotated[int, uint32]


@xdr_struct
class READ3resok(XdrStruct):
    file_attributes: Annotated[Any, post_op_attr]
    count: Annotated[int, uint32]
    eof: Annotated[bool, boolean]
    data: Annotated[Any, bulk]  # memoryview of the reply when decoded


@xdr_struct
class READ3resfail(XdrStruct):
    file_attributes: Annotated[Any, post_op_attr]


READ3res = Union(uint32, {nfsstat3.NFS3_OK: READ3resok.XDR}, default=READ3resfail.XDR)


# -- WRITE (3.3.7) ------------------------------------------------------------------------------------------
@xdr_struct
class WRITE3args(XdrStruct):
    file: Annotated[bytes, nfs_fh3]
    offset: Annotated[int, uint64]
    count: Annotated[int, uint32]
    stable: Annotated[int, uint32]  # stable_how
    data: Annotated[Any, bulk]  # any buffer; sent by reference


@xdr_struct
class WRITE3resok(XdrStruct):
    file_wcc: wcc_data
    count: Annotated[int, uint32]
    committed: Annotated[int, uint32]  # stable_how
    verf: Annotated[bytes, writeverf3]


WRITE3res = Union(uint32, {nfsstat3.NFS3_OK: WRITE3resok.XDR}, default=wcc_data.XDR)


# -- COMMIT (3.3.21) ----------------------------------------------------------------------------------------
@xdr_struct
class COMMIT3args(XdrStruct):
    file: Annotated[bytes, nfs_fh3]
    offset: Annotated[int, uint64]
    count: Annotated[int, uint32]


@xdr_struct
class COMMIT3resok(XdrStruct):
    file_wcc: wcc_data
    verf: Annotated[bytes, writeverf3]


COMMIT3res = Union(uint32, {nfsstat3.NFS3_OK: COMMIT3resok.XDR}, default=wcc_data.XDR)

__all__ = [
    "NFS3_FHSIZE",
    "NFS_PROGRAM",
    "NFS_V3",
    "COMMIT3args",
    "COMMIT3res",
    "COMMIT3resok",
    "READ3args",
    "READ3res",
    "READ3resfail",
    "READ3resok",
    "WRITE3args",
    "WRITE3res",
    "WRITE3resok",
    "fattr3",
    "nfs_fh3",
    "nfsproc3",
    "nfsstat3",
    "nfstime3",
    "post_op_attr",
    "pre_op_attr",
    "specdata3",
    "stable_how",
    "status_name",
    "wcc_attr",
    "wcc_data",
    "writeverf3",
]
