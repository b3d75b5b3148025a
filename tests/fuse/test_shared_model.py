"""A model-based random test of two clients: each step runs on one of two mounts of one export (two
NFS clients), chosen at random, and on a local directory; after it, both mounts must show what the
local directory shows, as close-to-open promises.

What each mount is asked is what close-to-open covers: an open of a name (after the other client
closed it) sees the new data, size and mode; a listing shows the names there are now; what a failed
call says is the errno a local file system gives. A stat() without an open may show attributes as
old as the attribute cache allows, so the comparison opens every file. Names keep their type (file
or directory) and directories are not renamed: a name that changes that way under another client may
be followed as it was until the directory's attributes expire, as on the Linux client.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from pynfsrdma._testbed.ganesha import Ganesha

pytestmark = pytest.mark.fuse

# a name is a file or a directory for the whole run (a name that changes type under another client
# may be followed as its old type until the directory's attributes expire, as on the Linux client)
FILES = st.sampled_from(["a", "b", "d/a", "d/b", "d/e/a", "e"])
DIRS = st.sampled_from(["d", "d/e"])
SIDES = st.sampled_from([0, 1])
DATA = st.binary(max_size=40_000).map(lambda b: b * (1 + len(b) % 3))
SAME = {errno.EEXIST: errno.ENOTEMPTY}  # POSIX lets rmdir/rename of a non-empty directory say either


def outcome(fn: Callable[[Path], Any], root: Path) -> Any:
    try:
        return ("ok", fn(root))
    except OSError as e:
        return ("err", SAME.get(e.errno or 0, e.errno))


def seen(root: Path) -> dict[str, tuple[Any, ...]]:
    """The tree below ``root`` as one client sees it through opens: each name listed, each file
    opened, read and fstat'ed (type, and for files mode, size and data)."""
    out: dict[str, tuple[Any, ...]] = {}
    todo = [""]
    while todo:
        rel = todo.pop()
        for name in sorted(os.listdir(root / rel)):
            p = f"{rel}/{name}" if rel else name
            fd = os.open(root / p, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                st_ = os.fstat(fd)
                if stat.S_ISDIR(st_.st_mode):
                    out[p] = ("dir",)
                    todo.append(p)
                else:
                    data = b"".join(iter(lambda fd=fd: os.read(fd, 1 << 20), b""))
                    out[p] = ("file", stat.S_IMODE(st_.st_mode), st_.st_size, data)
            finally:
                os.close(fd)
    return out


def make_machine(sides: tuple[Path, Path], ref: Path) -> type[RuleBasedStateMachine]:
    class TwoClientsVersusLocal(RuleBasedStateMachine):
        succeeded = 0
        crossed = 0  # steps whose result the other client was the first to see

        @initialize()
        def clean(self) -> None:
            for root in (sides[0], ref):
                for p in root.iterdir():
                    if p.is_dir() and not p.is_symlink():
                        shutil.rmtree(p)
                    else:
                        p.unlink()
            self.last = 0

        def on(self, side: int, fn: Callable[[Path], Any]) -> None:
            a, b = outcome(fn, sides[side]), outcome(fn, ref)
            assert a == b, (side, a, b)
            if a[0] == "ok":
                TwoClientsVersusLocal.succeeded += 1
                if side != self.last:
                    TwoClientsVersusLocal.crossed += 1
            self.last = side

        @rule(side=SIDES, p=FILES, data=DATA)
        def write(self, side: int, p: str, data: bytes) -> None:
            self.on(side, lambda r: (r / p).write_bytes(data))

        @rule(side=SIDES, p=FILES, data=st.binary(min_size=1, max_size=3000))
        def append(self, side: int, p: str, data: bytes) -> None:
            def go(r: Path) -> None:
                with open(r / p, "ab") as f:
                    f.write(data)

            self.on(side, go)

        @rule(side=SIDES, p=FILES, off=st.integers(0, 60_000), data=st.binary(min_size=1, max_size=3000))
        def pwrite(self, side: int, p: str, off: int, data: bytes) -> None:
            def go(r: Path) -> None:
                fd = os.open(r / p, os.O_RDWR)
                try:
                    os.pwrite(fd, data, off)
                finally:
                    os.close(fd)

            self.on(side, go)

        @rule(side=SIDES, p=FILES)
        def read(self, side: int, p: str) -> None:
            self.on(side, lambda r: (r / p).read_bytes())

        # (through a descriptor: a truncate(2) or chmod(2) by a name another client removed or
        # renamed may reach the file it led to until the directory's attributes expire)
        @rule(side=SIDES, p=FILES, size=st.integers(0, 60_000))
        def truncate(self, side: int, p: str, size: int) -> None:
            def go(r: Path) -> None:
                fd = os.open(r / p, os.O_WRONLY)
                try:
                    os.ftruncate(fd, size)
                finally:
                    os.close(fd)

            self.on(side, go)

        @rule(side=SIDES, p=FILES, mode=st.sampled_from([0o600, 0o644, 0o755, 0o640]))
        def chmod(self, side: int, p: str, mode: int) -> None:
            def go(r: Path) -> None:
                fd = os.open(r / p, os.O_RDONLY)
                try:
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)

            self.on(side, go)

        @rule(side=SIDES, p=DIRS)
        def mkdir(self, side: int, p: str) -> None:
            self.on(side, lambda r: os.mkdir(r / p))

        @rule(side=SIDES, p=DIRS)
        def rmdir(self, side: int, p: str) -> None:
            self.on(side, lambda r: os.rmdir(r / p))

        @rule(side=SIDES, p=FILES)
        def unlink(self, side: int, p: str) -> None:
            self.on(side, lambda r: os.unlink(r / p))

        @rule(side=SIDES, src=FILES, dst=FILES)
        def rename(self, side: int, src: str, dst: str) -> None:
            self.on(side, lambda r: os.rename(r / src, r / dst))

        @rule(side=SIDES, p=DIRS)
        def listdir(self, side: int, p: str) -> None:
            self.on(side, lambda r: sorted(os.listdir(r / p)))

        @invariant()
        def both_clients_see_the_local_tree(self) -> None:
            want = seen(ref)
            for root in sides:
                assert seen(root) == want, root

    return TwoClientsVersusLocal


def test_two_clients_taking_turns_see_what_a_local_directory_holds(
    mount_export: Callable[..., Any], ganesha: Ganesha, tmp_path: Path
) -> None:
    d = ganesha.new_directory(prefix="model2-")
    a, b = mount_export(), mount_export()
    ref = tmp_path / "ref"
    ref.mkdir()
    machine = make_machine((a.path / d.local.name, b.path / d.local.name), ref)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
    # the run did real work, and often on the client that did not do the step before
    assert machine.succeeded > 40 and machine.crossed > 15, (machine.succeeded, machine.crossed)
