"""Fixtures shared by every test: a real NFS-Ganesha on loopback, directories in its export, more servers
on demand, and fault-injecting path proxies in front of a server.

- ``ganesha`` (session): a started :class:`~pynfsrdma.testbed.Ganesha` (``.url``, ``.host``, ``.port``,
  ``.export_dir``, ``.restart()`` ...), stopped and removed at the end of the run.
- ``export_path``: a fresh directory inside that export for one test, an
  :class:`~pynfsrdma.testbed.ganesha.ExportPath` with ``.local`` (Path on disk) and ``.remote``
  (``"/export/t-..."`` as seen over NFS).
- ``ganesha_factory``: ``ganesha_factory(**Ganesha_kwargs) -> Ganesha`` starts another server (grace
  period, another server owner/scope ...); all are stopped and removed after the test.
- ``proxied_paths`` (async): ``await proxied_paths(count=3, target=None) -> ProxiedPaths``, proxies at
  127.0.0.2, .3, ... (one shared ``.port``) in front of ``target`` (default: the ``ganesha`` server);
  ``.proxies``/``[i]``/``.proxy(address)`` give each path's :class:`~pynfsrdma.testbed.Proxy`
  (``cut()``, ``stall()``, ``delay(ms)``, ``throttle(kbps)``, ``restore()``, ``.stats``).

Tests using any of these get the ``ganesha`` marker automatically (``-m "not ganesha"`` leaves them out).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio

from pynfsrdma.testbed import Ganesha, ProxiedPaths, open_paths
from pynfsrdma.testbed.ganesha import ExportPath

GANESHA_FIXTURES = frozenset({"ganesha", "export_path", "ganesha_factory", "proxied_paths", "krb5_ganesha", "krb5_dir"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if GANESHA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.ganesha)


@pytest.fixture(scope="session")
def ganesha() -> Iterator[Ganesha]:
    """One NFS-Ganesha for the whole run (127.0.0.1, a free port, graceless, its own temporary export)."""
    with Ganesha() as server:
        yield server


@pytest.fixture
def export_path(ganesha: Ganesha) -> Iterator[ExportPath]:
    """A fresh directory in the shared export for this test; removed afterwards."""
    path = ganesha.new_directory()
    yield path
    shutil.rmtree(path.local, ignore_errors=True)


@pytest.fixture
def ganesha_factory() -> Iterator[Callable[..., Ganesha]]:
    """Start more servers: ``ganesha_factory(grace=5, server_owner="other")``; all end with the test."""
    started: list[Ganesha] = []

    def make(**kwargs: Any) -> Ganesha:
        server = Ganesha(**kwargs)
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.close()


@pytest.fixture
async def proxied_paths(ganesha: Ganesha) -> AsyncIterator[Callable[..., Awaitable[ProxiedPaths]]]:
    """``await proxied_paths(count=3, target=None, port=None)``: N path proxies in front of a server.

    ``target`` is a :class:`Ganesha` (or anything with ``.host`` and ``.port``); default the session's
    ``ganesha``. The proxies stop at the end of the test.
    """
    async with trio.open_nursery() as nursery:

        async def make(count: int = 3, target: Any = None, *, port: int | None = None) -> ProxiedPaths:
            server = target if target is not None else ganesha
            return await open_paths(nursery, server.host, server.port, count, port=port)

        yield make
        nursery.cancel_scope.cancel()


@pytest.fixture
def link_tools() -> None:
    """The link testbed's tests need root, iproute2 and nftables (bin/setup installs them): without
    them they fail saying so, rather than pass unrun."""
    from pynfsrdma.testbed.netns import missing_tools

    why = missing_tools()
    assert why is None, why
