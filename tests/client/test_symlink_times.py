"""Whose are pjdfstest's three failures of utimensat(2) on a symbolic link (AT_SYMLINK_NOFOLLOW) on
the mount? NFS-Ganesha's, asked directly through the library with no FUSE in between: it answers a
SETATTR of a symlink's times NFS4_OK and keeps neither time, while the same SETATTR of a regular file
keeps both, and the file system under its export keeps a symlink's times when set locally."""

from __future__ import annotations

import os

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

ATIME, MTIME = 1_000_000_000, 2_000_000_000


async def test_nfs_ganesha_accepts_a_symlinks_times_and_keeps_neither(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        await nfs.write_file("/f", b"x")
        await nfs.symlink("f", "/l")
        before = await nfs.lstat("/l")
        for path in ("/f", "/l"):
            await nfs.setattr(path, follow=False, atime_ns=ATIME, mtime_ns=MTIME)  # answered NFS4_OK
        f, link = await nfs.lstat("/f"), await nfs.lstat("/l")
    assert (f.atime_ns, f.mtime_ns) == (ATIME, MTIME)
    # (the server's own reads of the link may move its atime to now, never to the time asked for)
    assert link.mtime_ns == before.mtime_ns and link.atime_ns >= before.atime_ns
    on_disk = os.lstat(export_path.local / "l")
    assert on_disk.st_mtime_ns == before.mtime_ns and on_disk.st_atime_ns >= before.atime_ns
    os.utime(export_path.local / "l", ns=(ATIME, MTIME), follow_symlinks=False)
    on_disk = os.lstat(export_path.local / "l")
    assert (on_disk.st_atime_ns, on_disk.st_mtime_ns) == (ATIME, MTIME)
