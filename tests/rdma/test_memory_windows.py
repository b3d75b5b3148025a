"""The pyverbs connection's pool of type 2 memory windows and its chained Bind MW requests.

pyverbs needs an RDMA device (the VM rig has one); here its objects are stand-ins below the verbs
edge: an MW with an rkey, a send work request that takes a bind (and applies ibv_inc_rkey to the
window's key, as pyverbs' ``set_bind_wr`` does)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

from pynfsrdma._transport.rdma.memory_windows import MemoryWindows, VerbsRegion, inc_rkey
from pynfsrdma._transport.rdma.provider import Access, ProviderCounters, ProviderError


class _VerbsError(Exception):
    pass


class _MW:
    made = 0

    def __init__(self, pd: object, kind: int) -> None:
        _MW.made += 1
        self.rkey = 0x1000 * _MW.made
        self.handle = _MW.made
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _SendWR:
    def __init__(self, opcode: int, num_sge: int, send_flags: int = 1, next_wr: object = None) -> None:
        self.opcode, self.send_flags, self.next_wr = opcode, send_flags, next_wr
        self.rkey = -1

    def set_bind_wr(self, mw: _MW, info: tuple) -> None:
        self.rkey = inc_rkey(mw.rkey)
        self.info = info


PV = {
    "enums": SimpleNamespace(IBV_MW_TYPE_2=2, IBV_WR_BIND_MW=8),
    "mr": SimpleNamespace(MW=_MW, MWBindInfo=lambda mr, address, length, remote: (mr, address, length, remote)),
    "wr": SimpleNamespace(SendWR=_SendWR),
    "error": _VerbsError,
}


def _window(pool: MemoryWindows, handle_offset: int = 1) -> VerbsRegion:
    mw, key = pool.allocate()
    w = VerbsRegion(inc_rkey(mw.rkey) + handle_offset - 1, 0x5000, memoryview(bytearray(64)), Access.REMOTE_WRITE, window=True)
    w.mr, w.mw, w.mw_key, w.pin, w.recv_wr = "mr", mw, key, None, None
    return w


def test_a_retired_window_is_bound_again_instead_of_a_new_one():
    counters = ProviderCounters()
    pool = MemoryWindows(PV, SimpleNamespace(pd="pd"), counters, "peer")
    mw, _ = pool.allocate()
    assert counters.windows_allocated == 1
    key = ctypes.c_uint32(mw.rkey)
    pool.give_back(mw, key)
    again, again_key = pool.allocate()
    assert again is mw and again_key is key and counters.windows_allocated == 1
    pool.allocate()
    assert counters.windows_allocated == 2


def test_queued_binds_go_out_chained_in_front_of_the_send_and_note_their_keys():
    pool = MemoryWindows(PV, SimpleNamespace(pd="pd"), ProviderCounters(), "peer")
    a, b, dropped = _window(pool), _window(pool), _window(pool)
    a.mw_key = ctypes.c_uint32(a.mw.rkey)
    for w in (a, b, dropped):
        pool.queue(w, remote=2)
    pool.drop(dropped)  # released before its bind went out
    send = _SendWR(opcode=0, num_sge=1)
    first, chain = pool.chain(send)
    assert len(chain) == 3 and chain[0] is send
    assert first.next_wr.next_wr is send and first.send_flags == 0  # a, then b, then the Send
    assert [wr.info[1:] for wr in chain[1:]] == [(0x5000, 64, 2)] * 2
    pool.posted()
    assert a.mw_key.value == a.handle  # the window's struct knows the key of its bind
    first, chain = pool.chain(send)
    assert chain == [send]  # nothing queued any more


def test_a_window_offered_under_another_key_than_its_bind_gives_is_refused():
    pool = MemoryWindows(PV, SimpleNamespace(pd="pd"), ProviderCounters(), "peer")
    pool.queue(_window(pool, handle_offset=2), remote=2)
    with pytest.raises(ProviderError, match="memory window bound with key"):
        pool.chain(_SendWR(opcode=0, num_sge=1))
    pool.not_posted()
    assert pool.chain(_SendWR(opcode=0, num_sge=1))[1][1:] == []


def test_closing_deallocates_the_free_windows():
    pool = MemoryWindows(PV, SimpleNamespace(pd="pd"), ProviderCounters(), "peer")
    mw, _ = pool.allocate()
    pool.give_back(mw, ctypes.c_uint32(0))
    tried = []
    pool.close(lambda what, fn: (tried.append(what), fn()))
    assert mw.closed and tried == ["close memory window"]
