"""The kernel's writeback cache (``-o writeback_cache``; the default): small writes
gather in the page cache and reach the daemon as large WRITE requests, and NFS's rules stay whole.
Data is on the server when close(2) or fsync(2) returns. A size or mtime that another client changed
shows at the next open, or at the next stat once the attribute cache lets it ask. A caller who may
write a file but not read it still writes it (the kernel cannot read the rest of a page for it).

Two mounts of one export are two clients; the server's export directory on disk is a third party
that changes files behind both.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from pynfsrdma._client.attributes import FileAttrs
from pynfsrdma._control_socket import Connection
from pynfsrdma._fuse.cache import AttrTimeouts
from pynfsrdma._fuse.inodes import ROOT_INODE, InodeTable
from pynfsrdma._fuse.options import option_list, parse_options
from pynfsrdma._fuse.writeback_cache import KernelFiles, KernelInode
from pynfsrdma._proto.nfs4.const import NF4DIR
from pynfsrdma._testbed.ganesha import Ganesha

KIB = 1024
MIB = 1024 * KIB
USER = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups"]


def stats(mnt: Path) -> dict[str, Any]:
    with Connection(str(mnt)) as conn:
        report: dict[str, Any] = conn.request("stats")
    return report


def write_in_pieces(path: Path, data: bytes, piece: int, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> None:
    fd = os.open(path, flags, 0o644)
    try:
        for off in range(0, len(data), piece):
            os.write(fd, data[off : off + piece])
    finally:
        os.close(fd)


def test_the_option_turns_it_off_and_on() -> None:
    """On by default; ``nowriteback_cache`` turns it off and ``writeback_cache`` on again (the last
    one given wins); ``mount --help`` lists both; a value is refused with a one-line error."""
    assert parse_options("").writeback_cache
    assert parse_options("writeback_cache").writeback_cache
    assert not parse_options("nowriteback_cache").writeback_cache
    assert parse_options("nowriteback_cache", "writeback_cache").writeback_cache
    assert not parse_options("writeback_cache", "nowriteback_cache").writeback_cache
    assert {"writeback_cache", "nowriteback_cache"} <= set(option_list())
    with pytest.raises(ValueError, match="mount option writeback_cache takes no value"):
        parse_options("writeback_cache=1")


@pytest.mark.parametrize("options", ["writeback_cache", "nowriteback_cache", ""])
def test_small_writes_reach_the_daemon_as_large_writes(
    mount_export: Callable[..., Any], ganesha: Ganesha, options: str
) -> None:
    """4 KiB writes: with the writeback cache the daemon gets them as large requests (handed on in the
    request's buffer, none copied out of it); without it, each write as it comes (each small enough to
    be copied). Either way the data is on the server when close(2) returns. (No option: the default,
    or what PYNFSRDMA_FUSE_OPTIONS gives every mount.)"""
    d = ganesha.new_directory(prefix="wbc-")
    m = mount_export(",".join(o for o in ("channel=native", options) if o))
    data = os.urandom(4 * MIB)
    before = stats(m.path)["payload"]
    write_in_pieces(m.path / d.local.name / "f", data, 4 * KIB)
    assert (d.local / "f").read_bytes() == data  # (close-to-open: on the server at close)
    after = stats(m.path)["payload"]
    in_place = after["write_bytes_in_place"] - before["write_bytes_in_place"]
    copied = after["write_bytes_copied"] - before["write_bytes_copied"]
    if not parse_options(os.environ.get("PYNFSRDMA_FUSE_OPTIONS", ""), options).writeback_cache:
        assert copied == len(data) and in_place == 0, (in_place, copied)
    else:
        assert in_place == len(data) and copied == 0, (in_place, copied)


def test_fsync_puts_the_cached_writes_on_the_server(mount_export: Callable[..., Any], ganesha: Ganesha) -> None:
    d = ganesha.new_directory(prefix="wbc-")
    m = mount_export("writeback_cache")
    data = os.urandom(300 * KIB + 17)
    fd = os.open(m.path / d.local.name / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for off in range(0, len(data), 1000):
            os.write(fd, data[off : off + 1000])
        os.fsync(fd)
        assert (d.local / "f").read_bytes() == data  # before the close
    finally:
        os.close(fd)


def test_another_clients_appends_and_truncations_show_at_the_next_open(
    mount_export: Callable[..., Any], ganesha: Ganesha
) -> None:
    """The kernel keeps a file's size itself with the writeback cache: when another client's append,
    then truncation, moved the server's, the next open sees the server's size and data, and so does
    fstat on it (the kernel's inode is made again: ``generations`` counts it)."""
    d = ganesha.new_directory(prefix="wbc-")
    a, b = mount_export("writeback_cache"), mount_export("writeback_cache")
    fa, fb = a.path / d.local.name / "f", b.path / d.local.name / "f"
    fa.write_bytes(b"a" * 5000)
    assert fa.read_bytes() == b"a" * 5000  # (the kernel holds size and pages)
    made = stats(a.path)["cache"]["generations"]
    with open(fb, "ab") as g:
        g.write(b"b" * 3000)
    with open(fa, "rb") as r:
        assert os.fstat(r.fileno()).st_size == 8000
        assert r.read() == b"a" * 5000 + b"b" * 3000
    os.truncate(fb, 100)
    with open(fa, "rb") as r:
        assert os.fstat(r.fileno()).st_size == 100
        assert r.read() == b"a" * 100
    assert os.stat(fa).st_size == 100
    assert stats(a.path)["cache"]["generations"] >= made + 2


def test_another_clients_size_and_mtime_show_at_stat(mount_export: Callable[..., Any], ganesha: Ganesha) -> None:
    """With no attribute cache (``actimeo=0``) a stat asks the server each time: another client's
    append and mtime show at once, though the file is not opened here again."""
    d = ganesha.new_directory(prefix="wbc-")
    a, b = mount_export("actimeo=0,writeback_cache"), mount_export("writeback_cache")
    fa, fb = a.path / d.local.name / "f", b.path / d.local.name / "f"
    fa.write_bytes(b"x" * 4096)
    assert os.stat(fa).st_size == 4096
    with open(fb, "ab") as w:
        w.write(b"y" * 1000)
    assert os.stat(fa).st_size == 5096
    os.utime(fb, ns=(1_000_000_000, 2_000_000_000))
    assert os.stat(fa).st_mtime_ns == 2_000_000_000
    assert fa.read_bytes() == b"x" * 4096 + b"y" * 1000


def test_what_a_client_writes_in_small_pieces_the_other_opens_at_once(
    mount_export: Callable[..., Any], ganesha: Ganesha
) -> None:
    """Close-to-open between two mounts: a file rewritten in small writes on one (shorter than before),
    then opened on the other, which had read the old one."""
    d = ganesha.new_directory(prefix="wbc-")
    a, b = mount_export("writeback_cache"), mount_export("writeback_cache")
    fa, fb = a.path / d.local.name / "f", b.path / d.local.name / "f"
    write_in_pieces(fa, os.urandom(200 * KIB), 512)
    assert len(fb.read_bytes()) == 200 * KIB
    new = os.urandom(70 * KIB + 3)
    write_in_pieces(fa, new, 700)
    assert fb.read_bytes() == new
    assert os.stat(fb).st_size == len(new)


WRITE_ONLY = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
os.pwrite(fd, b"XY", 10)   # a part of a page the kernel holds none of
os.close(fd)
try:
    open(sys.argv[1], "rb")
except PermissionError as e:
    print("read:", e.strerror)
"""


def test_a_caller_who_may_write_but_not_read_writes_part_of_a_page(
    mount_export: Callable[..., Any], ganesha: Ganesha
) -> None:
    """Mode 0622, owned by root: another user may write, not read. The kernel would read the rest of
    the page the write covers in part, through that user's open: the open goes for writing only and
    its writes go around the page cache. Reading stays refused."""
    d = ganesha.new_directory(prefix="wbc-")
    os.chmod(d.local, 0o777)
    m = mount_export("writeback_cache")
    (d.local / "f").write_bytes(b"0123456789abcdefghij")
    os.chmod(d.local / "f", 0o622)
    r = subprocess.run([*USER, sys.executable, "-c", WRITE_ONLY, str(m.path / d.local.name / "f")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "read: Permission denied\n"
    assert (d.local / "f").read_bytes() == b"0123456789XYcdefghij"


def test_the_kernels_size_and_mtime_of_an_open_file_are_read_through_the_mount(
    mount_export: Callable[..., Any], ganesha: Ganesha
) -> None:
    """What a delegation's holder answers for (CB_GETATTR, the return of the delegation): with the
    writeback cache, a file open for writing has a size and an mtime in the kernel that neither the
    daemon nor the server has (the data is in the page cache). KernelFiles reads them through the
    mount, by the names the kernel reached the file by, and finds nothing by a name that now leads
    to another file."""
    d = ganesha.new_directory(prefix="wbc-")
    m = mount_export("writeback_cache")
    f = m.path / d.local.name / "f"
    f.write_bytes(b"")
    table = InodeTable(b"root", FileAttrs(type=NF4DIR, fileid=os.stat(m.path).st_ino), AttrTimeouts(1, 1, 1, 1), 0.0)
    top, _ = table.learn(b"dir", FileAttrs(type=NF4DIR, fileid=os.stat(f.parent).st_ino), 0.0, asked=None)
    table.named(top, ROOT_INODE, d.local.name)
    node, _ = table.learn(b"f", FileAttrs(fileid=os.stat(f).st_ino), 0.0, asked=None)
    table.named(node, top.ino, "f")

    async def invalidate(ino: int, attr_only: bool) -> None:
        raise AssertionError("no invalidation for a stat")

    files = KernelFiles(table, invalidate)
    files.mountpoint = str(m.path)
    with open(f, "r+b") as w:
        w.write(b"x" * 5000)
        w.flush()
        written = f.stat()
        assert (d.local / "f").stat().st_size == 0  # (still in the kernel's page cache)
        seen = trio.run(files.stat, node)
        assert seen == KernelInode(5000, written.st_mtime_ns)
    (f.parent / "g").write_bytes(b"another file")
    os.rename(f.parent / "g", f)  # (the name now leads to another file)
    assert trio.run(files.stat, node) is None


def test_a_name_the_other_client_renamed_opens_after_its_append(
    mount_export: Callable[..., Any], ganesha: Ganesha
) -> None:
    """B appends to ``a``, both read it and show the server's mtime, B renames it to ``b``: A opens
    ``b`` and reads what B wrote (the renaming kernel writes its times back after the rename; that
    must not make A's open of the new name fail with ESTALE, nor move the file's mtime on the server
    back past B's append)."""
    d = ganesha.new_directory(prefix="wbc-")
    a, b = mount_export("writeback_cache"), mount_export("writeback_cache")
    da, db = a.path / d.local.name, b.path / d.local.name
    (db / "a").write_bytes(b"x" * 5000)
    for _ in range(3):
        with open(db / "a", "ab") as f:
            f.write(b"appended")
        want = b"x" * 5000 + b"appended" * (_ + 1)
        assert (da / "a").read_bytes() == want
        assert (db / "a").read_bytes() == want
        server_mtime = (d.local / "a").stat().st_mtime_ns
        assert (da / "a").stat().st_mtime_ns == (db / "a").stat().st_mtime_ns == server_mtime
        os.rename(db / "a", db / "b")
        assert (da / "b").read_bytes() == want  # (was: OSError ESTALE)
        os.sync()  # (the renaming kernel's write-back of the inode's times has reached the server)
        assert (d.local / "b").stat().st_mtime_ns >= server_mtime
        os.rename(db / "b", db / "a")
        assert (da / "a").read_bytes() == want
