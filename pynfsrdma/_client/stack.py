"""The client's stack, built one way for every front end (the FUSE mount and the path API): a
:class:`~..session.client_id.ClientID` on a first path, the server's other paths
(:class:`~..trunking.Trunking`: ``addrs=``, ``nconnect=``, discovery), and :class:`~.nfs4.NFSv4`
over them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from .._session.client_id import ClientID
from .._session.path_set import Path
from .._transport.base import Transport
from .._transport.tcp import TcpTransport
from .._trunking import Trunking, TrunkingOptions
from .nfs4 import NFSv4
from .url import NfsURL


async def connector_for(url: NfsURL, address: str, port: int, timeout: float) -> Callable[[], Any]:
    """What connects to ``address``:``port`` the way ``url`` says (``proto=tcp|rdma``)."""
    if url.proto == "rdma":
        from .._transport.rdma import connect_rdma  # optional: pyverbs or the software provider

        async def rdma() -> Transport:
            return await connect_rdma(address, port, timeout=timeout, options=url.options)

        return rdma

    async def tcp() -> Transport:
        return await TcpTransport.connect(address, port, timeout=timeout)

    return tcp


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
    connector = await connector_for(url, url.host, url.port, timeout)
    await clientid.start(Path(url.address, connector, url.proto), timeout=timeout)
    trunking = Trunking(
        clientid,
        nursery,
        trunk_options,
        lambda h, p: connector_for(url, h, p, timeout),
        default_port=url.port,
        rdma=url.proto == "rdma",
        transport_kind=url.proto,
    )
    await trunking.start()
    return Stack(clientid, trunking, NFSv4(clientid))
