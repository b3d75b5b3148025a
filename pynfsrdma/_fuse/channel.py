"""Channels: what carries the kernel's FUSE requests to the low-level operations (:mod:`.lowlevel`)
and their answers back. ``-o channel=`` picks one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # (the mount's start reads CHANNELS without loading the channels)
    from .lowlevel import Operations

__all__ = ["CHANNELS", "DEFAULT_CHANNEL", "Channel", "open_channel"]

CHANNELS = ("native", "pyfuse3")
DEFAULT_CHANNEL = "native"

class Channel(Protocol):
    name: str

    def mount(self) -> None:
        """Mount the file system (OSError saying why not); requests are served by :meth:`serve`."""
        ...

    async def serve(self) -> None:
        """Answer requests until the file system is unmounted or :meth:`terminate` is called."""
        ...

    def terminate(self) -> None:
        """Make :meth:`serve` return (from a signal handler's task)."""
        ...

    def close(self) -> None:
        """Unmount (if still mounted) and let go of the kernel connection."""
        ...


def open_channel(
    name: str, ops: Operations, mountpoint: str, options: set[str], io_uring: bool | None = None, *,
    max_pages: int | None = None, read_ahead: int = 1 << 20, max_background: int | None = None,
) -> Channel:
    """The channel ``name`` (one of CHANNELS) for ``ops`` on ``mountpoint``; ``options`` are the
    mount's FUSE options (fsname=, subtype=, allow_other, default_permissions, ro, auto_unmount).
    ``io_uring``: the native channel takes requests by FUSE over io_uring where the kernel offers
    it (None: kernel.uring.IO_URING_DEFAULT, quietly where the kernel does not; pyfuse3 has no such way).
    The native channel sizes FUSE's requests: pages per request (``max_pages`` at most, else as
    many as the kernel allows), and background requests for a read-ahead window of ``read_ahead``
    bytes at most (or ``max_background``); libfuse sizes its own (256 pages, the kernel's default
    background requests)."""
    if name == "native":
        from .devfuse import NativeChannel

        return NativeChannel(ops, mountpoint, options, io_uring=io_uring, max_pages=max_pages,
                             read_ahead=read_ahead, max_background=max_background)
    if name == "pyfuse3":
        from .via_pyfuse3 import Pyfuse3Channel

        return Pyfuse3Channel(ops, mountpoint, options)
    raise ValueError(f"unknown FUSE channel {name!r}")
