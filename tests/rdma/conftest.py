"""Test helpers for the sans-I/O RPC-over-RDMA code: the ``memory`` fixture (:mod:`fake_memory`)."""

from __future__ import annotations

import pytest
from fake_memory import FakeMemory


@pytest.fixture
def memory() -> FakeMemory:
    return FakeMemory()
