"""COMPOUND (RFC 8881 sections 16.2 and 18): the NFSv4 request and reply, with one codec for every op.

Requests: ``COMPOUND4args(tag, minorversion, argarray)`` where ``argarray`` holds ``XXX4args`` objects;
each is encoded after its class's ``OPNUM`` (the ``nfs_argop4`` union, a :class:`ClassUnion`).

Replies: ``COMPOUND4res(status, tag, resarray)`` where ``resarray`` holds :class:`ResOp` objects. A
ResOp's ``res`` is what the RFC's ``XXX4res`` union carries for that status:

- the NFS4_OK arm (a ``XXX4resok`` struct, or the RFC's other type: ``stateid4`` for CLOSE and LOCKU, a list
  of secinfo4 tuples for SECINFO/SECINFO_NO_NAME, ``change_info4`` for SETXATTR/REMOVEXATTR, ...);
- the error arm where the RFC has one (``LOCK4denied`` for NFS4ERR_DENIED on LOCK and LOCKT, the minimum
  count for NFS4ERR_TOOSMALL on GETDEVICEINFO, ...);
- SETATTR's ``attrsset`` bitmap whatever the status (SETATTR4res is a struct, not a union);
- None otherwise (operations whose result is only a status, void arms, errors without an arm).

A reply's resarray is usually shorter than the request's argarray: the server stops at the first error.

API (the session layer calls these; ``p``/``u`` are the Packer/Unpacker positioned at the RPC body):

- ``encode_compound_args(p, args)`` / ``decode_compound_args(u) -> COMPOUND4args``
- ``encode_compound_res(p, res)`` / ``decode_compound_res(u) -> COMPOUND4res``

The decoders stop right after the COMPOUND; the caller calls ``u.done()`` to reject trailing bytes
(``COMPOUND4args.XDR.decode(data)`` and ``COMPOUND4res.XDR.decode(data)`` do it for a whole buffer).
An operation number without a codec here is an :class:`XdrError` (on the server side the RFC then asks
for an OP_ILLEGAL result; a responder can catch it). An XdrError raised while one result was decoded
carries that result's operation number in ``op``.

``check_compound_res(argarray, res)`` checks a decoded reply against the request as RFC 8881 sections
15.2 and 16.2.3 say a reply is made (one result per operation evaluated, in order, each naming its
operation; evaluation stops at the first failure, whose status is the COMPOUND's) and what some
results may hold (:data:`RESULT_CHECKS`: a READ returns at most what was asked, ...). A reply that
breaks them raises :class:`CompoundMismatch`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from ..._xdr import (
    Array,
    ClassUnion,
    Packer,
    Unpacker,
    XdrError,
    XdrStruct,
    XdrType,
    boolean,
    int32,
    uint32,
    xdr_struct,
)
from .attrs import DirList
from .const import (
    NFS4_OK,
    NFS4_SESSIONID_SIZE,
    NFS4_VERIFIER_SIZE,
    NFS4ERR_CLID_INUSE,
    NFS4ERR_DENIED,
    NFS4ERR_LAYOUTTRYLATER,
    NFS4ERR_OFFLOAD_NO_REQS,
    NFS4ERR_OP_ILLEGAL,
    NFS4ERR_TOOSMALL,
    OP_ACCESS,
    OP_ALLOCATE,
    OP_BACKCHANNEL_CTL,
    OP_BIND_CONN_TO_SESSION,
    OP_CLONE,
    OP_CLOSE,
    OP_COMMIT,
    OP_COPY,
    OP_COPY_NOTIFY,
    OP_CREATE,
    OP_CREATE_SESSION,
    OP_DEALLOCATE,
    OP_DELEGPURGE,
    OP_DELEGRETURN,
    OP_DESTROY_CLIENTID,
    OP_DESTROY_SESSION,
    OP_EXCHANGE_ID,
    OP_FREE_STATEID,
    OP_GET_DIR_DELEGATION,
    OP_GETATTR,
    OP_GETDEVICEINFO,
    OP_GETDEVICELIST,
    OP_GETFH,
    OP_GETXATTR,
    OP_ILLEGAL,
    OP_IO_ADVISE,
    OP_LAYOUTCOMMIT,
    OP_LAYOUTERROR,
    OP_LAYOUTGET,
    OP_LAYOUTRETURN,
    OP_LAYOUTSTATS,
    OP_LINK,
    OP_LISTXATTRS,
    OP_LOCK,
    OP_LOCKT,
    OP_LOCKU,
    OP_LOOKUP,
    OP_LOOKUPP,
    OP_NVERIFY,
    OP_OFFLOAD_CANCEL,
    OP_OFFLOAD_STATUS,
    OP_OPEN,
    OP_OPEN_CONFIRM,
    OP_OPEN_DOWNGRADE,
    OP_OPENATTR,
    OP_PUTFH,
    OP_PUTPUBFH,
    OP_PUTROOTFH,
    OP_READ,
    OP_READ_PLUS,
    OP_READDIR,
    OP_READLINK,
    OP_RECLAIM_COMPLETE,
    OP_RELEASE_LOCKOWNER,
    OP_REMOVE,
    OP_REMOVEXATTR,
    OP_RENAME,
    OP_RENEW,
    OP_RESTOREFH,
    OP_SAVEFH,
    OP_SECINFO,
    OP_SECINFO_NO_NAME,
    OP_SEEK,
    OP_SEQUENCE,
    OP_SET_SSV,
    OP_SETATTR,
    OP_SETCLIENTID,
    OP_SETCLIENTID_CONFIRM,
    OP_SETXATTR,
    OP_TEST_STATEID,
    OP_VERIFY,
    OP_WANT_DELEGATION,
    OP_WRITE,
    OP_WRITE_SAME,
    nfsstat4,
)
from .types import (
    ACCESS4args,
    ACCESS4resok,
    ALLOCATE4args,
    BACKCHANNEL_CTL4args,
    BIND_CONN_TO_SESSION4args,
    BIND_CONN_TO_SESSION4resok,
    CLONE4args,
    CLOSE4args,
    COMMIT4args,
    COMMIT4resok,
    COPY4args,
    COPY4resok,
    COPY_NOTIFY4args,
    COPY_NOTIFY4resok,
    CREATE4args,
    CREATE4resok,
    CREATE_SESSION4args,
    CREATE_SESSION4resok,
    DEALLOCATE4args,
    DELEGPURGE4args,
    DELEGRETURN4args,
    DESTROY_CLIENTID4args,
    DESTROY_SESSION4args,
    EXCHANGE_ID4args,
    EXCHANGE_ID4resok,
    FREE_STATEID4args,
    GET_DIR_DELEGATION4args,
    GET_DIR_DELEGATION4res_non_fatal,
    GETATTR4args,
    GETATTR4resok,
    GETDEVICEINFO4args,
    GETDEVICEINFO4resok,
    GETDEVICELIST4args,
    GETDEVICELIST4resok,
    GETFH4args,
    GETFH4resok,
    GETXATTR4args,
    ILLEGAL4args,
    IO_ADVISE4args,
    IO_ADVISE4resok,
    LAYOUTCOMMIT4args,
    LAYOUTCOMMIT4resok,
    LAYOUTERROR4args,
    LAYOUTGET4args,
    LAYOUTGET4resok,
    LAYOUTRETURN4args,
    LAYOUTSTATS4args,
    LINK4args,
    LINK4resok,
    LISTXATTRS4args,
    LISTXATTRS4resok,
    LOCK4args,
    LOCK4denied,
    LOCK4resok,
    LOCKT4args,
    LOCKU4args,
    LOOKUP4args,
    LOOKUPP4args,
    NVERIFY4args,
    OFFLOAD_CANCEL4args,
    OFFLOAD_STATUS4args,
    OFFLOAD_STATUS4resok,
    OPEN4args,
    OPEN4resok,
    OPEN_CONFIRM4args,
    OPEN_CONFIRM4resok,
    OPEN_DOWNGRADE4args,
    OPEN_DOWNGRADE4resok,
    OPENATTR4args,
    PUTFH4args,
    PUTPUBFH4args,
    PUTROOTFH4args,
    READ4args,
    READ4resok,
    READ_PLUS4args,
    READDIR4args,
    READDIR4resok,
    READLINK4args,
    READLINK4resok,
    RECLAIM_COMPLETE4args,
    RELEASE_LOCKOWNER4args,
    REMOVE4args,
    REMOVE4resok,
    REMOVEXATTR4args,
    RENAME4args,
    RENAME4resok,
    RENEW4args,
    RESTOREFH4args,
    SAVEFH4args,
    SECINFO4args,
    SECINFO4resok,
    SECINFO_NO_NAME4args,
    SEEK4args,
    SEQUENCE4args,
    SEQUENCE4resok,
    SET_SSV4args,
    SET_SSV4resok,
    SETATTR4args,
    SETCLIENTID4args,
    SETCLIENTID4resok,
    SETCLIENTID_CONFIRM4args,
    SETXATTR4args,
    TEST_STATEID4args,
    TEST_STATEID4resok,
    VERIFY4args,
    WANT_DELEGATION4args,
    WANT_DELEGATION4resok,
    WRITE4args,
    WRITE4resok,
    WRITE_SAME4args,
    bitmap4,
    change_info4,
    clientaddr4,
    copy_requirements4,
    count4,
    layoutreturn_stateid,
    read_plus_res4,
    seek_res4,
    stateid4,
    utf8str_cs,
    write_response4,
    xattrvalue4,
)


@dataclass(slots=True)
class ResOp:
    """One result of a COMPOUND or CB_COMPOUND reply (an ``nfs_resop4`` / ``nfs_cb_resop4``)."""

    opnum: int
    status: int
    res: Any = None


def result_of(results: Sequence[ResOp], opnum: int) -> Any:
    """The result (its ``resok``) of operation ``opnum`` in a reply's ``results``, the last one when
    the COMPOUND had several; LookupError when it has none (the reply stopped before it)."""
    for i in range(len(results) - 1, -1, -1):
        r = results[i]
        if r.opnum == opnum:
            return r.res
    raise LookupError(f"no result of operation {opnum}")


def results_of(results: Sequence[ResOp], opnum: int) -> list[Any]:
    """The results of every operation ``opnum`` in ``results``, in order."""
    return [r.res for r in results if r.opnum == opnum]


def _codec(t: Any) -> XdrType[Any] | None:
    """An arm given as an @xdr_struct class or an XdrType, as its XdrType."""
    if t is None or isinstance(t, XdrType):
        return t
    xt: XdrType[Any] = t.XDR
    return xt


class OpResult:
    """The layout of one operation's result union: which data follows the status, for which status.

    ``ok`` is the NFS4_OK arm (None for void), ``errors`` the non-void arms of other statuses, and
    ``always`` data that follows the status whatever it is (SETATTR4res's attrsset).
    """

    __slots__ = ("always", "errors", "ok", "opnum", "unpack_res")

    def __init__(
        self,
        opnum: int,
        ok: Any = None,
        errors: Mapping[int, Any] | None = None,
        always: Any = None,
    ) -> None:
        self.opnum = opnum
        self.ok = _codec(ok)
        self.errors: dict[int, XdrType[Any]] = {
            k: t for k, t in ((k, _codec(v)) for k, v in (errors or {}).items()) if t
        }
        self.always = _codec(always)
        self.unpack_res: Callable[[Unpacker, int], Any] = self._specialise()

    def arm(self, status: int) -> XdrType[Any] | None:
        if self.always is not None:
            return self.always
        if status == NFS4_OK:
            return self.ok
        return self.errors.get(status)

    def _specialise(self) -> Callable[[Unpacker, int], Any]:
        # Straight-line decoders for the common shapes: replies are decoded on every call.
        if self.always is not None:
            up_always = self.always.unpack
            return lambda u, st: up_always(u)
        if not self.errors:
            if self.ok is None:
                return lambda u, st: None
            up_ok = self.ok.unpack
            return lambda u, st: up_ok(u) if st == 0 else None
        ok = self.ok
        errors = self.errors

        def unpack_res(u: Unpacker, st: int) -> Any:
            arm = ok if st == 0 else errors.get(st)
            return None if arm is None else arm.unpack(u)

        return unpack_res


class ResOpType(XdrType[ResOp]):
    """The result union of one COMPOUND (``nfs_resop4``) or CB_COMPOUND (``nfs_cb_resop4``) operation."""

    def __init__(self, results: Iterable[OpResult], name: str) -> None:
        self.results: dict[int, OpResult] = {r.opnum: r for r in results}
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def pack(self, p: Packer, v: ResOp) -> None:
        spec = self.results.get(v.opnum)
        if spec is None:
            raise XdrError(f"no result codec for operation {v.opnum} in {self.name}")
        p.uint32(v.opnum)
        p.int32(v.status)
        arm = spec.arm(v.status)
        if arm is not None:
            if v.res is None:
                raise XdrError(f"result of operation {v.opnum} with status {v.status} needs data")
            arm.pack(p, v.res)

    def unpack(self, u: Unpacker) -> ResOp:
        opnum = u.uint32()
        spec = self.results.get(opnum)
        if spec is None:
            raise XdrError(f"bad {self.name} discriminant {opnum}")
        st = u.int32()
        try:
            return ResOp(opnum, st, spec.unpack_res(u, st))
        except XdrError as e:
            if getattr(e, "op", None) is None:
                e.op = opnum  # type: ignore[attr-defined]  # (which result was malformed)
            raise


# -- the argument union: every operation this package can encode and decode ---------------------------------
ARGS_CLASSES: tuple[type, ...] = (
    ACCESS4args,
    CLOSE4args,
    COMMIT4args,
    CREATE4args,
    DELEGPURGE4args,
    DELEGRETURN4args,
    GETATTR4args,
    GETFH4args,
    LINK4args,
    LOCK4args,
    LOCKT4args,
    LOCKU4args,
    LOOKUP4args,
    LOOKUPP4args,
    NVERIFY4args,
    OPEN4args,
    OPENATTR4args,
    OPEN_CONFIRM4args,
    OPEN_DOWNGRADE4args,
    PUTFH4args,
    PUTPUBFH4args,
    PUTROOTFH4args,
    READ4args,
    READDIR4args,
    READLINK4args,
    REMOVE4args,
    RENAME4args,
    RENEW4args,
    RESTOREFH4args,
    SAVEFH4args,
    SECINFO4args,
    SETATTR4args,
    SETCLIENTID4args,
    SETCLIENTID_CONFIRM4args,
    VERIFY4args,
    WRITE4args,
    RELEASE_LOCKOWNER4args,
    BACKCHANNEL_CTL4args,
    BIND_CONN_TO_SESSION4args,
    EXCHANGE_ID4args,
    CREATE_SESSION4args,
    DESTROY_SESSION4args,
    FREE_STATEID4args,
    GET_DIR_DELEGATION4args,
    GETDEVICEINFO4args,
    GETDEVICELIST4args,
    LAYOUTCOMMIT4args,
    LAYOUTGET4args,
    LAYOUTRETURN4args,
    SECINFO_NO_NAME4args,
    SEQUENCE4args,
    SET_SSV4args,
    TEST_STATEID4args,
    WANT_DELEGATION4args,
    DESTROY_CLIENTID4args,
    RECLAIM_COMPLETE4args,
    ALLOCATE4args,
    COPY4args,
    COPY_NOTIFY4args,
    DEALLOCATE4args,
    IO_ADVISE4args,
    LAYOUTERROR4args,
    LAYOUTSTATS4args,
    OFFLOAD_CANCEL4args,
    OFFLOAD_STATUS4args,
    READ_PLUS4args,
    SEEK4args,
    WRITE_SAME4args,
    CLONE4args,
    GETXATTR4args,
    SETXATTR4args,
    LISTXATTRS4args,
    REMOVEXATTR4args,
    ILLEGAL4args,
)

#: opnum -> args class (for a responder: which operations it can decode)
ARGS_BY_OPNUM: dict[int, type] = {c.OPNUM: c for c in ARGS_CLASSES}  # type: ignore[attr-defined]

nfs_argop4 = ClassUnion(uint32, list(ARGS_CLASSES), "OPNUM")

# -- the result union (nfs_resop4): one OpResult per operation, as the RFC's XXX4res unions say ------------
RESULTS: tuple[OpResult, ...] = (
    OpResult(OP_ACCESS, ACCESS4resok),
    OpResult(OP_CLOSE, stateid4),  # open_stateid
    OpResult(OP_COMMIT, COMMIT4resok),
    OpResult(OP_CREATE, CREATE4resok),
    OpResult(OP_DELEGPURGE),
    OpResult(OP_DELEGRETURN),
    OpResult(OP_GETATTR, GETATTR4resok),
    OpResult(OP_GETFH, GETFH4resok),
    OpResult(OP_LINK, LINK4resok),
    OpResult(OP_LOCK, LOCK4resok, {NFS4ERR_DENIED: LOCK4denied}),
    OpResult(OP_LOCKT, None, {NFS4ERR_DENIED: LOCK4denied}),
    OpResult(OP_LOCKU, stateid4),  # lock_stateid
    OpResult(OP_LOOKUP),
    OpResult(OP_LOOKUPP),
    OpResult(OP_NVERIFY),
    OpResult(OP_OPEN, OPEN4resok),
    OpResult(OP_OPENATTR),
    OpResult(OP_OPEN_CONFIRM, OPEN_CONFIRM4resok),
    OpResult(OP_OPEN_DOWNGRADE, OPEN_DOWNGRADE4resok),
    OpResult(OP_PUTFH),
    OpResult(OP_PUTPUBFH),
    OpResult(OP_PUTROOTFH),
    OpResult(OP_READ, READ4resok),
    OpResult(OP_READDIR, READDIR4resok),
    OpResult(OP_READLINK, READLINK4resok),
    OpResult(OP_REMOVE, REMOVE4resok),
    OpResult(OP_RENAME, RENAME4resok),
    OpResult(OP_RENEW),
    OpResult(OP_RESTOREFH),
    OpResult(OP_SAVEFH),
    OpResult(OP_SECINFO, SECINFO4resok),
    OpResult(OP_SETATTR, always=bitmap4),  # attrsset
    OpResult(OP_SETCLIENTID, SETCLIENTID4resok, {NFS4ERR_CLID_INUSE: clientaddr4}),
    OpResult(OP_SETCLIENTID_CONFIRM),
    OpResult(OP_VERIFY),
    OpResult(OP_WRITE, WRITE4resok),
    OpResult(OP_RELEASE_LOCKOWNER),
    OpResult(OP_BACKCHANNEL_CTL),
    OpResult(OP_BIND_CONN_TO_SESSION, BIND_CONN_TO_SESSION4resok),
    OpResult(OP_EXCHANGE_ID, EXCHANGE_ID4resok),
    OpResult(OP_CREATE_SESSION, CREATE_SESSION4resok),
    OpResult(OP_DESTROY_SESSION),
    OpResult(OP_FREE_STATEID),
    OpResult(OP_GET_DIR_DELEGATION, GET_DIR_DELEGATION4res_non_fatal),
    OpResult(OP_GETDEVICEINFO, GETDEVICEINFO4resok, {NFS4ERR_TOOSMALL: count4}),  # gdir_mincount
    OpResult(OP_GETDEVICELIST, GETDEVICELIST4resok),
    OpResult(OP_LAYOUTCOMMIT, LAYOUTCOMMIT4resok),
    OpResult(OP_LAYOUTGET, LAYOUTGET4resok, {NFS4ERR_LAYOUTTRYLATER: boolean}),
    OpResult(OP_LAYOUTRETURN, layoutreturn_stateid),
    OpResult(OP_SECINFO_NO_NAME, SECINFO4resok),
    OpResult(OP_SEQUENCE, SEQUENCE4resok),
    OpResult(OP_SET_SSV, SET_SSV4resok),
    OpResult(OP_TEST_STATEID, TEST_STATEID4resok),
    OpResult(OP_WANT_DELEGATION, WANT_DELEGATION4resok),
    OpResult(OP_DESTROY_CLIENTID),
    OpResult(OP_RECLAIM_COMPLETE),
    OpResult(OP_ALLOCATE),
    OpResult(OP_COPY, COPY4resok, {NFS4ERR_OFFLOAD_NO_REQS: copy_requirements4}),
    OpResult(OP_COPY_NOTIFY, COPY_NOTIFY4resok),
    OpResult(OP_DEALLOCATE),
    OpResult(OP_IO_ADVISE, IO_ADVISE4resok),
    OpResult(OP_LAYOUTERROR),
    OpResult(OP_LAYOUTSTATS),
    OpResult(OP_OFFLOAD_CANCEL),
    OpResult(OP_OFFLOAD_STATUS, OFFLOAD_STATUS4resok),
    OpResult(OP_READ_PLUS, read_plus_res4),
    OpResult(OP_SEEK, seek_res4),
    OpResult(OP_WRITE_SAME, write_response4),
    OpResult(OP_CLONE),
    OpResult(OP_GETXATTR, xattrvalue4),  # gxr_value
    OpResult(OP_SETXATTR, change_info4),  # sxr_info
    OpResult(OP_LISTXATTRS, LISTXATTRS4resok),
    OpResult(OP_REMOVEXATTR, change_info4),  # rxr_info
    OpResult(OP_ILLEGAL),
)

nfs_resop4 = ResOpType(RESULTS, "nfs_resop4")


@xdr_struct
class COMPOUND4args(XdrStruct):
    tag: Annotated[str, utf8str_cs]
    minorversion: Annotated[int, uint32]
    argarray: Annotated[list[Any], Array(nfs_argop4)]


@xdr_struct
class COMPOUND4res(XdrStruct):
    status: Annotated[int, int32]  # nfsstat4: the status of the last operation evaluated
    tag: Annotated[str, utf8str_cs]
    resarray: Annotated[list[ResOp], Array(nfs_resop4)]


# -- the rules a reply keeps (RFC 8881 sections 15.2, 16.2.3) --------------------------------------------------
NFSSTAT4_VALUES = frozenset(int(s) for s in nfsstat4)


class CompoundMismatch(XdrError):
    """A COMPOUND reply that is well-formed XDR but not a reply to the request: results missing, extra
    or out of order, a status that is not the last result's, an unknown status, a result holding what
    its operation cannot return. ``op`` is the operation number at fault (None: the COMPOUND)."""

    def __init__(self, message: str, op: int | None = None) -> None:
        super().__init__(message)
        self.op = op


def _read_ok(args: Any, res: Any) -> str | None:
    n = len(res.data)
    return f"{n} bytes of data for {args.count} asked" if n > args.count else None


def _write_ok(args: Any, res: Any) -> str | None:
    sent = memoryview(args.data).nbytes
    return f"{res.count} bytes written of {sent} sent" if res.count > sent else None


# a READDIR4resok's size besides its entries: the cookie verifier and eof (the entries' bytes, the
# end of the list included, are the DirList's data)
_READDIR4RESOK_FIXED = NFS4_VERIFIER_SIZE + 4


def _readdir_ok(args: Any, res: Any) -> str | None:
    entries = res.reply.entries
    if isinstance(entries, DirList):
        size = _READDIR4RESOK_FIXED + len(entries.data)
        cookies = [span[0] for span in entries.spans]
    else:  # (a list of entry4 made by hand)
        size = 0
        cookies = [e.cookie for e in entries]
    if size > args.maxcount:
        return f"a reply of {size} bytes for a maxcount of {args.maxcount}"
    seen = {0, args.cookie}  # (0 starts a listing: an entry with it would start it over)
    for cookie in cookies:
        if cookie in seen:
            return f"cookie {cookie} repeated"
        seen.add(cookie)
    return None


#: opnum -> check(args, resok) returning what is wrong with a successful result (None: nothing)
RESULT_CHECKS: dict[int, Callable[[Any, Any], str | None]] = {
    OP_READ: _read_ok,
    OP_WRITE: _write_ok,
    OP_READDIR: _readdir_ok,
}


def check_compound_res(argarray: Sequence[Any], res: COMPOUND4res) -> None:
    """Raise :class:`CompoundMismatch` unless ``res`` is a reply to a COMPOUND of ``argarray``."""
    results = res.resarray
    n = len(results)
    if n > len(argarray):
        raise CompoundMismatch(f"{n} results for {len(argarray)} operations")
    status = res.status
    if status not in NFSSTAT4_VALUES:
        raise CompoundMismatch(f"COMPOUND status {status} is not an nfsstat4")
    if n == 0:
        if status == NFS4_OK:
            raise CompoundMismatch("NFS4_OK with no results")
        return
    last = n - 1
    checks = RESULT_CHECKS
    for i, (r, arg) in enumerate(zip(results, argarray, strict=False)):
        op = arg.OPNUM
        st = r.status
        if r.opnum != op and not (r.opnum == OP_ILLEGAL and st == NFS4ERR_OP_ILLEGAL and i == last):
            raise CompoundMismatch(f"result {i} is for operation {r.opnum}, not {op}", op)
        if st:
            if i != last:
                raise CompoundMismatch(f"results after a failed operation (status {st})", op)
            if st not in NFSSTAT4_VALUES:
                raise CompoundMismatch(f"status {st} is not an nfsstat4", op)
        elif op in checks and r.res is not None:
            wrong = checks[op](arg, r.res)
            if wrong is not None:
                raise CompoundMismatch(wrong, op)
    if results[last].status != status:
        raise CompoundMismatch(
            f"COMPOUND status {status} is not that of its last result ({results[last].status})", results[last].opnum
        )
    if status == NFS4_OK and n != len(argarray):
        raise CompoundMismatch(f"NFS4_OK with {n} results for {len(argarray)} operations")


# -- the COMPOUND codec on the request path -----------------------------------------------------------------
# What COMPOUND4args.XDR and COMPOUND4res.XDR do, on the same definitions (the same bytes, values and
# errors), prepared once per operation: every request is encoded and every reply decoded here, and the
# generic union and array codecs cost a call or two per operation more.
_U32 = struct.Struct(">I")
_OPNUM_STATUS = struct.Struct(">Ii")

#: args class -> (its operation number, encoded; its XDR pack)
_ARG_CODECS: dict[type, tuple[bytes, Callable[[Packer, Any], None]]] = {
    cls: (_U32.pack(cls.OPNUM), cls.XDR.pack) for cls in ARGS_CLASSES  # type: ignore[attr-defined]
}
#: opnum -> how its result decodes (nfs_resop4's arms)
_RES_CODECS: dict[int, Callable[[Unpacker, int], Any]] = {r.opnum: r.unpack_res for r in RESULTS}


def encode_compound_args(p: Packer, args: COMPOUND4args) -> None:
    p.string(args.tag)
    p.uint32(args.minorversion)
    ops = args.argarray
    p.uint32(len(ops))
    _encode_ops(p, ops)


def _encode_ops(p: Packer, ops: Sequence[Any]) -> None:
    """Each of ``ops`` as a nfs_argop4 (its operation number, its arguments)."""
    codecs = _ARG_CODECS
    for op in ops:
        codec = codecs.get(type(op))
        if codec is None:
            raise XdrError(f"{type(op).__name__} is not an arm of this union")
        p.buf += codec[0]
        codec[1](p, op)


#: SEQUENCE4args with its operation number: OP_SEQUENCE, sa_sessionid, sa_sequenceid, sa_slotid,
#: sa_highest_slotid, sa_cachethis
_SEQUENCE_OP = struct.Struct(f">I{NFS4_SESSIONID_SIZE}sIIII")


def encode_sequenced_args(p: Packer, tag: str, minorversion: int, sessionid: bytes, sequenceid: int, slotid: int,
                          highest_slotid: int, cachethis: bool, ops: Sequence[Any]) -> None:
    """What ``encode_compound_args(p, COMPOUND4args(tag, minorversion, [SEQUENCE4args(sessionid,
    sequenceid, slotid, highest_slotid, cachethis), *ops]))`` encodes (the same bytes, the same
    errors), with neither object made: every request of a session goes out so."""
    try:
        if len(sessionid) != NFS4_SESSIONID_SIZE:
            raise struct.error
        head = _SEQUENCE_OP.pack(OP_SEQUENCE, sessionid, sequenceid, slotid, highest_slotid, 1 if cachethis else 0)
    except struct.error:  # (a value out of range: the general encoder's error says which)
        seq = SEQUENCE4args(sessionid, sequenceid, slotid, highest_slotid, cachethis)
        encode_compound_args(p, COMPOUND4args(tag, minorversion, [seq, *ops]))
        return
    p.string(tag)
    p.uint32(minorversion)
    p.uint32(len(ops) + 1)
    p.buf += head
    _encode_ops(p, ops)


def decode_compound_args(u: Unpacker) -> COMPOUND4args:
    res: COMPOUND4args = COMPOUND4args.XDR.unpack(u)
    return res


def encode_compound_res(p: Packer, res: COMPOUND4res) -> None:
    COMPOUND4res.XDR.pack(p, res)


def decode_compound_res(u: Unpacker) -> COMPOUND4res:
    status = u.int32()
    tag = u.string()
    n = u.count()
    codecs = _RES_CODECS
    view = u.view
    resarray: list[ResOp] = []
    for _ in range(n):
        p = u.pos
        if p + 8 > u.end:  # (what is left cannot hold an operation and a status: the generic codec says why)
            resarray.append(nfs_resop4.unpack(u))
            continue
        opnum, st = _OPNUM_STATUS.unpack_from(view, p)
        unpack_res = codecs.get(opnum)
        if unpack_res is None:
            u.pos = p + 4
            raise XdrError(f"bad {nfs_resop4.name} discriminant {opnum}")
        u.pos = p + 8
        try:
            resarray.append(ResOp(opnum, st, unpack_res(u, st)))
        except XdrError as e:
            if getattr(e, "op", None) is None:
                e.op = opnum  # type: ignore[attr-defined]  # (which result was malformed)
            raise
    return COMPOUND4res(status, tag, resarray)


__all__ = [
    "ARGS_BY_OPNUM",
    "ARGS_CLASSES",
    "NFSSTAT4_VALUES",
    "RESULTS",
    "RESULT_CHECKS",
    "COMPOUND4args",
    "COMPOUND4res",
    "CompoundMismatch",
    "OpResult",
    "ResOp",
    "ResOpType",
    "check_compound_res",
    "decode_compound_args",
    "decode_compound_res",
    "encode_compound_args",
    "encode_compound_res",
    "encode_sequenced_args",
    "nfs_argop4",
    "nfs_resop4",
    "result_of",
    "results_of",
]
