"""What one request costs the session and the statistics in bookkeeping of their own, counted on real
calls to NFS-Ganesha: the functions of ``pynfsrdma/_session`` and ``pynfsrdma/_stats.py`` one LOOKUP
runs through as the mount sends it (a prepared COMPOUND shape), between ``Compounds.query`` and the
RPC call and back, and the records made for it.

A request that needs no recovery takes its slot and sequence id in one call, carries one record (its
call's times for the statistics are that record), finds the facts of its shape's operations once per
shape (whether they are idempotent, what they are about, their figures), keeps the path's figures in
two calls around the RPC call, and reads the trio clock without looking the run's clock up each time."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

PACKAGE = Path(__import__("pynfsrdma").__file__).parent
BOOKKEEPING = (str(PACKAGE / "_session") + "/", str(PACKAGE / "_stats.py"))
TRIO = str(Path(trio.__file__).parent) + "/"
REQUESTS = 10

# what a request took before: each its own call (or the trio clock found through the run each time)
NOT_CALLED = {
    "is_idempotent",  # the operations' facts: once per shape (ops_facts)
    "main_op",
    "_main_op",  # (the statistics' own)
    "RpcStats.call_started",  # the request is its call's record
    "RpcStats._op",
    "SlotTable.try_acquire",  # slot and sequence id: SlotTable.take
    "SlotTable.begin",
    "Slot.next_seqid",
    "Session._answers",
    "Session._release",
    "Recovery._session_for",  # one session, no trunked ones
    "Path.observe_rtt",
    "Path.ended",  # (a call answered ends in Path.answered)
    "Session._send",  # the request loop sends itself
    "Path.call",
    "Session._set_deadline",  # (a slot taken at once: its deadline set as the request is made)
    "RetryPolicy.failing_fast",
}


def url_of(ganesha: Ganesha, ep: ExportPath) -> str:
    return f"nfs://{ganesha.host}:{ganesha.port}{ep.remote}"


async def counted(call: Callable[[], Awaitable[Any]]) -> tuple[Counter[str], Counter[str], int]:
    """The functions of the bookkeeping ``call`` runs (by qualified name), the objects made in them
    (their ``__init__`` run from there, by the class's qualified name), and the trio clock's lookups
    through the run, over REQUESTS calls, in the task that makes them."""
    functions: Counter[str] = Counter()
    made: Counter[str] = Counter()
    clock_lookups = 0

    me = trio.lowlevel.current_task()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal clock_lookups
        if event != "call":
            return
        try:
            if trio.lowlevel.current_task() is not me:  # (the requests' own, not other tasks')
                return
        except RuntimeError:  # (trio's scheduler, between tasks)
            return
        code = frame.f_code
        where = code.co_filename
        if where.startswith(BOOKKEEPING):
            functions[code.co_qualname] += 1
        elif where.startswith(TRIO) and code.co_name == "current_time" and "_generated_" in where:
            clock_lookups += 1
        caller = frame.f_back
        if (code.co_name == "__init__" and caller is not None and caller.f_code.co_name != "__init__"
                and caller.f_code.co_filename.startswith(BOOKKEEPING)):  # (an object made there, not a base's part)
            made[type(frame.f_locals.get("self")).__qualname__] += 1

    sys.setprofile(profile)
    try:
        for _ in range(REQUESTS):
            await call()
    finally:
        sys.setprofile(None)
    return functions, made, clock_lookups


async def test_a_shaped_request_takes_each_piece_of_bookkeeping_once(ganesha: Ganesha, export_path: ExportPath) -> None:
    (export_path.local / "f").write_bytes(b"x")
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        async def lookup() -> None:
            fh, attrs = await nfs.nfs.names.lookup(nfs.root_fh, "f", nfs.cred)
            assert attrs.size == 1 and fh

        for _ in range(3):
            await lookup()
        functions, made, clock_lookups = await counted(lookup)
    called = set(functions)
    assert not called & NOT_CALLED, f"called: {sorted(called & NOT_CALLED)}"
    # one record per request, the request itself (nothing else made by the session or the statistics)
    assert made == Counter({"_Outgoing": REQUESTS}), made
    assert clock_lookups == 0
    per_request = sum(functions.values()) / REQUESTS
    assert per_request <= 33, f"{per_request} calls of bookkeeping per request: {sorted(functions.items())}"
