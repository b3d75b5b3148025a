"""Prepared COMPOUNDs: the requests a client sends over and over (SEQUENCE + PUTFH + GETATTR of one
bitmap; SEQUENCE + PUTFH + LOOKUP + GETFH + GETATTR; with ACCESS; a small file read or written whole:
READ, OPEN, WRITE, CLOSE), each made once as a :class:`CompoundShape`.

A shape's fixed bytes are encoded when it is made (the COMPOUND header, the operation numbers, the
fixed operations with their arguments: GETFH, GETATTR and its bitmap, a CLOSE of the current
stateid); per call only the variable fields are packed (SEQUENCE's session, sequence id and slots;
the file handle; the name; ACCESS's mask; READ's stateid, offset and count; OPEN's owner, create
attributes and name; WRITE's stateid, offset and stability, its data referenced, not copied; SETATTR's
stateid and attributes; a CLOSE's seqid and stateid). Its
reply is decoded by a decoder prepared for exactly the reply of success (every status NFS4_OK, one
result per operation in order, the GETATTR's bitmap the one asked for, an OPEN that gave no
delegation: OPEN_DELEGATE_NONE, or OPEN_DELEGATE_NONE_EXT and why; nothing after the last result),
straight into what the caller reads: the SEQUENCE result, the file handle, the access granted, the
attributes as the caller's attribute decoder makes them, a READ's data (a view of the received message, or wherever its transport placed it) and eof,
an OPEN's (stateid, change_info4, rflags), the bytes a WRITE wrote with its stability and verifier. Any other reply (a
failure, fewer results, another bitmap, a delegation, a body cut short or running on, attributes the caller's decoder refuses) is
not decoded here: :meth:`CompoundShape.decode` says None and leaves the reply where it was, for the
general codec (:func:`.compound.decode_compound_res` and the session's checks), which gives the
result or the error it always gives. A READ's data is the one part taken from the reply by the
transport's own decoder (``Unpacker.bulk``): the READ is always last, everything before it is checked
first, and what that decoder finds wrong with the data, or bytes after it, is the XdrError the
general decoder raises for them. Sans I/O: bytes in, values out.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from ..._xdr import Packer, Unpacker, XdrError
from .compound import COMPOUND4args, encode_compound_args, encode_sequenced_args
from .const import (
    CLAIM_NULL,
    EXCLUSIVE4_1,
    NFS4_BITMAP4_WORDS_MAX,
    NFS4_FHSIZE,
    NFS4_OK,
    NFS4_OPAQUE_LIMIT,
    NFS4_OTHER_SIZE,
    NFS4_SESSIONID_SIZE,
    OP_ACCESS,
    OP_CLOSE,
    OP_OPEN,
    OP_READ,
    OP_SEQUENCE,
    OP_SETATTR,
    OP_WRITE,
    OPEN4_CREATE,
    OPEN_DELEGATE_NONE,
    OPEN_DELEGATE_NONE_EXT,
    UNCHECKED4,
    WND4_CONTENTION,
    WND4_RESOURCE,
    stable_how4,
    why_no_delegation4,
)
from .types import (
    ACCESS4args,
    CLOSE4args,
    GETATTR4args,
    GETFH4args,
    LOOKUP4args,
    OPEN4args,
    PUTFH4args,
    READ4args,
    RESTOREFH4args,
    SAVEFH4args,
    SEQUENCE4args,
    SEQUENCE4resok,
    SETATTR4args,
    WRITE4args,
    change_info4,
    openflag4,
    stateid4,
)

_U32 = struct.Struct(">I")
_OPNUM_STATUS = struct.Struct(">Ii")
_HEAD = struct.Struct(">iII")  # COMPOUND4res: status, the tag's length, the results' count
# SEQUENCE4args after its operation number: sa_sessionid, sa_sequenceid, sa_slotid, sa_highest_slotid,
# sa_cachethis
_SEQUENCE_ARGS = struct.Struct(f">{NFS4_SESSIONID_SIZE}sIIII")
# a successful SEQUENCE result: resop's opnum and status, then SEQUENCE4resok
_SEQUENCE_RES = struct.Struct(f">Ii{NFS4_SESSIONID_SIZE}sIIIII")
_WORD = _U32.size
_OPNUM_LEN = struct.Struct(">II")  # an operation's number and its one word: an opaque's length, ACCESS's mask
_PAD = (b"", b"\0\0\0", b"\0\0", b"\0")
_ACCESS_RES = struct.Struct(">II")  # ACCESS4resok: supported, access
_UINT32_MAX = (1 << 32) - 1
# READ4args with its operation number: stateid (seqid, other), offset, count
_READ_ARGS = struct.Struct(f">II{NFS4_OTHER_SIZE}sQI")
# WRITE4args with its operation number, up to its data: stateid, offset, stable
_WRITE_ARGS = struct.Struct(f">II{NFS4_OTHER_SIZE}sQi")
# CLOSE4args with its operation number: seqid, open_stateid (seqid, other)
_CLOSE_ARGS = struct.Struct(f">III{NFS4_OTHER_SIZE}s")
# OPEN4args with its operation number, up to the owner's opaque: seqid, share_access, share_deny, clientid
_OPEN_HEAD = struct.Struct(">IIIIQ")
_CLAIM_NULL = _U32.pack(CLAIM_NULL)
_OPNUM_SETATTR = _U32.pack(OP_SETATTR)
_STATEID = struct.Struct(f">I{NFS4_OTHER_SIZE}s")
# OPEN4resok after its stateid: change_info4 (atomic, before, after), rflags, the attrset's length
_OPEN_RES = struct.Struct(">IQQII")
_WRITE_RES = struct.Struct(">Ii")  # WRITE4resok: count, committed (then the 8 bytes of writeverf)
_WRITEVERF = 8
_READ_RES = struct.Struct(">II")  # READ4resok: eof, the data's length
_STABLE = frozenset(int(m) for m in stable_how4)
_WHY = frozenset(int(m) for m in why_no_delegation4)
_WHY_PUSH = frozenset((int(WND4_CONTENTION), int(WND4_RESOURCE)))
_OPENHOWS = 64  # create attributes whose encoding a shape keeps

#: what decodes a GETATTR's attribute values, given the bitmap the shape asks for:
#: ``attrs_at(buffer, start, end)`` -> (the attributes, or None when they are not the caller's to use
#: as they are; anything else)
AttrsAt = Callable[[bytes, int, int], tuple[Any, Any]]


def _xdr(op: Any) -> bytes:
    """``op`` (an operation's arguments) encoded with its operation number, as a COMPOUND holds it."""
    p = Packer()
    encode_compound_args(p, COMPOUND4args("", 0, [op]))
    return bytes(p.getvalue()[3 * _WORD:])  # (after the tag, minorversion and count)


class CompoundShape:
    """SEQUENCE and then ``template``'s operations: an argument class for an operation whose argument
    varies per call (PUTFH4args, LOOKUP4args, ACCESS4args, READ4args, OPEN4args, WRITE4args,
    SETATTR4args, CLOSE4args), an
    argument instance for one that is fixed (GETFH4args(), GETATTR4args(bitmap), CLOSE4args(seqid,
    stateid) of the current stateid). Calls hand the shape's own fixed instances (:attr:`fixed`, :meth:`ops`) so that their
    bytes are the ones encoded once. ``attrs_at(bitmap)`` makes the GETATTR's attribute decoder
    (:data:`AttrsAt`), once, for the bitmap the shape asks for. A READ can only be the last operation.
    An OPEN is shaped as a small file's create is sent (OPEN4_CREATE of UNCHECKED4, CLAIM_NULL; any
    other goes to the general encoder), its create attributes encoded once per attributes object.

    :meth:`decode` of a reply of success gives the SEQUENCE result and, per operation that returns
    something, in order: a GETFH's file handle (bytes), an ACCESS's access granted (int), a GETATTR's
    attributes (what ``attrs_at``'s decoder makes of them), a READ's (data, eof), an OPEN's (stateid,
    change_info4, rflags), a WRITE's (count of bytes written, committed,
    write verifier)."""

    __slots__ = ("_attrs", "_filled", "_head", "_lead", "_mask_bytes", "_n", "_openhows", "_prefixes", "_put",
                 "_read_at", "_rest", "_variable", "_write_at", "fixed", "template")

    def __init__(self, template: Sequence[type | Any], attrs_at: Callable[[Sequence[int]], AttrsAt] | None = None
                 ) -> None:
        self.template = tuple(template)
        self.fixed: dict[int, Any] = {}  # position (after SEQUENCE) -> the shape's own fixed arguments
        opnums: list[int] = [OP_SEQUENCE]
        kinds: list[int] = []  # what each result holds after its status: _NOTHING, _FH, _ACCESS, _ATTRS
        put: list[bytes | None] = []  # the fixed operations' bytes (None: packed per call)
        mask_bytes = b""
        attrs: AttrsAt | None = None
        for i, t in enumerate(self.template):
            cls = t if isinstance(t, type) else type(t)
            if cls not in _SHAPED:
                raise ValueError(f"{cls.__name__} has no prepared shape")
            opnums.append(cls.OPNUM)  # type: ignore[attr-defined]
            if isinstance(t, type):
                if cls not in _VARIABLE:
                    raise ValueError(f"{cls.__name__} takes no arguments: give an instance")
                put.append(None)
            else:
                self.fixed[i] = t
                put.append(_xdr(t))
            if cls is READ4args and i != len(self.template) - 1:
                raise ValueError("a shape's READ is its last operation")
            if cls is GETFH4args:
                kinds.append(_FH)
            elif cls in _RESULT_KIND:
                kinds.append(_RESULT_KIND[cls])
            elif cls is ACCESS4args:
                kinds.append(_ACCESS)
            elif cls is GETATTR4args:
                if attrs_at is None or isinstance(t, type):
                    raise ValueError("a shape's GETATTRs are of one fixed bitmap, with its attribute decoder")
                mask = list(t.attr_request)
                asked = _U32.pack(len(mask)) + b"".join(_U32.pack(w) for w in mask)
                if attrs is not None and asked != mask_bytes:
                    raise ValueError("a shape's GETATTRs are of one fixed bitmap, with its attribute decoder")
                if attrs is None:
                    mask_bytes = asked
                    attrs = attrs_at(mask)
                kinds.append(_ATTRS)
            else:
                kinds.append(_NOTHING)
        # the reply of success up to the first result that holds something, as one struct: the
        # COMPOUND's head, SEQUENCE's result, the statuses of the operations before (PUTFH, LOOKUP):
        # their (opnum, NFS4_OK) pairs are ``_lead``; the results after, ``_rest``: (opnum, kind, position)
        first = next((i for i, k in enumerate(kinds) if k != _NOTHING), len(kinds))
        self._head = struct.Struct(_HEAD.format + _SEQUENCE_RES.format[1:] + "Ii" * first)
        self._lead = tuple(x for opnum in opnums[1:1 + first] for x in (opnum, NFS4_OK))
        self._rest = tuple((opnums[1 + i], kinds[i], i) for i in range(first, len(kinds)))
        self._put = tuple(put)
        # what :meth:`ops` fills in: the fixed instances in place, and where each variable one goes
        self._filled: list[Any] = [None if isinstance(t, type) else t for t in self.template]
        self._variable = tuple((i, t) for i, t in enumerate(self.template) if isinstance(t, type))
        # where the READ's (data, eof) and the WRITE's count are among what :meth:`decode` gives (-1: none)
        held = [k for k in kinds if k not in (_NOTHING, _CLOSE, _SETATTR)]
        self._read_at = held.index(_READ) if _READ in held else -1
        self._write_at = held.index(_WRITE) if _WRITE in held else -1
        self._n = len(opnums)
        self._mask_bytes = mask_bytes
        self._attrs = attrs
        self._prefixes: dict[int, bytes] = {}  # minorversion -> tag "", minorversion, count, OP_SEQUENCE
        # id(an OPEN's create attributes) -> (those attributes, kept alive so that the id stays theirs;
        # their openflag4 bytes)
        self._openhows: dict[int, tuple[Any, bytes]] = {}

    def ops(self, *variable: Any) -> list[Any]:
        """The operations of one call: ``variable`` in order for the template's argument classes (a
        PUTFH's file handle, a LOOKUP's name; or the arguments themselves: a READ4args), the shape's own
        instances for the fixed ones."""
        if len(variable) != len(self._variable):
            raise TypeError(f"{len(self._variable)} variable operations expected, {len(variable)} given")
        out = self._filled.copy()
        for (i, t), v in zip(self._variable, variable, strict=False):  # (the lengths checked above)
            out[i] = v if type(v) is t else t(v)
        return out

    # -- the call -------------------------------------------------------------------------------------
    def encode(self, p: Packer, args: COMPOUND4args) -> None:
        """Encode ``args`` (SEQUENCE and this shape's operations) into ``p``: the bytes
        :func:`.compound.encode_compound_args` makes, the fixed ones made once. ``args`` of another
        shape (or with a tag) are encoded by that general encoder."""
        ops = args.argarray
        seq = ops[0] if ops else None
        if type(seq) is not SEQUENCE4args:
            encode_compound_args(p, args)
            return
        self.encode_sequenced(p, args.tag, args.minorversion, seq.sa_sessionid, seq.sa_sequenceid, seq.sa_slotid,
                              seq.sa_highest_slotid, seq.sa_cachethis, ops[1:])

    def encode_sequenced(self, p: Packer, tag: str, minorversion: int, sessionid: bytes, sequenceid: int,
                         slotid: int, highest_slotid: int, cachethis: bool, ops: Sequence[Any]) -> None:
        """As :func:`.compound.encode_sequenced_args` (SEQUENCE's fields and the operations after
        it, no object made for either), the fixed bytes made once when ``ops`` are this shape's."""
        if tag or len(ops) + 1 != self._n or len(sessionid) != NFS4_SESSIONID_SIZE:
            encode_sequenced_args(p, tag, minorversion, sessionid, sequenceid, slotid, highest_slotid, cachethis, ops)
            return
        # ``ops`` are this shape's: its fixed instances themselves, its argument classes elsewhere
        for op, t in zip(ops, self.template, strict=False):  # (the lengths checked above)
            if op is not t and type(op) is not t:
                encode_sequenced_args(p, tag, minorversion, sessionid, sequenceid, slotid, highest_slotid, cachethis,
                                      ops)
                return
        prefix = self._prefixes.get(minorversion)
        if prefix is None:
            if not 0 <= minorversion <= _UINT32_MAX:
                encode_sequenced_args(p, tag, minorversion, sessionid, sequenceid, slotid, highest_slotid, cachethis,
                                      ops)
                return
            prefix = self._prefixes[minorversion] = (_U32.pack(0) + _U32.pack(minorversion) + _U32.pack(self._n)
                                                     + _U32.pack(OP_SEQUENCE))
        try:
            head = _SEQUENCE_ARGS.pack(sessionid, sequenceid, slotid, highest_slotid, 1 if cachethis else 0)
        except struct.error:  # (a value out of range: the general encoder's error says which)
            encode_sequenced_args(p, tag, minorversion, sessionid, sequenceid, slotid, highest_slotid, cachethis, ops)
            return
        buf = bytearray(prefix)
        buf += head
        bulks: list[tuple[Any, bytearray]] = []  # a WRITE's data, and the bytes after it
        for i, fixed in enumerate(self._put):
            if fixed is not None:
                buf += fixed
                continue
            op = ops[i]
            kind = type(op)
            if kind is ACCESS4args:
                if not 0 <= op.access <= _UINT32_MAX:  # (the general encoder's error says what is wrong)
                    encode_sequenced_args(p, tag, minorversion, sessionid, sequenceid, slotid, highest_slotid,
                                          cachethis, ops)
                    return
                buf += _OPNUM_LEN.pack(OP_ACCESS, op.access)
                continue
            if kind is SETATTR4args:
                buf += _OPNUM_SETATTR
                q = Packer()
                try:
                    SETATTR4args.XDR.pack(q, op)
                except (struct.error, TypeError, AttributeError, ValueError):  # (the general encoder's error)
                    encode_sequenced_args(p, tag, minorversion, sessionid, sequenceid, slotid, highest_slotid,
                                          cachethis, ops)
                    return
                buf += q.getvalue()
                continue
            if kind is CLOSE4args:
                sid = op.open_stateid
                try:
                    if len(sid.other) != NFS4_OTHER_SIZE:
                        raise struct.error
                    buf += _CLOSE_ARGS.pack(OP_CLOSE, op.seqid, sid.seqid, sid.other)
                except (struct.error, TypeError, AttributeError):  # (the general encoder's error)
                    encode_sequenced_args(p, tag, minorversion, sessionid, sequenceid, slotid, highest_slotid,
                                          cachethis, ops)
                    return
                continue
            if kind is READ4args or kind is WRITE4args or kind is OPEN4args:
                try:
                    if kind is READ4args:
                        sid = op.stateid
                        if len(sid.other) != NFS4_OTHER_SIZE:
                            raise struct.error
                        buf += _READ_ARGS.pack(OP_READ, sid.seqid, sid.other, op.offset, op.count)
                        continue
                    if kind is WRITE4args:
                        sid = op.stateid
                        if len(sid.other) != NFS4_OTHER_SIZE or op.stable not in _STABLE:
                            raise struct.error
                        buf += _WRITE_ARGS.pack(OP_WRITE, sid.seqid, sid.other, op.offset, op.stable)
                        bulks.append((op.data, buf))
                        buf = bytearray()
                        continue
                    if not self._open(buf, op):
                        raise struct.error
                    continue
                except (struct.error, TypeError, AttributeError, ValueError):  # (the general encoder's error, or its bytes)
                    encode_sequenced_args(p, tag, minorversion, sessionid, sequenceid, slotid, highest_slotid,
                                          cachethis, ops)
                    return
            data = op.object if kind is PUTFH4args else op.objname.encode("utf-8", "surrogateescape")
            n = len(data)
            if n > NFS4_FHSIZE and kind is PUTFH4args:
                encode_sequenced_args(p, tag, minorversion, sessionid, sequenceid, slotid, highest_slotid, cachethis,
                                      ops)
                return
            buf += _OPNUM_LEN.pack(op.OPNUM, n)
            buf += data
            buf += _PAD[n & 3]
        for data, before in bulks:  # (every check made: nothing goes into ``p`` before)
            p.buf += before
            p.bulk(data)
        p.buf += buf

    def _open(self, buf: bytearray, op: OPEN4args) -> bool:
        """Add ``op``'s bytes (with its operation number) to ``buf`` if it is an OPEN of the kind a
        shape holds: OPEN4_CREATE of UNCHECKED4 or EXCLUSIVE4_1, CLAIM_NULL (struct.error or XdrError for a
        value out of range)."""
        owner = op.owner.owner
        how = op.openhow
        claim = op.claim
        if (len(owner) > NFS4_OPAQUE_LIMIT or type(how) is not tuple or len(how) != 2 or how[0] != OPEN4_CREATE
                or type(how[1]) is not tuple or len(how[1]) != 2 or how[1][0] not in (UNCHECKED4, EXCLUSIVE4_1)
                or type(claim) is not tuple or len(claim) != 2 or claim[0] != CLAIM_NULL
                or type(claim[1]) is not str):
            return False
        attrs = how[1][1]
        kept = self._openhows.get(id(attrs))
        exclusive = how[1][0] == EXCLUSIVE4_1  # (a verifier of its own each time: packed per call, not kept)
        if exclusive or kept is None or kept[0] is not attrs:
            q = Packer()
            openflag4.pack(q, how)
            kept = (attrs, q.getvalue())
            if not exclusive:
                if len(self._openhows) >= _OPENHOWS:
                    self._openhows.clear()
                self._openhows[id(attrs)] = kept
        head = _OPEN_HEAD.pack(OP_OPEN, op.seqid, op.share_access, op.share_deny, op.owner.clientid)
        n = len(owner)
        name = claim[1].encode("utf-8", "surrogateescape")
        m = len(name)
        buf += head
        buf += _U32.pack(n)
        buf += owner
        buf += _PAD[n & 3]
        buf += kept[1]
        buf += _CLAIM_NULL
        buf += _U32.pack(m)
        buf += name
        buf += _PAD[m & 3]
        return True

    # -- the reply ------------------------------------------------------------------------------------
    def data(self, values: tuple[Any, ...]) -> tuple[Any, int]:
        """Of what :meth:`decode` gave for a reply of success (its second item): the READ's data (None
        if the shape reads nothing) and the count of bytes the WRITE wrote (0 if it writes nothing)."""
        r, w = self._read_at, self._write_at
        return (values[r][0] if r >= 0 else None), (values[w][0] if w >= 0 else 0)

    def decode(self, u: Unpacker, ops: Sequence[Any] = ()) -> tuple[SEQUENCE4resok, tuple[Any, ...]] | None:
        """The reply in ``u`` (a COMPOUND4res) to ``ops`` (the operations after SEQUENCE) if it is
        this shape's reply of success, everything in it read, to its end: the SEQUENCE result and what
        the operations returned. None for any other reply, ``u`` untouched (the general codec decodes
        it: its result, or its error); None too for a reply that says more than ``ops`` asked (a READ
        returning more than its count, a WRITE more written than sent: the general checks say so) or
        to a READ or WRITE whose ``ops`` are not given."""
        view = u.view
        end = u.end
        p = u.pos
        try:
            head = self._head
            if p + head.size > end:
                return None
            t = head.unpack_from(view, p)
            if (t[0] != NFS4_OK or t[1] != 0 or t[2] != self._n or t[3] != OP_SEQUENCE or t[4] != NFS4_OK
                    or t[11:] != self._lead):
                return None
            sid, seqid, slotid, highest, target, flags = t[5:11]
            p += head.size
            outs: list[Any] = []
            for opnum, kind, i in self._rest:
                if p + 2 * _WORD > end:
                    return None
                got, st = _OPNUM_STATUS.unpack_from(view, p)
                if got != opnum or st != NFS4_OK:
                    return None
                p += 2 * _WORD
                if kind == _FH:
                    if p + _WORD > end:
                        return None
                    (n,) = _U32.unpack_from(view, p)
                    q = p + _WORD + ((n + 3) & ~3)
                    if n > NFS4_FHSIZE or q > end:
                        return None
                    outs.append(bytes(view[p + _WORD:p + _WORD + n]))
                    p = q
                elif kind == _READ:  # (the last operation: see __init__)
                    if p + _READ_RES.size > end:
                        return None
                    eof, n = _READ_RES.unpack_from(view, p)
                    if eof > 1 or len(ops) <= i or n > ops[i].count:
                        return None
                    # the data: as the transport's decoder finds it (inline, spliced, in a Write chunk)
                    u.pos = p + _WORD
                    try:
                        data = u.bulk()
                        if u.pos != end:
                            raise XdrError(f"{end - u.pos} bytes of trailing garbage")
                    except XdrError as e:
                        e.op = OP_READ  # type: ignore[attr-defined]  # (as the general decoder says it)
                        raise _Malformed(e) from e
                    outs.append((data, eof == 1))
                    p = u.pos
                elif kind == _OPEN:
                    q = p + _STATEID.size + _OPEN_RES.size
                    if q > end:
                        return None
                    open_seqid, other = _STATEID.unpack_from(view, p)
                    atomic, before, after, rflags, words = _OPEN_RES.unpack_from(view, p + _STATEID.size)
                    q += words * _WORD
                    if atomic > 1 or words > NFS4_BITMAP4_WORDS_MAX or q + _WORD > end:
                        return None
                    delegation = _U32.unpack_from(view, q)[0]
                    q += _WORD
                    if delegation == OPEN_DELEGATE_NONE_EXT:  # (none, and why: open_none_delegation4)
                        if q + _WORD > end:
                            return None
                        why = _U32.unpack_from(view, q)[0]
                        q += _WORD
                        if why in _WHY_PUSH:  # (a boolean follows: the server will push or signal one)
                            if q + _WORD > end or _U32.unpack_from(view, q)[0] > 1:
                                return None
                            q += _WORD
                        elif why not in _WHY:
                            return None
                    elif delegation != OPEN_DELEGATE_NONE:  # (a delegation: the general way)
                        return None
                    outs.append((stateid4(open_seqid, other), change_info4(atomic == 1, before, after), rflags))
                    p = q
                elif kind == _WRITE:
                    if p + _WRITE_RES.size + _WRITEVERF > end:
                        return None
                    count, committed = _WRITE_RES.unpack_from(view, p)
                    if committed not in _STABLE or len(ops) <= i or count > memoryview(ops[i].data).nbytes:
                        return None
                    q = p + _WRITE_RES.size
                    outs.append((count, committed, bytes(view[q:q + _WRITEVERF])))
                    p = q + _WRITEVERF
                elif kind == _SETATTR:  # (SETATTR4res: the attributes set, a bitmap nobody reads)
                    if p + _WORD > end:
                        return None
                    (n,) = _U32.unpack_from(view, p)
                    if n > NFS4_BITMAP4_WORDS_MAX or p + (1 + n) * _WORD > end:
                        return None
                    p += (1 + n) * _WORD
                elif kind == _CLOSE:
                    if p + _STATEID.size > end:
                        return None
                    p += _STATEID.size
                elif kind == _ACCESS:
                    if p + 2 * _WORD > end:
                        return None
                    outs.append(_ACCESS_RES.unpack_from(view, p)[1])  # (ACCESS4resok: supported, access)
                    p += 2 * _WORD
                elif kind == _ATTRS:
                    mask = self._mask_bytes
                    q = p + len(mask)
                    if q + _WORD > end or view[p:q] != mask:
                        return None
                    (n,) = _U32.unpack_from(view, q)
                    q += _WORD
                    r = q + ((n + 3) & ~3)
                    if r > end:
                        return None
                    attrs_at = self._attrs
                    assert attrs_at is not None
                    vals = bytes(view[q:q + n])  # (the few bytes of values, as the general decoder copies them)
                    attrs, _ = attrs_at(vals, 0, n)
                    if attrs is None:
                        return None
                    outs.append(attrs)
                    p = r
            if p != end:
                return None
        except _Malformed as e:
            raise e.error from None
        except (ValueError, struct.error):  # (XdrError is a ValueError: attributes the decoder refuses)
            return None
        u.pos = p
        return SEQUENCE4resok(sid, seqid, slotid, highest, target, flags), tuple(outs)


class _Malformed(Exception):
    """A READ's data the transport's decoder refused: its XdrError, for the caller."""

    def __init__(self, error: XdrError) -> None:
        super().__init__(error)
        self.error = error


_NOTHING, _FH, _ACCESS, _ATTRS, _READ, _OPEN, _WRITE, _CLOSE, _SETATTR = range(9)
_RESULT_KIND = {READ4args: _READ, OPEN4args: _OPEN, WRITE4args: _WRITE, CLOSE4args: _CLOSE, SETATTR4args: _SETATTR}
#: the operations a shape holds, and those of them whose arguments vary per call
_SHAPED = frozenset((PUTFH4args, LOOKUP4args, GETFH4args, ACCESS4args, GETATTR4args, READ4args, OPEN4args,
                     WRITE4args, CLOSE4args, SETATTR4args, SAVEFH4args, RESTOREFH4args))
_VARIABLE = frozenset((PUTFH4args, LOOKUP4args, ACCESS4args, READ4args, OPEN4args, WRITE4args, SETATTR4args,
                       CLOSE4args))

__all__ = ["AttrsAt", "CompoundShape"]
