"""Fixtures of the fsspec tests.

- ``fs``: ``fsspec.filesystem("nfs", ...)`` on the session's ``ganesha``, as a user makes one.
"""

from __future__ import annotations

import fsspec
import pytest

from pynfsrdma._testbed import Ganesha


@pytest.fixture
def fs(ganesha: Ganesha) -> fsspec.AbstractFileSystem:
    return fsspec.filesystem("nfs", host=ganesha.host, port=ganesha.port)
