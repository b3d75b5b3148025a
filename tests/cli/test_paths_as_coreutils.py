"""Paths mean what coreutils make them mean: ``file/`` names a directory or nothing, so every command
answers "Not a directory" for it and leaves the file as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cli_support import run

from pynfsrdma._testbed.ganesha import ExportPath


def test_a_file_written_as_a_directory_is_not_a_directory_in_every_command(
        base: str, export_path: ExportPath, tmp_path: Path) -> None:
    data = export_path.local / "data"
    data.mkdir()
    (data / "victim.txt").write_bytes(b"keep me")
    (data / "other.txt").write_bytes(b"and me")
    local = tmp_path / "s.txt"
    local.write_bytes(b"new")
    victim = f"{base}/data/victim.txt/"
    said = f"{export_path.remote}/data/victim.txt/: Not a directory (NFS4ERR_NOTDIR)\n"
    for args in (["rm", victim], ["rm", "-r", victim], ["rm", "-d", victim], ["ls", victim], ["ls", "-l", victim],
                 ["stat", victim], ["stat", "-L", victim], ["cat", victim], ["get", victim, str(tmp_path / "x")],
                 ["cp", victim, str(tmp_path / "x")], ["cp", victim, f"{base}/data/copy.txt"],
                 ["mv", victim, f"{base}/data/moved.txt"], ["mv", f"{base}/data/other.txt", victim],
                 ["cp", f"{base}/data/other.txt", victim], ["put", str(local), victim], ["cp", str(local), victim]):
        p = run(*args, ok=False)
        assert (p.returncode, p.stdout) == (1, ""), args
        assert p.stderr.startswith("pynfsrdma: ") and p.stderr.endswith(said) and p.stderr.count("\n") == 1, args
    assert (data / "victim.txt").read_bytes() == b"keep me"
    assert sorted(p.name for p in data.iterdir()) == ["other.txt", "victim.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.txt"]


def test_a_directory_written_with_a_slash_is_still_one(base: str, export_path: ExportPath) -> None:
    (export_path.local / "d/e").mkdir(parents=True)
    (export_path.local / "d/f").write_bytes(b"f")
    assert run("ls", f"{base}/d/").stdout.split() == ["e", "f"]
    assert run("stat", f"{base}/d/").stdout.splitlines()[1].endswith(" directory")
    run("mv", f"{base}/d/e/", f"{base}/d/g")
    run("rm", "-d", f"{base}/d/g/")
    run("rm", "-r", f"{base}/d/")
    assert not (export_path.local / "d").exists()


def test_stat_describes_a_link_and_follows_it_with_L(base: str, export_path: ExportPath) -> None:
    """As stat(1): the link itself, its target with -L (--dereference)."""
    (export_path.local / "target.txt").write_bytes(b"twelve bytes")
    (export_path.local / "link").symlink_to("target.txt")
    link = json.loads(run("stat", "--json", f"{base}/link").stdout)
    assert (link["type"], link["size"]) == ("symlink", len("target.txt"))
    for flag in ("-L", "--dereference"):
        target = json.loads(run("stat", flag, "--json", f"{base}/link").stdout)
        assert (target["type"], target["size"]) == ("file", 12)
    assert run("stat", f"{base}/link").stdout.splitlines()[1].endswith(" symbolic link")
    assert run("stat", "-L", f"{base}/link").stdout.splitlines()[1].endswith(" regular file")
    assert "--dereference" in run("stat", "--help").stdout


def test_a_transfer_that_created_nothing_says_only_what_stopped_it(
        base: str, export_path: ExportPath, tmp_path: Path) -> None:
    """No "partial copy ... is left" line when there was no copy: the real error alone, and what was
    there before stays."""
    remote = export_path.remote
    local = tmp_path / "s.txt"
    local.write_bytes(b"mine")
    (export_path.local / "data").mkdir()
    (export_path.local / "data/s.txt").write_bytes(b"theirs")
    export_path.local.chmod(0o755)  # (root's: nobody may not make names here)
    pub = export_path.local / "pub"  # nobody may make and remove names here, not write root's file
    pub.mkdir()
    os.chown(pub, 65534, 65534)
    (pub / "roots.txt").write_bytes(b"root's")
    nobody = ("--uid", "65534", "--gid", "65534")
    for args, said in (
        (["put", *nobody, "/etc/hostname", f"{base}/nb.txt"], f"{remote}/nb.txt: Permission denied (NFS4ERR_ACCESS)"),
        (["put", str(local), f"{base}/nodir/s.txt"], f"{remote}/nodir: No such file or directory (NFS4ERR_NOENT)"),
        (["get", f"{base}/data/s.txt", str(tmp_path / "nodir/x")], f"{tmp_path}/nodir/x: No such file or directory"),
        (["put", *nobody, str(local), f"{base}/pub/roots.txt"],
         f"{remote}/pub/roots.txt: Permission denied (NFS4ERR_ACCESS)"),
    ):
        p = run(*args, ok=False)
        assert p.returncode == 1 and p.stderr.startswith("pynfsrdma: "), args
        assert p.stderr.endswith(f"{said}\n") and p.stderr.count("\n") == 1, p.stderr
    assert sorted(p.name for p in export_path.local.iterdir()) == ["data", "pub"]
    assert (pub / "roots.txt").read_bytes() == b"root's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.txt"]


def test_mkdir_p_and_rm_keep_their_word_on_top_of_the_os_like_api(base: str, export_path: ExportPath,
                                                                   tmp_path: Path) -> None:
    """The path API's makedirs refuses an existing directory and its remove a directory (as ``os``);
    the commands still answer as mkdir(1) and rm(1) do, and a tree put twice is merged."""
    (export_path.local / "d/e").mkdir(parents=True)
    run("mkdir", "-p", f"{base}/d/e")
    p = run("mkdir", f"{base}/d/e", ok=False)
    assert p.returncode == 1 and p.stderr.endswith("d/e: File exists (NFS4ERR_EXIST)\n")
    p = run("rm", f"{base}/d", ok=False)
    assert p.returncode == 1 and p.stderr.endswith("/d: Is a directory (NFS4ERR_ISDIR)\n")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub/f").write_bytes(b"f")
    run("put", "-r", str(tree), f"{base}/d/")
    run("put", "-r", str(tree), f"{base}/d/")
    assert (export_path.local / "d/tree/sub/f").read_bytes() == b"f"
    run("rm", "-d", f"{base}/d/e")
    run("rm", "-r", f"{base}/d")
    assert list(export_path.local.iterdir()) == []
