"""Replies that break the protocol, made from real ones, for testing a client against a server it
cannot trust (sans I/O: :mod:`.mutating_proxy` carries the bytes).

A :class:`ReplyMutator` is shown every RPC record a client sends (:meth:`ReplyMutator.call`: it notes
what each XID asks) and every record the server sends back (:meth:`ReplyMutator.reply`), and answers
with the bytes to hand the client instead: the reply as it is, or changed in one way, one of the
:class:`Mutation` classes. Which replies change, and how, follows from a seed (random ones, at a rate)
or from :class:`Rule` objects (the next reply to a READ gets SYSTEM_ERR, ...). A change is always one
that the protocol lets a client see: a field that frames the reply (its header, its results' operation
numbers and statuses, lengths and counts), the record's framing (its mark, its end, its XID), and the
few values whose range the protocol bounds (a READ's length, nfstime4's nanoseconds, READDIR cookies,
a directory entry's name) -- or a value a client cannot tell wrong but must not trust to size its work
(:data:`VALUES`: attribute values such as a size, a mode, a time, an owner; a WRITE's count; an eof
said false where it was true; a READDIR cookie made up). Data bytes are never changed: a client cannot
tell them from the file's.
"""

from __future__ import annotations

import enum
import random
import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._proto import rpc as rpcdef
from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import ATTRS, DirList, attrs_in
from .._proto.nfs4.compound import decode_compound_args, nfs_resop4
from .._proto.nfs4.types import READDIR4resok, bitmap4, nfstime4
from .._proto.rpc import RM_LAST_FRAGMENT, RM_LENGTH_MASK
from .._xdr import Array, Bulk, String, StructType, Unpacker, VarOpaque, XdrError, XdrType

__all__ = ["VALUES", "Decision", "Mutation", "ReplyMutator", "Rule", "Site", "frame"]

_WORD = struct.Struct(">I")
_HYPER = struct.Struct(">Q")
WORD = _WORD.size
HYPER = _HYPER.size
_TIME_ATTRS = frozenset(n for n, d in ATTRS.items() if d.xdr is nfstime4.XDR)


class Mutation(enum.Enum):
    """The ways a reply is changed."""

    HEADER = "header"  # a field that frames the reply: message type, reply and accept status, verifier
    #                    length, COMPOUND status, tag, result count, a result's operation or status,
    #                    SEQUENCE's slot and sequence ids
    LENGTH = "length"  # a length or count inside the reply made huge (slot counts of CREATE_SESSION too)
    TRUNCATE = "truncate"  # the record cut short (its mark saying so)
    TRAILING = "trailing"  # bytes added after the reply (its mark saying so)
    RECORD_MARK = "record_mark"  # a bogus record mark: a huge length, no last-fragment bit, a length off
    XID = "xid"  # the reply's XID one no call has
    DUPLICATE = "duplicate"  # the reply sent twice
    READ_SHORT = "read_short"  # a READ's data length made shorter, the data left in the record
    NSECONDS = "nseconds"  # an nfstime4 attribute's nanoseconds set to a second or more
    COOKIE = "cookie"  # a READDIR entry's cookie one of an earlier entry
    NAME = "name"  # a READDIR entry's name made one no file has: not UTF-8, holding "/", ".", "..", empty
    VALUE = "value"  # an attribute's value (size, mode, numlinks, times' seconds, owners, maxread, lease
    #                  time...), a READDIR entry's cookie made up
    EOF = "eof"  # a READ's or READDIR's eof said false where it was true (a server that never says eof)
    COUNT = "count"  # a WRITE's count: less than sent, none, or more than sent
    STATUS = "status"  # the reply made a failure at one result, well-formed: its status and the COMPOUND's
    #                    (DELAY, GRACE, IO, ...), the results after it gone (a server asking for a pause)


ALL = tuple(Mutation)
# the changes that leave a reply well-formed, a value in it wrong (the client cannot tell; it must not
# trust it to size its work): what a check of results made through them may not count as wrong
VALUES = (Mutation.VALUE, Mutation.EOF, Mutation.COUNT, Mutation.STATUS)
# the statuses a STATUS change gives a result (none of them has a result body for any operation)
_FAILURES = (c.NFS4ERR_DELAY, c.NFS4ERR_GRACE, c.NFS4ERR_IO, c.NFS4ERR_SERVERFAULT, c.NFS4ERR_ACCESS,
             c.NFS4ERR_STALE)
# attribute values changed, by attribute (numbers; the times' seconds and the owners besides); not
# type, fileid, fsid, filehandle: they say which object a reply is about
_VALUE_ATTRS = frozenset(("size", "space_used", "mode", "numlinks", "lease_time", "maxread", "maxwrite",
                          "maxname", "change"))
_OWNER_ATTRS = frozenset(("owner", "owner_group"))
# names a directory entry cannot have (RFC 8881 sections 14.2, 18.23.4: a component4 is UTF-8, holds no
# "/", is not empty, and READDIR returns neither "." nor "..")
_BAD_NAMES = ("not UTF-8", "slash", "one dot", "two dots", "empty")
# the bogus record marks: a length past any limit, the last-fragment bit cleared (the client waits for
# a fragment more), a length a few words short or long (the stream out of step from there on)
_MARKS = ("huge", "not last", "shorter", "longer")


@dataclass(frozen=True, slots=True)
class Site:
    """One place a reply can be changed: a 32-bit word (64-bit: ``wide``) at ``offset`` (for the
    whole-record mutations, -1), named (``"accept_stat"``, ``"READ.data"``, ``"result 2 status"``...);
    ``value``: what to write there, when the place says (a cookie to repeat)."""

    mutation: Mutation
    name: str
    offset: int = -1
    wide: bool = False
    value: int | None = None
    text: bool = False  # a string (its length word at ``offset``), changed in its bytes


@dataclass
class Rule:
    """Change the next ``count`` replies to calls holding operation ``op`` (any call: None) with
    ``mutation``, at the site whose name contains ``site`` (any: None), writing ``value`` there when
    given (else one the mutation chooses)."""

    mutation: Mutation
    op: int | None = None
    site: str | None = None
    value: int | None = None
    count: int = 1


@dataclass(slots=True)
class Decision:
    """What to send the client for one reply: ``chunks`` (record marks included), and the change made
    (None: the reply as it came)."""

    chunks: list[bytes]
    mutation: Mutation | None = None
    site: str | None = None


def frame(record: bytes) -> bytes:
    """``record`` as one last fragment."""
    return _WORD.pack(RM_LAST_FRAGMENT | len(record)) + record


@dataclass
class ReplyMutator:
    """Decides, reply by reply, what the client gets. ``rate``: the share of replies changed at random
    (by one of ``mutations``); ``rules`` go first. ``counts`` tells what was done."""

    seed: int = 0
    rate: float = 0.0
    mutations: Sequence[Mutation] = ALL
    rules: list[Rule] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        # xid -> the operation numbers it asks, and the XIDs of recent calls (an XID "no call has" is
        # none of these); both in order, the oldest let go past XIDS_KEPT
        self._calls: dict[int, list[int]] = {}
        self._xids: dict[int, None] = {}

    # -- what the client asks -------------------------------------------------------------------------
    def call(self, record: bytes | memoryview) -> None:
        """A record the client sent."""
        try:
            u = Unpacker(record)
            xid = u.uint32()
            if u.uint32() != rpcdef.CALL:
                return
            _remember(self._xids, xid, None)
            body = rpcdef.decode_call_body(u)
            ops: list[int] = []
            if body.prog == c.NFS4_PROGRAM and body.proc == c.NFSPROC4_COMPOUND:
                ops = [op.OPNUM for op in decode_compound_args(u).argarray]
            _remember(self._calls, xid, ops)
        except XdrError:
            return

    # -- what the client gets -------------------------------------------------------------------------
    def reply(self, record: bytes) -> Decision:
        """The bytes the client gets for ``record``, a message the server sent."""
        self.counts["messages"] += 1
        if len(record) < 2 * WORD or _WORD.unpack_from(record, WORD)[0] != rpcdef.REPLY:
            return Decision([frame(record)])  # (the server's callbacks pass as they are)
        xid = _WORD.unpack_from(record)[0]
        ops = self._calls.pop(xid, [])
        self.counts["replies"] += 1
        rule = next((r for r in self.rules if r.count > 0 and (r.op is None or r.op in ops)), None)
        if rule is not None:
            sites = [s for s in self.sites(record, ops)
                     if s.mutation is rule.mutation and (rule.site is None or rule.site in s.name)]
            if sites:
                rule.count -= 1
                return self._apply(record, self.rng.choice(sites), rule.value)
        if self.rate <= 0 or self.rng.random() >= self.rate:
            return Decision([frame(record)])
        sites = [s for s in self.sites(record, ops) if s.mutation in self.mutations]
        by_kind: dict[Mutation, list[Site]] = {}
        for s in sites:
            by_kind.setdefault(s.mutation, []).append(s)
        if not by_kind:
            return Decision([frame(record)])
        kind = self.rng.choice(sorted(by_kind, key=lambda m: m.value))  # (each class as likely)
        return self._apply(record, self.rng.choice(by_kind[kind]), None)

    # -- where a reply can change ---------------------------------------------------------------------
    def sites(self, record: bytes, ops: Sequence[int] = ()) -> list[Site]:
        """Every place ``record`` (a reply) can be changed."""
        out = [Site(Mutation.TRAILING, "after the reply"), Site(Mutation.XID, "xid"),
               Site(Mutation.DUPLICATE, "the whole reply")]
        out += [Site(Mutation.RECORD_MARK, f"record mark: {kind}") for kind in _MARKS]
        if len(record) > 2 * WORD:
            out.append(Site(Mutation.TRUNCATE, "the end of the reply"))
        u = Unpacker(record)
        try:
            u.uint32()  # xid
            out.append(Site(Mutation.HEADER, "msg_type", u.pos))
            u.uint32()
            out.append(Site(Mutation.HEADER, "reply_stat", u.pos))
            if u.uint32() != rpcdef.MSG_ACCEPTED:
                return out
            u.uint32()  # (the verifier's flavor: AUTH_NONE's or another, a client cannot tell it wrong)
            out.append(Site(Mutation.HEADER, "verifier length", u.pos))
            u.opaque()
            out.append(Site(Mutation.HEADER, "accept_stat", u.pos))
            if u.uint32() != rpcdef.SUCCESS or not ops:
                return out
            out.append(Site(Mutation.HEADER, "COMPOUND status", u.pos))
            u.int32()
            out.append(Site(Mutation.HEADER, "tag length", u.pos))
            out.append(Site(Mutation.LENGTH, "tag length", u.pos))
            u.string()
            out.append(Site(Mutation.HEADER, "result count", u.pos))
            out.append(Site(Mutation.LENGTH, "result count", u.pos))
            for i in range(u.uint32()):
                self._result_sites(u, i, out)
        except XdrError:
            return out  # (a reply the server itself got wrong: the sites found before the fault)
        return out

    def _result_sites(self, u: Unpacker, i: int, out: list[Site]) -> None:
        out.append(Site(Mutation.HEADER, f"result {i} opnum", u.pos))
        opnum = u.uint32()
        out.append(Site(Mutation.HEADER, f"result {i} status", u.pos))
        out.append(Site(Mutation.STATUS, f"result {i} failed", u.pos))
        status = u.int32()
        spec = nfs_resop4.results.get(opnum)
        if spec is None:
            raise XdrError("unknown operation")
        arm = spec.arm(status)
        if arm is None:
            return
        name = c.nfs_opnum4(opnum).name.removeprefix("OP_")
        start = u.pos
        fields: list[tuple[str, int, XdrType[Any]]] = []
        _walk(arm, u, name, fields)
        for fname, at, ft in fields:
            if isinstance(ft, VarOpaque | String | Bulk | Array) and not (isinstance(ft, Array) and ft.fixed):
                out.append(Site(Mutation.LENGTH, fname, at))
            if fname.endswith(".ca_maxrequests"):
                out.append(Site(Mutation.LENGTH, fname, at))
            if opnum == c.OP_SEQUENCE and fname.split(".")[-1] in ("sr_sequenceid", "sr_slotid"):
                out.append(Site(Mutation.HEADER, fname, at))
            if opnum == c.OP_READ and fname == "READ.data" and _WORD.unpack_from(u.view, at)[0] > 0:
                out.append(Site(Mutation.READ_SHORT, fname, at))
            if fname in ("READ.eof", "READDIR.reply.eof") and _WORD.unpack_from(u.view, at)[0] == 1:
                out.append(Site(Mutation.EOF, fname, at))
            if fname == "WRITE.count":
                out.append(Site(Mutation.COUNT, fname, at))
            if fname.endswith(".attr_vals"):
                mask_at = next(a for n, a, _ in fields if n == fname.removesuffix("attr_vals") + "attrmask")
                vals = Unpacker(u.view, at, u.end)
                n = vals.uint32()
                self._attr_sites(u.view, mask_at, vals.pos, vals.pos + n, fname, out)
        if opnum == c.OP_READDIR and status == c.NFS4_OK:
            self._entry_sites(u, start, out)

    def _attr_sites(self, view: Any, mask_at: int, start: int, end: int, name: str, out: list[Site]) -> None:
        """The sites of the attribute values ``view[start:end]`` whose bitmap lies at ``mask_at``."""
        nums = attrs_in(bitmap4.unpack(Unpacker(view, mask_at, end)))
        v = Unpacker(view, start, end)
        try:
            for num in nums:
                d = ATTRS.get(num)
                if d is None:
                    return
                at = v.pos
                d.xdr.unpack(v)
                if num in _TIME_ATTRS:
                    out.append(Site(Mutation.NSECONDS, f"{name} {d.name}.nseconds", at + _NSECONDS_AT))
                    out.append(Site(Mutation.VALUE, f"{name} {d.name}.seconds", at, wide=True))
                elif d.name in _VALUE_ATTRS:
                    out.append(Site(Mutation.VALUE, f"{name} {d.name}", at, wide=v.pos - at == HYPER))
                elif d.name in _OWNER_ATTRS and _WORD.unpack_from(view, at)[0] > 0:
                    out.append(Site(Mutation.VALUE, f"{name} {d.name}", at, text=True))
        except XdrError:
            return

    def _entry_sites(self, u: Unpacker, start: int, out: list[Site]) -> None:
        """A READDIR reply's entries: their cookies, names and attribute values."""
        try:
            listed = READDIR4resok.XDR.decode(u.view[start:u.pos]).reply.entries
        except XdrError:
            return
        if not isinstance(listed, DirList):
            return
        entries_at = start + c.NFS4_VERIFIER_SIZE  # (after the cookie verifier: where DirList counts from)
        for k, (_, name_at, _, mask, vals_at, vals_end) in enumerate(listed.spans):
            # (an entry's cookie, then its name's length word, lie before its name)
            at = entries_at + name_at - HYPER - WORD
            if k:
                earlier = listed.spans[self.rng.randrange(k)][0]
                out.append(Site(Mutation.COOKIE, f"READDIR entry {k} cookie", at, wide=True, value=earlier))
            out.append(Site(Mutation.VALUE, f"READDIR entry {k} cookie", at, wide=True))
            for kind in _BAD_NAMES:
                out.append(Site(Mutation.NAME, f"READDIR entry {k} name: {kind}", at + HYPER, text=True))
            # (the values' bitmap4, its length word first, then the values' length word lie before them)
            mask_at = entries_at + vals_at - WORD - WORD * len(mask) - WORD
            self._attr_sites(u.view, mask_at, entries_at + vals_at, entries_at + vals_end, f"READDIR entry {k}", out)

    # -- changing it --------------------------------------------------------------------------------
    def _apply(self, record: bytes, site: Site, value: int | None) -> Decision:
        rng = self.rng
        m = site.mutation
        self.counts[m.value] += 1
        self.counts["mutated"] += 1
        b = bytearray(record)
        if m is Mutation.TRAILING:
            return Decision([frame(bytes(b) + rng.randbytes(WORD * rng.randint(1, 64)))], m, site.name)
        if m is Mutation.TRUNCATE:
            return Decision([frame(bytes(b[: rng.randint(2 * WORD, len(b) - 1)]))], m, site.name)
        if m is Mutation.DUPLICATE:
            return Decision([frame(record), frame(record)], m, site.name)
        if m is Mutation.XID:
            xid = rng.getrandbits(32)
            while xid in self._xids:
                xid = rng.getrandbits(32)
            _WORD.pack_into(b, 0, xid)
            return Decision([frame(bytes(b))], m, site.name)
        if m is Mutation.RECORD_MARK:
            n = len(record)
            kind = site.name.split(": ", 1)[1]
            mark = {
                "huge": RM_LAST_FRAGMENT | (RM_LENGTH_MASK - rng.randrange(1 << 16)),
                "not last": n,
                "shorter": RM_LAST_FRAGMENT | max(0, n - WORD * rng.randint(1, 4)),
                "longer": RM_LAST_FRAGMENT | (n + WORD * rng.randint(1, 4)),
            }[kind]
            return Decision([_WORD.pack(mark) + record], m, site.name)
        if site.text:
            return self._apply_text(b, site)
        if m is Mutation.STATUS:
            return self._apply_failure(b, site, value)
        word = _HYPER if site.wide else _WORD
        old = word.unpack_from(b, site.offset)[0]
        new = value if value is not None else site.value if site.value is not None else self._new_value(site, old, len(b))
        new &= (1 << 8 * word.size) - 1
        word.pack_into(b, site.offset, new)
        return Decision([frame(bytes(b))], m, f"{site.name}: {old} -> {new}")

    def _apply_failure(self, b: bytearray, site: Site, value: int | None) -> Decision:
        """Result ``i`` (the site's) fails with ``value`` (or one of _FAILURES), as a server makes such a
        reply: the COMPOUND's status that one, the result count i + 1, nothing after the status."""
        status = value if value is not None else self.rng.choice(_FAILURES)
        i = int(site.name.split()[1])
        u = Unpacker(bytes(b))
        u.uint32(), u.uint32(), u.uint32(), u.uint32()  # xid, REPLY, MSG_ACCEPTED, the verifier's flavor
        u.opaque()
        u.uint32()  # accept_stat
        compound_at = u.pos
        u.int32()
        u.string()  # tag
        del b[site.offset + WORD :]
        _WORD.pack_into(b, site.offset, status & 0xFFFFFFFF)
        _WORD.pack_into(b, compound_at, status & 0xFFFFFFFF)
        _WORD.pack_into(b, u.pos, i + 1)
        return Decision([frame(bytes(b))], Mutation.STATUS, f"{site.name}: {c.nfsstat4(status).name}")

    def _apply_text(self, b: bytearray, site: Site) -> Decision:
        """A string's bytes changed: an owner in place (its length kept: the attribute values' length
        stays right), a name put in its place (the entry's length changes: nothing counts it)."""
        rng = self.rng
        n = _WORD.unpack_from(b, site.offset)[0]
        at = site.offset + WORD
        old = bytes(b[at : at + n])
        if site.mutation is Mutation.NAME:
            kind = site.name.rsplit(": ", 1)[1]
            k = rng.randrange(n + 1)
            new = {
                "not UTF-8": old[:k] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80")) + old[k:],
                "slash": old[:k] + b"/" + old[k:],
                "one dot": b".",
                "two dots": b"..",
                "empty": b"",
            }[kind]
            b[site.offset : at + n + (-n & 3)] = _WORD.pack(len(new)) + new + bytes(-len(new) & 3)
        else:
            k = rng.randrange(n)
            new = rng.choice((old[:k] + b"\xff" + old[k + 1 :], old[:k] + b"/" + old[k + 1 :], b"9" * n,
                              b"@" * n))
            b[at : at + n] = new
        return Decision([frame(bytes(b))], site.mutation, f"{site.name}: {old!r} -> {new!r}")

    def _new_value(self, site: Site, old: int, size: int) -> int:
        rng = self.rng
        m = site.mutation
        if m is Mutation.VALUE:
            bits = 64 if site.wide else 32
            return rng.choice((0, 1, 1 << (bits - 2), (1 << bits) - 1, old ^ (1 << (bits - 1)),
                               old ^ (1 << rng.randrange(bits)), rng.getrandbits(bits)))
        if m is Mutation.EOF:
            return 0
        if m is Mutation.COUNT:
            return rng.choice((0, rng.randrange(old) if old else 1, old + 1, old + rng.randrange(1, 1 << 20),
                               0xFFFFFFFF))
        if m is Mutation.LENGTH:
            return rng.choice((0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, size + WORD * rng.randint(1, 64)))
        if m is Mutation.READ_SHORT:
            # at least a word shorter with its padding: the rest of the data is left in the record
            # (a shorter length within the same word would leave data bytes where padding goes,
            # which only shows when those bytes are not zero)
            return rng.randint(0, max(0, old + (-old & 3) - WORD))
        if m is Mutation.NSECONDS:
            return rng.randint(c.NFS4_NSECONDS_MAX + 1, 0xFFFFFFFF)
        if site.name == "accept_stat":
            return rng.choice([int(a) for a in rpcdef.accept_stat if a != rpcdef.SUCCESS])
        if site.name.endswith("status"):
            unknown = (-1, max(c.nfsstat4) + 1)
            return rng.choice([s for s in (c.NFS4_OK, c.NFS4ERR_IO, c.NFS4ERR_NOENT, c.NFS4ERR_SERVERFAULT,
                                           c.NFS4ERR_DELAY, c.NFS4ERR_BADSESSION, *unknown) if s != old])
        # another value: one bit flipped, one more or less, or anything
        others = [v for v in (old ^ (1 << rng.randrange(32)), old + 1, old - 1, rng.getrandbits(32))
                  if v != old and 0 <= v <= 0xFFFFFFFF]
        return rng.choice(others)


XIDS_KEPT = 1 << 16  # calls remembered (a call whose reply never comes is let go in time)


def _remember(kept: dict[int, Any], xid: int, value: Any) -> None:
    kept[xid] = value
    if len(kept) > XIDS_KEPT:
        del kept[next(iter(kept))]


def _walk(t: XdrType[Any], u: Unpacker, at: str, out: list[tuple[str, int, XdrType[Any]]]) -> None:
    """Decode ``t`` from ``u``, noting the name, offset and type of every struct field on the way."""
    if isinstance(t, StructType):
        for name, ft in t.fields:
            out.append((f"{at}.{name}", u.pos, ft))
            _walk(ft, u, f"{at}.{name}", out)
    else:
        t.unpack(u)


def _field_offset(t: StructType, name: str) -> int:
    """Where field ``name`` of the fixed-size struct ``t`` starts."""
    fields: list[tuple[str, int, XdrType[Any]]] = []
    _walk(t, Unpacker(bytes(64)), "", fields)
    return next(at for n, at, _ in fields if n == f".{name}")


_NSECONDS_AT = _field_offset(nfstime4.XDR, "nseconds")
