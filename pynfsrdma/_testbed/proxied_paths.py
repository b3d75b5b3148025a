"""The multipath layout: one server reached at several loopback addresses, each through its own proxy.

NFS-Ganesha listens on 127.0.0.1:P only; path *i* is a :class:`~.proxy.Proxy` listening on 127.0.0.(2+i)
with one port number shared by every path (P itself when it is free there), so a list of bare
addresses plus one port names every path. All of 127.0.0.0/8 is local on Linux: no address set-up.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import trio

from .ganesha import PSEUDO_PATH, find_free_port
from .proxy import Proxy

__all__ = ["FIRST_PATH_HOST", "ProxiedPaths", "open_paths", "path_addresses"]

FIRST_PATH_HOST = 2  # path addresses start at 127.0.0.2; 127.0.0.1 is the server itself


def path_addresses(count: int, first: int = FIRST_PATH_HOST) -> list[str]:
    """``count`` loopback addresses for paths: 127.0.0.2, 127.0.0.3, ..."""
    if not 0 <= count <= 250 - first:
        raise ValueError(f"cannot make {count} loopback paths")
    return [f"127.0.0.{first + i}" for i in range(count)]


@dataclass
class ProxiedPaths:
    """Paths (proxies) in front of one server, all listening on :attr:`port`."""

    target_host: str
    target_port: int
    port: int
    proxies: list[Proxy] = field(default_factory=list)
    pseudo_path: str = PSEUDO_PATH

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.proxies]

    @property
    def urls(self) -> list[str]:
        return [f"nfs://{a}:{self.port}{self.pseudo_path}" for a in self.addresses]

    @property
    def url(self) -> str:
        """The URL of the first path."""
        return self.urls[0]

    def proxy(self, address: str) -> Proxy:
        """The proxy of the path at ``address`` (``"127.0.0.3"`` or ``"127.0.0.3:PORT"``)."""
        host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
        for p in self.proxies:
            if p.address == host:
                return p
        raise KeyError(f"no path at {address} (paths: {', '.join(self.addresses)})")

    def __getitem__(self, index: int) -> Proxy:
        return self.proxies[index]

    def __iter__(self) -> Iterator[Proxy]:
        return iter(self.proxies)

    def __len__(self) -> int:
        return len(self.proxies)

    def restore_all(self) -> None:
        for p in self.proxies:
            p.restore()

    def stop(self) -> None:
        for p in self.proxies:
            p.stop()


async def open_paths(
    nursery: trio.Nursery,
    target_host: str,
    target_port: int,
    count: int,
    *,
    first: int = FIRST_PATH_HOST,
    port: int | None = None,
) -> ProxiedPaths:
    """Start ``count`` proxies in ``nursery`` in front of ``target_host:target_port``.

    ``port`` defaults to the target's port if it is free on every path address, else to a port free
    on all of them. The proxies run until the nursery is cancelled or :meth:`ProxiedPaths.stop`.
    """
    addresses = path_addresses(count, first)
    if port is None:
        port = find_free_port(addresses, prefer=target_port) if addresses else target_port
    paths = ProxiedPaths(target_host, target_port, port)
    for address in addresses:
        proxy = Proxy(address, port, target_host, target_port, name=f"path {address}")
        await nursery.start(proxy.run)
        paths.proxies.append(proxy)
    return paths
