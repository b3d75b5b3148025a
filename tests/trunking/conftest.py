"""Fixtures of the trunking tests: a trunking advertiser in front of the session's NFS-Ganesha, and path
proxies in front of the advertiser, so that discovery, verification and failover all run for real.

``advertised(count=3, target=None, extra=())`` -> ``Advertised`` with ``.advertiser``, ``.paths``
(ProxiedPaths at 127.0.0.2, ...), ``.url(remote)`` (the first path's URL for an export directory).
The advertiser names every proxy (read order descending with the index) plus ``extra`` entries.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from pynfsrdma._testbed import Ganesha, ProxiedPaths, open_paths
from pynfsrdma._testbed.advertiser import AdvertisedAddress, TrunkingAdvertiser


@dataclass
class Advertised:
    advertiser: TrunkingAdvertiser
    paths: ProxiedPaths

    def url(self, remote: str, **options: object) -> str:
        q = "&".join(f"{k}={v}" for k, v in options.items())
        return f"nfs://{self.paths.addresses[0]}:{self.paths.port}{remote}" + (f"?{q}" if q else "")

    def address(self, i: int) -> str:
        return f"{self.paths.addresses[i]}:{self.paths.port}"


@pytest.fixture
async def advertised(ganesha: Ganesha) -> AsyncIterator[Callable[..., Awaitable[Advertised]]]:
    async with trio.open_nursery() as nursery:

        async def make(
            count: int = 3, target: Any = None, extra: Sequence[AdvertisedAddress] = (), first: int = 2
        ) -> Advertised:
            server = target if target is not None else ganesha
            adv = TrunkingAdvertiser("127.0.0.1", 0, server.host, server.port)
            await nursery.start(adv.run)
            paths = await open_paths(nursery, adv.host, adv.port, count, first=first)
            adv.addresses = [
                AdvertisedAddress(f"{a}:{paths.port}", rank=0, order=count - i)
                for i, a in enumerate(paths.addresses)
            ] + list(extra)
            return Advertised(adv, paths)

        yield make
        nursery.cancel_scope.cancel()
