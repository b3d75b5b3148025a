"""Byte-range locks against a real NFS-Ganesha, as two programs on two machines see them: each test
has two API clients (two ``Client.connect``: two NFS clients of the server), and what one locks the
other is refused, waits for, or gets once it is let go."""

from __future__ import annotations

import errno
import fcntl

import pytest
import trio

from pynfsrdma._client.api import Client, File
from pynfsrdma._client.locks import OFFSET_MAX, TO_EOF, LockDenied, LockLost, nfs_range
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.types import (
    CLOSE4args,
    FREE_STATEID4args,
    LOCKU4args,
    PUTFH4args,
    READ4args,
    TEST_STATEID4args,
    stateid4,
)
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

RD, WR = fcntl.F_RDLCK, fcntl.F_WRLCK


def url_of(server: Ganesha, ep: ExportPath) -> str:
    return f"nfs://{server.host}:{server.port}{ep.remote}"


async def open_both(a: Client, b: Client, data: bytes = b"0123456789" * 100) -> tuple[File, File]:
    await a.write_file("/f", data)
    return await a.open("/f", "r+"), await b.open("/f", "r+")


async def test_a_write_lock_keeps_the_other_client_out_of_its_range_only(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    url = url_of(ganesha, export_path)
    async with Client.connect(url) as a, Client.connect(url) as b:
        fa, fb = await open_both(a, b)
        await fa.lock(WR, 0, 100)
        # fcntl(F_SETLK) on the other machine: EAGAIN, and who holds what
        with pytest.raises(LockDenied) as ei:
            await fb.lock(RD, 50, 10)
        e = ei.value
        assert isinstance(e, BlockingIOError) and e.errno == errno.EAGAIN and e.status == c.NFS4ERR_DENIED
        assert (e.conflict.offset, e.conflict.length, e.conflict.type) == (0, 100, c.WRITE_LT)
        assert (e.conflict.start, e.conflict.end, e.conflict.posix_type) == (0, 99, WR)
        assert a.clientid.identity is not None and e.conflict.owner.clientid == a.clientid.identity.clientid
        # F_GETLK says the same without asking for the lock
        conflict = await fb.test_lock(RD, 99, 1)
        assert conflict is not None and (conflict.offset, conflict.length, conflict.type) == (0, 100, c.WRITE_LT)
        assert await fb.test_lock(WR, 100, 0) is None  # the rest of the file is free
        await fb.lock(WR, 100, 0)  # ...and can be locked, to the end of the file
        assert await fa.test_lock(RD, 0, 100) is None  # a File's own lock never stands in its way
        conflict = await fa.test_lock(RD, 5000, 1)  # the other one's lock to EOF covers any offset
        assert conflict is not None and (conflict.offset, conflict.length) == (100, TO_EOF)
        assert conflict.end == OFFSET_MAX
        # both go on reading and writing their own ranges while locked
        await fa.pwrite(0, b"A" * 10)
        await fb.pwrite(100, b"B" * 10)
        assert await fb.pread(0, 10) == b"A" * 10 and await fa.pread(100, 10) == b"B" * 10


async def test_readers_share_a_writer_waits_for_all_of_them_and_an_upgrade_for_the_others(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    url = url_of(ganesha, export_path)
    async with Client.connect(url) as a, Client.connect(url) as b:
        fa, fb = await open_both(a, b)
        await fa.lock(RD)
        await fb.lock(RD)  # read locks share
        with pytest.raises(LockDenied):
            await fa.lock(WR, 10, 10)  # upgrading part of it: b's read lock is in the way
        conflict = await fa.test_lock(WR)
        assert conflict is not None and conflict.type == c.READ_LT
        await fb.unlock()
        await fa.lock(WR, 10, 10)  # now the upgrade goes through, and keeps the read lock around it
        with pytest.raises(LockDenied) as ei:
            await fb.lock(RD, 15, 1)
        assert (ei.value.conflict.offset, ei.value.conflict.length, ei.value.conflict.type) == (10, 10, c.WRITE_LT)
        await fb.lock(RD, 0, 10)  # a's read lock there shares
        with pytest.raises(LockDenied):
            await fb.lock(WR, 30, 1)  # a's read lock beyond its write lock is still there
        assert list(a.nfs.byte_range_locks.lock_state(fa.of, fa).ranges) == [(0, 10, c.READ_LT), (10, 10, c.WRITE_LT),
                                                            (20, TO_EOF, c.READ_LT)]


async def test_an_unlock_of_part_of_a_range_lets_the_other_in_there_only(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    url = url_of(ganesha, export_path)
    async with Client.connect(url) as a, Client.connect(url) as b:
        fa, fb = await open_both(a, b)
        await fa.lock(WR, 0, 100)
        await fa.unlock(40, 20)
        await fb.lock(WR, 40, 20)
        for offset in (0, 39, 60, 99):
            with pytest.raises(LockDenied):
                await fb.lock(WR, offset, 1)
        await fa.unlock()
        await fb.lock(WR)


async def test_a_file_that_unlocks_everything_frees_its_lock_state_on_the_server(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    """RFC 8881 8.2.4: a lock stateid outlives its last lock until FREE_STATEID; ours goes with the
    last LOCKU (else the server keeps one per lock owner and file for as long as the file is open)."""
    async with Client.connect(url_of(ganesha, export_path)) as a:
        await a.write_file("/f", b"x" * 100)
        f = await a.open("/f", "r+")
        await f.lock(WR, 0, 10)
        await f.lock(RD, 50, 10)
        st = a.nfs.byte_range_locks.lock_state(f.of, f)
        assert st is not None and st.stateid is not None
        lock_stateid = st.stateid
        await f.unlock(0, 10)
        assert a.nfs.byte_range_locks.lock_state(f.of, f) is st  # one lock left: the state stays
        await f.unlock(50, 10)
        assert a.nfs.byte_range_locks.lock_state(f.of, f) is None and not a.nfs.locks
        res = await a.nfs.run([TEST_STATEID4args([lock_stateid])], a.cred)
        assert res[0].res.tsr_status_codes == [c.NFS4ERR_BAD_STATEID]  # the server forgot it too
        await f.lock(WR, 0, 10)  # and the File locks again as a new lock owner on the file
        await f.close()


async def test_a_blocked_lock_waits_until_the_holder_unlocks(ganesha: Ganesha, export_path: ExportPath) -> None:
    url = url_of(ganesha, export_path)
    async with Client.connect(url) as a, Client.connect(url) as b:
        fa, fb = await open_both(a, b)
        await fa.lock(WR, 0, 100)
        got = trio.Event()

        async def waiter() -> None:
            await fb.lock(WR, 50, 100, wait=True)  # fcntl(F_SETLKW)
            got.set()

        async with trio.open_nursery() as n:
            n.start_soon(waiter)
            await trio.sleep(1.0)
            assert not got.is_set()  # a's lock still holds it back
            await fa.unlock()
            with trio.fail_after(3):
                await got.wait()
        with pytest.raises(LockDenied):
            await fa.lock(RD, 60, 1)  # b holds it now
        assert b.nfs.lock_counts["denied"] >= 2  # it was refused, and asked again


async def test_a_blocked_lock_is_granted_when_the_holder_client_goes_away(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    """The holder leaves with its file open and locked: its locks go with it at once, not when its
    lease runs out (20 s here), which is what the waiter would otherwise wait."""
    url = url_of(ganesha, export_path)
    async with Client.connect(url) as b:
        got = trio.Event()
        holding = trio.Event()

        async def holder() -> None:
            async with Client.connect(url) as a:
                await a.write_file("/f", b"x" * 100)
                fa = await a.open("/f", "r+")
                await fa.lock(WR)
                holding.set()
                await trio.sleep(1.0)
            # (the File is neither unlocked nor closed)

        async def waiter() -> None:
            await holding.wait()
            fb = await b.open("/f", "r+")
            await fb.lock(WR, wait=True)
            got.set()

        with trio.fail_after(8):
            async with trio.open_nursery() as n:
                n.start_soon(holder)
                n.start_soon(waiter)
        assert got.is_set()


async def test_a_cancelled_waiter_stops_asking_and_holds_nothing(ganesha: Ganesha, export_path: ExportPath) -> None:
    """Interrupting F_SETLKW (a trio cancellation) ends the wait and the waiter is left with nothing.
    NFS-Ganesha 4.3 then gives the range to a third party as soon as the holder lets it go; 9 keeps it
    for the waiter's lock owner for about a lease (RFC 8881 9.6 lets it; NFSv4.1 has no way to withdraw
    a wait; docs/testbed.md), so there the third party is told it is taken."""
    url = url_of(ganesha, export_path)
    async with Client.connect(url) as a, Client.connect(url) as b:
        fa, fb = await open_both(a, b)
        await fa.lock(WR, 0, 10)
        with trio.move_on_after(0.7) as scope:
            await fb.lock(WR, 0, 10, wait=True)
        assert scope.cancelled_caught
        asked = b.nfs.lock_counts["denied"]
        await trio.sleep(1.0)
        assert b.nfs.lock_counts["denied"] == asked  # no more LOCKs from the cancelled waiter
        assert b.nfs.byte_range_locks.lock_state(fb.of, fb) is None
        await fa.unlock()
        fc = await a.open("/f", "r+")  # another File: conflicts with fa's and fb's locks alike
        if ganesha.version == "4.3":
            await fc.lock(WR, 0, 10)
        else:
            with pytest.raises(LockDenied):
                await fc.lock(WR, 0, 10)
            assert b.nfs.lock_counts["denied"] == asked  # the server's hold made no LOCK of b's
        await fb.lock(RD, 20, 10)  # fb itself still locks elsewhere


async def test_closing_a_file_releases_its_locks(ganesha: Ganesha, export_path: ExportPath) -> None:
    url = url_of(ganesha, export_path)
    async with Client.connect(url) as a, Client.connect(url) as b:
        fa, fb = await open_both(a, b)
        await fa.lock(WR, 0, 10)
        await fa.lock(RD, 100, 0)
        of = fa.of
        await fa.close()  # LOCKU, FREE_STATEID and CLOSE (a CLOSE alone: NFS4ERR_LOCKS_HELD)
        assert not a.nfs.locks
        with pytest.raises(NFS4Error) as ei:  # the open is gone on the server: it was closed
            await a.nfs.run([PUTFH4args(of.fh), READ4args(of.stateid, 0, 1)], a.cred)
        assert ei.value.status in (c.NFS4ERR_BAD_STATEID, c.NFS4ERR_STALE_STATEID)
        await fb.lock(WR)


async def test_close_later_releases_locks_of_every_owner(ganesha: Ganesha, export_path: ExportPath) -> None:
    """FUSE's shape: one open shared by several lock owners (processes), closed without waiting."""
    url = url_of(ganesha, export_path)
    async with Client.connect(url) as a, Client.connect(url) as b:
        await a.write_file("/f", b"x" * 100)
        fh, _ = await a.paths.resolve("/f")
        of = await a.nfs.open_fh(fh, a.cred, c.OPEN4_SHARE_ACCESS_BOTH)
        await a.nfs.byte_range_locks.lock(of, 1001, c.WRITE_LT, *nfs_range(0, 9), a.cred)  # process 1001: bytes 0..9
        await a.nfs.byte_range_locks.lock(of, 1002, c.READ_LT, *nfs_range(20, OFFSET_MAX), a.cred)  # 1002: 20 to EOF
        with pytest.raises(LockDenied):  # owners of one client conflict with each other
            await a.nfs.byte_range_locks.lock(of, 1002, c.READ_LT, 5, 1, a.cred)
        assert await a.nfs.byte_range_locks.lockt(of, 1001, c.WRITE_LT, 0, 10, a.cred) is None
        async with trio.open_nursery() as n:
            a.nfs.close_later(of, a.cred, n)
            await a.nfs.flush_closes()
        assert not a.nfs.locks
        with pytest.raises(NFS4Error) as ei:
            await a.nfs.run([PUTFH4args(of.fh), READ4args(of.stateid, 0, 1)], a.cred)
        assert ei.value.status in (c.NFS4ERR_BAD_STATEID, c.NFS4ERR_STALE_STATEID)
        fb = await b.open("/f", "r+")
        await fb.lock(WR)


async def test_a_lock_needs_the_matching_open_mode(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(url_of(ganesha, export_path)) as a:
        await a.write_file("/f", b"x")
        async with await a.open("/f", "r") as f:
            with pytest.raises(OSError) as ei:
                await f.lock(WR)  # as fcntl on a descriptor open for reading only
            assert ei.value.errno == errno.EBADF
            await f.lock(RD)
            with pytest.raises(ValueError):
                await f.lock(RD, 0, -1)


async def test_locks_are_reclaimed_after_a_server_restart_with_grace(ganesha_factory) -> None:
    server: Ganesha = ganesha_factory(grace=5, lease=10)
    ep = server.new_directory()
    url = url_of(server, ep)
    async with Client.connect(url, hard=True, timeo=5) as a:
        fa = await a.open("/f", "w+")
        await fa.write(b"x" * 1000)
        await fa.lock(WR, 0, 100)
        await fa.lock(RD, 500, 0)
        await trio.to_thread.run_sync(server.restart)  # the server forgets; it is in grace for 5 s
        await fa.pwrite(0, b"after")  # -> new client ID, the open and both locks reclaimed, the WRITE
        assert a.nfs.reclaimed == 1 and a.nfs.lock_counts["reclaimed"] == 1 and a.nfs.lock_counts["lost"] == 0
        async with Client.connect(url, hard=True, timeo=5) as b:
            fb = await b.open("/f", "r+")
            # (its LOCK waits for the grace period to end, then meets a's reclaimed lock)
            with pytest.raises(LockDenied) as ei:
                await fb.lock(RD, 50, 1)
            assert (ei.value.conflict.offset, ei.value.conflict.length) == (0, 100)
            with pytest.raises(LockDenied):
                await fb.lock(WR, 600, 1)  # the read lock to the end of the file came back too
            await fb.lock(RD, 700, 1)
            await fa.unlock()
            await fb.lock(WR, 0, 100)
        assert await fa.pread(0, 5) == b"after"


async def test_io_after_a_lock_was_lost_fails_with_eio(ganesha_factory) -> None:
    """The server restarts without a grace period: nothing can be reclaimed, another client may lock
    and write the range at once. The File that held the lock gets EIO for its I/O (it must not write
    as if still protected), the loss is logged, and unlocking clears it."""
    server: Ganesha = ganesha_factory()
    ep = server.new_directory()
    url = url_of(server, ep)
    async with Client.connect(url, hard=True, timeo=5) as a, Client.connect(url, hard=True, timeo=5) as b:
        fa = await a.open("/f", "w+")
        await fa.write(b"x" * 100)
        await fa.fsync()  # (nothing of it to send again after the restart)
        await fa.lock(WR, 0, 100)
        await trio.to_thread.run_sync(server.restart)
        await a.stat("/f")  # a notices the restart and recovers: nothing to reclaim in
        assert a.nfs.lock_counts["lost"] == 1
        fb = await b.open("/f", "r+")
        await fb.lock(WR, 0, 100)  # the server no longer knows a's lock
        await fb.pwrite(0, b"b wrote this")
        for io in (fa.pread(0, 10), fa.pwrite(0, b"a"), fa.lock(WR, 200, 1)):
            with pytest.raises(LockLost) as ei:
                await io
            assert ei.value.errno == errno.EIO and "lost" in str(ei.value)
        st = a.nfs.byte_range_locks.lock_state(fa.of, fa)
        assert st is not None and st.lost is not None
        await fa.unlock()
        assert a.nfs.byte_range_locks.lock_state(fa.of, fa) is None
        await fa.close()
        assert (ep.local / "f").read_bytes()[:12] == b"b wrote this"


async def test_an_open_made_again_after_the_server_lost_it_does_not_bring_its_locks_back(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    """The server dropped the open and its lock behind the client's back (as when our lease ran out)
    and another client locked and wrote the range meanwhile. Opening the file again (what a front end
    does on NFS4ERR_BAD_STATEID) must not pretend the lock is still held: that File's I/O fails with
    EIO until it unlocks."""
    url = url_of(ganesha, export_path)
    async with Client.connect(url) as a, Client.connect(url) as b:
        fa, fb = await open_both(a, b)
        await fa.lock(WR, 0, 10)
        st = a.nfs.byte_range_locks.lock_state(fa.of, fa)
        assert st is not None and st.stateid is not None
        current = stateid4(0, st.stateid.other)
        await a.nfs.run([PUTFH4args(fa.of.fh), LOCKU4args(c.WRITE_LT, 0, current, 0, TO_EOF),
                         FREE_STATEID4args(current), CLOSE4args(0, fa.of.stateid)], a.cred)
        await fb.lock(WR, 0, 10)
        await fb.pwrite(0, b"b")
        with pytest.raises(NFS4Error) as ei:
            await fa.pread(0, 1)
        assert ei.value.status == c.NFS4ERR_BAD_STATEID
        await a.nfs.reopen(fa.of, a.cred)
        with pytest.raises(LockLost):
            await fa.pread(0, 1)
        assert a.nfs.lock_counts["lost"] == 1
        await fa.unlock()
        assert await fa.pread(0, 1) == b"b"  # the open made again works for I/O without the lock
