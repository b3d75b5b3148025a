"""What the CLI says when something is wrong: errors name the server a path is on (and a local path
stays local), an option a command would ignore is refused with a usage error, a missing mount point
is "No such file or directory", and ``mount --help`` lists every option the mount takes."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import CLI

from pynfsrdma._fuse.options import (
    GENERIC_OPTIONS,
    RDMA_OPTIONS,
    TRUNKING_FLAGS,
    TRUNKING_OPTIONS,
    MountOptions,
    parse_options,
)
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

HELPER = [sys.executable, "-c", "from pynfsrdma._cli.mount import helper_main; raise SystemExit(helper_main())"]


def run(*args: str, cmd: list[str] = CLI) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)


def test_errors_name_the_server_and_local_paths_stay_local(base: str, ganesha: Ganesha, export_path: ExportPath,
                                                          tmp_path: Path) -> None:
    where = f"{ganesha.host}:{ganesha.port}:{export_path.remote}"
    p = run("stat", f"{base}/missing")
    assert (p.returncode, p.stderr) == (1, f"pynfsrdma: {where}/missing: No such file or directory (NFS4ERR_NOENT)\n")
    p = run("cat", f"{base}/")
    assert (p.returncode, p.stderr) == (1, f"pynfsrdma: {where}: Is a directory (NFS4ERR_ISDIR)\n")
    (export_path.local / "d").mkdir()
    p = run("get", f"{base}/d", str(tmp_path))
    assert (p.returncode, p.stderr) == (1, f"pynfsrdma: {where}/d: Is a directory (use -r to copy a directory)\n")
    # a local path is named as it is
    p = run("put", str(tmp_path / "absent"), f"{base}/d/")
    assert (p.returncode, p.stderr) == (1, f"pynfsrdma: {tmp_path}/absent: No such file or directory\n")
    # the name in the message is one the commands take back
    (export_path.local / "d/f").write_bytes(b"here\n")
    assert run("cat", f"{where}/d/f").stdout == "here\n"


def test_cat_refuses_json_by_name(base: str, export_path: ExportPath) -> None:
    (export_path.local / "f").write_bytes(b"data")
    p = run("cat", "--json", f"{base}/f")
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.splitlines()[-1] == ("pynfsrdma cat: error: --json: `pynfsrdma cat` writes the file itself "
                                         "(`pynfsrdma stat --json` gives its attributes)")


@pytest.mark.parametrize("args, said", [
    (("ls", "-l", "-h", "--json", "nfs://127.0.0.1/export"), "pynfsrdma ls: error: -h and --json do not go together"),
    (("df", "-h", "--json", "nfs://127.0.0.1/export"), "pynfsrdma df: error: -h and --json do not go together"),
    (("--trace", "-", "umount", "/mnt"), "pynfsrdma: error: --trace: `pynfsrdma umount` sends no RPC of its own"),
    (("--trace", "-", "stats", "/mnt"), "pynfsrdma: error: --trace: `pynfsrdma stats` sends no RPC of its own"),
    (("--trace", "-", "mount", "nfs://127.0.0.1/export", "/mnt"),
     "pynfsrdma: error: --trace: `pynfsrdma mount` sends no RPC of its own (with -f it does)"),
])
def test_options_a_command_would_ignore_are_a_usage_error(args: tuple[str, ...], said: str) -> None:
    p = run(*args)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.splitlines()[-1].startswith(said), p.stderr


def test_paths_of_a_mount_point_refuses_a_credential(tmp_path: Path) -> None:
    p = run("paths", "--uid", "1000", str(tmp_path))
    assert (p.returncode, p.stderr) == (
        2, "pynfsrdma paths: --uid and --gid are for a URL: a mount's daemon answers for the mount\n")


@pytest.mark.parametrize("cmd", [CLI, HELPER], ids=["pynfsrdma mount", "mount.pynfsrdma"])
def test_a_missing_mount_point_is_no_such_file_or_directory(ganesha: Ganesha, tmp_path: Path,
                                                            cmd: list[str]) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}/export"
    args = ("mount", url) if cmd is CLI else (url,)
    prog = "pynfsrdma" if cmd is CLI else "mount.pynfsrdma"
    p = run(*args, str(tmp_path / "absent"), cmd=cmd)
    assert p.returncode == (1 if cmd is CLI else 32)
    assert p.stderr == f"{prog}: mount point {tmp_path}/absent: No such file or directory\n"
    (tmp_path / "file").write_bytes(b"")
    p = run(*args, str(tmp_path / "file"), cmd=cmd)
    assert p.stderr == f"{prog}: mount point {tmp_path}/file: Not a directory\n"


MAN8 = Path(__file__).parents[2] / "packaging/man/mount.pynfsrdma.8"


def _documented_options() -> set[str]:
    """The option names mount.pynfsrdma(8) gives in the headings of its OPTIONS section
    (``.BR vers=4.1 ", " nfsvers=``, ``.BR hard " | " soft``; in ``proto=tcp | rdma`` only proto)."""
    section = MAN8.read_text().split(".SH OPTIONS", 1)[1].split("\n.SH ", 1)[0].splitlines()
    names = set()
    for heading in (section[i + 1] for i, line in enumerate(section[:-1]) if line == ".TP"):
        words = [re.sub(r"\\f[A-Z]", "", w).replace("\\-", "-").strip('",')
                 for w in re.sub(r"^\.[A-Z]+\s*", "", heading).split()]
        with_value = any("=" in w for w in words)
        for w in words:
            if "=" in w:
                names.add(w.split("=")[0])
            elif not with_value and re.fullmatch(r"[a-z_]+", w):
                names.add(w)
    return names


SAMPLE = {"N": "4096", "FILE": "/etc/krb5.keytab"}
# options taken only with another: what goes with each in the check below
NEEDS = {"squash_gid": "squash_uid=1", "xprtsec=mtls": "certificate=/c.pem", "truststore": "xprtsec=tls",
         "certificate": "xprtsec=mtls", "private_key": "xprtsec=mtls,certificate=/c.pem"}


@pytest.mark.parametrize("cmd", [CLI, HELPER], ids=["pynfsrdma mount", "mount.pynfsrdma"])
def test_mount_help_lists_every_option_and_each_is_taken(cmd: list[str]) -> None:
    p = run(*(("mount", "--help") if cmd is CLI else ("--help",)), cmd=cmd)
    assert p.returncode == 0
    after = p.stdout.split("mount options (comma-separated", 1)[1].splitlines()
    listed = [item for line in after if line.startswith("  ") for item in line.split()]
    names = {re.split(r"[=\[]", item)[0] for item in listed}
    # (fields that gather several options, as rdma, trunking and ignored, are not options themselves)
    expected = {f.name for f in dataclasses.fields(MountOptions) if not str(f.type).startswith(("list", "dict"))}
    expected |= {"soft", "rw", "ac", "actimeo", "nfsvers", *GENERIC_OPTIONS, *RDMA_OPTIONS, *TRUNKING_OPTIONS,
                 *TRUNKING_FLAGS}
    assert expected <= names, expected - names
    documented = _documented_options()
    assert documented and documented <= names, documented - names
    vers = next(item for item in listed if item.startswith("vers="))
    assert {"4.1", "4.2"} <= set(vers.removeprefix("vers=").split("|"))
    assert "proto=tcp|rdma" in listed and "hard" in listed
    for item in listed:
        name, eq, value = item.partition("=")
        if value == "..." or name == "sec":  # (free-form values; sec's are parse_sec's to check)
            continue
        # (a placeholder in capitals takes a sample value: a number unless named here)
        values = [None] if not eq else [SAMPLE.get(value, "60")] if value.isupper() else value.split("|")
        for v in values:
            text = name if v is None else f"{name}={v}"
            need = NEEDS.get(text, NEEDS.get(name))
            parse_options(f"{need},{text}" if need else text)
