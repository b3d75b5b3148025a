"""The backchannel's answers to CB_COMPOUND, without I/O: decoded calls in, encoded replies out."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto.nfs4 import callback as cb
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.types import lock_owner4, stateid4
from pynfsrdma._session.backchannel import Backchannel
from pynfsrdma._xdr import Packer, Unpacker

SID = b"S" * 16


def decode(reply: bytes) -> Any:
    return cb.decode_cb_compound_res(Unpacker(reply))


def seq(seqid: int, slot: int = 0, sid: bytes = SID) -> Any:
    return cb.CB_SEQUENCE4args(sid, seqid, slot, 0, False, [])


def make(nursery: trio.Nursery, slots: int = 2) -> tuple[Backchannel, list[Any]]:
    session = SimpleNamespace(sessionid=SID)
    bc = Backchannel(nursery, lambda: session)  # type: ignore[arg-type, return-value]
    bc.reset(slots)
    recalls: list[Any] = []

    async def on_recall(fh: bytes, stateid: Any, truncate: bool) -> None:
        recalls.append((fh, stateid, truncate))

    bc.on_recall = on_recall
    return bc, recalls


async def test_recall_is_acknowledged_and_the_delegation_returned_in_the_background() -> None:
    async with trio.open_nursery() as n:
        bc, recalls = make(n)
        sid = stateid4(1, b"x" * 12)
        args = cb.CB_COMPOUND4args("t", 1, 0, [seq(1), cb.CB_RECALL4args(sid, False, b"FH")])
        res = decode(await bc.compound(args))
        assert res.status == c.NFS4_OK and res.tag == "t"
        assert [r.opnum for r in res.resarray] == [c.OP_CB_SEQUENCE, c.OP_CB_RECALL]
        assert res.resarray[0].res.csr_sequenceid == 1
        await trio.testing.wait_all_tasks_blocked()
        assert recalls == [(b"FH", sid, False)]


async def test_a_retry_gets_the_cached_reply_and_a_gap_is_misordered() -> None:
    async with trio.open_nursery() as n:
        bc, recalls = make(n)
        args = cb.CB_COMPOUND4args("", 1, 0, [seq(1), cb.CB_RECALL4args(stateid4(1, bytes(12)), True, b"F")])
        first = await bc.compound(args)
        again = await bc.compound(args)  # same slot and seqid: replay, not executed twice
        assert again == first
        await trio.testing.wait_all_tasks_blocked()
        assert len(recalls) == 1
        gap = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(5)])))
        assert gap.status == c.NFS4ERR_SEQ_MISORDERED


async def test_wrong_session_bad_slot_and_missing_sequence() -> None:
    async with trio.open_nursery() as n:
        bc, _ = make(n, slots=1)
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(1, sid=b"Z" * 16)])))
        assert r.status == c.NFS4ERR_BADSESSION
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(1, slot=3)])))
        assert r.status == c.NFS4ERR_BADSLOT
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [cb.CB_RECALL_ANY4args(0, [1])])))
        assert r.status == c.NFS4ERR_OP_NOT_IN_SESSION
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 0, 0, [seq(1)])))
        assert r.status == c.NFS4ERR_MINOR_VERS_MISMATCH


async def test_notify_lock_is_answered_and_wakes_whoever_waits() -> None:
    """CB_NOTIFY_LOCK (RFC 8881 20.11) is a hint: NFS4_OK whether a waiter is there or not."""
    async with trio.open_nursery() as n:
        bc, _ = make(n)
        owner = lock_owner4(42, b"lock-7")
        notified: list[Any] = []
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(1), cb.CB_NOTIFY_LOCK4args(b"FH", owner)])))
        assert r.status == c.NFS4_OK  # (no hook yet: nobody waits)
        bc.on_notify_lock = lambda fh, lo: notified.append((fh, lo))
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(2), cb.CB_NOTIFY_LOCK4args(b"FH", owner)])))
        assert r.status == c.NFS4_OK
        assert [x.opnum for x in r.resarray] == [c.OP_CB_SEQUENCE, c.OP_CB_NOTIFY_LOCK]
        assert notified == [(b"FH", owner)]


async def test_getattr_without_a_delegation_is_badhandle() -> None:
    async with trio.open_nursery() as n:
        bc, _ = make(n)
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(1), cb.CB_GETATTR4args(b"F", [1 << 3])])))
        assert r.status == c.NFS4ERR_BADHANDLE


async def test_cb_null_and_unknown_procedures_over_rpc() -> None:
    async with trio.open_nursery() as n:
        bc, _ = make(n)

        async def call(prog: int, proc: int) -> Unpacker:
            body = rpcdef.call_body(2, prog, 1, proc, rpcdef.NULL_AUTH, rpcdef.NULL_AUTH)
            reply = await bc.handle_rpc(7, body, Unpacker(b""))
            assert reply is not None
            u = Unpacker(reply.getvalue())
            assert (u.uint32(), u.uint32()) == (7, rpcdef.REPLY)
            return u

        h = rpcdef.unpack_reply_header(await call(c.CB_PROGRAM, c.CB_NULL))
        assert h.accept == rpcdef.SUCCESS
        h = rpcdef.unpack_reply_header(await call(c.CB_PROGRAM, 9))
        assert h.accept == rpcdef.accept_stat.PROC_UNAVAIL
        h = rpcdef.unpack_reply_header(await call(12345, 0))
        assert h.accept == rpcdef.accept_stat.PROG_UNAVAIL


async def test_a_malformed_cb_compound_is_garbage_args() -> None:
    async with trio.open_nursery() as n:
        bc, _ = make(n)
        body = rpcdef.call_body(2, c.CB_PROGRAM, 1, c.CB_COMPOUND, rpcdef.NULL_AUTH, rpcdef.NULL_AUTH)
        p = Packer()
        p.uint32(0xFFFFFFFF)  # a tag length far past the end
        reply = await bc.handle_rpc(9, body, Unpacker(p.getvalue()))
        assert reply is not None
        u = Unpacker(reply.getvalue())
        u.uint32(), u.uint32()
        assert rpcdef.unpack_reply_header(u).accept == rpcdef.accept_stat.GARBAGE_ARGS


async def test_layoutrecall_with_no_layouts_held_is_nomatching_layout_not_notsupp() -> None:
    async with trio.open_nursery() as n:
        bc, _ = make(n)
        recall = cb.CB_LAYOUTRECALL4args(c.LAYOUT4_BLOCK_VOLUME, c.LAYOUTIOMODE4_ANY, False,
                                         (c.LAYOUTRECALL4_ALL, None))
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(1), recall])))
        assert r.status == c.NFS4ERR_NOMATCHING_LAYOUT
        assert [x.opnum for x in r.resarray] == [c.OP_CB_SEQUENCE, c.OP_CB_LAYOUTRECALL]


async def test_layoutrecall_is_answered_by_the_layouts_held() -> None:
    from pynfsrdma._client.layouts import RW, LayoutCache, Segment

    async with trio.open_nursery() as n:
        bc, _ = make(n)
        cache = LayoutCache(c.LAYOUT4_BLOCK_VOLUME)
        cache.granted(b"FH", stateid4(1, b"L" * 12), False,
                      [Segment(0, c.NFS4_UINT64_MAX, RW, c.LAYOUT4_BLOCK_VOLUME, None)])
        returns: list[Any] = []

        def on_layoutrecall(args: Any) -> int:
            answer = cache.recall(args.clora_type, args.clora_iomode, args.clora_recall)
            returns.extend(answer.returns)
            return answer.status

        bc.on_layoutrecall = on_layoutrecall
        file = cb.layoutrecall_file4(b"FH", 0, c.NFS4_UINT64_MAX, stateid4(2, b"L" * 12))
        recall = cb.CB_LAYOUTRECALL4args(c.LAYOUT4_BLOCK_VOLUME, c.LAYOUTIOMODE4_ANY, False,
                                         (c.LAYOUTRECALL4_FILE, file))
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(1), recall])))
        assert r.status == c.NFS4_OK
        assert [(x.fh, x.stateid.seqid) for x in returns] == [(b"FH", 2)]
        # sent again while the return is under way (nfsd does, every 10 ms): it is coming, and no
        # second return starts
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(2), recall])))
        assert r.status == c.NFS4_OK and len(returns) == 1
        cache.returned(returns[0], None)
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(3), recall])))
        assert r.status == c.NFS4ERR_NOMATCHING_LAYOUT  # returned: nothing held


async def test_notify_deviceid_hands_its_items_to_the_hook() -> None:
    async with trio.open_nursery() as n:
        bc, _ = make(n)
        seen: list[Any] = []
        bc.on_notify_deviceid = seen.extend
        dev1, dev2 = b"1" * 16, b"2" * 16
        # bits 1 (CHANGE) and 2 (DELETE), their items in the bits' order
        vals = (cb.notify_deviceid_change4.XDR.encode(cb.notify_deviceid_change4(c.LAYOUT4_BLOCK_VOLUME, dev1, True))
                + cb.notify_deviceid_delete4.XDR.encode(cb.notify_deviceid_delete4(c.LAYOUT4_BLOCK_VOLUME, dev2)))
        note = cb.CB_NOTIFY_DEVICEID4args([cb.notify4([0b110], vals)])
        r = decode(await bc.compound(cb.CB_COMPOUND4args("", 1, 0, [seq(1), note])))
        assert r.status == c.NFS4_OK
        assert [(type(x).__name__, x.ndc_deviceid if hasattr(x, "ndc_deviceid") else x.ndd_deviceid)
                for x in seen] == [("notify_deviceid_change4", dev1), ("notify_deviceid_delete4", dev2)]
