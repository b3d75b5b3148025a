"""``pynfsrdma stats`` and ``paths`` on a real FUSE mount of the real Ganesha export, through the
mount daemon's control socket; ``Client.stats()`` on a scripted connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma import _control_socket as control_socket
from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

PY = sys.executable
MOUNT_WAIT = 20.0
CLI = [PY, "-m", "pynfsrdma._cli.main"]


def is_mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


@pytest.fixture
def mounted(ganesha: Ganesha) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The export mounted by a foreground mount daemon (our child); unmounted at the end."""
    mp = tempfile.mkdtemp(prefix="pnr-stats-")
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([*CLI, "mount", ganesha.url, mp, "-f"], stdout=log, stderr=subprocess.STDOUT)
        yield from _serve(mp, proc, log)


def _serve(mp: str, proc: subprocess.Popen[bytes], log: Any) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    try:
        deadline = time.monotonic() + MOUNT_WAIT
        while not is_mounted(mp):
            assert proc.poll() is None, f"mount daemon exited with {proc.returncode}"
            assert time.monotonic() < deadline, "not mounted in time"
            time.sleep(0.05)
        yield mp, proc
    finally:
        if is_mounted(mp):
            subprocess.run(["fusermount3", "-u", mp], check=True)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        log.seek(0)
        assert rc == 0, log.read().decode(errors="replace")
        os.rmdir(mp)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=30)


def stats_json(mp: str) -> dict[str, Any]:
    r = cli("stats", mp, "--json")
    assert r.returncode == 0, r.stderr
    rep: dict[str, Any] = json.loads(r.stdout)
    return rep


def test_stats_and_paths_of_a_mount(mounted: tuple[str, subprocess.Popen[bytes]], ganesha: Ganesha) -> None:
    mp, proc = mounted
    sock = control_socket.socket_path(mp)
    assert os.stat(sock).st_mode & 0o777 == 0o600
    before = stats_json(mp)
    assert before["mountpoint"] == mp and before["pid"] == proc.pid

    work = Path(mp) / f"stats-{os.getpid()}"
    work.mkdir()
    payload = os.urandom(3 * 1024 * 1024 + 123)
    with open(work / "written", "wb") as f:
        f.write(payload)
        os.fsync(f.fileno())
    server_side = ganesha.export_dir / work.name / "read"
    server_side.write_bytes(os.urandom(2 * 1024 * 1024))  # never in this client's page cache
    assert (work / "read").read_bytes() == server_side.read_bytes()
    for i in range(3):
        assert not (work / f"missing-{i}").exists()

    rep = stats_json(mp)
    ops = rep["operations"]
    assert rep["version"] == 1
    # the options in force (defaults filled in) and when the mount was made
    assert rep["options"]["hard"] is True and rep["options"]["rsize"] == 1 << 20
    assert 0 < time.time_ns() - rep["mounted_at_ns"] < 600 * 10**9
    assert ops["WRITE"]["retransmitted"] == 0
    assert rep["bytes"]["written"] - before["bytes"]["written"] >= len(payload)
    assert ops["WRITE"]["calls"] >= 1
    assert ops["WRITE"]["bytes_sent"] >= len(payload)
    assert rep["bytes"]["read"] - before["bytes"]["read"] >= 2 * 1024 * 1024
    assert ops["READ"]["bytes_received"] >= 2 * 1024 * 1024
    assert ops["LOOKUP"]["statuses"].get("NFS4ERR_NOENT", 0) >= 3
    assert rep["errors"]["NFS4ERR_NOENT"] >= 3
    assert ops["MKDIR" if "MKDIR" in ops else "CREATE"]["calls"] >= 1
    assert rep["rpc"]["calls"] == sum(o["calls"] for o in ops.values())
    assert rep["rpc"]["errors"] == sum(rep["errors"].values())
    for o in ops.values():
        lat = o["latency_ms"]
        assert lat["count"] == o["calls"]
        assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert rep["rpc"]["resends"] == 0 and rep["rpc"]["replays"] == 0
    [session] = rep["sessions"]
    assert session["slots"]["max"] >= 1
    assert 0 <= session["slots"]["in_use"] <= session["slots"]["target"] <= session["slots"]["max"]
    [path] = rep["paths"]
    assert path["address"] == f"{ganesha.host}:{ganesha.port}"
    assert path["state"] == "up" and path["transport"] == "tcp" and path["rdma"] is None
    assert path["replies"] == rep["rpc"]["calls"]
    assert path["bytes_sent"] == rep["rpc"]["bytes_sent"] >= len(payload)
    assert path["calls"] >= path["replies"]
    assert path["rtt_ms"] > 0

    text = cli("stats", mp)
    assert text.returncode == 0, text.stderr
    assert "WRITE" in text.stdout and "NFS4ERR_NOENT" in text.stdout and "STATE" in text.stdout

    r = cli("paths", mp, "--json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["paths"]
    assert row["address"] == path["address"] and row["state"] == "up"
    assert row["bytes_sent"] >= path["bytes_sent"]
    r = cli("paths", mp)
    assert r.returncode == 0 and path["address"] in r.stdout

    # --watch, piped: one JSON line per interval, each newer than the last
    w = subprocess.Popen([*CLI, "stats", mp, "--watch", "0.2"], stdout=subprocess.PIPE, text=True)
    try:
        assert w.stdout is not None
        first = json.loads(w.stdout.readline())
        (work / "more").write_bytes(b"z" * 100_000)
        os.sync()
        lines = [json.loads(w.stdout.readline()) for _ in range(3)]
    finally:
        w.terminate()
        w.wait(timeout=10)
    assert all(x["uptime_s"] >= first["uptime_s"] for x in lines)
    assert lines[-1]["rpc"]["calls"] >= first["rpc"]["calls"]


def test_socket_goes_with_the_mount(ganesha: Ganesha) -> None:
    mp = tempfile.mkdtemp(prefix="pnr-stats-")
    try:
        r = subprocess.run([*CLI, "mount", ganesha.url, mp], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr  # background: returns once mounted
        sock = control_socket.socket_path(mp)
        assert os.path.exists(sock)
        assert stats_json(mp)["paths"][0]["state"] == "up"
        subprocess.run(["fusermount3", "-u", mp], check=True)
        deadline = time.monotonic() + 20
        while os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(sock)
        r = cli("stats", mp)
        assert r.returncode == 1 and "not a pynfsrdma mount" in r.stderr
    finally:
        if is_mounted(mp):
            subprocess.run(["fusermount3", "-u", mp], check=False)
        os.rmdir(mp)


def test_not_a_pynfsrdma_mount(tmp_path: Path) -> None:
    r = cli("stats", str(tmp_path))
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"pynfsrdma stats: {tmp_path}: not a pynfsrdma mount (nothing is mounted there)"
    )
    assert r.stdout == ""
    r = cli("stats", "/proc", "--json")
    assert r.returncode == 1 and "not a pynfsrdma mount (it is a proc mount)" in r.stderr
    r = cli("paths", str(tmp_path))
    assert r.returncode == 1 and "not a pynfsrdma mount" in r.stderr


async def test_client_stats(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(ganesha.url) as nfs:
        await nfs.write_file(f"/{export_path.name}/f", b"a" * 70_000)
        assert await nfs.read_file(f"/{export_path.name}/f") == b"a" * 70_000
        rep = nfs.stats()
    assert rep["bytes"]["written"] >= 70_000
    assert rep["bytes"]["read"] >= 70_000
    assert rep["op_counts"]["WRITE"] >= 1  # (in the COMPOUND named after its OPEN: one round trip)
    assert rep["paths"][0]["verification"] == "mount"
    assert rep["paths"][0]["replies"] == rep["rpc"]["calls"]
    json.dumps(rep)  # JSON-ready


async def test_client_stats_over_rdma(ganesha: Ganesha, export_path: ExportPath) -> None:
    """proto=rdma through the RPC-over-RDMA responder (software provider): the RDMA figures of the
    path are the transport's own, and READ data placed by RDMA Write counts as received."""
    import trio

    from pynfsrdma._testbed.rdma_responder import serve_rdma
    from pynfsrdma._transport.rdma.soft import SoftProvider

    data = os.urandom(300_000)
    async with trio.open_nursery() as nursery:
        r = await serve_rdma(nursery, SoftProvider(), "127.0.0.1", 0, ganesha.host, ganesha.port)
        try:
            url = f"nfs://127.0.0.1:{r.port}{export_path.remote}?proto=rdma&provider=soft"
            async with Client.connect(url) as nfs:
                await nfs.write_file("/f", data)
                assert await nfs.read_file("/f") == data
                rep = nfs.stats()
                t = nfs.clientid.paths.paths[0].rpc.transport  # type: ignore[union-attr]
                [path] = rep["paths"]
                rdma = path["rdma"]
                assert path["transport"] == "rdma"
                assert rdma["chunks"]["read_chunk_segments"] == t.stats.read_chunk_segments >= 1  # WRITE data
                assert rdma["chunks"]["write_chunks"] == t.stats.write_chunks >= 1  # READ data
                assert rdma["credits"]["requested"] == t.gate.requested
                assert 1 <= rdma["credits"]["granted"] <= rdma["credits"]["requested"]
                assert rdma["inline"] == {
                    "send": t.thresholds.send,
                    "recv": t.thresholds.recv,
                    "remote_invalidation": t.thresholds.remote_invalidation,
                }
                assert rep["bytes"]["read"] >= len(data) and rep["bytes"]["written"] >= len(data)
                assert rep["operations"]["READ"]["bytes_received"] >= len(data)
                json.dumps(rep)
        finally:
            await r.aclose()
            nursery.cancel_scope.cancel()
