"""A model-based random test: the same operations on the mount and on a local directory, compared
(contents, types, modes, sizes, link counts, owners, and the errno of every failed call) after each step."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

pytestmark = pytest.mark.fuse

PATHS = st.sampled_from(["a", "b", "d", "d/a", "d/b", "d/e", "d/e/a", "e"])
DATA = st.binary(max_size=70_000).map(lambda b: b * (1 + len(b) % 3))
# POSIX lets rmdir/rename of a non-empty directory say either
SAME = {errno.EEXIST: errno.ENOTEMPTY}


def outcome(fn: Callable[[Path], Any], root: Path) -> Any:
    try:
        return ("ok", fn(root))
    except OSError as e:
        return ("err", SAME.get(e.errno or 0, e.errno))


def make_machine(mnt: Path, ref: Path, snap: Callable[..., Any]) -> type[RuleBasedStateMachine]:
    class MountVersusLocal(RuleBasedStateMachine):
        succeeded = 0  # calls that worked (on both sides), over all runs: the test did real work

        @initialize()
        def clean(self) -> None:
            for root in (mnt, ref):
                for p in root.iterdir():
                    if p.is_dir() and not p.is_symlink():
                        shutil.rmtree(p)
                    else:
                        p.unlink()

        def both(self, fn: Callable[[Path], Any]) -> None:
            a, b = outcome(fn, mnt), outcome(fn, ref)
            assert a == b, (a, b)
            if a[0] == "ok":
                MountVersusLocal.succeeded += 1

        @rule(p=PATHS, data=DATA)
        def write(self, p: str, data: bytes) -> None:
            self.both(lambda r: (r / p).write_bytes(data))

        @rule(p=PATHS, data=DATA)
        def append(self, p: str, data: bytes) -> None:
            def go(r: Path) -> None:
                with open(r / p, "ab") as f:
                    f.write(data)

            self.both(go)

        @rule(p=PATHS, off=st.integers(0, 200_000), data=st.binary(min_size=1, max_size=5000))
        def pwrite(self, p: str, off: int, data: bytes) -> None:
            def go(r: Path) -> None:
                fd = os.open(r / p, os.O_RDWR)
                try:
                    os.pwrite(fd, data, off)
                finally:
                    os.close(fd)

            self.both(go)

        @rule(p=PATHS, off=st.integers(0, 200_000), n=st.integers(0, 100_000))
        def pread(self, p: str, off: int, n: int) -> None:
            def go(r: Path) -> bytes:
                fd = os.open(r / p, os.O_RDONLY)
                try:
                    return os.pread(fd, n, off)
                finally:
                    os.close(fd)

            self.both(go)

        @rule(p=PATHS, size=st.integers(0, 150_000))
        def truncate(self, p: str, size: int) -> None:
            self.both(lambda r: os.truncate(r / p, size))

        @rule(p=PATHS, mode=st.sampled_from([0o700, 0o755, 0o640, 0o4755, 0o1777]))
        def chmod(self, p: str, mode: int) -> None:
            self.both(lambda r: os.chmod(r / p, mode))

        @rule(p=PATHS)
        def mkdir(self, p: str) -> None:
            self.both(lambda r: os.mkdir(r / p))

        @rule(p=PATHS)
        def rmdir(self, p: str) -> None:
            self.both(lambda r: os.rmdir(r / p))

        @rule(p=PATHS)
        def unlink(self, p: str) -> None:
            self.both(lambda r: os.unlink(r / p))

        @rule(src=PATHS, dst=PATHS)
        def rename(self, src: str, dst: str) -> None:
            self.both(lambda r: os.rename(r / src, r / dst))

        @rule(src=PATHS, dst=PATHS)
        def link(self, src: str, dst: str) -> None:
            self.both(lambda r: os.link(r / src, r / dst))

        @rule(dest=st.sampled_from(["a", "../a", "d/e", "nowhere"]), p=PATHS)
        def symlink(self, dest: str, p: str) -> None:
            self.both(lambda r: os.symlink(dest, r / p))

        @rule(p=PATHS)
        def listdir(self, p: str) -> None:
            self.both(lambda r: sorted(os.listdir(r / p)))

        @invariant()
        def same_tree(self) -> None:
            assert snap(mnt, times=False) == snap(ref, times=False)

    return MountVersusLocal


def test_mount_behaves_like_a_local_directory(work_dir: Any, snap: Any) -> None:
    machine = make_machine(work_dir.mnt, work_dir.ref, snap)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=25, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
    # hypothesis draws runs of any length up to the step count, often short ones: over 25 runs as
    # few as 25 calls worked on both sides; a model where (almost) nothing works does no real work
    assert machine.succeeded > 10, machine.succeeded
