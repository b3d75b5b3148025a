"""The listening side of a testbed proxy: one TCP listener on one address (a port of 0 picks a free
one), the two ends of a proxy that relays records, the loop that hands each accepted connection on
until the proxy is stopped, and the ``HOST:PORT`` arguments of the testbed's programs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import trio

# accepted(connection, nursery): what becomes of a connection (started in the nursery, or closed)
Accepted = Callable[[trio.SocketStream, trio.Nursery], None]


def host_port(text: str) -> tuple[str, int]:
    """``(host, port)`` of a ``HOST:PORT`` argument (``[v6]:PORT`` for an IPv6 address; port 0: any);
    argparse.ArgumentTypeError, for argparse to show, when it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not {text!r}")
    return host.strip("[]"), int(port)


async def listen(host: str, port: int) -> trio.SocketListener:
    """A listener on ``host:port`` (only the first, should the name give several)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    for extra in listeners[1:]:
        await extra.aclose()
    return listeners[0]


class RelayEnds:
    """Where a relaying proxy listens (``listen_host:listen_port``; a port of 0 picks a free one,
    known once :meth:`listen` has opened it) and where it relays to (``target_host:target_port``)."""

    def __init__(self, listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.target_host = target_host
        self.target_port = target_port

    @property
    def host(self) -> str:
        return self.listen_host

    @property
    def port(self) -> int:
        return self.listen_port

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    async def listen(self) -> trio.SocketListener:
        """The listener, opened; :attr:`port` is its port from then on."""
        listener = await listen(self.listen_host, self.listen_port)
        self.listen_port = listener.socket.getsockname()[1]
        return listener


async def accept_until_cancelled(
    listener: trio.SocketListener,
    scope: trio.CancelScope,
    accepted: Accepted,
    task_status: trio.TaskStatus[Any],
    started: Any,
) -> None:
    """Report ``started`` through ``task_status``, then hand every connection to ``accepted`` until
    ``scope`` is cancelled (the connections' tasks with it); the listener is closed at the end."""
    try:
        with scope:
            async with trio.open_nursery() as nursery:
                task_status.started(started)
                while True:
                    accepted(await listener.accept(), nursery)
    finally:
        with trio.CancelScope(shield=True):
            await listener.aclose()
