"""``pynfsrdma testbed up --paths N --link-rate ...``: the server in a network namespace of the testbed's own,
each path a link with a kernel rate limit, and faults made in the kernel.

Everything runs for real (root: ``ip netns``, HTB on the namespace's ``lo``, nftables, ``ss -K``). The
checks read the kernel's own counters and socket errors, never a clock: which link carried the bytes, that
HTB held a link back (its ``overlimits``), the rate the class has now, and what a connection sees when
its path is cut, stalled or restored. The testbed is ended after each test and the namespace must be gone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._testbed.netns import Namespace
from pynfsrdma._testbed.procs import pid_alive
from pynfsrdma._testbed.proxy_control import control_request

pytestmark = [
    pytest.mark.ganesha,
    pytest.mark.usefixtures("link_tools"),
]

RATES = (40, 10)  # MB/s: 127.0.0.2, 127.0.0.3
MiB = 1 << 20

# Run inside the namespace: connect to ADDRESS:PORT (1 s at most) and say what happened.
PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0).close()
    print("connected")
except ConnectionRefusedError:
    print("refused")
except TimeoutError:
    print("timeout")
"""

# Run inside the namespace: hold a connection open until a line arrives on stdin, then read from it.
HOLD = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5.0)
print("connected", flush=True)
sys.stdin.readline()
try:
    print("eof" if not s.recv(1) else "data")
except ConnectionAbortedError:
    print("aborted")
except ConnectionResetError:
    print("reset")
except TimeoutError:
    print("timeout")
"""


def cli(state_dir: Path, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "pynfsrdma._cli.testbed", *args, "--dir", str(state_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def links() -> Iterator[tuple[Path, dict[str, Any]]]:
    """A link testbed with two paths (40 and 10 MB/s), ended afterwards; its namespace must be gone."""
    state_dir = Path(tempfile.mkdtemp(prefix="lt-", dir="/tmp"))
    state: dict[str, Any] = {}
    try:
        state = cli(state_dir, "up", "--paths", str(len(RATES)), "--link-rate", ",".join(map(str, RATES)))
        yield state_dir, state
    finally:
        stopped = cli(state_dir, "down")
        shutil.rmtree(state_dir, ignore_errors=True)
    if state:
        assert not Namespace(state["netns"]).exists()
        assert state["server"]["pid"] in stopped["stopped_pids"]
        assert not any(pid_alive(pid) for pid in stopped["stopped_pids"])


def in_ns(state: dict[str, Any], *argv: str, timeout: float = 60) -> str:
    done = subprocess.run([*state["client_prefix"], *argv], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def probe(state: dict[str, Any], address: str) -> str:
    return in_ns(state, sys.executable, "-c", PROBE, address, "2049").strip()


def classes(state: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per HTB class of the namespace's lo: bytes sent, overlimits, and its rate in bits/s."""
    out = in_ns(state, "tc", "-s", "class", "show", "dev", "lo")
    units = {"bit": 1, "Kbit": 10**3, "Mbit": 10**6, "Gbit": 10**9}
    found = {}
    for m in re.finditer(
        r"class htb (\S+) .*? rate (\d+)(\w+) .*?\n\s*Sent (\d+) bytes \d+ pkt \(dropped \d+, overlimits (\d+)", out
    ):
        found[m.group(1)] = {
            "rate": int(m.group(2)) * units[m.group(3)],
            "bytes": int(m.group(4)),
            "overlimits": int(m.group(5)),
        }
    return found


def link_bytes(state_dir: Path) -> list[tuple[int, int]]:
    return [(p["stats"]["bytes_to_server"], p["stats"]["bytes_to_client"]) for p in cli(state_dir, "status")["paths"]]


def test_up_describes_the_links(links: tuple[Path, dict[str, Any]]) -> None:
    state_dir, state = links
    assert state["kind"] == "links" and state["client_prefix"][:3] == ["ip", "netns", "exec"]
    assert [p["address"] for p in state["paths"]] == ["127.0.0.2", "127.0.0.3"]
    assert [p["rate_MBps"] for p in state["paths"]] == list(RATES)
    assert state["paths"][0]["order"] > state["paths"][1]["order"]  # the faster link is read first
    assert state["url"] == state["paths"][0]["url"]
    assert Namespace(state["netns"]).exists()
    status = cli(state_dir, "status")
    assert status["running"]
    rates = classes(state)
    assert rates["1:100"]["rate"] == rates["1:200"]["rate"] == RATES[0] * 8 * 10**6
    assert rates["1:101"]["rate"] == rates["1:201"]["rate"] == RATES[1] * 8 * 10**6


def test_each_path_is_shaped_by_its_own_link(links: tuple[Path, dict[str, Any]]) -> None:
    state_dir, state = links
    data = os.urandom(6 * MiB)
    src = state_dir / "src"
    src.write_bytes(data)
    before = classes(state)
    # through the second path only: Ganesha names no other paths, so nothing else is discovered
    in_ns(state, sys.executable, "-m", "pynfsrdma._cli.main", "put", str(src), "nfs://127.0.0.3:2049/export/slow")
    after = classes(state)
    assert (Path(state["export_dir"]) / "slow").read_bytes() == data
    carried = {c: after[c]["bytes"] - before[c]["bytes"] for c in after}
    assert carried["1:101"] >= len(data)  # the write went to the server over the second link
    assert carried["1:100"] == 0 and carried["1:200"] == 0  # and not over the first
    assert after["1:101"]["overlimits"] > before["1:101"]["overlimits"]  # HTB held it to its rate
    # a read comes back over the same link's other class
    in_ns(state, sys.executable, "-m", "pynfsrdma._cli.main", "get", "nfs://127.0.0.3:2049/export/slow", str(state_dir / "back"))
    assert (state_dir / "back").read_bytes() == data
    again = classes(state)
    assert again["1:201"]["bytes"] - after["1:201"]["bytes"] >= len(data)
    assert again["1:100"]["bytes"] == after["1:100"]["bytes"] and again["1:200"]["bytes"] == after["1:200"]["bytes"]
    assert link_bytes(state_dir)[1][0] == again["1:101"]["bytes"]  # status reports the same counters


def test_rate_changes_the_links_class_and_restore_sets_it_back(links: tuple[Path, dict[str, Any]]) -> None:
    state_dir, state = links
    changed = cli(state_dir, "fault", "127.0.0.3", "rate", "2.5")
    assert changed["answers"][0]["rate_MBps"] == 2.5
    now = classes(state)
    assert now["1:101"]["rate"] == now["1:201"]["rate"] == 20 * 10**6
    assert now["1:100"]["rate"] == RATES[0] * 8 * 10**6  # the other link as it was
    cli(state_dir, "fault", "127.0.0.3", "restore")
    assert classes(state)["1:101"]["rate"] == RATES[1] * 8 * 10**6


def test_cut_aborts_connections_and_refuses_new_ones_until_restore(links: tuple[Path, dict[str, Any]]) -> None:
    state_dir, state = links
    held = subprocess.Popen(
        [*state["client_prefix"], sys.executable, "-c", HOLD, "127.0.0.3", "2049"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert held.stdout is not None and held.stdin is not None
        assert held.stdout.readline().strip() == "connected"
        cli(state_dir, "fault", "127.0.0.3", "cut")
        held.stdin.write("go\n")
        held.stdin.flush()
        assert held.stdout.readline().strip() == "aborted"  # ss -K destroyed it
    finally:
        held.kill()
        held.wait()
    assert probe(state, "127.0.0.3") == "refused"
    assert probe(state, "127.0.0.2") == "connected"  # the other path is untouched
    cli(state_dir, "fault", "127.0.0.3", "restore")
    assert probe(state, "127.0.0.3") == "connected"


def test_stall_black_holes_a_path_until_restore(links: tuple[Path, dict[str, Any]]) -> None:
    state_dir, state = links
    cli(state_dir, "fault", "127.0.0.2", "stall")
    before = classes(state)
    assert probe(state, "127.0.0.2") == "timeout"
    assert probe(state, "127.0.0.3") == "connected"
    after = classes(state)
    assert after["1:100"]["bytes"] == before["1:100"]["bytes"]  # dropped before the link
    cli(state_dir, "fault", "all", "restore")
    assert probe(state, "127.0.0.2") == "connected"


def test_delay_goes_through_a_proxy_that_still_reaches_the_server(links: tuple[Path, dict[str, Any]]) -> None:
    state_dir, state = links
    changed = cli(state_dir, "fault", "127.0.0.3", "delay", "20")
    assert changed["answers"][0]["link"]["delay_ms"] == 20
    before = classes(state)
    in_ns(state, sys.executable, "-m", "pynfsrdma._cli.main", "ls", "nfs://127.0.0.3:2049/export")
    proxy = control_request(str(state_dir / "d2.sock"), {"cmd": "status"})["proxy"]
    assert proxy["fault"]["delay_ms"] == 20
    assert proxy["stats"]["connections_accepted"] >= 1 and proxy["stats"]["bytes_to_client"] > 0
    assert classes(state)["1:101"]["bytes"] > before["1:101"]["bytes"]  # still over the path's own link
    cli(state_dir, "fault", "127.0.0.3", "restore")
    assert probe(state, "127.0.0.3") == "connected"


def test_a_transfer_over_both_links_survives_a_cut(links: tuple[Path, dict[str, Any]]) -> None:
    state_dir, state = links
    data = os.urandom(40 * MiB)
    src = state_dir / "big"
    src.write_bytes(data)
    writer = subprocess.Popen(
        [*state["client_prefix"], sys.executable, "-m", "pynfsrdma._cli.main", "put", str(src), state["url"] + "/big"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        start = classes(state)["1:101"]["bytes"]
        while writer.poll() is None and classes(state)["1:101"]["bytes"] - start < 2 * MiB:
            time.sleep(0.02)
        assert writer.poll() is None, "the write ended before the second path carried 2 MiB"
        cli(state_dir, "fault", "127.0.0.3", "cut")
        cut_at = classes(state)["1:101"]["bytes"]
        _, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, err[-2000:]
    assert (Path(state["export_dir"]) / "big").read_bytes() == data
    # after the cut only what was queued already (a socket's send buffer, the link's queue)
    assert classes(state)["1:101"]["bytes"] - cut_at < 0.05 * len(data)
