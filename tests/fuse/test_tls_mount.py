"""The FUSE mount under RPC-with-TLS (RFC 9289): ``-o xprtsec=tls`` and ``xprtsec=mtls`` with the
trust store and the client's certificate, through the testbed's TLS front in front of the real
NFS-Ganesha. Ordinary programs write and read through the mount; every connection the mount made is a
TLS one (the front counts them); a server that will not do TLS fails the mount with one line naming
the server and what failed, and nothing stays mounted."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Mount, is_mounted
from tls_support import RunningFront

from pynfsrdma._control_socket import Connection
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

pytestmark = pytest.mark.fuse


def tls_options(certs: dict[str, Path], mode: str) -> str:
    opts = f"xprtsec={mode},truststore={certs['ca']}"
    if mode == "mtls":
        opts += f",certificate={certs['client']},private_key={certs['client.key']}"
    return opts


@pytest.mark.parametrize("mode", ["tls", "mtls"])
def test_programs_write_and_read_through_a_tls_mount(
    ganesha: Ganesha, export_path: ExportPath, tls_front: Callable[..., RunningFront], tls_certs: dict[str, Path],
    mount_url: Callable[[str, str], Mount], tmp_path: Path, mode: str,
) -> None:
    front = tls_front(ganesha, client_ca="ca" if mode == "mtls" else None)
    m = mount_url(f"nfs://127.0.0.1:{front.port}{export_path.remote}", tls_options(tls_certs, mode))
    data = os.urandom(3 * (1 << 20) + 17)
    (tmp_path / "in").write_bytes(data)
    done = subprocess.run(["sh", "-c", f"cp {tmp_path}/in {m.path}/f && cat {m.path}/f > {tmp_path}/out && "
                                       f"ls {m.path}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["f"]
    assert (tmp_path / "out").read_bytes() == data
    assert (export_path.local / "f").read_bytes() == data
    with Connection(str(m.path)) as conn:  # (pynfsrdma stats MOUNTPOINT)
        assert conn.request("stats")["paths"]
    kinds = front.kinds()
    assert kinds and set(kinds) == {"tls"}, kinds
    if mode == "mtls":
        assert {c.client_subject for c in front.connections} == {"commonName=nfs client"}


def test_a_server_without_tls_fails_the_mount_in_one_line(
    ganesha: Ganesha, export_path: ExportPath, tls_certs: dict[str, Path], tmp_path: Path
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", "mount",
                        f"nfs://127.0.0.1:{ganesha.port}{export_path.remote}", str(mnt),
                        "-o", tls_options(tls_certs, "tls")], capture_output=True, text=True, timeout=60)
    try:
        assert p.returncode != 0
        assert (f"127.0.0.1:{ganesha.port}: TLS refused: the server does not do RPC-with-TLS (authentication error "
                "(AUTH_REJECTEDCRED))") in p.stderr, p.stderr
        assert p.stderr.count("\n") == 1, p.stderr
        assert not is_mounted(mnt)
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", str(mnt)], timeout=60)


def test_mount_options_that_do_not_fit_are_refused(ganesha: Ganesha, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", "mount", f"nfs://127.0.0.1:{ganesha.port}/export",
                        str(mnt), "-o", "xprtsec=tls,proto=rdma"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and not is_mounted(mnt)
    assert p.stderr.count("\n") == 1 and ("mount option xprtsec=tls needs proto=tcp: RPC-with-TLS (RFC 9289) is for "
                                          "stream transports, not RDMA") in p.stderr, p.stderr
