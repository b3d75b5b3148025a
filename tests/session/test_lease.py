"""The lease against a real NFS-Ganesha: an idle client keeps it (RFC 8881 section 8.3), so what it
holds is still there when it is used again, with no recovery."""

from __future__ import annotations

from collections.abc import Callable

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._session.lease import RENEW_MAX, renew_interval
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


def test_a_lease_time_from_a_reply_sizes_no_sleep() -> None:
    """The lease time is the server's number: 0 does not make the renewals spin, 2**32 - 1 seconds
    (136 years: a flipped bit) does not stop them; between the two, a third of it."""
    assert renew_interval(0) == 1.0
    assert renew_interval(2**32 - 1) == RENEW_MAX == 60.0
    assert renew_interval(90) == 30.0
    assert renew_interval(LEASE) == LEASE / 3
