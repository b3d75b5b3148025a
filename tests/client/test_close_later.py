"""CLOSEs nobody waits for (``NFSv4.close_later``, FUSE's release) go several to a COMPOUND; one that
fails does not keep the others from closing. Against a real NFS-Ganesha."""

from __future__ import annotations

import trio

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
            fh, _ = await nfs._resolve(f"{top}/f{i}")
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
