"""A mount other users share (root's mount serves everyone, as a kernel NFS mount does) enforces
permissions for each of them: another user cannot reach inside a directory they may not search
through names root has looked up, nor open a FIFO its mode forbids; the owner still can. By
default the kernel checks the mode bits (default_permissions); with nodefault_permissions the
server checks each name as the caller (the kernel keeps none), and FIFOs are not checked. Each
check runs as uid 65534 in Debian's own Python (not our virtualenv: the child only makes os calls),
on both FUSE channels."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._testbed.ganesha import Ganesha

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c"]

# Every call a user makes on a file inside a directory, one line each: the call and what came of it.
INSIDE = f"""
import os, sys
d, out = sys.argv[1], sys.argv[2]
f = os.path.join(d, "f")
calls = [
    ("truncate", lambda: os.truncate(f, 1)),
    ("chmod", lambda: os.chmod(f, 0o600)),
    ("chown", lambda: os.chown(f, {NOBODY}, {NOBODY})),
    ("link", lambda: os.link(f, os.path.join(out, "l"))),
    ("open", lambda: os.close(os.open(f, os.O_RDWR))),
]
for name, call in calls:
    try:
        call()
        print(name, "allowed")
    except OSError as e:
        print(name, e.strerror)
"""

FIFO = """
import os, sys
for path in sys.argv[1:]:
    for name, flags in (("read", os.O_RDONLY), ("write", os.O_WRONLY)):
        try:
            os.close(os.open(path, flags | os.O_NONBLOCK))
            print(os.path.basename(path), name, "allowed")
        except OSError as e:
            print(os.path.basename(path), name, e.strerror)
"""


def as_nobody(code: str, *args: Any) -> list[str]:
    r = subprocess.run([*AS_NOBODY, code, *map(str, args)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


CHANNELS = ["channel=native", "channel=pyfuse3"]
BOTH_WAYS = [*CHANNELS, *(f"{c},nodefault_permissions" for c in CHANNELS)]


@pytest.fixture
def shared_dir(request: pytest.FixtureRequest, mount_export: Callable[..., Any], ganesha: Ganesha) -> tuple[Path, Path]:
    """A fresh directory every user may use, through a mount made by root (with the options of the
    test's parameter), and the same directory on the server's disk."""
    d = ganesha.new_directory(prefix="others-")
    os.chmod(d.local, 0o777)
    m = mount_export(request.param)
    return m.path / d.local.name, d.local


def make_inside(disk: Path, name: str, owner: int, mode: int) -> None:
    """A directory ``name`` of ``owner`` with ``mode`` holding a file ``f`` of uid 65534, mode 0666."""
    (disk / name).mkdir()
    (disk / name / "f").write_bytes(b"data")
    os.chown(disk / name / "f", NOBODY, NOBODY)
    os.chmod(disk / name / "f", 0o666)
    os.chown(disk / name, owner, owner)
    os.chmod(disk / name, mode)


@pytest.mark.parametrize("shared_dir", BOTH_WAYS, indirect=True)
def test_no_way_into_a_directory_without_search_permission_through_names_root_looked_up(
    shared_dir: tuple[Path, Path],
) -> None:
    mnt, disk = shared_dir
    make_inside(disk, "roots", 0, 0o700)
    (disk / "out").mkdir(mode=0o777)
    os.chmod(disk / "out", 0o777)
    os.stat(mnt / "roots" / "f")  # root looks the name up: the kernel keeps it
    assert as_nobody(INSIDE, mnt / "roots", mnt / "out") == [
        "truncate Permission denied",
        "chmod Permission denied",
        "chown Permission denied",
        "link Permission denied",
        "open Permission denied",
    ]
    st = os.stat(disk / "roots" / "f")
    assert (st.st_size, st.st_mode & 0o777, st.st_nlink) == (4, 0o666, 1)
    assert not (disk / "out" / "l").exists()


@pytest.mark.parametrize("shared_dir", BOTH_WAYS, indirect=True)
def test_the_owner_of_a_private_directory_still_reaches_inside(shared_dir: tuple[Path, Path]) -> None:
    mnt, disk = shared_dir
    make_inside(disk, "nobodys", NOBODY, 0o700)
    (disk / "out").mkdir()
    os.chmod(disk / "out", 0o777)
    os.stat(mnt / "nobodys" / "f")
    assert as_nobody(INSIDE, mnt / "nobodys", mnt / "out") == [
        "truncate allowed",
        "chmod allowed",
        "chown allowed",
        "link allowed",
        "open allowed",
    ]
    st = os.stat(disk / "nobodys" / "f")
    assert (st.st_size, st.st_mode & 0o777, st.st_nlink) == (1, 0o600, 2)


@pytest.mark.parametrize("shared_dir", CHANNELS, indirect=True)
def test_a_fifo_opens_only_as_its_mode_allows(shared_dir: tuple[Path, Path]) -> None:
    mnt, disk = shared_dir
    for name, owner, mode in (("roots", 0, 0o600), ("readable", 0, 0o644), ("nobodys", NOBODY, 0o600)):
        os.mkfifo(disk / name)
        os.chown(disk / name, owner, owner)
        os.chmod(disk / name, mode)
    # a write-only open of a FIFO nobody reads fails with ENXIO once it is allowed
    assert as_nobody(FIFO, mnt / "roots", mnt / "readable", mnt / "nobodys") == [
        "roots read Permission denied",
        "roots write Permission denied",
        "readable read allowed",
        "readable write Permission denied",
        "nobodys read allowed",
        "nobodys write No such device or address",
    ]
