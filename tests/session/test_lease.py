"""The lease against a real NFS-Ganesha: an idle client keeps it (RFC 8881 section 8.3), so what it
holds is still there when it is used again, with no recovery."""

from __future__ import annotations

from collections.abc import Callable

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha

LEASE = 5


async def test_an_idle_client_renews_the_lease_the_server_gave_it(ganesha_factory: Callable[..., Ganesha]) -> None:
    """The client learns the server's lease time (here far shorter than the 90 s it assumes until
    then) after its session is made; its renewals follow that lease from then on, not the one it
    assumed, or the server expires the idle client and its next request meets NFS4ERR_BADSESSION."""
    server = ganesha_factory(lease=LEASE)
    ep = server.new_directory()
    async with Client.connect(f"nfs://{server.host}:{server.port}{ep.remote}") as nfs:
        assert nfs.clientid.lease_time == LEASE
        f = await nfs.open("/kept", "w")
        await f.write(b"written before the pause")
        session = nfs.clientid.session
        await trio.sleep(3 * LEASE)  # idle: the server's reaper runs meanwhile
        await f.write(b", and after it")  # the open's stateid is still valid
        await f.close()
        assert nfs.clientid.recoveries == 0
        assert nfs.clientid.session is session
    assert (ep.local / "kept").read_bytes() == b"written before the pause, and after it"
