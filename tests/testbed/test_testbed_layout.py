"""The detached testbed with paths, the trunking advertiser and the RDMA responder, used as a person
would: start it, reach the export every way it offers, stop it, nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pynfsrdma._client.api import Client
from pynfsrdma._testbed.procs import pid_alive


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pynfsrdma._cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


async def test_up_with_paths_and_rdma_then_down(tmp_path: Path) -> None:
    state_dir = tmp_path / "tb"
    info = json.loads(
        cli("testbed", "up", "--paths", "2", "--rdma", "--json", "--dir", str(state_dir)).stdout
    )
    pids = [info["server"]["pid"], info["advertiser"]["pid"], info["rdma"]["pid"]] + [
        p["pid"] for p in info["paths"]
    ]
    try:
        assert len(info["advertiser"]["advertised"]) == 3  # two TCP paths and the RDMA responder
        export = Path(info["export_dir"])
        (export / "hello").write_bytes(b"through every path")
        async with Client.connect(info["url"]) as nfs:  # first path; discovery finds the second
            assert await nfs.read_file("/hello") == b"through every path"
            assert nfs.trunking is not None
            await nfs.trunking.settled.wait()
            addresses = {p["address"] for p in nfs.trunking.snapshot() if p["state"] == "up"}
            assert {f"{p['address']}:{p['port']}" for p in info["paths"]} <= addresses
        async with Client.connect(info["rdma"]["url"]) as nfs:
            await nfs.write_file("/over-rdma", os.urandom(300_000))
        assert (export / "over-rdma").stat().st_size == 300_000
    finally:
        cli("testbed", "down", "--dir", str(state_dir))
    assert not any(pid_alive(p) for p in pids)
