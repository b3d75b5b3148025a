"""Two mounts of one server on one host (and two API clients in one process) are two NFS clients.

With one client owner they would present the same co_ownerid with different boot verifiers, and the
server would hand the client ID to whichever spoke last: each would lose its sessions and state to the
other, again and again (NFS4ERR_BADSESSION, STALE_CLIENTID). Each mount point has an owner of its
own, and so has each API client.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._control_socket import Connection
from pynfsrdma._testbed.ganesha import Ganesha


def recoveries(m: Any) -> int:
    with Connection(str(m.path)) as conn:
        return int(conn.request("stats")["recoveries"])


def test_two_mounts_of_one_server_do_not_take_each_others_client_id(
    mount_export: Callable[..., Any], ganesha: Ganesha
) -> None:
    d = ganesha.new_directory(prefix="two-")
    a, b = mount_export(), mount_export()
    for round_ in range(3):  # each round: both clients work, in turn and together
        for i, m in enumerate((a, b)):
            (m.path / d.local.name / f"from-{i}-{round_}").write_bytes(b"%d/%d\n" % (i, round_))
        for i, m in enumerate((b, a)):
            names = sorted(os.listdir(m.path / d.local.name))
            assert len(names) == 2 * (round_ + 1), names
            assert (m.path / d.local.name / f"from-{1 - i}-{round_}").read_bytes() == b"%d/%d\n" % (
                1 - i,
                round_,
            )
    with (
        open(a.path / d.local.name / "held-open", "wb") as fa,
        open(b.path / d.local.name / "held-open-too", "wb") as fb,
    ):
        fa.write(b"a")
        fb.write(b"b")  # both hold open state on the server at once
    assert (d.local / "held-open").read_bytes() == b"a"
    assert (d.local / "held-open-too").read_bytes() == b"b"
    assert recoveries(a) == 0 and recoveries(b) == 0


async def test_two_api_clients_in_one_process_work_side_by_side(ganesha: Ganesha) -> None:
    d = ganesha.new_directory(prefix="two-api-")
    async with Client.connect(ganesha.url) as one, Client.connect(ganesha.url) as two:
        f1 = await one.open(f"/{d.local.name}/one", "w")
        f2 = await two.open(f"/{d.local.name}/two", "w")
        async with f1, f2:
            for _ in range(5):
                await f1.write(b"1" * 1000)
                await f2.write(b"2" * 1000)
                await trio.sleep(0)
        assert await two.read_file(f"/{d.local.name}/one") == b"1" * 5000
        assert await one.read_file(f"/{d.local.name}/two") == b"2" * 5000
        assert one.clientid.recoveries == 0 and two.clientid.recoveries == 0
    assert Path(d.local / "one").stat().st_size == 5000
