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

Then our client, each in a child process of ``guest_tests.py`` (the project is imported there only):

- :func:`client_tls_path`: the path API with ``xprtsec=tls`` on ``/tls`` or ``mtls`` on ``/mtls``:
  a file written and read back, the same bytes in the server's tmpfs; our path report says TLS 1.3,
  and nfsd's end of our connection is a kTLS socket (``ss``'s ``tcp-ulp-tls``; ``/proc/net/tls_stat``).
- :func:`client_tls_refusals`: what the user sees (the CLI's one line) when the server or its
  certificate is refused, or the server refuses us: no TLS on an export that requires it, no client
  certificate on ``/mtls``, a trust store of another CA, an address the certificate does not name,
  a client certificate of another CA.
- :func:`fuse_tls`: our FUSE mount with ``xprtsec=tls``; the kernel client (an ``xprtsec=tls``
  mount of its own) reads what we wrote, and we read what it wrote.
- :func:`client_tls_trunking`: a second address of nfsd (``addrs=``) under TLS: both paths up, both
  TLS by our report and by nfsd's sockets; a connection cut is made again under TLS.

The module itself needs only the standard library (the guest's main process imports it).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

TLS_DIR = Path("/etc/pynfsrdma-tls")  # made by tests/vm/build-trixie
TLS_CA = TLS_DIR / "ca.pem"  # the CA that signed both certificates: a client's trust anchor
TLS_SERVER_CERT = TLS_DIR / "server.pem"  # subjectAltName IP:192.0.2.1, IP:198.51.100.1, DNS:pynfsrdma-guest
TLS_SERVER_KEY = TLS_DIR / "server.key"
TLS_CLIENT_CERT = TLS_DIR / "client.pem"  # a client's certificate and key, for xprtsec=mtls
TLS_CLIENT_KEY = TLS_DIR / "client.key"
# made in the guest: a CA nobody here trusts, and a client pair it signed
OTHER_DIR = Path("/run/pynfsrdma-tls-other")
OTHER_CA = OTHER_DIR / "ca.pem"
OTHER_CLIENT_CERT = OTHER_DIR / "client.pem"
OTHER_CLIENT_KEY = OTHER_DIR / "client.key"
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


# -- our client ---------------------------------------------------------------------------------------

CLI = [sys.executable, "-m", "pynfsrdma._cli.main"]
TLS_VERSION = "TLSv1.3"  # what our path report says of a TLS connection (ssl's name)


def tls_url(
    server: str,
    port: int,
    name: str,
    xprtsec: str,
    *,
    truststore: Path = TLS_CA,
    certificate: Path | None = None,
    private_key: Path | None = None,
    extra: str = "",
) -> str:
    """The URL of export ``/name`` with ``xprtsec`` and its files (mtls: the client's pair by default)."""
    q = f"proto=tcp&xprtsec={xprtsec}"
    if xprtsec != "none":
        q += f"&truststore={truststore}"
    if xprtsec == "mtls":
        q += f"&certificate={certificate or TLS_CLIENT_CERT}&private_key={private_key or TLS_CLIENT_KEY}"
    return f"nfs://{server}:{port}/{name}?{q}{extra}"


def server_ends(port: int, peers: set[int]) -> dict[int, str]:
    """nfsd's sockets of our connections (our local ports ``peers``), as ``ss -tniO`` shows them: the
    socket's information, which names ``tcp-ulp-tls`` (version and cipher) on a kTLS socket."""
    out = _sh("ss", "-tniOH", "state", "established", f"( sport = :{port} )").stdout
    ends = {}
    for line in out.splitlines():
        words = line.split()
        at = next((i for i, w in enumerate(words) if w.endswith(f":{port}")), None)
        if at is None or at + 1 >= len(words):
            continue
        peer = int(words[at + 1].rsplit(":", 1)[1])
        if peer in peers:
            ends[peer] = " ".join(words[at + 2 :])
    return ends


def _ktls(info: str) -> str:
    """What ``ss`` says of a kTLS socket (``tcp-ulp-tls version: 1.3 cipher: ...``), '' if plain."""
    if "tcp-ulp-tls" not in info:
        return ""
    return info[info.index("tcp-ulp-tls") :].split(" rxconf")[0]


def _our_ports(nfs: object) -> dict[str, int]:
    """The local port of each up path's connection of a path-API client, by address."""
    ports = {}
    for path in nfs.clientid.paths.paths:  # type: ignore[attr-defined]
        t = path.rpc.transport if path.rpc is not None else None
        sock = getattr(getattr(t, "tls", None), "sock", None) or getattr(t, "sock", None)
        if sock is None:
            raise RuntimeError(f"path {path.address}: no socket ({t!r})")
        try:
            ports[str(path.address)] = sock.getsockname()[1]
        except OSError as e:  # (a connection closed, not made again yet)
            raise RuntimeError(f"path {path.address}: {e}") from None
    return ports


async def client_tls_path(server: str, port: str, export: str, name: str, xprtsec: str) -> str:
    """Our path API with ``xprtsec`` on export ``/name``: a file of a few MiB written and read back,
    the server's tmpfs holds the same bytes; our path report says TLS 1.3, and nfsd's end of our
    connection is a kTLS socket (``ss``), counted in ``/proc/net/tls_stat``."""
    from pynfsrdma._client.api import Client

    data = _pattern(4 * (1 << 20) + 1001)
    target = f"ours-{xprtsec}.bin"
    before = tls_sockets()
    async with Client.connect(tls_url(server, int(port), name, xprtsec), timeout=30) as nfs:
        await nfs.write_file(f"/{target}", data)
        back = await nfs.read_file(f"/{target}")
        reports = [p.snapshot() for p in nfs.clientid.paths.paths]
        ports = _our_ports(nfs)
        ends = server_ends(int(port), set(ports.values()))
    after = tls_sockets()
    if back != data:
        raise RuntimeError(f"read back {len(back)} bytes that differ from the {len(data)} written")
    if (Path(export) / name / target).read_bytes() != data:
        raise RuntimeError("the server's file differs from what our client wrote")
    tls = [r["tls"] for r in reports]
    if tls != [TLS_VERSION]:
        raise RuntimeError(f"our path report says tls {tls}, not [{TLS_VERSION!r}]")
    ktls = {p: _ktls(ends.get(p, "")) for p in ports.values()}
    if not all(ktls.values()):
        raise RuntimeError(f"nfsd's end of our connection is not a kTLS socket: {ends} (our ports {ports})")
    new = {k: after[k] - before.get(k, 0) for k in ("TlsTxSw", "TlsRxSw")}
    if new["TlsTxSw"] < 1 or new["TlsRxSw"] < 1:
        raise RuntimeError(f"no kTLS socket added on the server: {new} new in /proc/net/tls_stat")
    (Path(export) / name / target).unlink()
    return (
        f"{len(data)} bytes written to /{name} with xprtsec={xprtsec} and read back, the same in the "
        f"server's tmpfs; our path: tls {tls[0]}; nfsd's end: {next(iter(ktls.values()))}; "
        f"tls_stat +{new['TlsTxSw']} tx, +{new['TlsRxSw']} rx"
    )


def make_other_ca() -> None:
    """A CA the server does not trust (and our trust store does not hold), and a client pair it signed."""
    if OTHER_CLIENT_KEY.exists():
        return
    OTHER_DIR.mkdir(parents=True, exist_ok=True)
    d = str(OTHER_DIR)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _sh("openssl", "req", "-x509", *ec, "-days", "30", "-subj", "/CN=another CA",
        "-keyout", f"{d}/ca.key", "-out", str(OTHER_CA))  # fmt: skip
    _sh("openssl", "req", *ec, "-subj", "/CN=a client of another CA", "-keyout", str(OTHER_CLIENT_KEY),
        "-out", f"{d}/client.csr")  # fmt: skip
    _sh("openssl", "x509", "-req", "-in", f"{d}/client.csr", "-CA", str(OTHER_CA), "-CAkey", f"{d}/ca.key",
        "-CAcreateserial", "-days", "30", "-out", str(OTHER_CLIENT_CERT))  # fmt: skip


def client_tls_refusals(server: str, port: str) -> str:
    """What the user sees when TLS is refused either way, against nfsd with tlshd: ``pynfsrdma ls``
    exits non-zero with one line on stderr, this line, naming the server and what failed."""
    make_other_ca()
    p = int(port)
    wrongsec = (
        "the server refused sec=sys, which it names itself: the export wants more transport security than"
    )
    cases = [
        (
            "no TLS on /tls (xprtsec=tls:mtls)",
            tls_url(server, p, "tls", "none"),
            f"{server}:{port}:/tls: {wrongsec} xprtsec=none (RPC-with-TLS: xprtsec=tls or mtls) (NFS4ERR_WRONGSEC)",
        ),
        (
            "tls on /mtls (xprtsec=mtls: no client certificate)",
            tls_url(server, p, "mtls", "tls"),
            f"{server}:{port}:/mtls: {wrongsec} xprtsec=tls (RPC-with-TLS: xprtsec=mtls) (NFS4ERR_WRONGSEC)",
        ),
        (
            "a trust store of another CA",
            tls_url(server, p, "tls", "tls", truststore=OTHER_CA),
            f"{server}:{port}: TLS handshake failed: the server's certificate is not trusted "
            "(unable to get local issuer certificate)",
        ),
        (
            "an address the certificate does not name (127.0.0.1)",
            tls_url("127.0.0.1", p, "tls", "tls"),
            f"127.0.0.1:{port}: TLS handshake failed: the server's certificate is not valid for 127.0.0.1 "
            "(IP address mismatch, certificate is not valid for '127.0.0.1'.)",
        ),
        (
            "a client certificate of another CA on /mtls",
            tls_url(server, p, "mtls", "mtls", certificate=OTHER_CLIENT_CERT, private_key=OTHER_CLIENT_KEY),
            f"{server}:{port}: TLS handshake failed: the server refused the handshake (tlsv1 alert access denied)",
        ),
    ]
    seen = []
    for what, url, want in cases:
        r = _sh(*CLI, "ls", url, "--timeout", "20", timeout=90, check=False)
        if r.returncode == 0:
            raise RuntimeError(f"{what}: pynfsrdma ls succeeded: {r.stdout.strip()[:200]!r}")
        if r.stderr != f"pynfsrdma: {want}\n":
            raise RuntimeError(f"{what}: the error is not the one line {want!r}: {r.stderr.strip()[-400:]!r}")
        seen.append(f"{what}: exit {r.returncode}, {r.stderr.strip()!r}")
    return "; ".join(seen)


def fuse_tls(server: str, port: str, export: str) -> str:
    """Our FUSE mount of ``/tls`` with ``xprtsec=tls`` (the mount's own /dev/fuse channel): what it
    writes the kernel client (an ``xprtsec=tls`` mount of its own) reads, and the other way round;
    ``pynfsrdma stats`` says TLS 1.3 for the mount's path."""
    import guest_fuse

    ours = _pattern(3 * (1 << 20) + 4093)
    theirs = hashlib.shake_256(b"the kernel client").digest(1 << 20)
    mnt = Path("/run/ours-tls")
    kmnt = Path("/mnt/ktls-reader")
    kmnt.mkdir(parents=True, exist_ok=True)
    options = f"proto=tcp,port={port},channel=native,xprtsec=tls,truststore={TLS_CA}"
    with guest_fuse.mounted(f"{server}:/tls", mnt, options):
        with open(mnt / "from-fuse.bin", "wb") as f:
            f.write(ours)
            f.flush()
            os.fsync(f.fileno())
        report = guest_fuse.stats(mnt)
        tls = [p.get("tls") for p in report.get("paths", [])]
        if tls != [TLS_VERSION]:
            raise RuntimeError(f"pynfsrdma stats gives the mount's paths tls {tls}, not [{TLS_VERSION!r}]")
        _sh("mount", "-t", "nfs4", "-o", f"vers=4.2,proto=tcp,port={port},xprtsec=tls",
            f"{server}:/tls", str(kmnt), timeout=60)  # fmt: skip
        try:
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            if (kmnt / "from-fuse.bin").read_bytes() != ours:
                raise RuntimeError("the kernel client reads other data than our mount wrote")
            (kmnt / "from-kernel.bin").write_bytes(theirs)
            os.sync()
        finally:
            _sh("umount", str(kmnt), timeout=30, check=False)
        if (mnt / "from-kernel.bin").read_bytes() != theirs:
            raise RuntimeError("our mount reads other data than the kernel client wrote")
    for f in ("from-fuse.bin", "from-kernel.bin"):
        (Path(export) / "tls" / f).unlink()
    return f"{len(ours)} bytes through our mount read by the kernel client's tls mount, {len(theirs)} back; tls {tls[0]}"


async def client_tls_trunking(server: str, server2: str, port: str) -> str:
    """Trunking under TLS: nfsd's second address (``addrs=``) joins the session; both paths up, both
    TLS 1.3 by our path report and kTLS at nfsd's end (``ss``); files written and read over them.
    Then the first path's connection is cut (``ss -K`` destroys both its ends): the connection the
    path makes again is TLS too, by our report and at nfsd's end."""
    import trio

    from pynfsrdma._client.api import Client

    url = tls_url(server, int(port), "tls", "tls", extra=f"&addrs={server2}:{port}")
    data = _pattern(2 * (1 << 20) + 3)
    first = f"{server}:{port}"
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
        up = {str(p["address"]): p.get("tls") for p in paths if p["state"] == "up"}
        if len(up) != 2:
            raise RuntimeError(f"expected two paths up, got {paths}")
        if set(up.values()) != {TLS_VERSION}:
            raise RuntimeError(f"not every path is TLS by our report: {up}")
        async with trio.open_nursery() as n:  # parallel calls, for both paths
            for i in range(4):
                n.start_soon(nfs.write_file, f"/trunked-{i}.bin", data)
        for i in range(4):
            if await nfs.read_file(f"/trunked-{i}.bin") != data:
                raise RuntimeError("a file written over the trunked paths reads back other data")
        calls = {str(p["address"]): p["calls"] for p in trunking.snapshot()}
        ports = _our_ports(nfs)
        ends = server_ends(int(port), set(ports.values()))
        ktls = {a: _ktls(ends.get(p, "")) for a, p in ports.items()}
        if len(ktls) != 2 or not all(ktls.values()):
            raise RuntimeError(
                f"nfsd's ends of our connections are not all kTLS sockets: {ktls} (ss: {ends})"
            )
        # the cut: both ends of the first path's connection destroyed; reads go on meanwhile
        cut = ports[first]
        _sh("ss", "-K", "state", "established", f"( sport = :{cut} or dport = :{cut} )")
        again: dict[str, int] = {}
        with trio.move_on_after(60):
            while True:
                if await nfs.read_file("/trunked-0.bin") != data:
                    raise RuntimeError("a read after the cut returned other data")
                states = {str(p["address"]): p["state"] for p in trunking.snapshot()}
                try:
                    again = _our_ports(nfs)
                except RuntimeError:  # (a path without a connection yet)
                    again = {}
                if again.get(first, cut) != cut and set(states.values()) == {"up"}:
                    break
                await trio.sleep(0.5)
        if again.get(first, cut) == cut:
            raise RuntimeError(
                f"the cut path {first} did not connect again within 60 s: {trunking.snapshot()}"
            )
        after = {str(p["address"]): p.get("tls") for p in trunking.snapshot()}
        ends = server_ends(int(port), set(again.values()))
        for i in range(4):
            await nfs.remove(f"/trunked-{i}.bin")
    if set(after.values()) != {TLS_VERSION}:
        raise RuntimeError(f"after the cut, not every path is TLS by our report: {after}")
    reconnected = _ktls(ends.get(again[first], ""))
    if not reconnected:
        raise RuntimeError(
            f"nfsd's end of the connection made again is not a kTLS socket: {ends} (ours {again})"
        )
    return (
        f"paths up {sorted(up)}, each tls {TLS_VERSION} and kTLS at nfsd's end ({ktls}); calls {calls}; "
        f"{first}'s connection (port {cut}) cut: made again from port {again[first]}, tls {after[first]}, "
        f"nfsd's end {reconnected}"
    )
