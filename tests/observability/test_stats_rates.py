"""``pynfsrdma stats``'s views without a mount: per-interval rates as nfsiostat gives them (resends,
timeouts, RTT, execute and queue times per operation), the options line as mountstats writes it,
and tables that fit the terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from pynfsrdma._cli.stats import format_iostat, format_report, interval_rates, options_text
from pynfsrdma._fuse.options import parse_options
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._stats import RpcStats, effective_options

PATH = SimpleNamespace(address="127.0.0.1:2049", transport_kind="tcp")
WRITE = [SimpleNamespace(OPNUM=c.OP_PUTFH), SimpleNamespace(OPNUM=c.OP_WRITE)]
LOOKUP = [SimpleNamespace(OPNUM=c.OP_PUTFH), SimpleNamespace(OPNUM=c.OP_LOOKUP)]


def _reply(opnum: int, status: int = c.NFS4_OK) -> SimpleNamespace:
    return SimpleNamespace(status=status, resarray=[SimpleNamespace(opnum=opnum, status=status,
                                                                    res=SimpleNamespace(count=4096))])


def call(stats: RpcStats, ops: list, at: float, queue: float, rtt: float, sends: int = 1,
         status: int = c.NFS4_OK) -> None:
    """A call asked for at ``at``, first sent after ``queue`` s, resent ``sends`` - 1 times (each
    try before the last unanswered for 1 s), the last try answered after ``rtt`` s."""
    t = stats.call_started(at)
    sent = at + queue
    for i in range(sends):
        t.sent(sent + i, unanswered=i > 0)
    sent += sends - 1
    stats.rpc_done(PATH, ops, _reply(ops[-1].OPNUM, status), rtt, 4200, 100, sends > 1)
    stats.call_ended(t, ops, sent + rtt, major_timeout=60.0)


def test_rates_between_two_reports_per_operation() -> None:
    now = [100.0]
    stats = RpcStats(clock=lambda: now[0])
    for _ in range(10):
        call(stats, WRITE, now[0], 0.0, 0.002)
    first = stats.as_dict()
    now[0] += 2.0
    for i in range(40):
        call(stats, WRITE, now[0], 0.001, 0.004, sends=2 if i < 3 else 1)
    second = stats.as_dict()
    assert second["operations"]["WRITE"]["retrans"] == 3
    rates = interval_rates(first, second)
    w = rates["operations"]["WRITE"]
    assert rates["seconds"] == 2.0 and rates["since_mount"] is False
    assert (w["calls"], w["ops_per_s"], w["kb_per_op"], w["kb_per_s"], w["retrans"], w["timeouts"]) == (
        40, 20.0, 4.3, 86.0, 3, 0)
    assert w["avg_rtt_ms"] == 4.0
    assert w["avg_queue_ms"] == 1.0
    # the execute time holds the three calls' lost seconds: (40 x 5 ms + 3 x 1 s) / 40
    assert w["avg_exe_ms"] == 80.0


def test_the_interval_view_reads_like_nfsiostat() -> None:
    now = [50.0]
    stats = RpcStats(clock=lambda: now[0])
    now[0] += 10.0
    for _ in range(20):
        call(stats, LOOKUP, now[0], 0.0, 0.001, status=c.NFS4ERR_NOENT)
    call(stats, WRITE, now[0], 0.0, 0.003, sends=3)
    rep = {**stats.as_dict(), "server": "127.0.0.1:/export", "mountpoint": "/mnt/x"}
    rates = interval_rates(None, rep)
    assert rates["since_mount"] is True and rates["seconds"] == 10.0
    text = format_iostat(rep, rates)
    lines = text.splitlines()
    assert lines[0] == "127.0.0.1:/export mounted on /mnt/x (since the mount, 10 s):"
    assert lines[3].split() == ["2.100"]  # every call: 21 in 10 s
    heads = "".join(f"{h:>16}" for h in ("ops/s", "kB/s", "kB/op", "retrans", "timeouts", "avg RTT (ms)",
                                         "avg exe (ms)", "avg queue (ms)", "errors"))
    # READ and WRITE always, then the busiest others, each a line of heads and a line of figures
    names = [line.split(":")[0] for line in lines if line.endswith(heads)]
    assert names == ["read", "write", "lookup"]
    read, write, lookup = (lines.index(f"{n + ':':<10}{heads}") for n in names)
    assert lines[read + 1].startswith(" " * 10) and lines[read + 1].endswith("0 (0.0%)")
    assert lines[read + 1].split() == ["0.000", "0.000", "0.000", "0", "(0.0%)", "0", "0.000", "0.000", "0.000",
                                       "0", "(0.0%)"]
    assert lines[write + 1].split() == ["0.100", "0.430", "4.300", "2", "(200.0%)", "0", "3.000", "2003.000",
                                        "0.000", "0", "(0.0%)"]
    assert lines[lookup + 1].split() == ["2.000", "8.600", "4.300", "0", "(0.0%)", "0", "1.000", "1.000", "0.000",
                                         "20", "(100.0%)"]


def test_the_options_line_names_every_option_in_force() -> None:
    soft = options_text(effective_options(parse_options("soft,timeo=20,retrans=1,noac")), "SYS")
    words = soft.split(",")
    assert words[:2] == ["rw", "vers=4.1"]
    for w in ("soft", "timeo=20", "retrans=1", "acregmin=0", "acregmax=0", "acdirmin=0", "acdirmax=0", "noac",
              "proto=tcp", "sec=sys", "lookupcache=all", "rsize=1048576", "wsize=1048576"):
        assert w in words, (w, soft)
    assert "hard" not in words
    hard = options_text(effective_options(parse_options("ro,actimeo=5")), "SYS").split(",")
    assert {"ro", "hard", "timeo=600", "retrans=2", "acregmin=5", "acdirmax=5"} <= set(hard)


def test_tables_fit_the_terminal() -> None:
    stats = RpcStats()
    call(stats, [SimpleNamespace(OPNUM=c.OP_GETATTR)], 0.0, 0.0, 0.001)
    rep = {**stats.as_dict(), "server": "127.0.0.1:/export", "mountpoint": "/mnt/a-rather-long-mount-point-name",
           "paths": [{"state": "up", "address": "127.0.0.1:2049", "transport": "tcp"}]}
    wide = format_report(rep)
    assert max(map(len, wide.splitlines())) > 80
    for width in (80, 60):
        text = format_report(rep, width)
        assert max(map(len, text.splitlines())) <= width
        assert "OPERATION" in text and "GETATTR" in text


def test_a_bad_interval_or_count_is_one_line(tmp_path: Path) -> None:
    """What the user sees for an interval view that cannot be: one line, status 2, before any
    mount is asked."""
    cases = {
        ("0",): "pynfsrdma stats: INTERVAL must be a positive number of seconds, not 0",
        ("-1.5",): "pynfsrdma stats: INTERVAL must be a positive number of seconds, not -1.5",
        ("1", "0"): "pynfsrdma stats: COUNT must be a positive number of reports, not 0",
        ("1", "--watch"): "pynfsrdma stats: give INTERVAL or --watch, not both",
    }
    for args, said in cases.items():
        r = subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", "stats", str(tmp_path), *args],
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stderr, r.stdout) == (2, said + "\n", ""), args


def test_the_report_names_the_layout_its_devices_and_why_io_went_through_the_server() -> None:
    stats = RpcStats()
    rep = {**stats.as_dict(), "server": "192.0.2.1:/pnfs", "paths": [],
           "pnfs": {"enabled": True, "layout": "block", "devices": ["/dev/loop0"],
                    "counts": {"read_bytes": 3 << 20, "write_bytes": 1 << 20, "layoutget": 2, "layoutcommit": 1,
                               "layoutreturn": 1, "recalls": 1},
                    "through_mds": {"layout recalled": 4}}}
    lines = format_report(rep).splitlines()
    assert "pnfs: block layout on /dev/loop0: read 3.0 MiB, wrote 1.0 MiB; LAYOUTGET 2, LAYOUTCOMMIT 1, " \
           "LAYOUTRETURN 1, recalls 1" in lines
    assert "pnfs: through the metadata server 4 time(s): layout recalled" in lines
    # a device that failed (nfsd refuses LAYOUTERROR), and a server restart before a LAYOUTCOMMIT
    rep["pnfs"]["counts"].update(layouterror_not_taken=2, uncommitted_lost=1)
    assert "pnfs: block layout on /dev/loop0: read 3.0 MiB, wrote 1.0 MiB; LAYOUTGET 2, LAYOUTCOMMIT 1, " \
           "LAYOUTRETURN 1, recalls 1, LAYOUTERROR 0 taken / 2 not, files whose layout writes went with the " \
           "client ID 1" in format_report(rep).splitlines()
    off = format_report({**stats.as_dict(), "server": "h:/e", "paths": [], "pnfs": {"enabled": False}})
    assert "pnfs" not in off


def test_the_report_names_the_flexfiles_data_servers_and_their_calls() -> None:
    stats = RpcStats()
    rep = {**stats.as_dict(), "server": "192.0.2.1:/ff", "paths": [],
           "pnfs": {"enabled": True, "layout": "flexfiles", "data_servers": ["192.0.2.1:2049"],
                    "counts": {"read_bytes": 2 << 20, "write_bytes": 2 << 20, "layoutget": 2, "reads": 8,
                               "writes": 8, "ds_commits": 1},
                    "through_mds": {}}}
    assert "pnfs: flexfiles layout on 192.0.2.1:2049: read 2.0 MiB, wrote 2.0 MiB; LAYOUTGET 2, LAYOUTCOMMIT 0, " \
           "LAYOUTRETURN 0, recalls 0, data server READs 8, WRITEs 8, COMMITs 1" in format_report(rep).splitlines()
