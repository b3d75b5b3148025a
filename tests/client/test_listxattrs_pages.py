"""LISTXATTRS replies that NFS-Ganesha never gives (it has no extended attributes), below the I/O
edge: a stand-in client ID answers as a server that pages the list by cookie would (the Linux nfsd
does). A server going round in circles, or a list longer than any file may have, ends the listing
with one error; it never grows the list without end."""

from __future__ import annotations

import errno
from types import SimpleNamespace
from typing import Any

import pytest

from pynfsrdma._client.nfs4 import NFSv4
from pynfsrdma._errors import ProtocolError
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import COMPOUND4res, ResOp
from pynfsrdma._proto.nfs4.types import LISTXATTRS4args, LISTXATTRS4resok
from pynfsrdma._rpc.auth import auth_sys

CRED = auth_sys(0, 0)


class XattrServer:
    """Answers each LISTXATTRS with the next page (names, cookie, eof), or with the last one again
    for ever; records the cookies asked for."""

    def __init__(self, pages: list[tuple[list[str], int, bool]]) -> None:
        self.pages = pages
        self.asked: list[int] = []
        self.server = "127.0.0.1:2049"
        self.options = SimpleNamespace(minorversion=c.NFS4_MINOR_VERSION_2)
        self.reclaim_hooks: list[Any] = []
        self.state_revoked_hooks: list[Any] = []
        self.backchannel = SimpleNamespace(on_recall=None, on_recall_any=None, on_notify_lock=None)

    async def compound(self, ops: list[Any], *args: Any, **kwargs: Any) -> COMPOUND4res:
        op = ops[-1]
        assert isinstance(op, LISTXATTRS4args)
        self.asked.append(op.lxa_cookie)
        if len(self.asked) > 10_000:
            raise AssertionError("the client kept asking")
        names, cookie, eof = self.pages[min(len(self.asked), len(self.pages)) - 1]
        res = [ResOp(c.OP_PUTFH, c.NFS4_OK), ResOp(c.OP_LISTXATTRS, c.NFS4_OK, LISTXATTRS4resok(cookie, names, eof))]
        return COMPOUND4res(c.NFS4_OK, "", res)


async def test_a_list_paged_by_cookie_is_read_whole() -> None:
    server = XattrServer([(["a", "b"], 7, False), (["c"], 9, False), (["d"], 11, True)])
    assert await NFSv4(server).xattrs.listxattrs(b"fh", CRED, path="/f") == ["a", "b", "c", "d"]  # type: ignore[arg-type]
    assert server.asked == [0, 7, 9]


async def test_a_cookie_given_again_is_a_bad_reply_not_a_list_without_end() -> None:
    """Every page says eof false and gives the same cookie: the second time it comes, the listing
    fails as a reply that breaks the protocol (EIO), after two LISTXATTRS."""
    server = XattrServer([(["a"], 5, False)])
    with pytest.raises(ProtocolError) as caught:
        await NFSv4(server).xattrs.listxattrs(b"fh", CRED, path="/f")  # type: ignore[arg-type]
    assert caught.value.errno == errno.EIO
    assert "cookie 5 repeated" in str(caught.value)
    assert server.asked == [0, 5]


async def test_a_list_longer_than_a_file_may_have_is_e2big() -> None:
    """New names on every page, with new cookies, and never eof: the listing stops with E2BIG once
    the names pass the 64 KiB that listxattr(2) can return, as Linux's does."""
    pages = [([f"name-{i:06d}-" + "x" * 200], i + 1, False) for i in range(1000)]
    server = XattrServer(pages)
    with pytest.raises(OSError) as caught:
        await NFSv4(server).xattrs.listxattrs(b"fh", CRED, path="/f")  # type: ignore[arg-type]
    assert caught.value.errno == errno.E2BIG
    assert len(server.asked) < 400
