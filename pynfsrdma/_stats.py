"""Statistics of a running client, as ``pynfsrdma stats`` shows them (sans I/O).

:class:`RpcStats` is the collector the session layer feeds: per call a :class:`CallTimes` from
:meth:`RpcStats.call_started`, marked at each send, and one :meth:`RpcStats.call_ended` when the
call returns or fails; one :meth:`RpcStats.rpc_done` call per COMPOUND reply and one
:meth:`RpcStats.rpc_resent` call per resend. It counts, per *operation* (the COMPOUND's main
operation, as Linux's mountstats counts per procedure: the first operation that is not file handle
plumbing such as PUTFH, so ``PUTFH,WRITE,GETATTR`` is a WRITE), what mountstats and nfsiostat show:

- the calls, answered or not, and their resends (every send after a call's first: ``retrans``);
- timeouts (major timeouts): calls that ended for want of an answer (a soft mount's EIO), and calls
  answered only after they had gone unanswered for a whole ``timeo`` x (``retrans`` + 1) (from the
  sends of tries that got no reply to the next sends);
- the replies that failed, by status; the bytes of the RPC messages sent and received;
- the round-trip time of each answered try (``latency_ms``) and the execute time of each call, from
  the caller's request to its end, every try and every wait between included (``execute_ms``), each
  in a :class:`LatencyHistogram`; and the queue (backlog) wait, from the request to its first send
  (a slot of the session, a live path).

It also counts every operation inside the COMPOUNDs, the data read (READ results) and written (WRITE
results), and per path the RPCs, bytes and requests that got no reply there and were resent.

The collector's memory is bounded: a histogram is a fixed array of log-linear buckets, and the
tables are keyed by operation numbers, statuses and path addresses, never by request.

:func:`snapshot` makes the JSON-ready report of a :class:`~pynfsrdma._session.client_id.ClientID`:
the collector's figures, the session's slot table, and each path's figures (from its
:class:`~pynfsrdma._session.path_set.Path`, and for RPC-over-RDMA the transport's chunk counts, credits
and negotiated inline thresholds).

One collector serves every session a client creates (a session replaced after recovery keeps the
figures): :func:`collector_for` hands out the collector of a path set.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Final, Protocol

from ._proto.nfs4 import const as c
from ._trace import op_name, status_name
from ._transport.base import SplicedPayload

__all__ = [
    "FORMAT_VERSION",
    "CallTimes",
    "LatencyHistogram",
    "OpStats",
    "PathCounters",
    "RpcStats",
    "collector_for",
    "effective_options",
    "path_rows",
    "snapshot",
]

FORMAT_VERSION = 1

# operations that only move file handles around: a COMPOUND is named after the first other one
_PLUMBING = frozenset({c.OP_PUTFH, c.OP_PUTROOTFH, c.OP_PUTPUBFH, c.OP_SAVEFH, c.OP_RESTOREFH, c.OP_GETFH})
_NFS4_OK = c.NFS4_OK
_OP_READ = c.OP_READ
_OP_WRITE = c.OP_WRITE
_OP_SEQUENCE = c.OP_SEQUENCE
_OP_CLOSE = c.OP_CLOSE
_OP_OPEN = c.OP_OPEN
_DATA_OPS = frozenset({c.OP_READ, c.OP_WRITE})


class LatencyHistogram:
    """Durations in log-linear buckets: ``SUB`` buckets per power of two of microseconds.

    A percentile is the middle of the bucket it falls in (within ~3% of the true value), clamped
    to the smallest and largest durations seen; the mean and the maximum are exact. The array has
    a fixed size (durations beyond ``2**MAX_EXP`` microseconds, about 12 days, share the last
    bucket), so memory does not grow with the number of samples.
    """

    SUB = 16
    MAX_EXP = 40
    SIZE = (MAX_EXP + 1) * SUB

    __slots__ = ("count", "counts", "max", "min", "total")

    def __init__(self) -> None:
        self.counts = [0] * self.SIZE
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = 0.0

    @classmethod
    def index(cls, seconds: float) -> int:
        us = seconds * 1e6
        if us < 1.0:
            return 0
        m, e = math.frexp(us)  # us = m * 2**e, 0.5 <= m < 1, e >= 1
        i = e * cls.SUB + int((m - 0.5) * 2 * cls.SUB)
        return i if i < cls.SIZE else cls.SIZE - 1

    @classmethod
    def bucket_middle(cls, i: int) -> float:
        """The middle of bucket ``i``, in seconds."""
        if i < cls.SUB:
            return 0.5e-6
        e, k = divmod(i, cls.SUB)
        low = (0.5 + k / (2 * cls.SUB)) * 2.0**e
        high = (0.5 + (k + 1) / (2 * cls.SUB)) * 2.0**e
        return (low + high) / 2 * 1e-6

    def add(self, seconds: float, also: LatencyHistogram | None = None) -> None:
        """Count a duration, in ``also`` too (its bucket found once for both)."""
        if seconds < 0.0:
            seconds = 0.0
        # (index(), inline: this runs twice a call; m * 2 * SUB is exact, m being in [0.5, 1))
        us = seconds * 1e6
        if us < 1.0:
            i = 0
        else:
            m, e = _frexp(us)
            i = e * _SUB + int(m * _TWICE_SUB) - _SUB
            if i >= _SIZE:
                i = _SIZE - 1
        for h in (self,) if also is None else (self, also):
            h.counts[i] += 1
            h.count += 1
            h.total += seconds
            if seconds > h.max:
                h.max = seconds
            if seconds < h.min:
                h.min = seconds

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def percentiles(self, qs: Sequence[float]) -> list[float]:
        """The durations (seconds) below which fractions ``qs`` (ascending, 0..1) of samples lie."""
        out: list[float] = []
        if not self.count:
            return [0.0 for _ in qs]
        targets = [max(1, math.ceil(q * self.count)) for q in qs]
        seen = 0
        t = 0
        for i, n in enumerate(self.counts):
            if not n:
                continue
            seen += n
            while t < len(targets) and seen >= targets[t]:
                if i == self.SIZE - 1 or qs[t] >= 1.0:  # the open-ended last bucket; the maximum
                    out.append(self.max)
                else:
                    out.append(min(max(self.bucket_middle(i), self.min), self.max))
                t += 1
            if t == len(targets):
                break
        while len(out) < len(qs):
            out.append(self.max)
        return out

    def percentile(self, q: float) -> float:
        return self.percentiles([q])[0]

    def summary(self) -> dict[str, float | int]:
        """``{"count", "mean", "p50", "p90", "p99", "max"}``, durations in milliseconds."""
        p50, p90, p99 = self.percentiles((0.5, 0.9, 0.99))
        return {
            "count": self.count,
            "mean": _ms(self.mean),
            "p50": _ms(p50),
            "p90": _ms(p90),
            "p99": _ms(p99),
            "max": _ms(self.max),
        }


_frexp = math.frexp
_SUB: Final = LatencyHistogram.SUB
_TWICE_SUB: Final = 2 * LatencyHistogram.SUB
_SIZE: Final = LatencyHistogram.SIZE


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class CallTimes:
    """One call's way through the session: when it was asked for, when it was first sent, how many
    sends it took and how long it went unanswered (seconds, on the session's clock)."""

    __slots__ = ("first_sent", "kind", "last_sent", "op", "sends", "started", "unanswered")

    def __init__(self, started: float, op: OpStats | None = None, kind: Hashable | None = None) -> None:
        self.started = started
        self.op = op  # the figures it is counted under, when known at its start
        self.kind = kind  # its operations' kind, when they are the same at every call of it (:meth:`RpcStats.figures`)
        self.first_sent: float | None = None
        self.last_sent = started
        self.sends = 0
        self.unanswered = 0.0  # from the sends of tries that got no reply to the next send

    def sent(self, now: float, unanswered: bool = False) -> None:
        """The call is sent; ``unanswered``: its last try got no reply (it timed out, or its
        connection was lost), and the time since that try went without an answer."""
        if self.first_sent is None:
            self.first_sent = now
        elif unanswered:
            self.unanswered += now - self.last_sent
        self.last_sent = now
        self.sends += 1


class OpStats:
    """The figures of one kind of COMPOUND (named by its main operation)."""

    __slots__ = ("bytes_received", "bytes_sent", "calls", "errors", "execute", "latency", "queue_total", "retrans",
                 "retransmitted", "timeouts")

    def __init__(self) -> None:
        self.calls = 0  # calls ended, answered or not
        self.retrans = 0  # sends after a call's first (no reply in time, a lost connection, a retry)
        self.retransmitted = 0  # calls sent more than once
        self.timeouts = 0  # major timeouts (see the module text)
        self.errors: dict[int, int] = {}  # nfsstat4 -> replies
        self.bytes_sent = 0
        self.bytes_received = 0
        self.latency = LatencyHistogram()  # round trip of each answered try
        self.execute = LatencyHistogram()  # each call, from the request to its end
        self.queue_total = 0.0  # seconds from the requests to their first sends

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "errors": sum(self.errors.values()),
            "statuses": {status_name(s): n for s, n in sorted(self.errors.items())},
            "timeouts": self.timeouts,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "retrans": self.retrans,
            "retransmitted": self.retransmitted,
            "queue_total_ms": _ms(self.queue_total),
            "rtt_total_ms": _ms(self.latency.total),
            "latency_ms": self.latency.summary(),
            "execute_total_ms": _ms(self.execute.total),
            "execute_ms": self.execute.summary(),
        }


class PathCounters:
    """What the collector saw on one path (by address): replies, bytes, and requests resent."""

    __slots__ = ("bytes_received", "bytes_sent", "errors", "replies", "unanswered")

    def __init__(self) -> None:
        self.replies = 0
        self.errors = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.unanswered = 0  # requests that got no reply on this path and were sent again

    def as_dict(self) -> dict[str, int]:
        return {
            "replies": self.replies,
            "errors": self.errors,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "unanswered": self.unanswered,
        }


class _PathLike(Protocol):
    address: str
    transport_kind: str


class RpcStats:
    """The collector: fed by the session layer, read by :meth:`as_dict` (see the module text)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.calls = 0
        self.errors = 0
        self.timeouts = 0  # major timeouts (see the module text)
        self.resends = 0  # sends of a request after its first (lost connection, timeout)
        self.replays = 0  # replies to a request sent more than once
        self.bytes_sent = 0
        self.bytes_received = 0
        self.bytes_read = 0  # READ data received
        self.bytes_written = 0  # WRITE data the server reports written
        self.latency = LatencyHistogram()
        self.ops: dict[int, OpStats] = {}  # main operation -> figures
        self.op_counts: dict[int, int] = {}  # every operation in the COMPOUNDs (but those of kinds, below)
        # calls of a kind (:meth:`figures`): their figures, operations and whether they carry data,
        # found once; their replies, counted in op_counts when read
        self._kinds: dict[Hashable, tuple[OpStats, tuple[int, ...], bool]] = {}
        self._kind_replies: dict[Hashable, int] = {}
        self.statuses: dict[int, int] = {}  # failed COMPOUNDs by status
        self.paths: dict[str, PathCounters] = {}

    def _op(self, main: int) -> OpStats:
        st = self.ops.get(main)
        if st is None:
            st = self.ops[main] = OpStats()
        return st

    def _path(self, address: str) -> PathCounters:
        pc = self.paths.get(address)
        if pc is None:
            pc = self.paths[address] = PathCounters()
        return pc

    # -- hooks (the session layer calls these; they must stay cheap) -------------------------------
    def figures(self, ops: Sequence[Any], kind: Hashable | None = None) -> OpStats:
        """The figures a call of ``ops`` (after SEQUENCE) is counted under (as :meth:`call_started`
        finds them). ``kind``: what stands for ``ops`` when a call's operations are the same at every
        call of it (a prepared COMPOUND's shape): its figures and operations are then found once, and
        its replies count their operations in op_counts when the figures are read."""
        if kind is None:
            return self._op(_main_op(ops))
        known = self._kinds.get(kind)
        if known is None:
            if len(self._kinds) >= _KINDS_KEPT:
                return self._op(_main_op(ops))  # (kinds are few and made once: these are not)
            opnums = tuple(int(op.OPNUM) for op in ops)
            known = self._kinds[kind] = (self._op(_main_op(ops)), opnums, any(n in _DATA_OPS for n in opnums))
        return known[0]

    def call_started(self, now: float, ops: Sequence[Any] | None = None) -> CallTimes:
        """A call (of ``ops``, after SEQUENCE, when given) is asked for: the session marks its sends
        on the record, hands it to :meth:`rpc_done` with each reply and ends it with
        :meth:`call_ended`. The figures it is counted under are found here, once for all three."""
        return CallTimes(now, None if ops is None else self._op(_main_op(ops)))

    def call_ended(self, call: CallTimes, ops: Sequence[Any], now: float, *, gave_up: bool = False,
                   major_timeout: float | None = None) -> None:
        """The call of ``ops`` (after SEQUENCE) returned or failed at ``now``. ``gave_up``: it
        failed for want of an answer (a soft mount's timeout, or failing at once while the server is
        taken for gone); ``major_timeout``: the seconds of unanswered tries that make a major timeout
        (``timeo`` x (``retrans`` + 1); None: none counts)."""
        st = call.op or self._op(_main_op(ops))
        st.calls += 1
        self.calls += 1
        if call.sends > 1:
            st.retrans += call.sends - 1
            st.retransmitted += 1
        if gave_up or (major_timeout is not None and call.unanswered >= major_timeout):
            st.timeouts += 1
            self.timeouts += 1
        st.execute.add(now - call.started)
        st.queue_total += (now if call.first_sent is None else call.first_sent) - call.started

    def rpc_done(
        self,
        path: _PathLike,
        ops: Sequence[Any],
        res: Any,
        seconds: float,
        bytes_sent: int,
        bytes_received: int,
        replay: bool = False,
        call: CallTimes | None = None,
        shaped: tuple[Any, int] | None = None,
    ) -> None:
        """A COMPOUND reply arrived on ``path``.

        ``ops``: the request's operations after SEQUENCE (objects with ``OPNUM``); ``res``: the
        decoded COMPOUND4res (its ``status`` and ``resarray`` of results with ``opnum``, ``status``,
        ``res``); ``seconds``: from sending to the reply; ``bytes_sent``/``bytes_received``: the
        RPC call and reply sizes; ``replay``: the request had been sent before; ``call``: its
        record from :meth:`call_started`; ``shaped``: for a reply a prepared shape's decoder took
        (``res`` then holds no results), its READ's data (or None) and its WRITE's count of bytes
        written. (The call itself is counted by :meth:`call_ended`.)"""
        kind = call.kind if call is not None else None
        known = self._kinds.get(kind) if kind is not None else None
        if known is not None:  # (its operations counted when read)
            self._kind_replies[kind] = self._kind_replies.get(kind, 0) + 1
            data = known[2]
        else:
            data = False
            counts = self.op_counts
            for op in ops:
                n = op.OPNUM
                counts[n] = counts.get(n, 0) + 1
                if n in _DATA_OPS:
                    data = True
        if shaped is not None:
            read, written = shaped
            if read is not None:
                bytes_received += self._read(path, read)
            self.bytes_written += written
        elif data:
            for r in res.resarray:
                if r.status == _NFS4_OK:
                    if r.opnum == _OP_READ:
                        bytes_received += self._read(path, r.res.data)
                    elif r.opnum == _OP_WRITE:
                        self.bytes_written += r.res.count
        st = (call.op if call is not None else None) or self._op(_main_op(ops))
        pc = self.paths.get(path.address) or self._path(path.address)
        pc.replies += 1
        status = res.status
        if status != _NFS4_OK:
            self.errors += 1
            pc.errors += 1
            self.statuses[status] = self.statuses.get(status, 0) + 1
            st.errors[status] = st.errors.get(status, 0) + 1
        if replay:
            self.replays += 1
        self.bytes_sent += bytes_sent
        self.bytes_received += bytes_received
        st.bytes_sent += bytes_sent
        st.bytes_received += bytes_received
        pc.bytes_sent += bytes_sent
        pc.bytes_received += bytes_received
        self.latency.add(seconds, st.latency)

    def _read(self, path: _PathLike, data: Any) -> int:
        """Count a READ's ``data``; the bytes of it that came outside the reply's message (placed by
        RDMA Write, or spliced into a pipe), to count as received."""
        n = len(data)
        self.bytes_read += n
        return n if path.transport_kind == "rdma" or isinstance(data, SplicedPayload) else 0

    def rpc_resent(self, unanswered_on: str) -> None:
        """A request is sent again: it got no reply on the path ``unanswered_on`` (an address)."""
        self.resends += 1
        self._path(unanswered_on).unanswered += 1

    # -- reading --------------------------------------------------------------------------------------
    def _op_counts(self) -> dict[int, int]:
        """Every operation in the COMPOUNDs answered: op_counts, and the operations of the replies
        to calls of a kind (:meth:`figures`)."""
        counts = dict(self.op_counts)
        for kind, replies in self._kind_replies.items():
            for n in self._kinds[kind][1]:
                counts[n] = counts.get(n, 0) + replies
        return counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "uptime_s": round(self.clock() - self.started, 3),
            "rpc": {
                "calls": self.calls,
                "errors": self.errors,
                "timeouts": self.timeouts,
                "resends": self.resends,
                "replays": self.replays,
                "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received,
                "latency_ms": self.latency.summary(),
            },
            "bytes": {"read": self.bytes_read, "written": self.bytes_written},
            "errors": {status_name(s): n for s, n in sorted(self.statuses.items())},
            "operations": {op_name(n): st.as_dict() for n, st in sorted(self.ops.items())},
            "op_counts": {op_name(n): k for n, k in sorted(self._op_counts().items())},
        }


_KINDS_KEPT = 256  # kinds of call whose figures are found once (RpcStats.figures)


def _main_op(ops: Sequence[Any]) -> int:
    """The operation a COMPOUND is counted under: the first that is not plumbing (else the last,
    else SEQUENCE for a lone SEQUENCE); an OPEN that CLOSEs went in front of is counted as the OPEN."""
    for i, op in enumerate(ops):
        n = op.OPNUM
        if n not in _PLUMBING:
            if n == _OP_CLOSE and any(o.OPNUM == _OP_OPEN for o in ops[i + 1:]):
                return _OP_OPEN
            return int(n)
    return int(ops[-1].OPNUM) if ops else _OP_SEQUENCE


def effective_options(options: Any) -> dict[str, Any]:
    """A mount's options as in force (defaults filled in), JSON-ready: a dataclass's fields."""
    import dataclasses

    def plain(v: Any) -> Any:
        if isinstance(v, set | frozenset | tuple | list):
            return sorted(map(plain, v), key=str)
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        return v if isinstance(v, int | float | str | bool) or v is None else str(v)

    return {f.name: plain(getattr(options, f.name)) for f in dataclasses.fields(options)}


# one collector per path set (one client ID): sessions that replace each other share it
_collectors: weakref.WeakKeyDictionary[object, RpcStats] = weakref.WeakKeyDictionary()


def collector_for(owner: object) -> RpcStats:
    """The collector of ``owner`` (a session's path set), made on first use."""
    st = _collectors.get(owner)
    if st is None:
        st = _collectors[owner] = RpcStats()
    return st


# -- reports ----------------------------------------------------------------------------------------
def rdma_figures(transport: Any) -> dict[str, Any] | None:
    """Chunks by kind, credits and negotiated inline thresholds of an RPC-over-RDMA transport."""
    st = getattr(transport, "stats", None)
    gate = getattr(transport, "gate", None)
    th = getattr(transport, "thresholds", None)
    if st is None or gate is None or th is None:
        return None
    return {
        "calls": st.calls,
        "replies": st.replies,
        "chunks": {
            "read_chunk_segments": st.read_chunk_segments,
            "write_chunks": st.write_chunks,
            "reply_chunks": st.reply_chunks,
            "nomsg_calls": st.nomsg_calls,
            "nomsg_replies": st.nomsg_replies,
        },
        "credits": {
            "requested": gate.requested,
            "granted": gate.granted,
            "in_flight": gate.in_flight,
            "waiting": gate.waiting,
        },
        "inline": {
            "send": th.send,
            "recv": th.recv,
            "remote_invalidation": th.remote_invalidation,
        },
        "placed_bytes": st.placed_bytes,
        "inline_bytes_copied": st.inline_bytes_copied,
        "callbacks": st.callbacks,
    }


def path_rows(client: Any, trunking: Any = None) -> list[dict[str, Any]]:
    """One row per path: the path's own figures (state, address, transport, rank/order, RTT,
    in flight, calls, failovers...), the collector's counters, and ``rdma`` figures when the path
    runs RPC-over-RDMA. With ``trunking`` (a :class:`~pynfsrdma._trunking.Trunking`) the rows also
    carry each address's verification (and rejected addresses appear as closed)."""
    paths = client.paths.paths
    rows: list[dict[str, Any]] = (
        trunking.snapshot() if trunking is not None else [p.snapshot() for p in paths]
    )
    stats = collector_for(client.paths)
    by_address: dict[str, Any] = {}
    for p in paths:
        by_address.setdefault(p.address, p)
    seen: set[str] = set()
    for row in rows:
        addr = row.get("address", "")
        pc = stats.paths.get(addr)
        # several connections to one address (nconnect) share the counters: give them to the first
        if pc is not None and addr not in seen:
            row.update(pc.as_dict())
        else:
            row.update(PathCounters().as_dict())
        seen.add(addr)
    for row in rows:
        row["rdma"] = None
    for row, p in zip(rows, paths, strict=False):  # the path set's own paths come first, in order
        if p.transport_kind == "rdma":
            row["rdma"] = rdma_figures(getattr(p.rpc, "transport", None))
    return rows


def session_figures(session: Any) -> dict[str, Any]:
    table = session.table
    return {
        "sessionid": session.sessionid.hex(),
        "slots": {
            "in_use": table.in_use,
            "target": table.limit,
            "max": table.max_slots,
            "highest_in_use": table.highest_in_use,
        },
        "resends": session.resends,
        "replays": session.replays,
        "dead": status_name(session.dead) if session.dead is not None else None,
    }


def snapshot(client: Any, trunking: Any = None, info: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole report of a client ID (``ClientID``): see the module text for the parts.

    ``info`` adds fields at the top (mount point, server, pid ...)."""
    stats = collector_for(client.paths)
    out: dict[str, Any] = {"version": FORMAT_VERSION}
    if info:
        out.update(info)
    out.update(stats.as_dict())
    session = client.session
    out["sessions"] = [session_figures(session)] if session is not None else []
    out["recoveries"] = getattr(client, "recoveries", 0)
    out["paths"] = path_rows(client, trunking)
    return out
