"""The testbed's NFS-Ganesha runs with its allocator tuned (SERVER_ENVIRONMENT)."""

from __future__ import annotations

from pathlib import Path

from pynfsrdma._testbed.ganesha import SERVER_ENVIRONMENT, Ganesha


def test_the_server_process_has_the_tuned_environment() -> None:
    with Ganesha() as server:
        pid = server.pid
        assert pid is not None
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        for name, value in SERVER_ENVIRONMENT.items():
            assert f"{name}={value}".encode() in environ
