"""Directories, one COMPOUND each: READDIR (a page, every page, or a listing decoded in place), CREATE
of the objects OPEN does not make, REMOVE, RENAME, LINK, READLINK."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import DirList, encode_fattr4
from .._proto.nfs4.compound import ResOp, result_of, results_of
from .._proto.nfs4.types import (
    CREATE4args,
    GETATTR4args,
    GETFH4args,
    LINK4args,
    LOOKUP4args,
    NVERIFY4args,
    PUTFH4args,
    READDIR4args,
    READLINK4args,
    REMOVE4args,
    RENAME4args,
    RESTOREFH4args,
    SAVEFH4args,
    VERIFY4args,
    change_info4,
    specdata4,
)
from .._rpc.auth import Credential
from .._transport.base import ReplyHints
from .attributes import (
    STAT_BITMAP,
    FileAttrs,
    ListedEntry,
    entry_records_decoder_at,
    setattr_fattr4,
)
from .compounds import VERIFIER_SIZE, Compounds, Cookies, last_attrs


@dataclass(slots=True)
class Renamed:
    """What a RENAME brought back: how the source and the target directory changed and, when asked
    for, their attributes right after (the same object when they are one directory)."""

    source: change_info4
    target: change_info4
    source_attrs: FileAttrs | None = None
    target_attrs: FileAttrs | None = None


@dataclass(slots=True)
class DirEntry:
    name: str
    cookie: int
    fh: bytes | None
    attrs: FileAttrs | None


class Directories:
    """READDIR, CREATE, REMOVE, RENAME, LINK, READLINK: ``NFSv4.directories``, an object given the
    COMPOUND runner."""

    def __init__(self, compounds: Compounds) -> None:
        self.compounds = compounds

    # -- directories --------------------------------------------------------------------------------------
    async def readdir(
        self, fh: bytes, cred: Credential, cookie: int = 0, verifier: bytes = bytes(VERIFIER_SIZE),
        maxcount: int = 64 * 1024, with_attrs: bool = True, path: str | None = None,
    ) -> tuple[list[DirEntry], bytes, bool]:
        """One READDIR: (entries, cookie verifier, eof)."""
        bitmap = READDIR_BITMAP if with_attrs else _READDIR_FH_ONLY
        from .._proto.nfs4.attrs import decode_fattr4

        def parse(res: list[ResOp]) -> tuple[list[DirEntry], bytes, bool]:
            ok = result_of(res, c.OP_READDIR)
            entries = []
            for e in ok.reply.entries:
                d = decode_fattr4(e.attrs)
                efh = d.get(c.FATTR4_FILEHANDLE)
                entries.append(DirEntry(e.name, e.cookie, bytes(efh) if efh is not None else None,
                                        FileAttrs.from_dict(d) if with_attrs else None))
            return entries, bytes(ok.cookieverf), bool(ok.reply.eof)

        return await self.compounds.query(
            [PUTFH4args(fh), READDIR4args(cookie, verifier, maxcount, maxcount, bitmap)],
            cred, parse, ReplyHints(max_reply=maxcount), path=path,
        )

    async def listdir(self, fh: bytes, cred: Credential, with_attrs: bool = True,
                      path: str | None = None) -> list[DirEntry]:
        """All entries, paging READDIR with cookie and verifier."""
        out: list[DirEntry] = []
        cookie, verf = 0, bytes(VERIFIER_SIZE)
        cookies = Cookies(self.compounds.client.server, path)
        while True:
            entries, verf, eof = await self.readdir(fh, cred, cookie, verf, with_attrs=with_attrs, path=path)
            cookies.check(e.cookie for e in entries)
            out.extend(entries)
            if eof or not entries:
                return out
            cookie = entries[-1].cookie

    async def listdir_plus(self, fh: bytes, cred: Credential, path: str | None = None,
                           first: tuple[list[ListedEntry], bytes, bool] | None = None) -> list[ListedEntry]:
        """All entries with their attributes, as :meth:`readdir_plus` lists them (decoded in place),
        paging READDIR with cookie and verifier; ``first``: the first page, had already (the rest
        follow it)."""
        out: list[ListedEntry] = []
        cookie, verf = 0, bytes(VERIFIER_SIZE)
        cookies = Cookies(self.compounds.client.server, path)
        if first is not None:
            entries, verf, eof = first
            cookies.check(e[1] for e in entries)
            out.extend(entries)
            if eof or not entries:
                return out
            cookie = entries[-1][1]
        while True:
            entries, verf, eof = await self.readdir_plus(fh, cred, cookie, verf, path=path)
            cookies.check(e[1] for e in entries)
            out.extend(entries)
            if eof or not entries:
                return out
            cookie = entries[-1][1]

    async def create(
        self, dir_fh: bytes, name: str, ftype: int, cred: Credential, *, mode: int = 0o755,
        linkdata: bytes | None = None, rdev: tuple[int, int] = (0, 0), uid: int | None = None,
        gid: int | None = None, path: str | None = None, dir_attrs: bool = False,
    ) -> tuple[bytes, FileAttrs, change_info4, FileAttrs | None]:
        """CREATE a non-regular object: directory, symlink, device, fifo, socket. Returns its file
        handle, its attributes, how the directory changed and, with ``dir_attrs``, the directory's
        attributes right after, from the same COMPOUND (PUTFH dir, SAVEFH, CREATE, GETFH, GETATTR,
        RESTOREFH, GETATTR; else None)."""
        if ftype == c.NF4LNK:
            objtype: tuple[int, Any] = (c.NF4LNK, linkdata or b"")
        elif ftype in (c.NF4BLK, c.NF4CHR):
            objtype = (ftype, specdata4(*rdev))
        else:
            objtype = (ftype, None)
        attrs = setattr_fattr4(mode=mode, uid=uid, gid=gid)
        ops: list[Any] = [PUTFH4args(dir_fh), CREATE4args(objtype, name, attrs), GETFH4args(), GETATTR4args(STAT_BITMAP)]
        if dir_attrs:
            ops[1:1] = [SAVEFH4args()]
            ops += [RESTOREFH4args(), GETATTR4args(STAT_BITMAP)]

        def parse(r: list[ResOp]) -> tuple[bytes, FileAttrs, change_info4, FileAttrs | None]:
            getattrs = results_of(r, c.OP_GETATTR)
            made = FileAttrs.from_fattr4(getattrs[0].obj_attributes)
            after = FileAttrs.from_fattr4(getattrs[1].obj_attributes) if dir_attrs else None
            return bytes(result_of(r, c.OP_GETFH).object), made, result_of(r, c.OP_CREATE).cinfo, after

        return await self.compounds.query(ops, cred, parse, path=path or name)

    async def remove(self, dir_fh: bytes, name: str, cred: Credential, path: str | None = None, *,
                     is_dir: bool | None = None, dir_attrs: bool = False) -> tuple[change_info4, FileAttrs | None]:
        """REMOVE; returns how the directory changed and, with ``dir_attrs``, the directory's
        attributes right after, from a GETATTR after the REMOVE (else None). With ``is_dir``, only a
        directory (True) or only what is not one (False), checked in the same COMPOUND: LOOKUP and
        VERIFY (NVERIFY) of its type before the REMOVE, which the server then does not reach for
        anything else; that is ENOTDIR (EISDIR), as rmdir(2) (unlink(2)) answers."""
        ops: list[Any] = [PUTFH4args(dir_fh), REMOVE4args(name)]
        if is_dir is not None:
            a_dir = encode_fattr4({c.FATTR4_TYPE: c.NF4DIR})
            ops[1:1] = [LOOKUP4args(name), VERIFY4args(a_dir) if is_dir else NVERIFY4args(a_dir), PUTFH4args(dir_fh)]
        if dir_attrs:
            ops.append(GETATTR4args(STAT_BITMAP))

        def parse(r: list[ResOp]) -> tuple[change_info4, FileAttrs | None]:
            return result_of(r, c.OP_REMOVE).cinfo, last_attrs(r) if dir_attrs else None

        try:
            return await self.compounds.query(ops, cred, parse, path=path or name)
        except NFS4Error as e:
            if e.status in (c.NFS4ERR_NOT_SAME, c.NFS4ERR_SAME):  # (the type was not as asked)
                raise NFS4Error(c.NFS4ERR_NOTDIR if is_dir else c.NFS4ERR_ISDIR, c.OP_REMOVE, e.path) from None
            raise

    async def rename(self, src_dir: bytes, old: str, dst_dir: bytes, new: str, cred: Credential,
                     path: str | None = None, *, dir_attrs: bool = False) -> Renamed:
        """RENAME; returns how the source and the target directory changed and, with ``dir_attrs``,
        their attributes right after, from the same COMPOUND (PUTFH src, SAVEFH, PUTFH dst, RENAME,
        GETATTR, and for two directories RESTOREFH, GETATTR; else None)."""
        ops: list[Any] = [PUTFH4args(src_dir), SAVEFH4args(), PUTFH4args(dst_dir), RENAME4args(old, new)]
        one_dir = src_dir == dst_dir
        if dir_attrs:
            ops.append(GETATTR4args(STAT_BITMAP))
            if not one_dir:
                ops += [RESTOREFH4args(), GETATTR4args(STAT_BITMAP)]

        def parse(r: list[ResOp]) -> Renamed:
            ok = result_of(r, c.OP_RENAME)
            if not dir_attrs:
                return Renamed(ok.source_cinfo, ok.target_cinfo)
            getattrs = results_of(r, c.OP_GETATTR)
            dst = FileAttrs.from_fattr4(getattrs[0].obj_attributes)
            src = dst if one_dir else FileAttrs.from_fattr4(getattrs[1].obj_attributes)
            return Renamed(ok.source_cinfo, ok.target_cinfo, src, dst)

        return await self.compounds.query(ops, cred, parse, path=path or old)

    async def link(self, fh: bytes, dir_fh: bytes, name: str, cred: Credential,
                   path: str | None = None, *, dir_attrs: bool = False,
                   ) -> tuple[FileAttrs, change_info4, FileAttrs | None]:
        """LINK; returns the file's attributes, how the directory changed and, with ``dir_attrs``,
        the directory's attributes right after, from the same COMPOUND (PUTFH file, SAVEFH, PUTFH
        dir, LINK, GETATTR, RESTOREFH, GETATTR; else None)."""
        ops: list[Any] = [PUTFH4args(fh), SAVEFH4args(), PUTFH4args(dir_fh), LINK4args(name), RESTOREFH4args(),
                          GETATTR4args(STAT_BITMAP)]
        if dir_attrs:
            ops[4:4] = [GETATTR4args(STAT_BITMAP)]

        def parse(r: list[ResOp]) -> tuple[FileAttrs, change_info4, FileAttrs | None]:
            after = FileAttrs.from_fattr4(results_of(r, c.OP_GETATTR)[0].obj_attributes) if dir_attrs else None
            return last_attrs(r), result_of(r, c.OP_LINK).cinfo, after

        return await self.compounds.query(ops, cred, parse, path=path or name)

    async def readlink(self, fh: bytes, cred: Credential, path: str | None = None) -> bytes:
        # no Write chunk for the link (DDP-eligible, but Linux's nfsd 6.1 misplaces it in one, and
        # Linux's client never offers one): up to 4096 bytes of link in the reply, a Reply chunk
        # when that may not fit inline
        hints = ReplyHints(max_reply=4096 + 512)
        res = await self.compounds.run([PUTFH4args(fh), READLINK4args()], cred, hints, path=path)
        return bytes(result_of(res, c.OP_READLINK).link)

    async def readdir_plus(
        self, fh: bytes, cred: Credential, cookie: int = 0, verifier: bytes = bytes(VERIFIER_SIZE),
        maxcount: int = 64 * 1024, path: str | None = None,
    ) -> tuple[list[ListedEntry], bytes, bool]:
        """As :meth:`readdir` with attributes, for a listing: each entry a :data:`ListedEntry`, its
        attributes decoded straight into an :data:`AttrRecord` (None for an entry whose attributes the
        server could not get, an rdattr_error) from the reply's entries in place (no entry4, fattr4
        or FileAttrs made)."""
        def parse(res: list[ResOp]) -> tuple[list[ListedEntry], bytes, bool]:
            return listed_page(result_of(res, c.OP_READDIR))

        return await self.compounds.query(
            [PUTFH4args(fh), READDIR4args(cookie, verifier, maxcount, maxcount, READDIR_BITMAP)],
            cred, parse, ReplyHints(max_reply=maxcount), path=path,
        )

    async def readdir_plus_and_attrs(
        self, fh: bytes, cred: Credential, cookie: int = 0, verifier: bytes = bytes(VERIFIER_SIZE),
        maxcount: int = 64 * 1024, path: str | None = None,
    ) -> tuple[list[ListedEntry], bytes, bool, FileAttrs]:
        """As :meth:`readdir_plus`, and the directory's own attributes right after the READDIR, from
        the same COMPOUND (PUTFH, READDIR, GETATTR): the change attribute the page was read at."""
        def parse(res: list[ResOp]) -> tuple[list[ListedEntry], bytes, bool, FileAttrs]:
            return (*listed_page(result_of(res, c.OP_READDIR)), last_attrs(res))

        return await self.compounds.query(
            [PUTFH4args(fh), READDIR4args(cookie, verifier, maxcount, maxcount, READDIR_BITMAP),
             GETATTR4args(STAT_BITMAP)],
            cred, parse, ReplyHints(max_reply=maxcount + 1024), path=path,
        )


def listed_page(ok: Any) -> tuple[list[ListedEntry], bytes, bool]:
    """A READDIR result (READDIR4resok) as :meth:`Directories.readdir_plus` gives it: each entry a
    :data:`ListedEntry`, its attributes decoded straight from the reply into an :data:`AttrRecord`;
    the verifier; eof."""
    listed = cast(DirList, ok.reply.entries)  # (what DirEntries decodes)
    b, spans = listed.data, listed.spans
    entries: list[ListedEntry] = []
    append = entries.append
    i = 0
    while i < len(spans):  # (the entries with the same mask in one call: as a rule, all of them)
        i = entry_records_decoder_at(spans[i][3])(b, spans, i, append)
    return entries, bytes(ok.cookieverf), bool(ok.reply.eof)


def _readdir_bitmaps() -> tuple[list[int], list[int]]:
    from .._proto.nfs4.attrs import bitmap4_from
    from .attributes import STAT_ATTRS

    return (bitmap4_from((*STAT_ATTRS, c.FATTR4_FILEHANDLE, c.FATTR4_RDATTR_ERROR)),
            bitmap4_from((c.FATTR4_FILEHANDLE, c.FATTR4_TYPE)))


READDIR_BITMAP, _READDIR_FH_ONLY = _readdir_bitmaps()
