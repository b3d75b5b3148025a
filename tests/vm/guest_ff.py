"""pNFS flexfiles layout steps of the Debian 13 guest (step key ``ff``): the rig's own nfsd.ko
(``build-trixie``: fs/nfsd built with ``CONFIG_NFSD_FLEXFILELAYOUT=y``) hands out flexfiles layouts
(RFC 8435) in which the metadata server is its own data server, reached over NFSv3 with the
layout's synthetic uid and gid (fs/nfsd/flexfilelayout.c).

- ``setup_ff_export`` (main process): a tmpfs of its own inside the first export, exported with
  ``pnfs``. nfsd offers LAYOUT4_FLEX_FILES on an export only while NFSv3 is on
  (``nfsd4_setup_layout_type``): the set-up checks that ``/proc/fs/nfsd/versions`` says ``+3``.
- ``kernel_ff`` (child): the kernel client mounts it with ``vers=4.2``, writes and reads back a
  file with ``dd``; the bytes in the server's tmpfs are the same,
  ``/proc/self/mountstats`` counts LAYOUTGETs, and nfsd's own counts (``/proc/net/rpc/nfsd``)
  show the data went by NFSv3 READ and WRITE, with no NFSv4 READ or WRITE.
- ``client_ff`` (child): our client with ``pnfs`` writes and reads a large file by the layout, the
  same checks, and the kernel client reads the same bytes; a read the data server refuses (the file
  made mode 0600: nfsd's READ layout's synthetic owner may not read it) goes through the metadata
  server with LAYOUTERROR, the same bytes; then the kernel client writes half of a
  file in the middle of our writing the other half, and nothing is lost: its LAYOUTGET makes nfsd
  recall our layout of the file (``nfsd4_recall_conflict``: one client's layout of a file at a time),
  and the rest of our writes go through the metadata server.

Delegations are off during these steps (``leases``): a client holding a write delegation of a file
writes it to nfsd as data server by NFSv3, which has no NFSv4 state to match the delegation with, and
nfsd breaks the delegation for it (``nfsd_open_break_lease``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from guest_pnfs import recall_in_order

MIB = 1 << 20


def _sh(*cmd: str, timeout: float = 60) -> str:
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = (p.stdout + p.stderr).strip()
    if out:
        print(out, flush=True)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {out[-300:]}")
    return p.stdout


def leases(on: bool) -> None:
    """File leases on or off for the whole guest (``/proc/sys/fs/leases-enable``): with them off nfsd
    grants no delegation (``generic_add_lease`` refuses the lease under it)."""
    Path("/proc/sys/fs/leases-enable").write_text("1\n" if on else "0\n")


def nfsd_states() -> str:
    """What nfsd holds for its clients (opens, delegations, layouts), for a step's failure report."""
    out = []
    for states in Path("/proc/fs/nfsd/clients").glob("*/states"):
        try:
            out.append(f"{states}: {states.read_text().strip()}")
        except OSError as e:
            out.append(f"{states}: {e}")
    return "\n".join(out)


def setup_ff_export(export: Path) -> Any:
    def run(timeout: float) -> str:
        versions = Path("/proc/fs/nfsd/versions").read_text().split()
        if "+3" not in versions:
            raise RuntimeError(f"nfsd has NFSv3 off ({versions}): it hands out no flexfiles layout then")
        export.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "tmpfs", "-o", "size=300m", "tmpfs", str(export))
        export.chmod(0o777)
        with open("/etc/exports", "a") as f:
            f.write(f"{export} *(rw,fsid=4,insecure,no_root_squash,no_subtree_check,pnfs)\n")
        _sh("exportfs", "-ra")
        listed = _sh("exportfs", "-v")
        if "pnfs" not in listed:
            raise RuntimeError(f"exportfs -v does not show pnfs: {listed!r}")
        mod = Path("/sys/module/nfsd")
        taint = (mod / "taint").read_text().strip() if (mod / "taint").exists() else "?"
        return f"tmpfs at {export}, exported with pnfs; nfsd versions {' '.join(versions)}; nfsd module taint {taint!r}"

    return run


def nfsd_counts() -> dict[str, int]:
    """nfsd's counts of the calls that tell the data path: NFSv3 READ, WRITE and COMMIT (``proc3``,
    RFC 1813 procedure numbers 6, 7, 21) and NFSv4 READ, WRITE, LAYOUTGET, GETDEVICEINFO (``proc4ops``,
    RFC 8881 op numbers 25, 38, 50, 47)."""
    out: dict[str, int] = {}
    for line in Path("/proc/net/rpc/nfsd").read_text().splitlines():
        if line.startswith("proc3 "):
            n = [int(x) for x in line.split()[2:]]
            out.update({"v3 READ": n[6], "v3 WRITE": n[7], "v3 COMMIT": n[21]})
        elif line.startswith("proc4ops "):
            n = [int(x) for x in line.split()[2:]]
            out.update({"v4 READ": n[25], "v4 WRITE": n[38], "LAYOUTGET": n[50], "GETDEVICEINFO": n[47]})
            out["READ_PLUS"] = n[68] if len(n) > 68 else 0
    if len(out) < 8:
        raise RuntimeError(f"no proc3 or proc4ops line in /proc/net/rpc/nfsd: {out}")
    return out


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def mountstats_ops(mountpoint: Path) -> dict[str, int]:
    """The kernel client's per-operation call counts of one mount (``/proc/self/mountstats``)."""
    ops: dict[str, int] = {}
    inside = False
    for line in Path("/proc/self/mountstats").read_text().splitlines():
        if line.startswith("device "):
            inside = f" mounted on {mountpoint} " in line
            continue
        if inside and line.startswith("\t") and ":" in line:
            name, _, rest = line.strip().partition(":")
            fields = rest.split()
            if name.isupper() and fields and fields[0].isdigit():
                ops[name] = int(fields[0])
    return ops


def _pattern(size: int, seed: bytes) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < size:
        out += hashlib.sha256(seed + i.to_bytes(8, "big")).digest() * 128
        i += 1
    return bytes(out[:size])


def _drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def kernel_ff(server: str, port: str, export: str, mib: str, kmount: str) -> str:
    """The kernel client, the anchor, by the flexfiles layout (a child step: a write stuck in the
    kernel must not hold the guest's steps): ``mib`` MiB written with ``dd`` on a ``vers=4.2`` mount and
    read back after ``drop_caches``. (A ``vers=4.1`` mount's ``dd`` never ended in two boots, with
    delegations on and off; it is left out.)"""
    # the kernel client's flexfiles driver and the NFSv3 client its data servers are reached with
    _sh("modprobe", "-a", "nfsv3", "nfs_layout_flexfiles")
    data = _pattern(int(mib) * MIB, b"kernel-ff")
    src = Path("/tmp/ff-source.dat")
    src.write_bytes(data)
    leases(False)
    try:
        return _kernel_one(server, int(port), Path(export), Path(kmount), "4.2", src, data, 240)
    finally:
        leases(True)
        src.unlink()


def _kernel_one(server: str, port: int, export: Path, kmount: Path, vers: str, src: Path, data: bytes,
                timeout: float) -> str:
    """One kernel mount (``vers``): ``data`` written with ``dd`` (killed if it has not ended within half
    of ``timeout``: a write stuck on the data server says so, with what nfsd and the client did) and
    read back after ``drop_caches``."""
    size = len(data)
    mnt = kmount.with_name(kmount.name + "-ff" + vers.replace(".", ""))
    mnt.mkdir(parents=True, exist_ok=True)
    _sh("mount", "-t", "nfs4", "-o", f"vers={vers},proto=tcp,port={port}", f"{server}:/{export.name}", str(mnt),
        timeout=60)
    try:
        name = f"kernel-{vers}.dat"
        before = nfsd_counts()
        t0 = time.monotonic()
        try:
            _sh("timeout", "-s", "KILL", str(int(timeout / 2)), "dd", f"if={src}", f"of={mnt / name}", "bs=1M",
                "conv=fsync", timeout=timeout)
        except (RuntimeError, subprocess.TimeoutExpired):
            print(f"vers={vers}: the write did not finish: nfsd ran {delta(before, nfsd_counts())}; the kernel "
                  f"client sent {mountstats_ops(mnt)}\n{nfsd_states()}", flush=True)
            raise
        write = size / (time.monotonic() - t0) / 1e6
        wrote = delta(before, nfsd_counts())
        _drop_caches()
        if (export / name).read_bytes() != data:
            raise RuntimeError(f"vers={vers}: the server's tmpfs holds other bytes than the kernel client wrote")
        before = nfsd_counts()
        t0 = time.monotonic()
        got = hashlib.sha256(Path(mnt / name).read_bytes()).digest()
        read = size / (time.monotonic() - t0) / 1e6
        read_counts = delta(before, nfsd_counts())
        if got != hashlib.sha256(data).digest():
            raise RuntimeError(f"vers={vers}: the kernel client read back other bytes")
        ops = mountstats_ops(mnt)
        print(f"vers={vers}: write {wrote}; read {read_counts}; mountstats {ops}", flush=True)
        if ops.get("LAYOUTGET", 0) < 1 or ops.get("GETDEVICEINFO", 0) < 1:
            raise RuntimeError(f"vers={vers}: the kernel client sent no LAYOUTGET/GETDEVICEINFO: {ops}")
        if wrote["v3 WRITE"] < size // MIB or wrote["v4 WRITE"]:
            raise RuntimeError(f"vers={vers}: the write did not go by NFSv3 to the data server: {wrote}")
        if read_counts["v3 READ"] < 1 or read_counts["v4 READ"] or read_counts["READ_PLUS"]:
            raise RuntimeError(f"vers={vers}: the read did not go by NFSv3 to the data server: {read_counts}")
        _figure(f"rxe kernel-ff-{vers} write MB/s", write)
        _figure(f"rxe kernel-ff-{vers} read MB/s", read)
        return (f"vers={vers}: {size // MIB} MiB written at {write:.1f} MB/s by {wrote['v3 WRITE']} NFSv3 WRITEs "
                f"({wrote['v3 COMMIT']} COMMITs), read at {read:.1f} MB/s by {read_counts['v3 READ']} NFSv3 "
                f"READs, no NFSv4 READ/WRITE; LAYOUTGET {ops['LAYOUTGET']}, GETDEVICEINFO {ops['GETDEVICEINFO']}")
    finally:
        _sh("umount", "-l", str(mnt), timeout=60)

def _figure(name: str, value: float) -> None:
    """A figure for the run's figures.txt (the child's FIGURES: guest_tests.py runs as __main__)."""
    import sys

    figures = getattr(sys.modules["__main__"], "FIGURES", None)
    if figures is not None:
        figures[name] = value


def _log_to_stderr() -> None:
    import logging
    import sys

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(relativeCreated)8.0f %(name)s %(message)s")


async def client_ff(url: str, export: str, mib: str, kmount: str, server: str, port: str) -> str:
    """Our client with ``pnfs`` on the flexfiles export: a large file written and read back by the
    layout (the same bytes in nfsd's tmpfs and through the kernel client's own flexfiles mount; nfsd's
    counts: NFSv3 READ/WRITE/COMMIT to it as data server, no NFSv4 READ or WRITE); then a second file
    that the kernel client writes in the middle of our write (its half), nothing lost."""
    _log_to_stderr()
    leases(False)
    try:
        return await _client_ff(url, export, mib, kmount, server, port)
    except BaseException:
        print(f"nfsd's states: {nfsd_states()}", flush=True)
        raise
    finally:
        leases(True)


async def _client_ff(url: str, export: str, mib: str, kmount: str, server: str, port: str) -> str:
    from pynfsrdma._client.api import Client

    size = int(mib) * MIB
    local = Path(export)
    big = _pattern(size + 4093, b"ours-ff")
    before = nfsd_counts()
    t0 = time.monotonic()
    async with Client.connect(url, timeout=30, pnfs=True) as nfs:
        async with await nfs.open("/ff.dat", "w") as f:
            for at in range(0, len(big), 4 * MIB):
                await f.write(big[at:at + 4 * MIB])
            await f.fsync()
        wrote = time.monotonic() - t0
        d_write = delta(before, nfsd_counts())
        print(f"written: {nfs.stats()['pnfs']}; nfsd ran {d_write}", flush=True)
        _drop_caches()
        before = nfsd_counts()
        t1 = time.monotonic()
        async with await nfs.open("/ff.dat", "r") as f:
            got = await f.pread(0, len(big) + 100)
        read = time.monotonic() - t1
        d_read = delta(before, nfsd_counts())
        report = nfs.stats()["pnfs"]
    print(f"read: {report}; nfsd ran {d_read}", flush=True)
    if got != big:
        raise RuntimeError("our client read back other data than it wrote by the flexfiles layout")
    _drop_caches()
    if (local / "ff.dat").read_bytes() != big:
        raise RuntimeError("nfsd's tmpfs holds other bytes than our client wrote by the layout")
    counts = report["counts"]
    if report["layout"] != "flexfiles" or counts.get("write_bytes", 0) < len(big) \
            or counts.get("read_bytes", 0) < len(big) or not counts.get("layoutget"):
        raise RuntimeError(f"not by the flexfiles layout: {report}")
    if d_write["v4 WRITE"] or d_write["v3 WRITE"] < len(big) // MIB or not d_write["v3 COMMIT"]:
        raise RuntimeError(f"the write did not go by NFSv3 WRITE and COMMIT to the data server: nfsd ran {d_write}")
    if d_read["v4 READ"] or d_read["READ_PLUS"] or d_read["v3 READ"] < 1:
        raise RuntimeError(f"the read did not go by NFSv3 READ to the data server: nfsd ran {d_read}")
    # a data server that refuses: the file made mode 0600 in nfsd's tmpfs, the READ layout's synthetic
    # owner (nfsd: the owner's uid + 1, the file's gid) may not read it there (NFS3ERR_ACCES); our read
    # reports it (LAYOUTERROR, where nfsd takes it) and goes through the metadata server
    (local / "ff.dat").chmod(0o600)
    async with Client.connect(url, timeout=30, pnfs=True) as nfs:
        before = nfsd_counts()
        async with await nfs.open("/ff.dat", "r") as f:
            refused = await f.pread(0, len(big) + 100)
        d_refused = delta(before, nfsd_counts())
        refused_report = nfs.stats()["pnfs"]
    (local / "ff.dat").chmod(0o644)
    print(f"refused by the data server: {refused_report}; nfsd ran {d_refused}", flush=True)
    rc = refused_report["counts"]
    if refused != big:
        raise RuntimeError("a read the data server refused returned other bytes through the metadata server")
    if not rc.get("layouterror", 0) + rc.get("layouterror_not_taken", 0) \
            or not any("NFS3ERR_ACCES" in why for why in refused_report["through_mds"]) \
            or d_refused["v4 READ"] + d_refused["READ_PLUS"] < 1:
        raise RuntimeError(f"the data server's refusal did not send the read through the metadata server: "
                           f"{refused_report}; nfsd ran {d_refused}")
    # the kernel client, through its own flexfiles layout, reads the same bytes
    kdir = Path(kmount)
    kdir.mkdir(parents=True, exist_ok=True)
    _sh("mount", "-t", "nfs4", "-o", f"vers=4.2,proto=tcp,port={port}", f"{server}:/{local.name}", str(kdir))
    try:
        if (kdir / "ff.dat").read_bytes() != big:
            raise RuntimeError("the kernel client reads other bytes than our client wrote")
        # a conflicting writer in the middle of our write: the kernel client writes the second half
        # of the file we are writing the first half of, through its own flexfiles layout
        half = size // 2
        second = _pattern(size - half, b"kernel-half")
        first = _pattern(half, b"ours-half")
        (Path("/tmp") / "half.dat").write_bytes(second)
        ours_recalls = 0
        async with Client.connect(url, timeout=30, pnfs=True) as nfs:
            async with await nfs.open("/shared.dat", "w") as f:
                step = max(MIB // 4, half // 8)
                for at in range(0, half, step):
                    await f.pwrite(at, first[at:at + step])
                    if at == 0:
                        _sh("dd", "if=/tmp/half.dat", f"of={kdir / 'shared.dat'}", "bs=1M", f"seek={half}",
                            "oflag=seek_bytes", "conv=notrunc,fsync", timeout=300)
                await f.fsync()
            shared_report = nfs.stats()["pnfs"]
            ours_recalls = shared_report["counts"].get("recalls", 0)
            whole = await nfs.read_file("/shared.dat")
        _drop_caches()
        if ours_recalls < 1:
            raise RuntimeError(f"the kernel client's LAYOUTGET did not recall our layout: {shared_report}")
        recall_in_order(shared_report, "the kernel client's LAYOUTGET")
        expect = first + second
        on_server = (local / "shared.dat").read_bytes()
        if on_server != expect or whole != expect or (kdir / "shared.dat").read_bytes() != expect:
            raise RuntimeError(f"the shared file lost bytes: server {len(on_server)}, ours {len(whole)}, "
                               f"expected {len(expect)}; {shared_report}")
    finally:
        _sh("umount", str(kdir), timeout=60)
    (local / "shared.dat").unlink()
    # beside plain NFSv4.2 I/O: the same transfer with nopnfs, through nfsd's NFSv4 READ and WRITE
    before = nfsd_counts()
    async with Client.connect(url, timeout=30, pnfs=False) as nfs:
        t0 = time.monotonic()
        async with await nfs.open("/mds.dat", "w") as f:
            for at in range(0, len(big), 4 * MIB):
                await f.write(big[at:at + 4 * MIB])
            await f.fsync()
        mds_write = len(big) / (time.monotonic() - t0) / 1e6
        _drop_caches()
        t0 = time.monotonic()
        async with await nfs.open("/mds.dat", "r") as f:
            same = await f.pread(0, len(big) + 100) == big
        mds_read = len(big) / (time.monotonic() - t0) / 1e6
    d_mds = delta(before, nfsd_counts())
    if not same or d_mds["LAYOUTGET"] or d_mds["v3 WRITE"] or d_mds["v3 READ"]:
        raise RuntimeError(f"nopnfs read other data, or went by a layout: nfsd ran {d_mds}")
    (local / "ff.dat").unlink()
    (local / "mds.dat").unlink()
    w_mbs, r_mbs = len(big) / wrote / 1e6, len(big) / read / 1e6
    _figure("rxe ours-pnfs-ff write MB/s", w_mbs)
    _figure("rxe ours-pnfs-ff read MB/s", r_mbs)
    _figure("rxe ours-nopnfs-ff write MB/s", mds_write)
    _figure("rxe ours-nopnfs-ff read MB/s", mds_read)
    return (f"{len(big)} bytes by the flexfiles layout via {report['data_servers']}: write {w_mbs:.1f} MB/s, "
            f"read {r_mbs:.1f} MB/s (nopnfs: {mds_write:.1f}, {mds_read:.1f}); nfsd ran, writing {d_write}, reading {d_read}; our counts {counts}; "
            f"through the MDS: {report['through_mds']}; the data server refusing a read (mode 0600): "
            f"LAYOUTERROR {rc.get('layouterror', 0)} taken / {rc.get('layouterror_not_taken', 0)} not, the read "
            f"through the metadata server ({d_refused['v4 READ']} NFSv4 READs), the same bytes; the kernel client "
            f"read the same bytes; with the kernel "
            f"client writing the other half of our file meanwhile, nothing lost (recalls of our layout: "
            f"{ours_recalls})")


def fuse_ff(source: str, options: str, export: str) -> str:
    """Our FUSE mount with ``pnfs`` on the flexfiles export: a file written through the mount and read
    back with O_DIRECT, checked in nfsd's tmpfs; the data went by NFSv3 to the data server, and
    ``pynfsrdma paths`` lists it with the bytes it carried."""
    import guest_fuse  # (next to this file; the child imports the project)

    from pynfsrdma._control_socket import Connection

    local = Path(export)
    data = _pattern(8 * MIB + 123, b"fuse-ff")
    mnt = Path("/run/ours-ff")
    mnt.mkdir(parents=True, exist_ok=True)
    if not Path("/dev/fuse").exists():
        _sh("modprobe", "fuse")
    leases(False)
    before = nfsd_counts()
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
            while chunk := os.read(fd, MIB):
                back += chunk
        finally:
            os.close(fd)
        report = guest_fuse.stats(mnt)["pnfs"]
        with Connection(str(mnt)) as conn:
            rows = conn.request("paths")
    finally:
        _sh(*guest_fuse.CLI, "umount", str(mnt), timeout=120)
        leases(True)
    d = delta(before, nfsd_counts())
    servers = [r for r in rows if r.get("source") == "pnfs layout"]
    if bytes(back) != data:
        raise RuntimeError("our mount read back other data than it wrote")
    _drop_caches()
    if (local / "fuse.dat").read_bytes() != data:
        raise RuntimeError("nfsd's tmpfs holds other bytes than our mount wrote")
    counts = report.get("counts", {})
    if report.get("layout") != "flexfiles" or not counts.get("write_bytes") or not counts.get("read_bytes") \
            or not d["v3 WRITE"] or not d["v3 READ"]:
        raise RuntimeError(f"not by the flexfiles layout through the mount: {report}; nfsd ran {d}")
    if [r["address"] for r in servers] != report.get("data_servers") or not all(r["bytes"] for r in servers):
        raise RuntimeError(f"pynfsrdma paths does not name the layout's data servers: {rows}")
    (local / "fuse.dat").unlink()
    return f"through the mount: {counts}; through the MDS: {report.get('through_mds')}; nfsd ran {d}; paths: {servers}"
