"""The statistics collector without I/O: the latency histogram's percentiles and bounded memory,
and what one COMPOUND reply (decoded from real XDR, as the session sees it) adds to the figures."""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import COMPOUND4res, ResOp, decode_compound_res, encode_compound_res
from pynfsrdma._proto.nfs4.types import (
    CLOSE4args,
    GETATTR4args,
    GETATTR4resok,
    GETFH4args,
    LOOKUP4args,
    OPEN4args,
    PUTFH4args,
    READ4args,
    READ4resok,
    WRITE4args,
    WRITE4resok,
    fattr4,
    open_owner4,
    stateid4,
)
from pynfsrdma._stats import LatencyHistogram, RpcStats, collector_for
from pynfsrdma._xdr import Packer, Unpacker

ANON = stateid4(0, bytes(12))
FH = b"\x01" * 16


@dataclass
class FakePath:  # the two attributes of a Path the collector reads
    address: str
    transport_kind: str = "tcp"


def wire(res: COMPOUND4res) -> COMPOUND4res:
    """``res`` encoded and decoded again: the objects (memoryview READ data...) the session gets."""
    p = Packer()
    encode_compound_res(p, res)
    return decode_compound_res(Unpacker(p.getvalue()))


def answered(stats: RpcStats, path: FakePath, ops: list, res: COMPOUND4res, seconds: float, sent: int,
             received: int, replay: bool = False) -> None:
    """One call as the session makes it: asked for, sent, answered after ``seconds``, ended."""
    call = stats.call_started(100.0)
    call.sent(100.0)
    stats.rpc_done(path, ops, res, seconds, sent, received, replay)
    stats.call_ended(call, ops, 100.0 + seconds)


def exact_percentile(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[max(1, math.ceil(q * len(s))) - 1]


# -- histogram ---------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=1e-6, max_value=100.0, allow_nan=False), min_size=1, max_size=400),
    st.sampled_from([0.5, 0.9, 0.99, 1.0]),
)
def test_percentiles_within_bucket_error(samples: list[float], q: float) -> None:
    h = LatencyHistogram()
    for s in samples:
        h.add(s)
    got = h.percentile(q)
    want = exact_percentile(samples, q)
    # half a bucket of 1/(2*SUB) of the octave: within 1/SUB of the true value
    assert abs(got - want) <= want / LatencyHistogram.SUB + 1e-9
    assert min(samples) <= got <= max(samples)
    assert h.max == max(samples)
    assert math.isclose(h.mean, sum(samples) / len(samples), rel_tol=1e-9)


def test_percentiles_of_a_known_mix() -> None:
    h = LatencyHistogram()
    for _ in range(900):
        h.add(0.001)  # 1 ms
    for _ in range(90):
        h.add(0.010)
    for _ in range(10):
        h.add(0.5)
    s = h.summary()
    assert s["count"] == 1000
    assert abs(s["p50"] - 1.0) <= 1.0 / 16
    assert abs(s["p90"] - 1.0) <= 1.0 / 16  # the 900th sample is still 1 ms
    assert abs(s["p99"] - 10.0) <= 10.0 / 16
    assert s["max"] == 500.0
    assert math.isclose(s["mean"], (900 * 1 + 90 * 10 + 10 * 500) / 1000, abs_tol=0.001)


def test_memory_does_not_grow_with_samples() -> None:
    h = LatencyHistogram()
    size = sys.getsizeof(h.counts)
    rng = random.Random(7)
    for _ in range(100_000):
        h.add(rng.lognormvariate(-7, 2))
    h.add(0.0)
    h.add(1e9)  # beyond the last bucket: counted there
    assert len(h.counts) == LatencyHistogram.SIZE
    assert sys.getsizeof(h.counts) == size
    assert h.count == 100_002
    assert sum(h.counts) == h.count
    assert h.percentile(1.0) == 1e9


def test_empty_histogram() -> None:
    assert LatencyHistogram().summary() == {
        "count": 0,
        "mean": 0.0,
        "p50": 0.0,
        "p90": 0.0,
        "p99": 0.0,
        "max": 0.0,
    }


# -- the collector -----------------------------------------------------------------------------------
def test_write_read_and_error_replies() -> None:
    stats = RpcStats()
    path = FakePath("127.0.0.1:2049")
    data = bytes(range(256)) * 40  # 10240 bytes
    write = [PUTFH4args(FH), WRITE4args(ANON, 0, c.UNSTABLE4, data), GETATTR4args([0, 0])]
    res = wire(
        COMPOUND4res(
            c.NFS4_OK,
            "",
            [
                ResOp(c.OP_PUTFH, c.NFS4_OK, None),
                ResOp(c.OP_WRITE, c.NFS4_OK, WRITE4resok(8000, c.UNSTABLE4, b"v" * 8)),
                ResOp(c.OP_GETATTR, c.NFS4_OK, GETATTR4resok(fattr4([], b""))),
            ],
        )
    )
    answered(stats, path, write, res, 0.002, 10400, 120)
    read = [PUTFH4args(FH), READ4args(ANON, 0, 4096)]
    res = wire(
        COMPOUND4res(
            c.NFS4_OK,
            "",
            [ResOp(c.OP_PUTFH, c.NFS4_OK, None), ResOp(c.OP_READ, c.NFS4_OK, READ4resok(True, b"x" * 3000))],
        )
    )
    answered(stats, path, read, res, 0.001, 150, 3100, replay=True)
    lookup = [PUTFH4args(FH), LOOKUP4args("missing")]
    res = wire(
        COMPOUND4res(
            c.NFS4ERR_NOENT,
            "",
            [ResOp(c.OP_PUTFH, c.NFS4_OK, None), ResOp(c.OP_LOOKUP, c.NFS4ERR_NOENT, None)],
        )
    )
    answered(stats, path, lookup, res, 0.0005, 140, 60)
    stats.rpc_resent("127.0.0.2:2049")

    d = stats.as_dict()
    assert d["rpc"]["calls"] == 3
    assert d["rpc"]["errors"] == 1
    assert d["rpc"]["replays"] == 1
    assert d["rpc"]["resends"] == 1
    assert d["rpc"]["bytes_sent"] == 10400 + 150 + 140
    assert d["rpc"]["bytes_received"] == 120 + 3100 + 60
    assert d["bytes"] == {"read": 3000, "written": 8000}  # what the server says it wrote
    assert d["errors"] == {"NFS4ERR_NOENT": 1}
    # a COMPOUND is counted under its main operation; every operation in op_counts
    assert set(d["operations"]) == {"READ", "WRITE", "LOOKUP"}
    assert d["operations"]["WRITE"]["calls"] == 1
    assert d["operations"]["WRITE"]["bytes_sent"] == 10400
    assert d["operations"]["LOOKUP"]["statuses"] == {"NFS4ERR_NOENT": 1}
    assert d["operations"]["READ"]["latency_ms"]["max"] == 1.0
    assert d["op_counts"] == {"GETATTR": 1, "LOOKUP": 1, "PUTFH": 3, "READ": 1, "WRITE": 1}
    assert d["rpc"]["latency_ms"]["count"] == 3
    assert stats.paths["127.0.0.1:2049"].as_dict() == {
        "replies": 3,
        "errors": 1,
        "bytes_sent": 10690,
        "bytes_received": 3280,
        "unanswered": 0,
    }
    assert stats.paths["127.0.0.2:2049"].unanswered == 1


def test_rdma_read_data_counts_as_received() -> None:
    """Over RPC-over-RDMA the READ payload is placed by RDMA Write, outside the reply message."""
    stats = RpcStats()
    res = wire(
        COMPOUND4res(
            c.NFS4_OK,
            "",
            [ResOp(c.OP_PUTFH, c.NFS4_OK, None), ResOp(c.OP_READ, c.NFS4_OK, READ4resok(False, b"y" * 5000))],
        )
    )
    stats.rpc_done(
        FakePath("10.0.0.1:20049", "rdma"), [PUTFH4args(FH), READ4args(ANON, 0, 5000)], res, 0.001, 200, 100
    )
    assert stats.bytes_read == 5000
    assert stats.bytes_received == 5100


def test_lone_sequence_and_plumbing_only() -> None:
    stats = RpcStats()
    stats.rpc_done(FakePath("a"), [], wire(COMPOUND4res(c.NFS4_OK, "", [])), 0.001, 100, 60)
    stats.rpc_done(
        FakePath("a"),
        [PUTFH4args(FH)],
        wire(COMPOUND4res(c.NFS4_OK, "", [ResOp(c.OP_PUTFH, c.NFS4_OK, None)])),
        0.001,
        1,
        1,
    )
    assert set(stats.as_dict()["operations"]) == {"SEQUENCE", "PUTFH"}


def test_one_collector_per_path_set() -> None:
    class Owner:  # a path set stands here
        pass

    a, b = Owner(), Owner()
    assert collector_for(a) is collector_for(a)
    assert collector_for(a) is not collector_for(b)


def test_tables_stay_bounded() -> None:
    """A million replies of a few kinds keep a handful of table entries."""
    stats = RpcStats()
    res = wire(
        COMPOUND4res(
            c.NFS4_OK,
            "",
            [
                ResOp(c.OP_PUTFH, c.NFS4_OK, None),
                ResOp(c.OP_GETATTR, c.NFS4_OK, GETATTR4resok(fattr4([], b""))),
            ],
        )
    )
    ops = [PUTFH4args(FH), GETATTR4args([0, 0])]
    rng = random.Random(1)
    for _ in range(20_000):
        answered(stats, FakePath(rng.choice(["p1", "p2"])), ops, res, rng.random() / 100, 100, 100)
    assert len(stats.ops) == 1
    assert len(stats.paths) == 2
    assert stats.calls == 20_000


# -- calls: resends, timeouts, queue and execute times --------------------------------------------------
def test_a_call_resent_and_answered_late_is_timed_whole() -> None:
    """A hard mount's LOOKUP: queued 0.2 s for a slot, two tries that timed out after 1 s each, the
    third answered in 1 ms: three sends, two resends, a major timeout (2 s unanswered, timeo 1 s x
    (retrans 1 + 1)), an execute time of 2.201 s, and a round trip of 1 ms."""
    stats = RpcStats()
    lookup = [PUTFH4args(FH), LOOKUP4args("x")]
    res = wire(COMPOUND4res(c.NFS4_OK, "", [ResOp(c.OP_PUTFH, c.NFS4_OK, None), ResOp(c.OP_LOOKUP, c.NFS4_OK, None)]))
    call = stats.call_started(10.0)
    call.sent(10.2)
    call.sent(11.2, unanswered=True)
    call.sent(12.2, unanswered=True)
    stats.rpc_done(FakePath("a"), lookup, res, 0.001, 140, 60, replay=True)
    stats.call_ended(call, lookup, 12.201, major_timeout=2.0)
    op = stats.as_dict()["operations"]["LOOKUP"]
    assert (op["calls"], op["retrans"], op["retransmitted"], op["timeouts"], op["errors"]) == (1, 2, 1, 1, 0)
    assert op["queue_total_ms"] == 200.0
    assert op["execute_ms"]["max"] == op["execute_total_ms"] == 2201.0
    assert op["latency_ms"]["max"] == op["rtt_total_ms"] == 1.0
    assert stats.as_dict()["rpc"]["timeouts"] == 1


def test_a_soft_call_that_gave_up_is_a_timeout() -> None:
    """A soft mount's GETATTR that got no answer in its two tries and failed (EIO), and one that
    failed at once after it (the server taken for gone): two calls, two timeouts, no reply."""
    stats = RpcStats()
    getattr_ = [PUTFH4args(FH), GETATTR4args([0, 0])]
    call = stats.call_started(0.0)
    call.sent(0.0)
    call.sent(1.0, unanswered=True)
    stats.call_ended(call, getattr_, 2.0, gave_up=True, major_timeout=2.0)
    stats.call_ended(stats.call_started(2.5), getattr_, 2.5, gave_up=True, major_timeout=2.0)
    d = stats.as_dict()
    op = d["operations"]["GETATTR"]
    assert (op["calls"], op["retrans"], op["timeouts"], op["latency_ms"]["count"]) == (2, 1, 2, 0)
    assert op["execute_ms"]["max"] == 2000.0
    assert (d["rpc"]["calls"], d["rpc"]["timeouts"]) == (2, 2)


def test_a_call_answered_within_its_time_is_no_timeout() -> None:
    stats = RpcStats()
    ops = [PUTFH4args(FH), GETATTR4args([0, 0])]
    call = stats.call_started(0.0)
    call.sent(0.0)
    call.sent(1.0, unanswered=True)
    call.sent(1.5)  # (the server answered NFS4ERR_DELAY: answered, sent again)
    stats.call_ended(call, ops, 2.5, major_timeout=2.0)
    op = stats.as_dict()["operations"]["GETATTR"]
    assert (op["calls"], op["retrans"], op["timeouts"]) == (1, 2, 0)


def test_a_call_started_with_its_operations_counts_as_one_told_them_at_each_step() -> None:
    """The session names a call's operations once, at its start, and hands the call to each reply:
    the figures are those of a collector told the operations at every step."""
    ops = [PUTFH4args(FH), LOOKUP4args("a"), GETATTR4args([])]
    res = wire(COMPOUND4res(c.NFS4ERR_NOENT, "", [ResOp(c.OP_PUTFH, c.NFS4_OK, None),
                                                  ResOp(c.OP_LOOKUP, c.NFS4ERR_NOENT, None)]))
    each_step, once = RpcStats(clock=lambda: 0.0), RpcStats(clock=lambda: 0.0)
    for seconds in (0.0004, 0.002, 0.0000005):
        answered(each_step, FakePath("a"), ops, res, seconds, 140, 60)
        call = once.call_started(100.0, ops)
        call.sent(100.0)
        once.rpc_done(FakePath("a"), ops, res, seconds, 140, 60, False, call)
        once.call_ended(call, ops, 100.0 + seconds)
    assert once.as_dict() == each_step.as_dict()
    assert once.as_dict()["operations"]["LOOKUP"]["calls"] == 3
    assert once.as_dict()["operations"]["LOOKUP"]["latency_ms"]["count"] == 3


def test_a_duration_counted_in_two_histograms_lands_in_the_same_bucket_of_each() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        seconds = rng.random() * 10.0 ** rng.randint(-9, 7)
        a, b, alone = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
        a.add(seconds, b)
        alone.add(seconds)
        i = LatencyHistogram.index(seconds)
        assert a.counts[i] == b.counts[i] == alone.counts[i] == 1
        assert (a.count, a.total, a.min, a.max) == (b.count, b.total, b.min, b.max) == (1, seconds, seconds, seconds)


def test_closes_in_front_of_an_open_count_as_the_open() -> None:
    """An OPEN's COMPOUND that CLOSEs went in front of is an OPEN's call; CLOSEs alone are CLOSE's."""
    st = stateid4(1, b"\0" * 12)
    opened = OPEN4args(0, c.OPEN4_SHARE_ACCESS_READ, c.OPEN4_SHARE_DENY_NONE, open_owner4(0, b"o"),
                       (c.OPEN4_NOCREATE, None), (c.CLAIM_NULL, "n"))
    stats = RpcStats()
    for ops in ([PUTFH4args(FH), CLOSE4args(0, st), PUTFH4args(FH), opened, GETFH4args()],
                [PUTFH4args(FH), CLOSE4args(0, st), PUTFH4args(FH), CLOSE4args(0, st)]):
        stats.call_ended(stats.call_started(0.0, ops), ops, 0.001)
    assert {name: op["calls"] for name, op in stats.as_dict()["operations"].items()} == {"OPEN": 1, "CLOSE": 1}
