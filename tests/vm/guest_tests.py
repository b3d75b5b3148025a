"""The in-guest program of the real-RDMA rig (``tests/vm/run`` boots a qemu guest that runs it).

It sets up, inside the guest, a soft RDMA device (rxe or siw) on a dummy interface, the Linux
kernel's nfsd with an RDMA listener (20049) and a TCP listener (2049) exporting a tmpfs, and the
kernel's own NFS client mounted over RDMA; then it runs the checks against that server and
measures the figures. Every step has a timeout. Results go to the results directory:
``steps.jsonl`` (one line per step), ``figures.txt`` (the figures, one per line); the exit
status is 0 only when every step passed.

Run only inside the guest: it loads kernel modules, starts nfsd and mounts filesystems.
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import hashlib
import inspect
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import guest_deleg  # write delegations on the FUSE mount (next to this file)
import guest_ff  # pNFS flexfiles layout (the Debian 13 guest's own nfsd.ko)
import guest_fuse  # the FUSE mount's steps (next to this file)
import guest_pnfs  # pNFS block layouts (the Debian 13 guest)
import guest_scsi  # pNFS SCSI layout (the Debian 13 guest, a LIO disk)
import guest_shared  # two clients sharing files (next to this file)
import guest_tls  # RPC-with-TLS on the server side (the Debian 13 guest)

SERVER = "192.0.2.1"  # the first dummy interface (RFC 5737 TEST-NET-1: never routed)
SERVER2 = "198.51.100.1"  # the second dummy interface (a second address of the same server)
RDMA_PORT = 20049  # = pynfsrdma._proto.nfs4.const.NFS_RDMA_PORT (this module must import without the project)
TCP_PORT = 2049  # = pynfsrdma._client.url.NFS_PORT
EXPORT = Path("/srv/export")
XATTR_EXPORT = EXPORT / "xattrs"  # an ext4 file system (tmpfs has no user xattrs before Linux 6.6)
KMOUNT = Path("/mnt/kernel")
MIB = 1 << 20
LEASE = 10  # seconds: the nfsd's lease (and grace) time set below (its minimum)
DIR_ENTRIES = 200
BLOCK = 8 * MIB  # what one write()/read step hands our client: wsize * the client's in-flight window

# the guests the rig builds, and the soft RDMA devices each has (Linux 7.3 in Debian 13 does not build siw)
GUESTS = {"bookworm": ("rxe", "siw"), "trixie": ("rxe",)}
# RPC-with-TLS material in the Debian 13 guest (made by tests/vm/build-trixie): the CA that a client
# trusts, and a client's certificate and key for xprtsec=mtls
TLS_CA = guest_tls.TLS_CA
TLS_CLIENT_CERT = guest_tls.TLS_CLIENT_CERT
TLS_CLIENT_KEY = guest_tls.TLS_CLIENT_KEY

XPRTSEC_FIGURE = "ours-xprtsec-"  # our client over TCP with xprtsec=none, tls, mtls (the Debian 13 guest)
XPRTSEC_NONE = XPRTSEC_FIGURE + "none"

RESULTS: Path = Path("/mnt/results")
SIZE = 256 * MIB  # the figures' transfer size (--mib)
DEADLINE = float("inf")  # time.monotonic() by which every step must be over (--budget)
FIGURES: dict[str, float] = {}
FAILED: list[str] = []
ONLY: set[str] = set()  # --steps: run only these steps (and the set-up steps); empty: all
# NFSv3 on in nfsd: the Debian 13 guest's nfsd hands out flexfiles layouts, whose data server it
# reaches by NFSv3 (and offers none while v3 is off); the Debian 12 guest's nfsd runs NFSv4 only
NFSD_V3 = False


def log(msg: str) -> None:
    print(f"[{time.monotonic():8.2f}] {msg}", flush=True)


def record(name: str, ok: bool, detail: str, seconds: float) -> None:
    with open(RESULTS / "steps.jsonl", "a") as f:
        f.write(json.dumps({"step": name, "ok": ok, "detail": detail, "seconds": round(seconds, 2)}) + "\n")
    log(f"{'PASS' if ok else 'FAIL'} {name} ({seconds:.1f} s){': ' + detail if detail else ''}")
    if not ok:
        FAILED.append(name)


def step(
    name: str, fn: Callable[[float], str | None], timeout: float, *, key: str = "", required: bool = False
) -> bool:
    """Run one step with at most ``timeout`` seconds (less if the run's budget ends sooner); a
    required step that fails ends the run (what follows depends on it). ``key`` names the step
    for ``--steps`` (a quicker run while working on one step; the full run runs every step)."""
    if ONLY and not required and key not in ONLY:
        log(f"---- {name}: not selected (--steps)")
        return True
    timeout = min(timeout, DEADLINE - time.monotonic() - 5)
    log(f"---- {name} (timeout {timeout:.0f} s)")
    t0 = time.monotonic()
    try:
        if timeout <= 0:
            raise TimeoutError("no time left in the run's budget")
        detail = fn(timeout) or ""
        ok = True
    except Exception as e:
        detail = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        ok = False
    record(name, ok, detail, time.monotonic() - t0)
    if required and not ok:
        finish()
    return ok


def finish() -> None:
    ratios = {}
    for key, value in FIGURES.items():
        link, who, direction = key.split()[:3]
        # our client under RPC-with-TLS is set against itself without it, the rest against the kernel's
        base = XPRTSEC_NONE if who.startswith(XPRTSEC_FIGURE) else "kernel-client"
        anchor = FIGURES.get(f"{link} {base} {direction} MB/s")
        if who != base and anchor:
            ratios[f"{link} {who}/{base} {direction} ratio"] = value / anchor
    with open(RESULTS / "figures.txt", "w") as f:
        for k, v in FIGURES.items():
            f.write(f"{k} {v:.1f}\n")
        for k, v in ratios.items():
            f.write(f"{k} {v:.2f}\n")
    log(f"{len(FAILED)} step(s) failed: {', '.join(FAILED)}" if FAILED else "all steps passed")
    sys.exit(1 if FAILED else 0)


def sh(*cmd: str, timeout: float = 30, check: bool = True) -> str:
    """Run a command with a timeout; its output goes to the log, its stdout is returned."""
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = (p.stdout + p.stderr).strip()
    if out:
        print(out, flush=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {out[-300:]}")
    return p.stdout


# -- the server side ------------------------------------------------------------------------------


def setup_link(link: str) -> Callable[[float], str]:
    def run(timeout: float) -> str:
        sh("ip", "link", "add", "rdmanet0", "type", "dummy")
        sh("ip", "addr", "add", f"{SERVER}/24", "dev", "rdmanet0")
        sh("ip", "link", "set", "rdmanet0", "mtu", "9000", "up")
        sh("ip", "link", "add", "rdmanet1", "type", "dummy")
        sh("ip", "addr", "add", f"{SERVER2}/24", "dev", "rdmanet1")
        sh("ip", "link", "set", "rdmanet1", "mtu", "9000", "up")
        module = {"rxe": "rdma_rxe", "siw": "siw"}[link]
        sh("modprobe", module)
        sh("rdma", "link", "add", f"{link}0", "type", link, "netdev", "rdmanet0")
        sh("rdma", "link", "add", f"{link}1", "type", link, "netdev", "rdmanet1")
        return sh("rdma", "link", "show").strip().replace("\n", "; ")

    return run


def setup_nfsd(timeout: float) -> str:
    sh("modprobe", "-a", "nfsd", "rpcrdma")
    sh("mount", "-t", "nfsd", "nfsd", "/proc/fs/nfsd")
    # short lease and grace, set before nfsd starts (seconds); grace is also ended at once below
    Path("/proc/fs/nfsd/nfsv4leasetime").write_text(f"{LEASE}\n")
    Path("/proc/fs/nfsd/nfsv4gracetime").write_text(f"{LEASE}\n")
    EXPORT.mkdir(parents=True, exist_ok=True)
    sh("mount", "-t", "tmpfs", "-o", "size=1200m", "tmpfs", str(EXPORT))
    Path("/etc/exports").write_text(f"{EXPORT} *(rw,fsid=0,insecure,no_root_squash,no_subtree_check)\n")
    subprocess.Popen(
        ["rpc.mountd", "--no-nfs-version", "2", "--no-nfs-version", "3", "--no-udp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sh("exportfs", "-ra")
    no_v3 = [] if NFSD_V3 else ["-N", "3"]
    if NFSD_V3:  # nfsd registers NFSv3 with rpcbind, and fails to start without it ("errno 111")
        sh("rpcbind")
    sh("rpc.nfsd", *no_v3, "-U", f"--rdma={RDMA_PORT}", "--port", str(TCP_PORT), "4", timeout=60)
    ports = Path("/proc/fs/nfsd/portlist").read_text()
    if f"rdma {RDMA_PORT}" not in ports or f"tcp {TCP_PORT}" not in ports:
        raise RuntimeError(f"nfsd listeners: {ports!r}")
    started = time.monotonic()
    try:
        Path("/proc/fs/nfsd/v4_end_grace").write_text("Y\n")
    except OSError as e:
        # Linux 7.x ends grace early only with client tracking (nfsdcld or a recovery directory)
        # active, else EBUSY: the grace period is then waited out (LEASE seconds)
        if e.errno != errno.EBUSY:
            raise
        wait = started + LEASE + 1 - time.monotonic()
        log(f"v4_end_grace: EBUSY (no client tracking): waiting {wait:.0f} s for the grace period to end")
        time.sleep(max(0.0, wait))
    return ports.strip().replace("\n", ", ")


def setup_xattr_export(timeout: float) -> str:
    """A second export for extended attributes: ext4 on a loop device, mounted inside the first."""
    img_dir = Path("/mnt/img")
    img_dir.mkdir(parents=True, exist_ok=True)
    sh("mount", "-t", "tmpfs", "-o", "size=80m", "tmpfs", str(img_dir))
    img = img_dir / "xattrs.ext4"
    sh("truncate", "-s", "64M", str(img))
    # 4 KiB blocks and ea_inode: values beyond a block (up to 64 KiB) live in inodes of their own
    sh("mkfs.ext4", "-q", "-F", "-b", "4096", "-O", "ea_inode", str(img), timeout=60)
    sh("modprobe", "loop")
    XATTR_EXPORT.mkdir(parents=True, exist_ok=True)
    sh("mount", "-o", "loop,user_xattr", str(img), str(XATTR_EXPORT))
    XATTR_EXPORT.chmod(0o777)
    with open("/etc/exports", "a") as f:
        f.write(f"{XATTR_EXPORT} *(rw,fsid=2,insecure,no_root_squash,no_subtree_check)\n")
    sh("exportfs", "-ra")
    os.setxattr(XATTR_EXPORT, "user.probe", b"1")  # the file system takes user xattrs itself
    os.removexattr(XATTR_EXPORT, "user.probe")
    return f"ext4 on a loop device at {XATTR_EXPORT}"


def kernel_mount(timeout: float) -> str:
    KMOUNT.mkdir(parents=True, exist_ok=True)
    sh(
        "mount",
        "-t",
        "nfs4",
        "-o",
        f"vers=4.1,proto=rdma,port={RDMA_PORT}",
        f"{SERVER}:/",
        str(KMOUNT),
        timeout=timeout,
    )
    for line in Path("/proc/mounts").read_text().splitlines():
        if str(KMOUNT) in line:
            if "proto=rdma" not in line:
                raise RuntimeError(f"not an RDMA mount: {line}")
            make_listing()
            return line
    raise RuntimeError("the kernel NFS mount is not in /proc/mounts")


LISTING = "listing"  # the export's directory of DIR_ENTRIES entries, made by the kernel client


def make_listing() -> None:
    """A directory whose listing is larger than any inline threshold (READDIR needs a Reply chunk
    over RDMA), made once by the kernel client (much faster than our calls here) and only read
    by the steps."""
    (KMOUNT / LISTING).mkdir()
    for i in range(DIR_ENTRIES):
        (KMOUNT / LISTING / f"entry-with-a-name-long-enough-to-fill-readdir-replies-{i:04d}").touch()
    os.sync()


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


# -- the data: a patterned stream whose every 1 MiB block carries its own index -------------------

_BASE = hashlib.shake_256(b"pynfsrdma vm rig").digest(BLOCK)


def block(i: int) -> bytes:
    """The i-th BLOCK-sized piece of the test stream (a misplaced or repeated block changes the hash)."""
    b = bytearray(_BASE)
    for k in range(0, BLOCK, MIB):
        b[k : k + 8] = (i * BLOCK + k).to_bytes(8, "big")
    return bytes(b)


def stream_digest(size: int) -> str:
    h = hashlib.sha256()
    for i in range(size // BLOCK):
        h.update(block(i))
    return h.hexdigest()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(4 * MIB):
            h.update(chunk)
    return h.hexdigest()


# -- the kernel client: the anchor figures -----------------------------------------------------------


def kernel_figures(label: str) -> Callable[[float], str]:
    def run(timeout: float) -> str:
        target = KMOUNT / "kernel-anchor"
        end = time.monotonic() + timeout
        t0 = time.monotonic()
        sh(
            "dd",
            "if=/dev/zero",
            f"of={target}",
            "bs=1M",
            f"count={SIZE // MIB}",
            "conv=fsync",
            timeout=timeout,
        )
        write = SIZE / (time.monotonic() - t0) / 1e6
        drop_caches()
        t0 = time.monotonic()
        sh("dd", f"if={target}", "of=/dev/null", "bs=1M", timeout=end - t0)
        read = SIZE / (time.monotonic() - t0) / 1e6
        target.unlink()
        FIGURES[f"{label} kernel-client write MB/s"] = write
        FIGURES[f"{label} kernel-client read MB/s"] = read
        return f"write {write:.1f} MB/s, read {read:.1f} MB/s"

    return run


# -- a raw RPC-over-RDMA v1 NULL call from pyverbs (no pynfsrdma transport involved) --------------


def raw_null_call() -> str:
    """Connect with rdma_cm, send an RDMA_MSG carrying an NFSv4 NULL call, check the RDMA_MSG
    reply and its credits (no pynfsrdma transport involved)."""
    import pyverbs.cm_enums as ce
    import pyverbs.enums as e
    from pyverbs.cmid import CMID, AddrInfo, ConnParam
    from pyverbs.qp import QPCap, QPInitAttr

    from pynfsrdma._proto import rpc
    from pynfsrdma._proto.nfs4 import const as c
    from pynfsrdma._proto.rpcrdma import RDMA_MSG, decode_rdma_msg, encode_rdma_msg, make_msg
    from pynfsrdma._xdr import Unpacker

    size = 1024  # the RPC-over-RDMA v1 default inline threshold: no private data is sent
    cap = QPCap(max_send_wr=2, max_recv_wr=2, max_send_sge=1, max_recv_sge=1)
    ai = AddrInfo(dst=SERVER, dst_service=str(RDMA_PORT), port_space=ce.RDMA_PS_TCP)
    cmid = CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap))
    rmr = cmid.reg_msgs(size)
    smr = cmid.reg_msgs(size)
    cmid.post_recv(rmr, size)
    cmid.connect(ConnParam())
    xid = 0x5EED0001
    p = encode_rdma_msg(make_msg(xid, 8))
    rpc.pack_call_header(
        p, xid, c.NFS4_PROGRAM, c.NFS_V4, c.NFSPROC4_NULL, rpc.opaque_auth.XDR.encode(rpc.NULL_AUTH)
    )
    msg = p.getvalue()
    smr.write(msg, len(msg))
    cmid.post_send(smr, e.IBV_SEND_SIGNALED, len(msg))
    cmid.get_send_comp()
    wc = cmid.get_recv_comp()
    data = rmr.read(wc.byte_len, 0)
    hdr, off = decode_rdma_msg(data)
    if hdr.rdma_xid != xid or hdr.proc != RDMA_MSG:
        raise SystemExit(f"unexpected transport header {hdr}")
    u = Unpacker(data, off)
    rxid, mtype = u.uint32(), u.uint32()
    reply = rpc.unpack_reply_header(u)
    u.done()
    if rxid != xid or mtype != rpc.REPLY or reply.accept != rpc.SUCCESS:
        raise SystemExit(f"unexpected RPC reply: xid {rxid:#x}, {rpc.describe(reply)}")
    cmid.disconnect()
    return f"NULL over RDMA: reply to xid {rxid:#x} accepted, {hdr.rdma_credit} credits granted, {wc.byte_len} bytes"


# -- our client -------------------------------------------------------------------------------------


async def client_roundtrip(url: str, label: str, expect: str) -> str:
    import trio

    from pynfsrdma._client.api import Client

    name = f"/{label.replace(' ', '-')}.dat"
    async with Client.connect(url, timeout=30) as nfs:
        t0, cpu0 = time.monotonic(), time.process_time()
        async with await nfs.open(name, "w") as f:
            for i in range(SIZE // BLOCK):
                await f.write(block(i))
            await f.fsync()
        write = SIZE / (time.monotonic() - t0) / 1e6
        h = hashlib.sha256()
        t0, cpu1 = time.monotonic(), time.process_time()
        async with await nfs.open(name, "r") as f:
            async for _, view in f.iter_views():
                h.update(view)
        read = SIZE / (time.monotonic() - t0) / 1e6
        cpu = ((cpu1 - cpu0) * 1000 / (SIZE / MIB), (time.process_time() - cpu1) * 1000 / (SIZE / MIB))
        if h.hexdigest() != expect:
            raise RuntimeError("our client read back other data than it wrote")
        await trio.lowlevel.checkpoint()
        path = nfs.clientid.paths.paths[0]  # (over RDMA: what the transfers cost the provider)
        conn = getattr(path.rpc.transport if path.rpc else None, "conn", None)
        c = getattr(conn, "counters", None)
        woken = getattr(conn, "notifications", None)  # (pyverbs: completion channel events)
        polled = getattr(conn, "completions", None)
        tls = path.snapshot()["tls"]  # (RPC-with-TLS: the TLS version of the connection)
    if ("xprtsec=tls" in url or "xprtsec=mtls" in url) != (tls is not None):
        raise RuntimeError(f"{url}: the connection's TLS is {tls}")
    # the kernel's own client reads the file our client wrote
    drop_caches()
    if file_digest(KMOUNT / name.lstrip("/")) != expect:
        raise RuntimeError("the kernel NFS client reads other data than our client wrote")
    (KMOUNT / name.lstrip("/")).unlink()
    FIGURES[f"{label} write MB/s"] = write
    FIGURES[f"{label} read MB/s"] = read
    # the Bind MW requests of a call's windows go out chained with its Send: one post per Send
    if c is not None and c.binds and c.posts >= c.sends + c.binds:
        raise RuntimeError(f"{c.posts} send-queue posts for {c.sends} Sends and {c.binds} binds: none chained")
    cost = (
        f"; provider: {c.registrations} registrations, {c.binds} windows bound, {c.windows_allocated} allocated, "
        f"{c.posts} send-queue posts for {c.sends} Sends"
        if c is not None
        else ""
    )
    if woken is not None:
        cost += f", {polled} completions polled after {woken} notifications"
    return (
        f"write {write:.1f} MB/s, read {read:.1f} MB/s, sha256 checked by our client and the kernel client; "
        f"our CPU {cpu[0]:.0f} ms/MiB written, {cpu[1]:.0f} ms/MiB read{f'; {tls}' if tls else ''}{cost}"
    )


async def client_api(url: str) -> str:
    """The path API against the kernel nfsd, cross-checked with the kernel's own client."""
    from pynfsrdma._client.api import Client
    from pynfsrdma._client.url import parse_url

    top = f"api-{parse_url(url).proto}"  # each transport works in a directory of its own
    small = KMOUNT / f"{top}.bin"
    data = b"".join(block(i)[: MIB // 4] for i in range(8))  # 2 MiB written by the kernel client
    small.write_bytes(data)
    os.sync()
    async with Client.connect(url, timeout=30) as nfs:
        got = await nfs.read_file(f"/{top}.bin")
        if got != data:
            raise RuntimeError("our client reads other data than the kernel client wrote")
        names = await nfs.listdir(f"/{LISTING}")
        if len(names) != DIR_ENTRIES:
            raise RuntimeError(f"listdir found {len(names)} entries, the kernel client made {DIR_ENTRIES}")
        await nfs.makedirs(f"/{top}/mine/deeper")
        await nfs.write_file(f"/{top}/mine/a.txt", b"hello from pynfsrdma\n")
        await nfs.rename(f"/{top}/mine/a.txt", f"/{top}/mine/b.txt")
        await nfs.truncate(f"/{top}/mine/b.txt", 5)
        st = await nfs.stat(f"/{top}/mine/b.txt")
        if st.size != 5:
            raise RuntimeError(f"size after truncate {st.size}")
        drop_caches()
        if (KMOUNT / top / "mine" / "b.txt").read_bytes() != b"hello":
            raise RuntimeError("the kernel client reads other data than our client left")
        # symlinks last: READLINK is the one call whose result rides a Write chunk besides READ
        await nfs.symlink("mine/b.txt", f"/{top}/link")
        if os.readlink(KMOUNT / top / "link") != "mine/b.txt":
            raise RuntimeError("the kernel client reads another symlink target")
        if await nfs.read_file(f"/{top}/link") != b"hello":
            raise RuntimeError("read through a symlink")
        if await nfs.readlink(f"/{top}/link") != "mine/b.txt":
            raise RuntimeError("readlink")
        await nfs.rmtree(f"/{top}")
        if await nfs.exists(f"/{top}"):
            raise RuntimeError("rmtree left the directory")
        await nfs.remove(f"/{top}.bin")
    drop_caches()
    if (KMOUNT / top).exists():
        raise RuntimeError(f"the kernel client still sees /{top}")
    return (
        f"read a kernel-written file, listdir of {DIR_ENTRIES} kernel-made entries, "
        "mkdir/write/symlink/readlink/rename/truncate/rmtree seen by the kernel client"
    )


def _errno_of(e: BaseException) -> int | None:
    return getattr(e, "errno", None)


async def client_xattrs(url: str) -> str:
    """Extended attributes (NFSv4.2, RFC 8276) through the path API, checked on the server's own ext4:
    set, get, list, remove, create/replace semantics, and a value past the inline threshold."""
    import errno

    from pynfsrdma._client.api import Client
    from pynfsrdma._errors import NFS4Error

    local = XATTR_EXPORT / "api.txt"
    big = bytes(range(256)) * 200  # 51,200 bytes: more than fits inline (a Reply chunk over RDMA)
    async with Client.connect(url, timeout=30) as nfs:
        if not nfs.nfs.xattr_support:
            raise RuntimeError("nfsd's ext4 export does not report xattr_support to a 4.2 session")
        await nfs.write_file("/api.txt", b"x")
        await nfs.setxattr("/api.txt", "user.color", b"red")
        await nfs.setxattr("/api.txt", "user.big", big)
        if os.getxattr(local, "user.color") != b"red" or os.getxattr(local, "user.big") != big:
            raise RuntimeError("the server's file holds other extended attributes than we set")
        os.setxattr(local, "user.server", b"set on the server")
        names = sorted(await nfs.listxattr("/api.txt"))
        if names != ["user.big", "user.color", "user.server"]:
            raise RuntimeError(f"listxattr: {names}")
        if await nfs.getxattr("/api.txt", "user.big") != big:
            raise RuntimeError("getxattr of the large value")
        if await nfs.getxattr("/api.txt", "user.server") != b"set on the server":
            raise RuntimeError("getxattr of a value set on the server")
        for kwargs, want in (({"create": True}, errno.EEXIST), ({"replace": True}, errno.ENODATA)):
            name = "user.color" if "create" in kwargs else "user.absent"
            try:
                await nfs.setxattr("/api.txt", name, b"v", **kwargs)
            except NFS4Error as e:
                if _errno_of(e) != want:
                    raise RuntimeError(f"setxattr {kwargs}: {e}") from e
            else:
                raise RuntimeError(f"setxattr {kwargs} of {name} did not fail")
        await nfs.removexattr("/api.txt", "user.color")
        try:
            await nfs.getxattr("/api.txt", "user.color")
        except NFS4Error as e:
            if _errno_of(e) != errno.ENODATA:
                raise
        else:
            raise RuntimeError("a removed extended attribute is still there")
        if "user.color" in os.listxattr(local):
            raise RuntimeError("removexattr left the attribute on the server's file")
        await nfs.remove("/api.txt")
    return "set/get/list/remove, XATTR_CREATE/REPLACE, a 51,200-byte value; checked on nfsd's ext4"


async def private_data() -> str:
    """RFC 8797: the kernel server's private data is decoded, and the thresholds of each
    connection are the RFC's min() of what each side advertised (for several of our sizes)."""
    from pynfsrdma._proto.private_data import find_private_data
    from pynfsrdma._transport.rdma import connect_rdma
    from pynfsrdma._transport.rdma.transport import RdmaTransport

    seen = []
    for inline in (1024, 4096, 16384):
        t = await connect_rdma(SERVER, RDMA_PORT, options={"provider": "pyverbs", "inline": str(inline)})
        try:
            if not isinstance(t, RdmaTransport):
                raise RuntimeError(f"connect_rdma gave a {type(t).__name__}")
            raw = bytes(t.conn.peer_private_data or b"")
            server = find_private_data(raw)
            if server is None:
                raise RuntimeError(f"no RFC 8797 message in the kernel's private data {raw.hex()}")
            th = t.thresholds
            want = (min(inline, server.recv_size), min(inline, server.send_size))
            if (th.send, th.recv) != want or not th.peer_sent_message:
                raise RuntimeError(f"inline {inline}: thresholds {th}, the RFC's min() gives {want}")
            seen.append(f"ours {inline}: send {th.send}/recv {th.recv}")
        finally:
            await t.aclose()
    return (
        f"server sent send {server.send_size}, recv {server.recv_size}, "
        f"remote invalidation {server.remote_invalidation}; " + "; ".join(seen)
    )


async def raw_null_and_private_data() -> str:
    """:func:`raw_null_call`, then :func:`private_data` (one process)."""
    return f"{raw_null_call()} | {await private_data()}"


async def client_trunking(url: str) -> str:
    """Session trunking on the real server: the nfsd reached at its second address too, both
    paths in one session; then the first address's link goes down and the calls move over.

    After the link went down the client keeps reading over the other path for longer than the
    lease. Meanwhile it tries to reconnect to the dead address, and on siw that connect waits in
    the kernel until TCP gives up (about two minutes): trio must keep running all along (the
    largest stall of the event loop is measured), the session must survive (same session, no
    recovery), and the first read after the link went down must come back well within the lease.
    """
    import trio

    from pynfsrdma._client.api import Client

    data = block(0)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    async with Client.connect(url, timeout=30) as nfs:
        trunking = nfs.trunking
        if trunking is None:
            raise RuntimeError("the client set up no trunking")
        with trio.move_on_after(60):  # the added path connects and is verified in the background
            while any(
                p["state"] == "connecting" or p.get("verification") == "pending" for p in trunking.snapshot()
            ):
                await trio.sleep(0.5)
        paths = trunking.snapshot()
        up = sorted(str(p["address"]) for p in paths if p["state"] == "up")
        if len(up) != 2:
            raise RuntimeError(f"expected two paths up, got {paths}")
        await nfs.write_file("/trunked.bin", data)
        session, recoveries = nfs.clientid.session, nfs.clientid.recoveries
        stall = [0.0]

        async def ticker() -> None:  # the event loop's largest stall while the path is down
            while True:
                t0 = trio.current_time()
                await trio.sleep(0.1)
                stall[0] = max(stall[0], trio.current_time() - t0 - 0.1)

        reads = 0
        sh("ip", "link", "set", "rdmanet0", "down")
        try:
            async with trio.open_nursery() as n:
                n.start_soon(ticker)
                t0 = trio.current_time()
                with trio.fail_after(LEASE):
                    got = await nfs.read_file("/trunked.bin")
                failover = trio.current_time() - t0
                if got != data:
                    raise RuntimeError("read after failover returned other data")
                while trio.current_time() - t0 < LEASE + 2:  # past a lease: renewals must go on
                    with trio.fail_after(LEASE):
                        if await nfs.read_file("/trunked.bin") != data:
                            raise RuntimeError("a read over the remaining path returned other data")
                    reads += 1
                    await trio.sleep(1)
                n.cancel_scope.cancel()
            after = {str(p["address"]): p["state"] for p in trunking.snapshot()}
        finally:
            sh("ip", "link", "set", "rdmanet0", "up")
        if nfs.clientid.session is not session or nfs.clientid.recoveries != recoveries:
            raise RuntimeError("the session was lost while the link was down")
        if stall[0] > LEASE / 2:
            raise RuntimeError(f"the event loop stalled {stall[0]:.1f} s while the link was down")
        await nfs.remove("/trunked.bin")
    return (
        f"paths up {up}; {SERVER}'s link down: first read after {failover:.1f} s, {reads} more reads "
        f"over {LEASE + 2} s, largest event-loop stall {stall[0]:.2f} s, same session; paths then {after}"
    )


async def client_rdma_extras(url: str, tcp_url: str) -> str:
    """Over RDMA with no private data sent (both sides on the version 1 defaults: 1024-byte
    thresholds) and 4 credits: a long call goes as RDMA_NOMSG, two READs in one COMPOUND get a
    Write chunk each, a long READLINK reply comes in a Reply chunk, and parallel reads never have
    more calls outstanding than the credits granted.

    Two READs in one COMPOUND whose first returns data that does not end on a page boundary come
    back right from nfsd 6.1 and wrong from nfsd 7.3 (the second READ's data one page further on:
    tests/vm/README.md), over RDMA and over TCP: where they are wrong the step says so. The READs
    our batches send instead (two to a COMPOUND, the first of whole pages from a page boundary of
    the file) must come back right over both (the step says whether three such READs do), and our batched reads (``read_ranges``, several READs to a COMPOUND)
    must get the file's bytes, also when a READ past the end of the file is followed by another."""
    import trio

    from pynfsrdma._client.api import Client
    from pynfsrdma._client.batched import wire_pieces
    from pynfsrdma._client.nfs4 import ANONYMOUS_STATEID
    from pynfsrdma._proto.nfs4.types import PUTFH4args, READ4args
    from pynfsrdma._transport.base import ReplyHints
    from pynfsrdma._transport.rdma.transport import RdmaTransport

    top = "extras"
    names = [f"{i}-" + "d" * 200 for i in range(8)]  # 8 LOOKUPs: a call over 1 KiB
    (KMOUNT / top).joinpath(*names).mkdir(parents=True)
    data = b"".join(block(i)[: MIB // 4] for i in range(8))  # 2 MiB
    (KMOUNT / top / "f.bin").write_bytes(data)
    target = "t" * 1500 + "/end"
    os.symlink(target, KMOUNT / top / "ln")
    os.sync()

    async def two_reads(nfs: Any, fh: bytes, case: list[tuple[int, int]]) -> list[bytes]:
        ops = [PUTFH4args(fh), *(READ4args(ANONYMOUS_STATEID, off, n) for off, n in case)]
        res = await nfs.nfs.run(ops, nfs.cred, ReplyHints(ddp_sizes=[n for _, n in case]))
        if case[0][0] >= len(data) and not res[1].res.eof:
            raise RuntimeError("the READ at end of file did not say eof")
        return [bytes(res[k].res.data) for k in range(1, len(case) + 1)]

    def wrong(case: list[tuple[int, int]], got: list[bytes]) -> str:
        """'' when each READ of ``case`` returned the file's bytes, else what came instead."""
        for k, ((off, n), g) in enumerate(zip(case, got, strict=True), start=1):
            if g != data[off : off + n]:
                late = len(g) == n > 4096 and g[4096:] == data[off : off + n - 4096]
                how = "its first 4096 bytes not the file's, the rest the file's one page late" if late else "not the file's"
                return f"READ {k} of {case}: {len(g)} bytes, {how}"
        return ""

    # two READs whose first ends off a page boundary (placed by nfsd 6.1, wrong from nfsd 7.3)
    off_page = [(100_000, 60_003), (MIB + 7, 90_001)]
    # the READs our batches send for such ranges (Batched): whole pages from a page boundary, two
    # to a COMPOUND (the first's data ends on a page of the reply: the second is placed right)
    paged = [
        wire_pieces(case, MIB, pages=True)[0]
        for case in (off_page, [(5, 100), (300_000, 100_000)], [(7, 5000), (MIB + 4095, 70_000)])
    ]
    # three: the second's data starts after the words of its result, inside a page of the reply
    three = wire_pieces([(7, 5000), (200_001, 3), (MIB + 4095, 70_000)], MIB, pages=True)[0]

    async def paged_wrong(nfs: Any, fh: bytes) -> tuple[str, str]:
        """What came wrong of the pairs of whole pages (must be ''), and of the three."""
        for case in paged:
            if problem := wrong(case, await two_reads(nfs, fh, case)):
                return f"whole pages: {problem}", ""
        return "", wrong(three, await two_reads(nfs, fh, three))

    async with Client.connect(tcp_url, timeout=30) as nfs:  # the same COMPOUND over TCP
        fh, _ = await nfs.nfs.names.lookup_path(nfs.root_fh, [top, "f.bin"], nfs.cred)
        tcp_wrong = wrong(off_page, await two_reads(nfs, fh, off_page))
        problem, tcp_three = await paged_wrong(nfs, fh)
        if problem:
            raise RuntimeError(f"TCP: {problem}")
    async with Client.connect(url, timeout=30) as nfs:
        path = nfs.clientid.paths.paths[0]
        t = path.rpc.transport if path.rpc is not None else None
        if not isinstance(t, RdmaTransport):
            raise RuntimeError(f"not an RDMA transport: {t!r}")
        th = t.thresholds
        if (th.send, th.recv) != (1024, 1024) or not th.peer_sent_message:
            raise RuntimeError(f"thresholds {th}: the version 1 defaults (1024) were expected")
        _fh, attrs = await nfs.nfs.names.lookup_path(nfs.root_fh, [top, *names], nfs.cred)
        if not attrs.is_dir or t.stats.nomsg_calls < 1:
            raise RuntimeError(f"the 8-LOOKUP call did not go as RDMA_NOMSG: {t.stats}")
        fh, _ = await nfs.nfs.names.lookup_path(nfs.root_fh, [top, "f.bin"], nfs.cred)
        # two READs in one COMPOUND, each with a Write chunk (nfsd caps a reply's data at its
        # maximum payload, 256 KiB in this guest, and a READ past it is short: these stay under it)
        # 1. both placed, odd lengths: the data and its roundup are left out of the inline stream
        # 2. a small READ before a large one: a Write chunk for both (nfsd refuses a Write chunk
        #    without segments with ERR_CHUNK, so none is sent for the small one)
        # 3. a READ at end of file first: nfsd puts the second READ's data in the first chunk
        # 4. a first READ that ends on a page boundary
        chunks = t.stats.write_chunks
        rdma_wrong = wrong(off_page, await two_reads(nfs, fh, off_page))
        cases = [[(5, 100), (300_000, 100_000)], [(len(data), 50_000), (0, 40_000)], [(4096, 8192), (MIB, 50_000)]]
        if bool(rdma_wrong) != bool(tcp_wrong):
            raise RuntimeError(f"two READs in a COMPOUND: RDMA {rdma_wrong or 'right'}, TCP {tcp_wrong or 'right'}")
        if not rdma_wrong:
            cases.insert(0, off_page)
        else:
            cases.pop(0)  # (a small READ first: its data ends off a page boundary too)
        for case in cases:
            if problem := wrong(case, await two_reads(nfs, fh, case)):
                raise RuntimeError(problem)
        if t.stats.write_chunks - chunks != 2 * (len(cases) + 1):
            raise RuntimeError(f"{len(cases) + 1} COMPOUNDs of two READs offered {t.stats.write_chunks - chunks} Write chunks")
        problem, rdma_three = await paged_wrong(nfs, fh)
        if problem:
            raise RuntimeError(f"RDMA: {problem}")
        if bool(rdma_three) != bool(tcp_three):
            raise RuntimeError(f"three READs of whole pages: RDMA {rdma_three or 'right'}, TCP {tcp_three or 'right'}")
        # our batched reads of those ranges (whole pages, several READs to a COMPOUND; the ranges more
        # than 64,000 bytes apart, so each is a READ of its own): right
        ranges = [(f"/{top}/f.bin", off, n) for off, n in [*off_page, (5, 100), (300_000, 100_000)]]
        calls = t.stats.calls
        got = await nfs.read_ranges(ranges)
        if got != [data[off : off + n] for _, off, n in ranges]:
            raise RuntimeError("read_ranges returned other data")
        batched = t.stats.calls - calls
        if batched >= len(ranges):
            raise RuntimeError(f"read_ranges of {len(ranges)} ranges: {batched} calls (READs not batched)")
        # a range past the end of the file: its READ comes back short, and the READ after it in the
        # COMPOUND (of a range further on, far apart: the ranges go sorted) goes again
        at_end = [(f"/{top}/f.bin", len(data) - 10, 5000), *ranges, (f"/{top}/f.bin", len(data) + 100_000, 10)]
        if await nfs.read_ranges(at_end) != [data[off : off + n] for _, off, n in at_end]:
            raise RuntimeError("read_ranges with a READ past the end before another returned other data")
        replies = t.stats.reply_chunks
        if await nfs.readlink(f"/{top}/ln") != target or t.stats.reply_chunks == replies:
            raise RuntimeError("a 1.5 KB READLINK did not come back through a Reply chunk")
        got2: list[bytes] = []

        async def one(f: Any) -> None:
            got2.append(await f.pread(0, len(data)))

        # one open: parallel OPENs of one file by one open-owner move its stateid on, and nfsd
        # refuses READs that carry the older seqid (NFS4ERR_OLD_STATEID)
        async with await nfs.open(f"/{top}/f.bin") as f, trio.open_nursery() as n:
            for _ in range(3):
                n.start_soon(one, f)
        if got2 != [data] * 3:
            raise RuntimeError("parallel reads returned other data")
        peak, granted = t.gate.peak_in_flight, t.gate.granted
        if peak > granted or peak > t.gate.requested:
            raise RuntimeError(f"{peak} calls outstanding with {granted} credits granted")
        await nfs.rmtree(f"/{top}")
    server = (
        f"nfsd returns two READs in a COMPOUND wrong (RDMA: {rdma_wrong}; TCP: {tcp_wrong}); "
        if rdma_wrong
        else "nfsd returns two READs in a COMPOUND right (RDMA and TCP); "
    )
    return (
        f"thresholds {th.send}/{th.recv} without our private data; {t.stats.nomsg_calls} RDMA_NOMSG "
        f"call(s); {server}two READs in one COMPOUND by two Write chunks ({len(cases) + 1} cases); "
        f"{len(paged)} COMPOUNDs of two READs of whole pages right (RDMA and TCP); three READs of whole "
        f"pages {'wrong (' + rdma_three + ')' if rdma_three else 'right'}; "
        f"read_ranges of {len(ranges)} ranges in {batched} calls, right; READLINK by a Reply chunk; "
        f"at most {peak} calls outstanding with {granted} credits granted"
    )


TRACING = Path("/sys/kernel/tracing")


POST_SEND_EVENT = "events/rpcrdma/svcrdma_post_send/enable"


def server_send_with_invalidate(enable: bool) -> Callable[[], list[int]] | None:
    """Start counting nfsd's Send With Invalidate: the kernel's ``svcrdma_post_send`` trace event
    names the rkey each reply's Send invalidates (0: a plain Send). Returns a function that gives
    the rkeys invalidated since this call, or None when the event is off and ``enable`` is false.

    Turning a trace event on patches the running kernel's text, which waits for every CPU; under
    TCG that wait has locked a guest up for good (a soft lockup that outlived the boot's budget).
    So the event is turned on only where Send With Invalidate is to be counted (a device that can
    advertise it), and a later call in the same boot reuses it."""
    if not (TRACING / "trace").exists():
        sh("mount", "-t", "tracefs", "nodev", str(TRACING))
    event = TRACING / POST_SEND_EVENT
    if event.read_text().strip() != "1":
        if not enable:
            return None
        event.write_text("1\n")
    (TRACING / "trace").write_text("")  # clear the buffer

    def rkeys() -> list[int]:
        text = (TRACING / "trace").read_text()
        keys = [int(k, 16) for k in re.findall(r"svcrdma_post_send:.*inv_rkey=(0x[0-9a-f]+)", text)]
        return [k for k in keys if k]

    return rkeys


async def client_remote_invalidation(url: str, advertise: str) -> str:
    """Remote invalidation (RFC 8797's "I" bit) against the kernel nfsd.

    nfsd replies with Send With Invalidate when we advertised it and the call named exactly one
    registration: a READ with one Write chunk, a READDIR with only a Reply chunk, a WRITE with one
    Read chunk. Our pyverbs provider registers what the peer may reach as type 2 memory windows
    (the only registrations user space can have invalidated remotely) on devices that have them;
    its counters must show each one retired once (remotely or locally, never both, never twice),
    every Send With Invalidate naming one of ours, as many as nfsd's own trace counts, and the
    registrations back to those held between calls (the send and receive buffers, the chunk
    memory kept registered) at the end. ``advertise`` "0": the same calls
    without it: no Send With Invalidate at all (our completions show none, and nfsd's trace when
    the advertised run turned it on). A device without type 2 memory windows (siw) must refuse
    to advertise it."""
    from pynfsrdma._client.api import Client
    from pynfsrdma._transport.rdma import connect_rdma, make_provider
    from pynfsrdma._transport.rdma.pyverbs_provider import PyverbsConnection
    from pynfsrdma._transport.rdma.transport import RdmaTransport

    if advertise == "1" and not make_provider("pyverbs").supports_remote_invalidation:
        try:
            t = await connect_rdma(
                SERVER, RDMA_PORT, options={"provider": "pyverbs", "remote_invalidation": "1"}
            )
        except ValueError as e:
            return f"not advertised on this device (no type 2 memory windows): {e}"
        await t.aclose()
        raise RuntimeError("remote invalidation was advertised by a provider that cannot take it")
    top = f"reminv{advertise}"
    data = block(3)[: 3 * 100_000 + 7]
    (KMOUNT / top).mkdir()
    (KMOUNT / top / "f.bin").write_bytes(data)
    os.sync()
    invalidated_by_server = server_send_with_invalidate(enable=advertise == "1")
    async with Client.connect(f"{url}&remote_invalidation={advertise}", timeout=30) as nfs:
        path = nfs.clientid.paths.paths[0]
        t = path.rpc.transport if path.rpc is not None else None
        if not isinstance(t, RdmaTransport) or not isinstance(t.conn, PyverbsConnection):
            raise RuntimeError(f"not a pyverbs RDMA transport: {t!r}")
        conn = t.conn
        if t.accepts_remote_invalidation != (advertise == "1"):
            raise RuntimeError(f"advertised {t.accepts_remote_invalidation}, asked {advertise}")
        baseline = conn.registrations  # the send and receive buffers
        if await nfs.read_file(f"/{top}/f.bin") != data:  # READs, a Write chunk each
            raise RuntimeError("READ returned other data")
        if len(await nfs.listdir(f"/{LISTING}")) != DIR_ENTRIES:  # READDIR in a Reply chunk
            raise RuntimeError("READDIR listed other entries")
        await nfs.write_file(f"/{top}/w.bin", data[:100_000])  # WRITE from a Read chunk
        left = conn.registrations
        resting = t.resting_registrations  # the send and receive buffers, the chunk memory kept
        counts = {
            "remote": conn.remote_invalidations,
            "local": conn.local_invalidations,
            "double": conn.double_invalidations,
            "unknown": conn.unknown_invalidations,
            "transport remote": t.stats.remote_invalidations,
        }
    server = invalidated_by_server() if invalidated_by_server is not None else None
    drop_caches()
    if (KMOUNT / top / "w.bin").read_bytes() != data[:100_000]:
        raise RuntimeError("the kernel client reads other data than the WRITE sent")
    sh("rm", "-rf", str(KMOUNT / top))
    if left != resting or left < baseline:
        raise RuntimeError(
            f"{left} registrations left, {resting} held between calls (send and receive buffers, "
            f"chunk memory): {counts}"
        )
    if counts["double"] or counts["unknown"]:
        raise RuntimeError(f"invalidated twice or unknown: {counts}")
    if advertise == "1":
        if counts["remote"] < 3 or counts["remote"] != counts["transport remote"]:
            raise RuntimeError(f"too few remote invalidations: {counts}")
        if server is None or len(server) != counts["remote"]:
            raise RuntimeError(f"nfsd traced {server} Sends With Invalidate, we saw {counts}")
    elif counts["remote"] or counts["transport remote"] or server:
        raise RuntimeError(f"Send With Invalidate without our advertising it: {counts}, nfsd {server}")
    traced = "event off on this device" if server is None else f"{len(server)} in nfsd's trace"
    return (
        f"advertised {advertise == '1'}: {counts['remote']} registrations invalidated by nfsd's Send With "
        f"Invalidate ({traced}), {counts['local']} locally, none twice, none "
        f"unknown; registrations back to the {resting} held between calls"
    )


async def client_remote_invalidation_both(url: str) -> str:
    """:func:`client_remote_invalidation` with it advertised, then without (one process)."""
    return " | ".join(
        [await client_remote_invalidation(url, "1"), await client_remote_invalidation(url, "0")]
    )


def nfsd_op_counts() -> list[int]:
    """How many times nfsd has run each NFSv4 operation (``proc4ops``, indexed by op number). A
    request answered from a session's reply cache runs no operation and counts none."""
    for line in Path("/proc/net/rpc/nfsd").read_text().splitlines():
        if line.startswith("proc4ops "):
            return [int(x) for x in line.split()[2:]]
    raise RuntimeError("no proc4ops line in /proc/net/rpc/nfsd")


async def client_exactly_once(url: str) -> str:
    """Exactly once against the kernel nfsd's reply cache (RFC 8881 2.10.6): the RDMA connection
    is lost after nfsd ran a RENAME (and then a WRITE) and before its reply reached us (the
    transport's ``break_at_reply``: the reply is dropped and the connection torn down). Our
    session resends the request on the same slot and sequence id over a new connection; nfsd's
    own count of the operations it ran (``proc4ops``) must go up by one for each, the RENAME must
    not fail (run twice it would: its source is gone), and the kernel client must read the data."""
    from pynfsrdma._client.api import Client
    from pynfsrdma._proto.nfs4.const import OP_RENAME, OP_WRITE
    from pynfsrdma._testbed.rdma_responder import compound_has_op
    from pynfsrdma._transport.rdma.transport import RdmaTransport

    top = "once"
    data = block(2)[: 64 * 1024 + 3]  # one WRITE, through a Read chunk
    (KMOUNT / top).mkdir()
    os.sync()
    done = []
    async with Client.connect(url, timeout=30) as nfs:
        session = nfs.clientid.session
        await nfs.write_file(f"/{top}/a", b"renamed exactly once")

        def transport() -> RdmaTransport:
            path = nfs.clientid.paths.paths[0]
            t = path.rpc.transport if path.rpc is not None else None
            if not isinstance(t, RdmaTransport):
                raise RuntimeError(f"not an RDMA transport: {t!r}")
            return t

        async def rename() -> None:
            await nfs.rename(f"/{top}/a", f"/{top}/b")

        async def write() -> None:
            await nfs.write_file(f"/{top}/w", data)

        for what, opnum, action in (("RENAME", OP_RENAME, rename), ("WRITE", OP_WRITE, write)):
            broken = transport()
            resends, replays = session.resends, session.replays
            before = nfsd_op_counts()
            broken.break_at_reply(compound_has_op(opnum))
            await action()
            ran = nfsd_op_counts()[opnum] - before[opnum]
            if ran != 1:
                raise RuntimeError(f"nfsd ran the {what} {ran} times")
            if (session.resends - resends, session.replays - replays) != (1, 1):
                raise RuntimeError(
                    f"{what}: {session.resends - resends} resends, {session.replays - replays} replays"
                )
            if transport() is broken or nfs.clientid.session is not session:
                raise RuntimeError(f"{what}: the connection was not replaced, or the session was")
            done.append(what)
    drop_caches()
    if (KMOUNT / top / "a").exists() or (KMOUNT / top / "b").read_bytes() != b"renamed exactly once":
        raise RuntimeError("the kernel client does not see the rename")
    if (KMOUNT / top / "w").read_bytes() != data:
        raise RuntimeError("the kernel client reads other data than the WRITE sent")
    for f in (KMOUNT / top).iterdir():
        f.unlink()
    (KMOUNT / top).rmdir()
    return (
        f"connection lost after nfsd ran each of {', '.join(done)}: resent on the same slot and "
        "sequence id over a new connection, answered from nfsd's reply cache (each ran once by nfsd's "
        "own count); the kernel client sees the rename and reads the data"
    )


CHILD_STEPS: dict[str, Callable[..., Any]] = {}  # filled below: steps that run in a child process


def in_child(name: str, *args: str) -> Callable[[float], str]:
    """A step run by a child process (``--child NAME ARGS``): pyverbs' blocking calls cannot be
    interrupted and a leaked RDMA resource must not poison the steps after it, so every step that
    touches RDMA or our client gets a process of its own, killed when its timeout passes."""

    def run(timeout: float) -> str:
        cmd = [sys.executable, __file__, "--mib", str(SIZE // MIB), "--child", name, *args]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # where it hangs: the kernel stacks of its threads, and (faulthandler on SIGUSR1)
            # the Python stacks, which faulthandler writes even while a C call holds the GIL
            stacks = where_blocked(p.pid)
            p.send_signal(signal.SIGUSR1)
            time.sleep(1)
            p.kill()
            out, err = p.communicate()
            print((out + err).rstrip() + "\n" + stacks, flush=True)
            raise RuntimeError(f"no result within {timeout:.0f} s (killed)") from None
        print((out + err).rstrip(), flush=True)
        lines = [ln for ln in out.splitlines() if ln.startswith(RESULT_TAG)]
        if p.returncode != 0 or not lines:
            last = (err.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"exit status {p.returncode}: {last}")
        result = json.loads(lines[-1][len(RESULT_TAG) :])
        FIGURES.update(result["figures"])
        return str(result["detail"])

    return run


RESULT_TAG = "CHILD-RESULT "


def where_blocked(pid: int) -> str:
    """The kernel's view of a process: each thread's state, wait channel and kernel stack."""
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            stat = (task / "stat").read_text().split(")")[-1].split()[0]
            wchan = (task / "wchan").read_text()
            stack = (task / "stack").read_text().strip().replace("\n", " < ")
        except OSError as e:
            lines.append(f"thread {task.name}: {e}")
            continue
        lines.append(f"thread {task.name} state {stat} wchan {wchan}: {stack}")
    return "\n".join(lines)


def child_main(name: str, args: list[str]) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # in_child asks for stacks on a hang
    fn = CHILD_STEPS[name]
    if inspect.iscoroutinefunction(fn):
        import trio

        detail = trio.run(fn, *args)
    else:
        detail = fn(*args)
    print(RESULT_TAG + json.dumps({"detail": detail, "figures": FIGURES}), flush=True)


CHILD_STEPS.update(
    raw_null_call=raw_null_call,
    client_api=client_api,
    client_roundtrip=client_roundtrip,
    private_data=private_data,
    client_trunking=client_trunking,
    client_rdma_extras=client_rdma_extras,
    client_exactly_once=client_exactly_once,
    client_remote_invalidation=client_remote_invalidation,
    client_remote_invalidation_both=client_remote_invalidation_both,
    raw_null_and_private_data=raw_null_and_private_data,
    fuse_mount=guest_fuse.fuse_mount,
    fuse_delegations=guest_fuse.fuse_delegations,
    fuse_write_delegation=guest_deleg.fuse_write_delegation,
    client_timestamp_delegation=guest_deleg.client_timestamp_delegation,
    fuse_timestamp_delegation=guest_deleg.fuse_timestamp_delegation,
    two_clients=guest_shared.two_clients,
    client_xattrs=client_xattrs,
    fuse_xattrs=guest_fuse.fuse_xattrs,
    fuse_locks=guest_fuse.fuse_locks,
    client_tls_path=guest_tls.client_tls_path,
    client_tls_refusals=guest_tls.client_tls_refusals,
    fuse_tls=guest_tls.fuse_tls,
    client_tls_trunking=guest_tls.client_tls_trunking,
    client_pnfs=guest_pnfs.client_pnfs,
    client_ff=guest_ff.client_ff,
    kernel_ff=guest_ff.kernel_ff,
    fuse_ff=guest_ff.fuse_ff,
    client_pnfs_recall=guest_pnfs.client_pnfs_recall,
    fuse_pnfs=guest_pnfs.fuse_pnfs,
    client_pnfs_restart=guest_pnfs.client_pnfs_restart,
    client_pnfs_device_error=guest_pnfs.client_pnfs_device_error,
    client_scsi=guest_scsi.client_scsi,
    client_scsi_refused=guest_scsi.client_scsi_refused,
)


def main() -> None:
    global RESULTS, SIZE, DEADLINE, NFSD_V3
    ap = argparse.ArgumentParser()
    ap.add_argument("--link", choices=("rxe", "siw"), default="rxe")
    ap.add_argument(
        "--guest",
        choices=GUESTS,
        default="bookworm",
        help="which guest this is: bookworm (Debian 12, Linux 6.1) or trixie (Debian 13, Linux 7.3 with TLS)",
    )
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--mib", type=int, default=SIZE // MIB, help="size of the figures' transfers")
    ap.add_argument("--budget", type=float, default=900, help="seconds for the whole run")
    ap.add_argument("--digest", action="store_true", help="print the test stream's sha256 and exit")
    ap.add_argument("--steps", default="", help="comma-separated step keys to run (default: all)")
    ap.add_argument(
        "--tcp-api",
        type=int,
        choices=(0, 1),
        default=1,
        help="0: leave out our client's API over TCP (a later boot of the same run: it needs no RDMA device)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("child_args", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    SIZE = args.mib * MIB
    if SIZE % BLOCK:
        ap.error(f"--mib must be a multiple of {BLOCK // MIB}")
    if args.digest:  # the host computes it (much faster than the emulated guest)
        print(stream_digest(SIZE))
        return
    if args.child:
        child_main(args.child, args.child_args)
        return
    DEADLINE = time.monotonic() + args.budget
    NFSD_V3 = args.guest == "trixie"
    RESULTS = args.results
    ONLY.update(k for k in args.steps.split(",") if k)
    link = args.link
    if link not in GUESTS[args.guest]:
        ap.error(f"the {args.guest} guest has no {link} (its links: {', '.join(GUESTS[args.guest])})")
    log(
        f"guest tests ({args.guest}) on {link}, kernel {os.uname().release}, {args.mib} MiB transfers, "
        f"budget {args.budget:.0f} s"
    )
    transfer = 60 + SIZE / MIB * 2  # seconds for one 256 MiB write+read: at least 1 MB/s
    step(f"{link}: soft RDMA device on dummy interfaces", setup_link(link), 60, required=True)
    step(f"{link}: kernel nfsd with RDMA and TCP listeners", setup_nfsd, 90, required=True)
    step(f"{link}: kernel NFS client mounts with proto=rdma", kernel_mount, 60, required=True)
    step(f"{link}: kernel client figures ({args.mib} MiB)", kernel_figures(link), transfer, key="kfig")
    expect_file = RESULTS / "expect.sha256"
    expect = expect_file.read_text().strip() if expect_file.exists() else stream_digest(SIZE)
    tcp = f"nfs://{SERVER}:{TCP_PORT}/?proto=tcp"
    rdma = f"nfs://{SERVER}:{RDMA_PORT}/?proto=rdma&provider=pyverbs"
    if args.tcp_api:
        step(f"{link}: our client API over TCP", in_child("client_api", tcp), 120, key="api-tcp")
    else:
        log(
            f"---- {link}: our client API over TCP: checked in this run's first boot (TCP needs no RDMA device)"
        )
    step(
        f"{link}: our client over TCP ({args.mib} MiB)",
        in_child("client_roundtrip", tcp, f"{link} ours-tcp", expect),
        transfer,
        key="fig-tcp",
    )
    step(
        f"{link}: a raw RPC-over-RDMA NULL call from pyverbs; RFC 8797 private data and inline thresholds",
        in_child("raw_null_and_private_data"),
        60,
        key="pdata",
    )
    step(f"{link}: our client API over RDMA", in_child("client_api", rdma), 120, key="api-rdma")
    step(
        f"{link}: our client over RDMA ({args.mib} MiB)",
        in_child("client_roundtrip", rdma, f"{link} ours-rdma", expect),
        transfer,
        key="fig-rdma",
    )
    step(
        f"{link}: no private data, RDMA_NOMSG, two READs in a COMPOUND, batched reads, credits",
        in_child("client_rdma_extras", f"{rdma}&private_data=0&credits=4", tcp),
        150,
        key="extras",
    )
    step(
        f"{link}: exactly once: connection lost after nfsd ran a RENAME and a WRITE",
        in_child("client_exactly_once", rdma),
        90,
        key="once",
    )
    step(
        f"{link}: remote invalidation, advertised and not",
        in_child("client_remote_invalidation_both", rdma),
        120,
        key="reminv",
    )
    rdma_mount = f"proto=rdma,port={RDMA_PORT},provider=pyverbs"
    step(
        f"{link}: our FUSE mount with proto=rdma, checked through the kernel client",
        in_child("fuse_mount", f"{SERVER}:/", rdma_mount, str(KMOUNT), f"fuse-rdma-{link}"),
        180,
        key="fuse",
    )
    if link == "rxe":  # (over TCP: the RDMA device plays no part, one boot shows it)
        step(
            f"{link}: our FUSE mount uses nfsd's read delegations and returns them when recalled",
            in_child("fuse_delegations", f"{SERVER}:/", f"proto=tcp,port={TCP_PORT}", str(KMOUNT), str(EXPORT)),
            150,
            key="deleg",
        )
    if link == "rxe" and args.guest == "trixie":  # (nfsd 6.6 and later grant write delegations)
        step(
            f"{link}: our FUSE mount's opens under nfsd's write delegation, CB_GETATTR, the recall",
            in_child("fuse_write_delegation", f"{SERVER}:/", f"proto=tcp,port={TCP_PORT}", str(KMOUNT)),
            150,
            key="deleg",
        )
        step(
            f"{link}: does nfsd grant a delegation with timestamps (RFC 9754) when asked",
            in_child("client_timestamp_delegation", tcp + "&vers=4.2"),
            90,
            key="deleg",
        )
        step(
            f"{link}: our FUSE mount keeps the times under nfsd's attribute delegation (RFC 9754)",
            in_child("fuse_timestamp_delegation", f"{SERVER}:/", f"vers=4.2,proto=tcp,port={TCP_PORT}", str(KMOUNT)),
            150,
            key="deleg",
        )
        for other, whom in ((str(KMOUNT), "the kernel client"), ("", "a second mount of ours")):
            step(
                f"{link}: a shared file system, our FUSE mount and {whom}: close-to-open, O_APPEND, sqlite",
                in_child("two_clients", f"{SERVER}:/", f"proto=tcp,port={TCP_PORT}", other, str(EXPORT)),
                420,
                key="shared",
            )
    if link == "rxe":
        step(
            f"{link}: file locks between our FUSE mount and the kernel client, CB_NOTIFY_LOCK, COPY",
            in_child("fuse_locks", f"{SERVER}:/", f"vers=4.2,proto=tcp,port={TCP_PORT}", str(KMOUNT)),
            180,
            key="locks",
        )
    # extended attributes: the protocol's operations, one boot shows them
    xattr_export = link == "rxe" and step(
        f"{link}: an ext4 export with extended attributes", setup_xattr_export, 90, key="xattr"
    )
    if xattr_export:
        xattr_url = f"nfs://{SERVER}:{RDMA_PORT}/xattrs?proto=rdma&provider=pyverbs&vers=4.2"
        step(
            f"{link}: extended attributes (NFSv4.2) through our API over RDMA",
            in_child("client_xattrs", xattr_url),
            90,
            key="xattr",
        )
        step(
            f"{link}: extended attributes through our FUSE mount (vers=4.2), cp -a keeps them",
            in_child("fuse_xattrs", f"{SERVER}:/xattrs", f"vers=4.2,{rdma_mount}", str(XATTR_EXPORT)),
            120,
            key="xattr",
        )
    # pNFS flexfiles: the rig's nfsd.ko with CONFIG_NFSD_FLEXFILELAYOUT (tests/vm/guest_ff.py); before
    # the block layout steps, which restart nfsd with NFSv3 off
    if args.guest == "trixie" and link == "rxe":
        ff_export = EXPORT / "ff"
        if step(f"{link}: a tmpfs exported with pnfs, nfsd with NFSv3 on (flexfiles)",
                guest_ff.setup_ff_export(ff_export), 60, key="ff"):
            step(f"{link}: our client by the flexfiles layout, the kernel client writing beside it: nothing lost",
                 in_child("client_ff", f"nfs://{SERVER}:{TCP_PORT}/ff?proto=tcp&vers=4.2", str(ff_export),
                          str(min(args.mib, 64)), str(KMOUNT.with_name("kernel-ffours")), SERVER, str(TCP_PORT)),
                 3 * transfer, key="ff")
            step(f"{link}: our FUSE mount with pnfs by the flexfiles layout, checked in nfsd's tmpfs",
                 in_child("fuse_ff", f"{SERVER}:/ff", f"proto=tcp,port={TCP_PORT},vers=4.2,pnfs", str(ff_export)),
                 360, key="ff")
            step(f"{link}: the kernel client by the flexfiles layout: NFSv3 to nfsd as data server",
                 in_child("kernel_ff", SERVER, str(TCP_PORT), str(ff_export), str(min(args.mib, 64)), str(KMOUNT)),
                 2 * transfer, key="ff")
    if args.guest == "trixie" and link == "rxe":  # pNFS block layouts: nfsd 7.3 and XFS (tests/vm/guest_pnfs.py)
        pnfs_export = EXPORT / "pnfs"
        if step(f"{link}: an XFS on a loop device exported with pnfs",
                guest_pnfs.setup_pnfs_export(pnfs_export, 320), 120, key="pnfs"):
            pnfs_url = f"nfs://{SERVER}:{TCP_PORT}/pnfs?proto=tcp"
            step(f"{link}: our client reads and writes by the block layout, checked on the server's XFS",
                 in_child("client_pnfs", pnfs_url, str(pnfs_export), str(min(args.mib, 64)), str(KMOUNT / "pnfs")),
                 2 * transfer, key="pnfs")
            step(f"{link}: a kernel client's WRITE recalls our layout, then a truncate on the server: nothing lost",
                 in_child("client_pnfs_recall", pnfs_url, str(pnfs_export), str(KMOUNT / "pnfs")), 150, key="pnfs")
            # the kernel's own block layout client beside ours (blkmapd), the anchor's figures
            step(f"{link}: the kernel client by the block layout (blkmapd), figures",
                 guest_pnfs.kernel_pnfs_figures(SERVER, TCP_PORT, min(args.mib, 64), str(pnfs_export)), transfer,
                 key="pnfs")
            step(f"{link}: our FUSE mount with pnfs, checked on the server's XFS",
                 in_child("fuse_pnfs", f"{SERVER}:/pnfs", f"proto=tcp,port={TCP_PORT},pnfs", str(pnfs_export)),
                 360, key="pnfs")
            step(f"{link}: the device fails in the middle of a write and a read: LAYOUTERROR, then the MDS",
                 in_child("client_pnfs_device_error", pnfs_url + "&vers=4.2", str(pnfs_export)), 180, key="pnfs")
            # last of the pNFS steps: nfsd restarts (twice), the steps after it find it as the set-up left it
            if step(f"{link}: nfsd restarted with nfsdcld keeping its clients (reclaims after a restart)",
                    guest_pnfs.client_tracking(str(TCP_PORT), str(RDMA_PORT)), 90, key="pnfs"):
                step(f"{link}: nfsd restarts in the middle of our transfer by the layout: nothing lost",
                     in_child("client_pnfs_restart", pnfs_url, str(pnfs_export), str(min(args.mib, 64)),
                              str(TCP_PORT), str(RDMA_PORT)), 300, key="pnfs")
    if args.guest == "trixie" and link == "rxe":  # pNFS SCSI layout: an XFS on a LIO disk (tests/vm/guest_scsi.py)
        scsi_export = EXPORT / "scsi"
        if step(f"{link}: an XFS on a LIO SCSI disk (tcm_loop) exported with pnfs",
                guest_scsi.setup_scsi_export(scsi_export, 320), 120, key="scsi"):
            step(f"{link}: the kernel client by the SCSI layout: nfsd hands it out for the LIO disk",
                 # (the kernel client's first I/O by this layout once took more than 30 s, whatever the size)
                 guest_scsi.kernel_scsi(SERVER, TCP_PORT, min(args.mib, 64)), max(transfer, 360), key="scsi")
            step(f"{link}: our client by the SCSI layout, checked through the kernel client; a recall loses nothing",
                 in_child("client_scsi", f"nfs://{SERVER}:{TCP_PORT}/scsi?proto=tcp", str(scsi_export),
                          str(min(args.mib, 64)), SERVER, str(TCP_PORT)), 2 * transfer + 120, key="scsi")
            step(f"{link}: our FUSE mount with pnfs by the SCSI layout, checked on the server's XFS",
                 in_child("fuse_pnfs", f"{SERVER}:/scsi", f"proto=tcp,port={TCP_PORT},pnfs", str(scsi_export), "scsi"),
                 360, key="scsi")
            step(f"{link}: a unit that refuses our key's registration: our I/O through nfsd, nothing lost",
                 in_child("client_scsi_refused", f"nfs://{SERVER}:{TCP_PORT}/scsi?proto=tcp", str(scsi_export)),
                 180, key="scsi")
    if args.guest == "trixie":  # RPC-with-TLS: nfsd 6.12 and later with tlshd; late, as it adds exports
        tls_ready = step(
            f"{link}: tlshd, and exports that require xprtsec=tls:mtls and mtls",
            guest_tls.setup_tlshd(EXPORT, SERVER),
            60,
            key="tls",
        )
        if tls_ready:
            for name, xprtsec in (("tls", "tls"), ("mtls", "mtls")):
                step(
                    f"{link}: the kernel client mounts /{name} with xprtsec={xprtsec}, writes and reads back",
                    guest_tls.kernel_tls_mount(SERVER, TCP_PORT, EXPORT, name, xprtsec),
                    90,
                    key="tls",
                )
            step(
                f"{link}: the exports refuse a plain mount of /tls and a tls mount of /mtls",
                guest_tls.kernel_tls_refused(SERVER, TCP_PORT),
                90,
                key="tls",
            )
            port = str(TCP_PORT)
            for name, xprtsec in (("tls", "tls"), ("mtls", "mtls")):
                step(
                    f"{link}: our client's path API on /{name} with xprtsec={xprtsec}: data, TLS 1.3, kTLS at nfsd",
                    in_child("client_tls_path", SERVER, port, str(EXPORT), name, xprtsec),
                    120,
                    key="tls",
                )
            step(
                f"{link}: our client refused, or refusing, under TLS: one line of error each",
                in_child("client_tls_refusals", SERVER, port),
                240,
                key="tls",
            )
            step(
                f"{link}: our FUSE mount with xprtsec=tls, checked through the kernel client's tls mount",
                in_child("fuse_tls", SERVER, port, str(EXPORT)),
                180,
                key="tls",
            )
            tls_mount = f"proto=tcp,port={TCP_PORT},xprtsec=tls,truststore={TLS_CA}"
            step(
                f"{link}: our FUSE mount with xprtsec=tls: nfsd's read delegation, recalled inside TLS",
                in_child("fuse_delegations", f"{SERVER}:/", tls_mount, str(KMOUNT), str(EXPORT)),
                150,
                key="tls",
            )
            step(
                f"{link}: our client trunks {SERVER} and {SERVER2} under TLS: both paths TLS",
                in_child("client_tls_trunking", SERVER, SERVER2, port),
                150,
                key="tls",
            )
            for xprtsec in ("none", "tls", "mtls"):  # the export's root takes all three
                url = guest_tls.tls_url(SERVER, TCP_PORT, "", xprtsec)
                step(
                    f"{link}: our client over TCP with xprtsec={xprtsec} ({args.mib} MiB)",
                    in_child("client_roundtrip", url, f"{link} {XPRTSEC_FIGURE}{xprtsec}", expect),
                    transfer,
                    key="tls",
                )
    # Last: this step takes down the link under the kernel client's proto=rdma mount (KMOUNT), and
    # that mount does not come back within the steps' timeouts on Linux 7.3 (tests/vm/README.md):
    # no step may use it after this one.
    trunk = f"{rdma}&addrs={SERVER2}:{RDMA_PORT}&stalltimeo=5"
    step(
        f"{link}: our client trunks two RDMA paths and fails over",
        in_child("client_trunking", trunk),
        150,
        key="trunk",
    )

    finish()


if __name__ == "__main__":
    main()
