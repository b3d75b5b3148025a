"""RPC-with-TLS (RFC 9289) on the server side, in the Debian 13 guest of the real-RDMA rig.

The kernel's nfsd hands each TLS handshake to ``tlshd`` (ktls-utils) through the kernel's
handshake netlink service, and so does the kernel's NFS client; after the handshake the socket
carries kTLS records. ``tests/vm/build-trixie`` made a CA, the server's certificate (for
192.0.2.1, 198.51.100.1 and ``pynfsrdma-guest``) and a client certificate with ``openssl``; they
sit at the fixed paths below, so a client step can use the CA and the client's pair.

- :func:`setup_tlshd`: ``tlshd`` with the server's pair (and the CA, to check a client's
  certificate) and the client's pair (and the CA, to check the server's), then two more tmpfs
  exports inside the pseudo root: ``/tls`` (``xprtsec=tls:mtls``) and ``/mtls`` (``xprtsec=mtls``).
- :func:`kernel_tls_mount`: the kernel client mounts an export with ``xprtsec=tls`` or ``mtls``,
  writes a file, reads it back after the page cache is dropped, and the server's tmpfs holds the
  same bytes; ``/proc/net/tls_stat`` counts the kTLS sockets it opened (the client's and nfsd's).
- :func:`kernel_tls_refused`: what each export refuses (a plain mount of ``/tls``, a ``tls``
  mount of ``/mtls``) does not mount.

Only the standard library: this runs in the guest's main process (no RDMA, no client of ours).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

TLS_DIR = Path("/etc/pynfsrdma-tls")  # made by tests/vm/build-trixie
TLS_CA = TLS_DIR / "ca.pem"  # the CA that signed both certificates: a client's trust anchor
TLS_SERVER_CERT = TLS_DIR / "server.pem"  # subjectAltName IP:192.0.2.1, IP:198.51.100.1, DNS:pynfsrdma-guest
TLS_SERVER_KEY = TLS_DIR / "server.key"
TLS_CLIENT_CERT = TLS_DIR / "client.pem"  # a client's certificate and key, for xprtsec=mtls
TLS_CLIENT_KEY = TLS_DIR / "client.key"
TLSHD_CONF = Path("/run/tlshd.conf")
TLSHD_LOG = Path("/run/tlshd.log")
# the exports inside the pseudo root (fsid=0 at /srv/export) and the policies they accept
TLS_EXPORTS = {"tls": "tls:mtls", "mtls": "mtls"}
SIZE = 3 * (1 << 20) + 517  # the file each mount writes: several WRITEs, an odd tail


def _sh(*cmd: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess[str]:
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = (p.stdout + p.stderr).strip()
    if out:
        print(out, flush=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {out[-300:]}")
    return p


def tls_sockets() -> dict[str, int]:
    """The kernel's kTLS counters (``/proc/net/tls_stat``): TlsTxSw and TlsRxSw count the sockets
    that got software kTLS keys for sending and receiving since the module was loaded."""
    counters = {}
    for line in Path("/proc/net/tls_stat").read_text().splitlines():
        name, value = line.split()
        counters[name] = int(value)
    return counters


def setup_tlshd(export: Path, server: str) -> Callable[[float], str]:
    def run(timeout: float) -> str:
        _sh("modprobe", "tls")
        TLSHD_CONF.write_text(
            "[debug]\nloglevel=1\ntls=0\nnl=0\n\n[authenticate]\n\n"
            f"[authenticate.client]\nx509.truststore={TLS_CA}\n"
            f"x509.certificate={TLS_CLIENT_CERT}\nx509.private_key={TLS_CLIENT_KEY}\n\n"
            f"[authenticate.server]\nx509.truststore={TLS_CA}\n"
            f"x509.certificate={TLS_SERVER_CERT}\nx509.private_key={TLS_SERVER_KEY}\n"
        )
        with open(TLSHD_LOG, "a") as log:  # tlshd keeps its own copy of the descriptor
            subprocess.Popen(["tlshd", "-s", "-c", str(TLSHD_CONF)], stdout=log, stderr=log)
        lines = []
        for name, policy in TLS_EXPORTS.items():
            path = export / name
            path.mkdir(exist_ok=True)
            _sh("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(path))
            path.chmod(0o777)
            lines.append(
                f"{path} *(rw,fsid={len(lines) + 10},insecure,no_root_squash,no_subtree_check,xprtsec={policy})\n"
            )
        with open("/etc/exports", "a") as f:
            f.writelines(lines)
        _sh("exportfs", "-ra")
        exported = _sh("exportfs", "-v").stdout
        for name, policy in TLS_EXPORTS.items():
            if f"xprtsec={policy}" not in exported:
                raise RuntimeError(f"exportfs -v does not show /{name} with xprtsec={policy}: {exported!r}")
        time.sleep(0.5)
        tlshd = _sh("pidof", "tlshd", check=False).stdout.strip()
        if not tlshd:
            raise RuntimeError(f"tlshd is not running: {TLSHD_LOG.read_text()[-300:]!r}")
        return f"tlshd (pid {tlshd}); exports " + ", ".join(
            f"/{n} xprtsec={p}" for n, p in TLS_EXPORTS.items()
        )

    return run


def _pattern(size: int) -> bytes:
    return hashlib.shake_256(b"pynfsrdma rpc-with-tls").digest(size)


def kernel_tls_mount(server: str, port: int, export: Path, name: str, xprtsec: str) -> Callable[[float], str]:
    """Mount ``server:/name`` with ``xprtsec``, write a file, read it back uncached, compare with
    the server's copy; the mount must say ``xprtsec=`` in /proc/mounts and the kTLS counters must
    show two new sockets (the client's and nfsd's ends of the connection)."""

    def run(timeout: float) -> str:
        mnt = Path(f"/mnt/ktls-{xprtsec}-{name}")
        mnt.mkdir(parents=True, exist_ok=True)
        before = tls_sockets()
        t0 = time.monotonic()
        _sh(
            "mount", "-t", "nfs4", "-o", f"vers=4.2,proto=tcp,port={port},xprtsec={xprtsec}",
            f"{server}:/{name}", str(mnt), timeout=timeout / 2,
        )  # fmt: skip
        mounted = time.monotonic() - t0
        try:
            line = next((ln for ln in Path("/proc/mounts").read_text().splitlines() if f" {mnt} " in ln), "")
            if f"xprtsec={xprtsec}" not in line:
                raise RuntimeError(f"/proc/mounts does not show xprtsec={xprtsec}: {line!r}")
            data = _pattern(SIZE)
            target = mnt / f"written-under-{xprtsec}"
            target.write_bytes(data)
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            back = target.read_bytes()
            if back != data:
                raise RuntimeError(f"read back {len(back)} bytes that differ from the {len(data)} written")
            on_server = (export / name / target.name).read_bytes()
            if on_server != data:
                raise RuntimeError("the server's file differs from what the client wrote")
            after = tls_sockets()
            new = {k: after[k] - before.get(k, 0) for k in ("TlsTxSw", "TlsRxSw")}
            if new["TlsTxSw"] < 2 or new["TlsRxSw"] < 2:
                raise RuntimeError(f"no kTLS on both ends of the connection: {new} new in /proc/net/tls_stat")
        finally:
            _sh("umount", str(mnt), timeout=30, check=False)
        return (
            f"mounted {server}:/{name} with xprtsec={xprtsec} in {mounted:.1f} s; {SIZE} bytes written and "
            f"read back uncached, the same on the server; kTLS sockets: +{new['TlsTxSw']} tx, +{new['TlsRxSw']} rx"
        )

    return run


def kernel_tls_refused(server: str, port: int) -> Callable[[float], str]:
    """What the exports' policies refuse does not mount: a plain mount of /tls, a tls one of /mtls."""

    def run(timeout: float) -> str:
        seen = []
        for name, xprtsec in (("tls", "none"), ("mtls", "tls")):
            mnt = Path(f"/mnt/ktls-refused-{name}")
            mnt.mkdir(parents=True, exist_ok=True)
            p = _sh(
                "mount", "-t", "nfs4", "-o", f"vers=4.2,proto=tcp,port={port},xprtsec={xprtsec},retry=0",
                f"{server}:/{name}", str(mnt), timeout=timeout / 3, check=False,
            )  # fmt: skip
            if p.returncode == 0:
                _sh("umount", str(mnt), check=False)
                raise RuntimeError(f"/{name} (xprtsec={TLS_EXPORTS[name]}) mounted with xprtsec={xprtsec}")
            why = (p.stdout + p.stderr).strip().splitlines()
            seen.append(f"/{name} with xprtsec={xprtsec}: {why[-1] if why else f'exit {p.returncode}'}")
        return "refused: " + "; ".join(seen)

    return run
