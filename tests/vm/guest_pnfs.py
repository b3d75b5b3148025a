"""pNFS block layout steps of the Debian 13 guest (step key ``pnfs``): nfsd 7.3 exports an XFS on a
loop device with ``pnfs``, and our client reads and writes its files straight on that device.

- ``setup_pnfs_export`` (main process): an XFS on a whole loop device (nfsd refuses a partition),
  mounted inside the first export and exported with ``pnfs``.
- ``client_pnfs`` (child): the path API with ``pnfs`` writes and reads files by the block layout; the
  bytes are checked against the server's own XFS, nfsd's READ and WRITE counters do not move for them
  while LAYOUTGET and LAYOUTCOMMIT do, and ``nopnfs`` sends no LAYOUTGET.
- ``client_pnfs_recall`` (child): while our client holds a RW layout, a WRITE by the kernel client
  (through the metadata server) makes nfsd recall it, in the middle of our next transfer; our client
  returns it and its I/O goes on through the metadata server, and the file holds both writes; no
  LAYOUTCOMMIT was refused (it goes before the return) and no byte of our transfer went twice (our
  bytes by the layout plus nfsd's written bytes, the ``io`` line, add up to the transfer).
- ``client_pnfs_device_error`` (child): the device our client reads and writes (a device-mapper
  target over nfsd's loop device) starts failing in the middle of a write, then of a read: LAYOUTERROR,
  the layout returned, the I/O through the metadata server, and the caller sees no error.
- ``kernel_pnfs_figures`` (main process): the kernel's own block layout client (``blkmapd``, a
  ``vers=4.2`` mount), the anchor's figures; nfsd must run no READ or WRITE for its data.
- ``client_tracking`` (main process): nfsd restarted with ``nfsdcld``, so that reclaims are taken.
- ``client_pnfs_restart`` (child): nfsd is stopped while our client writes a file by the layout,
  our writes to the device go on while it is down, and it is started again: our client reclaims its
  open in the grace period, what it wrote by the lost layout and never committed is written again
  (by a new layout once nfsd grants one, else through nfsd), and our read and the server's XFS hold
  every byte.

The module needs only the standard library at import (the guest's main process imports it).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
IMG_DIR = Path("/mnt/pnfsimg")
# where nfs-utils' daemons (nfsdcld, blkmapd) look for rpc_pipefs: Debian's /etc/nfs.conf says
# pipefs-directory=/run/rpc_pipefs (the compiled-in default, /var/lib/nfs/rpc_pipefs, is not used)
PIPEFS = Path("/run/rpc_pipefs")


def _sh(*cmd: str, timeout: float = 60) -> str:
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = (p.stdout + p.stderr).strip()
    if out:
        print(out, flush=True)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {out[-300:]}")
    return p.stdout


def setup_pnfs_export(export: Path, image_mib: int) -> Any:
    def run(timeout: float) -> str:
        _sh("modprobe", "-a", "loop", "xfs")
        IMG_DIR.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "tmpfs", "-o", f"size={image_mib + 16}m", "tmpfs", str(IMG_DIR))
        img = IMG_DIR / "pnfs.xfs"
        _sh("truncate", "-s", f"{image_mib}M", str(img))
        dev = _sh("losetup", "--direct-io=on", "--show", "-f", str(img)).strip()
        _sh("mkfs.xfs", "-q", "-f", dev, timeout=120)
        export.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "xfs", dev, str(export))
        export.chmod(0o777)
        with open("/etc/exports", "a") as f:
            f.write(f"{export} *(rw,fsid=3,insecure,no_root_squash,no_subtree_check,pnfs)\n")
        _sh("exportfs", "-ra")
        listed = _sh("exportfs", "-v")
        if "pnfs" not in listed:
            raise RuntimeError(f"exportfs -v does not show pnfs: {listed!r}")
        return f"XFS on {dev} ({image_mib} MiB) at {export}, exported with pnfs"

    return run


def op_counts() -> dict[str, int]:
    """nfsd's counts of the operations that tell the data path (proc4ops, by op number)."""
    for line in Path("/proc/net/rpc/nfsd").read_text().splitlines():
        if line.startswith("proc4ops "):
            n = [int(x) for x in line.split()[2:]]
            # RFC 8881 op numbers: READ 25, WRITE 38, LAYOUTGET 50, LAYOUTCOMMIT 49, LAYOUTRETURN 51,
            # GETDEVICEINFO 47
            # LAYOUTERROR 64, READ_PLUS 68 (RFC 7862: a vers=4.2 kernel mount reads with READ_PLUS)
            return {"READ": n[25], "WRITE": n[38], "GETDEVICEINFO": n[47], "LAYOUTCOMMIT": n[49],
                    "LAYOUTGET": n[50], "LAYOUTRETURN": n[51], "LAYOUTERROR": n[64] if len(n) > 64 else 0,
                    "READ_PLUS": n[68] if len(n) > 68 else 0}
    raise RuntimeError("no proc4ops line in /proc/net/rpc/nfsd")


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def nfsd_write_bytes() -> int:
    """The bytes nfsd has written for its clients (the ``io`` line: every NFSv3 and NFSv4 WRITE)."""
    for line in Path("/proc/net/rpc/nfsd").read_text().splitlines():
        if line.startswith("io "):
            return int(line.split()[2])
    raise RuntimeError("no io line in /proc/net/rpc/nfsd")


# what our layout drivers count when writes made by a layout are sent again (the LAYOUTCOMMIT before a
# recalled layout's return failed, a data server's COMMIT or verifier said they were lost)
RESENT = ("uncommitted_lost", "verifier_changed")


def recall_in_order(report: dict[str, Any], where: str) -> None:
    """After a recall in the middle of a transfer: no LAYOUTCOMMIT refused (NFS4ERR_BADLAYOUT: sent
    after the layout was gone, RFC 8881 18.42) and nothing written by the layout sent again."""
    refused = {why: n for why, n in report["through_mds"].items()
               if "BADLAYOUT" in why or why.startswith("LAYOUTCOMMIT") or "COMMIT failed" in why}
    resent = {k: report["counts"][k] for k in RESENT if report["counts"].get(k)}
    if refused or resent:
        raise RuntimeError(f"{where}: the recall's LAYOUTCOMMIT was refused or writes by the layout were sent "
                           f"again: {refused or ''} {resent or ''}; {report}")


def _pattern(size: int, seed: bytes) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < size:
        out += hashlib.sha256(seed + i.to_bytes(8, "big")).digest() * 128
        i += 1
    return bytes(out[:size])


def _figure(name: str, value: float) -> None:
    """A figure for the run's figures.txt (the child's FIGURES: guest_tests.py runs as __main__)."""
    import sys

    figures = getattr(sys.modules["__main__"], "FIGURES", None)
    if figures is not None:
        figures[name] = value


def _kernel_figures(kdir: Path, size: int) -> tuple[float, float]:
    """The kernel client (through nfsd: no blkmapd, no block layout of its own) writing and reading
    ``size`` bytes of the XFS export: MB/s."""
    path = kdir / "kernel.dat"
    t0 = time.monotonic()
    _sh("dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={size // MIB}", "conv=fsync", timeout=300)
    write = size / (time.monotonic() - t0) / 1e6
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    t0 = time.monotonic()
    _sh("dd", f"if={path}", "of=/dev/null", "bs=1M", timeout=300)
    read = size / (time.monotonic() - t0) / 1e6
    path.unlink()
    return write, read


def _server_bytes(path: Path) -> bytes:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    return path.read_bytes()


def _log_to_stderr() -> None:
    import logging
    import sys

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(relativeCreated)8.0f %(name)s %(message)s")


async def client_pnfs(url: str, export: str, mib: str, kernel_dir: str) -> str:
    from pynfsrdma._client.api import Client

    _log_to_stderr()

    size = int(mib) * MIB
    local = Path(export)
    big = _pattern(size + 4093, b"big")
    before = op_counts()
    t0 = time.monotonic()
    async with Client.connect(url, timeout=30, pnfs=True) as nfs:
        async with await nfs.open("/big.dat", "w") as f:
            for at in range(0, len(big), 8 * MIB):
                await f.write(big[at:at + 8 * MIB])
            await f.fsync()
        wrote = time.monotonic() - t0
        print(f"written: {nfs.stats()['pnfs']}; nfsd ran {_delta(before, op_counts())}", flush=True)
        t1 = time.monotonic()
        async with await nfs.open("/big.dat", "r") as f:
            got = await f.pread(0, len(big) + 100)
        read = time.monotonic() - t1
        if got != big:
            raise RuntimeError("our client read back other data than it wrote by the layout")
        # an unaligned overwrite in the middle: the edge blocks read, changed and written again
        async with await nfs.open("/big.dat", "r+") as f:
            await f.pwrite(5000, b"EDGE" * 1000)
            await f.fsync()
        report = nfs.stats()["pnfs"]
    after = op_counts()
    expect = bytearray(big)
    expect[5000:9000] = b"EDGE" * 1000
    on_server = _server_bytes(local / "big.dat")
    if on_server != bytes(expect):
        raise RuntimeError(f"the server's XFS holds other bytes ({len(on_server)} bytes, expected {len(expect)})")
    d = _delta(before, after)
    counts = report["counts"]
    if counts.get("write_bytes", 0) < len(big) or counts.get("read_bytes", 0) < len(big):
        raise RuntimeError(f"not by the layout: {report}")
    if d["WRITE"] or d["READ"] > 2:
        raise RuntimeError(f"data went through the metadata server: nfsd ran {d}; our report {report}")
    if not d["LAYOUTGET"] or not d["LAYOUTCOMMIT"]:
        raise RuntimeError(f"no LAYOUTGET or LAYOUTCOMMIT at nfsd: {d}")
    # nopnfs: nothing by layout; the same transfer through nfsd, for the figures
    before = op_counts()
    async with Client.connect(url, timeout=30, pnfs=False) as nfs:
        t0 = time.monotonic()
        async with await nfs.open("/mds.dat", "w") as f:
            for at in range(0, len(big), 8 * MIB):
                await f.write(big[at:at + 8 * MIB])
            await f.fsync()
        mds_write = len(big) / (time.monotonic() - t0) / 1e6
        t0 = time.monotonic()
        async with await nfs.open("/mds.dat", "r") as f:
            same = await f.pread(0, len(big) + 100) == big
        mds_read = len(big) / (time.monotonic() - t0) / 1e6
        if not same or await nfs.read_file("/big.dat") != bytes(expect):
            raise RuntimeError("nopnfs read other data")
    d2 = _delta(before, op_counts())
    if d2["LAYOUTGET"]:
        raise RuntimeError(f"nopnfs sent LAYOUTGET: {d2}")
    (local / "big.dat").unlink()
    (local / "mds.dat").unlink()
    k_write, k_read = _kernel_figures(Path(kernel_dir), size)
    for who, w, r in (("ours-pnfs-block", len(big) / wrote / 1e6, len(big) / read / 1e6),
                      ("ours-nopnfs-xfs", mds_write, mds_read), ("kernel-xfs-via-nfsd", k_write, k_read)):
        _figure(f"rxe {who} write MB/s", w)
        _figure(f"rxe {who} read MB/s", r)
    return (f"{len(big)} bytes by the block layout on {report['devices']}: write {len(big) / wrote / 1e6:.1f} MB/s, "
            f"read {len(big) / read / 1e6:.1f} MB/s (nopnfs {mds_write:.1f}, {mds_read:.1f}; the kernel client "
            f"through nfsd {k_write:.1f}, {k_read:.1f}); nfsd ran {d}; our counts {counts}; "
            f"through the MDS: {report['through_mds']}; nopnfs: no LAYOUTGET")


async def client_pnfs_recall(url: str, export: str, kernel_dir: str) -> str:
    import trio

    from pynfsrdma._client.api import Client

    _log_to_stderr()
    local = Path(export)
    first = _pattern(4 * MIB, b"first")
    second = _pattern(8 * MIB, b"second")
    before = op_counts()
    async with Client.connect(url, timeout=30, pnfs=True) as nfs:
        f = await nfs.open("/recall.dat", "w+")
        await f.pwrite(0, first)
        await f.fsync()
        held = nfs.stats()["pnfs"]["counts"]

        def kernel_write() -> None:
            # the kernel client, through the metadata server (no blkmapd: no block layout of its own)
            fd = os.open(Path(kernel_dir) / "recall.dat", os.O_WRONLY)
            try:
                os.pwrite(fd, b"KERNEL", 4 * MIB + 100)
                os.fsync(fd)
            finally:
                os.close(fd)

        async def ours() -> None:
            # our next transfer, in pieces, while the kernel client's WRITE makes nfsd recall the layout
            for at in range(0, len(second), 128 << 10):
                await f.pwrite(8 * MIB + at, second[at:at + (128 << 10)])
                if at == 0:
                    started.set()
            await f.fsync()

        started = trio.Event()
        mds_before = nfsd_write_bytes()
        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ours)
                await started.wait()
                await trio.to_thread.run_sync(kernel_write)
        mds_bytes = nfsd_write_bytes() - mds_before
        transfer = nfs.stats()["pnfs"]
        after_kernel = transfer["counts"].get("recalls", 0)
        by_layout = transfer["counts"].get("write_bytes", 0) - held.get("write_bytes", 0)
        recall_in_order(transfer, "the kernel client's WRITE")
        # every byte of our transfer went once, by the layout or through nfsd (the kernel client's
        # WRITE of 6 bytes is nfsd's too: a page at most)
        if by_layout + mds_bytes > len(second) + 4096:
            raise RuntimeError(f"data sent twice: {by_layout} bytes by the layout and {mds_bytes} through nfsd "
                               f"for our {len(second)}; {transfer}")
        expect = bytearray(first) + bytes(4 * MIB) + bytearray(second)
        expect[4 * MIB + 100:4 * MIB + 106] = b"KERNEL"
        whole = await trio.to_thread.run_sync(_server_bytes, local / "recall.dat")
        if whole != bytes(expect):
            raise RuntimeError(f"after the recall in the middle of our transfer the server's XFS holds other "
                               f"bytes ({len(whole)}, expected {len(expect)}); {nfs.stats()['pnfs']}")
        # a truncate on the server itself (XFS breaks the layout) while an open of ours holds a layout
        # (a new open: after the recall, the one before did the rest of its I/O through nfsd)
        await f.close()
        f = await nfs.open("/recall.dat", "r+")
        got = await f.pread(0, 100)
        with trio.fail_after(60):
            await trio.to_thread.run_sync(os.truncate, local / "recall.dat", 6 * MIB)
        tail = await f.pread(6 * MIB - 10, 100)
        await f.close()
        report = nfs.stats()["pnfs"]
    d = _delta(before, op_counts())
    if got != first[:100] or tail != bytes(expect[6 * MIB - 10:6 * MIB]):
        raise RuntimeError(f"our reads around the truncate: {got[:8]!r}..., tail {tail!r}")
    on_server = _server_bytes(local / "recall.dat")
    if on_server != bytes(expect[:6 * MIB]):
        raise RuntimeError("after the recalls the server's XFS holds other bytes than the writers wrote")
    recalls = report["counts"].get("recalls", 0)
    if after_kernel < 1 or recalls <= after_kernel or not d["LAYOUTRETURN"]:
        raise RuntimeError(f"recalls: {after_kernel} after the kernel's WRITE, {recalls} after the truncate; "
                           f"{report}; nfsd ran {d}")
    (local / "recall.dat").unlink()
    recall_in_order(report, "the server's truncate")
    return (f"recalled {after_kernel} time(s) by the kernel client's WRITE, {recalls - after_kernel} by the "
            f"server's truncate; our transfer: {by_layout} bytes by the layout, {mds_bytes} written by nfsd "
            f"(no LAYOUTCOMMIT refused, nothing sent twice); before: {held}; after: {report}; nfsd ran {d}")


def _mounted_from(path: Path) -> str:
    for line in Path("/proc/mounts").read_text().splitlines():
        dev, mnt, *_ = line.split()
        if mnt == str(path):
            return dev
    raise RuntimeError(f"nothing is mounted at {path}")


async def client_pnfs_device_error(url: str, export: str) -> str:
    """The device fails in the middle of a write, then of a read: nothing lost, no error seen.

    Our client is given one device to look for the volume on: a device-mapper target ``pnfsfail``
    over the loop device nfsd's XFS is on (linear, so it carries the XFS signature; the loop device
    under it, which carries it too, is not offered). Switched to the ``error`` target, every I/O to it
    fails with EIO, while nfsd's XFS on the loop device goes on working."""
    import trio

    from pynfsrdma._client.api import Client

    _log_to_stderr()
    local = Path(export)
    # device-mapper cannot stack on the loop device XFS is mounted from (it is held exclusively):
    # a second loop device over the same image file (one page cache under both) carries the target
    image = _sh("losetup", "-n", "-O", "BACK-FILE", _mounted_from(local)).strip()
    loop = _sh("losetup", "--direct-io=on", "--show", "-f", image).strip()
    sectors = int(_sh("blockdev", "--getsz", loop).strip())
    linear, error = f"0 {sectors} linear {loop} 0", f"0 {sectors} error"

    def table(t: str) -> None:
        _sh("dmsetup", "suspend", "pnfsfail")
        _sh("dmsetup", "load", "pnfsfail", "--table", t)
        _sh("dmsetup", "resume", "pnfsfail")

    data = _pattern(8 * MIB + 5, b"devfail")
    half, piece = 4 * MIB, 256 << 10
    _sh("modprobe", "dm_mod")
    try:
        _sh("dmsetup", "create", "pnfsfail", "--table", linear)
    except RuntimeError:
        _sh("losetup", "-d", loop)
        raise
    # (devtmpfs makes /dev/dm-N; /dev/mapper/ is udev's, and no udev runs in the guest)
    dm = f"/dev/dm-{int(_sh('dmsetup', 'info', '-c', '--noheadings', '-o', 'minor', 'pnfsfail'))}"
    try:
        before = op_counts()
        async with Client.connect(url, timeout=60, pnfs=True) as nfs:
            nfs.nfs.read_write.pnfs.candidates = lambda: [(dm, sectors * 512)]
            f = await nfs.open("/devfail.dat", "w+")
            for at in range(0, half, piece):
                await f.pwrite(at, data[at:at + piece])
            by_layout = dict(nfs.stats()["pnfs"]["counts"])
            await trio.to_thread.run_sync(table, error)
            for at in range(half, len(data), piece):
                await f.pwrite(at, data[at:at + piece])
            await f.fsync()
            back = await f.pread(0, len(data) + 10)
            await f.close()
            wrote = nfs.stats()["pnfs"]
        d_write = _delta(before, op_counts())
        await trio.to_thread.run_sync(table, linear)
        before = op_counts()
        async with Client.connect(url, timeout=60, pnfs=True) as nfs:
            nfs.nfs.read_write.pnfs.candidates = lambda: [(dm, sectors * 512)]
            f = await nfs.open("/devfail.dat")
            first = await f.pread(0, half)
            read_by_layout = dict(nfs.stats()["pnfs"]["counts"])
            await trio.to_thread.run_sync(table, error)
            rest = await f.pread(half, len(data))
            await f.close()
            read = nfs.stats()["pnfs"]
        d_read = _delta(before, op_counts())
    finally:
        _sh("dmsetup", "remove", "pnfsfail")
        _sh("losetup", "-d", loop)
    if back != data or first + rest != data:
        raise RuntimeError(f"our reads after the device failed: other data; {wrote}; {read}")
    if _server_bytes(local / "devfail.dat") != data:
        raise RuntimeError(f"the server's XFS holds other bytes than we wrote; {wrote}; nfsd ran {d_write}")
    for what, counts, report, before_fail in (("write", wrote["counts"], wrote, by_layout),
                                               ("read", read["counts"], read, read_by_layout)):
        key = f"{what}_bytes"
        if not before_fail.get(key) or not any(r.startswith("device I/O error") for r in report["through_mds"]):
            raise RuntimeError(f"the {what} did not go by the layout, then through the MDS: {report}")
        if not counts.get("layouterror", 0) + counts.get("layouterror_not_taken", 0) or not counts.get("layoutreturn"):
            raise RuntimeError(f"no LAYOUTERROR or no LAYOUTRETURN after the device failed ({what}): {report}")
    (local / "devfail.dat").unlink()
    return (f"{len(data)} bytes; the device failed after {half} written by the layout ({by_layout}), then after "
            f"{half} read by it: write {wrote}, nfsd ran {d_write}; read {read}, nfsd ran {d_read}")


def nfsd_stop() -> None:
    _sh("rpc.nfsd", "0", timeout=120)


def nfsd_start(tcp_port: str, rdma_port: str) -> None:
    """nfsd started again with the set-up's listeners (guest_tests.setup_nfsd); its grace period begins."""
    _sh("rpc.nfsd", "-N", "3", "-U", f"--rdma={rdma_port}", "--port", tcp_port, "4", timeout=120)
    ports = Path("/proc/fs/nfsd/portlist").read_text()
    if f"tcp {tcp_port}" not in ports:
        raise RuntimeError(f"nfsd listeners after the restart: {ports!r}")


def client_tracking(tcp_port: str, rdma_port: str) -> Any:
    """nfsd restarted with ``nfsdcld`` keeping its record of clients: without a tracker nfsd answers
    every reclaim after a restart with NFS4ERR_RECLAIM_BAD (``nfsd4_client_record_check``), and what a
    client held is lost whatever the client does. The grace period of this start is ended through
    ``v4_end_grace`` where nfsd takes it, else waited out (nfsd 7.3 answered EBUSY even with nfsdcld
    keeping its records)."""
    def run(timeout: float) -> str:
        _mount_pipefs()
        Path("/var/lib/nfs/nfsdcld").mkdir(parents=True, exist_ok=True)
        nfsd_stop()
        with open("/run/nfsdcld.log", "w") as out:
            subprocess.Popen(["nfsdcld", "-F", "-d"], stdout=out, stderr=out)
        time.sleep(1)
        nfsd_start(tcp_port, rdma_port)
        time.sleep(1)
        try:
            Path("/proc/fs/nfsd/v4_end_grace").write_text("Y\n")
            ended = "grace ended at once"
        except OSError as e:
            ended = f"v4_end_grace: {e}; grace waited out"
            time.sleep(12)
        tail = Path("/run/nfsdcld.log").read_text().strip().splitlines()[-3:]
        return f"nfsd restarted with nfsdcld ({ended}); nfsdcld: {tail}"

    return run


def _differs(got: bytes, want: bytes) -> str:
    """Where ``got`` differs from ``want``: "the same", or the 4 KiB blocks that differ (first, last, count)."""
    if got == want:
        return "the same"
    bad = [i for i in range(0, max(len(got), len(want)), 4096) if got[i:i + 4096] != want[i:i + 4096]]
    return f"{len(got)} bytes, {len(bad)} blocks of 4 KiB differ, from {bad[0]} to {bad[-1]}"


async def client_pnfs_restart(url: str, export: str, mib: str, tcp_port: str, rdma_port: str) -> str:
    """nfsd stopped and started again in the middle of a transfer by the layout: nothing lost."""
    import trio

    from pynfsrdma._client.api import Client

    _log_to_stderr()
    local = Path(export)
    size = max(16, int(mib)) * MIB
    data = _pattern(size + 777, b"restart")
    third = len(data) // 3 // MIB * MIB
    piece = 256 << 10
    before = op_counts()
    async with Client.connect(url, timeout=120, pnfs=True) as nfs:
        f = await nfs.open("/restart.dat", "w+")
        for at in range(0, third, piece):
            await f.pwrite(at, data[at:at + piece])
        held = dict(nfs.stats()["pnfs"]["counts"])
        # nfsd stops; our writes by the layout go on meanwhile (the device is this machine's), then it
        # starts again and the rest of the file follows
        down: dict[str, int] = {}
        middle_done = trio.Event()

        async def middle() -> None:
            for at in range(third, 2 * third, piece):
                await f.pwrite(at, data[at:at + piece])
            down.update(nfs.stats()["pnfs"]["counts"])
            middle_done.set()

        with trio.fail_after(180):
            await trio.to_thread.run_sync(nfsd_stop)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(middle)
                # (a write that needs the server waits for it: nfsd starts again after 10 s at most)
                with trio.move_on_after(10):
                    await middle_done.wait()
                await trio.to_thread.run_sync(nfsd_start, tcp_port, rdma_port)
        t0 = time.monotonic()
        for at in range(2 * third, len(data), piece):
            await f.pwrite(at, data[at:at + piece])
        await f.fsync()
        back = await f.pread(0, len(data) + 10)
        await f.close()
        after = time.monotonic() - t0
        report = nfs.stats()["pnfs"]
        reclaimed = nfs.nfs.reclaimed
        recoveries = nfs.clientid.recoveries
    d = _delta(before, op_counts())
    on_server = _server_bytes(local / "restart.dat")
    if back != data or on_server != data:
        raise RuntimeError(f"after the restart: our read {_differs(back, data)}, the server's XFS "
                           f"{_differs(on_server, data)}; {third} by the layout, {third} while nfsd was down; "
                           f"{report}; nfsd ran {d}")
    if not reclaimed:
        raise RuntimeError(f"our open was not reclaimed after the restart (recoveries {recoveries}); {report}")
    (local / "restart.dat").unlink()
    return (f"{len(data)} bytes, nfsd restarted after {third} (by the layout: {held}) and {third} more "
            f"written while it was down ({down}); {recoveries} recovery, {reclaimed} open reclaimed; the rest "
            f"and the COMMIT in {after:.1f} s; after: {report}; nfsd ran {d}; the server's XFS holds every byte")


def _registrations() -> str:
    """The persistent reservation registrations the LIO unit of the SCSI export holds (one line each)."""
    return Path("/sys/kernel/config/target/core/fileio_0/pnfs/pr/res_pr_registered_i_pts").read_text()


def fuse_pnfs(source: str, options: str, export: str, layout: str = "block") -> str:
    """Our FUSE mount with ``pnfs``: a file written and read through the mount, checked on the XFS;
    ``layout``: the layout stats must name (``block``, or ``scsi`` on the SCSI layout's export)."""
    import guest_fuse  # (next to this file; the child imports the project)

    local = Path(export)
    data = _pattern(8 * MIB + 123, b"fuse")
    before = op_counts()
    mnt = Path("/run/ours-pnfs")
    mnt.mkdir(parents=True, exist_ok=True)
    # (mounting took more than guest_fuse.mounted's 90 s once, on a host with a load of 14 on 2 cores)
    if not Path("/dev/fuse").exists():
        _sh("modprobe", "fuse")
    _sh(*guest_fuse.CLI, "mount", source, str(mnt), "-o", options, timeout=240)
    try:
        with open(mnt / "fuse.dat", "wb") as fo:
            for at in range(0, len(data), MIB):
                fo.write(data[at:at + MIB])
            fo.flush()
            os.fsync(fo.fileno())
        fd = os.open(mnt / "fuse.dat", os.O_RDONLY | os.O_DIRECT)
        try:
            back = bytearray()
            while True:
                chunk = os.read(fd, MIB)
                if not chunk:
                    break
                back += chunk
        finally:
            os.close(fd)
        report = guest_fuse.stats(mnt)["pnfs"]
        from pynfsrdma._control_socket import Connection

        with Connection(str(mnt)) as conn:
            rows = conn.request("paths")
        devices = [r for r in rows if r.get("transport") == f"{layout} layout"]
        held = _registrations() if layout == "scsi" else ""
    finally:
        _sh(*guest_fuse.CLI, "umount", str(mnt), timeout=120)
    if layout == "scsi":  # our key on the unit while mounted (replacing any before it), none after
        left = _registrations()
        if "Key:" not in held or "Key:" in left:
            raise RuntimeError(f"the unit's registrations: mounted {held!r}, after the unmount {left!r}")
    d = _delta(before, op_counts())
    if [r["address"] for r in devices] != report.get("devices") or not all(r["bytes"] for r in devices):
        raise RuntimeError(f"pynfsrdma paths does not name the layout's devices: {rows}")
    if bytes(back) != data:
        raise RuntimeError("our mount read back other data than it wrote")
    if _server_bytes(local / "fuse.dat") != data:
        raise RuntimeError("the server's XFS holds other bytes than our mount wrote")
    counts = report.get("counts", {})
    if not report.get("enabled") or report.get("layout") != layout \
            or not (counts.get("read_bytes", 0) + counts.get("write_bytes", 0)):
        raise RuntimeError(f"nothing by the layout through the mount: {report}; nfsd ran {d}")
    (local / "fuse.dat").unlink()
    return (f"through the mount: {counts}; through the MDS: {report.get('through_mds')}; nfsd ran {d}; "
            f"paths: {devices}")


# the kernel's debug message classes (include/uapi/linux/nfs_fs.h, include/uapi/linux/nfsd/debug.h)
NFSDBG_PNFS, NFSDBG_PNFS_LD, NFSDDBG_PNFS = 0x1000, 0x2000, 0x0400


def _debug(nfs: int, nfsd: int) -> None:
    """The NFS client's and nfsd's debug messages (dprintk, to the kernel log) for these classes."""
    for name, value in (("nfs_debug", nfs), ("nfsd_debug", nfsd)):
        try:
            Path("/proc/sys/sunrpc", name).write_text(f"{value}\n")
        except OSError as e:
            print(f"/proc/sys/sunrpc/{name}: {e}", flush=True)


def _mount_pipefs() -> None:
    PIPEFS.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(PIPEFS):
        _sh("mount", "-t", "rpc_pipefs", "sunrpc", str(PIPEFS))


def _mountstats(mnt: Path, ops: tuple[str, ...]) -> dict[str, list[int]]:
    """The kernel client's per-operation counts for the mount at ``mnt`` (``/proc/self/mountstats``:
    ops, transmissions, major timeouts, bytes sent, bytes received, queue, rtt, execute, errors)."""
    text = Path("/proc/self/mountstats").read_text()
    out: dict[str, list[int]] = {}
    mine = False
    for line in text.splitlines():
        if line.startswith("device "):
            mine = f" mounted on {mnt} " in line + " "
            continue
        name, _, rest = line.strip().partition(":")
        if mine and name in ops:
            out[name] = [int(x) for x in rest.split()]
    return out


def kernel_pnfs_figures(server: str, port: int, mib: int, export: str) -> Any:
    """The kernel's own block layout client beside ours (``blkmapd`` finds the device by its signature
    and builds a device-mapper table): ``dd`` of ``mib`` MiB written and read on a vers=4.1 mount of the
    XFS export over TCP; its mountstats must count LAYOUTGETs, and nfsd no READ or WRITE for the data.
    The kernel's and nfsd's pNFS debug messages, blkmapd's log and the mount's per-operation counts
    (with their errors) go to the log."""
    def run(timeout: float) -> str:
        import sys

        _sh("modprobe", "-a", "dm_mod", "blocklayoutdriver")
        _mount_pipefs()
        print(f"rpc_pipefs/nfs: {sorted(p.name for p in (PIPEFS / 'nfs').glob('*'))}", flush=True)
        with open("/run/blkmapd.log", "w") as out:
            # (-f: in the foreground, its log on stderr too; its -d is "discover the devices and exit")
            blkmapd = subprocess.Popen(["blkmapd", "-f"], stdout=out, stderr=out)
        time.sleep(1)
        _debug(NFSDBG_PNFS | NFSDBG_PNFS_LD, NFSDDBG_PNFS)
        _sh("dmesg", "-C")
        mnt = Path("/mnt/kpnfs")
        mnt.mkdir(parents=True, exist_ok=True)
        # vers=4.2: a client of its own (the NFSv4.1 mounts' client holds the volume as unavailable
        # for 120 s once it failed to resolve it, as the recall step's kernel WRITE did without blkmapd)
        _sh("mount", "-t", "nfs4", "-o", f"vers=4.2,proto=tcp,port={port}", f"{server}:/pnfs", str(mnt), timeout=60)
        ops = ("LAYOUTGET", "GETDEVICEINFO", "LAYOUTCOMMIT", "LAYOUTRETURN", "READ", "READ_PLUS", "WRITE", "OPEN")
        try:
            # a file written on the server's XFS first: the kernel client's READ layout of a file it
            # never opened for writing
            pre = Path(export) / "kernel-pre.dat"
            pre.write_bytes(_pattern(4 * MIB, b"pre"))
            os.sync()
            before = op_counts()
            _sh("dd", f"if={mnt / pre.name}", "of=/dev/null", "bs=1M", "iflag=direct", timeout=timeout / 4)
            print(f"reading a file the server wrote: nfsd ran {_delta(before, op_counts())}; mountstats "
                  f"{_mountstats(mnt, ops)}", flush=True)
            pre.unlink()
            before = op_counts()
            size = mib * MIB
            path = mnt / "kernel-pnfs.dat"
            t0 = time.monotonic()
            _sh("dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "oflag=direct", "conv=fsync",
                timeout=timeout / 3)
            write = size / (time.monotonic() - t0) / 1e6
            t0 = time.monotonic()
            _sh("dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct", timeout=timeout / 3)
            read = size / (time.monotonic() - t0) / 1e6
            d = _delta(before, op_counts())
            stats = _mountstats(mnt, ops)
            path.unlink()
        finally:
            try:
                _sh("umount", str(mnt), timeout=60)
            finally:
                _debug(0, 0)
                kept = [ln for ln in _sh("dmesg").splitlines()
                        if ln.strip() and "pnfs_update_layout" not in ln and "pnfs_find_alloc" not in ln]
                print("dmesg (pNFS debug), first and last lines:\n" + "\n".join([*kept[:120], "...", *kept[-30:]]),
                      flush=True)
                blkmapd.terminate()
                blkmapd.wait(timeout=10)
                print("blkmapd: " + Path("/run/blkmapd.log").read_text()[-3000:], flush=True)
        print(f"the kernel client's mountstats: {stats}", flush=True)
        if not d["LAYOUTGET"] or d["WRITE"] or d["READ"] or d["READ_PLUS"]:
            raise RuntimeError(f"the kernel client did not go by the layout: nfsd ran {d}; its mountstats {stats} "
                               f"(write {write:.1f} MB/s, read {read:.1f} MB/s)")
        figures = getattr(sys.modules["__main__"], "FIGURES", None)
        if figures is not None:
            figures["rxe kernel-pnfs-block write MB/s"] = write
            figures["rxe kernel-pnfs-block read MB/s"] = read
        return (f"the kernel client by the block layout: write {write:.1f} MB/s, read {read:.1f} MB/s; nfsd ran {d}; "
                f"its mountstats {stats}")

    return run
