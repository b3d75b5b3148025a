"""A blocked lock (F_SETLKW) and what can happen while it waits, below the I/O edge: a stand-in client
ID answers LOCK as a server with another client's lock would. NFS-Ganesha sends no CB_NOTIFY_LOCK,
so its waking of a waiter is shown here (the Linux nfsd sends it); a LOCK granted while its caller
is cancelled needs a reply timed between the cancellation and the grant, which only a stand-in
can time."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from pynfsrdma._client.locks import TO_EOF
from pynfsrdma._client.nfs4 import NFSv4, OpenFile
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import COMPOUND4res, ResOp
from pynfsrdma._proto.nfs4.types import (
    FREE_STATEID4args,
    LOCK4args,
    LOCK4denied,
    LOCK4resok,
    LOCKU4args,
    lock_owner4,
    stateid4,
)
from pynfsrdma._rpc.auth import auth_sys

CLIENTID = 0x1234
CRED = auth_sys(0, 0)
LOCK_OTHER = b"lock-state-1"


class LockServer:
    """Answers LOCK with NFS4ERR_DENIED while ``held`` (another client's write lock on 0..100), else
    grants it; a LOCK waits for ``gate`` first when one is set. Records every operation sent."""

    def __init__(self) -> None:
        self.held = True
        self.gate: trio.Event | None = None
        self.sent: list[Any] = []
        self.seqid = 0
        self.reclaim_hooks: list[Any] = []
        self.state_revoked_hooks: list[Any] = []
        self.backchannel = SimpleNamespace(on_recall=None, on_recall_any=None, on_notify_lock=None)
        self.identity = SimpleNamespace(clientid=CLIENTID)

    def _next(self) -> stateid4:
        self.seqid += 1
        return stateid4(self.seqid, LOCK_OTHER)

    async def compound(self, ops: list[Any], *args: Any, **kwargs: Any) -> COMPOUND4res:
        res = [ResOp(c.OP_PUTFH, c.NFS4_OK)]
        for op in ops[1:]:
            self.sent.append(op)
            if isinstance(op, LOCK4args):
                if self.gate is not None:
                    await self.gate.wait()
                if self.held:
                    denied = LOCK4denied(0, 100, c.WRITE_LT, lock_owner4(99, b"theirs"))
                    res.append(ResOp(c.OP_LOCK, c.NFS4ERR_DENIED, denied))
                    return COMPOUND4res(c.NFS4ERR_DENIED, "", res)
                res.append(ResOp(c.OP_LOCK, c.NFS4_OK, LOCK4resok(self._next())))
            elif isinstance(op, LOCKU4args):
                res.append(ResOp(c.OP_LOCKU, c.NFS4_OK, self._next()))
            elif isinstance(op, FREE_STATEID4args):
                res.append(ResOp(c.OP_FREE_STATEID, c.NFS4_OK))
        return COMPOUND4res(c.NFS4_OK, "", res)

    def locks_sent(self) -> list[tuple[int, int, int]]:
        return [(op.locktype, op.offset, op.length) for op in self.sent if isinstance(op, LOCK4args)]


def open_file(may_notify: bool) -> OpenFile:
    return OpenFile(b"fh", stateid4(1, b"open-state-1"), c.OPEN4_SHARE_ACCESS_BOTH, b"owner",
                    may_notify_lock=may_notify)


async def test_cb_notify_lock_wakes_the_waiter_at_once(mock_clock: trio.testing.MockClock) -> None:
    """The clock stands still: a waiter that asks again did so because it was woken, not because its
    poll came round."""
    server = LockServer()
    nfs = NFSv4(server)  # type: ignore[arg-type]
    of = open_file(may_notify=True)
    got = trio.Event()

    async def waiter() -> None:
        await nfs.byte_range_locks.lock(of, "process-1", c.WRITE_LT, 0, 10, CRED, wait=True)
        got.set()

    async with trio.open_nursery() as n:
        n.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert server.locks_sent() == [(c.WRITEW_LT, 0, 10)]  # asked once, as a blocking lock
        owner = nfs.locks.owner_by_name(nfs.locks.owner_name("process-1"))
        assert owner is not None
        notify = server.backchannel.on_notify_lock
        notify(b"another fh", lock_owner4(CLIENTID, owner.name))  # not this file: nothing happens
        notify(b"fh", lock_owner4(CLIENTID, b"another owner"))  # nor for another owner
        await trio.testing.wait_all_tasks_blocked()
        assert len(server.locks_sent()) == 1
        server.held = False
        notify(b"fh", lock_owner4(CLIENTID, owner.name))  # the holder let go: CB_NOTIFY_LOCK
        await trio.testing.wait_all_tasks_blocked()
        assert got.is_set() and trio.current_time() == 0
    assert server.locks_sent() == [(c.WRITEW_LT, 0, 10)] * 2
    assert nfs.lock_counts["notified"] == 3 and not nfs.byte_range_locks._lock_waiters
    assert list(nfs.locks.get(of, "process-1").ranges) == [(0, 10, c.WRITE_LT)]  # type: ignore[union-attr]


async def test_without_a_notification_the_waiter_asks_less_and_less_often(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = LockServer()
    nfs = NFSv4(server)  # type: ignore[arg-type]
    of = open_file(may_notify=False)
    with trio.move_on_after(60):
        await nfs.byte_range_locks.lock(of, "p", c.READ_LT, 0, TO_EOF, CRED, wait=True)
    asked = len(server.locks_sent())
    # 0.1, 0.2, 0.4 ... 3.2, then every 5 s: about 16 LOCKs in a minute, not 600
    assert 12 <= asked <= 20, asked
    assert nfs.locks.get(of, "p") is None  # never granted: no lock state left behind


async def test_a_lock_granted_while_its_caller_was_cancelled_is_given_back() -> None:
    """The LOCK was on its way when the caller was interrupted: its reply is waited for, and what it
    granted is undone, so that the owner holds what it held before (a read lock under an upgrade)."""
    server = LockServer()
    server.held = False
    nfs = NFSv4(server)  # type: ignore[arg-type]
    of = open_file(may_notify=False)
    await nfs.byte_range_locks.lock(of, "p", c.READ_LT, 0, 10, CRED)
    server.gate = trio.Event()
    scope = trio.CancelScope()

    async def upgrade() -> None:
        with scope:
            await nfs.byte_range_locks.lock(of, "p", c.WRITE_LT, 0, 20, CRED)

    async with trio.open_nursery() as n:
        n.start_soon(upgrade)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()  # while the LOCK waits for its reply
        await trio.testing.wait_all_tasks_blocked()
        assert isinstance(server.sent[-1], LOCK4args)  # nothing else sent yet: the reply is awaited
        server.gate.set()
    assert scope.cancelled_caught  # the caller saw its cancellation, not a lock
    sent = [(type(op).__name__, op.offset, op.length) for op in server.sent if not isinstance(op, FREE_STATEID4args)]
    assert sent == [("LOCK4args", 0, 10), ("LOCK4args", 0, 20),  # the read lock, the upgrade granted
                    ("LOCK4args", 0, 10), ("LOCKU4args", 10, 10)]  # given back: read again, the rest unlocked
    assert server.sent[2].locktype == c.READ_LT
    st = nfs.locks.get(of, "p")
    assert st is not None and list(st.ranges) == [(0, 10, c.READ_LT)] and st.stateid == stateid4(4, LOCK_OTHER)


async def test_a_lock_granted_to_a_cancelled_first_request_leaves_no_state() -> None:
    server = LockServer()
    server.held = False
    server.gate = trio.Event()
    nfs = NFSv4(server)  # type: ignore[arg-type]
    of = open_file(may_notify=False)
    async with trio.open_nursery() as n:
        scope = trio.CancelScope()

        async def lock() -> None:
            with scope:
                await nfs.byte_range_locks.lock(of, "p", c.WRITE_LT, 0, TO_EOF, CRED)

        n.start_soon(lock)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
        server.gate.set()
    assert scope.cancelled_caught
    assert [type(op).__name__ for op in server.sent] == ["LOCK4args", "LOCKU4args", "FREE_STATEID4args"]
    assert nfs.locks.get(of, "p") is None and not nfs.locks
