"""``pynfsrdma testbed up|status|fault|down``: the real commands as subprocesses, and ensure_testbed."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._cli import testbed as cli
from pynfsrdma._proto.nfs4.const import NFS4_PROGRAM, NFS_V4, NFSPROC4_NULL
from pynfsrdma._proto.rpc import (
    AUTH_NONE,
    MAX_AUTH_BYTES,
    REPLY,
    RM_LAST_FRAGMENT,
    RM_LENGTH_MASK,
    SUCCESS,
    pack_call_header,
    unpack_reply_header,
)
from pynfsrdma._testbed import daemon, ensure_testbed
from pynfsrdma._testbed.procs import ProcessRecord, cmdline, pid_alive, wait_pid_gone
from pynfsrdma._xdr import Packer, Unpacker

pytestmark = pytest.mark.ganesha


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A short state directory (unix socket paths are limited); whatever runs there is stopped after."""
    directory = Path(tempfile.mkdtemp(prefix="tb-", dir="/tmp"))
    yield directory
    daemon.down(directory)
    shutil.rmtree(directory, ignore_errors=True)


def run(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pynfsrdma._cli.testbed", *args, "--dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def run_json(state_dir: Path, *args: str) -> Any:
    done = run(state_dir, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def rpc_null(host: str, port: int, xid: int = 7) -> int | None:
    """A blocking ONC RPC NULL call to the NFSv4 program; returns the accept status."""
    cred = Packer()
    cred.uint32(AUTH_NONE)
    cred.opaque(b"", MAX_AUTH_BYTES)
    p = Packer()
    pack_call_header(p, xid, NFS4_PROGRAM, NFS_V4, NFSPROC4_NULL, cred.getvalue())
    body = p.getvalue()
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(struct.pack(">I", RM_LAST_FRAGMENT | len(body)) + body)
        f = sock.makefile("rb")
        (mark,) = struct.unpack(">I", f.read(4))
        u = Unpacker(f.read(mark & RM_LENGTH_MASK))
    assert (u.uint32(), u.uint32()) == (xid, REPLY)
    return unpack_reply_header(u).accept


def test_up_status_fault_down(state_dir: Path) -> None:
    info = run_json(state_dir, "up", "--paths", "2")
    assert info["started"] is True and info["state_dir"] == str(state_dir)
    server, paths = info["server"], info["paths"]
    assert (
        server["address"] == "127.0.0.1" and info["direct_url"] == f"nfs://127.0.0.1:{server['port']}/export"
    )
    assert [p["address"] for p in paths] == ["127.0.0.2", "127.0.0.3"]
    assert len({p["port"] for p in paths}) == 1
    assert info["url"] == paths[0]["url"] == f"nfs://127.0.0.2:{paths[0]['port']}/export"
    assert Path(info["export_dir"]).is_dir() and Path(info["export_dir"]).is_relative_to(state_dir)
    pids = [server["pid"], info["advertiser"]["pid"], *(p["pid"] for p in paths)]
    assert all(pid_alive(pid) for pid in pids)
    assert any("ganesha.nfsd" in arg for arg in cmdline(server["pid"]))
    assert os.getsid(server["pid"]) == server["pid"]  # detached: a session of its own

    # The server answers through every path and directly.
    for address in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
        assert rpc_null(address, server["port"]) == SUCCESS

    again = run_json(state_dir, "up", "--paths", "2")
    assert again["started"] is False and again["server"]["pid"] == server["pid"]

    done = run(state_dir, "fault", "127.0.0.3", "delay", "25")
    assert done.returncode == 0 and "delay 25 ms" in done.stdout
    [after] = run_json(state_dir, "fault", "127.0.0.3", "cut")["answers"]
    assert after["fault"] == {"mode": "cut", "delay_ms": 25.0, "throttle_kbps": None}
    with pytest.raises(ConnectionResetError):
        rpc_null("127.0.0.3", server["port"])
    assert rpc_null("127.0.0.2", server["port"]) == SUCCESS

    status = run_json(state_dir, "status")
    assert status["running"] is True
    assert [p["fault"]["mode"] for p in status["paths"]] == ["pass", "cut"]
    assert status["paths"][0]["stats"]["bytes_to_client"] > 0
    assert status["paths"][1]["stats"]["connections_reset"] == 1

    done = run(state_dir, "fault", "127.0.0.99", "cut")
    assert done.returncode == 1 and "no path at 127.0.0.99" in done.stderr
    done = run(state_dir, "fault", "127.0.0.2", "explode")
    assert done.returncode == 1 and "unknown fault" in done.stderr
    done = run(state_dir, "fault", "all", "restore")
    assert done.returncode == 0 and done.stdout.count(": ok") == 2
    assert rpc_null("127.0.0.3", server["port"]) == SUCCESS

    down = run_json(state_dir, "down")
    assert sorted(down["stopped_pids"]) == sorted(pids)
    assert not any(pid_alive(pid) for pid in pids)
    assert not state_dir.exists()
    done = run(state_dir, "status")
    assert done.returncode == 1 and "no testbed running" in done.stdout


def test_plain_up_prints_only_the_url(state_dir: Path) -> None:
    done = run(state_dir, "up")
    assert done.returncode == 0, done.stderr
    state = json.loads((state_dir / "state.json").read_text())
    assert done.stdout.strip() == state["url"] == state["direct_url"]
    assert state["paths"] == [] and "already running" not in done.stderr
    assert rpc_null("127.0.0.1", state["server"]["port"]) == SUCCESS


def test_ensure_testbed_starts_once(state_dir: Path) -> None:
    first = ensure_testbed(state_dir)
    second = ensure_testbed(state_dir)
    assert first == second and pid_alive(first["server"]["pid"])
    (Path(first["export_dir"]) / "seen").write_text("x")
    assert daemon.down(state_dir) is not None
    assert not pid_alive(first["server"]["pid"])


def test_a_dead_path_makes_up_start_afresh(state_dir: Path) -> None:
    info = run_json(state_dir, "up", "--paths", "1")
    path_pid = info["paths"][0]["pid"]
    os.kill(path_pid, signal.SIGKILL)  # a process this test's `up` started
    wait_pid_gone(path_pid, 5)
    done = run(state_dir, "status")
    assert done.returncode == 1 and "NOT RUNNING" in done.stderr
    fresh = run_json(state_dir, "up", "--paths", "1")
    assert fresh["started"] is True
    assert not pid_alive(info["server"]["pid"])  # the rest of the broken one was stopped
    assert rpc_null("127.0.0.2", fresh["paths"][0]["port"]) == SUCCESS


def test_down_never_signals_a_pid_that_is_no_longer_ours(state_dir: Path) -> None:
    info = run_json(state_dir, "up", "--paths", "1")
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        # As if the proxy had died and the kernel had given its PID to an unrelated process.
        state = json.loads((state_dir / "state.json").read_text())
        record = state["processes"]["paths"][0]
        record["pid"] = bystander.pid
        (state_dir / "state.json").write_text(json.dumps(state))
        assert not ProcessRecord.from_json(record).is_running()
        down = daemon.down(state_dir)
        # the server and the trunking advertiser in front of it; never the bystander
        assert down is not None
        assert sorted(down["stopped_pids"]) == sorted([info["server"]["pid"], info["advertiser"]["pid"]])
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
        real_proxy = ProcessRecord.of(info["paths"][0]["pid"], "pynfsrdma._testbed.proxy")
        real_proxy.stop()  # the proxy this test started, left alone by down above


def test_the_parser_names_the_state_directory_variable_the_testbed_reads() -> None:
    """(the parser names it itself, so that it imports no testbed)"""
    assert cli.ENV_STATE_DIR == daemon.ENV_STATE_DIR


def test_handler_through_a_small_argparse(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="pynfsrdma")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["testbed", "status", "--dir", str(state_dir)])
    assert args.func(args) == 1
    assert "no testbed running" in capsys.readouterr().out
    args = parser.parse_args(["testbed", "fault", "127.0.0.2", "cut", "--dir", str(state_dir)])
    assert args.func(args) == 1
    assert "no testbed running" in capsys.readouterr().err
    args = parser.parse_args(["testbed", "down", "--dir", str(state_dir)])
    assert args.func(args) == 0
    assert "no testbed was running" in capsys.readouterr().out


def test_state_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(daemon.ENV_STATE_DIR, str(tmp_path / "env"))
    assert daemon.resolve_state_dir(None) == tmp_path / "env"
    assert daemon.resolve_state_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv(daemon.ENV_STATE_DIR)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert daemon.resolve_state_dir(None) == tmp_path / "pynfsrdma" / "testbed"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert daemon.resolve_state_dir(None) in (
        Path("/run/pynfsrdma/testbed"),
        Path(f"/tmp/pynfsrdma-testbed-{os.getuid()}"),
    )


def test_up_says_how_the_running_testbed_differs_from_what_was_asked(state_dir: Path) -> None:
    """A second ``up`` with other options reports the running testbed and names each option it did
    not get, rather than ignoring them."""
    first = run_json(state_dir, "up")
    again = run(state_dir, "up", "--paths", "2", "--port", "1", "--krb5")
    assert again.returncode == 0 and again.stdout.strip() == first["url"]
    assert again.stderr.splitlines()[-1] == (
        f"pynfsrdma testbed: it runs with 0 paths; on port {first['server']['port']}; without --krb5: "
        "run `down` first for another layout")
