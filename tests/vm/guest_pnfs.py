"""pNFS block layout steps of the Debian 13 guest (step key ``pnfs``): nfsd 7.3 exports an XFS on a
loop device with ``pnfs``, and our client reads and writes its files straight on that device.

- ``setup_pnfs_export`` (main process): an XFS on a whole loop device (nfsd refuses a partition),
  mounted inside the first export and exported with ``pnfs``.
- ``client_pnfs`` (child): the path API with ``pnfs`` writes and reads files by the block layout; the
  bytes are checked against the server's own XFS, nfsd's READ and WRITE counters do not move for them
  while LAYOUTGET and LAYOUTCOMMIT do, and ``nopnfs`` sends no LAYOUTGET.
- ``client_pnfs_recall`` (child): while our client holds a RW layout, a WRITE by the kernel client
  (through the metadata server) makes nfsd recall it; our client returns it and its I/O goes on
  through the metadata server, and the file holds both writes.

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
            return {"READ": n[25], "WRITE": n[38], "GETDEVICEINFO": n[47], "LAYOUTCOMMIT": n[49],
                    "LAYOUTGET": n[50], "LAYOUTRETURN": n[51]}
    raise RuntimeError("no proc4ops line in /proc/net/rpc/nfsd")


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


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
    second = _pattern(4 * MIB, b"second")
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

        with trio.fail_after(60):
            await trio.to_thread.run_sync(kernel_write)
        await f.pwrite(8 * MIB, second)
        await f.fsync()
        after_kernel = nfs.stats()["pnfs"]["counts"].get("recalls", 0)
        # a truncate on the server itself (XFS breaks the layout) while our open holds a layout
        got = await f.pread(0, 100)
        with trio.fail_after(60):
            await trio.to_thread.run_sync(os.truncate, local / "recall.dat", 6 * MIB)
        tail = await f.pread(6 * MIB - 10, 100)
        await f.close()
        report = nfs.stats()["pnfs"]
    d = _delta(before, op_counts())
    expect = bytearray(first) + bytes(4 * MIB) + bytearray(second)
    expect[4 * MIB + 100:4 * MIB + 106] = b"KERNEL"
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
    return (f"recalled {after_kernel} time(s) by the kernel client's WRITE, {recalls - after_kernel} by the "
            f"server's truncate; before: {held}; after: {report}; nfsd ran {d}")


def fuse_pnfs(source: str, options: str, export: str) -> str:
    """Our FUSE mount with ``pnfs``: a file written and read through the mount, checked on the XFS."""
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
        devices = [r for r in rows if r.get("transport") == "block layout"]
    finally:
        _sh(*guest_fuse.CLI, "umount", str(mnt), timeout=120)
    d = _delta(before, op_counts())
    if [r["address"] for r in devices] != report.get("devices") or not all(r["bytes"] for r in devices):
        raise RuntimeError(f"pynfsrdma paths does not name the layout's devices: {rows}")
    if bytes(back) != data:
        raise RuntimeError("our mount read back other data than it wrote")
    if _server_bytes(local / "fuse.dat") != data:
        raise RuntimeError("the server's XFS holds other bytes than our mount wrote")
    counts = report.get("counts", {})
    if not report.get("enabled") or not (counts.get("read_bytes", 0) + counts.get("write_bytes", 0)):
        raise RuntimeError(f"nothing by the layout through the mount: {report}; nfsd ran {d}")
    (local / "fuse.dat").unlink()
    return (f"through the mount: {counts}; through the MDS: {report.get('through_mds')}; nfsd ran {d}; "
            f"paths: {devices}")


def kernel_pnfs_figures(server: str, port: int, mib: int) -> Any:
    """The kernel's own block layout client beside ours (``blkmapd`` finds the device by its signature
    and builds a device-mapper table): ``dd`` of ``mib`` MiB written and read on a vers=4.1 mount of the
    XFS export over TCP; its mountstats must count LAYOUTGETs, and nfsd no READ or WRITE for the data."""
    def run(timeout: float) -> str:
        import sys

        _sh("modprobe", "-a", "dm_mod", "blocklayoutdriver")
        pipefs = Path("/var/lib/nfs/rpc_pipefs")
        pipefs.mkdir(parents=True, exist_ok=True)
        if "rpc_pipefs" not in Path("/proc/mounts").read_text():
            _sh("mount", "-t", "rpc_pipefs", "sunrpc", str(pipefs))
        subprocess.Popen(["blkmapd", "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        mnt = Path("/mnt/kpnfs")
        mnt.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "nfs4", "-o", f"vers=4.1,proto=tcp,port={port}", f"{server}:/pnfs", str(mnt), timeout=60)
        try:
            before = op_counts()
            size = mib * MIB
            path = mnt / "kernel-pnfs.dat"
            t0 = time.monotonic()
            _sh("dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "oflag=direct", "conv=fsync",
                timeout=timeout / 2)
            write = size / (time.monotonic() - t0) / 1e6
            t0 = time.monotonic()
            _sh("dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct", timeout=timeout / 2)
            read = size / (time.monotonic() - t0) / 1e6
            d = _delta(before, op_counts())
            path.unlink()
        finally:
            _sh("umount", str(mnt), timeout=60)
        if not d["LAYOUTGET"] or d["WRITE"] or d["READ"]:
            raise RuntimeError(f"the kernel client did not go by the layout: nfsd ran {d} "
                               f"(write {write:.1f} MB/s, read {read:.1f} MB/s)")
        figures = getattr(sys.modules["__main__"], "FIGURES", None)
        if figures is not None:
            figures["rxe kernel-pnfs-block write MB/s"] = write
            figures["rxe kernel-pnfs-block read MB/s"] = read
        return f"the kernel client by the block layout: write {write:.1f} MB/s, read {read:.1f} MB/s; nfsd ran {d}"

    return run
