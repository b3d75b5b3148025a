"""Memory "registered" in a dict, for the sans-I/O RPC-over-RDMA code's tests.

This stands below the I/O edge: it plays the part of the RDMA hardware (a handle and an address
per region, one-sided reads and writes against them) for tests of chunks.py and reply.py. A module
of its own, not conftest.py: a test module imports it by name, whichever conftest.py pytest
imported last.
"""

from __future__ import annotations

from pynfsrdma._proto.rpcrdma import xdr_rdma_segment
from pynfsrdma._transport.rdma.chunks import CallPlan, NeedKind, Registration


class FakeMemory:
    def __init__(self) -> None:
        self.regions: dict[int, tuple[int, memoryview]] = {}
        self.next_handle = 0x100
        self.next_addr = 0x7F00_0000_0000

    def register(self, buf: memoryview) -> Registration:
        h = self.next_handle
        self.next_handle += 1
        addr = self.next_addr
        self.next_addr += (buf.nbytes + 4096) & ~4095
        self.regions[h] = (addr, buf)
        return Registration(h, addr, buf)

    def register_plan(self, plan: CallPlan) -> list[Registration]:
        regs = []
        for need in plan.needs:
            if need.kind is NeedKind.READ_SOURCE:
                assert need.buffer is not None
                regs.append(self.register(need.buffer))
            else:
                regs.append(self.register(memoryview(bytearray(need.length))))
        return regs

    def _locate(self, seg: xdr_rdma_segment) -> memoryview:
        addr, buf = self.regions[seg.handle]
        start = seg.offset - addr
        assert start >= 0 and start + seg.length <= buf.nbytes, "out of bounds"
        return buf[start : start + seg.length]

    def rdma_read(self, seg: xdr_rdma_segment) -> bytes:
        return bytes(self._locate(seg))

    def rdma_write(self, seg: xdr_rdma_segment, data: memoryview) -> None:
        self._locate(seg)[:] = data
