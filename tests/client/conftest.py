"""Fixtures of the client tests.

- ``mutating`` (async): ``await mutating(*rules) -> MutatingProxy``, the testbed's mutating proxy in front of
  the session's ``ganesha``, changing replies by these rules (seed 1); it stops at the end of the test.
  ``mutating_support.py`` has its type, ``url(proxy, export_path)`` and ``ALWAYS``.
"""

from __future__ import annotations

import pytest
import trio
from mutating_support import Proxy

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.mutating_proxy import MutatingProxy
from pynfsrdma._testbed.mutations import ReplyMutator, Rule


@pytest.fixture
async def mutating(ganesha: Ganesha, nursery: trio.Nursery) -> Proxy:
    """``await mutating(*rules)``: a mutating proxy in front of ``ganesha`` with these rules."""

    async def make(*rules: Rule) -> MutatingProxy:
        proxy = MutatingProxy("127.0.0.1", 0, ganesha.host, ganesha.port, ReplyMutator(seed=1, rules=list(rules)))
        started: MutatingProxy = await nursery.start(proxy.run)
        return started

    return make
