"""Extended attributes (NFSv4.2, RFC 8276): GETXATTR, SETXATTR, LISTXATTRS, REMOVEXATTR."""

from __future__ import annotations

import errno

from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import result_of
from .._proto.nfs4.types import GETXATTR4args, LISTXATTRS4args, PUTFH4args, REMOVEXATTR4args, SETXATTR4args
from .._rpc.auth import Credential
from .._transport.base import ReplyHints
from .compounds import Compounds, Cookies

XATTR_SIZE_MAX = 64 * 1024  # the largest extended attribute value (Linux's limit, as its client's)
XATTR_LIST_MAX = 64 * 1024  # the largest list of names asked for in one LISTXATTRS


class ExtendedAttributes:
    """GETXATTR, SETXATTR, LISTXATTRS, REMOVEXATTR, each a COMPOUND run by ``compounds``."""

    def __init__(self, compounds: Compounds) -> None:
        self.compounds = compounds

    async def getxattr(self, fh: bytes, name: str, cred: Credential, path: str | None = None) -> bytes:
        """The value of extended attribute ``name`` (NFS4Error NFS4ERR_NOXATTR: ENODATA when absent)."""
        hints = ReplyHints(max_reply=XATTR_SIZE_MAX + 512)
        res = await self.compounds.run([PUTFH4args(fh), GETXATTR4args(name)], cred, hints, path=path)
        return bytes(result_of(res, c.OP_GETXATTR))

    async def setxattr(
        self,
        fh: bytes,
        name: str,
        value: bytes,
        cred: Credential,
        option: int = c.SETXATTR4_EITHER,
        path: str | None = None,
    ) -> None:
        """Set extended attribute ``name``; ``option`` SETXATTR4_CREATE fails if it exists
        (EEXIST), SETXATTR4_REPLACE if it does not (ENODATA)."""
        await self.compounds.run([PUTFH4args(fh), SETXATTR4args(option, name, value)], cred, path=path)

    async def listxattrs(self, fh: bytes, cred: Credential, path: str | None = None) -> list[str]:
        """The names of every extended attribute of the file (LISTXATTRS, paged by cookie)."""
        names: list[str] = []
        size = 0  # of the list as listxattr(2) gives it: each name and its NUL
        cookie = 0
        cookies = Cookies(self.compounds.client.server, path, c.OP_LISTXATTRS)
        while True:
            res = await self.compounds.run(
                [PUTFH4args(fh), LISTXATTRS4args(cookie, XATTR_LIST_MAX)],
                cred,
                ReplyHints(max_reply=XATTR_LIST_MAX + 512),
                path=path,
            )
            ok = result_of(res, c.OP_LISTXATTRS)
            names.extend(ok.lxr_names)
            size += sum(len(name.encode()) + 1 for name in ok.lxr_names)
            if size > XATTR_LIST_MAX:
                # (Linux's limit for one file's list: its listxattr(2) says E2BIG past it)
                raise OSError(errno.E2BIG, f"{path or 'file'}: list of extended attributes longer than "
                              f"{XATTR_LIST_MAX} bytes")
            if ok.lxr_eof or not ok.lxr_names:
                return names
            cookies.check((ok.lxr_cookie,))
            cookie = ok.lxr_cookie

    async def removexattr(self, fh: bytes, name: str, cred: Credential, path: str | None = None) -> None:
        await self.compounds.run([PUTFH4args(fh), REMOVEXATTR4args(name)], cred, path=path)
