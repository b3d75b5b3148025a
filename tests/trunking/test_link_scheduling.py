"""Trunking over links of their own (the link testbed): one client's large write and read are spread
over every path in proportion to what each link delivers, an RPC-over-RDMA path among TCP ones
included, and a path cut during a write leaves its share to the others with the data intact.

The client runs inside the testbed's namespace (:mod:`link_scenario`); the shares come from the
kernel's per-link byte counters, with the tolerance the trunking issue sets (25% of each share), and
no clock is read. The links are slow enough (40 MB/s at most together) that they, not the CPU, set
the pace even on a loaded 2-core machine: where the client or the server cannot keep the links
full, what each path carries follows the CPU time each got, not its link's rate.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._testbed import daemon
from pynfsrdma._testbed.netns import Namespace

pytestmark = [
    pytest.mark.ganesha,
    pytest.mark.usefixtures("link_tools"),
]

SCENARIO = Path(__file__).with_name("link_scenario.py")
MiB = 1 << 20
SIZE = 48 * MiB
TOLERANCE = 0.25  # of each path's share


@pytest.fixture
def link_testbed() -> Iterator[Callable[..., dict[str, Any]]]:
    """``link_testbed("20,10,5,5", 4)``: a link testbed, ended after the test (its namespace gone);
    ``rdma=True``: its last path is RPC-over-RDMA."""
    made: list[tuple[Path, str]] = []

    def make(rates: str, paths: int, rdma: bool = False) -> dict[str, Any]:
        state_dir = Path(tempfile.mkdtemp(prefix="ls-", dir="/tmp"))
        state, _ = daemon.up(state_dir, paths=paths, link_rates=rates, rdma=rdma)
        made.append((state_dir, state["netns"]))
        return state

    yield make
    for state_dir, netns in made:
        daemon.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
        assert not Namespace(netns).exists()


def run_scenario(state: dict[str, Any], name: str, *extra: str, size: int = SIZE) -> dict[str, Any]:
    done = subprocess.run(
        [*state["client_prefix"], sys.executable, str(SCENARIO), state["url"], str(len(state["paths"])),
         str(size), name, *extra],
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["read_back_ok"]
    on_disk = (Path(state["export_dir"]) / name).read_bytes()
    assert hashlib.sha256(on_disk).hexdigest() == report["sha256"]
    return report


def shares(carried: list[int]) -> list[float]:
    return [x / sum(carried) for x in carried]


def assert_follow(carried: list[int], rates: list[float]) -> None:
    want = [r / sum(rates) for r in rates]
    got = shares(carried)
    assert all(abs(g - w) <= TOLERANCE * w for g, w in zip(got, want, strict=True)), (got, want)


def test_equal_links_each_carry_an_equal_share(link_testbed: Callable[[str, int], dict[str, Any]]) -> None:
    state = link_testbed("10", 4)
    report = run_scenario(state, "equal")
    assert len(report["addresses"]) == 4
    assert sum(report["write"]) >= SIZE and sum(report["read"]) >= SIZE
    assert_follow(report["write"], [1, 1, 1, 1])
    assert_follow(report["read"], [1, 1, 1, 1])


def test_unequal_links_carry_bytes_as_their_rates(link_testbed: Callable[[str, int], dict[str, Any]]) -> None:
    rates = [20.0, 10.0, 5.0, 5.0]
    state = link_testbed(",".join(map(str, rates)), 4)
    report = run_scenario(state, "unequal")
    assert_follow(report["write"], rates)
    assert_follow(report["read"], rates)
    for phase in ("write", "read"):
        fast, middle, *slow = report[phase]
        assert fast > middle > max(slow)


@pytest.mark.parametrize("rates", [[10.0, 5.0, 15.0], [15.0, 10.0, 5.0]], ids=["rdma-fastest", "rdma-slowest"])
def test_an_rdma_path_and_tcp_paths_carry_bytes_as_their_rates(
    link_testbed: Callable[..., dict[str, Any]], rates: list[float]
) -> None:
    """One session over two TCP paths and an RPC-over-RDMA one (the last link: the software provider,
    whose queue pair is a TCP connection the link's classes shape as the others): a large write (RDMA
    Reads of the data by the responder) and a large read (RDMA Writes into the client's buffers) are
    spread by the same rule, each link's share of the bytes within 25% of its rate's share."""
    state = link_testbed(",".join(map(str, rates)), 3, rdma=True)
    assert [p["transport"] for p in state["paths"]] == ["tcp", "tcp", "rdma"]
    report = run_scenario(state, "mixed", size=128 * MiB)
    rdma_path = f"{state['rdma']['address']}:{state['rdma']['port']}"
    assert report["transports"] == {
        **{f"{p['address']}:{p['port']}": "tcp" for p in state["paths"][:2]},
        rdma_path: "rdma",
    }
    assert sum(report["write"]) >= SIZE and sum(report["read"]) >= SIZE
    assert_follow(report["write"], rates)
    assert_follow(report["read"], rates)


def test_a_cut_path_leaves_its_share_to_the_others(link_testbed: Callable[[str, int], dict[str, Any]]) -> None:
    state = link_testbed("10", 3)
    state_dir = state["state_dir"]
    report = run_scenario(state, "cut", "--cut", "127.0.0.4", state_dir, size=2 * SIZE)
    assert "after_cut" in report, "the write ended before the path was cut"
    first, second, victim = report["write"]
    assert victim >= 2 * MiB  # it carried its share until the cut
    # after it, only what its socket and its link's queue held already (the kernel's, not ours)
    assert report["after_cut"][2] < 0.05 * sum(report["after_cut"][:2])
    assert victim < min(first, second)  # the others took the rest of the write
    assert sum(report["after_cut"][:2]) > 0
    assert report["read"][2] < 64 * 1024  # the read went over the two paths left
    assert_follow(report["read"][:2], [1, 1])


def test_a_slowed_link_gets_its_new_share_of_what_follows(link_testbed: Callable[[str, int], dict[str, Any]]) -> None:
    """A link slowed from 10 to 5 MB/s during a read carries 1/7 of what the links carry after it,
    not the quarter it carried before (its calls go where they complete first)."""
    state = link_testbed("10", 4)
    report = run_scenario(state, "slowed", "--slow", "127.0.0.5", "5", state["state_dir"], size=128 * MiB)
    assert "after_slow" in report, "the read ended before the shares after the change were taken"
    assert_follow(report["after_slow"], [10, 10, 10, 5])
    assert_follow(report["write"], [1, 1, 1, 1])  # (before it, every link its quarter)
