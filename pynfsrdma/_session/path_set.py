"""The connections a session sends its requests over ("paths"), and their reconnection.

A :class:`Path` is one server address (and transport) with at most one live connection at a time.
A :class:`PathSet` holds the session's paths, picks one for each request (the live path expected to
complete it first, from what each path delivers: :mod:`.path_choice`), and reconnects dead paths in the
background with exponential backoff (while a request waits for a path, at least every
``REDIAL_WAITED`` seconds: a server that comes back is used within that, not after the backoff of
its whole absence). What happens on a fresh connection (binding it to the session) is the
session's business: it is given as ``on_connect``.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from .._rpc.client import CallbackHandler, RpcConnection
from .._rpc.errors import RpcReplyError
from .._transport.base import Transport, TransportError
from .._xdr import Unpacker
from .path_choice import Delivery, Mark, choose_path

log = logging.getLogger(__name__)

Connector = Callable[[], Awaitable[Transport]]
REDIAL_WAITED = 0.5  # seconds between connection attempts at most while a request waits for a path
Probe = Callable[["Path"], Awaitable[None]]


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
    delivery: Delivery = field(default_factory=Delivery)  # bytes answered here, their rate, base RTT
    bytes_in_flight: int = 0
    calls: int = 0
    failovers: int = 0  # requests moved off this path after it failed
    connects: int = 0
    last_error: str = ""
    up_event: trio.Event = field(default_factory=trio.Event)
    bound_session: bytes | None = None  # the session this connection is bound to (BIND_CONN_TO_SESSION)
    source: str = "mount"  # how we learned the address: mount, addrs, fs_locations_info, fs_locations
    stalls: int = 0  # times the path was dropped because it stopped answering
    # which of the client ID's sessions this path carries: 0 the first; 1, 2 ... one per other
    # server instance (same server owner major id and scope, another minor id) found by client ID
    # trunking (RFC 8881 section 2.10.5); a session's requests go only over its group's paths
    group: int = 0
    _kill_scope: trio.CancelScope | None = None
    # start times (trio clock) of the requests now waiting for a reply on this path, by XID
    _sent: dict[int, float] = field(default_factory=dict)
    _probing: bool = False
    _probed_at: float = -math.inf

    def received_under(self, scope: trio.CancelScope) -> None:
        """The connection's receive loop runs under ``scope``: :meth:`cut` ends it."""
        self._kill_scope = scope

    def cut(self) -> None:
        """End the connection's receive loop now (its calls fail; the path reconnects, or stays down)."""
        if self._kill_scope is not None:
            self._kill_scope.cancel()

    def probe_due(self, now: float, stall_after: float) -> bool:
        """Whether the path is to be probed now, its oldest request having waited ``stall_after``
        seconds and no probe out nor made within that time; if so, the probe counts as begun
        (:meth:`probe_ended` ends it)."""
        if self._probing or self.oldest_wait(now) < stall_after or now - self._probed_at < stall_after:
            return False
        self._probing = True
        self._probed_at = now
        return True

    def probe_ended(self) -> None:
        self._probing = False

    def sending(self, xid: int, payload: int, start: float) -> Mark:
        """The call ``xid`` goes out on this path's connection at ``start`` (trio clock) with
        ``payload`` bulk bytes (gone with the call, or to come back with the reply): it counts in the
        path's figures, the bytes and calls in flight, until :meth:`ended`. Returns what
        :meth:`answered` takes. (The sender awaits the connection itself: no coroutine of ours
        between the session and the RPC call.)"""
        mark = self.delivery.mark(start, busy=self.bytes_in_flight > 0)
        self.bytes_in_flight += payload
        self.calls += 1
        self._sent[xid] = start
        return mark

    def ended(self, xid: int, payload: int) -> None:
        """The call ``xid`` of :meth:`sending` failed or was given up (answered: :meth:`answered`)."""
        self.bytes_in_flight -= payload
        self._sent.pop(xid, None)

    def answered(self, xid: int, mark: Mark, sent: int, u: Unpacker, payload: int, start: float, answered: float,
                 *, timed: bool) -> None:
        """The call ``xid`` of ``sent`` bytes, sent at ``start`` with ``mark`` (:meth:`sending`), was
        answered by ``u`` at ``answered``: it ends (:meth:`ended`), its round trip and delivery rate are
        kept (``timed``: its time is a round trip, not the server's storage work)."""
        self.bytes_in_flight -= payload  # (ended: :meth:`ended`'s, inline)
        self._sent.pop(xid, None)
        rtt = answered - start
        self.rtt = rtt if self.rtt == 0 else 0.875 * self.rtt + 0.125 * rtt  # (observe_rtt's, inline)
        # the payload went with the call (a WRITE's data), or what the reply carried of it came
        # back (a READ's: none past the end of the file, which a READ asking on to it did not wait for)
        delivered = payload if sent >= payload else min(payload, u.carried())
        self.delivery.answered(mark, delivered, start, answered, timed=timed)

    def oldest_wait(self, now: float) -> float:
        """How long the oldest request in flight on this path has waited (0 if none)."""
        return now - min(self._sent.values()) if self._sent else 0.0

    @property
    def in_flight(self) -> int:
        return self.rpc.in_flight if self.rpc is not None and self.state is PathState.UP else 0

    def observe_rtt(self, seconds: float) -> None:
        self.rtt = seconds if self.rtt == 0 else 0.875 * self.rtt + 0.125 * seconds

    def snapshot(self) -> dict[str, object]:
        return {
            "address": self.address,
            "transport": self.transport_kind,
            "tls": self.rpc.transport.tls_version if self.rpc is not None else None,  # (RPC-with-TLS)
            "state": self.state.value,
            "rank": self.rank,
            "order": self.order,
            "rtt_ms": round(self.rtt * 1000, 3),
            "rate_MBps": round((self.delivery.measured or 0.0) / 1e6, 3),
            "delivered": self.delivery.delivered,
            "in_flight": self.in_flight,
            "bytes_in_flight": self.bytes_in_flight,
            "calls": self.calls,
            "failovers": self.failovers,
            "connects": self.connects,
            "stalls": self.stalls,
            "source": self.source,
            "group": self.group,
            "last_error": self.last_error,
        }


class NoPathError(TransportError):
    """No path to the server is up (and the caller does not wait for one)."""


class PathRejected(TransportError):
    """The address does not lead to the same server (trunking verification failed): never use it."""


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
        self.changes = 0  # paths come, gone or changed state so far (what keeps a figure of them current)
        self._closing = False
        self._waiting = 0  # requests waiting for a live path (wait_live)
        self._demand = trio.Event()  # set when the first of them starts waiting
        self.max_record = 0  # the largest message a connection receives (0: its transport's limit)

    def _notify(self) -> None:
        self.changes += 1
        self._changed.set()
        self._changed = trio.Event()

    def limit_records(self, size: int) -> None:
        """Every connection, now and to come, ends on a received message larger than ``size`` bytes
        (the session's ca_maxresponsesize: a server that claims a larger one is refused before
        anything is allocated for it)."""
        self.max_record = size
        for p in self.paths:
            if p.rpc is not None:
                p.rpc.limit_replies(size)

    # -- membership -------------------------------------------------------------------------------
    async def add(self, path: Path, *, connect: bool = True) -> Path:
        """Add a path; with ``connect``, connect it now (raising the connection's error)."""
        self.paths.append(path)
        if connect:
            await self._connect(path)
            self._nursery.start_soon(self.keep_alive, path)
        return path

    async def remove(self, path: Path) -> None:
        if path in self.paths:
            self.paths.remove(path)
        path.state = PathState.CLOSED
        path.cut()
        if path.rpc is not None:
            await path.rpc.aclose()
        self._notify()

    async def connect(self, path: Path) -> None:
        """Connect ``path`` (one of ours) now and bind it (``on_connect``); raises the connection's
        error. It is not reconnected when it goes down (see :meth:`add`)."""
        await self._connect(path)

    async def disconnect(self, path: Path) -> None:
        """Close ``path``'s connection (it stays one of ours, down)."""
        path.cut()
        if path.rpc is not None:
            await path.rpc.aclose()
        if path.state is not PathState.CLOSED:
            path.state = PathState.DOWN
            path.up_event = trio.Event()
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
        if self.max_record:
            rpc.limit_replies(self.max_record)
        path.rpc = rpc
        path.connects += 1
        scope = trio.CancelScope()
        path.received_under(scope)
        up = trio.Event()

        async def receive_loop() -> None:
            with scope:
                up.set()
                await rpc.run()
            await transport.aclose()
            if path.rpc is rpc and path.state is not PathState.CLOSED:
                path.state = PathState.DOWN
                path.last_error = str(rpc.failure) if rpc.failure else "closed"
                path.up_event = trio.Event()
                path.delivery.lost()
                log.info("path %s is down: %s", path.address, path.last_error)
                self._notify()

        self._nursery.start_soon(receive_loop)
        await up.wait()
        path.bound_session = None
        try:
            # the connection is used for requests only once on_connect (binding it to the
            # session) is done: until then it stays CONNECTING and choose() passes it by
            if self.on_connect is not None:
                await self.on_connect(path)
        except BaseException:
            path.state = PathState.DOWN
            scope.cancel()
            raise
        if not rpc.alive or path.state is PathState.CLOSED:
            path.state = PathState.DOWN if path.state is not PathState.CLOSED else path.state
            raise TransportError("connection lost while binding it to the session", path.address)
        path.state = PathState.UP
        path.up_event.set()
        self._notify()

    async def keep_alive(self, path: Path) -> None:
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
            except PathRejected as e:
                log.warning("path %s is not used: %s", path.address, e)
                path.last_error = str(e)
                await self.remove(path)
                return
            except (TransportError, OSError, RpcReplyError) as e:
                path.last_error = str(e)
                tried = trio.current_time()
                await self._pause(tried + delay, tried + REDIAL_WAITED)
                delay = min(self.reconnect_max, delay * 2)

    async def _pause(self, until: float, sooner: float) -> None:
        """Wait before the next connection attempt: until ``until``, or only until ``sooner`` while
        a request waits for a path (or one wanted a path meanwhile: :meth:`wanted`)."""
        if not self._waiting:
            with trio.move_on_at(until) as idle:
                await self._demand.wait()
            if idle.cancelled_caught:
                return
        await trio.sleep_until(min(until, sooner))

    def wanted(self) -> None:
        """A request found no path it could use and did not wait (a soft mount failing fast): the
        paths that are down are dialled again soon, as for a request that waits."""
        self._demand.set()
        self._demand = trio.Event()

    async def _wait_change(self) -> None:
        await self._changed.wait()

    async def wait_changed(self) -> None:
        """Return at the next change of a path's state (up, down, added, removed)."""
        await self._changed.wait()

    # -- stalls -----------------------------------------------------------------------------------
    async def watch_stalls(
        self,
        probe: Probe,
        stall_after: float = 1.0,
        probe_timeout: float = 1.0,
        interval: float = 0.2,
    ) -> None:
        """Find stalled paths while others answer, until the set is closed.

        A path whose oldest request has waited ``stall_after`` seconds, while another path is up,
        is probed (``probe(path)``, a SEQUENCE on that path alone); when the probe gets no answer
        within ``probe_timeout`` the path is dropped: its requests go to the other paths at once
        (same slot and sequence id) and it reconnects in the background.
        """
        async with trio.open_nursery() as nursery:
            while not self._closing:
                await trio.sleep(interval)
                now = trio.current_time()
                live = self.live()
                if len(live) < 2:
                    continue
                for path in live:
                    if path.probe_due(now, stall_after):
                        nursery.start_soon(self._probe, path, probe, probe_timeout)

    async def _probe(self, path: Path, probe: Probe, timeout: float) -> None:
        rpc = path.rpc
        try:
            with trio.move_on_after(timeout) as scope:
                await probe(path)
            if scope.cancelled_caught and path.rpc is rpc and path.state is PathState.UP:
                path.stalls += 1
                path.last_error = f"stalled: no answer to a probe within {timeout:g} s"
                log.warning(
                    "path %s stalled (no answer within %g s); its requests move to other paths",
                    path.address,
                    timeout,
                )
                self.kill(path)
        except (TransportError, OSError, RpcReplyError) as e:
            log.info("probe of %s failed: %s", path.address, e)
        finally:
            path.probe_ended()

    def kill(self, path: Path) -> None:
        """Drop the path's connection (a stalled or misbehaving connection); it will reconnect."""
        if path.rpc is not None and path.state is PathState.UP:
            path.state = PathState.DOWN
            path.up_event = trio.Event()
            path.cut()
            self._notify()

    # -- choosing ---------------------------------------------------------------------------------
    def live(self, group: int | None = None) -> list[Path]:
        """The paths up now (of session ``group`` only, unless None)."""
        return [
            p
            for p in self.paths
            if p.state is PathState.UP
            and p.rpc is not None
            and p.rpc.alive
            and (group is None or p.group == group)
        ]

    def choose(self, payload: int = 0, avoid: Path | None = None, group: int | None = None) -> Path | None:
        """The live path (of session ``group``, unless None) where a request of ``payload`` bytes
        is expected to complete first; ``avoid`` only when nothing else is up."""
        paths = self.paths
        if len(paths) == 1:  # (one connection, as most mounts have: nothing to weigh, no list made)
            p = paths[0]
            rpc = p.rpc
            up = p.state is PathState.UP and rpc is not None and rpc.alive and (group is None or p.group == group)
            return p if up else None
        live = self.live(group)
        if len(live) <= 1:  # (nothing to weigh: one path is taken even when avoided)
            return live[0] if live else None
        return choose_path(live, payload, trio.current_time(), avoid)

    def wake_waiters(self) -> None:
        """Wake the requests waiting for a path (:meth:`wait_live`), to look at their ``give_up``."""
        self._notify()

    async def wait_live(
        self, deadline: float | None = None, group: int | None = None, give_up: Callable[[], bool] | None = None
    ) -> Path:
        """A live path (of session ``group``, unless None), waiting for one to come (back) up
        until ``deadline`` (trio clock), or until ``give_up()`` says so (looked at whenever a path
        changes and at :meth:`wake_waiters`)."""
        while True:
            p = self.choose(group=group)
            if p is not None:
                return p
            if (deadline is not None and trio.current_time() >= deadline) or (give_up is not None and give_up()):
                errors = "; ".join(f"{q.address}: {q.last_error or q.state.value}" for q in self.paths)
                raise NoPathError(f"no path to the server is up ({errors})")
            self._waiting += 1
            if self._waiting == 1:
                self.wanted()
            try:
                with trio.move_on_at(deadline if deadline is not None else math.inf):
                    await self._changed.wait()
            finally:
                self._waiting -= 1

    async def aclose(self) -> None:
        self._closing = True
        for p in list(self.paths):
            await self.remove(p)


def monotonic() -> float:
    return time.monotonic()
