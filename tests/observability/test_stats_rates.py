"""``pynfsrdma stats --watch``: per-interval rates as nfsiostat gives them, retransmissions per
operation, and tables that fit the terminal."""

from __future__ import annotations

from types import SimpleNamespace

from pynfsrdma._cli.stats import format_report, interval_rates
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._stats import RpcStats


def _reply(opnum: int) -> SimpleNamespace:
    return SimpleNamespace(status=c.NFS4_OK, resarray=[SimpleNamespace(opnum=opnum, status=c.NFS4_OK,
                                                                        res=SimpleNamespace(count=4096))])


def test_rates_between_two_reports_per_operation() -> None:
    now = [100.0]
    stats = RpcStats(clock=lambda: now[0])
    path = SimpleNamespace(address="127.0.0.1:2049", transport_kind="tcp")
    write = [SimpleNamespace(OPNUM=c.OP_PUTFH), SimpleNamespace(OPNUM=c.OP_WRITE)]
    for _ in range(10):
        stats.rpc_done(path, write, _reply(c.OP_WRITE), 0.002, 4200, 100)
    first = stats.as_dict()
    now[0] += 2.0
    for i in range(40):
        stats.rpc_done(path, write, _reply(c.OP_WRITE), 0.004, 4200, 100, replay=i < 3)
    second = stats.as_dict()
    assert second["operations"]["WRITE"]["retransmitted"] == 3
    rates = interval_rates(first, second)
    w = rates["operations"]["WRITE"]
    assert rates["seconds"] == 2.0
    assert (w["ops_per_s"], w["kb_per_op"], w["kb_per_s"], w["avg_rtt_ms"], w["retransmitted"]) == (
        20.0, 4.3, 86.0, 4.0, 3)


def test_tables_fit_the_terminal() -> None:
    stats = RpcStats()
    path = SimpleNamespace(address="127.0.0.1:2049", transport_kind="tcp")
    stats.rpc_done(path, [SimpleNamespace(OPNUM=c.OP_READ)], _reply(c.OP_GETATTR), 0.001, 100, 100)
    rep = {**stats.as_dict(), "server": "127.0.0.1:/export", "mountpoint": "/mnt/a-rather-long-mount-point-name",
           "paths": [{"state": "up", "address": "127.0.0.1:2049", "transport": "tcp"}]}
    wide = format_report(rep)
    assert max(map(len, wide.splitlines())) > 80
    for width in (80, 60):
        text = format_report(rep, width)
        assert max(map(len, text.splitlines())) <= width
        assert "OPERATION" in text and "READ" in text
