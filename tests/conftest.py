"""Fixtures shared by every test: a real NFS-Ganesha on loopback, directories in its export, more servers
on demand, and fault-injecting path proxies in front of a server.

- ``ganesha`` (session): a started :class:`~pynfsrdma._testbed.Ganesha` (``.url``, ``.host``, ``.port``,
  ``.export_dir``, ``.restart()`` ...), stopped and removed at the end of the run.
- ``export_path``: a fresh directory inside that export for one test, an
  :class:`~pynfsrdma._testbed.ganesha.ExportPath` with ``.local`` (Path on disk) and ``.remote``
  (``"/export/t-..."`` as seen over NFS).
- ``ganesha_factory``: ``ganesha_factory(**Ganesha_kwargs) -> Ganesha`` starts another server (grace
  period, another server owner/scope ...); all are stopped and removed after the test.
- ``proxied_paths`` (async): ``await proxied_paths(count=3, target=None) -> ProxiedPaths``, proxies at
  127.0.0.2, .3, ... (one shared ``.port``) in front of ``target`` (default: the ``ganesha`` server);
  ``.proxies``/``[i]``/``.proxy(address)`` give each path's :class:`~pynfsrdma._testbed.Proxy`
  (``cut()``, ``stall()``, ``delay(ms)``, ``throttle(kbps)``, ``restore()``, ``.stats``).
- Kerberos: ``kdc`` (session, an MIT KDC; KRB5_CONFIG names its realm for the run), ``krb5_ganesha``
  (session, an export taking krb5, krb5i and krb5p only), ``krb5_dir`` (a fresh directory in it) and
  ``krb5_user`` (a user of the test's own with a ticket; KRB5CCNAME names its cache).
- RPC-with-TLS: ``tls_certs`` (session: a CA, server, client and rogue certificates made with openssl,
  by name) and ``tls_front`` (``tls_front(target, **kwargs) -> RunningFront``: the testbed's TLS front
  in a thread of its own, in front of ``target``; see tests/tls_support.py; stopped after the test).

Tests using any of these get the ``ganesha`` marker automatically (``-m "not ganesha"`` leaves them out).
``--ganesha 9`` (or ``PYNFSRDMA_GANESHA=9``) runs every server of the run, the CLI's testbed in the
tests' subprocesses too, as NFS-Ganesha 9 from the testbed's Debian 13 root; the default is the host's 4.3.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from krb5_support import KERBEROS_SECTYPES, KerberosUser
from tls_support import RunningFront, start_front

from pynfsrdma._testbed import Ganesha, ProxiedPaths, open_paths
from pynfsrdma._testbed.ganesha import VERSION_ENV, VERSIONS, ExportPath
from pynfsrdma._testbed.kdc import SERVER_HOST, Kdc
from pynfsrdma._testbed.tls_front import make_certificates

GANESHA_FIXTURES = frozenset({"ganesha", "export_path", "ganesha_factory", "proxied_paths", "krb5_ganesha", "krb5_dir"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--ganesha", choices=VERSIONS, default=None,
        help=f"the NFS-Ganesha the tests start: 4.3 (the host's) or 9 (a Debian 13 root); default ${VERSION_ENV} or 4.3",
    )


def pytest_configure(config: pytest.Config) -> None:
    chosen = config.getoption("--ganesha")
    if chosen:
        os.environ[VERSION_ENV] = chosen  # every Ganesha() of the run, and the subprocesses' testbeds


def pytest_report_header(config: pytest.Config) -> str:
    return f"NFS-Ganesha: {os.environ.get(VERSION_ENV) or VERSIONS[0]}"


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
    """The link testbed's tests need root, iproute2 and nftables (bin/setup --test installs them): without
    them they fail saying so, rather than pass unrun."""
    from pynfsrdma._testbed.netns import missing_tools

    why = missing_tools()
    assert why is None, why


# -- Kerberos: one MIT KDC and one NFS-Ganesha whose export takes krb5, krb5i and krb5p, for the whole run
# (started on first use). ``kdc`` sets KRB5_CONFIG to its realm for the run (the client's gssapi reads it);
# ``krb5_user`` is a user of the test's own with a ticket, and KRB5CCNAME naming its cache for the test;
# ``krb5_dir`` a fresh directory (mode 0777: Kerberos users map to nobody) in the Kerberos export.


@pytest.fixture(scope="session")
def kdc() -> Iterator[Kdc]:
    with Kdc() as k:
        saved = {key: os.environ.get(key) for key in k.environment}
        os.environ.update(k.environment)
        try:
            yield k
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture(scope="session")
def krb5_ganesha(kdc: Kdc) -> Iterator[Ganesha]:
    keytab = kdc.service_keytab(f"nfs/{SERVER_HOST}")
    with Ganesha(sectype=KERBEROS_SECTYPES, keytab=keytab, environment=kdc.environment) as server:
        yield server


@pytest.fixture
def krb5_dir(krb5_ganesha: Ganesha) -> Iterator[ExportPath]:
    path = krb5_ganesha.new_directory()
    yield path
    shutil.rmtree(path.local, ignore_errors=True)


@pytest.fixture
def krb5_user(kdc: Kdc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KerberosUser:
    name = f"user{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    kdc.add_user(name, password)
    ccache = kdc.kinit(name, password, tmp_path / "ccache")
    monkeypatch.setenv("KRB5CCNAME", ccache)
    return KerberosUser(kdc.principal(name), password, ccache)


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_front(tls_certs: dict[str, Path]) -> Iterator[Callable[..., RunningFront]]:
    fronts: list[RunningFront] = []

    def make(target: Any, **kwargs: Any) -> RunningFront:
        front = start_front(target.host, target.port, tls_certs, **kwargs)
        fronts.append(front)
        return front

    yield make
    for front in fronts:
        front.stop()
