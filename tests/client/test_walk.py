"""``walk`` of the blocking and the async client gives what ``os.walk`` gives on the export's own
directory: the same directories, names and order rule, pruning top down, links walked into only when
asked, and an error handed to ``onerror``."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pynfsrdma
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

Walked = list[tuple[str, list[str], list[str]]]


def _tree(root: Path) -> None:
    for d in ("t/a/deep", "t/skip/below", "t/b"):
        (root / d).mkdir(parents=True)
    for f in ("t/top.txt", "t/a/one", "t/a/deep/two", "t/skip/below/three", "t/b/four"):
        (root / f).write_bytes(b"x")
    (root / "t/to_a").symlink_to("a")


def _local(root: Path, top: str, **kw: Any) -> Walked:
    """os.walk of the export's directory, its paths written as the client's."""
    out = []
    for path, dirs, files in os.walk(root / top.lstrip("/"), **kw):
        if kw.get("topdown", True) and "skip" in dirs:
            dirs.remove("skip")
        out.append(("/" + os.path.relpath(path, root), sorted(dirs), sorted(files)))
    return out


def _pruned(walk: Iterator[tuple[str, list[str], list[str]]]) -> Walked:
    out = []
    for path, dirs, files in walk:
        if "skip" in dirs:
            dirs.remove("skip")
        out.append((path, sorted(dirs), sorted(files)))
    return out


def _in_order(walked: Walked, topdown: bool) -> bool:
    """Each directory comes after its parent top down, before it bottom up."""
    seen = [p for p, _, _ in walked]
    return all(
        (seen.index(posixpath.dirname(p)) < i) == topdown
        for i, p in enumerate(seen) if posixpath.dirname(p) in seen
    )


@pytest.fixture
def nfs(ganesha: Ganesha, export_path: ExportPath) -> Iterator[pynfsrdma.SyncClient]:
    _tree(export_path.local)
    with pynfsrdma.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as client:
        yield client


def test_the_blocking_walk_is_os_walk(nfs: pynfsrdma.SyncClient, export_path: ExportPath) -> None:
    root = export_path.local
    top_down = _pruned(nfs.walk("/t"))
    assert sorted(top_down) == sorted(_local(root, "/t")) and _in_order(top_down, True)
    assert "/t/skip/below" not in [p for p, _, _ in top_down]  # pruned, as the caller asked
    bottom_up = [(p, sorted(d), sorted(f)) for p, d, f in nfs.walk("/t", topdown=False, followlinks=True)]
    local = _local(root, "/t", topdown=False, followlinks=True)
    assert sorted(bottom_up) == sorted(local) and _in_order(bottom_up, False)
    assert "/t/to_a/deep" in [p for p, _, _ in bottom_up]  # the link, walked into when asked


async def test_the_async_walk_is_os_walk(ganesha: Ganesha, export_path: ExportPath) -> None:
    _tree(export_path.local)
    root = export_path.local
    async with pynfsrdma.Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        top_down = []
        async for path, dirs, files in nfs.walk("/t"):
            if "skip" in dirs:
                dirs.remove("skip")
            top_down.append((path, sorted(dirs), sorted(files)))
        assert sorted(top_down) == sorted(_local(root, "/t")) and _in_order(top_down, True)
        bottom_up = [(p, sorted(d), sorted(f)) async for p, d, f in nfs.walk("/t", topdown=False)]
        local = _local(root, "/t", topdown=False)
        assert sorted(bottom_up) == sorted(local) and _in_order(bottom_up, False)
        assert "/t/to_a/deep" not in [p for p, _, _ in bottom_up]  # a link, not walked into unasked
        errors: list[OSError] = []
        assert [x async for x in nfs.walk("/nowhere", onerror=errors.append)] == []
        assert [isinstance(e, FileNotFoundError) for e in errors] == [True]


def test_a_listing_that_fails_goes_to_onerror_and_the_walk_ends_quietly_without_it(
        nfs: pynfsrdma.SyncClient) -> None:
    errors: list[OSError] = []
    on: Callable[[OSError], Any] = errors.append
    assert list(nfs.walk("/nowhere", onerror=on)) == [] and [isinstance(e, FileNotFoundError) for e in errors] == [True]
    assert list(nfs.walk("/nowhere")) == []
