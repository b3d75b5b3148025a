"""Ctrl-C on ``pynfsrdma mount`` to a server that never answers ends everything at once: the
terminal's SIGINT reaches the command's process group (not the daemon, which has a session of its
own), and the command stops its daemon before it returns 130. Nothing stays mounted or running, no
connection keeps trying, and nothing but one line at most reaches the terminal.

Two servers that never answer: NFS-Ganesha behind the testbed's path proxy, stalled from the start
(connections are accepted, nothing is answered), and a listener whose accept queue is full (the
kernel drops new SYNs: a black hole)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

PY = sys.executable
WAIT = 30.0  # seconds any step may take on a busy host (none is timed)
TRYING = ("01", "02")  # /proc/net/tcp states: ESTABLISHED, SYN_SENT


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


def connections_to(port: int, ignore: frozenset[int] = frozenset()) -> list[str]:
    """This host's TCP sockets connected or connecting to ``port`` (from /proc/net/tcp), but for
    those from the local ports ``ignore``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local = int(fields[1].rsplit(":", 1)[1], 16)
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] in TRYING and local not in ignore:
                    found.append(line.strip())
    return found


def descendants(pid: int) -> set[int]:
    """The processes started by ``pid`` (and by those), as /proc lists them now."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = {int(k) for k in f.read().split()}
        except FileNotFoundError:
            continue
        todo += kids - out
        out |= kids
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(what: str, condition: object) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {WAIT:g} s: {what}"
        time.sleep(0.02)


@contextmanager
def black_hole() -> Iterator[tuple[int, frozenset[int]]]:
    """A port on 127.0.0.1 whose listener never accepts and whose accept queue is full: the kernel
    drops every new SYN, as a black-holed path does. Yields the port and the local ports of the
    connections that fill the queue."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued: list[socket.socket] = []
    try:
        while True:  # fill the queue until a connection attempt goes unanswered
            s = socket.socket()
            s.settimeout(0.5)
            try:
                s.connect(("127.0.0.1", port))
            except TimeoutError:
                s.close()
                break
            queued.append(s)
        yield port, frozenset(s.getsockname()[1] for s in queued)
    finally:
        for s in queued:
            s.close()
        listener.close()


def mount_command(how: str, host: str, port: int, mnt: Path) -> list[str]:
    """``pynfsrdma mount`` (``background``, ``foreground``: with -f) or mount(8)'s helper (``helper``)."""
    if how == "helper":
        return [PY, "-c", "from pynfsrdma._cli.mount import helper_main; raise SystemExit(helper_main())",
                f"{host}:/export", str(mnt), "-o", f"port={port}"]
    argv = [PY, "-m", "pynfsrdma._cli.main", "mount", f"nfs://{host}:{port}/export", str(mnt)]
    return argv + (["-f"] if how == "foreground" else [])


def as_a_terminals_job() -> None:
    """SIGINT as a terminal's foreground job has it (the default action), whatever this run's own
    is: a shell ignores it in the jobs it starts in the background, and the ignoring is inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_mount(argv: list[str], port: int, log: Path,
                    ignore: frozenset[int] = frozenset()) -> tuple[int, str, set[int]]:
    """The mount command ``argv`` in a process group of its own, interrupted as a terminal does once
    it is trying to reach the server at ``port``; returns its exit status, what it wrote to the
    terminal, and the processes it had started."""
    foreground = "-f" in argv
    with open(log, "w+") as terminal:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal,
                                start_new_session=True, preexec_fn=as_a_terminals_job)
        try:
            wait_for("the mount tries to reach the server", lambda: connections_to(port, ignore))
            started = descendants(proc.pid)
            if not foreground:
                assert started, "no mount daemon"
            os.killpg(proc.pid, signal.SIGINT)  # (Ctrl-C: the whole foreground process group)
            rc = proc.wait(WAIT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        terminal.seek(0)
        return rc, terminal.read(), started


def check_nothing_left(rc: int, terminal: str, started: set[int], port: int, mnt: Path,
                       ignore: frozenset[int] = frozenset()) -> None:
    assert rc == 130, terminal
    assert "Traceback" not in terminal and len(terminal.splitlines()) <= 1, terminal
    assert [pid for pid in started if alive(pid)] == [], "a process of the mount is still running"
    assert connections_to(port, ignore) == [], "something still tries to reach the server"
    assert not mounted(mnt)


@pytest.mark.fuse
@pytest.mark.parametrize("how", ["background", "foreground", "helper"])
async def test_ctrl_c_on_a_mount_to_a_stalled_server(proxied_paths, tmp_path: Path, how: str) -> None:
    paths = await proxied_paths(count=1)
    paths[0].stall()  # connections are accepted; nothing is read or answered
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    argv = mount_command(how, paths.addresses[0], paths.port, mnt)
    rc, terminal, started = await trio.to_thread.run_sync(interrupt_mount, argv, paths.port, tmp_path / "terminal")
    check_nothing_left(rc, terminal, started, paths.port, mnt)
    assert paths[0].stats.connections_accepted >= 1  # (it had reached the stalled server)


@pytest.mark.fuse
@pytest.mark.parametrize("how", ["background", "foreground", "helper"])
def test_ctrl_c_on_a_mount_to_a_black_hole(tmp_path: Path, how: str) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with black_hole() as (port, queued):
        argv = mount_command(how, "127.0.0.1", port, mnt)
        rc, terminal, started = interrupt_mount(argv, port, tmp_path / "terminal", queued)
        check_nothing_left(rc, terminal, started, port, mnt, queued)
