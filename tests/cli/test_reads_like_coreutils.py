"""``df``, ``stat`` and ``ls -l`` read as df(1), stat(1) and ls(1) do, checked against those tools
themselves: NFS-Ganesha's VFS export is a local directory, so ls(1) and stat(1) of it are the answer;
numfmt(1) rounds sizes as df and ls do. ``-h`` means human sizes where coreutils say so, and the help
everywhere else."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from cli_support import CLI

from pynfsrdma._cli.coreutils import human_size, use_percent
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

C = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
UNKNOWN_ID = 4242424  # (in no passwd or group file)


def run(*args: str, ok: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=C, cwd=cwd)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def tool(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True, env=C, cwd=cwd).stdout


@pytest.fixture
def tree(export_path: ExportPath) -> Path:
    """A directory with a file of another owner, one of an owner the system has no name for, a symbolic
    link, a FIFO and a directory (made before the server first looks at it)."""
    d = export_path.local / "d"
    (d / "sub").mkdir(parents=True)
    (d / "big").write_bytes(os.urandom(1536))
    os.chown(d / "big", 65534, 65534)
    (d / "small").write_bytes(b"x\n")
    os.chown(d / "small", UNKNOWN_ID, UNKNOWN_ID)
    (d / "lnk").symlink_to("big")
    os.mkfifo(d / "fifo")
    return d


def test_sizes_round_up_as_numfmt_does() -> None:
    sizes = [0, 1, 999, 1023, 1024, 1025, 1536, 10239, 10240, 10241, 1047552, 1048575, 1048577,
             24013504512, 270553174016, 84930789376, (1 << 60) - 1]
    assert [human_size(n) for n in sizes] == tool("numfmt", "--to=iec", "--round=up", *map(str, sizes)).split()


def test_use_percent_is_of_the_space_a_user_may_have_rounded_up() -> None:
    # 100 GiB, 10 used, 28.5 available (the rest reserved for root): df(1) says 26%, not used/size's 10%
    gib = 1 << 30
    assert use_percent(10 * gib, 28 * gib + gib // 2) == "26%"
    assert use_percent(1, 10**9) == "1%" and use_percent(0, 5) == "0%" and use_percent(0, 0) == "-"


def test_df_reads_like_df_and_h_means_human(base: str, ganesha: Ganesha, export_path: ExportPath) -> None:
    table = run("df", base).stdout.splitlines()
    assert table[0].split() == ["Filesystem", "1K-blocks", "Used", "Available", "Use%"]
    fs, blocks, used, avail, pct = table[1].split()
    assert fs == f"{ganesha.host}:{export_path.remote}"  # (as a mount of it names itself)
    # (the percentage comes from bytes, the columns are 1K blocks rounded up: one block apart at most)
    assert abs(int(pct.rstrip("%")) - -(-int(used) * 100 // (int(used) + int(avail)))) <= 1
    assert int(blocks) >= int(used)

    human = run("df", "-h", base)
    assert "usage:" not in human.stdout
    head, row = human.stdout.splitlines()
    assert head.split() == ["Filesystem", "Size", "Used", "Avail", "Use%"]
    assert all(re.fullmatch(r"\d+(\.\d)?[KMGTPE]?", cell) for cell in row.split()[1:4]), row
    assert run("df", "--help").stdout.startswith("usage: pynfsrdma df")


def test_h_is_human_sizes_for_ls_and_df_and_the_help_elsewhere() -> None:
    commands = re.findall(r"^    ([a-z][a-z-]*)\b", run("--help").stdout, re.M)
    assert {"ls", "df", "stat", "cat", "mount", "testbed"} <= set(commands)
    for name in commands:
        p = run(name, "-h", ok=False)
        if name in ("ls", "df"):  # a listing without its URL: a usage error, not the help
            assert p.returncode == 2 and "required: url" in p.stderr and not p.stdout, name
        else:
            assert p.returncode == 0 and p.stdout.startswith(f"usage: pynfsrdma {name}"), name


def test_ls_l_reads_like_ls(base: str, tree: Path) -> None:
    for flags in ("-l", "-lh"):
        ours = run("ls", flags, f"{base}/d").stdout
        assert ours == tool("ls", flags, "--time-style=long-iso", cwd=tree)
    assert "lnk -> big" in ours and "nobody" in ours and str(UNKNOWN_ID) in ours


def test_ls_of_a_file_prints_the_name_given(base: str, tree: Path) -> None:
    assert run("ls", f"{base}/d/big").stdout == f"{base}/d/big\n"
    assert run("ls", f"{base}/d/big?vers=4.2").stdout == f"{base}/d/big\n"
    assert run("ls", f"{base}/d/lnk").stdout == f"{base}/d/lnk\n"
    line = run("ls", "-l", f"{base}/d/lnk").stdout
    assert line.startswith("lrwxrwxrwx ") and line.endswith(f" {base}/d/lnk -> big\n")
    assert run("ls", "-R", f"{base}/d").stdout.splitlines()[0] == f"{base}/d:"
    assert f"{base}/d/sub:" in run("ls", "-R", f"{base}/d").stdout
    listing = json.loads(run("ls", "--json", f"{base}/d").stdout)
    assert {e["name"]: e.get("target") for e in listing["entries"]}["lnk"] == "big"


def test_stat_reads_like_stat(base: str, tree: Path) -> None:
    for name in ("big", "small", "sub", "fifo"):
        ours = run("stat", f"{base}/d/{name}").stdout.splitlines()
        theirs = tool("stat", str(tree / name)).splitlines()
        assert ours[0] == f"  File: {base}/d/{name}"
        # mode, owners and times as stat(1) prints them; size, blocks and type without the IO Block
        assert ours[3:7] == theirs[3:7], name
        size = re.sub(r"IO Block: \d+ +", "", theirs[1])
        assert ours[1] == size, name
        assert ours[7] == " Birth: -"
    ours = run("stat", f"{base}/d/small").stdout
    assert "Access: (0644/-rw-r--r--)" in ours and f"Uid: ({UNKNOWN_ID}/ UNKNOWN)" in ours
    # a symbolic link shown itself names its target; followed, it is the file it points to
    itself, followed = sorted((run("stat", *flag, f"{base}/d/lnk").stdout for flag in ([], ["-L"])),
                              key=lambda out: "symbolic link" not in out)
    assert itself.startswith(f"  File: {base}/d/lnk -> big\n") and "symbolic link" in itself.splitlines()[1]
    assert followed.startswith(f"  File: {base}/d/lnk\n") and "regular file" in followed.splitlines()[1]


def test_stat_json_keeps_machine_values(base: str, tree: Path) -> None:
    st = json.loads(run("stat", "--json", f"{base}/d/big").stdout)
    local = (tree / "big").stat()
    assert (st["mode"], st["uid"], st["mtime_ns"], st["size"]) == (0o644, 65534, local.st_mtime_ns, 1536)
