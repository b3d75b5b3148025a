"""What the tests of replies changed by the testbed's mutating proxy share besides their fixture
(``mutating``, conftest.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.mutating_proxy import MutatingProxy

Proxy = Callable[..., Awaitable[MutatingProxy]]  # the fixture: ``await mutating(*rules)``
ALWAYS = 1 << 30  # a rule's count: every reply it matches


def url(proxy: MutatingProxy, export_path: ExportPath) -> str:
    """The URL of ``export_path`` through ``proxy``."""
    return f"nfs://127.0.0.1:{proxy.port}{export_path.remote}"
