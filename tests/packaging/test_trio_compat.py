"""The code runs on every trio it says it does (Debian 12's 0.22 and PyPI's newer releases): the one
keyword that differs between them is spelled in one place."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import trio

from pynfsrdma._trio_compat import run_sync_abandoning

PACKAGE = Path(__file__).resolve().parents[2] / "pynfsrdma"


async def test_a_thread_call_returns_its_result() -> None:
    assert await run_sync_abandoning(sum, [1, 2, 3]) == 6


async def test_a_cancelled_thread_call_returns_at_once_and_leaves_the_thread() -> None:
    release = threading.Event()
    with trio.move_on_after(0.2) as scope:
        await run_sync_abandoning(release.wait, 30)
    assert scope.cancelled_caught
    release.set()


def test_no_module_names_a_keyword_one_trio_release_lacks() -> None:
    offenders = [
        str(p.relative_to(PACKAGE.parent))
        for p in PACKAGE.rglob("*.py")
        if p.name != "_trio_compat.py" and re.search(r"\b(abandon_on_cancel|cancellable)\s*=", p.read_text())
    ]
    assert offenders == []
