"""The CLI keeps cp(1)'s and mount(8)'s word: nothing is lost by a copy onto itself or a trailing /,
trees go with -r, messages say what happened, --json carries its version, and the progress bar fits
the terminal and stops cleanly on Ctrl-C."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import termios
import time
from pathlib import Path

import trio
from cli_support import CLI, run

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def test_a_copy_onto_itself_is_refused_and_loses_nothing(base: str, export_path: ExportPath) -> None:
    (export_path.local / "x").write_bytes(b"precious")
    (export_path.local / "d").mkdir()
    for dst in (f"{base}/x", f"{base}/", f"{base}/d/../x"):
        p = run("cp", f"{base}/x", dst, ok=False)
        assert p.returncode == 1 and "are the same file" in p.stderr
    p = run("mv", f"{base}/x", f"{base}/x", ok=False)
    assert p.returncode == 1 and "are the same file" in p.stderr
    assert (export_path.local / "x").read_bytes() == b"precious"


def test_a_trailing_slash_means_a_directory(base: str, ganesha: Ganesha, export_path: ExportPath,
                                            tmp_path: Path) -> None:
    local = tmp_path / "f"
    local.write_bytes(b"data")
    p = run("put", str(local), f"{base}/newdir/", ok=False)
    server = f"{ganesha.host}:{ganesha.port}"
    assert p.returncode == 1
    assert p.stderr == f"pynfsrdma: {server}:{export_path.remote}/newdir/: No such file or directory\n"
    assert not (export_path.local / "newdir").exists()

    (export_path.local / "a").write_bytes(b"A")
    (export_path.local / "b").write_bytes(b"B")
    p = run("mv", f"{base}/a", f"{base}/sub/", ok=False)
    assert "No such file or directory" in p.stderr and (export_path.local / "a").read_bytes() == b"A"
    (export_path.local / "sub").mkdir()
    run("mv", f"{base}/a", f"{base}/sub/")
    run("mv", f"{base}/b", f"{base}/sub/")
    assert sorted(os.listdir(export_path.local / "sub")) == ["a", "b"]
    p = run("put", str(local), f"{base}/sub/a/", ok=False)
    assert "Not a directory" in p.stderr and (export_path.local / "sub/a").read_bytes() == b"A"

    p = run("get", f"{base}/sub/a", str(tmp_path / "nosuchdir") + "/", ok=False)
    assert (p.returncode, p.stderr) == (1, f"pynfsrdma: {tmp_path}/nosuchdir/: Not a directory\n")  # as cp(1)
    p = run("get", f"{base}/sub/a", str(tmp_path / "nosuchdir/deeper") + "/", ok=False)
    assert (p.returncode, p.stderr) == (1, f"pynfsrdma: {tmp_path}/nosuchdir/deeper/: No such file or directory\n")
    assert not (tmp_path / "nosuchdir").exists()


def test_trees_go_with_r_and_not_without(base: str, export_path: ExportPath, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub/deeper").mkdir(parents=True)
    (tree / "one").write_bytes(b"1")
    (tree / "sub/two").write_bytes(b"22")
    (tree / "sub/deeper/three").write_bytes(os.urandom(3 << 20))
    p = run("put", str(tree), f"{base}/", ok=False)
    assert p.returncode == 1 and p.stderr == f"pynfsrdma: {tree}: Is a directory (use -r to copy a directory)\n"

    out = json.loads(run("put", "-r", "--json", str(tree), f"{base}/").stdout)
    assert (out["files"], out["bytes"], out["remote"]) == (3, 3 + (3 << 20), f"{export_path.remote}/tree")
    assert (export_path.local / "tree/sub/deeper/three").read_bytes() == (tree / "sub/deeper/three").read_bytes()
    run("cp", "-r", f"{base}/tree", f"{base}/copy")
    run("get", "-r", f"{base}/copy", str(tmp_path / "back"))
    for rel in ("one", "sub/two", "sub/deeper/three"):
        assert (tmp_path / "back" / rel).read_bytes() == (tree / rel).read_bytes()
    p = run("cp", "-r", f"{base}/tree", f"{base}/tree/sub/", ok=False)
    assert "into itself" in p.stderr


def test_ls_all_recursive_human(base: str, export_path: ExportPath) -> None:
    (export_path.local / "d/e").mkdir(parents=True)
    (export_path.local / "d/.hidden").write_bytes(b"")
    (export_path.local / "d/big").write_bytes(b"x" * 1536)
    (export_path.local / "d/e/f").write_bytes(b"")
    assert run("ls", f"{base}/d").stdout.split() == ["big", "e"]
    assert run("ls", "-a", f"{base}/d").stdout.split() == [".", "..", ".hidden", "big", "e"]
    assert run("ls", "-R", f"{base}/d").stdout == f"{base}/d:\nbig\ne\n\n{base}/d/e:\nf\n"
    long = run("ls", "-l", "-h", f"{base}/d").stdout.splitlines()
    assert long[0].startswith("total ")
    assert re.search(r" 1\.5K \d{4}-\d\d-\d\d \d\d:\d\d big$", long[1]), long
    assert run("ls", "--help").stdout.startswith("usage:")


def test_messages_say_what_happened(base: str, tmp_path: Path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        p = run("ls", "--timeout", "1", f"nfs://127.0.0.1:{silent.getsockname()[1]}/export", ok=False)
    finally:
        silent.close()
    assert p.returncode == 1 and "[Errno" not in p.stderr and "no NFSv4.1 answer within 1 s" in p.stderr
    p = run("umount", str(tmp_path), ok=False)
    assert (p.returncode, p.stderr) == (1, f"pynfsrdma: {tmp_path}: not mounted\n")
    p = run("ls", f"{base}?nconect=2", ok=False)
    assert p.returncode == 2 and "unknown URL option: nconect" in p.stderr


def test_json_output_carries_its_version(base: str, export_path: ExportPath, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    outputs = [
        run("mkdir", "--json", f"{base}/d").stdout,
        run("put", "--json", str(tmp_path / "f"), f"{base}/d/").stdout,
        run("ls", "--json", f"{base}/d").stdout,
        run("stat", "--json", f"{base}/d/f").stdout,
        run("cp", "--json", f"{base}/d/f", f"{base}/d/g").stdout,
        run("get", "--json", f"{base}/d/g", str(tmp_path / "g")).stdout,
        run("mv", "--json", f"{base}/d/g", f"{base}/d/h").stdout,
        run("rm", "--json", f"{base}/d/h").stdout,
        run("df", "--json", base).stdout,
    ]
    docs = [json.loads(o) for o in outputs]
    assert all(d["version"] == 1 for d in docs)
    st = docs[3]
    local = (export_path.local / "d/f").stat()
    assert (st["mode"], st["mtime_ns"], st["size"]) == (0o644, local.st_mtime_ns, 3)
    assert [e["name"] for e in docs[2]["entries"]] == ["f"]


def _pty(columns: int) -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return master, slave


def _read_until(fd: int, proc: subprocess.Popen[bytes], want: bytes, limit: float) -> bytes:
    out = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and want not in out:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                out += os.read(fd, 65536)
            except OSError:
                break
        elif proc.poll() is not None:
            break
    return out


def test_the_progress_bar_fits_the_terminal(base: str, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(64 << 20))
    master, slave = _pty(80)
    proc = subprocess.Popen([*CLI, "put", str(src), f"{base}/big.bin"], stdout=slave, stderr=slave,
                            stdin=subprocess.DEVNULL)
    os.close(slave)
    try:
        out = _read_until(master, proc, b"\n", 60)
        out += _read_until(master, proc, b"\0", 5)  # the rest, until it ends
    finally:
        proc.wait(30)
        os.close(master)
    text = out.decode(errors="replace")
    assert proc.returncode == 0
    redraws = [r for r in re.split(r"[\r\n]", text) if r.strip()]
    assert redraws and all(len(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", r)) <= 80 for r in redraws), redraws
    assert text.count("\n") == 1  # one line, redrawn in place, ended once
    assert "64.0MiB of 64.0MiB" in text and "ETA " in text


async def test_ctrl_c_stops_a_transfer_and_removes_the_partial_copy(
    proxied_paths, export_path: ExportPath, tmp_path: Path
) -> None:
    paths = await proxied_paths(count=1)
    paths[0].throttle(2000)  # 2 MB/s: the 16 MiB take eight seconds
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}/slow.bin"
    src = tmp_path / "slow.bin"
    src.write_bytes(os.urandom(16 << 20))

    def interrupt() -> tuple[int | None, str]:
        master, slave = _pty(100)
        # (as from a terminal: a test run started in the background has SIGINT ignored, and a command
        # started from it would keep ignoring Ctrl-C, as a background job should)
        proc = subprocess.Popen([*CLI, "put", str(src), url], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        os.close(slave)
        try:
            shown = _read_until(master, proc, b"MiB", 20)
            time.sleep(1.0)
            proc.send_signal(signal.SIGINT)
            shown += _read_until(master, proc, b"partial copy", 20)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
        return proc.returncode, shown.decode(errors="replace")

    rc, text = await trio.to_thread.run_sync(interrupt)
    assert rc == 130, text
    assert f"removed the partial copy {export_path.remote}/slow.bin" in text
    assert "Traceback" not in text
    assert not (export_path.local / "slow.bin").exists()
