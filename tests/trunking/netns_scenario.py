"""Run INSIDE a network namespace (``ip netns exec NAME python netns_scenario.py``): NFS-Ganesha without
Bind_Addr (so it listens on every address of the namespace's loopback), a client mounting 127.0.0.1 with
127.0.0.2 and 127.0.0.3 given by hand, a large write during which ``ss -K`` kills the connections of
one address, and a JSON report on stdout for the test (test_netns.py) to check.

NFS-Ganesha answers EXCHANGE_ID through a second address with a NEW client ID (see the platform notes):
the verifier accepts such an address only when BIND_CONN_TO_SESSION of our session succeeds there, and
destroys the stray client ID; the report counts them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._session.path_set import PathState
from pynfsrdma._testbed import Ganesha

MiB = 1 << 20
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


async def scenario(server: Ganesha, size: int) -> dict[str, object]:
    port = server.port
    export = server.new_directory()
    extra = ",".join(f"{a}:{port}" for a in ADDRESSES[1:])
    url = f"nfs://127.0.0.1:{port}{export.remote}?addrs={extra}&notrunkdiscovery"
    data = os.urandom(size)
    report: dict[str, object] = {}
    async with Client.connect(url, timeo=30, hard=True) as nfs:
        trunking = nfs.trunking
        assert trunking is not None
        with trio.fail_after(15):
            await trunking.settled.wait()
        report["paths"] = [
            {k: p[k] for k in ("address", "state", "verification", "group")} for p in trunking.snapshot()
        ]
        report["stray_clientids_destroyed"] = trunking.verifier.stray_clientids_destroyed
        session = nfs.clientid.session
        assert session is not None
        report["bound_to_the_session"] = sorted(
            p.address for p in trunking.paths.live() if p.bound_session == session.sessionid
        )
        victim = next(p for p in trunking.paths.paths if p.address == f"{ADDRESSES[1]}:{port}")
        resends = session.resends
        kills = 0
        done = trio.Event()

        async def kill_when_busy() -> None:
            # destroy the victim address's TCP sockets in this namespace whenever it has requests in
            # flight (the owner sees ECONNABORTED), until the write is done and it was hit at least once
            nonlocal kills
            while not done.is_set() or kills == 0:
                while victim.bytes_in_flight == 0:
                    if done.is_set():  # the write ended while this waited (a kill's resend came late)
                        return
                    await trio.sleep(0.001)
                await trio.run_process(
                    ["ss", "-K", "dst", ADDRESSES[1], "dport", "=", str(port)],
                    capture_stdout=True,
                    capture_stderr=True,
                )
                kills += 1
                if session.resends > resends:
                    return
                await trio.sleep(0.05)

        async with trio.open_nursery() as n:
            n.start_soon(kill_when_busy)
            async with await nfs.open("/big", "w") as f:
                await f.write(data)
                while session.resends == resends and kills < 50:  # on until a kill hit a request
                    more = os.urandom(4 * MiB)
                    await f.write(more)
                    data += more
            done.set()
        report["ss_kills"] = kills
        report["victim_connects"] = victim.connects
        report["resends"] = session.resends - resends
        with trio.fail_after(15):
            while victim.state is not PathState.UP:
                await trunking.paths.wait_changed()
        report["victim_bound_again"] = victim.bound_session == session.sessionid
        report["stray_clientids_after_failover"] = trunking.verifier.stray_clientids_destroyed
        report["read_back_ok"] = (
            hashlib.sha256(await nfs.read_file("/big")).digest() == hashlib.sha256(data).digest()
        )
    on_disk = (export.local / "big").read_bytes()
    report["on_disk_ok"] = hashlib.sha256(on_disk).digest() == hashlib.sha256(data).digest()
    return report


def main() -> int:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 32 * MiB
    # no Bind_Addr: every address of this namespace's loopback reaches the server
    with Ganesha(bind_address="", server_owner="netns-ganesha", server_scope="netns") as server:
        report = trio.run(scenario, server, size)
    json.dump(report, sys.stdout)
    return 0


if __name__ == "__main__":
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)  # harmless if already up
    raise SystemExit(main())
