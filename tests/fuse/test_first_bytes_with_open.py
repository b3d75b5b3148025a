"""A small file opened for reading on a mount whose kernel holds none of its pages: its first bytes
come in the OPEN's COMPOUND (a READ after the OPEN, with the open's stateid), and the kernel's READ
of them is answered from there, with no COMPOUND of its own. Close-to-open holds (another client's
change between two opens is read), a write through the mount is never hidden by bytes read before
it, and a file larger than what an OPEN reads is read as any other.

Counts come from the daemon itself (``pynfsrdma stats``: COMPOUNDs named by their main operation,
and every operation inside them), on a mount of the test's own.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from daemon_counts import delta, settle

from pynfsrdma._fuse.opens import FIRST_READ

pytestmark = pytest.mark.fuse


def cat(path: Path) -> bytes:
    return subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout


def cat_counted(mountpoint: Path, path: Path) -> tuple[bytes, dict[str, int], dict[str, int]]:
    """``cat`` of ``path``: what it printed, and the COMPOUNDs and operations it took."""
    before, ops_before = settle(mountpoint)
    data = cat(path)
    after, ops_after = settle(mountpoint)
    return data, delta(after, before), delta(ops_after, ops_before)


def test_cat_of_a_small_file_reads_it_in_the_opens_compound(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    sizes = (1, 300, 4096, 5000, 12 * 1024, FIRST_READ)
    files = {n: os.urandom(n) for n in sizes}
    for n, data in files.items():
        (export_path.local / f"f{n}").write_bytes(data)
    for n, data in files.items():
        got, compounds, ops = cat_counted(m.path, m.path / f"f{n}")
        assert got == data, n
        # one OPEN with the READ inside it (and the CLOSE, alone or with the next OPEN): no READ of its own
        assert compounds.get("OPEN") == 1 and "READ" not in compounds, (n, compounds, ops)
        assert ops.get("READ") == 1 and ops.get("OPEN") == 1, (n, compounds, ops)


def test_another_clients_change_between_two_cats_is_read(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    subdir = export_path.remote.removeprefix("/export/")
    m = mount_export(subdir=subdir, options="actimeo=0")
    other = mount_export(subdir=subdir)
    first, second = os.urandom(5000), os.urandom(5000)  # (the same size: only the data tells them apart)
    (other.path / "f").write_bytes(first)
    got, compounds, ops = cat_counted(m.path, m.path / "f")
    assert got == first
    assert "READ" not in compounds and ops.get("READ") == 1, (compounds, ops)
    (other.path / "f").write_bytes(second)
    # the kernel looks at the name again before it opens it (no attribute cache here): the change
    # attribute it brings back says the pages the kernel holds are old, and the OPEN reads again
    got, compounds, ops = cat_counted(m.path, m.path / "f")
    assert got == second
    assert "READ" not in compounds and ops.get("READ") == 1, (compounds, ops)


def test_a_write_or_truncate_through_the_mount_after_an_open_for_reading_is_read_by_that_open(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    old = os.urandom(5000)
    for name in ("w", "t"):
        (export_path.local / name).write_bytes(old)
    # another process writes part of the first page around the kernel's page cache, and closes: the
    # reader, whose OPEN read the file's bytes before, reads the page through FUSE again
    path = m.path / "w"
    reader = os.open(path, os.O_RDONLY)
    try:
        subprocess.run(["dd", f"of={path}", "bs=10", "count=1", "conv=notrunc", "oflag=direct", "status=none"],
                       input=b"new bytes!", check=True)
        assert os.pread(reader, len(old), 0) == b"new bytes!" + old[10:]
    finally:
        os.close(reader)
    assert (export_path.local / "w").read_bytes() == b"new bytes!" + old[10:]
    # a truncate through the mount, and the file made longer again: zeros after the cut
    path = m.path / "t"
    reader = os.open(path, os.O_RDONLY)
    try:
        os.truncate(path, 100)
        os.truncate(path, len(old))
        assert os.pread(reader, len(old), 0) == old[:100] + bytes(len(old) - 100)
    finally:
        os.close(reader)


def test_a_file_larger_than_an_open_reads_is_read_as_any_other(
    mount_export: Callable[..., Any], export_path: Any
) -> None:
    m = mount_export(subdir=export_path.remote.removeprefix("/export/"))
    data = os.urandom(FIRST_READ + 1)
    (export_path.local / "f").write_bytes(data)
    got, compounds, ops = cat_counted(m.path, m.path / "f")
    assert got == data
    assert compounds.get("OPEN") == 1 and ops.get("OPEN") == 1, (compounds, ops)
    assert compounds.get("READ", 0) >= 1 and ops.get("READ") == compounds["READ"], (compounds, ops)
