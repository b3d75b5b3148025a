"""The credit gate: never more in flight than granted, FIFO queue, grant updates, grant 0."""

import pytest

from pynfsrdma._transport.rdma.credits import CreditGate


def test_starts_at_one_credit_until_the_first_grant():
    g: CreditGate[str] = CreditGate(32)
    assert g.rdma_credit() == 32
    assert g.acquire("a") is True
    assert g.acquire("b") is False and g.acquire("c") is False
    assert g.in_flight == 1 and g.waiting == 2
    assert g.reply_received(3) == ["b", "c"]  # limit 3, 0 in flight after the reply
    assert g.in_flight == 2
    assert g.acquire("d") is True
    assert g.acquire("e") is False


def test_never_more_in_flight_than_granted_and_fifo():
    g: CreditGate[int] = CreditGate(4)
    g.update_grant(2)
    admitted = [i for i in range(10) if g.acquire(i)]
    assert admitted == [0, 1]
    order = []
    while g.in_flight:
        got = g.reply_received(2)
        assert g.in_flight <= 2
        order += got
    assert order == list(range(2, 10))


def test_grant_capped_at_what_we_asked_and_zero_means_one():
    g: CreditGate[int] = CreditGate(4)
    g.update_grant(100)
    assert g.granted == 4
    g.update_grant(0)
    assert g.granted == 1
    assert g.acquire(1) is True and g.acquire(2) is False
    assert g.reply_received(0) == [2]  # zero grant still lets one call through
    assert g.in_flight == 1


def test_shrinking_grant_holds_calls_until_in_flight_drops_below():
    g: CreditGate[int] = CreditGate(8)
    g.update_grant(4)
    for i in range(4):
        assert g.acquire(i)
    assert g.acquire(99) is False
    assert g.reply_received(2) == []  # 3 in flight, limit 2
    assert g.reply_received(2) == []  # 2 in flight
    assert g.reply_received(2) == [99]


def test_cancel_and_release():
    g: CreditGate[str] = CreditGate(2)
    assert g.acquire("a")
    assert not g.acquire("b") and not g.acquire("c")
    assert g.cancel("b") is True and g.cancel("b") is False
    assert g.release() == ["c"]
    with pytest.raises(RuntimeError):
        CreditGate(1).release()
    with pytest.raises(RuntimeError):
        CreditGate(1).reply_received(1)


def test_reset_on_reconnect():
    g: CreditGate[str] = CreditGate(4)
    g.update_grant(4)
    for t in "abcd":
        g.acquire(t)
    g.acquire("e")
    g.acquire("f")
    assert g.reset() == ["e"]
    assert g.granted == 1 and g.in_flight == 1
