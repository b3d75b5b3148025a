"""Starting, stopping and restarting a real NFS-Ganesha, and the errors when it cannot start."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from pynfsrdma._testbed import Ganesha, GaneshaError, GaneshaNotInstalled
from pynfsrdma._testbed import ganesha as ganesha_module
from pynfsrdma._testbed.ganesha import ExportPath, find_free_port, process_listens_on
from pynfsrdma._testbed.procs import pid_alive

pytestmark = pytest.mark.ganesha


def test_session_server_and_export_path(ganesha: Ganesha, export_path: ExportPath) -> None:
    assert ganesha.running and ganesha.host == "127.0.0.1"
    assert ganesha.url == f"nfs://127.0.0.1:{ganesha.port}/export"
    assert ganesha.pid is not None and process_listens_on(ganesha.pid, ganesha.port)
    assert export_path.local.parent == ganesha.export_dir and export_path.local.is_dir()
    assert export_path.remote == f"/export/{export_path.name}"


def test_export_paths_are_fresh_per_test(ganesha: Ganesha, export_path: ExportPath) -> None:
    assert list(export_path.local.iterdir()) == []
    other = ganesha.new_directory()
    assert other.local != export_path.local and other.remote != export_path.remote


def test_start_stop_restart_keeps_port_export_and_data(tmp_path: Path) -> None:
    server = Ganesha(tmp_path / "g", grace=2, lease=3, server_owner="owner-a", server_scope="scope-a")
    config = server.directory / "ganesha.conf"
    with server:
        port, first_pid = server.port, server.pid
        assert first_pid is not None
        text = config.read_text()
        for line in (
            "Graceless = false;",
            "Grace_Period = 2;",
            "Lease_Lifetime = 3;",
            'Server_Owner = "owner-a";',
            'Server_Scope = "scope-a";',
            "Minor_Versions = 1, 2;",
            'Pseudo = "/export";',
        ):
            assert line in text
        (server.export_dir / "kept").write_bytes(b"still here")

        server.restart()
        assert server.running and server.port == port and server.pid != first_pid
        assert not pid_alive(first_pid)
        assert server.pid is not None and process_listens_on(server.pid, port)
        assert (server.export_dir / "kept").read_bytes() == b"still here"

        server.restart(kill=True)  # a crash: SIGKILL, then a start on the same directory
        assert server.running and (server.export_dir / "kept").exists()
        assert server.recovery_dir.is_dir()
        last_pid = server.pid
    assert not server.running and last_pid is not None and not pid_alive(last_pid)
    assert server.directory.exists()  # a directory the caller gave is the caller's to remove


def test_own_temporary_directory_is_removed_on_close() -> None:
    with Ganesha() as server:
        directory = server.directory
        assert directory.is_dir()
    assert not directory.exists()


def test_port_in_use_is_a_clear_error(ganesha_factory: Callable[..., Ganesha]) -> None:
    port = find_free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(GaneshaError, match="Address already in use") as failure:
            ganesha_factory(port=port)
    assert "exited with status" in str(failure.value)
    assert "ganesha.log" in str(failure.value)


def test_configuration_syntax_error_quotes_the_log(ganesha_factory: Callable[..., Ganesha]) -> None:
    """The syntax error is quoted wherever it is in the log: 9 goes on starting after it and fails
    later, for a reason of its own, its log's end then a backtrace."""
    with pytest.raises(GaneshaError, match=r"(?s)has errors:.*syntax error"):
        ganesha_factory(extra_config="NFSv4 { Lease_Lifetime = ; ")


def test_unknown_configuration_parameter_is_an_error(ganesha_factory: Callable[..., Ganesha]) -> None:
    # a block the testbed does not write itself: 9 refuses a second block of a kind
    with pytest.raises(GaneshaError, match=r"(?s)did not understand its configuration .*Unknown parameter \(No_Such_Thing\)"):
        ganesha_factory(extra_config="MDCACHE { No_Such_Thing = 1; }")


def test_two_servers_side_by_side(ganesha: Ganesha, ganesha_factory: Callable[..., Ganesha]) -> None:
    other = ganesha_factory(server_owner="someone-else")
    assert other.port != ganesha.port and other.export_dir != ganesha.export_dir
    assert other.running and ganesha.running


def test_missing_binary_names_the_packages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ganesha_module, "BINARY_DIRS", (str(tmp_path),))
    with pytest.raises(GaneshaNotInstalled, match="apt-get install nfs-ganesha nfs-ganesha-vfs"):
        Ganesha(tmp_path / "g", version="4.3")  # the host's packages (9 comes from a root the testbed builds)


async def test_restart_from_trio_code(ganesha_factory: Callable[..., Ganesha]) -> None:
    server = ganesha_factory()
    old = server.pid
    await server.arestart()
    assert server.running and server.pid != old
    await server.astop()
    assert not server.running
    await server.astart()
    assert server.running
