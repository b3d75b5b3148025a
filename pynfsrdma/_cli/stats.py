"""``pynfsrdma stats MOUNTPOINT [INTERVAL [COUNT]] [--json] [--watch [SECONDS]]``: what a mount is doing.

The figures come from the mount daemon through its control socket (:mod:`pynfsrdma._control_socket`); the
command opens no NFS session of its own. The report (see :mod:`pynfsrdma._stats`): the options in
force, RPC calls, errors, timeouts, resends and replays, bytes; per operation the calls, resends,
timeouts, errors, bytes, and the queue, round-trip and execute times, as mountstats shows them;
errors by status, the session's slots, and each path's state, RTT, in-flight requests, bytes and
failovers, with chunk counts, credits and inline thresholds for RPC-over-RDMA paths.

By default a table; ``--json`` prints the report as one JSON object. ``--watch`` asks again every
SECONDS (default 2): on a terminal the screen is redrawn, when piped one JSON line is written per
interval. With INTERVAL, the view nfsiostat(8) gives: per operation (READ, WRITE and the busiest
others) ops/s, kB/s, kB/op, resends, timeouts, mean RTT, execute and queue times, errors; the first
report since the mount, each next one for the last INTERVAL seconds, COUNT reports in all (default:
until interrupted); with ``--json`` one JSON line per report.
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

OP_COLUMNS = ("OPERATION", "CALLS", "RETRANS", "TIMEOUTS", "ERRORS", "SENT", "RECEIVED", "QUEUE_MS", "RTT_MS",
              "EXE_MS", "P99_RTT_MS", "MAX_RTT_MS", "MAX_EXE_MS")
RATE_KEYS = ("ops_per_s", "kb_per_s", "kb_per_op", "retrans", "timeouts", "avg_rtt_ms", "avg_exe_ms", "avg_queue_ms",
             "errors")
RATE_COLUMNS = ("OPERATION", "OPS/S", "KB/S", "KB/OP", "RETRANS", "TIMEOUTS", "AVG_RTT_MS", "AVG_EXE_MS",
                "AVG_QUEUE_MS", "ERRORS")
IOSTAT_OPS = ("READ", "WRITE")  # always in the interval view, as in nfsiostat's
IOSTAT_OTHERS = 3  # the busiest other operations shown there
# the options line: these first, in the order mountstats shows them; the others after, by name
OPTION_ORDER = ("ro", "vers", "rsize", "wsize", "acregmin", "acregmax", "acdirmin", "acdirmax", "noac", "hard",
                "proto", "port", "timeo", "retrans", "sec", "lookupcache")
FLAGS = {"hard": ("hard", "soft"), "ro": ("ro", "rw")}  # options that are one word or the other
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
        help="statistics of a mount: operations, timeouts, RTT and execute times, paths, RDMA; nfsiostat's view",
        description="Show what the mount on MOUNTPOINT is doing, as its mount daemon counts it: the "
        "options in force; per operation calls, resends (every one), timeouts (calls that failed for want "
        "of an answer, and calls that went unanswered for timeo x (retrans + 1)), errors, bytes, queue "
        "time, round-trip time (RTT) and execute time (the whole call, every try and wait included); the "
        "session's slots; each path's state, RTT, in-flight requests, bytes and failovers; RPC-over-RDMA "
        "chunks, credits and inline thresholds. With INTERVAL [COUNT], nfsiostat's view instead.",
    )
    p.add_argument("mountpoint", metavar="MOUNTPOINT")
    p.add_argument("interval", metavar="INTERVAL", nargs="?", type=float, default=None,
                   help="as nfsiostat: report per operation ops/s, kB/s, RTT and execute times every "
                   "INTERVAL seconds (the first report since the mount)")
    p.add_argument("count", metavar="COUNT", nargs="?", type=int, default=None,
                   help="with INTERVAL: stop after COUNT reports (default: until interrupted)")
    p.add_argument("--json", action="store_true",
                   help="machine-readable output (one JSON object; with INTERVAL one line per report)")
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


def interval_rates(prev: dict[str, Any] | None, cur: dict[str, Any]) -> dict[str, Any]:
    """What happened between two reports (``prev`` None: since the mount), per operation, as
    nfsiostat shows it: the calls and operations per second, kB (1000 bytes, sent and received) per
    second and per operation, the resends, the timeouts and the errors, and in ms the mean
    round-trip time (of the answered tries), the mean execute time (the whole call) and the mean
    queue time (until its first send)."""
    prev = prev or {}
    seconds = max(cur.get("uptime_s", 0) - prev.get("uptime_s", 0), 1e-9)
    before = prev.get("operations", {})
    ops = {}
    for name, st in cur.get("operations", {}).items():
        b = before.get(name, {})

        def delta(key: str, st: dict[str, Any] = st, b: dict[str, Any] = b) -> Any:
            return st.get(key, 0) - b.get(key, 0)

        calls = delta("calls")
        if calls <= 0:
            continue
        replies = st["latency_ms"]["count"] - b.get("latency_ms", {}).get("count", 0)
        kb = (delta("bytes_sent") + delta("bytes_received")) / 1000
        ops[name] = {
            "calls": calls,
            "ops_per_s": round(calls / seconds, 3),
            "kb_per_s": round(kb / seconds, 3),
            "kb_per_op": round(kb / calls, 3),
            "retrans": delta("retrans"),
            "timeouts": delta("timeouts"),
            "errors": delta("errors"),
            "avg_rtt_ms": round(delta("rtt_total_ms") / replies, 3) if replies > 0 else 0.0,
            "avg_exe_ms": round(delta("execute_total_ms") / calls, 3),
            "avg_queue_ms": round(delta("queue_total_ms") / calls, 3),
        }
    return {"seconds": round(seconds, 3), "since_mount": "uptime_s" not in prev, "operations": ops}


def format_rates(rates: dict[str, Any], width: int | None = None) -> list[str]:
    rows = [[name, *(str(r[k]) for k in RATE_KEYS)] for name, r in rates["operations"].items()]
    return [f"in the last {rates['seconds']:g} s:", *_table(list(RATE_COLUMNS), rows, width)]


def iostat_ops(rates: dict[str, Any]) -> list[str]:
    """The operations nfsiostat's view shows: READ and WRITE, then the busiest others."""
    ops = rates["operations"]
    others = sorted((n for n in ops if n not in IOSTAT_OPS), key=lambda n: (-ops[n]["calls"], n))
    return [*IOSTAT_OPS, *others[:IOSTAT_OTHERS]]


def format_iostat(rep: dict[str, Any], rates: dict[str, Any]) -> str:
    """One report of the interval view, laid out as nfsiostat(8) lays out its own."""
    when = (f"since the mount, {rates['seconds']:g} s" if rates["since_mount"]
            else f"the last {rates['seconds']:g} s")
    total = sum(r["calls"] for r in rates["operations"].values()) / rates["seconds"]
    heads = ("ops/s", "kB/s", "kB/op", "retrans", "timeouts", "avg RTT (ms)", "avg exe (ms)", "avg queue (ms)",
             "errors")
    lines = [f"{rep.get('server', '?')} mounted on {rep.get('mountpoint', '?')} ({when}):", "",
             f"{'ops/s':>16}", f"{total:>16.3f}"]
    names = iostat_ops(rates)
    room = max(10, *(len(n) + 2 for n in names))  # (the operation's name, then the columns)
    for name in names:
        r = rates["operations"].get(name)
        calls = r["calls"] if r else 0
        if r is None:
            r = dict.fromkeys(RATE_KEYS, 0)

        def share(n: int, calls: int = calls) -> str:
            return f"{n} ({100.0 * n / calls if calls else 0.0:.1f}%)"

        cells = [f"{r['ops_per_s']:.3f}", f"{r['kb_per_s']:.3f}", f"{r['kb_per_op']:.3f}", share(r["retrans"]),
                 str(r["timeouts"]), f"{r['avg_rtt_ms']:.3f}", f"{r['avg_exe_ms']:.3f}", f"{r['avg_queue_ms']:.3f}",
                 share(r["errors"])]
        lines += ["", f"{name.lower() + ':':<{room}}" + "".join(f"{h:>16}" for h in heads),
                  " " * room + "".join(f"{cell:>16}" for cell in cells)]
    return "\n".join(lines)


def options_text(options: dict[str, Any], sec: str | None = None) -> str:
    """The options in force, as nfs(5) and mountstats write them: every one, ``hard`` or ``soft``,
    ``ro`` or ``rw``, and numbers even when 0 (``acregmin=0``); ``sec`` the flavour in use when
    it was negotiated."""
    opts = dict(options)
    if opts.get("sec") is None and sec:
        opts["sec"] = sec.lower()
    words = []
    for key in [*(k for k in OPTION_ORDER if k in opts), *sorted(k for k in opts if k not in OPTION_ORDER)]:
        v = opts[key]
        if key in FLAGS:
            words.append(FLAGS[key][0] if v else FLAGS[key][1])
        elif isinstance(v, bool):
            if v:
                words.append(key)
        elif isinstance(v, dict):
            words += [w if x == "" else f"{w}={x}" for w, x in sorted(v.items())]
        elif v is None or isinstance(v, list):
            continue  # (unset, or options accepted that mean nothing here)
        else:
            words.append(f"{key}={v:g}" if isinstance(v, float) else f"{key}={v}")
    return ",".join(words)


def op_row(name: str, st: dict[str, Any]) -> list[str]:
    rtt, exe = st["latency_ms"], st.get("execute_ms", {})
    calls = st["calls"]

    def mean(total: float) -> str:
        return f"{total / calls:.3f}" if calls else "0"

    return [name, str(calls), str(st.get("retrans", 0)), str(st.get("timeouts", 0)), str(st["errors"]),
            human_bytes(st["bytes_sent"]), human_bytes(st["bytes_received"]), mean(st.get("queue_total_ms", 0)),
            str(rtt["mean"]), mean(st.get("execute_total_ms", 0)), str(rtt["p99"]), str(rtt["max"]),
            str(exe.get("max", 0))]


def format_report(rep: dict[str, Any], width: int | None = None) -> str:
    """The report as the tables a person reads, each cut to ``width`` columns (the terminal's)."""
    rpc = rep.get("rpc", {})
    lat = rpc.get("latency_ms", {})
    b = rep.get("bytes", {})
    lines = [
        f"{rep.get('server', '?')} on {rep.get('mountpoint', '?')} (pid {rep.get('pid', '?')}, "
        f"up {rep.get('uptime_s', 0):.0f} s)",
        f"RPC: {rpc.get('calls', 0)} calls, {rpc.get('errors', 0)} errors, {rpc.get('timeouts', 0)} timeouts, "
        f"{rpc.get('resends', 0)} resends, "
        f"{rpc.get('replays', 0)} replays; sent {human_bytes(rpc.get('bytes_sent', 0))}, received "
        f"{human_bytes(rpc.get('bytes_received', 0))}",
        f"data: read {human_bytes(b.get('read', 0))}, written {human_bytes(b.get('written', 0))}",
        f"RTT ms: mean {lat.get('mean', 0)}  p50 {lat.get('p50', 0)}  p90 {lat.get('p90', 0)}  "
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
            f"{cache.get('lookups_read_ahead', 0)} from names read ahead, "
            f"{cache.get('lookups_sent', 0)} sent; {cache.get('invalidations', 0)} invalidations, "
            f"{cache.get('stale_names', 0)} stale names, {cache.get('reopens', 0)} reopens"
        )
    pnfs = rep.get("pnfs")
    if pnfs and pnfs.get("enabled"):
        n = pnfs.get("counts", {})
        lines.append(
            f"pnfs: {pnfs.get('layout')} layout on "
            f"{', '.join(pnfs.get('devices') or pnfs.get('data_servers') or []) or 'no device'}: read "
            f"{human_bytes(n.get('read_bytes', 0))}, wrote {human_bytes(n.get('write_bytes', 0))}; "
            f"LAYOUTGET {n.get('layoutget', 0)}, LAYOUTCOMMIT {n.get('layoutcommit', 0)}, LAYOUTRETURN "
            f"{n.get('layoutreturn', 0)}, recalls {n.get('recalls', 0)}"
            + (f", data server READs {n.get('reads', 0)}, WRITEs {n.get('writes', 0)}, COMMITs {n.get('ds_commits', 0)}"
               if pnfs.get("layout") == "flexfiles" else "")
            + (f", LAYOUTERROR {n.get('layouterror', 0)} taken / {n.get('layouterror_not_taken', 0)} not"
               if n.get("layouterror") or n.get("layouterror_not_taken") else "")
            + (f", files whose layout writes went with the client ID {n['uncommitted_lost']}"
               if n.get("uncommitted_lost") else "")
        )
        for why, times in pnfs.get("through_mds", {}).items():
            lines.append(f"pnfs: through the metadata server {times} time(s): {why}")
    locks = rep.get("locks")
    if locks and any(locks.values()):
        lines.append("locks: " + ", ".join(f"{k} {v}" for k, v in locks.items()))
    ops = rep.get("operations", {})
    if ops:
        rows = [op_row(name, st) for name, st in ops.items()]
        lines += ["", *_table(list(OP_COLUMNS), rows, width)]
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
        opts = options_text(rep["options"], rep.get("sec"))
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


def _iostat(conn: Connection, args: argparse.Namespace, out: TextIO) -> int:
    """The interval view: COUNT reports (None: until interrupted), INTERVAL seconds apart."""
    prev: dict[str, Any] | None = None
    n = 0
    next_at = time.monotonic()
    while True:
        rep = conn.request("stats")
        rates = interval_rates(prev, rep)
        prev = rep
        if args.json:
            out.write(json_text({"version": rep.get("version"), "mountpoint": rep.get("mountpoint"),
                                 "server": rep.get("server"), **rates}) + "\n")
        else:
            out.write(("\n" if n else "") + format_iostat(rep, rates) + "\n")
        out.flush()
        n += 1
        if args.count is not None and n >= args.count:
            return 0
        next_at += args.interval
        time.sleep(max(0.0, next_at - time.monotonic()))


def handler(args: argparse.Namespace) -> int:
    if args.watch is not None and args.watch <= 0:
        print(f"{PROG}: --watch needs a positive number of seconds", file=sys.stderr)
        return 2
    if args.interval is not None and not args.interval > 0:
        print(f"{PROG}: INTERVAL must be a positive number of seconds, not {args.interval:g}", file=sys.stderr)
        return 2
    if args.count is not None and args.count <= 0:
        print(f"{PROG}: COUNT must be a positive number of reports, not {args.count}", file=sys.stderr)
        return 2
    if args.interval is not None and args.watch is not None:
        print(f"{PROG}: give INTERVAL or --watch, not both", file=sys.stderr)
        return 2
    out = sys.stdout
    tty = out.isatty()
    try:
        with Connection(args.mountpoint) as conn:
            if args.interval is not None:
                return _iostat(conn, args, out)
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
