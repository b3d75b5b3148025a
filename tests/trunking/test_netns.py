"""NFS-Ganesha in a network namespace of its own, reached at 127.0.0.1, .2 and .3 without any proxy.

The test makes a namespace (``ip netns add``, ``lo`` up), runs :mod:`netns_scenario` inside it as a
subprocess (server and client both live in the namespace; nothing leaves it), checks its report, and
deletes the namespace (after ending any process of its own still in there).

What it proves end to end: Ganesha's quirk (EXCHANGE_ID through a second address answers a new client
ID) is handled by binding our session over that address and destroying the stray client ID; and a path
whose connections are destroyed with ``ss -K`` fails over (the write finishes, checksum right) and is
bound again when it reconnects, without another stray client ID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

SCENARIO = Path(__file__).with_name("netns_scenario.py")


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"pynfsrdma-t-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
        for pid in pids:  # only processes of the test's own namespace (a scenario that timed out)
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "delete", name], check=True)


def test_ganesha_at_three_addresses_of_its_namespace(netns: str) -> None:
    proc = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, str(SCENARIO), str(24 << 20)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    paths = {p["address"].rsplit(":", 1)[0]: p for p in report["paths"]}
    assert sorted(paths) == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert all(p["state"] == "up" for p in paths.values())
    assert paths["127.0.0.1"]["verification"] == "mount"
    for a in ("127.0.0.2", "127.0.0.3"):
        # the quirk: a new client ID there, proven the same server by binding our session
        assert paths[a]["verification"] == "same server owner, new client ID (bind to prove it)"
    assert len(report["bound_to_the_session"]) == 3
    assert report["stray_clientids_destroyed"] == 2
    # ss -K inside the namespace: the path's requests moved, the data is right, the path came back
    assert report["ss_kills"] >= 1 and report["resends"] >= 1 and report["victim_connects"] >= 2
    assert report["read_back_ok"] and report["on_disk_ok"]
    assert report["victim_bound_again"]
    assert report["stray_clientids_after_failover"] == 2  # a rebind, not a new EXCHANGE_ID
