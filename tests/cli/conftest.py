"""Fixtures of the command-line tests.

- ``base``: the ``nfs://host:port/export/t-...`` URL of the test's ``export_path`` on the session's ``ganesha``.
"""

from __future__ import annotations

import pytest

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


@pytest.fixture
def base(ganesha: Ganesha, export_path: ExportPath) -> str:
    return f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"
