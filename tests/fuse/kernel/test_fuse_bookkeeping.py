"""FORGET gathering and INTERRUPT bookkeeping, without a kernel."""

from __future__ import annotations

import pytest

from pynfsrdma._fuse.kernel import abi
from pynfsrdma._fuse.kernel.forgets import Forgets
from pynfsrdma._fuse.kernel.interrupts import MAX_REMEMBERED, Interrupts
from pynfsrdma._fuse.kernel.requests import BatchForget, Forget, Interrupt, Request


def interrupt(unique: int, target: int) -> Interrupt:
    return Interrupt(unique, abi.FUSE_INTERRUPT, 0, 0, 0, 0, target)


def test_forgets_add_up_per_node() -> None:
    f = Forgets()
    assert not f
    f.add(Forget(10, abi.FUSE_FORGET, 5, 0, 0, 0, 2))
    f.add(BatchForget(12, abi.FUSE_BATCH_FORGET, 0, 0, 0, 0, [(5, 1), (6, 3)]))
    f.add(Forget(14, abi.FUSE_FORGET, 7, 0, 0, 0, 1))
    assert f
    assert sorted(f.take()) == [(5, 3), (6, 3), (7, 1)]
    assert not f and f.take() == []
    with pytest.raises(TypeError):
        f.add(Request(1, abi.FUSE_GETATTR, 1, 0, 0, 0))


def test_interrupt_of_a_running_request_returns_its_handle() -> None:
    i: Interrupts[str] = Interrupts()
    assert not i.started(100, "scope-100")
    assert not i.started(102, "scope-102")
    assert len(i) == 2
    assert i.interrupt(interrupt(101, 100)) == "scope-100"
    i.finished(100)
    assert sorted(i.running()) == ["scope-102"]
    assert i.take_due() == []


def test_an_interrupt_before_its_request_starts_it_interrupted() -> None:
    i: Interrupts[str] = Interrupts()
    assert i.interrupt(interrupt(201, 200)) is None
    assert i.started(200, "scope") is True
    assert i.take_due() == []  # matched: nothing to ask again


def test_an_interrupt_for_no_request_is_answered_eagain_at_the_next_request() -> None:
    i: Interrupts[str] = Interrupts()
    assert i.interrupt(interrupt(301, 300)) is None  # (300 was answered already, or is yet to come)
    assert i.take_due() == []
    assert not i.started(302, "other")
    assert i.take_due() == [301]  # the kernel sends it again if 300 still waits
    assert i.take_due() == []
    assert not i.started(300, "late")  # forgotten once asked again


def test_remembered_interrupts_are_bounded() -> None:
    i: Interrupts[str] = Interrupts()
    for n in range(MAX_REMEMBERED + 5):
        i.interrupt(interrupt(2 * n + 1, 2 * n))
    assert i.take_due() == [2 * n + 1 for n in range(5)]
