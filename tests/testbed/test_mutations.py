"""The mutating proxy's decisions, without sockets: where a reply can change, that each change is made
as described, that the same seed makes the same changes, and that every change of a reply's content is
one a client keeping the protocol's rules sees (so that the fuzzing's "right or an error" is fair)."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from pynfsrdma._client.attributes import STAT_BITMAP, FileAttrs
from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.attrs import encode_fattr4
from pynfsrdma._proto.nfs4.compound import (
    COMPOUND4args,
    COMPOUND4res,
    ResOp,
    check_compound_res,
    decode_compound_res,
    encode_compound_args,
    encode_compound_res,
)
from pynfsrdma._proto.nfs4.types import (
    GETATTR4args,
    GETATTR4resok,
    PUTFH4args,
    READ4args,
    READ4resok,
    READDIR4args,
    READDIR4resok,
    SEQUENCE4args,
    SEQUENCE4resok,
    dirlist4,
    entry4,
    fattr4,
    nfstime4,
    stateid4,
)
from pynfsrdma._proto.rpc import RM_LAST_FRAGMENT, RM_LENGTH_MASK
from pynfsrdma._rpc.auth import auth_sys
from pynfsrdma._testbed.mutations import VALUES, Mutation, ReplyMutator, Rule, frame
from pynfsrdma._xdr import Packer, Unpacker, XdrError

SESSION = bytes(range(16))
XID = 0x1234
WORD = struct.Struct(">I")


def sequenced(*ops: Any) -> list[Any]:
    return [SEQUENCE4args(SESSION, 5, 2, 2, False), *ops]


def call(ops: list[Any]) -> bytes:
    p = Packer()
    rpcdef.pack_call_header(p, XID, c.NFS4_PROGRAM, c.NFS_V4, c.NFSPROC4_COMPOUND, auth_sys(0, 0).encoded)
    encode_compound_args(p, COMPOUND4args("", 1, ops))
    return p.getvalue()


def reply(results: list[ResOp]) -> bytes:
    p = Packer()
    rpcdef.pack_accepted_reply_header(p, XID)
    encode_compound_res(p, COMPOUND4res(results[-1].status, "", results))
    return p.getvalue()


SEQ = ResOp(c.OP_SEQUENCE, 0, SEQUENCE4resok(SESSION, 5, 2, 63, 63, 0))
STAT = encode_fattr4({c.FATTR4_TYPE: c.NF4REG, c.FATTR4_FILEID: 9, c.FATTR4_SIZE: 3, c.FATTR4_MODE: 0o644,
                      c.FATTR4_OWNER: "1000", c.FATTR4_TIME_MODIFY: nfstime4(7, 500)})
READ_OPS = sequenced(PUTFH4args(b"fh"), READ4args(stateid4(0, bytes(12)), 0, 4096))
READ_REPLY = reply([SEQ, ResOp(c.OP_PUTFH, 0), ResOp(c.OP_READ, 0, READ4resok(True, b"abcdefgh" * 100))])
GETATTR_OPS = sequenced(PUTFH4args(b"fh"), GETATTR4args(STAT_BITMAP))
GETATTR_REPLY = reply([SEQ, ResOp(c.OP_PUTFH, 0), ResOp(c.OP_GETATTR, 0, GETATTR4resok(STAT))])
READDIR_OPS = sequenced(PUTFH4args(b"fh"), READDIR4args(0, bytes(8), 8192, 8192, []))
READDIR_REPLY = reply([SEQ, ResOp(c.OP_PUTFH, 0), ResOp(c.OP_READDIR, 0, READDIR4resok(
    bytes(8), dirlist4([entry4(k, f"name{k}", fattr4([], b"")) for k in (3, 4, 5, 6)], True)))])
CASES = [(READ_OPS, READ_REPLY), (GETATTR_OPS, GETATTR_REPLY), (READDIR_OPS, READDIR_REPLY)]


def opnums(ops: list[Any]) -> list[int]:
    return [op.OPNUM for op in ops]


def records(chunks: list[bytes]) -> list[bytes]:
    """The records a client reads from these bytes (the stream ends after them)."""
    data = b"".join(chunks)
    out = []
    while len(data) >= 4:
        (mark,) = WORD.unpack_from(data)
        n = mark & RM_LENGTH_MASK
        out.append(data[4 : 4 + n])
        data = data[4 + n :]
    return out


def client_takes(ops: list[Any], record: bytes) -> None:
    """What the client makes of a reply (raises what it raises): the RPC header accepted, the COMPOUND
    decoded to its end and checked against the request, SEQUENCE's ids matched, attributes decoded."""
    u = Unpacker(record)
    assert u.uint32() == XID and u.uint32() == rpcdef.REPLY
    h = rpcdef.unpack_reply_header(u)
    if h.accept != rpcdef.SUCCESS:
        raise XdrError(f"an RPC error reply ({rpcdef.describe(h)})")
    res = decode_compound_res(u)
    u.done()
    check_compound_res(ops, res)
    seq = res.resarray[0].res
    if (seq.sr_sessionid, seq.sr_sequenceid, seq.sr_slotid) != (SESSION, 5, 2):
        raise XdrError("SEQUENCE does not match")
    for r in res.resarray:
        if r.opnum == c.OP_GETATTR:
            FileAttrs.from_fattr4(r.res.obj_attributes)


@pytest.mark.parametrize(("ops", "record"), CASES)
def test_the_replies_as_they_come_are_taken(ops: list[Any], record: bytes) -> None:
    client_takes(ops, record)


def test_where_a_reply_can_change() -> None:
    m = ReplyMutator()
    names = {(s.mutation, s.name) for s in m.sites(READ_REPLY, opnums(READ_OPS))}
    for want in [
        (Mutation.HEADER, "msg_type"), (Mutation.HEADER, "reply_stat"), (Mutation.HEADER, "accept_stat"),
        (Mutation.HEADER, "COMPOUND status"), (Mutation.HEADER, "result count"),
        (Mutation.HEADER, "result 2 opnum"), (Mutation.HEADER, "result 2 status"),
        (Mutation.HEADER, "SEQUENCE.sr_slotid"), (Mutation.LENGTH, "READ.data"), (Mutation.READ_SHORT, "READ.data"),
        (Mutation.RECORD_MARK, "record mark: not last"), (Mutation.XID, "xid"), (Mutation.TRUNCATE, "the end of the reply"),
    ]:
        assert want in names
    kinds = {s.mutation for s in m.sites(GETATTR_REPLY, opnums(GETATTR_OPS))}
    assert Mutation.NSECONDS in kinds and Mutation.READ_SHORT not in kinds
    assert Mutation.COOKIE in {s.mutation for s in m.sites(READDIR_REPLY, opnums(READDIR_OPS))}
    assert {s.mutation for s in m.sites(READ_REPLY)} == {  # (a reply to nothing we know: its framing only)
        Mutation.HEADER, Mutation.TRAILING, Mutation.TRUNCATE, Mutation.RECORD_MARK, Mutation.XID, Mutation.DUPLICATE
    }


@pytest.mark.parametrize(("ops", "record"), CASES)
def test_every_change_of_a_replys_content_is_one_a_client_sees(ops: list[Any], record: bytes) -> None:
    """Each site, changed a few times with the values the mutator picks: the client refuses the reply
    (but for the wrong values of :data:`VALUES`, well-formed, which no client can tell)."""
    m = ReplyMutator(seed=3)
    framing = (Mutation.RECORD_MARK, Mutation.XID, Mutation.DUPLICATE)
    for site in m.sites(record, opnums(ops)):
        if site.mutation in framing or site.mutation in VALUES:
            continue
        for _ in range(8):
            m.rules = [Rule(site.mutation, site=site.name, count=1)]
            m.call(call(ops))
            d = m.reply(record)
            assert d.mutation is site.mutation and d.site is not None and d.site.startswith(site.name)
            (changed,) = records(d.chunks)
            with pytest.raises((XdrError, AssertionError)):
                client_takes(ops, changed)


def test_the_framing_changes() -> None:
    m = ReplyMutator(seed=5)

    def one(mutation: Mutation, site: str | None = None) -> list[bytes]:
        m.rules = [Rule(mutation, site=site)]
        m.call(call(READ_OPS))
        return m.reply(READ_REPLY).chunks

    assert one(Mutation.DUPLICATE) == [frame(READ_REPLY)] * 2
    (moved,) = records(one(Mutation.XID))
    assert moved[4:] == READ_REPLY[4:] and WORD.unpack_from(moved)[0] != XID
    (longer,) = records(one(Mutation.TRAILING))
    assert longer.startswith(READ_REPLY) and len(longer) > len(READ_REPLY)
    (shorter,) = records(one(Mutation.TRUNCATE))
    assert READ_REPLY.startswith(shorter) and len(shorter) < len(READ_REPLY)
    (huge,) = one(Mutation.RECORD_MARK, "huge")
    assert WORD.unpack_from(huge)[0] & RM_LENGTH_MASK > 1 << 30
    (not_last,) = one(Mutation.RECORD_MARK, "not last")
    assert WORD.unpack_from(not_last)[0] == len(READ_REPLY)  # (no RM_LAST_FRAGMENT)
    (off,) = one(Mutation.RECORD_MARK, "shorter")
    assert WORD.unpack_from(off)[0] & RM_LAST_FRAGMENT and WORD.unpack_from(off)[0] & RM_LENGTH_MASK < len(READ_REPLY)


def test_a_shortened_read_leaves_at_least_a_word_of_its_data_in_the_record() -> None:
    """(A length shortened within its last word would leave data where padding goes: a client sees
    that only when those bytes are not zero.)"""
    m = ReplyMutator(seed=9)
    for _ in range(50):
        m.rules = [Rule(Mutation.READ_SHORT)]
        m.call(call(READ_OPS))
        (changed,) = records(m.reply(READ_REPLY).chunks)
        with pytest.raises(XdrError, match="trailing garbage"):
            client_takes(READ_OPS, changed)


def test_the_same_seed_makes_the_same_changes() -> None:
    def run(seed: int) -> list[bytes]:
        m = ReplyMutator(seed=seed, rate=0.5)
        out = []
        for _ in range(40):
            m.call(call(READ_OPS))
            out += m.reply(READ_REPLY).chunks
        assert m.counts["replies"] == 40 and 5 < m.counts["mutated"] < 35
        return out

    assert run(1) == run(1) != run(2)


def test_a_rule_waits_for_its_operation_and_callbacks_pass() -> None:
    m = ReplyMutator(rules=[Rule(Mutation.HEADER, c.OP_GETATTR, "accept_stat", rpcdef.accept_stat.SYSTEM_ERR)])
    m.call(call(READ_OPS))
    assert m.reply(READ_REPLY).mutation is None  # (a READ: not the rule's)
    m.call(call(GETATTR_OPS))
    d = m.reply(GETATTR_REPLY)
    assert d.mutation is Mutation.HEADER and d.site == "accept_stat: 0 -> 5"
    callback = Packer()
    rpcdef.pack_call_header(callback, 7, c.NFS4_CALLBACK, c.NFS_CB, c.CB_NULL, b"\0" * 8)
    assert m.reply(callback.getvalue()).chunks == [frame(callback.getvalue())]


def changed_results(ops: list[Any], record: bytes, rule: Rule) -> tuple[str, list[ResOp]]:
    m = ReplyMutator(seed=11, rules=[rule])
    m.call(call(ops))
    d = m.reply(record)
    assert d.mutation is rule.mutation and d.site is not None
    (changed,) = records(d.chunks)
    u = Unpacker(changed)
    u.uint32(), u.uint32()
    rpcdef.unpack_reply_header(u)
    return d.site, decode_compound_res(u).resarray


def test_the_value_changes_leave_the_reply_well_formed_and_say_what_they_did() -> None:
    site, res = changed_results(GETATTR_OPS, GETATTR_REPLY, Rule(Mutation.VALUE, site="size", value=1 << 62))
    assert site == f"GETATTR.obj_attributes.attr_vals size: 3 -> {1 << 62}"
    client_takes(GETATTR_OPS, reply(res))
    assert FileAttrs.from_fattr4(res[2].res.obj_attributes).size == 1 << 62
    m = ReplyMutator(seed=1)
    names = {s.name for s in m.sites(GETATTR_REPLY, opnums(GETATTR_OPS)) if s.mutation is Mutation.VALUE}
    assert names == {f"GETATTR.obj_attributes.attr_vals {a}" for a in ("size", "mode", "owner", "time_modify.seconds")}
    for _ in range(20):  # (an owner keeps its length, so the attribute values stay well-formed)
        site, res = changed_results(GETATTR_OPS, GETATTR_REPLY, Rule(Mutation.VALUE, site="owner"))
        client_takes(GETATTR_OPS, reply(res))
    site, res = changed_results(READ_OPS, READ_REPLY, Rule(Mutation.EOF))
    assert site == "READ.eof: 1 -> 0" and res[2].res.eof is False
    site, res = changed_results(READDIR_OPS, READDIR_REPLY, Rule(Mutation.EOF))
    assert site == "READDIR.reply.eof: 1 -> 0" and res[2].res.reply.eof is False
    site, res = changed_results(READDIR_OPS, READDIR_REPLY, Rule(Mutation.VALUE, site="entry 2 cookie", value=77))
    assert [e.cookie for e in res[2].res.reply.entries] == [3, 4, 77, 6]


@pytest.mark.parametrize("kind", ["not UTF-8", "slash", "one dot", "two dots", "empty"])
def test_a_name_no_file_can_have_is_refused_by_the_client(kind: str) -> None:
    m = ReplyMutator(seed=2)
    for _ in range(10):
        m.rules = [Rule(Mutation.NAME, site=f"entry 1 name: {kind}")]
        m.call(call(READDIR_OPS))
        d = m.reply(READDIR_REPLY)
        assert d.site is not None and d.site.startswith(f"READDIR entry 1 name: {kind}: b'name4' -> ")
        (changed,) = records(d.chunks)
        with pytest.raises(XdrError, match=r"directory entry name .* is not"):
            client_takes(READDIR_OPS, changed)


def test_a_result_made_a_failure_is_a_reply_a_server_could_send() -> None:
    site, res = changed_results(GETATTR_OPS, GETATTR_REPLY,
                                Rule(Mutation.STATUS, site="result 0 failed", value=c.NFS4ERR_DELAY))
    assert site == "result 0 failed: NFS4ERR_DELAY"
    assert [(r.opnum, r.status) for r in res] == [(c.OP_SEQUENCE, c.NFS4ERR_DELAY)]
    m = ReplyMutator(seed=4)
    for _ in range(20):
        m.rules = [Rule(Mutation.STATUS, site="result 2 failed")]
        m.call(call(READ_OPS))
        (changed,) = records(m.reply(READ_REPLY).chunks)
        u = Unpacker(changed)
        u.uint32(), u.uint32()
        rpcdef.unpack_reply_header(u)
        res = decode_compound_res(u)
        u.done()
        check_compound_res(READ_OPS, res)  # (well-formed: status, count and results agree)
        assert [r.opnum for r in res.resarray] == opnums(READ_OPS) and res.status == res.resarray[2].status != 0
