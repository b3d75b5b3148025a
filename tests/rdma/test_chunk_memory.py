"""The pool of READ sinks (``_transport/rdma/chunk_memory.py``) over a software provider's
connection: what taking a sink costs once the pool is warm."""

from __future__ import annotations

import pytest
import trio

from pynfsrdma._transport.rdma import chunk_memory
from pynfsrdma._transport.rdma.chunk_memory import ChunkMemory, Lease
from pynfsrdma._transport.rdma.soft import SoftProvider

MiB = 1 << 20


async def test_a_sink_is_taken_without_looking_at_every_sink_lent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64 MiB read holds all its 64 sinks until it returns. Taking the next sink looked at every
    sink lent so far (2,080 reference checks for the second 64 MiB, 32 per call); it looks at
    them only when its size class has no free sink (64 checks: one pass that frees them all), and
    the pool makes no new sink."""
    checks = [0]
    referenced = chunk_memory._Sink.referenced

    def counted(self: chunk_memory._Sink) -> bool:
        checks[0] += 1
        return referenced(self)

    monkeypatch.setattr(chunk_memory._Sink, "referenced", counted)
    provider = SoftProvider()
    async with trio.open_nursery() as nursery:
        listener = await provider.listen(nursery, "127.0.0.1", 0)
        nursery.start_soon(listener.accept)
        conn = await provider.connect(nursery, "127.0.0.1", listener.port)
        memory = ChunkMemory(conn)
        views = []
        for _round in range(2):
            views.clear()  # the caller is done with the last read's data
            checks[0] = 0
            for _ in range(64):
                lease = Lease()
                views.append(memory.sink(MiB, lease)[1])
                memory.release(lease)
        assert memory.kept_sinks == 64
        assert conn.counters.registrations == 64  # the second read registered nothing
        assert checks[0] <= 64, checks[0]
        await conn.aclose()
        await listener.aclose()
        nursery.cancel_scope.cancel()
