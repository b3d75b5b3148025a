"""``pynfsrdma stats MOUNTPOINT [--json] [--watch [SECONDS]]``: what a mount is doing.

The figures come from the mount daemon through its control socket (:mod:`pynfsrdma._control_socket`); the
command opens no NFS session of its own. The report (see :mod:`pynfsrdma._stats`): RPC calls,
errors, resends and replays, bytes, latency (mean and percentiles) per operation, errors by
status, the session's slots, and each path's state, RTT, in-flight requests, bytes and failovers,
with chunk counts, credits and inline thresholds for RPC-over-RDMA paths.

By default a table; ``--json`` prints the report as one JSON object. ``--watch`` asks again every
SECONDS (default 2): on a terminal the screen is redrawn, when piped one JSON line is written per
interval.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from .._control_socket import Connection, ControlError
from .output import json_text

__all__ = ["format_report", "handler", "register"]

PROG = "pynfsrdma stats"
DEFAULT_INTERVAL = 2.0
CLEAR = "\x1b[H\x1b[2J"

OP_COLUMNS = (
    ("OPERATION", None),
    ("CALLS", "calls"),
    ("ERRORS", "errors"),
    ("SENT", "bytes_sent"),
    ("RECEIVED", "bytes_received"),
    ("MEAN_MS", "mean"),
    ("P50_MS", "p50"),
    ("P90_MS", "p90"),
    ("P99_MS", "p99"),
    ("MAX_MS", "max"),
    ("RETRANS", "retransmitted"),
)
RATE_COLUMNS = ("OPERATION", "OPS/S", "KB/S", "KB/OP", "AVG_RTT_MS", "RETRANS")
PATH_COLUMNS = (
    ("STATE", "state"),
    ("ADDRESS", "address"),
    ("TRANSPORT", "transport"),
    ("RTT_MS", "rtt_ms"),
    ("IN_FLIGHT", "in_flight"),
    ("BYTES_IN_FLIGHT", "bytes_in_flight"),
    ("CALLS", "calls"),
    ("SENT", "bytes_sent"),
    ("RECEIVED", "bytes_received"),
    ("UNANSWERED", "unanswered"),
    ("FAILOVERS", "failovers"),
    ("STALLS", "stalls"),
    ("CONNECTS", "connects"),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "stats",
        help="statistics of a mount: operations, latency, errors, bytes, slots, paths, RDMA",
        description="Show what the mount on MOUNTPOINT is doing, as its mount daemon counts it: per "
        "operation calls, errors, bytes and latency (mean, p50/p90/p99, max); resends and replays; the "
        "session's slots; each path's state, RTT, in-flight requests, bytes and failovers; RPC-over-RDMA "
        "chunks, credits and inline thresholds.",
    )
    p.add_argument("mountpoint", metavar="MOUNTPOINT")
    p.add_argument("--json", action="store_true", help="machine-readable output (one JSON object)")
    p.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=DEFAULT_INTERVAL,
        default=None,
        metavar="SECONDS",
        help=f"refresh every SECONDS (default {DEFAULT_INTERVAL:g}); one JSON line per interval when piped",
    )
    p.set_defaults(func=handler)


# -- formatting -------------------------------------------------------------------------------------
def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _table(header: list[str], rows: list[list[str]], width: int | None = None) -> list[str]:
    """Columns padded to their widest cell; columns on the right are left out until it fits ``width``."""
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    keep = len(header)
    while width is not None and keep > 1 and sum(widths[:keep]) + 2 * (keep - 1) > width:
        keep -= 1
    return ["  ".join(cell.ljust(w) for cell, w in zip(r[:keep], widths[:keep], strict=True)).rstrip()
            for r in table]


def interval_rates(prev: dict[str, Any], cur: dict[str, Any]) -> dict[str, Any]:
    """What happened between two reports, per operation, as nfsiostat shows it: operations per
    second, kB (1000 bytes, sent and received) per second and per operation, the mean round-trip
    time in ms, and the calls sent again."""
    seconds = max(cur.get("uptime_s", 0) - prev.get("uptime_s", 0), 1e-9)
    before = prev.get("operations", {})
    ops = {}
    for name, st in cur.get("operations", {}).items():
        b = before.get(name, {})
        calls = st["calls"] - b.get("calls", 0)
        if calls <= 0:
            continue
        kb = (st["bytes_sent"] + st["bytes_received"] - b.get("bytes_sent", 0) - b.get("bytes_received", 0)) / 1000
        rtt = st.get("rtt_total_ms", 0) - b.get("rtt_total_ms", 0)
        ops[name] = {
            "ops_per_s": round(calls / seconds, 2),
            "kb_per_s": round(kb / seconds, 2),
            "kb_per_op": round(kb / calls, 2),
            "avg_rtt_ms": round(rtt / calls, 3),
            "retransmitted": st.get("retransmitted", 0) - b.get("retransmitted", 0),
        }
    return {"seconds": round(seconds, 3), "operations": ops}


def format_rates(rates: dict[str, Any], width: int | None = None) -> list[str]:
    rows = [[name, *(str(r[k]) for k in ("ops_per_s", "kb_per_s", "kb_per_op", "avg_rtt_ms", "retransmitted"))]
            for name, r in rates["operations"].items()]
    return [f"in the last {rates['seconds']:g} s:", *_table(list(RATE_COLUMNS), rows, width)]


def format_report(rep: dict[str, Any], width: int | None = None) -> str:
    """The report as the tables a person reads, each cut to ``width`` columns (the terminal's)."""
    rpc = rep.get("rpc", {})
    lat = rpc.get("latency_ms", {})
    b = rep.get("bytes", {})
    lines = [
        f"{rep.get('server', '?')} on {rep.get('mountpoint', '?')} (pid {rep.get('pid', '?')}, "
        f"up {rep.get('uptime_s', 0):.0f} s)",
        f"RPC: {rpc.get('calls', 0)} calls, {rpc.get('errors', 0)} errors, {rpc.get('resends', 0)} resends, "
        f"{rpc.get('replays', 0)} replays; sent {human_bytes(rpc.get('bytes_sent', 0))}, received "
        f"{human_bytes(rpc.get('bytes_received', 0))}",
        f"data: read {human_bytes(b.get('read', 0))}, written {human_bytes(b.get('written', 0))}",
        f"latency ms: mean {lat.get('mean', 0)}  p50 {lat.get('p50', 0)}  p90 {lat.get('p90', 0)}  "
        f"p99 {lat.get('p99', 0)}  max {lat.get('max', 0)}",
    ]
    for s in rep.get("sessions", []):
        sl = s["slots"]
        lines.append(
            f"session {s['sessionid']}: slots in use {sl['in_use']} of target {sl['target']} "
            f"(max {sl['max']}){'; dead: ' + s['dead'] if s.get('dead') else ''}"
        )
    if rep.get("recoveries"):
        lines.append(f"session recoveries: {rep['recoveries']}")
    cache = rep.get("cache")
    if cache:
        lines.append(
            f"caches: attributes {cache.get('attr_hits', 0)} hits, {cache.get('attr_revalidations', 0)} "
            f"revalidated; lookups {cache.get('lookups_cached', 0)} answered here, "
            f"{cache.get('lookups_sent', 0)} sent; {cache.get('invalidations', 0)} invalidations, "
            f"{cache.get('stale_names', 0)} stale names, {cache.get('reopens', 0)} reopens"
        )
    locks = rep.get("locks")
    if locks and any(locks.values()):
        lines.append("locks: " + ", ".join(f"{k} {v}" for k, v in locks.items()))
    ops = rep.get("operations", {})
    if ops:
        rows = []
        for name, st in ops.items():
            lt = st["latency_ms"]
            row = [name]
            for _, key in OP_COLUMNS[1:]:
                v = lt[key] if key in lt else st.get(key, 0)
                row.append(human_bytes(v) if key in ("bytes_sent", "bytes_received") else str(v))
            rows.append(row)
        lines += ["", *_table([h for h, _ in OP_COLUMNS], rows, width)]
    errors = rep.get("errors", {})
    if errors:
        lines += ["", "errors: " + ", ".join(f"{name} {n}" for name, n in errors.items())]
    paths = rep.get("paths", [])
    if paths:
        rows = [
            [
                human_bytes(p.get(k, 0)) if k in ("bytes_sent", "bytes_received") else str(p.get(k, ""))
                for _, k in PATH_COLUMNS
            ]
            for p in paths
        ]
        lines += ["", *_table([h for h, _ in PATH_COLUMNS], rows, width)]
        for p in paths:
            r = p.get("rdma")
            if r:
                ch, cr, il = r["chunks"], r["credits"], r["inline"]
                lines.append(
                    f"rdma {p['address']}: read chunk segments {ch['read_chunk_segments']}, write chunks "
                    f"{ch['write_chunks']}, reply chunks {ch['reply_chunks']}, nomsg calls "
                    f"{ch['nomsg_calls']}; credits {cr['granted']} granted of {cr['requested']} "
                    f"({cr['in_flight']} in use, {cr['waiting']} waiting); inline send {il['send']} "
                    f"recv {il['recv']}"
                )
    if rep.get("options"):
        opts = ",".join(k if v is True else f"{k}={v}" for k, v in sorted(rep["options"].items())
                        if v not in (False, None, [], {}, ""))
        lines.insert(1, f"mounted {time.time() - rep.get('mounted_at_ns', 0) / 1e9:.0f} s ago with {opts}")
    if rep.get("interval"):
        lines += ["", *format_rates(rep["interval"], width)]
    if width is not None:
        lines = [line[:width] for line in lines]
    return "\n".join(lines)


# -- running ----------------------------------------------------------------------------------------
def _show(rep: dict[str, Any], args: argparse.Namespace, out: TextIO, tty: bool) -> None:
    import shutil

    width = shutil.get_terminal_size().columns if tty else None
    if args.watch is not None and not tty:
        out.write(json_text(rep) + "\n")
    elif args.json:
        if args.watch is not None:
            out.write(CLEAR)
        out.write(json_text(rep) + "\n")
    else:
        if args.watch is not None:
            out.write(CLEAR)
        out.write(format_report(rep, width) + "\n")
    out.flush()


def handler(args: argparse.Namespace) -> int:
    if args.watch is not None and args.watch <= 0:
        print(f"{PROG}: --watch needs a positive number of seconds", file=sys.stderr)
        return 2
    out = sys.stdout
    tty = out.isatty()
    try:
        with Connection(args.mountpoint) as conn:
            prev: dict[str, Any] | None = None
            while True:
                rep = conn.request("stats")
                if prev is not None:
                    rep["interval"] = interval_rates(prev, rep)
                prev = {k: v for k, v in rep.items() if k != "interval"}
                _show(rep, args, out, tty)
                if args.watch is None:
                    return 0
                time.sleep(args.watch)
    except ControlError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        return 0
