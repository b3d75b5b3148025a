"""``pynfsrdma stats`` on a mount whose server stops answering, as mountstats and nfsiostat users
read it: a soft mount's call that ended in EIO is counted (a call, its resends, a timeout), and a
hard mount's call that waited out a stall shows that wait in its execute time, not only the round
trip of the try that was answered. The server is NFS-Ganesha behind the testbed's path proxy,
stalled (nothing read or answered, the connection up) or cut (every connection reset, new ones
refused); the figures are read through the CLI, from the mount daemon."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from pynfsrdma._control_socket import Connection
from pynfsrdma._testbed.ganesha import ExportPath

TIMEO_DS = 10  # deciseconds: 1 s a try
RETRANS = 1  # one try more: a major timeout after 2 s unanswered
STALL = 3.2  # seconds a hard mount's call waits for the server
CLI = [sys.executable, "-m", "pynfsrdma._cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def stats(mp: Path) -> dict[str, Any]:
    rep: dict[str, Any] = json.loads(cli("stats", str(mp), "--json").stdout)
    return rep


def op(rep: dict[str, Any], name: str) -> dict[str, Any]:
    """An operation's figures (all 0 before its first call)."""
    empty = {"calls": 0, "retrans": 0, "timeouts": 0, "errors": 0, "execute_ms": {"max": 0.0},
             "latency_ms": {"max": 0.0, "count": 0}}
    got: dict[str, Any] = rep["operations"].get(name, empty)
    return got


def stat_errno(path: Path) -> int:
    try:
        os.stat(path)
    except OSError as e:
        return e.errno or 0
    return 0


def table_row(text: str, name: str) -> dict[str, str]:
    """The cells of operation ``name`` in ``pynfsrdma stats``'s table, by column (cells such as
    "744 B" hold a space: the columns are cut where the header's words begin)."""
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("OPERATION "))
    row = next(line for line in lines if line.startswith(f"{name} "))
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    ends = [*starts[1:], None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends, strict=True)}


def iostat_line(text: str, name: str) -> dict[str, str]:
    """The figures under ``name:`` in the interval view, by heading (ops/s, kB/s, kB/op, retrans,
    timeouts, avg RTT (ms) ...): columns of 16 characters after the operation's name."""
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(f"{name}:"))
    heads, figures = lines[i], lines[i + 1]
    first = len(heads) % 16 or 16  # (the name's column)
    cut = range(first, len(heads), 16)
    return {heads[a:a + 16].strip(): figures[a:a + 16].strip() for a in cut}


@pytest.mark.parametrize("fault", ["stall", "cut"])
async def test_a_soft_calls_eio_is_counted_as_a_timeout(
    proxied_paths, mount_url, export_path: ExportPath, fault: str
) -> None:
    paths = await proxied_paths(count=1)
    proxy = paths[0]
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}"
    m = await trio.to_thread.run_sync(mount_url, url, f"soft,timeo={TIMEO_DS},retrans={RETRANS}")
    before = await trio.to_thread.run_sync(stats, m.path)
    getattr(proxy, fault)()
    try:
        # a name never looked up: the kernel asks, the daemon sends a LOOKUP that gets no answer
        code = await trio.to_thread.run_sync(stat_errno, m.path / "never-seen")
        after = await trio.to_thread.run_sync(stats, m.path)  # (the daemon answers; the server does not)
        text = (await trio.to_thread.run_sync(cli, "stats", str(m.path))).stdout
        iostat = (await trio.to_thread.run_sync(cli, "stats", str(m.path), "1", "1")).stdout
    finally:
        proxy.restore()
    print(text, iostat, sep="\n")
    assert code == errno.EIO
    b, a = op(before, "LOOKUP"), op(after, "LOOKUP")
    assert a["calls"] > b["calls"]
    assert a["timeouts"] > b["timeouts"]
    assert after["rpc"]["timeouts"] > before["rpc"]["timeouts"]
    # the call that failed waited for an answer (a path that answers) at least one try's timeo
    assert a["execute_ms"]["max"] >= TIMEO_DS * 100
    # what the user reads: the options in force, and the LOOKUP's timeout in both views
    options = text.splitlines()[1].split(" with ")[1].split(",")
    assert {"soft", f"timeo={TIMEO_DS}", f"retrans={RETRANS}"} <= set(options), options
    assert table_row(text, "LOOKUP")["TIMEOUTS"] == str(a["timeouts"])
    assert iostat_line(iostat, "lookup")["timeouts"] == str(a["timeouts"])  # (since the mount)


async def test_a_hard_calls_execute_time_covers_the_stall(
    proxied_paths, mount_url, export_path: ExportPath
) -> None:
    paths = await proxied_paths(count=1)
    proxy = paths[0]
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}"
    m = await trio.to_thread.run_sync(mount_url, url, f"hard,timeo={TIMEO_DS},retrans={RETRANS}")
    before = await trio.to_thread.run_sync(stats, m.path)
    proxy.stall()
    try:
        async with trio.open_nursery() as nursery:
            result: list[int] = []

            async def look() -> None:
                result.append(await trio.to_thread.run_sync(stat_errno, m.path / "never-seen"))

            nursery.start_soon(look)
            # the LOOKUP is out once the path has a request in flight (the daemon's own figures)
            with Connection(str(m.path)) as conn:
                while not conn.request("stats")["paths"][0]["in_flight"]:
                    await trio.sleep(0.02)
            seen = time.monotonic()
            await trio.sleep(STALL)
            proxy.restore()
            restored = time.monotonic()
    finally:
        proxy.restore()
    assert result == [errno.ENOENT]  # (answered once the server was back)
    after = await trio.to_thread.run_sync(stats, m.path)
    text = (await trio.to_thread.run_sync(cli, "stats", str(m.path))).stdout
    print(text)
    b, a = op(before, "LOOKUP"), op(after, "LOOKUP")
    assert a["calls"] == b["calls"] + 1
    # the call began before `seen` and ended after `restored`: its execute time holds the stall,
    # while the try that was answered took one round trip
    assert a["execute_ms"]["max"] >= (restored - seen) * 1000
    assert a["latency_ms"]["max"] < a["execute_ms"]["max"]
    assert a["retrans"] > b["retrans"]
    # unanswered from its first send until the server was back: longer than timeo x (retrans + 1)
    assert a["timeouts"] == b["timeouts"] + 1
    options = text.splitlines()[1].split(" with ")[1].split(",")
    assert {"hard", f"timeo={TIMEO_DS}", f"retrans={RETRANS}", "acregmin=3"} <= set(options), options
    row = table_row(text, "LOOKUP")
    assert float(row["MAX_EXE_MS"]) == a["execute_ms"]["max"]
    assert (row["RETRANS"], row["TIMEOUTS"]) == (str(a["retrans"]), str(a["timeouts"]))
    # nfsiostat's view, two reports: since the mount (the stalled LOOKUP's execute time in its
    # mean), then the last interval (nothing happened: no lookup line there)
    iostat = (await trio.to_thread.run_sync(cli, "stats", str(m.path), "0.5", "2")).stdout
    first, second = iostat.split("\n\n" + iostat.splitlines()[0].split(" (")[0])
    assert "(since the mount, " in first and re.search(r"\(the last [0-9.]+ s\):", second)
    lookup = iostat_line(first, "lookup")
    assert float(lookup["avg exe (ms)"]) == round(a["execute_total_ms"] / a["calls"], 3)
    assert lookup["retrans"].startswith(f"{a['retrans']} (")
    assert "lookup:" not in second and "read:" in second and "write:" in second


async def test_the_librarys_stats_count_a_soft_calls_timeout(proxied_paths, export_path: ExportPath) -> None:
    """``Client.stats()``: the same figures for a scripted client (soft by default): the call that
    failed with EIO is a timeout, and its execute time covers its whole wait."""
    from pynfsrdma import Client

    paths = await proxied_paths(count=1)
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}"
    async with Client.connect(url, timeo=TIMEO_DS / 10, retrans=RETRANS) as nfs:
        await nfs.write_file("/f", b"x")
        paths[0].stall()
        try:
            with pytest.raises(OSError) as failed:
                await nfs.stat("/f")
            assert failed.value.errno == errno.EIO
            rep = nfs.stats()
        finally:
            paths[0].restore()
    lookup = op(rep, "LOOKUP")
    assert lookup["timeouts"] >= 1 and rep["rpc"]["timeouts"] >= 1
    # it failed once its whole time, timeo x (retrans + 1), had gone unanswered
    assert lookup["execute_ms"]["max"] >= TIMEO_DS * 100 * (RETRANS + 1)
    json.dumps(rep)
