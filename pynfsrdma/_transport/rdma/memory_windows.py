"""The memory of a pyverbs connection: its regions, and the type 2 memory windows its peer reaches
them through (a pool, and the Bind MW work requests that bind them).

A window the peer's Send With Invalidate retired is free (a type 2 window in the free state) and
goes back to the pool, to be bound again for a later I/O instead of allocating a window per I/O:
each bind takes the next key (``ibv_inc_rkey``), so the rkey an earlier I/O offered never reaches a
later one. libibverbs does not note the key of a bind posted as a work request in its
``struct ibv_mw``, and the next bind is checked against it (rxe refuses a bind that names a stale
rkey), so the pool writes it there itself (:func:`mw_rkey_member`); a window whose struct cannot be
found, or that is still valid when released (invalidated locally), is deallocated instead.

Windows :meth:`~.pyverbs_provider.PyverbsConnection.bind` made wait in :class:`MemoryWindows` until
the next Send, whose work request they are chained in front of (:meth:`MemoryWindows.chain`).
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable
from typing import Any

from .provider import MemoryRegion, PinnedBuffer, ProviderCounters, ProviderError

_MW_RKEY = 16  # offsetof(struct ibv_mw, rkey): after context and pd
_MW_HANDLE = 20
_MW_TYPE = 24


class VerbsRegion(MemoryRegion):
    """A registered region (its pyverbs MR), or a memory window bound over one."""

    __slots__ = ("mr", "mw", "mw_key", "pin", "recv_wr", "send_wr")
    mr: Any  # the pyverbs MR
    mw: Any  # the type 2 memory window whose rkey is the handle (None: the handle is the MR's rkey)
    mw_key: ctypes.c_uint32 | None  # the window's rkey in its struct ibv_mw (None: not pooled)
    pin: PinnedBuffer | None  # None for a window bound over another region (bind)
    recv_wr: Any  # a receive buffer's work request, made at its first post and posted again
    send_wr: Any  # a send buffer's last Send work request and what it was made for (or None)


def inc_rkey(rkey: int) -> int:
    """The key a bind gives a memory window whose key is ``rkey`` (libibverbs' ``ibv_inc_rkey``,
    which pyverbs' ``set_bind_wr`` applies): the low 8 bits count on."""
    return (rkey & ~0xFF) | ((rkey + 1) & 0xFF)


def mw_rkey_member(mw: Any, type2: int) -> ctypes.c_uint32 | None:
    """The ``rkey`` member of the ``struct ibv_mw`` a pyverbs MW wraps (pyverbs keeps the pointer in
    a C field and does not expose it), to note there the key of each bind; None if it cannot be
    told. The object's words are scanned as for the CM ID (null words and the object's own Python
    references skipped), for the one that points at a struct with the MW's rkey, handle and type."""
    try:
        rkey, handle = int(mw.rkey), int(mw.handle)
        size = type(mw).__basicsize__
    except (AttributeError, TypeError, ValueError):
        return None
    skip = {id(o) for o in gc.get_referents(mw)} | {id(type(mw))}
    base = id(mw)
    for off in range(16, size - 7, 8):  # after the object's reference count and type
        p = ctypes.c_size_t.from_address(base + off).value
        if not p or p in skip:
            continue
        if (
            ctypes.c_uint32.from_address(p + _MW_RKEY).value == rkey
            and ctypes.c_uint32.from_address(p + _MW_HANDLE).value == handle
            and ctypes.c_uint32.from_address(p + _MW_TYPE).value == type2
        ):
            return ctypes.c_uint32.from_address(p + _MW_RKEY)
    return None


class WindowBind:
    """A window bound by :meth:`MemoryWindows.queue`, its Bind MW request not yet posted."""

    __slots__ = ("remote", "window")

    def __init__(self, window: VerbsRegion, remote: int) -> None:
        self.window = window
        self.remote = remote  # the access flags it gives the peer


class MemoryWindows:
    """The type 2 memory windows of one connection: the free ones to bind again, and the binds
    waiting for the next Send."""

    def __init__(self, pv: dict[str, Any], cmid: Any, counters: ProviderCounters, peer: str) -> None:
        self._pv = pv
        self._cmid = cmid  # its protection domain holds the windows
        self._counters = counters
        self._peer = peer
        self._free: list[tuple[Any, ctypes.c_uint32]] = []  # retired windows, with their struct's rkey
        self._queued: list[WindowBind] = []  # bound by bind(), to go out chained before the next Send

    def allocate(self) -> tuple[Any, ctypes.c_uint32 | None]:
        """A type 2 memory window, from the pool or a new one, and its struct's rkey member (None:
        the window is not pooled)."""
        pv, e = self._pv, self._pv["enums"]
        if self._free:
            return self._free.pop()
        try:
            mw = pv["mr"].MW(self._cmid.pd, e.IBV_MW_TYPE_2)
        except pv["error"] as err:
            raise ProviderError(f"memory window allocation failed: {err}", self._peer) from err
        self._counters.windows_allocated += 1
        return mw, mw_rkey_member(mw, int(e.IBV_MW_TYPE_2))

    def give_back(self, mw: Any, key: ctypes.c_uint32) -> None:
        """A window the peer's Send With Invalidate retired: free, bound again for a later I/O."""
        self._free.append((mw, key))

    def bind_wr(self, mw: Any, mr: Any, address: int, length: int, remote: int, **kw: Any) -> Any:
        """A Bind MW work request of ``mw`` over ``length`` bytes of ``mr`` at ``address``, with
        the window's next key (``wr.rkey``)."""
        pv, e = self._pv, self._pv["enums"]
        wr = pv["wr"].SendWR(opcode=e.IBV_WR_BIND_MW, num_sge=0, **kw)
        wr.set_bind_wr(mw, pv["mr"].MWBindInfo(mr, address, length, remote))
        return wr

    def queue(self, window: VerbsRegion, remote: int) -> None:
        """Bind ``window`` with the next Send (:meth:`chain`)."""
        self._queued.append(WindowBind(window, remote))

    def chain(self, head: Any) -> tuple[Any, list[Any]]:
        """The Bind MW requests of the windows queued since the last post, chained in front of
        ``head`` (unsignalled: ``head``'s completion, or a later one, covers them): the first
        request and every request of the chain (they must outlive the post)."""
        chain = [head]
        for b in reversed(self._queued):
            w = b.window
            wr = self.bind_wr(w.mw, w.mr, w.address, w.length, b.remote, send_flags=0, next_wr=head)
            if wr.rkey != w.handle:
                raise ProviderError(
                    f"memory window bound with key {wr.rkey:#x}, offered as {w.handle:#x}", self._peer
                )
            chain.append(wr)
            head = wr
        return head, chain

    def posted(self) -> None:
        """The chained Bind MW requests were posted: each window's struct notes its new key."""
        for b in self._queued:
            if b.window.mw_key is not None:
                b.window.mw_key.value = b.window.handle
        self._queued.clear()

    def not_posted(self) -> None:
        """The post of the chain failed: nothing was bound (their calls release the windows)."""
        self._queued.clear()

    def drop(self, window: VerbsRegion) -> None:
        """A window released before its Bind MW request went out: the request never will."""
        if self._queued:
            self._queued = [b for b in self._queued if b.window is not window]

    def close(self, attempt: Callable[[str, Callable[[], Any]], None]) -> None:
        """Deallocate the free windows (each through ``attempt``, which notes a failure)."""
        for mw, _ in self._free:
            attempt("close memory window", mw.close)
        self._free.clear()


__all__ = ["MemoryWindows", "VerbsRegion", "WindowBind", "inc_rkey", "mw_rkey_member"]
