"""The FUSE mount's steps in the guest of the real-RDMA rig (run by ``guest_tests.py`` in a child).

Against the kernel's nfsd, cross-checked through the kernel's own NFS client mounted in the same
guest (``kmount``):

- :func:`fuse_mount`: ``pynfsrdma mount`` with ``proto=rdma`` (or tcp): files written through our
  mount read back identical through the kernel client and the other way round, a directory, a
  symlink, a rename, a listing, and ``pynfsrdma stats`` shows the transport the mount runs on.
- :func:`fuse_delegations`: the nfsd grants read delegations (NFS-Ganesha's VFS backend grants none),
  so this is where our use of them is shown: opens under a delegation send no OPEN and no CLOSE
  (counted by ``pynfsrdma stats``); when the kernel client writes the file, nfsd recalls the
  delegation (CB_RECALL), we return it, and our next read sees the new data.

Only the standard library and the project (through its CLI) are used; each step mounts and
unmounts its own mount point.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "pynfsrdma._cli.main"]
FILES = 60  # small files written through the mount (each a few COMPOUNDs: slow under emulation)


def _run(*cmd: str, timeout: float = 60) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {(p.stdout + p.stderr).strip()[-400:]}")
    return p.stdout


def _drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


@contextmanager
def mounted(url: str, mountpoint: Path, options: str) -> Iterator[Path]:
    """``pynfsrdma mount URL MOUNTPOINT -o OPTIONS`` (it returns once the mount is up), unmounted after."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    if not Path("/dev/fuse").exists():
        _run("modprobe", "fuse")
    _run(*CLI, "mount", url, str(mountpoint), "-o", options, timeout=90)
    try:
        yield mountpoint
    finally:
        _run(*CLI, "umount", str(mountpoint), timeout=60)


def stats(mountpoint: Path) -> dict[str, Any]:
    """What ``pynfsrdma stats MOUNTPOINT --json`` prints, asked in-process over the mount's control
    socket (a CLI process per question costs seconds under emulation)."""
    from pynfsrdma._control_socket import Connection

    with Connection(str(mountpoint)) as conn:
        out: dict[str, Any] = conn.request("stats")
    return out


def _pattern(n: int, salt: bytes) -> bytes:
    unit = salt + bytes(range(256))
    return (unit * (n // len(unit) + 1))[:n]


def fuse_mount(url: str, options: str, kmount: str, top: str) -> str:
    """Our FUSE mount against nfsd, every result checked through the kernel's client."""
    mnt = Path(f"/run/ours-{top}")
    kdir = Path(kmount) / top
    kdir.mkdir(parents=True, exist_ok=True)
    theirs = _pattern(2 * (1 << 20) + 17, b"kernel")
    (kdir / "from-kernel.bin").write_bytes(theirs)
    os.sync()
    ours = _pattern(3 * (1 << 20) + 4093, b"pynfsrdma")
    with mounted(url, mnt, options):
        d = mnt / top
        if (d / "from-kernel.bin").read_bytes() != theirs:
            raise RuntimeError("our mount reads other data than the kernel client wrote")
        with open(d / "from-us.bin", "wb") as f:
            f.write(ours)
            f.flush()
            os.fsync(f.fileno())
        (d / "sub").mkdir()
        for i in range(FILES):
            (d / "sub" / f"entry-{i:04d}").write_bytes(b"%d\n" % i)
        os.symlink("from-us.bin", d / "link")
        os.rename(d / "sub" / "entry-0000", d / "renamed")
        names = sorted(os.listdir(d / "sub"))
        if len(names) != FILES - 1 or names[0] != "entry-0001":
            raise RuntimeError(f"listing of sub: {len(names)} names, first {names[:1]}")
        if os.readlink(d / "link") != "from-us.bin" or (d / "link").read_bytes() != ours:
            raise RuntimeError("symlink through our mount")
        report = stats(mnt)
        kinds = {str(p.get("transport")) for p in report.get("paths", [])}
        want = "rdma" if "proto=rdma" in options else "tcp"
        if kinds != {want}:
            raise RuntimeError(f"the mount runs on {sorted(kinds)}, not {want}")
        _drop_caches()
        if (kdir / "from-us.bin").read_bytes() != ours:
            raise RuntimeError("the kernel client reads other data than our mount wrote")
        if os.readlink(kdir / "link") != "from-us.bin" or (kdir / "renamed").read_bytes() != b"0\n":
            raise RuntimeError("the kernel client sees another symlink or rename")
        if len(os.listdir(kdir / "sub")) != FILES - 1:
            raise RuntimeError("the kernel client lists another directory")
    return f"{len(ours)} bytes each way, {FILES} files, symlink, rename; over {want}"


def fuse_xattrs(url: str, options: str, server_dir: str) -> str:
    """Extended attributes through our mount (vers=4.2) of nfsd's ext4 export, checked on that ext4
    itself (``server_dir``): os.setxattr/getxattr/listxattr/removexattr, ENOTSUP outside "user.",
    and ``cp -a`` copying them to another file of the mount."""
    import errno

    mnt = Path("/run/ours-xattrs")
    local = Path(server_dir)
    with mounted(url, mnt, options):
        f = mnt / "fuse.txt"
        f.write_bytes(b"data")
        os.setxattr(f, "user.k", b"v1")
        os.setxattr(f, "user.k2", b"x" * 5000)
        if os.getxattr(local / "fuse.txt", "user.k") != b"v1":
            raise RuntimeError("the server's file does not hold what we set")
        os.setxattr(local / "fuse.txt", "user.s", b"from the server")
        names = sorted(os.listxattr(f))
        if names != ["user.k", "user.k2", "user.s"]:
            raise RuntimeError(f"listxattr through the mount: {names}")
        if os.getxattr(f, "user.s") != b"from the server" or os.getxattr(f, "user.k2") != b"x" * 5000:
            raise RuntimeError("getxattr through the mount")
        try:
            os.setxattr(f, "trusted.k", b"v")
        except OSError as e:
            if e.errno != errno.ENOTSUP:
                raise
        else:
            raise RuntimeError("a trusted.* attribute was accepted (NFS carries user.* only)")
        _run("cp", "-a", str(f), str(mnt / "copy.txt"))
        if os.getxattr(local / "copy.txt", "user.k") != b"v1":
            raise RuntimeError("cp -a through the mount did not copy the extended attributes")
        os.removexattr(f, "user.k")
        if "user.k" in os.listxattr(local / "fuse.txt"):
            raise RuntimeError("removexattr through the mount left the attribute")
        try:
            os.getxattr(f, "user.k")
        except OSError as e:
            if e.errno != errno.ENODATA:
                raise
        else:
            raise RuntimeError("a removed attribute is still read through the mount")
    return "set/get/list/remove through the mount, seen on nfsd's ext4; trusted.* ENOTSUP; cp -a keeps them"


def nfsd_delegations(name: str) -> list[str]:
    """The delegations nfsd lists on a file of this name (``/proc/fs/nfsd/clients/*/states``), each
    as "ACCESS by CLIENT": ``r`` or ``w``, and the client's name from its ``info``."""
    held = []
    for client in Path("/proc/fs/nfsd/clients").glob("*"):
        try:
            states = (client / "states").read_text()
            info = (client / "info").read_text()
        except OSError:
            continue
        who = re.search(r'name: "([^"]*)"', info)
        for line in states.splitlines():
            access = re.search(r"type: deleg, access: (\w+)", line)
            if access and re.search(rf'filename: "(.*/)?{re.escape(name)}"', line):
                held.append(f"{access.group(1)} by {who.group(1) if who else client.name}")
    return held


def fuse_delegations(url: str, options: str, kmount: str, export: str) -> str:
    """Read delegations from nfsd: local opens while held, returned on recall, new data seen after.

    The file is written in nfsd's own file system (``export``), not through the kernel client:
    nfsd 6.6 and later grant the kernel client a write delegation when it opens a file to write,
    our open then makes nfsd recall it, and nfsd grants no delegation on a file it recalled one of
    for the next 30 to 60 s (``delegation_blocked()`` in fs/nfsd/nfs4state.c; tests/vm/README.md).
    What the kernel client got for its own write is reported."""
    mnt = Path("/run/ours-deleg")
    kdir = Path(kmount) / "deleg"
    kdir.mkdir(parents=True, exist_ok=True)
    probe = kdir / f"kernel-written-{os.getpid()}"
    probe.write_bytes(b"written by the kernel client\n")
    kernel_held = nfsd_delegations(probe.name)
    first, second = b"first version\n" * 1000, b"second version, longer\n" * 1000
    sdir = Path(export) / "deleg"
    (sdir / "f").write_bytes(first)
    os.sync()
    with mounted(url, mnt, options):
        f = mnt / "deleg" / "f"
        # nfsd grants delegations once it has checked our callback channel (CB_NULL after
        # CREATE_SESSION): open until one is granted
        deadline = time.monotonic() + 30
        while True:
            if f.read_bytes() != first:
                raise RuntimeError("our mount reads other data than the server's file holds")
            d = stats(mnt)["delegations"]
            if d["held"]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no delegation granted within 30 s: {d}; nfsd lists {nfsd_delegations('f')}")
            time.sleep(1)
        listed = nfsd_delegations("f")
        if not any(x.startswith("r ") for x in listed):
            raise RuntimeError(f"our mount holds a delegation that nfsd does not list: {listed}")
        before = stats(mnt)
        for _ in range(5):
            if f.read_bytes() != first:
                raise RuntimeError("a read under the delegation returned other data")
        after = stats(mnt)
        opens = after["op_counts"].get("OPEN", 0) - before["op_counts"].get("OPEN", 0)
        closes = after["op_counts"].get("CLOSE", 0) - before["op_counts"].get("CLOSE", 0)
        local = after["delegations"]["local_opens"] - before["delegations"]["local_opens"]
        if opens or closes or local != 5:
            raise RuntimeError(f"5 opens under a delegation sent {opens} OPEN, {closes} CLOSE; {local} local")
        # another client writes the file: nfsd recalls our delegation before it lets the write go on
        t0 = time.monotonic()
        (kdir / "f").write_bytes(second)
        os.sync()
        wrote = time.monotonic() - t0
        deadline = time.monotonic() + 30
        while stats(mnt)["delegations"]["returned"] < 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the delegation was not returned: {stats(mnt)['delegations']}")
            time.sleep(0.5)
        got = f.read_bytes()
        if got != second:
            raise RuntimeError(f"after the recall our mount reads {got[:30]!r}..., not the new data")
        final = stats(mnt)["delegations"]
        if final["recalled"] < 1:
            raise RuntimeError(f"returned without a CB_RECALL: {final}")
    probe.unlink()
    return (
        f"granted {final['granted']} (nfsd listed {', '.join(listed)}), 5 opens made locally (0 OPEN, "
        f"0 CLOSE sent), recalled {final['recalled']} and returned {final['returned']} when the kernel "
        f"client wrote (its write took {wrote:.1f} s), new data read after; the kernel client's own "
        f"write open got {', '.join(kernel_held) or 'no delegation'}"
    )


LOCKER = r"""
import fcntl, sys, time
f = open(sys.argv[1], "r+b")
how = sys.argv[2]
if how == "hold":  # a write lock of the first 100 bytes, for the seconds given (or until stdin ends), then unlock
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
    print("held", flush=True)
    if sys.argv[3] == "stdin":
        sys.stdin.read()
    else:
        time.sleep(float(sys.argv[3]))
    fcntl.lockf(f, fcntl.LOCK_UN, 100, 0)
    print("released", time.monotonic(), flush=True)
    time.sleep(1)
elif how == "try":  # one F_SETLK of the first 10 bytes: "ok" or the errno
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
        print("ok", flush=True)
    except OSError as e:
        print("errno", e.errno, flush=True)
else:  # wait: F_SETLKW, and when it was granted
    fcntl.lockf(f, fcntl.LOCK_EX, 10, 0)
    print("granted", time.monotonic(), flush=True)
"""


def _locker(path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", LOCKER, str(path), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def fuse_locks(url: str, options: str, kmount: str) -> str:
    """File locks between our mount and the kernel's client of nfsd: each side's fcntl lock stops
    the other's (LOCK, LOCKT against the kernel client's own locks), and a waiter on our mount is
    woken by nfsd's CB_NOTIFY_LOCK when the kernel client lets go, without waiting for its next poll.
    With vers=4.2, copy_file_range on our mount is nfsd's COPY (the data stays on the server)."""
    mnt = Path("/run/ours-locks")
    kfile = Path(kmount) / "locked"
    kfile.write_bytes(b"x" * 1000)
    with mounted(url, mnt, options):
        ours = mnt / "locked"
        holder = _locker(kfile, "hold", "stdin")  # the kernel client holds it until told
        assert holder.stdout is not None and holder.stdin is not None
        if holder.stdout.readline().strip() != "held":
            raise RuntimeError("the kernel client did not take its lock")
        tried = _run(sys.executable, "-c", LOCKER, str(ours), "try").strip()
        holder.stdin.close()
        if tried != "errno 11":
            raise RuntimeError(f"our mount was not refused the kernel client's lock: {tried}")
        holder.wait(timeout=60)
        held = _locker(ours, "hold", "8")  # now ours holds it; a waiter on our mount queues behind
        assert held.stdout is not None
        if held.stdout.readline().strip() != "held":
            raise RuntimeError("our mount did not get the lock")
        tried = _run(sys.executable, "-c", LOCKER, str(kfile), "try").strip()
        if tried != "errno 11":
            raise RuntimeError(f"the kernel client was not refused our lock: {tried}")
        held.wait(timeout=60)
        holder = _locker(kfile, "hold", "6")
        assert holder.stdout is not None
        holder.stdout.readline()
        waiter = _locker(ours, "wait")
        out, _ = holder.communicate(timeout=90)
        released = float(out.split()[1])
        wout, _ = waiter.communicate(timeout=90)
        granted = float(wout.split()[1])
        notified = stats(mnt).get("locks", {}).get("notified", 0)
        if notified < 1:
            raise RuntimeError("no CB_NOTIFY_LOCK reached the waiter")
        # copy_file_range: COPY on nfsd
        src = mnt / "copy-src"
        src.write_bytes(_pattern(3 << 20, b"copy"))
        fin, fout = os.open(src, os.O_RDONLY), os.open(mnt / "copy-dst", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            done = 0
            while done < 3 << 20:
                n = os.copy_file_range(fin, fout, (3 << 20) - done)
                if n <= 0:
                    raise RuntimeError("copy_file_range stopped short")
                done += n
        finally:
            os.close(fin)
            os.close(fout)
        calls = {k: v["calls"] for k, v in stats(mnt)["operations"].items()}
        if not calls.get("COPY"):
            raise RuntimeError(f"copy_file_range sent no COPY: {sorted(calls)}")
        if "READ_PLUS" in calls or "IO_ADVISE" in calls:
            raise RuntimeError("READ_PLUS or IO_ADVISE was sent")
    _drop_caches()
    if (Path(kmount) / "copy-dst").read_bytes() != _pattern(3 << 20, b"copy"):
        raise RuntimeError("the kernel client reads another copy")
    return (
        f"locks refused both ways; our waiter granted {granted - released:.2f} s after the kernel client's "
        f"unlock ({notified} CB_NOTIFY_LOCK); 3 MiB copied by COPY"
    )
