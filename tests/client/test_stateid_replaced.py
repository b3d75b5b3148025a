"""I/O that waited in the session's recovery while its open was reclaimed (RFC 8881 8.4.2.1): the
server calls the stateid it carries stale, and :meth:`NFSv4.run_with_open` sends it again with the
open's new stateid, but only then. Below the I/O edge: a stand-in client ID answers the COMPOUNDs
(replies as the NFS-Ganesha restart test saw them: tests/session/test_recovery.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pynfsrdma._client.nfs4 import NFSv4, OpenFile
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import COMPOUND4res, ResOp
from pynfsrdma._proto.nfs4.types import WRITE4resok, stateid4
from pynfsrdma._rpc.auth import auth_sys

BEFORE = stateid4(1, b"before-rst-1")
RECLAIMED = stateid4(1, b"reclaimed--2")


class Server:
    """Answers each WRITE with the next status; ``reclaim`` replaces the open's stateid first (as the
    owner's recovery does while the request waits)."""

    def __init__(self, statuses: list[int], reclaim: OpenFile | None = None) -> None:
        self.statuses = statuses
        self.reclaim = reclaim
        self.sent: list[bytes] = []  # the stateid ``other`` each WRITE carried
        self.reclaim_hooks: list[Any] = []
        self.state_revoked_hooks: list[Any] = []
        self.backchannel = SimpleNamespace(on_recall=None, on_recall_any=None)

    async def compound(self, ops: list[Any], *args: Any, **kwargs: Any) -> COMPOUND4res:
        self.sent.append(ops[1].stateid.other)
        if self.reclaim is not None:
            self.reclaim.stateid, self.reclaim = RECLAIMED, None
        st = self.statuses.pop(0)
        res = WRITE4resok(5, c.UNSTABLE4, b"verifier") if st == c.NFS4_OK else None
        return COMPOUND4res(st, "", [ResOp(c.OP_PUTFH, c.NFS4_OK), ResOp(c.OP_WRITE, st, res)])


def open_file() -> OpenFile:
    return OpenFile(b"fh", BEFORE, c.OPEN4_SHARE_ACCESS_WRITE, b"owner")


async def test_a_write_whose_open_was_reclaimed_meanwhile_goes_again_with_the_new_stateid() -> None:
    of = open_file()
    server = Server([c.NFS4ERR_STALE_STATEID, c.NFS4_OK], reclaim=of)
    nfs = NFSv4(server)  # type: ignore[arg-type]
    assert await nfs.read_write.write(of, 0, b"hello", auth_sys(0, 0)) == (5, c.UNSTABLE4, b"verifier")
    assert server.sent == [BEFORE.other, RECLAIMED.other]


@pytest.mark.parametrize("status", [c.NFS4ERR_STALE_STATEID, c.NFS4ERR_BAD_STATEID, c.NFS4ERR_ACCESS])
async def test_an_error_for_the_stateid_still_current_is_the_callers(status: int) -> None:
    of = open_file()  # (nothing replaced it: the open itself is gone, or the error is another)
    server = Server([status])
    nfs = NFSv4(server)  # type: ignore[arg-type]
    with pytest.raises(NFS4Error) as ei:
        await nfs.read_write.write(of, 0, b"hello", auth_sys(0, 0))
    assert ei.value.status == status
    assert server.sent == [BEFORE.other]
