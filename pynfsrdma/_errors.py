"""Errors as values with names: the one place an NFSv4 status becomes an errno.

``NFS4Error(status, op=None, path=None)`` is an OSError whose ``errno`` is chosen by
:func:`errno_for_status`; it is also an instance of the matching built-in OSError subclass
(``FileNotFoundError`` for NFS4ERR_NOENT, ``PermissionError`` for NFS4ERR_ACCESS, ...) so that
scripts can catch the usual Python exceptions. ``str()`` reads
``"/data/x: No such file or directory (NFS4ERR_NOENT)"``.

:class:`ReplyError` is a reply that is not a result: an RPC-level refusal (``RpcReplyError`` of the RPC
layer) or, as :class:`ProtocolError`, a reply that breaks the protocol (malformed, hostile, or not an
answer to what was asked). Both are OSErrors that name the server, the operation and the path:
``"127.0.0.1:2049: /data/x: READ: 4097 bytes of data for 4096 asked"``.
"""

from __future__ import annotations

import errno as E
import os
from typing import Any

from ._proto.nfs4.const import nfs_cb_opnum4, nfs_opnum4, nfsstat4

S = nfsstat4

# Choices that need a word of explanation:
# - STALE, FHEXPIRED, BADHANDLE -> ESTALE: the handle cannot be used any more; the remedy (look the
#   path up again) is the same, and Linux's EBADHANDLE (521) is a kernel-internal value.
# - SYMLINK -> ELOOP: NFS4ERR_SYMLINK means a symbolic link was found where the operation wants a
#   directory or a file (LOOKUP through it, OPEN of it); Linux reports ELOOP for this, as open(2) with
#   O_NOFOLLOW and path walks that may not follow links do.
# - DELAY, GRACE, DENIED, LOCKED -> EAGAIN: try again later (DENIED is a lock conflict: fcntl's EAGAIN).
# - BAD_STATEID, OLD_STATEID, STALE_STATEID, OPENMODE -> EBADF: the open or lock state behind the file
#   descriptor is not valid for this I/O; EXPIRED and *_REVOKED -> EIO: state was lost.
# - Anything not listed (protocol mistakes, session errors that escaped recovery) -> EIO.
_ERRNO: dict[int, int] = {
    S.NFS4_OK: 0,
    S.NFS4ERR_PERM: E.EPERM,
    S.NFS4ERR_NOENT: E.ENOENT,
    S.NFS4ERR_IO: E.EIO,
    S.NFS4ERR_NXIO: E.ENXIO,
    S.NFS4ERR_ACCESS: E.EACCES,
    S.NFS4ERR_EXIST: E.EEXIST,
    S.NFS4ERR_XDEV: E.EXDEV,
    S.NFS4ERR_NOTDIR: E.ENOTDIR,
    S.NFS4ERR_ISDIR: E.EISDIR,
    S.NFS4ERR_INVAL: E.EINVAL,
    S.NFS4ERR_FBIG: E.EFBIG,
    S.NFS4ERR_NOSPC: E.ENOSPC,
    S.NFS4ERR_ROFS: E.EROFS,
    S.NFS4ERR_MLINK: E.EMLINK,
    S.NFS4ERR_NAMETOOLONG: E.ENAMETOOLONG,
    S.NFS4ERR_NOTEMPTY: E.ENOTEMPTY,
    S.NFS4ERR_DQUOT: E.EDQUOT,
    S.NFS4ERR_STALE: E.ESTALE,
    S.NFS4ERR_BADHANDLE: E.ESTALE,
    S.NFS4ERR_FHEXPIRED: E.ESTALE,
    S.NFS4ERR_BAD_COOKIE: E.EINVAL,
    S.NFS4ERR_NOTSUPP: E.ENOTSUP,
    S.NFS4ERR_ATTRNOTSUPP: E.ENOTSUP,
    S.NFS4ERR_UNION_NOTSUPP: E.ENOTSUP,
    S.NFS4ERR_TOOSMALL: E.EINVAL,
    S.NFS4ERR_SERVERFAULT: E.EREMOTEIO,
    S.NFS4ERR_BADTYPE: E.EINVAL,
    S.NFS4ERR_WRONG_TYPE: E.EINVAL,
    S.NFS4ERR_DELAY: E.EAGAIN,
    S.NFS4ERR_GRACE: E.EAGAIN,
    S.NFS4ERR_DENIED: E.EAGAIN,
    S.NFS4ERR_LOCKED: E.EAGAIN,
    S.NFS4ERR_DEADLOCK: E.EDEADLK,
    S.NFS4ERR_LOCK_RANGE: E.EINVAL,
    S.NFS4ERR_BAD_RANGE: E.EINVAL,
    S.NFS4ERR_LOCK_NOTSUPP: E.ENOLCK,
    S.NFS4ERR_SHARE_DENIED: E.EACCES,
    S.NFS4ERR_WRONGSEC: E.EPERM,
    S.NFS4ERR_WRONG_CRED: E.EPERM,
    S.NFS4ERR_SYMLINK: E.ELOOP,
    S.NFS4ERR_BAD_STATEID: E.EBADF,
    S.NFS4ERR_OLD_STATEID: E.EBADF,
    S.NFS4ERR_STALE_STATEID: E.EBADF,
    S.NFS4ERR_OPENMODE: E.EBADF,
    S.NFS4ERR_EXPIRED: E.EIO,
    S.NFS4ERR_ADMIN_REVOKED: E.EIO,
    S.NFS4ERR_DELEG_REVOKED: E.EIO,
    S.NFS4ERR_BADOWNER: E.EINVAL,
    S.NFS4ERR_BADCHAR: E.EINVAL,
    S.NFS4ERR_BADNAME: E.EINVAL,
    S.NFS4ERR_FILE_OPEN: E.EBUSY,
    S.NFS4ERR_LOCKS_HELD: E.EBUSY,
    S.NFS4ERR_CLIENTID_BUSY: E.EBUSY,
    S.NFS4ERR_COMPLETE_ALREADY: E.EALREADY,
    S.NFS4ERR_MINOR_VERS_MISMATCH: E.EPROTONOSUPPORT,
    S.NFS4ERR_NOXATTR: E.ENODATA,
    S.NFS4ERR_XATTR2BIG: E.E2BIG,
    S.NFS4ERR_RESOURCE: E.EREMOTEIO,
    S.NFS4ERR_REQ_TOO_BIG: E.EMSGSIZE,
    S.NFS4ERR_REP_TOO_BIG: E.EMSGSIZE,
}


def errno_for_status(status: int) -> int:
    """The errno a caller sees for an NFSv4 status (EIO for statuses without a closer match)."""
    return _ERRNO.get(status, E.EIO)


def status_name(status: int) -> str:
    """``"NFS4ERR_NOENT"`` for 2; ``"nfsstat4(12345)"`` for a number the RFCs do not name."""
    try:
        return nfsstat4(status).name
    except ValueError:
        return f"nfsstat4({status})"


def op_name(op: int) -> str:
    """``"OP_LOOKUP"`` for 15; ``"nfs_opnum4(N)"`` for an unknown operation number."""
    try:
        return nfs_opnum4(op).name
    except ValueError:
        return f"nfs_opnum4({op})"


def cb_op_name(op: int) -> str:
    """``"OP_CB_RECALL"`` for 4; ``"nfs_cb_opnum4(N)"`` for an unknown callback operation number."""
    try:
        return nfs_cb_opnum4(op).name
    except ValueError:
        return f"nfs_cb_opnum4({op})"


# The built-in OSError subclass Python itself would raise for an errno.
_BUILTIN_FOR_ERRNO: dict[int, type[OSError]] = {
    E.ENOENT: FileNotFoundError,
    E.EEXIST: FileExistsError,
    E.EACCES: PermissionError,
    E.EPERM: PermissionError,
    E.EISDIR: IsADirectoryError,
    E.ENOTDIR: NotADirectoryError,
    E.EAGAIN: BlockingIOError,
    E.ETIMEDOUT: TimeoutError,
}
_SUBCLASSES: dict[type[OSError], type[NFS4Error]] = {}


class NFS4Error(OSError):
    """An NFSv4 operation failed with ``status``; an OSError with the matching errno.

    Attributes: ``status`` (nfsstat4 number), ``name`` ("NFS4ERR_NOENT"), ``op`` (the nfs_opnum4 that
    failed, or None), ``path`` (what the caller was working on, or None), plus OSError's ``errno``,
    ``strerror`` and ``filename`` (= path).
    """

    status: int
    op: int | None
    path: str | None
    name: str

    def __new__(cls, status: int, op: int | None = None, path: str | None = None) -> NFS4Error:
        if cls is NFS4Error:
            builtin = _BUILTIN_FOR_ERRNO.get(errno_for_status(status))
            if builtin is not None:
                sub = _SUBCLASSES.get(builtin)
                if sub is None:
                    sub = type(
                        f"NFS4Error_{builtin.__name__}", (NFS4Error, builtin), {"__module__": __name__}
                    )
                    _SUBCLASSES[builtin] = sub
                cls = sub
        # OSError parses (errno, strerror, filename) in __new__ when a subclass overrides __new__
        code = errno_for_status(status)
        self: NFS4Error = OSError.__new__(cls, code, os.strerror(code) if code else "OK", path)
        return self

    def __init__(self, status: int, op: int | None = None, path: str | None = None) -> None:
        super().__init__()
        self.status = status
        self.op = op
        self.path = path
        self.name = status_name(status)

    def __str__(self) -> str:
        msg = f"{self.strerror} ({self.name})"
        return f"{self.path}: {msg}" if self.path else msg

    def __repr__(self) -> str:
        op = f", op={op_name(self.op)}" if self.op is not None else ""
        path = f", path={self.path!r}" if self.path is not None else ""
        return f"NFS4Error({self.name}{op}{path})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (NFS4Error, (self.status, self.op, self.path))


class ReplyError(OSError):
    """The server's reply to an operation is not its result. ``reason`` says why; ``server``
    ("host:port"), ``op`` (nfs_opnum4) and ``path`` say where, each None when not known (yet: a
    layer above fills in what it knows with :meth:`located`)."""

    def __init__(
        self,
        reason: str,
        server: str | None = None,
        op: int | None = None,
        path: str | None = None,
        err: int = E.EIO,
    ) -> None:
        super().__init__(err, reason, path)
        self.reason = reason
        self.server = server
        self.op = op
        self.path = path

    def located(self, op: int | None = None, path: str | None = None) -> ReplyError:
        """Fill in the operation and the path where they are not known; returns self."""
        if self.op is None:
            self.op = op
        if self.path is None and path is not None:
            self.path = self.filename = path
        return self

    def __str__(self) -> str:
        where = [w for w in (self.server, self.path) if w]
        if self.op is not None:
            where.append(op_name(self.op).removeprefix("OP_"))
        return ": ".join([*where, self.reason])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.reason, self.server, self.op, self.path, self.errno))


def _rebuild(cls: type[ReplyError], reason: str, server: str | None, op: int | None, path: str | None,
             err: int) -> ReplyError:
    e = ReplyError.__new__(cls)
    ReplyError.__init__(e, reason, server, op, path, err)
    return e


class ProtocolError(ReplyError):
    """A reply that breaks the protocol: malformed, hostile, or not an answer to what was asked (EIO).
    The connection it came on is closed (its framing can no longer be trusted)."""

    @property
    def message(self) -> str:
        return str(self)


__all__ = [
    "NFS4Error", "ProtocolError", "ReplyError", "cb_op_name", "errno_for_status", "op_name", "status_name",
]
