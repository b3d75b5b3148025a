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

from pynfsrdma._fuse.options import (
    GENERIC_OPTIONS,
    RDMA_OPTIONS,
    TRUNKING_FLAGS,
    TRUNKING_OPTIONS,
    MountOptions,
    parse_options,
)
from pynfsrdma._testbed import Ganesha

CLI = [sys.executable, "-m", "pynfsrdma._cli.main"]
HELPER = [sys.executable, "-c", "from pynfsrdma._cli.mount import helper_main; raise SystemExit(helper_main())"]


def run(*args: str, cmd: list[str] = CLI) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)


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


SAMPLE = {"N": "4096", "S": "60", "DECISECONDS": "50", "FILE": "/etc/krb5.keytab"}


@pytest.mark.parametrize("cmd", [CLI, HELPER], ids=["pynfsrdma mount", "mount.pynfsrdma"])
def test_mount_help_lists_every_option_and_each_is_taken(cmd: list[str]) -> None:
    p = run(*(("mount", "--help") if cmd is CLI else ("--help",)), cmd=cmd)
    assert p.returncode == 0
    after = p.stdout.split("mount options (comma-separated", 1)[1].splitlines()
    listed = [item for line in after if line.startswith("  ") for item in line.split()]
    names = {re.split(r"[=\[]", item)[0] for item in listed}
    groups = {"ignored", "rdma", "trunking"}
    expected = {f.name for f in dataclasses.fields(MountOptions) if f.name not in groups}
    expected |= {"soft", "rw", "ac", "actimeo", "nfsvers", *GENERIC_OPTIONS, *RDMA_OPTIONS, *TRUNKING_OPTIONS,
                 *TRUNKING_FLAGS}
    assert expected <= names, expected - names
    assert "vers=4.1|4.2" in listed and "proto=tcp|rdma" in listed and "hard" in listed
    for item in listed:
        name, eq, value = item.partition("=")
        if value == "..." or name == "sec":  # (free-form values; sec's are parse_sec's to check)
            continue
        values = [None] if not eq else [SAMPLE[value]] if value in SAMPLE else value.split("|")
        for v in values:
            text = name if v is None else f"{name}={v}"
            parse_options(f"squash_uid=1,{text}" if name == "squash_gid" else text)
