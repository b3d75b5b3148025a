"""The listening side of a testbed proxy: one TCP listener on one address (a port of 0 picks a free
one), and the loop that hands each accepted connection on until the proxy is stopped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

# accepted(connection, nursery): what becomes of a connection (started in the nursery, or closed)
Accepted = Callable[[trio.SocketStream, trio.Nursery], None]


async def listen(host: str, port: int) -> trio.SocketListener:
    """A listener on ``host:port`` (only the first, should the name give several)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    for extra in listeners[1:]:
        await extra.aclose()
    return listeners[0]


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
