"""The connections a session sends its requests over ("paths"), and their reconnection.

A :class:`Path` is one server address (and transport) with at most one live connection at a time.
A :class:`PathSet` holds the session's paths, picks one for each request (the least loaded live
path, weighted by its measured round-trip time and preference), and reconnects dead paths in the
background with exponential backoff. What happens on a fresh connection (binding it to the
session) is the session's business: it is given as ``on_connect``.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from ..rpc.client import CallbackHandler, RpcConnection
from ..transport.base import Transport, TransportError

log = logging.getLogger(__name__)

Connector = Callable[[], Awaitable[Transport]]


class PathState(enum.Enum):
    CONNECTING = "connecting"
    UP = "up"
    DOWN = "down"
    CLOSED = "closed"


@dataclass(eq=False)
class Path:
    """One address of the server, with its connection and its figures."""

    address: str  # "host:port"
    connector: Connector
    transport_kind: str = "tcp"
    rank: int = 0  # FSLI4BX_READRANK: equal rank, same server interface
    order: int = 0  # FSLI4BX_READORDER: higher is faster
    state: PathState = PathState.DOWN
    rpc: RpcConnection | None = None
    rtt: float = 0.0  # smoothed round-trip time of calls on this path, seconds
    bytes_in_flight: int = 0
    calls: int = 0
    failovers: int = 0  # requests moved off this path after it failed
    connects: int = 0
    last_error: str = ""
    up_event: trio.Event = field(default_factory=trio.Event)
    _kill_scope: trio.CancelScope | None = None

    @property
    def in_flight(self) -> int:
        return self.rpc.in_flight if self.rpc is not None and self.state is PathState.UP else 0

    def observe_rtt(self, seconds: float) -> None:
        self.rtt = seconds if self.rtt == 0 else 0.875 * self.rtt + 0.125 * seconds

    def cost(self, payload: int) -> float:
        """Lower is better: outstanding bytes and calls, scaled by RTT and preference."""
        load = self.bytes_in_flight + payload + 4096 * self.in_flight
        return load * max(self.rtt, 1e-4) / (1.0 + max(self.order, 0))

    def snapshot(self) -> dict[str, object]:
        return {
            "address": self.address,
            "transport": self.transport_kind,
            "state": self.state.value,
            "rank": self.rank,
            "order": self.order,
            "rtt_ms": round(self.rtt * 1000, 3),
            "in_flight": self.in_flight,
            "bytes_in_flight": self.bytes_in_flight,
            "calls": self.calls,
            "failovers": self.failovers,
            "connects": self.connects,
            "last_error": self.last_error,
        }


class NoPathError(TransportError):
    """No path to the server is up (and the caller does not wait for one)."""


class PathSet:
    """The paths of one session, their connections and their reconnection."""

    def __init__(
        self,
        nursery: trio.Nursery,
        prog: int,
        vers: int,
        on_connect: Callable[[Path], Awaitable[None]] | None = None,
        callback_handler: CallbackHandler | None = None,
        reconnect_min: float = 0.1,
        reconnect_max: float = 5.0,
    ) -> None:
        self._nursery = nursery
        self.prog = prog
        self.vers = vers
        self.on_connect = on_connect
        self.callback_handler = callback_handler
        self.paths: list[Path] = []
        self.reconnect_min = reconnect_min
        self.reconnect_max = reconnect_max
        self._changed = trio.Event()
        self._closing = False

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- membership -------------------------------------------------------------------------------
    async def add(self, path: Path, *, connect: bool = True) -> Path:
        """Add a path; with ``connect``, connect it now (raising the connection's error)."""
        self.paths.append(path)
        if connect:
            await self._connect(path)
            self._nursery.start_soon(self._keep_alive, path)
        return path

    async def remove(self, path: Path) -> None:
        if path in self.paths:
            self.paths.remove(path)
        path.state = PathState.CLOSED
        if path._kill_scope is not None:
            path._kill_scope.cancel()
        if path.rpc is not None:
            await path.rpc.aclose()
        self._notify()

    async def _connect(self, path: Path) -> None:
        path.state = PathState.CONNECTING
        try:
            transport = await path.connector()
        except TransportError as e:
            path.state = PathState.DOWN
            path.last_error = str(e)
            raise
        rpc = RpcConnection(transport, self.prog, self.vers, self.callback_handler)
        path.rpc = rpc
        path.connects += 1
        scope = trio.CancelScope()
        path._kill_scope = scope
        up = trio.Event()

        async def receive_loop() -> None:
            with scope:
                up.set()
                await rpc.run()
            await transport.aclose()
            if path.rpc is rpc and path.state is not PathState.CLOSED:
                path.state = PathState.DOWN
                path.last_error = str(rpc._dead) if rpc._dead else "closed"
                path.up_event = trio.Event()
                log.info("path %s is down: %s", path.address, path.last_error)
                self._notify()

        self._nursery.start_soon(receive_loop)
        await up.wait()
        path.state = PathState.UP
        try:
            if self.on_connect is not None:
                await self.on_connect(path)
        except BaseException:
            path.state = PathState.DOWN
            scope.cancel()
            raise
        path.up_event.set()
        self._notify()

    async def _keep_alive(self, path: Path) -> None:
        """Reconnect the path whenever it goes down, with backoff, until it is removed."""
        delay = self.reconnect_min
        while not self._closing and path.state is not PathState.CLOSED:
            if path.state is PathState.UP:
                await self._wait_change()
                continue
            try:
                await self._connect(path)
                delay = self.reconnect_min
                log.info("path %s is up again", path.address)
            except (TransportError, OSError) as e:
                path.last_error = str(e)
                await trio.sleep(delay)
                delay = min(self.reconnect_max, delay * 2)

    async def _wait_change(self) -> None:
        await self._changed.wait()

    def kill(self, path: Path) -> None:
        """Drop the path's connection (a stalled or misbehaving connection); it will reconnect."""
        if path.rpc is not None and path.state is PathState.UP:
            path.state = PathState.DOWN
            path.up_event = trio.Event()
            if path._kill_scope is not None:
                path._kill_scope.cancel()
            self._notify()

    # -- choosing ---------------------------------------------------------------------------------
    def live(self) -> list[Path]:
        return [p for p in self.paths if p.state is PathState.UP and p.rpc is not None and p.rpc.alive]

    def choose(self, payload: int = 0, avoid: Path | None = None) -> Path | None:
        """The live path with the lowest cost; ``avoid`` only when nothing else is up."""
        best: Path | None = None
        best_cost = math.inf
        for p in self.live():
            c = p.cost(payload) * (1000.0 if p is avoid else 1.0)
            if c < best_cost:
                best, best_cost = p, c
        return best

    async def wait_live(self, deadline: float | None = None) -> Path:
        """A live path, waiting for one to come (back) up until ``deadline`` (trio clock)."""
        while True:
            p = self.choose()
            if p is not None:
                return p
            if deadline is not None and trio.current_time() >= deadline:
                errors = "; ".join(f"{q.address}: {q.last_error or q.state.value}" for q in self.paths)
                raise NoPathError(f"no path to the server is up ({errors})")
            with trio.move_on_at(deadline if deadline is not None else math.inf):
                await self._changed.wait()

    async def aclose(self) -> None:
        self._closing = True
        for p in list(self.paths):
            await self.remove(p)


def monotonic() -> float:
    return time.monotonic()
