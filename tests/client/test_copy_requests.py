"""COPY's replies that NFS-Ganesha never gives (it answers NFS4ERR_NOTSUPP), below the I/O edge: a
stand-in client ID answers as a server that copies (the Linux nfsd does) would. A short copy is
carried on from where it stopped; data copied UNSTABLE is committed, and copied again when the
COMMIT's write verifier is not the COPY's (the server restarted in between)."""

from __future__ import annotations

import errno
from types import SimpleNamespace
from typing import Any

import pytest

from pynfsrdma._client.nfs4 import NFSv4, OpenFile
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import COMPOUND4res, ResOp
from pynfsrdma._proto.nfs4.types import (
    COMMIT4args,
    COMMIT4resok,
    COPY4args,
    COPY4resok,
    copy_requirements4,
    stateid4,
    write_response4,
)
from pynfsrdma._rpc.auth import auth_sys

CRED = auth_sys(0, 0)


class CopyServer:
    """Answers each COPY with the next (status, count, committed, verifier) and each COMMIT with the
    next verifier; records (src offset, dst offset, count) of each COPY and (offset, count) of each
    COMMIT."""

    def __init__(self, copies: list[tuple[int, int, int, bytes]], commits: list[bytes] | None = None,
                 minorversion: int = c.NFS4_MINOR_VERSION_2) -> None:
        self.copies = copies
        self.commits = commits or []
        self.sent: list[tuple[Any, ...]] = []
        self.options = SimpleNamespace(minorversion=minorversion)
        self.reclaim_hooks: list[Any] = []
        self.state_revoked_hooks: list[Any] = []
        self.backchannel = SimpleNamespace(on_recall=None, on_recall_any=None, on_notify_lock=None)

    async def compound(self, ops: list[Any], *args: Any, **kwargs: Any) -> COMPOUND4res:
        op = ops[-1]
        if isinstance(op, COMMIT4args):
            self.sent.append(("COMMIT", op.offset, op.count))
            res = [ResOp(c.OP_PUTFH, c.NFS4_OK), ResOp(c.OP_COMMIT, c.NFS4_OK, COMMIT4resok(self.commits.pop(0)))]
            return COMPOUND4res(c.NFS4_OK, "", res)
        assert isinstance(op, COPY4args) and op.ca_synchronous and op.ca_consecutive
        self.sent.append(("COPY", op.ca_src_offset, op.ca_dst_offset, op.ca_count))
        st, n, committed, verf = self.copies.pop(0)
        res = [ResOp(c.OP_PUTFH, c.NFS4_OK), ResOp(c.OP_SAVEFH, c.NFS4_OK), ResOp(c.OP_PUTFH, c.NFS4_OK)]
        if st == c.NFS4_OK:
            res.append(ResOp(c.OP_COPY, st, COPY4resok(write_response4([], n, committed, verf),
                                                       copy_requirements4(True, True))))
        elif st == c.NFS4ERR_OFFLOAD_NO_REQS:
            res.append(ResOp(c.OP_COPY, st, copy_requirements4(False, False)))
        else:
            res.append(ResOp(c.OP_COPY, st))
        return COMPOUND4res(st, "", res)


def opens() -> tuple[OpenFile, OpenFile]:
    return (OpenFile(b"src", stateid4(1, b"src-state-01"), c.OPEN4_SHARE_ACCESS_READ, b"o"),
            OpenFile(b"dst", stateid4(1, b"dst-state-01"), c.OPEN4_SHARE_ACCESS_WRITE, b"o"))


async def test_a_short_unstable_copy_goes_on_and_is_copied_again_when_the_verifier_changes() -> None:
    server = CopyServer(
        copies=[(c.NFS4_OK, 40, c.UNSTABLE4, b"verf-one"),  # 40 of 100, unstable
                (c.NFS4_OK, 60, c.UNSTABLE4, b"verf-one"),  # the other 60 ...
                (c.NFS4_OK, 60, c.FILE_SYNC4, b"verf-two")],  # ... again after the restart, stable
        commits=[b"verf-one", b"verf-two"],  # the second COMMIT: the server restarted since the COPY
    )
    nfs = NFSv4(server)  # type: ignore[arg-type]
    src, dst = opens()
    assert await nfs.nfs42.copy(src, dst, 1000, 0, 100, CRED) == 100
    assert server.sent == [
        ("COPY", 1000, 0, 100), ("COMMIT", 0, 40),
        ("COPY", 1040, 40, 60), ("COMMIT", 40, 60),
        ("COPY", 1040, 40, 60),  # FILE_SYNC: nothing to commit
    ]


async def test_a_copy_stops_at_the_end_of_the_source() -> None:
    server = CopyServer(copies=[(c.NFS4_OK, 30, c.FILE_SYNC4, b"v" * 8), (c.NFS4_OK, 0, c.FILE_SYNC4, b"v" * 8)])
    nfs = NFSv4(server)  # type: ignore[arg-type]
    assert await nfs.nfs42.copy(*opens(), 0, 0, 100, CRED) == 30
    assert server.sent == [("COPY", 0, 0, 100), ("COPY", 30, 30, 70)]


async def test_a_verifier_that_keeps_changing_is_an_error_not_a_loop() -> None:
    server = CopyServer(copies=[(c.NFS4_OK, 10, c.UNSTABLE4, b"a" * 8)] * 3, commits=[b"b" * 8] * 3)
    nfs = NFSv4(server)  # type: ignore[arg-type]
    with pytest.raises(NFS4Error) as ei:
        await nfs.nfs42.copy(*opens(), 0, 0, 10, CRED)
    assert ei.value.errno == errno.EIO and len(server.sent) == 6


@pytest.mark.parametrize("status", [c.NFS4ERR_NOTSUPP, c.NFS4ERR_OFFLOAD_NO_REQS])
async def test_a_server_that_cannot_copy_is_asked_once(status: int) -> None:
    server = CopyServer(copies=[(status, 0, 0, b"")])
    nfs = NFSv4(server)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(NFS4Error) as ei:
            await nfs.nfs42.copy(*opens(), 0, 0, 10, CRED)
        assert ei.value.errno == errno.EOPNOTSUPP and ei.value.status == c.NFS4ERR_NOTSUPP
    assert len(server.sent) == 1 and not nfs.nfs42.supports(c.OP_COPY)


async def test_nfsv4_1_sends_no_nfsv4_2_operation() -> None:
    server = CopyServer(copies=[], minorversion=c.NFS4_MINOR_VERSION_1)
    nfs = NFSv4(server)  # type: ignore[arg-type]
    src, dst = opens()
    for call in (nfs.nfs42.copy(src, dst, 0, 0, 10, CRED), nfs.nfs42.clone(src, dst, 0, 0, 10, CRED),
                 nfs.nfs42.seek(src, 0, c.NFS4_CONTENT_DATA, CRED), nfs.nfs42.allocate(dst, 0, 10, CRED),
                 nfs.nfs42.deallocate(dst, 0, 10, CRED)):
        with pytest.raises(OSError) as ei:
            await call
        assert ei.value.errno == errno.EOPNOTSUPP
    assert server.sent == []
