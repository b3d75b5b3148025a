"""Ordinary tools on the mount, compared with the same work on a local directory."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.fuse


def sh(script: str, cwd: Path) -> str:
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LC_ALL": "C", "TZ": "UTC"},
    )
    assert r.returncode == 0, f"{script!r} in {cwd}: {r.stderr}"
    return r.stdout


BIG = bytes(range(256)) * (12 * 1024) + b"tail-of-big-file"
FIXED_NS = 1_600_000_000_000_000_000


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    diff = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
    assert not diff, "\n".join(f"{k}: mount {x} != local {y}" for k, (x, y) in diff.items())


def make_tree(root: Path) -> None:
    (root / "a/b/c").mkdir(parents=True)
    (root / "a/file.txt").write_text("hello\n" * 1000)
    (root / "a/b/big.bin").write_bytes(BIG)
    (root / "a/b/c/empty").write_bytes(b"")
    (root / "a/exec.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "a/exec.sh", 0o755)
    os.chmod(root / "a/b/c", 0o700)
    os.symlink("b/big.bin", root / "a/link")
    os.link(root / "a/file.txt", root / "a/hard.txt")
    for p in root.rglob("*"):
        if not p.is_symlink():  # NFS-Ganesha (VFS) answers OK to SETATTR of a symlink's times, sets none
            os.utime(p, ns=(FIXED_NS, FIXED_NS + len(p.name)))
    os.utime(root, ns=(FIXED_NS, FIXED_NS))  # `tar tv` lists it to the minute


SCRIPT = """
cp -a src copy
tar cf t.tar src
mkdir x && tar xf t.tar -C x
tar tvf t.tar | grep -v '^l' | sort > t.list && rm t.tar
mv copy/a/file.txt copy/a/moved.txt
ln copy/a/moved.txt copy/a/again.txt
ln -s ../moved.txt copy/a/b/rel-link
chmod 640 copy/a/moved.txt
chmod u+s,g+w copy/a/exec.sh
chown 1234:5678 copy/a/b/big.bin
touch -d '2001-02-03 04:05:06' copy/a/b/c/empty
truncate -s 100000 copy/a/moved.txt
truncate -s 10 copy/a/b/big.bin
rm copy/a/hard.txt
mkdir -p copy/new/deep && rmdir copy/new/deep
echo appended >> copy/a/exec.sh
"""


def test_cp_tar_mv_ln_chmod_chown_touch_truncate(work_dir: Any, snap: Any) -> None:
    for root in (work_dir.mnt, work_dir.ref):
        make_tree(root / "src")
        sh(SCRIPT, root)
    assert_same(snap(work_dir.mnt, times=False), snap(work_dir.ref, times=False))
    for sub in ("src", "x", "copy/a/b/c"):  # times set by the tools (cp -a, tar x, touch -d)
        assert_same(snap(work_dir.mnt / sub), snap(work_dir.ref / sub))
    # and the server holds it (what NFS wrote is what the export's disk has)
    assert_same(
        snap(work_dir.local, owners=False, times=False), snap(work_dir.ref, owners=False, times=False)
    )
    ls_mnt = sh("ls -lR --time-style=+ copy", work_dir.mnt)
    ls_ref = sh("ls -lR --time-style=+ copy", work_dir.ref)
    assert ls_mnt == ls_ref


def test_git_init_and_commit(work_dir: Any) -> None:
    script = """
git init -q -b main repo && cd repo
git config user.email t@example.invalid && git config user.name T
seq 1 5000 > numbers && mkdir sub && echo x > sub/x
git add -A && git commit -q -m first
sed -i 's/^1$/one/' numbers && git mv sub/x sub/y
git commit -q -am second
git fsck --strict 2>&1
git log --format=%s
git ls-files
git cat-file -p HEAD:numbers | sed -n 1,3p
"""
    out = sh(script, work_dir.mnt)
    assert sh(script, work_dir.ref) == out
    assert "second\nfirst\n" in out and "sub/y" in out and out.endswith("one\n2\n3\n")


def test_sqlite_create_and_query(work_dir: Any) -> None:
    results = []
    for root in (work_dir.mnt, work_dir.ref):
        db = sqlite3.connect(root / "t.db")
        db.execute("create table t (k integer primary key, v text)")
        with db:
            db.executemany("insert into t values (?, ?)", [(i, f"v{i}" * (i % 50)) for i in range(5000)])
        db.execute("create index tv on t(v)")
        with db:
            db.execute("delete from t where k % 7 = 0")
        db.execute("vacuum")
        results.append(db.execute("select count(*), sum(length(v)), max(k) from t").fetchall())
        db.close()
        r = subprocess.run(
            ["sqlite3", str(root / "t.db"), "pragma integrity_check; select count(*) from t;"],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(r.stdout)
    assert results[0] == results[2] and results[1] == results[3] == "ok\n4285\n"
    assert (work_dir.mnt / "t.db").read_bytes() == (work_dir.local / "t.db").read_bytes()
