"""Each command imports what it uses: ``--version`` and ``--help`` load neither the client, nor trio, nor
the progress bar, ``ls`` loads no testbed, mount or progress bar, and ``mount`` leaves the client to the
daemon it starts. What was imported is read from ``sys.modules`` in a process of its own (no timing:
the machine's load says nothing about our code)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

# the modules a command that talks to no server has no use for
HEAVY = ("trio", "tqdm", "pynfsrdma._client", "pynfsrdma._session", "pynfsrdma._proto", "pynfsrdma._rpc",
         "pynfsrdma._transport", "pynfsrdma._trunking", "pynfsrdma._testbed", "pynfsrdma._fuse")

PROBE = """
import json, sys
from pynfsrdma._cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


# the same for mount(8)'s helper, ``mount.pynfsrdma ARGS``
HELPER_PROBE = PROBE.replace("from pynfsrdma._cli.main import main", "from pynfsrdma._cli.mount import helper_main as main")


def imported(*args: str) -> tuple[int, str, set[str]]:
    """The exit status, standard output and the modules loaded by ``pynfsrdma ARGS``."""
    return imported_by(PROBE, *args)


def imported_by(probe: str, *args: str) -> tuple[int, str, set[str]]:
    p = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=60)
    report = json.loads(p.stderr.splitlines()[-1])
    return report["code"], p.stdout, set(report["modules"])


def loaded(modules: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)}


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("ls", "--help")])
def test_version_and_help_import_no_client(args: tuple[str, ...]) -> None:
    code, out, modules = imported(*args)
    assert code == 0 and out.startswith("pynfsrdma 0." if args == ("--version",) else "usage: ")
    assert loaded(modules, HEAVY) == set()


def test_mount_help_imports_the_option_parser_only() -> None:
    """(it lists the options from the parser's tables)"""
    code, out, modules = imported("mount", "--help")
    assert code == 0 and out.startswith("usage: ") and "pynfsrdma._fuse.options" in modules
    assert loaded(modules, ("trio", "tqdm", "pynfsrdma._client.api", "pynfsrdma._session", "pynfsrdma._testbed",
                            "pynfsrdma._fuse.mount_daemon")) == set()


def test_ls_imports_no_testbed_mount_or_progress_bar(ganesha: Ganesha, export_path: ExportPath) -> None:
    (export_path.local / "f").write_bytes(b"x")
    code, out, modules = imported("ls", f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}")
    assert (code, out) == (0, "f\n")
    assert "pynfsrdma._client.api" in modules  # (the probe sees what was loaded)
    assert loaded(modules, ("tqdm", "pynfsrdma._testbed", "pynfsrdma._fuse", "pynfsrdma._cli.transfer")) == set()


def _mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


# what the mount's own process has no use for: the daemon it starts loads them in a process of its own
DAEMON_ONLY = ("trio", "pynfsrdma._client.stack", "pynfsrdma._client.api", "pynfsrdma._session", "pynfsrdma._rpc",
               "pynfsrdma._transport.tcp", "pynfsrdma._fuse.mount_daemon", "pynfsrdma._fuse.operations",
               "pynfsrdma._fuse.lowlevel", "pynfsrdma._fuse.kernel.requests", "pynfsrdma._fuse.kernel.init")


@pytest.mark.fuse
@pytest.mark.parametrize("command", ["mount", "mount.pynfsrdma"])
def test_mount_starts_its_daemon_without_loading_the_client(ganesha: Ganesha, export_path: ExportPath,
                                                             tmp_path: Path, command: str) -> None:
    """``pynfsrdma mount`` and mount(8)'s helper check the options and the URL, start the daemon and
    wait for its word: the mount is up, and they loaded neither trio nor the client nor the daemon."""
    (export_path.local / "f").write_bytes(b"x")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    source = f"{ganesha.host}:{export_path.remote}"
    try:
        if command == "mount":
            code, _, modules = imported("mount", source, str(mnt), "-o", f"port={ganesha.port}")
        else:
            code, _, modules = imported_by(HELPER_PROBE, source, str(mnt), "-o", f"port={ganesha.port}")
        assert code == 0 and (mnt / "f").read_bytes() == b"x"
        assert loaded(modules, DAEMON_ONLY) == set()
        assert "pynfsrdma._fuse.options" in modules  # (the probe sees what was loaded)
    finally:
        if _mounted(mnt):
            subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", "umount", str(mnt)], timeout=60)
    assert not _mounted(mnt)
