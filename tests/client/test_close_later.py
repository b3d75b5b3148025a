"""CLOSEs nobody waits for (``NFSv4.close_later``, FUSE's release) go several to a COMPOUND; one that
fails does not keep the others from closing. Against a real NFS-Ganesha."""

from __future__ import annotations

import pytest
import trio

from pynfsrdma._client import opens as opens_module
from pynfsrdma._client.api import Client
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.types import PUTFH4args, READ4args, stateid4
from pynfsrdma._testbed.ganesha import Ganesha


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
