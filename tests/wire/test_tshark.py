"""An independent check of our wire format: Wireshark's ONC RPC and NFSv4 dissectors (tshark) decode
the loopback traffic of a representative API workload against the real NFS-Ganesha. The test fails
if any frame is malformed or carries an expert error, and it checks that the capture really holds
decoded NFSv4.1 COMPOUNDs with the operations the workload must send (so it cannot pass on an
empty or undecoded capture), every call answered, and the multi-MiB WRITE and READ payloads
accounted for byte for byte.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pynfsrdma._client.api import Client
from pynfsrdma._proto import rpc
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

BIG = 6 * (1 << 20) + 12345  # a multi-MiB file that does not end on an rsize/wsize boundary
SMALL = b"hello, wire\n"
START_TIMEOUT = 30.0
TSHARK = "tshark"

# What the workload cannot do without (RFC 8881): the session set-up and tear-down, and one operation
# per API call below.
EXPECTED_OPS = {
    c.OP_EXCHANGE_ID: "EXCHANGE_ID",
    c.OP_CREATE_SESSION: "CREATE_SESSION",
    c.OP_SEQUENCE: "SEQUENCE",
    c.OP_PUTFH: "PUTFH",
    c.OP_LOOKUP: "LOOKUP",
    c.OP_GETATTR: "GETATTR",
    c.OP_CREATE: "CREATE",  # mkdir, symlink
    c.OP_OPEN: "OPEN",
    c.OP_WRITE: "WRITE",
    c.OP_COMMIT: "COMMIT",
    c.OP_CLOSE: "CLOSE",
    c.OP_READ: "READ",
    c.OP_READDIR: "READDIR",
    c.OP_SAVEFH: "SAVEFH",  # rename and link need two file handles
    c.OP_RENAME: "RENAME",
    c.OP_LINK: "LINK",
    c.OP_READLINK: "READLINK",
    c.OP_SETATTR: "SETATTR",
    c.OP_REMOVE: "REMOVE",
    c.OP_DESTROY_SESSION: "DESTROY_SESSION",
    c.OP_DESTROY_CLIENTID: "DESTROY_CLIENTID",
}


def probe_seen(proc: subprocess.Popen[bytes], out: Path, err: Path, port: int, deadline: float) -> None:
    """Open (and close) a TCP connection to ``port`` until tshark has printed its packets: everything
    sent before that probe is then in the capture too (tshark sees loopback packets in order)."""
    while True:
        assert proc.poll() is None, f"tshark exited: {err.read_text(errors='replace')}"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            source = sock.getsockname()[1]
        seen = re.compile(rf"\b{source}\b\D{{1,5}}\b{port}\b")
        wait = time.monotonic() + 2.0
        while time.monotonic() < wait:
            if seen.search(out.read_text(errors="replace")):
                return
            time.sleep(0.05)
        assert time.monotonic() < deadline, f"tshark printed no probe: {err.read_text(errors='replace')}"


@contextmanager
def capture(port: int, pcap: Path) -> Iterator[Path]:
    """tshark capturing loopback TCP on ``port`` into ``pcap``, with the whole of the block's traffic.

    Its "Capturing on" message comes before the capture filter is live, and stopping it drops what it
    has not written yet: so a probe connection marks both ends (see :func:`probe_seen`). Stopped by
    its PID with SIGINT."""
    assert shutil.which(TSHARK), "tshark is not installed (apt-get install tshark)"
    out = pcap.with_suffix(".out")
    err = pcap.with_suffix(".err")
    with open(out, "wb") as fout, open(err, "wb") as ferr:
        proc = subprocess.Popen(
            [TSHARK, "-i", "lo", "-f", f"tcp port {port}", "-B", "64", "-w", str(pcap), "-P", "-l"],
            stdout=fout,
            stderr=ferr,
            stdin=subprocess.DEVNULL,
        )
    try:
        probe_seen(proc, out, err, port, time.monotonic() + START_TIMEOUT)
        yield pcap
        probe_seen(proc, out, err, port, time.monotonic() + START_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
    stderr = err.read_text(errors="replace")
    assert proc.returncode == 0, f"tshark failed ({proc.returncode}): {stderr}"
    assert "dropped" not in stderr, f"tshark dropped packets, the capture is incomplete: {stderr}"


def decode(pcap: Path, port: int, display_filter: str, *fields: str) -> list[list[str]]:
    """The given fields of every frame matching the filter; fields that occur several times in a
    frame (several RPCs, or several operations in a COMPOUND) come comma-separated."""
    args = [TSHARK, "-r", str(pcap), "-o", "tcp.reassemble_out_of_order:TRUE", "-d", f"tcp.port=={port},rpc"]
    args += ["-Y", display_filter]
    if fields:
        args += ["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
        for f in fields:
            args += ["-e", f]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"tshark -r failed: {proc.stderr}"
    return [line.split("\t") for line in proc.stdout.splitlines() if line.strip()]


def values(cell: str) -> list[int]:
    return [int(v, 0) for v in cell.split(",") if v]


async def workload(url: str, local: Path) -> None:
    """Every API call of scripted access once, plus a multi-MiB write and read."""
    big = os.urandom(BIG)
    async with Client.connect(url, rsize=1 << 20, wsize=1 << 20) as nfs:
        await nfs.mkdir("/d")
        await nfs.write_file("/d/small", SMALL)
        assert await nfs.read_file("/d/small") == SMALL
        await nfs.write_file("/d/big", big)
        assert await nfs.read_file("/d/big") == big
        assert (await nfs.stat("/d/big")).size == BIG
        assert sorted(await nfs.listdir("/d")) == ["big", "small"]
        await nfs.rename("/d/small", "/d/renamed")
        await nfs.link("/d/renamed", "/d/hardlink")
        await nfs.symlink("renamed", "/d/symlink")
        assert await nfs.readlink("/d/symlink") == "renamed"
        attrs = await nfs.setattr("/d/renamed", mode=0o600, size=5)
        assert attrs.size == 5
        assert (await nfs.statfs("/")).space_total > 0
        await nfs.remove("/d/hardlink")
        await nfs.remove("/d/symlink")
    assert (local / "d" / "big").read_bytes() == big
    assert (local / "d" / "renamed").read_bytes() == SMALL[:5]
    assert sorted(p.name for p in (local / "d").iterdir()) == ["big", "renamed"]


async def test_wire_format_decodes_cleanly(ganesha: Ganesha, export_path: ExportPath, tmp_path: Path) -> None:
    port = ganesha.port
    pcap = tmp_path / "nfs.pcapng"
    with capture(port, pcap):
        await workload(f"nfs://{ganesha.host}:{port}{export_path.remote}", export_path.local)

    # 1. nothing malformed, no expert errors (warnings such as Ganesha's deprecated CLOSE stateid are fine)
    bad = decode(pcap, port, '_ws.malformed || _ws.expert.severity == "Error"')
    assert not bad, "frames that do not decode:\n" + "\n".join("\t".join(b) for b in bad[:20])

    # 2. our client's connection (the one that began with EXCHANGE_ID; connections left by other
    #    tests on the shared server, and the probes, are not part of the workload)
    call = f"rpc.msgtyp == {int(rpc.CALL)} && rpc.program == {c.NFS4_PROGRAM}"
    streams = {
        row[0] for row in decode(pcap, port, f"{call} && nfs.opcode == {c.OP_EXCHANGE_ID}", "tcp.stream")
    }
    assert streams, "no EXCHANGE_ID decoded: the capture does not hold our client's session"
    ours = "(" + " || ".join(f"tcp.stream == {s}" for s in sorted(streams)) + ")"

    # 3. its calls are NFSv4.1 COMPOUNDs carrying the operations the workload needs
    calls = decode(
        pcap,
        port,
        f"{call} && {ours}",
        "rpc.xid",
        "rpc.procedure",
        "nfs.minorversion",
        "nfs.opcode",
        "nfs.write.data_length",
    )
    assert len(calls) > 20, f"only {len(calls)} NFS calls decoded"
    call_xids = {x for row in calls for x in values(row[0])}
    assert set(values(",".join(row[1] for row in calls))) == {c.NFSPROC4_COMPOUND}, "every call is COMPOUND"
    assert set(values(",".join(row[2] for row in calls))) == {1}, "every COMPOUND is minor version 1"
    seen_ops = {op for row in calls for op in values(row[3])}
    missing = {name for op, name in EXPECTED_OPS.items() if op not in seen_ops}
    assert not missing, f"operations not seen on the wire: {sorted(missing)}"
    assert sum(v for row in calls for v in values(row[4])) == BIG + len(SMALL), "WRITE payload bytes"

    # 4. every call has its reply, and the READ payloads add up
    replies = decode(
        pcap, port, f"rpc.msgtyp == {int(rpc.REPLY)} && {ours}", "rpc.xid", "nfs.read.data_length"
    )
    reply_xids = {x for row in replies for x in values(row[0])}
    assert call_xids <= reply_xids, f"calls with no decoded reply: {sorted(call_xids - reply_xids)[:10]}"
    assert sum(v for row in replies for v in values(row[1])) == BIG + len(SMALL), "READ payload bytes"
