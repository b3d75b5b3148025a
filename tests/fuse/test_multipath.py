"""The mount spreads its requests over several paths to one server and survives losing one:
addresses given with addrs= (the testbed's proxies in front of NFS-Ganesha), one path cut in the
middle of a write, the file on the server exactly what was written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import trio

from pynfsrdma._testbed.ganesha import ExportPath


def cli_json(*args: str) -> object:
    p = subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", *args], capture_output=True, text=True,
                       timeout=30, check=True)
    return json.loads(p.stdout)


async def test_mount_over_three_paths_survives_a_cut_mid_write(
    proxied_paths, mount_url, export_path: ExportPath
) -> None:
    paths = await proxied_paths(count=3)
    for proxy in paths:
        proxy.throttle(20_000)  # 20 MB/s a path: the write lasts long enough to be cut in the middle
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}"
    options = f"addrs={paths.addresses[1]}+{paths.addresses[2]},hard,timeo=50"
    m = await trio.to_thread.run_sync(mount_url, url, options)
    mnt = m.path
    try:
        rows = (await trio.to_thread.run_sync(cli_json, "paths", str(mnt), "--json"))["paths"]
        assert isinstance(rows, list)
        up = sorted(r["address"] for r in rows if r["state"] == "up")
        assert up == sorted(f"{a}:{paths.port}" for a in paths.addresses)

        data = os.urandom(48 * 1024 * 1024)

        def write() -> None:
            with open(mnt / "big", "wb") as f:
                for i in range(0, len(data), 1 << 20):
                    f.write(data[i : i + (1 << 20)])
                f.flush()
                os.fsync(f.fileno())

        async with trio.open_nursery() as n:
            n.start_soon(trio.to_thread.run_sync, write)
            # (once the server holds a few MiB, WRITEs are in flight on every path: a fixed wait
            # before the cut found none yet on a loaded machine)
            big = export_path.local / "big"
            with trio.fail_after(60):
                while not (big.exists() and big.stat().st_size >= 4 << 20):
                    await trio.sleep(0.02)
            paths[1].cut()  # one of the three paths dies with requests in flight
        stats = await trio.to_thread.run_sync(cli_json, "stats", str(mnt), "--json")
        assert isinstance(stats, dict)
        assert stats["rpc"]["resends"] >= 1  # requests in flight on the cut path went again
        assert hashlib.sha256((export_path.local / "big").read_bytes()).digest() == hashlib.sha256(data).digest()
    finally:
        for proxy in paths:
            proxy.restore()
        rc = await trio.to_thread.run_sync(m.unmount)
    assert rc == 0, m.log.read_text()[-3000:]
