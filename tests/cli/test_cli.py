"""The ``pynfsrdma`` command as a person and a script use it: real processes, a real server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(
        [sys.executable, "-m", "pynfsrdma._cli.main", *args],
        capture_output=True, text=True, timeout=timeout,
    )
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}: {p.stderr}")
    return p


def test_put_ls_stat_get_cat_cp_mv_rm(base: str, export_path: ExportPath, tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    src.write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    run("mkdir", f"{base}/d")
    out = json.loads(run("put", "--json", str(src), f"{base}/d/").stdout)
    assert out == {"version": 1, "remote": f"{export_path.remote}/d/in.bin", "local": str(src),
                   "bytes": src.stat().st_size, "files": 1}
    assert (export_path.local / "d/in.bin").read_bytes() == src.read_bytes()

    assert run("ls", f"{base}/d").stdout.split() == ["in.bin"]
    long = run("ls", "-l", f"{base}/d").stdout
    assert long.startswith("total ") and "\n-rw-" in long and "in.bin" in long and str(src.stat().st_size) in long
    listing = json.loads(run("ls", "--json", f"{base}/d").stdout)
    assert [(e["name"], e["size"], e["type"]) for e in listing["entries"]] == [("in.bin", src.stat().st_size, "file")]
    st = json.loads(run("stat", "--json", f"{base}/d/in.bin").stdout)
    assert st["size"] == src.stat().st_size and st["type"] == "file"

    back = tmp_path / "back.bin"
    run("get", f"{base}/d/in.bin", str(back))
    assert back.read_bytes() == src.read_bytes()
    (export_path.local / "d/small").write_bytes(b"cat me\n")
    assert run("cat", f"{base}/d/small").stdout == "cat me\n"

    run("cp", f"{base}/d/in.bin", f"{base}/d/copy.bin")  # within the server
    assert (export_path.local / "d/copy.bin").read_bytes() == src.read_bytes()
    run("cp", str(src), f"{base}/d/up.bin")  # local to remote
    run("cp", f"{base}/d/up.bin", str(tmp_path / "down.bin"))  # remote to local
    assert (tmp_path / "down.bin").read_bytes() == src.read_bytes()

    run("mv", f"{base}/d/copy.bin", f"{base}/d/moved.bin")
    assert sorted(os.listdir(export_path.local / "d")) == ["in.bin", "moved.bin", "small", "up.bin"]
    run("mkdir", "-p", f"{base}/x/y/z")
    assert (export_path.local / "x/y/z").is_dir()
    p = run("rm", f"{base}/x", check=False)
    assert p.returncode == 1 and "Is a directory" in p.stderr
    run("rm", "-r", f"{base}/x")
    run("rm", f"{base}/d/moved.bin")
    assert not (export_path.local / "x").exists() and not (export_path.local / "d/moved.bin").exists()

    df = json.loads(run("df", "--json", base).stdout)
    assert df["size"] > 0 and df["avail"] > 0


def test_errors_are_one_line_with_a_nonzero_exit(base: str, ganesha: Ganesha, export_path: ExportPath) -> None:
    p = run("stat", f"{base}/missing", check=False)
    assert p.returncode == 1
    assert p.stderr == (f"pynfsrdma: {ganesha.host}:{ganesha.port}:{export_path.remote}/missing: "
                        "No such file or directory (NFS4ERR_NOENT)\n")
    p = run("ls", "ftp://x/y", check=False)
    assert p.returncode == 2 and p.stderr.startswith("pynfsrdma: ") and "nfs://" in p.stderr
    p = run("put", "/no/such/local/file", f"{base}/f", check=False)
    assert p.returncode == 1 and "/no/such/local/file" in p.stderr


def test_an_absent_server_is_reported_within_seconds() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = run("ls", f"nfs://127.0.0.1:{port}/export", check=False, timeout=15)
    assert p.returncode == 1
    assert p.stderr == f"pynfsrdma: 127.0.0.1:{port}: connection refused\n"


def test_a_silent_server_is_reported_within_the_timeout() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        port = listener.getsockname()[1]
        p = run("ls", "--timeout", "2", f"nfs://127.0.0.1:{port}/export", check=False, timeout=20)
        assert p.returncode == 1
        assert "no NFSv4.1 answer within 2 s" in p.stderr and p.stderr.count("\n") == 1
    finally:
        listener.close()


def test_version_and_help() -> None:
    assert run("--version").stdout.startswith("pynfsrdma ")
    p = run(check=False)
    assert p.returncode == 2 and "COMMAND" in p.stderr


def test_cp_within_one_server_asks_the_server_to_copy_first(base: str, export_path: ExportPath,
                                                             tmp_path: Path) -> None:
    """``cp`` between two paths of one server speaks NFSv4.2 and sends COPY; NFS-Ganesha answers
    NFS4ERR_NOTSUPP, and the data goes by READ and WRITE instead (once, and right)."""
    data = os.urandom(2 * 1024 * 1024 + 3)
    (export_path.local / "src.bin").write_bytes(data)
    trace = tmp_path / "trace"
    out = json.loads(run("--trace", str(trace), "cp", "--json", f"{base}/src.bin", f"{base}/dst.bin").stdout)
    assert out == {"version": 1, "src": f"{export_path.remote}/src.bin", "dst": f"{export_path.remote}/dst.bin",
                   "bytes": len(data), "files": 1}
    assert (export_path.local / "dst.bin").read_bytes() == data
    ops = [line.rsplit(" ", 1)[-1].split(",") for line in trace.read_text().splitlines()]
    copies = [i for i, o in enumerate(ops) if "COPY" in o]
    writes = [i for i, o in enumerate(ops) if "WRITE" in o]
    assert len(copies) == 1 and writes and copies[0] < writes[0]
    assert "status=NFS4ERR_NOTSUPP" in trace.read_text().splitlines()[copies[0]]
    # a URL that says vers=4.1 is taken at its word: no COPY
    trace.unlink()
    run("--trace", str(trace), "cp", f"{base}/src.bin?vers=4.1", f"{base}/dst2.bin")
    assert (export_path.local / "dst2.bin").read_bytes() == data
    assert "COPY" not in trace.read_text()


def test_cp_within_a_server_without_nfsv4_2_copies_over_nfsv4_1(ganesha_factory) -> None:
    server: Ganesha = ganesha_factory(minor_versions=(1,))
    ep = server.new_directory()
    base = f"nfs://{server.host}:{server.port}{ep.remote}"
    (ep.local / "a").write_bytes(b"over 4.1")
    run("cp", f"{base}/a", f"{base}/b")
    assert (ep.local / "b").read_bytes() == b"over 4.1"
