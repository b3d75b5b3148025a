"""Extended attributes on the mount (``vers=4.2`` and a server that reports ``xattr_support``): the
"user." namespace through RFC 8276's GETXATTR, SETXATTR, LISTXATTRS and REMOVEXATTR. Other
namespaces give ENOTSUP, as on the Linux client; without the server's support ENOSYS, on which the
kernel answers ENOTSUP itself and stops asking."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from .._client.nfs4 import NFSv4
from .._rpc.auth import Credential
from .inodes import Inode
from .lowlevel import FUSEError, RequestContext

XATTR_USER_PREFIX = b"user."  # the namespace RFC 8276 carries (its names go without the prefix)


class Xattrs:
    """The extended attributes of a mount's nodes; ``node``: the node of an inode number (ESTALE
    when unknown), ``cred``: a caller's credential, ``check_rw``: EROFS on a read-only mount."""

    def __init__(
        self, nfs: NFSv4, node: Callable[[int], Inode], cred: Callable[[RequestContext], Credential],
        check_rw: Callable[[], None],
    ) -> None:
        self.nfs = nfs
        self._inode = node
        self.cred = cred
        self._check_rw = check_rw

    def _xattr_name(self, name: bytes) -> str:
        """The RFC 8276 name of a "user." extended attribute (ENOSYS: the kernel stops asking when the
        server has none; ENOTSUP for the other namespaces, which NFS does not carry)."""
        if not self.nfs.xattr_support:
            raise FUSEError(errno.ENOSYS)
        if not name.startswith(XATTR_USER_PREFIX) or len(name) == len(XATTR_USER_PREFIX):
            raise FUSEError(errno.ENOTSUP)
        return os.fsdecode(name[len(XATTR_USER_PREFIX) :])

    async def getxattr(self, inode: int, name: bytes, ctx: RequestContext) -> bytes:
        key = self._xattr_name(name)
        return await self.nfs.xattrs.getxattr(self._inode(inode).fh, key, self.cred(ctx))

    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: RequestContext) -> None:
        key = self._xattr_name(name)
        self._check_rw()
        node = self._inode(inode)
        await self.nfs.xattrs.setxattr(node.fh, key, value, self.cred(ctx))
        node.stale()  # (its ctime and change attribute moved)

    async def listxattr(self, inode: int, ctx: RequestContext) -> list[bytes]:
        if not self.nfs.xattr_support:
            raise FUSEError(errno.ENOSYS)
        names = await self.nfs.xattrs.listxattrs(self._inode(inode).fh, self.cred(ctx))
        return [XATTR_USER_PREFIX + os.fsencode(n) for n in names]

    async def removexattr(self, inode: int, name: bytes, ctx: RequestContext) -> None:
        key = self._xattr_name(name)
        self._check_rw()
        node = self._inode(inode)
        await self.nfs.xattrs.removexattr(node.fh, key, self.cred(ctx))
        node.stale()
