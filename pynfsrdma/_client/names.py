"""The export, names and attributes on file handles, one COMPOUND each: PUTROOTFH and the
export's root (learning maxread, maxwrite and the lease), SECINFO, LOOKUP, LOOKUPP, GETATTR, SETATTR,
ACCESS."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

from .._errors import NFS4Error, ReplyError
from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import attrs_in
from .._proto.nfs4.compound import ResOp, result_of, results_of
from .._proto.nfs4.compound_shapes import CompoundShape
from .._proto.nfs4.types import (
    ACCESS4args,
    GETATTR4args,
    GETFH4args,
    LOOKUP4args,
    LOOKUPP4args,
    PUTFH4args,
    PUTROOTFH4args,
    SECINFO4args,
    SECINFO_NO_NAME4args,
    SETATTR4args,
    stateid4,
)
from .._proto.rpcsec_gss import Flavor, flavor_of_secinfo
from .._rpc.auth import Credential
from .._session.session import COMPOUND_ROOM
from .attributes import (
    FS_INFO_BITMAP,
    STAT_BITMAP,
    STATFS_BITMAP,
    TIME_CREATE_BITMAP,
    XATTR_SUPPORT_BITMAP,
    FileAttrs,
    FsStat,
    entry_attrs_decoder_at,
    setattr_fattr4,
)
from .compounds import NO_HINTS, Compounds, created_ns, fh_attrs, last_attrs
from .open_state import ANONYMOUS_STATEID

# the COMPOUNDs the mount's LOOKUP and GETATTR and the path API's stat send over and over, prepared
# once (their GETATTR's attributes decoded straight into FileAttrs)
LOOKUP_SHAPE = CompoundShape([PUTFH4args, LOOKUP4args, GETFH4args(), GETATTR4args(STAT_BITMAP)],
                             entry_attrs_decoder_at)
GETATTR_SHAPE = CompoundShape([PUTFH4args, GETATTR4args(STAT_BITMAP)], entry_attrs_decoder_at)
# (the mount's permission checks)
ACCESS_SHAPE = CompoundShape([PUTFH4args, ACCESS4args])
ACCESS_ATTRS_SHAPE = CompoundShape([PUTFH4args, ACCESS4args, GETATTR4args(STAT_BITMAP)], entry_attrs_decoder_at)
LOOKUP_ACCESS_SHAPE = CompoundShape([PUTFH4args, LOOKUP4args, GETFH4args(), ACCESS4args, GETATTR4args(STAT_BITMAP)],
                                    entry_attrs_decoder_at)


def _fh_and_attrs(values: tuple[Any, ...]) -> tuple[bytes, FileAttrs]:
    """What :data:`LOOKUP_SHAPE` decodes, as :func:`.compounds.fh_attrs` gives it."""
    return values[0], values[1]


def _first(values: tuple[Any, ...]) -> Any:
    """The one value a shape decoded (:data:`ACCESS_SHAPE`'s access granted)."""
    return values[0]


def _granted(res: list[ResOp]) -> int:
    return int(result_of(res, c.OP_ACCESS).access)


def _granted_attrs(res: list[ResOp]) -> tuple[int, FileAttrs]:
    return _granted(res), last_attrs(res)


def _fh_granted_attrs(res: list[ResOp]) -> tuple[bytes, int, FileAttrs]:
    return bytes(result_of(res, c.OP_GETFH).object), _granted(res), last_attrs(res)


def _values(values: tuple[Any, ...]) -> Any:
    """What a shape decoded, in order, as the parse beside it gives it."""
    return values


def _attrs(values: tuple[Any, ...]) -> FileAttrs:
    """What :data:`GETATTR_SHAPE` decodes, as :func:`.compounds.last_attrs` gives it."""
    attrs: FileAttrs = values[0]
    return attrs

MIN_SERVER_IO = 4096  # a server's maxread or maxwrite below this is taken as this


def server_io_size(said: int | None) -> int:
    """The READ or WRITE size a server's number allows (maxread, maxwrite, what its session carries):
    none said (0 or None), no bound; below MIN_SERVER_IO, MIN_SERVER_IO. A value from a reply of 1 byte
    would have a file read by a million READs a MiB; a server that can carry less than it says returns
    short READs and WRITEs, which are asked on."""
    if not said:
        return 1 << 62
    return max(MIN_SERVER_IO, said)


class Names:
    """The export, LOOKUP, GETATTR, SETATTR, ACCESS: ``NFSv4.names``, an object given the COMPOUND
    runner (mount records what it learns of the export there: the root, the sizes, the attributes
    supported)."""

    def __init__(self, compounds: Compounds) -> None:
        self.compounds = compounds

    # -- the export ---------------------------------------------------------------------------------------
    async def mount(self, export: str, cred: Credential) -> tuple[bytes, FileAttrs]:
        """Look up the export's root; learn maxread/maxwrite and the lease time."""
        ops: list[Any] = [PUTROOTFH4args()]
        ops += [LOOKUP4args(n) for n in components(export)]
        ops += [GETFH4args(), GETATTR4args(STAT_BITMAP), GETATTR4args(FS_INFO_BITMAP)]
        v42 = self.compounds.client.options.minorversion >= c.NFS4_MINOR_VERSION_2
        if v42:
            ops.append(GETATTR4args(XATTR_SUPPORT_BITMAP))
        from .._proto.nfs4.attrs import decode_fattr4

        def parse(res: list[ResOp]) -> tuple[bool, bytes, FileAttrs, dict[int, Any]]:
            stat, fs_info, *xattrs = results_of(res, c.OP_GETATTR)
            xattr = decode_fattr4(xattrs[0].obj_attributes) if v42 else {}
            return (bool(xattr.get(c.FATTR4_XATTR_SUPPORT, False)), bytes(result_of(res, c.OP_GETFH).object),
                    FileAttrs.from_fattr4(stat.obj_attributes), decode_fattr4(fs_info.obj_attributes))

        runner = self.compounds  # (what mount learns of the export, kept where every family reads it)
        runner.xattr_support, fh, attrs, info = await runner.query(ops, cred, parse, path=export)
        # no more than the server's maxread and maxwrite, and than its session carries
        client = runner.client
        session = client.session
        room = (session.max_response_size - COMPOUND_ROOM, session.max_request_size - COMPOUND_ROOM) if session else (0, 0)
        runner.maxread = max(1, min(client.options.rsize, server_io_size(info.get(c.FATTR4_MAXREAD)),
                                    server_io_size(room[0])))
        runner.maxwrite = max(1, min(client.options.wsize, server_io_size(info.get(c.FATTR4_MAXWRITE)),
                                     server_io_size(room[1])))
        if c.FATTR4_LEASE_TIME in info:
            client.lease_time = info[c.FATTR4_LEASE_TIME]
        # pNFS: the layout types the export's file system hands out (None: the server did not say)
        runner.layout_types = [int(t) for t in info[c.FATTR4_FS_LAYOUT_TYPES]] if c.FATTR4_FS_LAYOUT_TYPES in info else None
        runner.layout_blksize = int(info.get(c.FATTR4_LAYOUT_BLKSIZE, 0))
        runner.supported_attrs = frozenset(attrs_in(info.get(c.FATTR4_SUPPORTED_ATTRS, [])))
        runner.deleg_timestamps = {c.FATTR4_TIME_DELEG_ACCESS, c.FATTR4_TIME_DELEG_MODIFY} <= runner.supported_attrs
        runner.root_fh = fh
        return fh, attrs

    async def secinfo(self, export: str, cred: Credential) -> list[Flavor]:
        """The flavours the server takes for ``export``, in its order of preference, of those this
        client speaks: SECINFO of the first name on the way that the server refused to ``cred``
        (NFS4ERR_WRONGSEC), in its parent, or SECINFO_NO_NAME of the export when none was refused."""
        names = components(export)
        walk: list[Any] = [PUTROOTFH4args(), *(LOOKUP4args(n) for n in names)]
        res = await self.compounds.client.compound(walk, cred)
        if res.status == c.NFS4ERR_WRONGSEC and 1 < len(res.resarray) <= len(walk):
            refused = len(res.resarray) - 1  # (walk[refused] is the LOOKUP into the export)
            ops = [*walk[:refused], SECINFO4args(names[refused - 1])]
        elif res.status == c.NFS4_OK:
            ops = [*walk, SECINFO_NO_NAME4args(c.SECINFO_STYLE4_CURRENT_FH)]
        else:
            failed = res.resarray[-1] if res.resarray else None
            raise NFS4Error(res.status, failed.opnum if failed else None, export)
        found: list[Flavor] = []
        for flavor, info in (await self.compounds.run(ops, cred, path=export))[-1].res:
            f = flavor_of_secinfo(flavor, *((info.oid, info.service) if info is not None else ()))
            if f is not None and f not in found:
                found.append(f)
        return found

    # -- names --------------------------------------------------------------------------------------------
    def lookup(self, dir_fh: bytes, name: str, cred: Credential) -> Awaitable[tuple[bytes, FileAttrs]]:
        return self.compounds.query(LOOKUP_SHAPE.ops(dir_fh, name), cred, fh_attrs, path=name,
                                    shape=LOOKUP_SHAPE, take=_fh_and_attrs)

    def lookup_path(self, dir_fh: bytes, names: Sequence[str], cred: Credential,
                    path: str | None = None) -> Awaitable[tuple[bytes, FileAttrs]]:
        """Several LOOKUPs in one COMPOUND (a path below ``dir_fh``)."""
        if len(names) == 1:
            return self.compounds.query(LOOKUP_SHAPE.ops(dir_fh, names[0]), cred, fh_attrs, path=path,
                                        shape=LOOKUP_SHAPE, take=_fh_and_attrs)
        ops: list[Any] = [PUTFH4args(dir_fh)]
        ops += [LOOKUP4args(n) for n in names]
        ops += [GETFH4args(), GETATTR4args(STAT_BITMAP)]
        return self.compounds.query(ops, cred, fh_attrs, path=path)

    async def lookup_walk(self, dir_fh: bytes, names: Sequence[str], cred: Credential,
                          paths: Sequence[str]) -> tuple[list[bytes], FileAttrs] | None:
        """LOOKUP of each name in turn below ``dir_fh`` in one COMPOUND, a GETFH after each and a
        GETATTR at the end: each name's file handle, and the last one's attributes. None when a name
        on the way is a symbolic link (NFS4ERR_SYMLINK: the caller follows it). ``paths``: each
        name's path, for the error of the one that failed."""
        ops: list[Any] = [PUTFH4args(dir_fh)]
        for n in names:
            ops += [LOOKUP4args(n), GETFH4args()]
        ops.append(GETATTR4args(STAT_BITMAP))
        got: list[tuple[list[bytes], FileAttrs]] = []

        def check(res: list[ResOp]) -> None:
            got[:] = [([bytes(r.object) for r in results_of(res, c.OP_GETFH)], last_attrs(res))]

        try:
            res = await self.compounds.client.compound(ops, cred, NO_HINTS, check=check)
        except ReplyError as e:
            raise e.located(None, paths[-1]) from None
        if res.status == c.NFS4_OK:
            return got[0]
        if res.status == c.NFS4ERR_SYMLINK:
            return None
        failed = res.resarray[-1] if res.resarray else None
        if failed is None or failed.opnum != c.OP_LOOKUP:
            raise NFS4Error(res.status, failed.opnum if failed else None, paths[-1])
        k = (len(res.resarray) - 2) // 2  # the name whose LOOKUP failed (after the PUTFH, pairs)
        # (NOTDIR: the name before it is not a directory)
        raise NFS4Error(res.status, c.OP_LOOKUP, paths[k - 1] if res.status == c.NFS4ERR_NOTDIR and k else paths[k])

    async def lookupp(self, fh: bytes, cred: Credential) -> tuple[bytes, FileAttrs]:
        return await self.compounds.query([PUTFH4args(fh), LOOKUPP4args(), GETFH4args(), GETATTR4args(STAT_BITMAP)], cred,
                                fh_attrs)

    def getattr(self, fh: bytes, cred: Credential, path: str | None = None) -> Awaitable[FileAttrs]:
        return self.compounds.query(GETATTR_SHAPE.ops(fh), cred, last_attrs, path=path,
                                    shape=GETATTR_SHAPE, take=_attrs)

    async def time_create(self, fh: bytes, cred: Credential, path: str | None = None) -> int | None:
        """When the file was created (the time_create attribute), in nanoseconds since the epoch;
        None when the server keeps no creation times (it leaves the attribute out of its reply)."""
        return await self.compounds.query([PUTFH4args(fh), GETATTR4args(TIME_CREATE_BITMAP)], cred, created_ns, path=path)

    async def setattr(
        self, fh: bytes, cred: Credential, *, stateid: stateid4 | None = None, path: str | None = None,
        mode: int | None = None, uid: int | None = None, gid: int | None = None, size: int | None = None,
        atime_ns: int | str | None = None, mtime_ns: int | str | None = None,
    ) -> FileAttrs:
        f = setattr_fattr4(mode, uid, gid, size, atime_ns, mtime_ns)
        return await self.compounds.query(
            [PUTFH4args(fh), SETATTR4args(stateid or ANONYMOUS_STATEID, f), GETATTR4args(STAT_BITMAP)],
            cred, last_attrs, path=path,
        )

    def access(self, fh: bytes, mask: int, cred: Credential) -> Awaitable[int]:
        return self.compounds.query(ACCESS_SHAPE.ops(fh, mask), cred, _granted, shape=ACCESS_SHAPE, take=_first)

    def access_attrs(self, fh: bytes, mask: int, cred: Credential) -> Awaitable[tuple[int, FileAttrs]]:
        """What of ``mask`` ``cred`` may do to ``fh`` (ACCESS), and its attributes."""
        return self.compounds.query(ACCESS_ATTRS_SHAPE.ops(fh, mask), cred, _granted_attrs,
                                    shape=ACCESS_ATTRS_SHAPE, take=_values)

    def lookup_access(
        self, dir_fh: bytes, name: str, mask: int, cred: Credential
    ) -> Awaitable[tuple[bytes, int, FileAttrs]]:
        """``name`` in ``dir_fh``: its file handle, what of ``mask`` ``cred`` may do to it (ACCESS),
        and its attributes, in one COMPOUND."""
        return self.compounds.query(LOOKUP_ACCESS_SHAPE.ops(dir_fh, name, mask), cred, _fh_granted_attrs, path=name,
                                    shape=LOOKUP_ACCESS_SHAPE, take=_values)

    async def statfs(self, fh: bytes, cred: Credential) -> FsStat:
        return await self.compounds.query([PUTFH4args(fh), GETATTR4args(STATFS_BITMAP)], cred,
                                lambda r: FsStat.from_fattr4(result_of(r, c.OP_GETATTR).obj_attributes))


def components(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]

