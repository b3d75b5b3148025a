"""The client's stack, built one way for every front end (the FUSE mount and the path API): a
:class:`~..session.client_id.ClientID` on a first path, the server's other paths
(:class:`~..trunking.Trunking`: ``addrs=``, ``nconnect=``, discovery), and :class:`~.nfs4.NFSv4`
over them."""

from __future__ import annotations

from dataclasses import dataclass

import trio

from .._session.client_id import ClientID
from .._session.path_set import Path
from .._trunking import Trunking, TrunkingOptions
from .._trunking.discovery import connector_factory
from .nfs4 import NFSv4
from .url import NfsURL


@dataclass(slots=True)
class Stack:
    clientid: ClientID
    trunking: Trunking
    nfs: NFSv4


async def start_stack(
    clientid: ClientID, nursery: trio.Nursery, url: NfsURL, trunk_options: TrunkingOptions, timeout: float
) -> Stack:
    """Start ``clientid`` (its session) on ``url``'s address, then its other paths (discovery is
    bounded, about a second, and never fails the start). The caller shuts ``clientid`` down, whether
    this returned or raised."""
    connectors = connector_factory(url.proto, url.options, timeout)  # (proto=tcp|rdma)
    connector = await connectors(url.host, url.port)
    await clientid.start(Path(url.address, connector, url.proto), timeout=timeout)
    trunking = Trunking(
        clientid,
        nursery,
        trunk_options,
        connectors,
        default_port=url.port,
        rdma=url.proto == "rdma",
        transport_kind=url.proto,
    )
    await trunking.start()
    return Stack(clientid, trunking, NFSv4(clientid))
