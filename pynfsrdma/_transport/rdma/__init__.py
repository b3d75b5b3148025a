"""RPC-over-RDMA version 1 (RFC 8166, RFC 8267, RFC 8797).

Layered as in Linux's xprtrdma: :mod:`.chunks` and :mod:`.reply` decide and encode chunks (the
requester's side: a responder's, for the testbed, are :mod:`pynfsrdma._testbed.responder_chunks`),
:mod:`.credits` is the credit gate, :mod:`.provider` is the verbs-provider interface, :mod:`.soft`
a software provider and :mod:`.pyverbs_provider` the one for real RDMA devices. None of the marshalling code touches
a provider, and providers never parse RPC.

:func:`connect_rdma` is what ``proto=rdma`` URLs use. URL options it reads:

* ``provider``: ``soft`` (emulated RDMA over TCP, for machines without RDMA) or ``pyverbs``
  (the default; a clear :class:`~.provider.NoRdmaDevice` error when there is no device);
* ``credits``: how many calls we ask to have outstanding (default 32);
* ``inline``: our inline send and receive size in bytes (default 4096, at least 1024); the
  thresholds used are negotiated with the server's RFC 8797 private data on every connect;
* ``remote_invalidation``: ``1`` or ``0`` to advertise (or not) that the server may retire one
  registration per reply with Send With Invalidate (default: when the provider can);
* ``private_data``: ``0`` to connect with no RFC 8797 private data (both sides then use the
  version 1 defaults: 1024-byte inline thresholds, no remote invalidation); default ``1``;
* ``pinned``: MiB of chunk memory kept registered between calls (:mod:`.chunk_memory`; default
  256); ``0`` registers every chunk for its call alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..base import Transport
from .chunk_memory import DEFAULT_PINNED_LIMIT
from .provider import NoRdmaDevice, Provider
from .transport import DEFAULT_CREDITS, DEFAULT_INLINE, RdmaTransport

PROVIDERS = ("soft", "pyverbs")


def make_provider(name: str | None) -> Provider:
    """The verbs provider called ``name`` (None: pyverbs, which needs an RDMA device).

    Raises :class:`NoRdmaDevice` when pyverbs is asked for (or defaulted to) and this machine has
    no RDMA device or no usable pyverbs, and ValueError for an unknown name.
    """
    if name == "soft":
        from .soft import SoftProvider

        return SoftProvider()
    if name in (None, "", "pyverbs"):
        from .pyverbs_provider import open_pyverbs_provider

        try:
            return open_pyverbs_provider()
        except NoRdmaDevice as e:
            raise NoRdmaDevice(f"{e} (use provider=soft for the software provider)") from e
    raise ValueError(f"unknown RDMA provider {name!r} (use one of: {', '.join(PROVIDERS)})")


def _int_option(options: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as e:
        raise ValueError(f"RDMA option {key}={raw!r} is not a number") from e
    if value < minimum:
        raise ValueError(f"RDMA option {key}={value} is below the minimum {minimum}")
    return value


async def connect_rdma(
    host: str, port: int, *, timeout: float = 10.0, options: Mapping[str, str] | None = None
) -> Transport:
    """An RPC-over-RDMA transport to ``host``:``port`` (the ``proto=rdma`` connector).

    The transport runs its background tasks in a nursery of its own (a trio system task that
    lives until the transport is closed; see :meth:`RdmaTransport.open`), so it fits wherever a
    :class:`~pynfsrdma._transport.base.Transport` is expected.
    """
    opts = options or {}
    provider = make_provider(opts.get("provider"))
    credits = _int_option(opts, "credits", DEFAULT_CREDITS, 1)
    inline = _int_option(opts, "inline", DEFAULT_INLINE, 1024)
    reminv = opts.get("remote_invalidation")
    if reminv not in (None, "", "0", "1"):
        raise ValueError(f"RDMA option remote_invalidation={reminv!r} is not 0 or 1")
    pinned = _int_option(opts, "pinned", DEFAULT_PINNED_LIMIT >> 20, 0)
    pdata = opts.get("private_data")
    if pdata not in (None, "", "0", "1"):
        raise ValueError(f"RDMA option private_data={pdata!r} is not 0 or 1")
    return await RdmaTransport.open(
        provider,
        host,
        port,
        timeout=timeout,
        credits=credits,
        inline_size=inline,
        remote_invalidation=None if not reminv else reminv == "1",
        send_private_data=pdata != "0",
        pinned_limit=pinned << 20,
    )


__all__ = ["PROVIDERS", "connect_rdma", "make_provider"]
