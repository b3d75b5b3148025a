"""Sending a message given as several buffers on a non-blocking stream socket, with no join: one
``sendmsg`` gathers them; what the socket does not take now is sent once it has room. Shared by the
emulated RDMA provider's frames and the testbed's records."""

from __future__ import annotations

import socket
from typing import Final

import trio

IOV_MAX: Final = 1024  # the buffers one sendmsg takes at most (Linux's UIO_MAXIOV)


def send_now(sock: socket.socket, views: list[memoryview]) -> list[memoryview]:
    """Send what the socket takes now; what is left of ``views`` (empty: all of it went)."""
    while views:
        try:
            k = sock.sendmsg(views[:IOV_MAX])
        except BlockingIOError:
            return views
        advance(views, k)
    return views


def advance(views: list[memoryview], sent: int) -> None:
    """Drop the ``sent`` bytes a gathered send took from the front of ``views``."""
    while sent:
        if sent >= views[0].nbytes:
            sent -= views.pop(0).nbytes
        else:
            views[0] = views[0][sent:]
            sent = 0


async def send_rest(sock: socket.socket, views: list[memoryview], started: bool = False) -> None:
    """Send every byte of ``views``, waiting while the socket takes none. Once part of the message
    went out (``started``), the rest goes even if the caller is cancelled: a message left half sent
    would break the stream for everything after it."""
    left = sum(v.nbytes for v in views)
    while views := send_now(sock, views):
        now = sum(v.nbytes for v in views)
        started |= now < left
        left = now
        with trio.CancelScope(shield=started):
            await trio.lowlevel.wait_writable(sock)
