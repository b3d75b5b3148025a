"""The delegation bookkeeping of :class:`pynfsrdma._client.nfs4.NFSv4` (RFC 8881 10.4), below the I/O edge.

OPEN replies are encoded and decoded with the real XDR codec; the client ID under the NFSv4 layer
is a stand-in whose COMPOUND fails the test if anything is sent. What a server that grants
delegations does with them (the kernel nfsd) is shown in the VM rig (tests/vm, issue 6).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pynfsrdma._client.nfs4 import NFSv4, OpenFile
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.types import OPEN4resok, change_info4, nfsace4, stateid4
from pynfsrdma._proto.nfs4.types_ops import open_read_delegation4, open_write_delegation4
from pynfsrdma._rpc.auth import auth_sys

FH = b"\x01" * 16
OPEN_STATEID = stateid4(1, b"open-state-1")
DELEG_STATEID = stateid4(1, b"deleg-state1")
ACE = nfsace4(0, 0, 0, "")


class NoServer:
    """A client ID with no server behind it: every COMPOUND is a test failure."""

    def __init__(self) -> None:
        self.reclaim_hooks: list[Any] = []
        self.state_revoked_hooks: list[Any] = []
        self.backchannel = SimpleNamespace(on_recall=None, on_recall_any=None)
        self.identity = SimpleNamespace(clientid=7)
        self.machine_cred = auth_sys(0, 0, ())

    async def compound(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing may be sent to the server here")


def reply(delegation: tuple[int, Any]) -> Any:
    """An OPEN4resok carrying ``delegation``, through the wire format and back."""
    ok = OPEN4resok(OPEN_STATEID, change_info4(True, 1, 2), 0, [], delegation)
    return OPEN4resok.XDR.decode(OPEN4resok.XDR.encode(ok))


def opened(nfs: NFSv4, access: int) -> OpenFile:
    of = OpenFile(FH, OPEN_STATEID, access, b"open-0", cred=auth_sys(0, 0, ()))
    nfs.opens[id(of)] = of
    return of


def test_the_path_api_asks_for_no_delegation_and_the_mount_lets_the_server_choose() -> None:
    nfs = NFSv4(NoServer())  # type: ignore[arg-type]
    read = c.OPEN4_SHARE_ACCESS_READ
    assert nfs.share_access(read) == read | c.OPEN4_SHARE_ACCESS_WANT_NO_DELEG
    nfs.want_delegations = True
    assert nfs.share_access(read) == read


def test_a_read_delegation_covers_read_opens_only() -> None:
    nfs = NFSv4(NoServer())  # type: ignore[arg-type]
    of = opened(nfs, c.OPEN4_SHARE_ACCESS_READ)
    nfs.took_delegation(
        of, reply((c.OPEN_DELEGATE_READ, open_read_delegation4(DELEG_STATEID, False, ACE))).delegation
    )
    d = nfs.delegations[FH]
    assert of.delegation is d and not d.write and d.stateid == DELEG_STATEID
    assert nfs.delegation_for(FH, c.OPEN4_SHARE_ACCESS_READ) is d
    assert nfs.delegation_for(FH, c.OPEN4_SHARE_ACCESS_BOTH) is None
    assert nfs.delegation_for(b"other", c.OPEN4_SHARE_ACCESS_READ) is None
    assert nfs.delegation_counts["granted"] == 1


def test_a_write_delegation_covers_every_open() -> None:
    nfs = NFSv4(NoServer())  # type: ignore[arg-type]
    of = opened(nfs, c.OPEN4_SHARE_ACCESS_BOTH)
    limit = (c.NFS_LIMIT_SIZE, 1 << 30)
    arm = open_write_delegation4(DELEG_STATEID, False, limit, ACE)
    nfs.took_delegation(of, reply((c.OPEN_DELEGATE_WRITE, arm)).delegation)
    d = nfs.delegations[FH]
    assert d.write
    assert nfs.delegation_for(FH, c.OPEN4_SHARE_ACCESS_BOTH) is d


@pytest.mark.parametrize(
    "delegation",
    [(c.OPEN_DELEGATE_NONE, None), (c.OPEN_DELEGATE_NONE_EXT, (c.WND4_NOT_SUPP_FTYPE, None))],
)
def test_no_delegation_granted_records_nothing(delegation: tuple[int, Any]) -> None:
    nfs = NFSv4(NoServer())  # type: ignore[arg-type]
    of = opened(nfs, c.OPEN4_SHARE_ACCESS_READ)
    nfs.took_delegation(of, reply(delegation).delegation)
    assert nfs.delegations == {} and of.delegation is None
    assert nfs.delegation_for(FH, c.OPEN4_SHARE_ACCESS_READ) is None


async def test_opens_under_a_delegation_are_local_and_their_close_sends_nothing() -> None:
    nfs = NFSv4(NoServer())  # type: ignore[arg-type]
    of = opened(nfs, c.OPEN4_SHARE_ACCESS_READ)
    nfs.took_delegation(
        of, reply((c.OPEN_DELEGATE_READ, open_read_delegation4(DELEG_STATEID, False, ACE))).delegation
    )
    d = nfs.delegation_for(FH, c.OPEN4_SHARE_ACCESS_READ)
    assert d is not None
    local = nfs.open_delegated(d, auth_sys(1000, 1000, ()), c.OPEN4_SHARE_ACCESS_READ)
    assert local.local and local.stateid == DELEG_STATEID and local.owner == b"open-1000"
    assert id(local) in nfs.opens  # reclaimed as an open of its own after a server restart
    await nfs.close(local, auth_sys(1000, 1000, ()))  # NoServer fails the test if a CLOSE goes out
    assert local.closed and id(local) not in nfs.opens
    assert nfs.delegation_counts["local_opens"] == 1


def test_a_delegation_being_returned_covers_nothing() -> None:
    nfs = NFSv4(NoServer())  # type: ignore[arg-type]
    of = opened(nfs, c.OPEN4_SHARE_ACCESS_READ)
    nfs.took_delegation(
        of, reply((c.OPEN_DELEGATE_READ, open_read_delegation4(DELEG_STATEID, False, ACE))).delegation
    )
    nfs.delegations[FH].returning = True
    assert nfs.delegation_for(FH, c.OPEN4_SHARE_ACCESS_READ) is None
