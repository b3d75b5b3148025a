"""Names new in a directory the mount made itself, and is filling, are known absent without a LOOKUP
(cache.Listing), and what another client does in such a directory still shows: at once in one we made
and do not fill (or wrote one file into), at once after our next change there, and once our run of
changes pauses otherwise. Counts come from ``pynfsrdma stats`` (see test_small_files)."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from daemon_counts import delta, settle

from pynfsrdma._client.api import Client
from pynfsrdma._fuse.cache import LISTING_RUN, LISTING_TRUST
from pynfsrdma._testbed.ganesha import Ganesha

pytestmark = pytest.mark.fuse


def create(path: Path, data: bytes = b"") -> None:
    """As tar does: O_CREAT|O_EXCL, then the data."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def timed(windows: list[tuple[float, float]], change: Callable[..., None], *args: Any) -> None:
    """``change(*args)``, its start and end appended to ``windows`` (the daemon sees the new name's
    LOOKUP, and answers the change, between them)."""
    start = time.monotonic()
    change(*args)
    windows.append((start, time.monotonic()))


def lookups_expected(windows: list[tuple[float, float]]) -> tuple[int, int]:
    """The fewest and most LOOKUPs the daemon may send for the new names of the changes made, each
    in the system call window given, in order, in a directory we made (cache.Listing): the name of
    change k is answered without one when changes k-LISTING_RUN .. k-1 came each within
    LISTING_TRUST of the one before, and k within LISTING_TRUST of the last. The daemon's times fall
    inside the windows, so a gap is known below or above LISTING_TRUST only when both its bounds
    are; under load (a stalled daemon or caller) the gaps grow, and so does the count."""
    def below(i: int, j: int) -> bool | None:  # is the gap from window i to window j below the trust?
        shortest, longest = windows[j][0] - windows[i][1], windows[j][1] - windows[i][0]
        return True if longest < LISTING_TRUST else False if shortest >= LISTING_TRUST else None

    fewest = most = 0
    for k in range(len(windows)):
        gaps = [below(i, i + 1) for i in range(k - LISTING_RUN, k)] if k >= LISTING_RUN else [False]
        fewest += any(g is False for g in gaps)
        most += not all(g is True for g in gaps)
    return fewest, most


def other_client_writes(ganesha: Ganesha, path: str, data: bytes) -> None:
    async def go() -> None:
        async with Client.connect(ganesha.url) as nfs:
            await nfs.write_file(path, data)

    trio.run(go)


def ours_then_theirs(mount_export: Callable[..., Any], export_path: Any, ganesha: Ganesha, ours: int) -> Path:
    """A directory made through a new mount, ``ours`` files made in it by us (ours-1, ours-2 ...), then
    one ("theirs") by another client; returns the directory, through the mount."""
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    (m.path / "d").mkdir()
    for i in range(1, ours + 1):
        create(m.path / "d" / f"ours-{i}")
    other_client_writes(ganesha, f"{export_path.remote.removeprefix('/export')}/d/theirs", b"x")
    return m.path / "d"


def test_new_names_in_a_directory_we_made_are_not_looked_up(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    before, _ = settle(m.path)
    # looked up: "d" (the mount did not make the export's directory), and in each directory we made
    # the names before our changes there make a run (the first two; more when the run paused)
    (m.path / "d").mkdir()
    in_d: list[tuple[float, float]] = []
    in_sub: list[tuple[float, float]] = []
    timed(in_d, os.mkdir, m.path / "d" / "sub")
    for i in range(20):
        timed(in_d, create, m.path / "d" / f"f{i}", b"%d" % i)
        timed(in_sub, create, m.path / "d" / "sub" / f"g{i}")
    after, _ = settle(m.path)
    compounds = delta(after, before)
    (d_fewest, d_most), (sub_fewest, sub_most) = lookups_expected(in_d), lookups_expected(in_sub)
    assert 1 + d_fewest + sub_fewest <= compounds.get("LOOKUP", 0) <= 1 + d_most + sub_most, (
        compounds, in_d, in_sub)
    assert compounds["OPEN"] == 40, compounds
    # what the listing knows is there is still looked up, and found
    with pytest.raises(FileExistsError):
        create(m.path / "d" / "f3")
    assert (export_path.local / "d" / "f3").read_bytes() == b"3"
    # a name we removed or renamed away is absent again, the new one present
    os.rename(m.path / "d" / "f1", m.path / "d" / "renamed")
    os.unlink(m.path / "d" / "f2")
    create(m.path / "d" / "f1", b"again")
    create(m.path / "d" / "f2", b"again")
    assert (m.path / "d" / "renamed").read_bytes() == b"1"
    assert sorted(os.listdir(export_path.local / "d"))[:4] == ["f0", "f1", "f10", "f11"]
    assert (export_path.local / "d" / "f1").read_bytes() == b"again"
    assert (export_path.local / "d" / "renamed").read_bytes() == b"1"


@pytest.mark.parametrize("mode", ["positive", "none"])
def test_lookupcache_positive_or_none_asks_the_server_for_every_new_name(
    mount_export: Callable[..., Any], export_path: Any, mode: str
) -> None:
    m = mount_export(f"lookupcache={mode}", subdir=export_path.remote.removeprefix("/export/"))
    (m.path / "d").mkdir()
    before, _ = settle(m.path)
    for i in range(10):
        create(m.path / "d" / f"f{i}")
    compounds = delta(settle(m.path)[0], before)
    assert compounds["OPEN"] == 10, compounds
    if mode == "positive":
        assert compounds.get("LOOKUP") == 10, compounds
    else:  # nor does the kernel keep the names that exist: each use of one asks again
        assert compounds.get("LOOKUP", 0) >= 10, compounds


def test_a_file_another_client_puts_beside_one_of_ours_shows_at_once(
    mount_export: Callable[..., Any], export_path: Any, ganesha: Ganesha
) -> None:
    d = ours_then_theirs(mount_export, export_path, ganesha, ours=1)
    assert (d / "theirs").read_bytes() == b"x"


def test_another_clients_file_shows_once_we_change_the_directory_again(
    mount_export: Callable[..., Any], export_path: Any, ganesha: Ganesha
) -> None:
    d = ours_then_theirs(mount_export, export_path, ganesha, ours=2)
    # our next change in the directory finds it moved by someone else: the listing ends there
    create(d / "ours-3")
    assert (d / "theirs").read_bytes() == b"x"
    assert sorted(os.listdir(d)) == ["ours-1", "ours-2", "ours-3", "theirs"]


def test_a_directory_we_made_and_another_client_fills_shows_its_files_at_once(
    mount_export: Callable[..., Any], export_path: Any, ganesha: Ganesha
) -> None:
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    (m.path / "d").mkdir()
    other_client_writes(ganesha, f"{export_path.remote.removeprefix('/export')}/d/theirs", b"x")
    assert (m.path / "d" / "theirs").read_bytes() == b"x"
    (m.path / "e").mkdir()
    (export_path.local / "e" / "on-the-disk").write_bytes(b"y")  # (a process on the server)
    assert (m.path / "e" / "on-the-disk").read_bytes() == b"y"


def test_another_clients_file_shows_once_our_run_of_changes_pauses(
    mount_export: Callable[..., Any], export_path: Any, ganesha: Ganesha
) -> None:
    d = ours_then_theirs(mount_export, export_path, ganesha, ours=LISTING_RUN)
    # looked up from the directory itself (an open descriptor: the kernel does not look up "d" again,
    # which would show the directory's new change attribute and end the listing that way)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + LISTING_TRUST + 2.0  # and time for the lookup itself
        while True:
            try:
                fd = os.open("theirs", os.O_RDONLY, dir_fd=dfd)
            except FileNotFoundError as e:
                assert e.errno == errno.ENOENT
                assert time.monotonic() < deadline, "another client's file still unseen after acdirmin"
                time.sleep(0.1)
                continue
            assert os.read(fd, 10) == b"x"
            os.close(fd)
            break
    finally:
        os.close(dfd)
