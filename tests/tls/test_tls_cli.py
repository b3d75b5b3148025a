"""RPC-with-TLS from the command line: the URL's xprtsec= (and its files) carry put, cat, ls and get
through the testbed's TLS front, every connection under TLS; a server that will not do TLS, or a
certificate that fails, is one line on stderr naming the server and what failed, and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tls_support import RunningFront, tls_query

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", *args], capture_output=True, text=True,
                          timeout=60)


def test_put_cat_ls_get_under_tls_and_mtls(ganesha: Ganesha, export_path: ExportPath,
                                           tls_front: Callable[..., RunningFront], tls_certs: dict[str, Path],
                                           tmp_path: Path) -> None:
    data = os.urandom(2 * (1 << 20) + 5)
    (tmp_path / "in").write_bytes(data)
    for mode, front in (("tls", tls_front(ganesha)), ("mtls", tls_front(ganesha, client_ca="ca"))):
        q = tls_query(tls_certs, mode, client="client" if mode == "mtls" else None)
        url = f"nfs://127.0.0.1:{front.port}{export_path.remote}/{mode}.bin?{q}"
        p = run("put", str(tmp_path / "in"), url)
        assert p.returncode == 0, p.stderr
        p = run("ls", f"nfs://127.0.0.1:{front.port}{export_path.remote}?{q}")
        assert p.returncode == 0 and f"{mode}.bin" in p.stdout.split(), p.stderr
        p = run("get", url, str(tmp_path / f"{mode}.out"))
        assert p.returncode == 0, p.stderr
        assert (tmp_path / f"{mode}.out").read_bytes() == data
        assert (export_path.local / f"{mode}.bin").read_bytes() == data
        kinds = front.kinds()
        assert len(kinds) >= 3 and set(kinds) == {"tls"}, kinds


def test_refusals_are_one_line_on_stderr(ganesha: Ganesha, export_path: ExportPath,
                                         tls_front: Callable[..., RunningFront], tls_certs: dict[str, Path]) -> None:
    p = run("ls", f"nfs://127.0.0.1:{ganesha.port}{export_path.remote}?{tls_query(tls_certs)}")
    assert p.returncode != 0
    assert p.stderr == (f"pynfsrdma: 127.0.0.1:{ganesha.port}: TLS refused: the server does not do RPC-with-TLS "
                        "(authentication error (AUTH_REJECTEDCRED))\n")
    rogue = tls_front(ganesha, server_cert="rogue")
    p = run("ls", f"nfs://127.0.0.1:{rogue.port}{export_path.remote}?{tls_query(tls_certs)}")
    assert p.returncode != 0
    assert p.stderr == (f"pynfsrdma: 127.0.0.1:{rogue.port}: TLS handshake failed: the server's certificate is not "
                        "trusted (unable to get local issuer certificate)\n")
    assert rogue.kinds() == ["failed"]
    p = run("ls", f"nfs://127.0.0.1:{rogue.port}{export_path.remote}?xprtsec=tls&proto=rdma")
    assert p.returncode != 0 and p.stderr.count("\n") == 1
    assert "xprtsec=tls needs proto=tcp: RPC-with-TLS (RFC 9289) is for stream transports, not RDMA" in p.stderr
