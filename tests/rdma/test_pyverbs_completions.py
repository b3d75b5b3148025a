"""The pyverbs connection's completion loop: a notification of the completion channel, then the
completion queue polled until it is empty, and the cost of that counted per connection.

pyverbs needs an RDMA device (the VM rig has one); here its objects are stand-ins below the verbs
edge: a completion queue that raises one event on the channel's descriptor (a pipe) for the first
completion after it was armed (``ibv_req_notify_cq``), as a device does, and a memory region."""

from __future__ import annotations

import os
from collections import deque
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from pynfsrdma._transport.rdma.provider import Access, ProviderError
from pynfsrdma._transport.rdma.pyverbs_provider import PyverbsConnection

SUCCESS, RECV = 0, 128  # libibverbs' IBV_WC_SUCCESS and IBV_WC_RECV


class _VerbsError(Exception):
    pass


class _CQ:
    def __init__(self, event_fd: int) -> None:
        self.event_fd = event_fd
        self._entries: deque[SimpleNamespace] = deque()
        self.armed = False
        self.acked = 0

    def complete(self, opcode: int, byte_len: int = 0) -> None:
        """The device adds a completion; an armed queue raises one event and is then disarmed."""
        self._entries.append(
            SimpleNamespace(status=SUCCESS, opcode=opcode, byte_len=byte_len, wc_flags=0, imm_data=0)
        )
        if self.armed:
            self.armed = False
            os.write(self.event_fd, b"e")

    def req_notify(self) -> None:
        self.armed = True

    def ack_events(self, n: int) -> None:
        self.acked += n

    def poll(self, n: int) -> tuple[int, list[SimpleNamespace]]:
        out = [self._entries.popleft() for _ in range(min(n, len(self._entries)))]
        return len(out), out

    def close(self) -> None:
        pass


class _CompChannel:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    def get_cq_event(self, cq: _CQ) -> None:
        assert os.read(self._fd, 1) == b"e"

    def close(self) -> None:
        os.close(self._fd)


class _MR:
    def __init__(self, pd: object, length: int, flags: int, address: int) -> None:
        self.buf, self.lkey, self.rkey, self.flags = address, 1, 0, flags

    def close(self) -> None:
        pass


def _connection(own_qp: bool = False) -> tuple[PyverbsConnection, _CQ, list[tuple[str, int]]]:
    posted: list[tuple[str, int]] = []
    pv = {
        "enums": SimpleNamespace(
            IBV_WC_SUCCESS=SUCCESS, IBV_WC_RECV=RECV, IBV_WC_WITH_INV=1 << 3, IBV_WC_REM_ACCESS_ERR=10,
            IBV_WC_RNR_RETRY_EXC_ERR=13, IBV_ACCESS_LOCAL_WRITE=1, IBV_ACCESS_REMOTE_WRITE=2,
            IBV_ACCESS_REMOTE_READ=4, IBV_ACCESS_MW_BIND=16, IBV_WR_SEND=2,
        ),
        "mr": SimpleNamespace(MR=_MR),
        "wr": SimpleNamespace(SendWR=lambda **kw: _SendWR(**kw), SGE=lambda *a: _SGE(*a)),
        "error": _VerbsError,
    }  # fmt: skip
    cmid = SimpleNamespace(
        pd=object(),
        post_recv=lambda mr, length: posted.append(("recv", length)),
        post_send=lambda mr, flags, length: posted.append(("send", length)),
        close=lambda: None,
    )
    conn = PyverbsConnection(pv, cmid, SimpleNamespace(fd=-1), "peer", b"", owns_events=False, own_qp=own_qp)
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    cq = _CQ(write_end)
    conn.cq, conn.comp_channel, conn.comp_fd = cq, _CompChannel(read_end), read_end
    cq.req_notify()  # as create_qp arms it
    return conn, cq, posted


async def test_completions_behind_one_notification_are_polled_after_it_and_counted():
    conn, cq, posted = _connection()
    first, second = (conn.register(bytearray(64), Access.LOCAL_WRITE) for _ in range(2))
    send = conn.register(bytearray(64), Access.LOCAL_WRITE)
    conn.post_recv(first)
    conn.post_recv(second)
    sent = trio.Event()

    async def call() -> None:
        await conn.send_region(send, 10)
        sent.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            nursery.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            assert posted == [("recv", 64), ("recv", 64), ("send", 10)]
            # the Send completes, then two replies come in before the loop has run: one event
            cq.complete(0)
            cq.complete(RECV, 5)
            cq.complete(RECV, 7)
            got = [await conn.receive(), await conn.receive()]
            await sent.wait()
            assert [(r.region, r.byte_len) for r in got] == [(first, 5), (second, 7)]
            assert (conn.notifications, conn.completions, cq.acked) == (1, 3, 1)
            assert cq.armed  # armed again before it was polled: nothing that came later is missed
            # a completion after that raises the next event
            conn.post_recv(first)
            cq.complete(RECV, 3)
            assert (await conn.receive()).byte_len == 3
            assert (conn.notifications, conn.completions, cq.acked) == (2, 4, 2)
            nursery.cancel_scope.cancel()
    finally:
        conn.release()
        os.close(cq.event_fd)


class _SGE:
    def __init__(self, addr: int, length: int, lkey: int) -> None:
        self.length = length


class _SendWR:
    made = 0

    def __init__(self, opcode: int, num_sge: int, sg: list[_SGE]) -> None:
        _SendWR.made += 1
        self.opcode, self.length, self.imm_data = opcode, sg[0].length, 0


async def test_a_send_buffer_makes_its_send_request_once_for_each_length():
    conn, cq, _ = _connection(own_qp=True)  # a QP of our own: Sends are work requests we make
    sent: list[tuple[int, int]] = []
    conn.qp = SimpleNamespace(post_send=lambda wr: sent.append((wr.opcode, wr.length)), close=lambda: None)
    send = conn.register(bytearray(256), Access.LOCAL_WRITE)
    _SendWR.made = 0
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            for length in [100] * 8 + [120] * 8:
                async with trio.open_nursery() as call:
                    call.start_soon(conn.send_region, send, length)
                    await trio.testing.wait_all_tasks_blocked()
                    cq.complete(0)
            nursery.cancel_scope.cancel()
    finally:
        conn.release()
        os.close(cq.event_fd)
    assert sent == [(2, 100)] * 8 + [(2, 120)] * 8
    assert _SendWR.made == 2  # one for each length, not one for each Send
    assert conn.counters.posts == conn.counters.sends == 16


async def test_registrations_ask_the_device_for_the_access_they_name():
    plain, cq, _ = _connection()  # librdmacm's QP (siw): the peer reaches regions themselves
    own, own_cq, _ = _connection(own_qp=True)
    try:
        flags = {
            a: plain.register(bytearray(64), a).mr.flags  # type: ignore[attr-defined]
            for a in (Access.LOCAL_WRITE, Access.LOCAL_WRITE | Access.REMOTE_WRITE, Access.REMOTE_READ)
        }
        assert flags == {
            Access.LOCAL_WRITE: 1,
            Access.LOCAL_WRITE | Access.REMOTE_WRITE: 1 | 2,
            Access.REMOTE_READ: 4,
        }
        assert plain.register(bytearray(64), Access.REMOTE_WRITE).mr.flags == 1 | 2  # type: ignore[attr-defined]
        sink = own.register(bytearray(64), Access.LOCAL_WRITE | Access.BIND)
        source = own.register(bytearray(64), Access.BIND)
        assert (sink.mr.flags, source.mr.flags) == (1 | 16, 16)  # type: ignore[attr-defined]
        with pytest.raises(ProviderError, match="memory windows need a queue pair of our own"):
            plain.register(bytearray(64), Access.BIND)
        # windows give the peer remote access only, over a registration made for them
        with pytest.raises(ValueError, match="remote access only"):
            own.bind(sink, 0, 16, Access.REMOTE_WRITE | Access.LOCAL_WRITE)
        with pytest.raises(ValueError, match="remote access only"):
            own.bind(own.register(bytearray(64), Access.LOCAL_WRITE), 0, 16, Access.REMOTE_WRITE)
    finally:
        for conn, q in ((plain, cq), (own, own_cq)):
            conn.release()
            os.close(q.event_fd)
