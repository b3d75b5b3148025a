"""The client's stack, built one way for every front end (the FUSE mount and the path API): a
:class:`~..session.client_id.ClientID` on a first path, the server's other paths
(:class:`~..trunking.Trunking`: ``addrs=``, ``nconnect=``, discovery), and :class:`~.nfs4.NFSv4`
over them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from .._proto.nfs4 import const as c
from .._session.client_id import ClientID
from .._session.path_set import Path
from .._transport.base import Transport
from .._transport.tcp import TcpTransport
from .._transport.tls import TlsTransport, client_context, connect_tls
from .._transport.xprtsec import XprtSec, XprtSecError
from .._trunking import Trunking, TrunkingOptions
from .nfs4 import NFSv4
from .url import NfsURL, URLError, reads_per_compound


def xprtsec_of(url: NfsURL) -> XprtSec:
    """The transport security ``url``'s options ask for (``xprtsec=``, RFC 9289); URLError for
    options that do not fit, and for TLS over RDMA (RPC-with-TLS is for stream transports)."""
    try:
        sec = XprtSec.from_options(url.options)
    except XprtSecError as e:
        raise URLError(str(e)) from None
    if sec.on and url.proto == "rdma":
        raise URLError(f"xprtsec={sec.mode} needs proto=tcp: RPC-with-TLS (RFC 9289) is for stream transports, "
                       "not RDMA")
    return sec


async def connector_for(url: NfsURL, address: str, port: int, timeout: float) -> Callable[[], Any]:
    """What connects to ``address``:``port`` the way ``url`` says (``proto=tcp|rdma``, ``xprtsec=``):
    under TLS, every connection, to every address, starts TLS and checks the certificate against
    the name the URL gives (its host)."""
    sec = xprtsec_of(url)
    if url.proto == "rdma":
        from .._transport.rdma import connect_rdma  # optional: pyverbs or the software provider

        async def rdma() -> Transport:
            return await connect_rdma(address, port, timeout=timeout, options=url.options)

        return rdma

    if sec.on:
        peer = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        context = client_context(sec, peer)

        async def tls() -> TlsTransport:
            return await connect_tls(address, port, url.host, context, c.NFS4_PROGRAM, c.NFS_V4, timeout=timeout)

        return tls

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
        own_kind_only=xprtsec_of(url).on,  # (no plain RDMA path beside TLS ones)
    )
    await trunking.start()
    nfs = NFSv4(clientid)
    nfs.batched.reads_per_compound = reads_per_compound(url)  # (see Batched: Linux's nfsd)
    return Stack(clientid, trunking, nfs)
