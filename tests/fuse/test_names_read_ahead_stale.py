"""Names read ahead (``_fuse/cache.py``, NameReadAhead) that went stale before the program asked for
them: a directory larger than a program stats within ``acregmin`` (or a program that pauses) is
read again from its start, rather than one LOOKUP sent for each name still to come.

Counts come from the daemon itself (``pynfsrdma stats``); the files are made on the server's disk.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
from test_names_read_ahead import counts, delta, make_files, same

from pynfsrdma._client.attributes import FileAttrs, record_of
from pynfsrdma._fuse.cache import READ_AHEAD_AFTER, READ_AHEAD_PER_NAME, AttrTimeouts, NameReadAhead

pytestmark = pytest.mark.fuse

ACREGMIN = 1  # seconds (the mount option's unit)


def test_names_whose_entries_went_stale_are_read_again_not_looked_up(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    # (several of the server's pages: all of them are read while the first half is statted)
    n = 3000
    make_files(export_path.local / "d", n)
    m = mount_export(
        f"acregmin={ACREGMIN},acregmax={ACREGMIN},acdirmin={ACREGMIN},acdirmax={ACREGMIN}",
        subdir=export_path.remote.removeprefix("/export/"),
    )
    os.lstat(m.path / "d")
    for i in range(n // 2):
        os.lstat(m.path / "d" / f"f{i:05d}")
    # every entry read ahead is now older than the attribute cache allows
    time.sleep(ACREGMIN * 1.5)
    before, cache_before = counts(m.path)
    ours = [os.lstat(m.path / "d" / f"f{i:05d}") for i in range(n // 2, n)]
    after, cache_after = counts(m.path)
    compounds, cache = delta(after, before), delta(cache_after, cache_before)
    servers = [os.lstat(export_path.local / "d" / f"f{i:05d}") for i in range(n // 2, n)]
    wrong = [i for i in range(len(ours)) if not same(ours[i], servers[i])]
    assert not wrong, [(ours[i], servers[i]) for i in wrong[:3]]
    # the second half is answered from the directory read again, not by a LOOKUP per name: the
    # program sees its stats cost a few COMPOUNDs per page, as for the first half
    assert compounds.get("READDIR", 0) >= 3, compounds
    assert compounds.get("LOOKUP", 0) <= n // (2 * READ_AHEAD_PER_NAME), (compounds, cache)
    assert cache.get("lookups_read_ahead", 0) + compounds["LOOKUP"] >= n // 2, (cache, compounds)


def test_a_stale_entry_of_a_directory_read_to_its_end_reads_it_again_from_its_start() -> None:
    timeouts = AttrTimeouts(3.0, 60.0, 30.0, 60.0)
    ahead = NameReadAhead()
    for _ in range(READ_AHEAD_AFTER):
        ahead.needed_lookup()
    entries: dict[str, Any] = {f"f{i}": (b"fh", record_of(FileAttrs(fileid=100 + i)), 0.0, 0, 7) for i in range(10)}
    ahead.page(entries, 10, b"verifier", True)
    assert ahead.has("f1", 1.0, timeouts) and not ahead.wants_page()
    # three seconds later the entries are stale: dropped, and the directory is read from cookie 0
    assert not ahead.has("f2", 4.0, timeouts)
    assert "f2" not in ahead.entries and (ahead.cookie, ahead.eof) == (0, False) and ahead.wants_page()
    # a directory that cannot be read is not read again
    ahead.cannot_read()
    assert not ahead.has("f3", 4.0, timeouts) and not ahead.wants_page()
