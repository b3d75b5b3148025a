"""pNFS on the metadata server, one COMPOUND each (RFC 8881 18.40-18.44): LAYOUTGET (with the file's
size), GETDEVICEINFO, LAYOUTCOMMIT, LAYOUTRETURN; and LAYOUTERROR (RFC 7862 15.6) on an NFSv4.2
session, until the server says it does not support it (Linux nfsd: NFS4ERR_NOTSUPP)."""

from __future__ import annotations

from typing import Any

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import bitmap4_from, decode_fattr4
from .._proto.nfs4.compound import ResOp, result_of
from .._proto.nfs4.types import (
    GETATTR4args,
    GETDEVICEINFO4args,
    LAYOUTCOMMIT4args,
    LAYOUTERROR4args,
    LAYOUTGET4args,
    LAYOUTGET4resok,
    LAYOUTRETURN4args,
    PUTFH4args,
    device_addr4,
    device_error4,
    layoutreturn_file4,
    layoutupdate4,
    nfstime4,
    stateid4,
)
from .._rpc.auth import Credential
from .compounds import Compounds

SIZE_BITMAP = bitmap4_from([c.FATTR4_SIZE])
_NOT_SUPPORTED = frozenset({c.NFS4ERR_NOTSUPP, c.NFS4ERR_OP_ILLEGAL})


class LayoutOps(Compounds):
    """LAYOUTGET, GETDEVICEINFO, LAYOUTCOMMIT, LAYOUTRETURN, LAYOUTERROR."""

    async def layoutget(self, fh: bytes, stateid: stateid4, layout_type: int, iomode: int, offset: int,
                        length: int, minlength: int, cred: Credential, maxcount: int = 4096,
                        path: str | None = None) -> tuple[LAYOUTGET4resok, int]:
        """LAYOUTGET and the file's size after it, in one COMPOUND."""
        def parse(res: list[ResOp]) -> tuple[LAYOUTGET4resok, int]:
            attrs = decode_fattr4(result_of(res, c.OP_GETATTR).obj_attributes)
            return result_of(res, c.OP_LAYOUTGET), int(attrs.get(c.FATTR4_SIZE, 0))

        ops: list[Any] = [PUTFH4args(fh),
                          LAYOUTGET4args(False, layout_type, iomode, offset, length, minlength, stateid, maxcount),
                          GETATTR4args(SIZE_BITMAP)]
        return await self.query(ops, cred, parse, path=path)

    async def getdeviceinfo(self, deviceid: bytes, layout_type: int, cred: Credential,
                            maxcount: int = 65536) -> device_addr4:
        res = await self.run([GETDEVICEINFO4args(deviceid, layout_type, maxcount, [])], cred)
        return result_of(res, c.OP_GETDEVICEINFO).gdir_device_addr

    async def layoutcommit(self, fh: bytes, stateid: stateid4, offset: int, length: int, last_write: int,
                           layout_type: int, body: bytes, cred: Credential, mtime_ns: int | None = None,
                           path: str | None = None) -> int | None:
        """LAYOUTCOMMIT of what was written; the file's new size if the server says it changed."""
        when = (True, nfstime4(mtime_ns // 10**9, mtime_ns % 10**9)) if mtime_ns is not None else (False, None)
        args = LAYOUTCOMMIT4args(offset, length, False, stateid, (True, last_write) if last_write >= 0 else (False, None),
                                 when, layoutupdate4(layout_type, body))
        res = await self.run([PUTFH4args(fh), args], cred, path=path)
        has, size = result_of(res, c.OP_LAYOUTCOMMIT).locr_newsize
        return int(size) if has else None

    async def layoutreturn(self, fh: bytes, stateid: stateid4, layout_type: int, iomode: int, offset: int,
                           length: int, cred: Credential, path: str | None = None) -> stateid4 | None:
        """LAYOUTRETURN of a file's range; the layout stateid after it (None: the server holds no more)."""
        args = LAYOUTRETURN4args(False, layout_type, iomode,
                                 (c.LAYOUTRETURN4_FILE, layoutreturn_file4(offset, length, stateid, b"")))
        res = await self.run([PUTFH4args(fh), args], cred, path=path)
        present, sid = result_of(res, c.OP_LAYOUTRETURN)
        return sid if present else None

    async def layouterror(self, fh: bytes, stateid: stateid4, offset: int, length: int,
                          errors: list[device_error4], cred: Credential, path: str | None = None) -> bool:
        """LAYOUTERROR: the I/O to the devices of ``errors`` failed for ``offset``..+``length``. False
        when it was not sent: an NFSv4.1 session (it is an NFSv4.2 operation), or a server that
        answered it NFS4ERR_NOTSUPP before (remembered)."""
        if self.client.options.minorversion < c.NFS4_MINOR_VERSION_2 or c.OP_LAYOUTERROR in self.unsupported:
            return False
        try:
            await self.run([PUTFH4args(fh), LAYOUTERROR4args(offset, length, stateid, errors)], cred, path=path)
        except NFS4Error as e:
            if e.status in _NOT_SUPPORTED and e.op in (c.OP_LAYOUTERROR, c.OP_ILLEGAL):
                self.unsupported.add(c.OP_LAYOUTERROR)
                return False
            raise
        return True
