"""Directory entries named as no file can be, through a mount: a READDIR reply whose entry's name is not
UTF-8, holds "/", or is "..", made by the testbed's mutating proxy from NFS-Ganesha's, is a bad reply
(RFC 8881 utf8str_cs): sent again on a new connection (the listing is right), and when every reply is
so, ``ls`` fails with EIO. The kernel is never handed the name."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any

import pytest
import trio

from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._testbed import Ganesha, MutatingProxy, Mutation, ReplyMutator, Rule
from pynfsrdma._testbed.ganesha import ExportPath

pytestmark = pytest.mark.fuse
ALWAYS = 1 << 30


def listing(path: Any) -> list[str] | int:
    """The directory's names, or the errno listing it failed with."""
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        return e.errno or 0


@pytest.mark.parametrize("kind", ["slash", "two dots", "not UTF-8"])
async def test_a_name_no_file_can_have_never_reaches_the_kernel(
    ganesha: Ganesha, nursery: trio.Nursery, mount_url: Callable[..., Any], export_path: ExportPath, kind: str
) -> None:
    names = [f"file{i}" for i in range(5)]
    for n in names:
        (export_path.local / n).write_bytes(b"")
    rule = Rule(Mutation.NAME, c.OP_READDIR, f"name: {kind}", count=0)  # (the mount's own calls pass)
    proxy = MutatingProxy("127.0.0.1", 0, ganesha.host, ganesha.port, ReplyMutator(seed=5, rules=[rule]))
    await nursery.start(proxy.run)
    m = await trio.to_thread.run_sync(mount_url, f"nfs://127.0.0.1:{proxy.port}{export_path.remote}",
                                      "actimeo=0")
    try:
        rule.count = 1  # once: the READDIR goes again on a new connection, and the listing is right
        assert await trio.to_thread.run_sync(listing, m.path / ".") == names
        assert rule.count == 0
        # (a listing the kernel and the daemon have not cached)
        await trio.to_thread.run_sync((m.path / "one more").write_bytes, b"")
        rule.count = ALWAYS  # every time: one error, no name
        assert await trio.to_thread.run_sync(listing, m.path / ".") == errno.EIO
        assert rule.count < ALWAYS
        rule.count = 0
        assert await trio.to_thread.run_sync(listing, m.path / ".") == sorted([*names, "one more"])
    finally:
        rc = await trio.to_thread.run_sync(m.unmount)
    assert rc == 0, m.log.read_text()[-3000:]
