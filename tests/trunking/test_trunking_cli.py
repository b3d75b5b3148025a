"""``pynfsrdma paths`` and ``pynfsrdma failover-test`` as a user runs them (subprocesses, real server)."""

from __future__ import annotations

import json
import subprocess
import sys

import trio

from pynfsrdma._testbed import Ganesha


async def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "pynfsrdma._cli.main", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    )


async def test_paths_lists_discovered_paths(advertised, export_path) -> None:
    adv = await advertised(2)
    r = await run_cli("paths", adv.url(export_path.remote), "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["address"]: row for row in json.loads(r.stdout)["paths"]}
    assert set(rows) == {adv.address(0), adv.address(1)}
    assert all(row["state"] == "up" and row["transport"] == "tcp" for row in rows.values())
    assert rows[adv.address(1)]["verification"] == "session trunking"
    assert rows[adv.address(1)]["source"] == "fs_locations_info"
    r = await run_cli("paths", adv.url(export_path.remote))
    assert r.returncode == 0 and r.stdout.splitlines()[0].split()[:3] == ["STATE", "ADDRESS", "TRANSPORT"]


async def test_paths_of_a_directory_that_is_no_mount_is_a_clear_error(tmp_path) -> None:
    r = await run_cli("paths", str(tmp_path))
    assert r.returncode == 1 and "not a pynfsrdma mount" in r.stderr


async def test_failover_test_reports_nothing_lost_or_repeated(ganesha: Ganesha, export_path) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"
    r = await run_cli(
        "failover-test",
        url,
        "--paths",
        "3",
        "--faults",
        "4",
        "--interval",
        "0.3",
        "--down",
        "0.2",
        "--workers",
        "2",
        "--json",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["faults"] == 4 and len(report["stall_times_s"]) == 4
    assert report["operations_completed"] > 0
    assert report["operations_lost"] == 0 and report["operations_repeated"] == 0
    assert list(export_path.local.iterdir()) == []  # its working directory is removed
