"""Each command imports what it uses: ``--version`` and ``--help`` load neither the client, nor trio, nor
the progress bar, and ``ls`` loads no testbed, mount or progress bar. What was imported is read from
``sys.modules`` in a process of its own (no timing: the machine's load says nothing about our code)."""

from __future__ import annotations

import json
import subprocess
import sys

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


def imported(*args: str) -> tuple[int, str, set[str]]:
    """The exit status, standard output and the modules loaded by ``pynfsrdma ARGS``."""
    p = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
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
