"""The delegation bookkeeping of :class:`pynfsrdma._client.nfs4.NFSv4` (RFC 8881 10.4), below the I/O edge.

OPEN replies are encoded and decoded with the real XDR codec; the client ID under the NFSv4 layer
is a stand-in whose COMPOUND fails the test if anything is sent. What a server that grants
delegations does with them (the kernel nfsd) is shown in the VM rig (tests/vm, issue 6).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from pynfsrdma._client.attributes import FileAttrs
from pynfsrdma._client.delegations import cb_getattr_attrs, delegreturn_ops
from pynfsrdma._client.nfs4 import Delegation, HeldFile, NFSv4, OpenFile
from pynfsrdma._proto.nfs4 import callback as cb
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.attrs import bitmap4_from, decode_fattr4
from pynfsrdma._proto.nfs4.types import (
    DELEGRETURN4args,
    OPEN4resok,
    PUTFH4args,
    SETATTR4args,
    change_info4,
    nfsace4,
    nfstime4,
    stateid4,
)
from pynfsrdma._proto.nfs4.types_ops import open_read_delegation4, open_write_delegation4
from pynfsrdma._rpc.auth import auth_sys
from pynfsrdma._session.backchannel import Backchannel
from pynfsrdma._xdr import Unpacker

FH = b"\x01" * 16
OPEN_STATEID = stateid4(1, b"open-state-1")
DELEG_STATEID = stateid4(1, b"deleg-state1")
ACE = nfsace4(0, 0, 0, "")
SID = b"S" * 16


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


# -- CB_GETATTR (RFC 8881 10.4.3): answered from what the holder of a write delegation knows -----------


def write_delegated(nfs: NFSv4, change: int) -> OpenFile:
    """``nfs`` holds a write delegation on FH, granted by an OPEN whose GETATTR said ``change``."""
    of = opened(nfs, c.OPEN4_SHARE_ACCESS_BOTH)
    of.attrs = FileAttrs(size=100, change=change)
    arm = open_write_delegation4(DELEG_STATEID, False, (c.NFS_LIMIT_SIZE, 1 << 30), ACE)
    nfs.took_delegation(of, reply((c.OPEN_DELEGATE_WRITE, arm)).delegation)
    return of


async def cb_getattr(nfs: NFSv4, fh: bytes, attrs: list[int], seqid: int = 1) -> Any:
    """One CB_COMPOUND of CB_SEQUENCE and CB_GETATTR through the client's real backchannel, the reply
    through the wire format: (status, the attributes answered or None)."""
    args = cb.CB_COMPOUND4args("", 1, 0, [cb.CB_SEQUENCE4args(SID, seqid, 0, 0, False, []),
                                          cb.CB_GETATTR4args(fh, bitmap4_from(attrs))])
    res = cb.decode_cb_compound_res(Unpacker(await nfs.client.backchannel.compound(args)))
    got = res.resarray[-1]
    return res.status, decode_fattr4(got.res.obj_attributes) if res.status == c.NFS4_OK else None


def with_backchannel(nursery: trio.Nursery) -> NFSv4:
    server = NoServer()
    session = SimpleNamespace(sessionid=SID)
    server.backchannel = Backchannel(nursery, lambda: session)  # type: ignore[assignment, arg-type, return-value]
    server.backchannel.reset(1)
    return NFSv4(server)  # type: ignore[arg-type]


def held(answer: Callable[[bytes], HeldFile | None]) -> Callable[[bytes], Awaitable[HeldFile | None]]:
    """The layer above's answer for a delegated file (NFSv4.held_file), as ``answer`` gives it."""

    async def held_file(fh: bytes) -> HeldFile | None:
        return answer(fh)

    return held_file


async def test_cb_getattr_answers_size_and_the_granted_change_while_nothing_is_unsent() -> None:
    async with trio.open_nursery() as n:
        nfs = with_backchannel(n)
        write_delegated(nfs, change=41)
        assert nfs.delegations[FH].change == 41
        nfs.held_file = held(lambda fh: HeldFile(size=5000, dirty=False) if fh == FH else None)
        status, attrs = await cb_getattr(nfs, FH, [c.FATTR4_CHANGE, c.FATTR4_SIZE])
        assert status == c.NFS4_OK
        assert attrs == {c.FATTR4_CHANGE: 41, c.FATTR4_SIZE: 5000}
        assert nfs.delegation_counts["getattrs"] == 1


async def test_cb_getattr_counts_the_longest_answer() -> None:
    """A server waits only briefly for CB_GETATTR (nfsd about 30 ms), then recalls: the stats say how
    long our answers took, the time the layer above took to say what it holds included."""
    async with trio.open_nursery() as n:
        nfs = with_backchannel(n)
        write_delegated(nfs, change=41)

        async def slow(fh: bytes) -> HeldFile | None:
            await trio.sleep(0.06)
            return HeldFile(size=5000, dirty=False)

        nfs.held_file = slow
        status, _ = await cb_getattr(nfs, FH, [c.FATTR4_SIZE])
        assert status == c.NFS4_OK
        assert nfs.delegation_counts["getattr_ms"] >= 60
        nfs.held_file = held(lambda fh: HeldFile(size=5000, dirty=False))
        status, _ = await cb_getattr(nfs, FH, [c.FATTR4_SIZE], seqid=2)
        assert status == c.NFS4_OK
        assert nfs.delegation_counts["getattrs"] == 2 and nfs.delegation_counts["getattr_ms"] >= 60


async def test_cb_getattr_bumps_the_change_while_writes_wait_to_be_sent() -> None:
    async with trio.open_nursery() as n:
        nfs = with_backchannel(n)
        write_delegated(nfs, change=41)
        nfs.held_file = held(lambda fh: HeldFile(size=9000, dirty=True))
        status, attrs = await cb_getattr(nfs, FH, [c.FATTR4_CHANGE, c.FATTR4_SIZE])
        assert (status, attrs) == (c.NFS4_OK, {c.FATTR4_CHANGE: 42, c.FATTR4_SIZE: 9000})
        # only what is asked is answered
        status, attrs = await cb_getattr(nfs, FH, [c.FATTR4_SIZE], seqid=2)
        assert (status, attrs) == (c.NFS4_OK, {c.FATTR4_SIZE: 9000})


async def test_cb_getattr_on_a_read_delegation_or_an_unknown_file_is_badhandle() -> None:
    async with trio.open_nursery() as n:
        nfs = with_backchannel(n)
        nfs.held_file = held(lambda fh: HeldFile(size=1, dirty=False))
        of = opened(nfs, c.OPEN4_SHARE_ACCESS_READ)
        nfs.took_delegation(
            of, reply((c.OPEN_DELEGATE_READ, open_read_delegation4(DELEG_STATEID, False, ACE))).delegation
        )
        assert (await cb_getattr(nfs, FH, [c.FATTR4_SIZE]))[0] == c.NFS4ERR_BADHANDLE
        assert (await cb_getattr(nfs, b"not ours", [c.FATTR4_SIZE], seqid=2))[0] == c.NFS4ERR_BADHANDLE


def test_cb_getattr_attrs_is_none_without_a_write_delegation_or_what_the_holder_knows() -> None:
    d = Delegation(c.OPEN_DELEGATE_WRITE, DELEG_STATEID, FH, change=7)
    assert cb_getattr_attrs(None, HeldFile(1, False), [1 << c.FATTR4_SIZE]) is None
    assert cb_getattr_attrs(d, None, [1 << c.FATTR4_SIZE]) is None
    read = Delegation(c.OPEN_DELEGATE_READ, DELEG_STATEID, FH, change=7)
    assert cb_getattr_attrs(read, HeldFile(1, False), [1 << c.FATTR4_SIZE]) is None
    f = cb_getattr_attrs(d, HeldFile(3, True), bitmap4_from([c.FATTR4_CHANGE]))
    assert f is not None and decode_fattr4(f) == {c.FATTR4_CHANGE: 8}


# -- attribute delegations (RFC 9754): the times the holder keeps -----------------------------------


def attrs_delegated(nfs: NFSv4, dtype: int = c.OPEN_DELEGATE_WRITE_ATTRS_DELEG) -> Delegation:
    of = opened(nfs, c.OPEN4_SHARE_ACCESS_BOTH)
    of.attrs = FileAttrs(size=100, change=41)
    if dtype == c.OPEN_DELEGATE_READ_ATTRS_DELEG:
        granted: Any = (dtype, open_read_delegation4(DELEG_STATEID, False, ACE))
    else:
        granted = (dtype, open_write_delegation4(DELEG_STATEID, False, (c.NFS_LIMIT_SIZE, 1 << 30), ACE))
    nfs.took_delegation(of, reply(granted).delegation)
    return nfs.delegations[FH]


def test_timestamps_are_asked_for_only_when_delegations_are_wanted_and_the_server_has_the_attributes() -> None:
    nfs = NFSv4(NoServer())  # type: ignore[arg-type]
    both = c.OPEN4_SHARE_ACCESS_BOTH
    nfs.deleg_timestamps = True  # (the export's supported_attrs name time_deleg_access/modify)
    assert nfs.share_access(both) == both | c.OPEN4_SHARE_ACCESS_WANT_NO_DELEG  # the path API
    nfs.want_delegations = True
    assert nfs.share_access(both) == both | c.OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS
    nfs.deleg_timestamps = False
    assert nfs.share_access(both) == both


def test_the_holder_keeps_the_times_of_its_reads_and_writes_under_an_attribute_delegation_only() -> None:
    nfs = NFSv4(NoServer())  # type: ignore[arg-type]
    d = attrs_delegated(nfs)
    assert d.write and d.timestamps and nfs.delegation_counts["timestamps"] == 1
    assert nfs.kept_times(FH) == (None, None) and nfs.keeps_times(FH)
    nfs.note_read(FH, 1_700_000_000_123_456_789)
    nfs.note_write(FH, 1_700_000_001_000_000_001)
    assert nfs.kept_times(FH) == (1_700_000_000_123_456_789, 1_700_000_001_000_000_001)
    assert d.kept_times() == {c.FATTR4_TIME_DELEG_ACCESS: nfstime4(1_700_000_000, 123_456_789),
                              c.FATTR4_TIME_DELEG_MODIFY: nfstime4(1_700_000_001, 1)}
    nfs.forget_times(FH)  # a utimensat: the times set on the server are not undone at the return
    assert d.kept_times() == {}
    # a plain write delegation keeps none; a read attribute delegation keeps the access time only
    plain = NFSv4(NoServer())  # type: ignore[arg-type]
    write_delegated(plain, change=41)
    plain.note_write(FH, 5)
    assert plain.kept_times(FH) == (None, None) and not plain.keeps_times(FH)
    read = NFSv4(NoServer())  # type: ignore[arg-type]
    attrs_delegated(read, c.OPEN_DELEGATE_READ_ATTRS_DELEG)
    read.note_write(FH, 5)
    read.note_read(FH, 6)
    assert read.kept_times(FH) == (6, None) and not read.keeps_times(FH)


def test_the_times_go_back_by_a_setattr_before_the_delegreturn_in_one_compound() -> None:
    nfs = NFSv4(NoServer())  # type: ignore[arg-type]
    d = attrs_delegated(nfs)
    assert [type(op) for op in delegreturn_ops(FH, d)] == [PUTFH4args, DELEGRETURN4args]  # nothing kept
    nfs.note_write(FH, 1_700_000_001_000_000_002)
    ops = delegreturn_ops(FH, d)
    assert [type(op) for op in ops] == [PUTFH4args, SETATTR4args, DELEGRETURN4args]
    setattr_op = SETATTR4args.XDR.decode(SETATTR4args.XDR.encode(ops[1]))  # (through the wire format)
    assert setattr_op.stateid == DELEG_STATEID and ops[2].deleg_stateid == DELEG_STATEID
    assert decode_fattr4(setattr_op.obj_attributes) == {c.FATTR4_TIME_DELEG_MODIFY: nfstime4(1_700_000_001, 2)}
    # a plain write delegation gives no times back
    plain = Delegation(c.OPEN_DELEGATE_WRITE, DELEG_STATEID, FH, mtime_ns=5)
    assert [type(op) for op in delegreturn_ops(FH, plain)] == [PUTFH4args, DELEGRETURN4args]


async def test_cb_getattr_answers_the_kept_times_when_asked_under_an_attribute_delegation() -> None:
    async with trio.open_nursery() as n:
        nfs = with_backchannel(n)
        attrs_delegated(nfs)
        nfs.held_file = held(lambda fh: HeldFile(size=9000, dirty=True))
        nfs.note_write(FH, 1_700_000_002_000_000_003)
        asked = [c.FATTR4_CHANGE, c.FATTR4_SIZE, c.FATTR4_TIME_DELEG_ACCESS, c.FATTR4_TIME_DELEG_MODIFY]
        status, attrs = await cb_getattr(nfs, FH, asked)
        # (no read was made: no access time is answered)
        assert (status, attrs) == (c.NFS4_OK, {c.FATTR4_CHANGE: 42, c.FATTR4_SIZE: 9000,
                                               c.FATTR4_TIME_DELEG_MODIFY: nfstime4(1_700_000_002, 3)})
        status, attrs = await cb_getattr(nfs, FH, [c.FATTR4_SIZE], seqid=2)
        assert (status, attrs) == (c.NFS4_OK, {c.FATTR4_SIZE: 9000})
