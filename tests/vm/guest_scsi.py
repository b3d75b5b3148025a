"""pNFS SCSI layout steps of the Debian 13 guest (step key ``scsi``): nfsd 7.3 exports an XFS on a SCSI
disk that takes persistent reservations, with ``pnfs``, and hands out the SCSI layout (RFC 8154).

A virtio disk has no persistent reservation operations, and nfsd offers the SCSI layout only for a
device that has them and a unique id (fs/nfsd/nfs4layouts.c, include/linux/exportfs_block.h). The
disk here is the kernel's own SCSI target (LIO) on its loopback fabric, configured through configfs
(no targetcli): a file backstore on a tmpfs, with a unit serial (LIO derives the NAA designator of
VPD page 0x83 from it), seen by the guest as an sd disk that answers INQUIRY VPD 0x83 and PERSISTENT
RESERVE IN/OUT.

- ``setup_scsi_export`` (main process): the LIO disk, XFS on it, exported with ``pnfs``; the
  ``/dev/disk/by-id/wwn-0x...`` link the kernel client opens the unit by (udev would make it; no
  udev runs in the guest).
- ``kernel_scsi`` (main process): the kernel client (``blocklayoutdriver``, which prefers the SCSI
  layout) writes and reads with O_DIRECT: its mountstats count LAYOUTGET and GETDEVICEINFO, and nfsd
  runs no READ or WRITE for the data: nfsd hands out the SCSI layout for this disk.
- ``client_scsi`` (child): our client with ``pnfs`` writes and reads a large file by the SCSI layout
  (its report says ``scsi``); the bytes are the same through the kernel client's mount and on the
  server's XFS, nfsd's counts show no READ or WRITE for them; then the kernel client writes a file
  our client is writing by the layout (nfsd recalls our layout in the middle): nothing lost, no
  LAYOUTCOMMIT refused, nothing sent twice. The kernel client's own 6 bytes are lost in some runs,
  by a race of its own (``_kernel_lost``): that is said, and passes only with nfsd's trace showing it.
- ``guest_pnfs.fuse_pnfs`` (child) on this export: our FUSE mount with ``-o pnfs`` by the SCSI layout,
  ``pynfsrdma paths`` listing the unit (transport ``scsi layout``).
- ``client_scsi_refused`` (child): a unit that refuses the key's registration (a loop device given
  as the unit): the I/O through nfsd, no error, the bytes intact.

Needs only the standard library at import (the guest's main process imports it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from guest_pnfs import (
    MIB,
    _delta,
    _differs,
    _figure,
    _log_to_stderr,
    _mountstats,
    _pattern,
    _server_bytes,
    _sh,
    nfsd_write_bytes,
    op_counts,
    recall_in_order,
)

IMG_DIR = Path("/mnt/scsiimg")
TARGET = Path("/sys/kernel/config/target")
SERIAL = "pynfsrdma-pnfs-scsi-0001"  # the unit serial: LIO's NAA designator is made of it
TARGET_WWN = "naa.5001405000000a01"  # the loopback target port
INITIATOR_WWN = "naa.5001405000000b01"  # the guest's initiator (the I_T nexus the sd disk is reached by)
KSCSI = Path("/mnt/kscsi")
TRACING = Path("/sys/kernel/tracing")
# the kernel client's answer to a CB_LAYOUTRECALL, and nfsd refusing a LAYOUTCOMMIT of a layout it forgot
RACE_EVENTS = ("nfs4/nfs4_cb_layoutrecall_file", "nfsd/nfsd_layout_commit_lookup_fail")


def _naa(page: bytes) -> bytes | None:
    """The logical unit's NAA designator in a VPD page 0x83 (association 0, type 3), as nfsd takes it."""
    pos, end = 4, 4 + int.from_bytes(page[2:4], "big")
    while pos + 4 <= min(end, len(page)):
        n = page[pos + 3]
        if (page[pos + 1] >> 4) & 0x3 == 0 and page[pos + 1] & 0xF == 3 and n in (8, 16):
            return bytes(page[pos + 4:pos + 4 + n])
        pos += 4 + n
    return None


def _lio_disk(timeout: float) -> tuple[str, bytes]:
    """The sd disk of our LIO unit, once the loopback fabric's scan made it: (/dev path, NAA designator)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for d in sorted(Path("/sys/class/block").glob("sd*")):
            vendor = d / "device" / "vendor"
            page = d / "device" / "vpd_pg83"
            if (d / "partition").exists() or not vendor.exists() or not page.exists():
                continue
            if vendor.read_text().strip() == "LIO-ORG":
                naa = _naa(page.read_bytes())
                if naa is not None:
                    return f"/dev/{d.name}", naa
        time.sleep(0.5)
    raise RuntimeError("no sd disk of the LIO unit appeared (tcm_loop's scan)")


def setup_scsi_export(export: Path, image_mib: int) -> Any:
    def run(timeout: float) -> str:
        _sh("modprobe", "-a", "configfs", "target_core_mod", "target_core_file", "sd_mod", "xfs")
        if not os.path.ismount("/sys/kernel/config"):
            _sh("mount", "-t", "configfs", "configfs", "/sys/kernel/config")
        # APTPL (sd registers keys with it): LIO keeps the registrations in dbroot/pr; a tmpfs of the
        # guest's own, not the shared root file system that outlives the boot
        Path("/run/target/pr").mkdir(parents=True, exist_ok=True)
        (TARGET / "dbroot").write_text("/run/target\n")
        _sh("modprobe", "tcm_loop")
        IMG_DIR.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "tmpfs", "-o", f"size={image_mib + 16}m", "tmpfs", str(IMG_DIR))
        img = IMG_DIR / "scsi.img"
        _sh("truncate", "-s", f"{image_mib}M", str(img))
        dev = TARGET / "core" / "fileio_0" / "pnfs"
        dev.mkdir(parents=True)
        (dev / "control").write_text(f"fd_dev_name={img},fd_dev_size={image_mib * MIB}")
        (dev / "wwn" / "vpd_unit_serial").write_text(SERIAL + "\n")
        (dev / "enable").write_text("1\n")
        # the nexus first: linking the LUN adds the SCSI device (tcm_loop_port_link), whose scan
        # needs the I_T nexus to send its commands through
        tpg = TARGET / "loopback" / TARGET_WWN / "tpgt_1"
        tpg.mkdir(parents=True)
        (tpg / "nexus").write_text(INITIATOR_WWN + "\n")
        lun = tpg / "lun" / "lun_0"
        lun.mkdir(parents=True)
        os.symlink(dev, lun / "pnfs")
        try:
            disk, naa = _lio_disk(60)
        except RuntimeError:
            print("block devices: " + " ".join(sorted(p.name for p in Path("/sys/class/block").iterdir())), flush=True)
            print("\n".join(_sh("dmesg").splitlines()[-30:]), flush=True)
            raise
        attrs = {a: (dev / "attrib" / a).read_text().strip() for a in ("emulate_pr", "block_size")}
        # the kernel client opens the unit as /dev/disk/by-id/wwn-0x<designator> (fs/nfs/blocklayout/dev.c)
        byid = Path("/dev/disk/by-id")
        byid.mkdir(parents=True, exist_ok=True)
        link = byid / f"wwn-0x{naa.hex()}"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(disk)
        _sh("mkfs.xfs", "-q", "-f", disk, timeout=120)
        export.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "xfs", disk, str(export))
        export.chmod(0o777)
        with open("/etc/exports", "a") as f:
            f.write(f"{export} *(rw,fsid=5,insecure,no_root_squash,no_subtree_check,pnfs)\n")
        _sh("exportfs", "-ra")
        if "pnfs" not in _sh("exportfs", "-v"):
            raise RuntimeError("exportfs -v does not show pnfs")
        return (f"LIO fileio unit ({image_mib} MiB, {attrs}) on tcm_loop as {disk}, NAA designator {naa.hex()}, "
                f"{link}; XFS on it at {export}, exported with pnfs")

    return run


def _pnfs_dmesg() -> list[str]:
    return [ln for ln in _sh("dmesg").splitlines() if "pNFS" in ln or "pnfs" in ln.lower() or "SPC-3 PR" in ln][-20:]


def kernel_scsi(server: str, port: int, mib: int) -> Any:
    """The kernel client by the SCSI layout: nfsd hands it out for this disk (step 1's proof)."""
    def run(timeout: float) -> str:
        import sys

        _sh("modprobe", "blocklayoutdriver")
        _sh("dmesg", "-C")
        KSCSI.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "nfs4", "-o", f"vers=4.2,proto=tcp,port={port}", f"{server}:/scsi", str(KSCSI), timeout=60)
        ops = ("LAYOUTGET", "GETDEVICEINFO", "LAYOUTCOMMIT", "LAYOUTRETURN", "READ", "READ_PLUS", "WRITE")
        try:
            before = op_counts()
            size = mib * MIB
            path = KSCSI / "kernel-scsi.dat"
            t0 = time.monotonic()
            _sh("dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "oflag=direct", "conv=fsync",
                timeout=timeout / 3)
            write = size / (time.monotonic() - t0) / 1e6
            t0 = time.monotonic()
            _sh("dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct", timeout=timeout / 3)
            read = size / (time.monotonic() - t0) / 1e6
            d = _delta(before, op_counts())
            stats = _mountstats(KSCSI, ops)
            path.unlink()
        finally:
            _sh("umount", str(KSCSI), timeout=60)
            kernel_log = _pnfs_dmesg()
            print("dmesg:\n" + "\n".join(kernel_log), flush=True)
        layoutgets = stats.get("LAYOUTGET", [0])[0]
        devinfos = stats.get("GETDEVICEINFO", [0])[0]
        if not d["LAYOUTGET"] or not layoutgets or d["WRITE"] or d["READ"] or d["READ_PLUS"]:
            raise RuntimeError(f"the kernel client did not go by the SCSI layout: nfsd ran {d}; its mountstats "
                               f"{stats}; dmesg {kernel_log}")
        figures = getattr(sys.modules["__main__"], "FIGURES", None)
        if figures is not None:
            figures["rxe kernel-pnfs-scsi write MB/s"] = write
            figures["rxe kernel-pnfs-scsi read MB/s"] = read
        return (f"the kernel client by the SCSI layout: write {write:.1f} MB/s, read {read:.1f} MB/s; nfsd ran {d}; "
                f"LAYOUTGET {layoutgets}, GETDEVICEINFO {devinfos} in its mountstats; dmesg {kernel_log[-3:]}")

    return run


async def client_scsi(url: str, export: str, mib: str, server: str, port: str) -> str:
    import trio

    from pynfsrdma._client.api import Client

    _log_to_stderr()
    size = int(mib) * MIB
    local = Path(export)
    big = _pattern(size + 4093, b"scsi")
    _sh("modprobe", "blocklayoutdriver")
    KSCSI.mkdir(parents=True, exist_ok=True)
    _sh("mount", "-t", "nfs4", "-o", f"vers=4.2,proto=tcp,port={port}", f"{server}:/scsi", str(KSCSI), timeout=60)
    try:
        before = op_counts()
        async with Client.connect(url, timeout=30, pnfs=True) as nfs:
            t0 = time.monotonic()
            async with await nfs.open("/big.dat", "w") as f:
                for at in range(0, len(big), 8 * MIB):
                    await f.write(big[at:at + 8 * MIB])
                await f.fsync()
            wrote = time.monotonic() - t0
            t1 = time.monotonic()
            async with await nfs.open("/big.dat", "r") as f:
                got = await f.pread(0, len(big) + 100)
            read = time.monotonic() - t1
            report = nfs.stats()["pnfs"]
        d = _delta(before, op_counts())
        if got != big:
            raise RuntimeError("our client read back other data than it wrote by the SCSI layout")
        counts = report["counts"]
        if report.get("layout") != "scsi" or counts.get("write_bytes", 0) < len(big) \
                or counts.get("read_bytes", 0) < len(big) or not counts.get("pr_register"):
            raise RuntimeError(f"not by the SCSI layout: {report}; nfsd ran {d}")
        if d["WRITE"] or d["READ"] > 2 or not d["LAYOUTGET"] or not d["LAYOUTCOMMIT"]:
            raise RuntimeError(f"data through the metadata server, or no LAYOUTGET/LAYOUTCOMMIT: nfsd ran {d}; {report}")
        through_kernel = await trio.to_thread.run_sync(lambda: (KSCSI / "big.dat").read_bytes())
        if through_kernel != big or _server_bytes(local / "big.dat") != big:
            raise RuntimeError("the kernel client's mount or the server's XFS hold other bytes than we wrote")
        (local / "big.dat").unlink()
        recall = await _recall(url, local)
    finally:
        _sh("umount", str(KSCSI), timeout=60)
    mbw, mbr = len(big) / wrote / 1e6, len(big) / read / 1e6
    _figure("rxe ours-pnfs-scsi write MB/s", mbw)
    _figure("rxe ours-pnfs-scsi read MB/s", mbr)
    return (f"{len(big)} bytes by the SCSI layout on {report['devices']}: write {mbw:.1f} MB/s, read {mbr:.1f} MB/s; "
            f"nfsd ran {d}; our counts {counts}; the same bytes through the kernel client; {recall}")


def _trace(start: bool) -> str:
    """The kernel's trace of ``RACE_EVENTS``: switched on and emptied (``start``), or read. They stay
    on: switching a trace event patches the kernel's text, and a guest under emulation once crashed
    in the middle of that (an int3 oops in the scheduler) when the step switched them on and off for
    each of 40 recalls. "" where the kernel has no trace events."""
    try:
        if not (TRACING / "trace").exists():
            _sh("mount", "-t", "tracefs", "tracefs", str(TRACING))
        if not start:
            return (TRACING / "trace").read_text()
        for event in RACE_EVENTS:
            enable = TRACING / "events" / event / "enable"
            if enable.read_text().strip() != "1":
                enable.write_text("1\n")
        (TRACING / "trace").write_text("")
        return ""
    except (OSError, RuntimeError) as e:
        print(f"no trace of the layout race: {e}", flush=True)
        return ""


def _kernel_lost(trace: str) -> str | None:
    """Why the kernel client's own write is lost, when nfsd's trace shows its race: a recall of a
    layout nfsd has just granted reaches the kernel client before its LAYOUTGET reply; it answers
    NFS4ERR_NOMATCHING_LAYOUT, so nfsd forgets that layout; the kernel client writes by it all the
    same, nfsd refuses its LAYOUTCOMMIT (NFS4ERR_BADLAYOUT), and the kernel client takes that for
    success (nfs4_layoutcommit_done ignores it): its blocks stay unwritten extents, zeros. None when
    the trace does not show both."""
    nomatch = [ln for ln in trace.splitlines() if "nfs4_cb_layoutrecall_file" in ln and "NOMATCHING_LAYOUT" in ln]
    refused = [ln for ln in trace.splitlines() if "nfsd_layout_commit_lookup_fail" in ln]
    if not nomatch or not refused:
        return None
    return (f"the kernel client lost its own 6 bytes by its race of a recall with its LAYOUTGET reply: it "
            f"answered {len(nomatch)} recall(s) NFS4ERR_NOMATCHING_LAYOUT, and nfsd refused its LAYOUTCOMMIT "
            f"({refused[0].split(':', 1)[-1].strip()[:120]})")


async def _recall(url: str, local: Path) -> str:
    """The kernel client writes a file our client is writing by the SCSI layout: nfsd recalls our
    layout in the middle of our transfer; nothing is lost."""
    import trio

    from pynfsrdma._client.api import Client

    first = _pattern(4 * MIB, b"first")
    second = _pattern(8 * MIB, b"second")
    before = op_counts()
    async with Client.connect(url, timeout=30, pnfs=True) as nfs:
        f = await nfs.open("/recall.dat", "w+")
        await f.pwrite(0, first)
        await f.fsync()
        held = nfs.stats()["pnfs"]["counts"]

        def kernel_write() -> None:
            fd = os.open(KSCSI / "recall.dat", os.O_WRONLY)
            try:
                os.pwrite(fd, b"KERNEL", 4 * MIB + 100)
                os.fsync(fd)
            finally:
                os.close(fd)

        async def ours() -> None:
            for at in range(0, len(second), 128 << 10):
                await f.pwrite(8 * MIB + at, second[at:at + (128 << 10)])
                if at == 0:
                    started.set()
            await f.fsync()

        started = trio.Event()
        _trace(start=True)
        mds_before = nfsd_write_bytes()
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ours)
                await started.wait()
                await trio.to_thread.run_sync(kernel_write)
        mds_bytes = nfsd_write_bytes() - mds_before
        await f.close()
        report = nfs.stats()["pnfs"]
    by_layout = report["counts"].get("write_bytes", 0) - held.get("write_bytes", 0)
    recall_in_order(report, "the kernel client's WRITE")
    # every byte of our transfer went once, by the layout or through nfsd (the kernel's 6 bytes: a page at most)
    if by_layout + mds_bytes > len(second) + 4096:
        raise RuntimeError(f"data sent twice: {by_layout} bytes by the layout and {mds_bytes} through nfsd for our "
                           f"{len(second)}; {report}")
    d = _delta(before, op_counts())
    ours = bytes(bytearray(first) + bytes(4 * MIB) + bytearray(second))  # (and the kernel's 6 bytes lost)
    expect = bytearray(ours)
    expect[4 * MIB + 100:4 * MIB + 106] = b"KERNEL"
    on_server = _server_bytes(local / "recall.dat")
    through_kernel = (KSCSI / "recall.dat").read_bytes()
    trace = _trace(start=False)
    kernel_lost = None
    if on_server == ours and through_kernel == ours:
        # every byte of ours there, the kernel client's own write not: said, where its race shows
        kernel_lost = _kernel_lost(trace)
    if (on_server != bytes(expect) or through_kernel != bytes(expect)) and kernel_lost is None:
        raise RuntimeError(f"after the recall the server's XFS or the kernel client's mount hold other bytes "
                           f"(the XFS: {_differs(on_server, bytes(expect))}; the kernel client: "
                           f"{_differs(through_kernel, bytes(expect))}); {report}; nfsd ran {d}")
    if not report["counts"].get("recalls"):
        raise RuntimeError(f"no recall of our layout when the kernel client wrote: {report}; nfsd ran {d}")
    (local / "recall.dat").unlink()
    return (f"recalled {report['counts']['recalls']} time(s) by the kernel client's write, nothing of ours lost"
            f"{'; ' + kernel_lost if kernel_lost else ''}; our "
            f"transfer: {by_layout} bytes by the layout, {mds_bytes} written by nfsd (no LAYOUTCOMMIT refused, "
            f"nothing sent twice): {report}; nfsd ran {d}")


async def client_scsi_refused(url: str, export: str) -> str:
    """A unit that refuses our key's registration: our client is given a loop device (no persistent
    reservation operations: the kernel answers IOC_PR_REGISTER with EOPNOTSUPP) as the unit the
    designator names; its I/O goes through nfsd, with no error and the bytes intact."""
    from pynfsrdma._client.api import Client

    _log_to_stderr()
    local = Path(export)
    _sh("modprobe", "loop")
    img = IMG_DIR / "no-pr.img"
    _sh("truncate", "-s", "16M", str(img))
    loop = _sh("losetup", "--show", "-f", str(img)).strip()
    data = _pattern(4 * MIB + 5, b"refused")
    try:
        before = op_counts()
        async with Client.connect(url, timeout=30, pnfs=True) as nfs:
            nfs.nfs.read_write.pnfs.find_designator = lambda *designator: (loop, 16 * MIB)
            async with await nfs.open("/refused.dat", "w") as f:
                await f.write(data)
                await f.fsync()
            back = await nfs.read_file("/refused.dat")
            report = nfs.stats()["pnfs"]
        d = _delta(before, op_counts())
    finally:
        _sh("losetup", "-d", loop)
        img.unlink()
    if back != data or _server_bytes(local / "refused.dat") != data:
        raise RuntimeError(f"other bytes after the refused registration: {report}; nfsd ran {d}")
    refused = [r for r in report["through_mds"] if "refused the registration" in r]
    if not refused or report["counts"].get("write_bytes") or not d["WRITE"]:
        raise RuntimeError(f"not refused, or not through nfsd: {report}; nfsd ran {d}")
    (local / "refused.dat").unlink()
    return f"{len(data)} bytes through nfsd: {refused[0]!r}; our counts {report['counts']}; nfsd ran {d}"
