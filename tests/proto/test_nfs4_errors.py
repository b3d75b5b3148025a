"""errors.py: one errno per NFSv4 status, readable messages, the usual Python exception classes."""

from __future__ import annotations

import errno
import os
import pickle

import pytest

from pynfsrdma._errors import NFS4Error, ProtocolError, errno_for_status, op_name, status_name
from pynfsrdma._proto.nfs4.const import (
    NFS4_OK,
    NFS4ERR_ACCESS,
    NFS4ERR_BAD_STATEID,
    NFS4ERR_BADHANDLE,
    NFS4ERR_DELAY,
    NFS4ERR_DENIED,
    NFS4ERR_DQUOT,
    NFS4ERR_EXIST,
    NFS4ERR_FHEXPIRED,
    NFS4ERR_ISDIR,
    NFS4ERR_NAMETOOLONG,
    NFS4ERR_NOENT,
    NFS4ERR_NOSPC,
    NFS4ERR_NOTDIR,
    NFS4ERR_NOTEMPTY,
    NFS4ERR_NOTSUPP,
    NFS4ERR_PERM,
    NFS4ERR_ROFS,
    NFS4ERR_SERVERFAULT,
    NFS4ERR_STALE,
    NFS4ERR_SYMLINK,
    NFS4ERR_XDEV,
    OP_LOOKUP,
    OP_READ,
    OP_REMOVE,
    nfsstat4,
)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (NFS4ERR_PERM, errno.EPERM),
        (NFS4ERR_NOENT, errno.ENOENT),
        (NFS4ERR_ACCESS, errno.EACCES),
        (NFS4ERR_EXIST, errno.EEXIST),
        (NFS4ERR_XDEV, errno.EXDEV),
        (NFS4ERR_NOTDIR, errno.ENOTDIR),
        (NFS4ERR_ISDIR, errno.EISDIR),
        (NFS4ERR_NOSPC, errno.ENOSPC),
        (NFS4ERR_ROFS, errno.EROFS),
        (NFS4ERR_NAMETOOLONG, errno.ENAMETOOLONG),
        (NFS4ERR_NOTEMPTY, errno.ENOTEMPTY),
        (NFS4ERR_DQUOT, errno.EDQUOT),
        (NFS4ERR_STALE, errno.ESTALE),
        (NFS4ERR_FHEXPIRED, errno.ESTALE),
        (NFS4ERR_BADHANDLE, errno.ESTALE),
        (NFS4ERR_NOTSUPP, errno.ENOTSUP),
        (NFS4ERR_DELAY, errno.EAGAIN),
        (NFS4ERR_DENIED, errno.EAGAIN),
        (NFS4ERR_SYMLINK, errno.ELOOP),
        (NFS4ERR_BAD_STATEID, errno.EBADF),
        (NFS4ERR_SERVERFAULT, errno.EREMOTEIO),
        (NFS4_OK, 0),
        (99999, errno.EIO),
    ],
)
def test_errno_for_status(status: int, code: int) -> None:
    assert errno_for_status(status) == code


def test_every_error_status_maps_to_a_real_errno() -> None:
    for s in nfsstat4:
        code = errno_for_status(s)
        assert (code == 0) == (s == NFS4_OK)
        assert code == 0 or os.strerror(code)


def test_message_and_attributes() -> None:
    e = NFS4Error(NFS4ERR_NOENT, OP_LOOKUP, "/data/x")
    assert str(e) == "/data/x: No such file or directory (NFS4ERR_NOENT)"
    assert (e.status, e.op, e.path, e.name) == (NFS4ERR_NOENT, OP_LOOKUP, "/data/x", "NFS4ERR_NOENT")
    assert (e.errno, e.filename) == (errno.ENOENT, "/data/x")
    assert str(NFS4Error(NFS4ERR_NOTEMPTY)) == "Directory not empty (NFS4ERR_NOTEMPTY)"
    assert "OP_LOOKUP" in repr(e)


def test_is_the_usual_python_exception() -> None:
    assert isinstance(NFS4Error(NFS4ERR_NOENT), FileNotFoundError)
    assert isinstance(NFS4Error(NFS4ERR_EXIST), FileExistsError)
    assert isinstance(NFS4Error(NFS4ERR_ACCESS), PermissionError)
    assert isinstance(NFS4Error(NFS4ERR_ISDIR), IsADirectoryError)
    assert isinstance(NFS4Error(NFS4ERR_NOTDIR), NotADirectoryError)
    e = NFS4Error(NFS4ERR_ROFS, OP_REMOVE)
    assert isinstance(e, NFS4Error) and isinstance(e, OSError) and not isinstance(e, FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        raise NFS4Error(NFS4ERR_NOENT, path="/x")


def test_pickles_to_an_equal_error() -> None:
    e = pickle.loads(pickle.dumps(NFS4Error(NFS4ERR_NOENT, OP_LOOKUP, "/p")))
    assert isinstance(e, FileNotFoundError)
    assert (e.status, e.op, e.path, str(e)) == (
        NFS4ERR_NOENT,
        OP_LOOKUP,
        "/p",
        "/p: No such file or directory (NFS4ERR_NOENT)",
    )


def test_names() -> None:
    assert status_name(NFS4ERR_NOENT) == "NFS4ERR_NOENT"
    assert status_name(12345) == "nfsstat4(12345)"
    assert op_name(OP_LOOKUP) == "OP_LOOKUP" and op_name(1) == "nfs_opnum4(1)"
    assert str(NFS4Error(12345)) == "Input/output error (nfsstat4(12345))"


def test_protocol_error_carries_its_message() -> None:
    e = ProtocolError("reply for XID 7 has 3 results for 2 operations")
    assert e.message == str(e) == "reply for XID 7 has 3 results for 2 operations"


def test_protocol_error_is_an_oserror_naming_server_operation_and_path() -> None:
    """What a script's ``except OSError`` catches, and what the command line prints."""
    e = ProtocolError("4097 bytes of data for 4096 asked", "127.0.0.1:2049", OP_READ)
    assert isinstance(e, OSError) and e.errno == errno.EIO
    e.located(OP_LOOKUP, "/data/x")  # (what is known already stays)
    assert str(e) == "127.0.0.1:2049: /data/x: READ: 4097 bytes of data for 4096 asked"
    assert e.filename == "/data/x" and e.op == OP_READ
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is ProtocolError and str(again) == str(e) and again.errno == errno.EIO
