"""A directory's names read ahead of the LOOKUPs a program sends for them one after another
(``_fuse/cache.py``, NameReadAhead): what ``lstat`` of every name of a cold directory costs in
COMPOUNDs, that every answer is the server's, that a few names looked up in a large directory read
little of it, and that opens still ask the server (close-to-open).

Counts come from the daemon itself (``pynfsrdma stats``), read before and after the work on a mount
of its own; the files are made, changed and removed on the server's disk, as another client would.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma import _control_socket as control_socket
from pynfsrdma._client.attributes import FileAttrs, record_of
from pynfsrdma._fuse.cache import READ_AHEAD_AFTER, READ_AHEAD_PER_NAME, AttrTimeouts, NameReadAhead
from pynfsrdma._fuse.channel import CHANNELS

pytestmark = pytest.mark.fuse


def counts(mountpoint: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(COMPOUNDs by main operation so far, the cache's counts)."""
    st = control_socket.query(str(mountpoint), "stats")
    return {k: v["calls"] for k, v in st["operations"].items()}, dict(st["cache"])


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def make_files(d: Path, n: int) -> None:
    """``n`` files of different sizes and modes, a few directories and symbolic links among them."""
    d.mkdir()
    for i in range(n):
        p = d / f"f{i:05d}"
        if i % 50 == 7:
            p.mkdir()
        elif i % 50 == 9:
            p.symlink_to(f"target-{i}")
        else:
            p.write_bytes(b"x" * (i % 300))
            p.chmod(0o600 + (i % 8))


def same(ours: os.stat_result, servers: os.stat_result) -> bool:
    return (ours.st_mode, ours.st_size, ours.st_mtime_ns, ours.st_nlink, ours.st_uid) == (
        servers.st_mode, servers.st_size, servers.st_mtime_ns, servers.st_nlink, servers.st_uid
    ) and (ours.st_size == servers.st_size or stat.S_ISDIR(ours.st_mode))


@pytest.mark.parametrize("channel", CHANNELS)
def test_lstat_of_every_name_of_a_cold_directory_reads_its_names_ahead(
    mount_export: Callable[..., Any], export_path: Any, channel: str
) -> None:
    n = 1500
    make_files(export_path.local / "d", n)
    m = mount_export(f"channel={channel}", subdir=export_path.remote.removeprefix("/export/"))
    os.lstat(m.path / "d")
    before, cache_before = counts(m.path)
    ours = [os.lstat(m.path / "d" / f"f{i:05d}") for i in range(n)]
    after, cache_after = counts(m.path)
    compounds, cache = delta(after, before), delta(cache_after, cache_before)
    servers = [os.lstat(export_path.local / "d" / f"f{i:05d}") for i in range(n)]
    wrong = [i for i in range(n) if not same(ours[i], servers[i])]
    assert not wrong, [(ours[i], servers[i]) for i in wrong[:3]]
    # a LOOKUP each for the first names, then the directory's pages (a READDIR each, the
    # directory's attributes with it) answer the rest: nowhere near one LOOKUP per name
    assert compounds.get("READDIR", 0) >= 1, compounds
    assert READ_AHEAD_AFTER <= compounds.get("LOOKUP", 0) < n // 5, compounds
    assert cache.get("lookups_read_ahead", 0) + compounds["LOOKUP"] >= n, (cache, compounds)


def test_every_name_of_a_directory_of_many_pages_needs_no_lookup_where_a_page_ends(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    # (the server's READDIR pages hold a few hundred entries: this directory takes several)
    n = 3000
    make_files(export_path.local / "d", n)
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    os.lstat(m.path / "d")
    before, cache_before = counts(m.path)
    for i in range(n):
        os.lstat(m.path / "d" / f"f{i:05d}")
    after, cache_after = counts(m.path)
    compounds, cache = delta(after, before), delta(cache_after, cache_before)
    # the first names are looked up; then every name answered from the pages lets more be read
    # ahead, as a LOOKUP does (the server's order is not the names': the ones asked for next are
    # spread over pages not read yet): far fewer LOOKUPs than one per READ_AHEAD_PER_NAME names
    assert compounds.get("READDIR", 0) >= 3, compounds
    assert compounds.get("LOOKUP", 0) <= n // (2 * READ_AHEAD_PER_NAME), (compounds, cache)
    assert cache.get("lookups_read_ahead", 0) + compounds["LOOKUP"] >= n, (cache, compounds)


def test_names_answered_from_a_page_let_the_next_page_be_read() -> None:
    ahead = NameReadAhead()
    for _ in range(READ_AHEAD_AFTER):
        ahead.needed_lookup()
    assert ahead.wants_page()
    timeouts = AttrTimeouts(3.0, 60.0, 30.0, 60.0)
    entries: dict[str, Any] = {f"f{i}": (b"fh", record_of(FileAttrs(fileid=100 + i)), 0.0, 0, 7) for i in range(300)}
    ahead.page(entries, 300, bytes(8), False)
    # more entries read than the LOOKUPs alone allow: no page until its names are asked for
    assert ahead.read > READ_AHEAD_PER_NAME * READ_AHEAD_AFTER and not ahead.wants_page()
    for i in range(300 // READ_AHEAD_PER_NAME - READ_AHEAD_AFTER):
        assert ahead.take(f"f{i}", 7, 1.0, timeouts) is not None
        assert not ahead.wants_page()
    assert ahead.take("f299", 7, 1.0, timeouts) is not None
    assert ahead.wants_page()


def test_a_few_names_of_a_large_directory_read_little_of_it(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    n = 3000
    make_files(export_path.local / "d", n)
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    os.lstat(m.path / "d")
    before, _ = counts(m.path)
    for i in range(0, 20 * 97, 97):  # twenty names
        assert same(os.lstat(m.path / "d" / f"f{i:05d}"), os.lstat(export_path.local / "d" / f"f{i:05d}"))
    after, _ = counts(m.path)
    compounds = delta(after, before)
    # the first names are looked up; what is read ahead after them is bounded by the LOOKUPs the
    # directory needed (a page or two, not the 3,000 entries)
    assert compounds.get("LOOKUP", 0) >= READ_AHEAD_AFTER, compounds
    assert compounds.get("READDIR", 0) <= 3, compounds


def test_opens_of_names_read_ahead_find_what_another_client_did_since(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    n = 200  # (one page holds them all: every name is read ahead after the first LOOKUPs)
    d = export_path.local / "d"
    make_files(d, n)
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    os.lstat(m.path / "d")
    for i in range(2 * READ_AHEAD_AFTER):
        os.lstat(m.path / "d" / f"f{i:05d}")
    before, cache_before = counts(m.path)
    # another client replaces one file (a rename over it: a new file) and removes another, both
    # read ahead here and never looked up
    (d / "new").write_bytes(b"the other client's data")
    os.rename(d / "new", d / "f00100")
    os.unlink(d / "f00101")
    # an open goes to the server by its name (close-to-open) even when the lookup before it was
    # answered from the page: the new file's data, and no file where it was removed
    assert (m.path / "d" / "f00100").read_bytes() == b"the other client's data"
    assert os.stat(m.path / "d" / "f00100").st_size == len(b"the other client's data")
    with pytest.raises(FileNotFoundError) as e:
        open(m.path / "d" / "f00101", "rb")  # noqa: SIM115
    assert e.value.errno == errno.ENOENT
    after, cache_after = counts(m.path)
    cache = delta(cache_after, cache_before)
    assert cache.get("lookups_read_ahead", 0) >= 1, cache  # (the names were answered from the page)
    assert "READDIR" not in delta(after, before), delta(after, before)
