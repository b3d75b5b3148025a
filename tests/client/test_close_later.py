"""CLOSEs nobody waits for (``NFSv4.close_later``, FUSE's release) go several to a COMPOUND, or in
front of the next OPEN's; one that fails does not keep the others from closing, nor the OPEN from
running. Against a real NFS-Ganesha."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
import trio
from shape_spy import shapes_taken

from pynfsrdma._client import opens as opens_module
from pynfsrdma._client.api import Client
from pynfsrdma._client.nfs4 import NFSv4
from pynfsrdma._client.open_state import OpenFile
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.types import PUTFH4args, READ4args, stateid4
from pynfsrdma._rpc.auth import Credential
from pynfsrdma._testbed.ganesha import PSEUDO_PATH, Ganesha
from pynfsrdma._testbed.mutating_proxy import MutatingProxy
from pynfsrdma._testbed.mutations import Mutation, ReplyMutator, Rule


async def test_closes_share_compounds_and_one_already_gone_does_not_stop_the_rest(ganesha: Ganesha) -> None:
    d = ganesha.new_directory(prefix="close-later-")
    top = f"/{d.local.name}"
    async with Client.connect(ganesha.url) as nfs:
        n = nfs.nfs
        opens = []
        for i in range(5):
            await nfs.write_file(f"{top}/f{i}", b"%d" % i)
            fh, _ = await nfs.paths.resolve(f"{top}/f{i}")
            opens.append(await n.open_fh(fh, nfs.cred, c.OPEN4_SHARE_ACCESS_READ))
        opens[1].stateid = stateid4(1, b"not-a-state!")  # its CLOSE in the batch: NFS4ERR_BAD_STATEID
        async with trio.open_nursery() as nursery:
            for of in opens:
                n.close_later(of, nfs.cred, nursery)
            assert all(of.closed for of in opens) and not any(id(of) in n.opens for of in opens)
            await n.flush_closes()
        # every open is closed on the server: a READ with its stateid finds nothing (a second CLOSE
        # would not say: NFS-Ganesha answers it NFS4_OK, as a retransmission)
        for of in opens:
            try:
                await n.run([PUTFH4args(of.fh), READ4args(of.stateid, 0, 1)], nfs.cred)
            except NFS4Error as e:
                assert e.status in (c.NFS4ERR_BAD_STATEID, c.NFS4ERR_STALE_STATEID), e
            else:
                raise AssertionError(f"open {opens.index(of)} of {len(opens)} was still open")


async def test_a_full_batch_of_closes_goes_without_waiting_for_the_gather_time(
    ganesha: Ganesha, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLOSES_PER_COMPOUND CLOSEs waiting go at once: an untar's closes share a COMPOUND however slowly
    they come, without one of them waiting longer than CLOSE_GATHER."""
    monkeypatch.setattr(opens_module, "CLOSE_GATHER", 3600.0)  # (a batch that waited for it would not go)
    d = ganesha.new_directory(prefix="close-full-")
    top = f"/{d.local.name}"
    async with Client.connect(ganesha.url) as nfs:
        n = nfs.nfs
        opens = []
        for i in range(opens_module.CLOSES_PER_COMPOUND):
            await nfs.write_file(f"{top}/f{i}", b"%d" % i)
            fh, _ = await nfs.paths.resolve(f"{top}/f{i}")
            opens.append(await n.open_fh(fh, nfs.cred, c.OPEN4_SHARE_ACCESS_READ))
        async with trio.open_nursery() as nursery:
            for of in opens[:-1]:
                n.close_later(of, nfs.cred, nursery)
            await trio.sleep(0.5)
            for of in opens[:-1]:  # one short of a batch: they wait
                await n.run([PUTFH4args(of.fh), READ4args(of.stateid, 0, 1)], nfs.cred)
            n.close_later(opens[-1], nfs.cred, nursery)
            with trio.move_on_after(60) as waited:
                while n._close_sender is not None:
                    await trio.sleep(0.01)
            assert not waited.cancelled_caught, "a full batch of CLOSEs waited for CLOSE_GATHER"
        for of in opens:
            with pytest.raises(NFS4Error) as e:
                await n.run([PUTFH4args(of.fh), READ4args(of.stateid, 0, 1)], nfs.cred)
            assert e.value.status in (c.NFS4ERR_BAD_STATEID, c.NFS4ERR_STALE_STATEID)


# the OPENs by name the CLOSEs that wait may go in front of: the mount's unchecked create (a prepared
# shape), its exclusive create (another), and an open with neither (the general encoder)
_OPEN_KINDS = {
    "create-with-access": {"create": True, "check": c.ACCESS4_READ | c.ACCESS4_MODIFY, "dir_attrs": True},
    "exclusive-create": {"create": True, "exclusive": True, "dir_attrs": True},
    "create-plain": {"create": True},
}


async def _closed_on_server(n: NFSv4, opens: list[OpenFile], cred: Credential) -> None:
    """Every open of ``opens`` is closed on the server: a READ with its stateid finds nothing."""
    for of in opens:
        with pytest.raises(NFS4Error) as e:
            await n.run([PUTFH4args(of.fh), READ4args(of.stateid, 0, 1)], cred)
        assert e.value.status in (c.NFS4ERR_BAD_STATEID, c.NFS4ERR_STALE_STATEID), f"open {opens.index(of)}"


async def _opened(nfs: Client, top: str, count: int) -> list[OpenFile]:
    opens = []
    for i in range(count):
        await nfs.write_file(f"{top}/f{i}", b"%d" % i)
        fh, _ = await nfs.paths.resolve(f"{top}/f{i}")
        opens.append(await nfs.nfs.open_fh(fh, nfs.cred, c.OPEN4_SHARE_ACCESS_READ))
    return opens


@contextlib.asynccontextmanager
async def _closes_queued(nfs: Client, top: str, count: int = 3) -> AsyncIterator[tuple[list[OpenFile], bytes]]:
    """``count`` files of ``top`` opened, their CLOSEs queued (``close_later``) for the body to send:
    the opens and ``top``'s file handle. The queue is flushed after the body."""
    opens = await _opened(nfs, top, count)
    dir_fh, _ = await nfs.paths.resolve(top)
    async with trio.open_nursery() as nursery:
        for of in opens:
            nfs.nfs.close_later(of, nfs.cred, nursery)
        yield opens, dir_fh
        await nfs.nfs.flush_closes()


@pytest.mark.parametrize("owner_per_open", [True, False], ids=["owner-per-open", "owner-per-user"])
@pytest.mark.parametrize("kind", list(_OPEN_KINDS))
async def test_waiting_closes_ride_in_front_of_the_next_open(
    ganesha: Ganesha, monkeypatch: pytest.MonkeyPatch, kind: str, owner_per_open: bool
) -> None:
    """The CLOSEs that wait go in the next OPEN's COMPOUND: one COMPOUND for the OPEN and them, the
    opens closed on the server, the new file open; a prepared OPEN stays prepared with them."""
    monkeypatch.setattr(opens_module, "CLOSE_GATHER", 3600.0)  # (alone, they would not go in this test)
    d = ganesha.new_directory(prefix="close-ride-")
    top = f"/{d.local.name}"
    async with Client.connect(ganesha.url) as nfs:
        n = nfs.nfs
        n.owner_per_open = owner_per_open
        opens = await _opened(nfs, top, 3)
        dir_fh, _ = await nfs.paths.resolve(top)
        args = _OPEN_KINDS[kind]
        base = (opens_module.CREATE_ACCESS_SHAPE if kind == "create-with-access"
                else opens_module.CREATE_EXCLUSIVE_SHAPE if kind == "exclusive-create" else None)
        taken = shapes_taken(monkeypatch, {} if base is None else {id(opens_module.riding_shape(base, 3)): "riding"})
        assert n.client.session is not None
        stats = n.client.session.stats
        async with trio.open_nursery() as nursery:
            for of in opens:
                n.close_later(of, nfs.cred, nursery)
            calls = stats.calls
            new = await n.open(dir_fh, "new", nfs.cred, access=c.OPEN4_SHARE_ACCESS_BOTH, **args)  # type: ignore[arg-type]
            assert stats.calls == calls + 1, "the CLOSEs went in a COMPOUND of their own"
            assert not n._closing
            assert taken == ([] if base is None else ["riding"])
            await _closed_on_server(n, opens, nfs.cred)
            await n.run([PUTFH4args(new.fh), READ4args(new.stateid, 0, 1)], nfs.cred)  # (open)
            await n.close(new, nfs.cred)
            await n.flush_closes()
        assert new.dir_change is not None and new.attrs is not None
        if base is not None:
            assert new.dir_attrs is not None


async def test_a_failing_close_in_front_does_not_fail_the_open(
    ganesha: Ganesha, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A COMPOUND that stops at a CLOSE in front of an OPEN did not run the OPEN: it goes again alone
    and the file is created; the CLOSE before the failing one went, the one after it goes later."""
    monkeypatch.setattr(opens_module, "CLOSE_GATHER", 3600.0)
    d = ganesha.new_directory(prefix="close-ride-bad-")
    top = f"/{d.local.name}"
    async with Client.connect(ganesha.url) as nfs:
        n = nfs.nfs
        assert n.client.session is not None
        stats = n.client.session.stats
        async with _closes_queued(nfs, top) as (opens, dir_fh):
            opens[1].stateid = stateid4(1, b"not-a-state!")  # its CLOSE: NFS4ERR_BAD_STATEID
            calls = stats.calls
            new = await n.open(dir_fh, "new", nfs.cred, access=c.OPEN4_SHARE_ACCESS_BOTH,
                               **_OPEN_KINDS["create-with-access"])  # type: ignore[arg-type]
            assert stats.calls == calls + 2  # (the OPEN with the CLOSEs, stopped at the second; the OPEN alone)
            assert [of for of, _ in n._closing] == [opens[2]]
            await n.close(new, nfs.cred)
        assert (d.local / "new").is_file()
        await _closed_on_server(n, opens, nfs.cred)


async def test_an_open_failing_behind_closes_leaves_them_closed(
    ganesha: Ganesha, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OPEN that fails behind CLOSEs that went: its failure is the caller's, and the opens are
    closed on the server (nothing of them waits any more)."""
    monkeypatch.setattr(opens_module, "CLOSE_GATHER", 3600.0)
    d = ganesha.new_directory(prefix="close-ride-exist-")
    top = f"/{d.local.name}"
    async with Client.connect(ganesha.url) as nfs:
        n = nfs.nfs
        assert n.client.session is not None
        stats = n.client.session.stats
        async with _closes_queued(nfs, top) as (opens, dir_fh):
            calls = stats.calls
            with pytest.raises(NFS4Error) as e:  # (an exclusive create of a name there already)
                await n.open(dir_fh, "f0", nfs.cred, access=c.OPEN4_SHARE_ACCESS_BOTH,
                             **_OPEN_KINDS["exclusive-create"])  # type: ignore[arg-type]
            assert e.value.status == c.NFS4ERR_EXIST and e.value.op == c.OP_OPEN
            assert stats.calls == calls + 1
            assert not n._closing
            await _closed_on_server(n, opens, nfs.cred)


async def test_closes_in_front_of_a_cancelled_open_go_later(ganesha: Ganesha, monkeypatch: pytest.MonkeyPatch) -> None:
    """An OPEN cancelled on its way (a FUSE request interrupted) may not have taken the CLOSEs in
    front of it to the server: they go back to the queue, and go."""
    monkeypatch.setattr(opens_module, "CLOSE_GATHER", 3600.0)
    d = ganesha.new_directory(prefix="close-ride-cancel-")
    top = f"/{d.local.name}"
    async with Client.connect(ganesha.url) as nfs:
        n = nfs.nfs
        async with _closes_queued(nfs, top) as (opens, dir_fh):
            with trio.move_on_after(0) as cancelled:
                await n.open(dir_fh, "new", nfs.cred, access=c.OPEN4_SHARE_ACCESS_BOTH,
                             **_OPEN_KINDS["create-with-access"])  # type: ignore[arg-type]
            assert cancelled.cancelled_caught
            assert [of for of, _ in n._closing] == opens
        await _closed_on_server(n, opens, nfs.cred)


async def test_an_open_too_big_to_cache_behind_closes_goes_again_alone(
    ganesha: Ganesha, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose reply cache cannot keep the OPEN's reply with the CLOSEs' in front of it stops at
    the OPEN with NFS4ERR_REP_TOO_BIG_TO_CACHE (the Linux nfsd reckons each operation's largest reply
    against a cache of about 2 KiB): the CLOSEs went, and the OPEN goes again alone; the user sees the
    file created, no error."""
    monkeypatch.setattr(opens_module, "CLOSE_GATHER", 3600.0)
    d = ganesha.new_directory(prefix="close-ride-big-")
    top = f"/{d.local.name}"
    # SEQUENCE, then PUTFH and CLOSE for each of the three opens, then the directory's PUTFH: the OPEN
    # is result 8
    rule = Rule(Mutation.STATUS, c.OP_OPEN, "result 8 failed", c.NFS4ERR_REP_TOO_BIG_TO_CACHE, count=0)
    async with trio.open_nursery() as proxies:
        proxy = MutatingProxy("127.0.0.1", 0, ganesha.host, ganesha.port, ReplyMutator(rules=[rule]))
        await proxies.start(proxy.run)
        async with Client.connect(f"nfs://127.0.0.1:{proxy.port}{PSEUDO_PATH}") as nfs:
            n = nfs.nfs
            assert n.client.session is not None
            stats = n.client.session.stats
            async with _closes_queued(nfs, top) as (opens, dir_fh):
                calls = stats.calls
                rule.count = 1
                new = await n.open(dir_fh, "new", nfs.cred, access=c.OPEN4_SHARE_ACCESS_BOTH,
                                   **_OPEN_KINDS["create-with-access"])  # type: ignore[arg-type]
                assert rule.count == 0, "the OPEN did not ride behind the CLOSEs"
                assert stats.calls == calls + 2  # (the OPEN behind the CLOSEs, stopped there; the OPEN alone)
                assert not n._closing
                await _closed_on_server(n, opens, nfs.cred)
                await n.run([PUTFH4args(new.fh), READ4args(new.stateid, 0, 1)], nfs.cred)  # (open)
                await n.close(new, nfs.cred)
            assert (d.local / "new").is_file()
        proxies.cancel_scope.cancel()


@pytest.mark.parametrize("owner_per_open", [True, False], ids=["owner-per-open", "owner-per-user"])
async def test_waiting_closes_ride_in_front_of_an_open_by_file_handle(
    ganesha: Ganesha, monkeypatch: pytest.MonkeyPatch, owner_per_open: bool
) -> None:
    """An OPEN by file handle (CLAIM_FH: the path API's reads, the mount's open of a file it knows no
    single name of) carries the CLOSEs that wait: one COMPOUND, the opens closed on the server, the
    file open with the access asked about."""
    monkeypatch.setattr(opens_module, "CLOSE_GATHER", 3600.0)
    d = ganesha.new_directory(prefix="close-ride-fh-")
    top = f"/{d.local.name}"
    async with Client.connect(ganesha.url) as nfs:
        n = nfs.nfs
        n.owner_per_open = owner_per_open
        await nfs.write_file(f"{top}/other", b"other")
        fh, _ = await nfs.paths.resolve(f"{top}/other")
        assert n.client.session is not None
        stats = n.client.session.stats
        async with _closes_queued(nfs, top) as (opens, _):
            calls = stats.calls
            new = await n.open_fh(fh, nfs.cred, c.OPEN4_SHARE_ACCESS_READ, check=c.ACCESS4_READ)
            assert stats.calls == calls + 1, "the CLOSEs went in a COMPOUND of their own"
            assert not n._closing
            await _closed_on_server(n, opens, nfs.cred)
            await n.run([PUTFH4args(new.fh), READ4args(new.stateid, 0, 1)], nfs.cred)  # (open)
            await n.close(new, nfs.cred)
        assert new.fh == fh and new.attrs is not None and new.attrs.size == len(b"other")
        assert new.granted is not None and new.granted & c.ACCESS4_READ


@pytest.mark.parametrize("by", ["handle", "known-name"])
async def test_a_queued_close_of_the_file_opened_is_not_sent(
    ganesha: Ganesha, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """A CLOSE waiting for the open state of the file an OPEN of the same owner is for (by handle,
    or by a name known to lead to it: the mount's open of an inode) does not ride in front of it
    (the server would end that state and make another): it stays queued, the OPEN carries the
    state on, and the CLOSE is never sent; the other CLOSEs ride."""
    monkeypatch.setattr(opens_module, "CLOSE_GATHER", 3600.0)
    d = ganesha.new_directory(prefix="close-ride-same-")
    top = f"/{d.local.name}"
    async with Client.connect(ganesha.url) as nfs:
        n = nfs.nfs
        n.owner_per_open = False  # (the mount's way: one open owner per user)
        assert n.client.session is not None
        stats = n.client.session.stats
        async with _closes_queued(nfs, top) as (opens, dir_fh):
            calls = stats.calls
            if by == "handle":
                new = await n.open_fh(opens[0].fh, nfs.cred, c.OPEN4_SHARE_ACCESS_READ)
            else:
                new = await n.open(dir_fh, "f0", nfs.cred, file=opens[0].fh)
            assert stats.calls == calls + 1
            assert [of for of, _ in n._closing] == [opens[0]], "the same file's CLOSE rode, or the others did not"
            assert new.stateid.other == opens[0].stateid.other  # (the open state carried on)
            await n.flush_closes()
            assert stats.calls == calls + 1, "the superseded CLOSE was sent"
            await _closed_on_server(n, opens[1:], nfs.cred)
            await n.run([PUTFH4args(new.fh), READ4args(new.stateid, 0, 1)], nfs.cred)  # (still open)
            await n.close(new, nfs.cred)
        await _closed_on_server(n, [new], nfs.cred)


async def test_a_failing_close_in_front_of_an_open_by_file_handle(
    ganesha: Ganesha, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A COMPOUND that stops at a CLOSE in front of an OPEN by handle did not run the OPEN: it goes
    again alone and the file is open; the CLOSE before the failing one went, the one after it goes
    later."""
    monkeypatch.setattr(opens_module, "CLOSE_GATHER", 3600.0)
    d = ganesha.new_directory(prefix="close-ride-fh-bad-")
    top = f"/{d.local.name}"
    async with Client.connect(ganesha.url) as nfs:
        n = nfs.nfs
        await nfs.write_file(f"{top}/other", b"other")
        fh, _ = await nfs.paths.resolve(f"{top}/other")
        assert n.client.session is not None
        stats = n.client.session.stats
        async with _closes_queued(nfs, top) as (opens, _):
            opens[1].stateid = stateid4(1, b"not-a-state!")  # its CLOSE: NFS4ERR_BAD_STATEID
            calls = stats.calls
            new = await n.open_fh(fh, nfs.cred, c.OPEN4_SHARE_ACCESS_READ)
            assert stats.calls == calls + 2  # (the OPEN with the CLOSEs, stopped at the second; the OPEN alone)
            assert [of for of, _ in n._closing] == [opens[2]]
            await n.run([PUTFH4args(new.fh), READ4args(new.stateid, 0, 1)], nfs.cred)  # (open)
            await n.close(new, nfs.cred)
        await _closed_on_server(n, opens, nfs.cred)
