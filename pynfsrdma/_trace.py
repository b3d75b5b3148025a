"""Logging with levels, and a debug trace with one line per RPC.

The log is the standard :mod:`logging` tree under the ``pynfsrdma`` logger;
:func:`configure_logging` sets its level from a ``-v`` count (or a level name) and sends it to
standard error or a file.

The RPC trace is separate from the log: when :func:`enable_rpc_trace` has been called, every
completed COMPOUND is written to the trace file as one line, for example::

    2024-05-01T12:00:00.123456 xid=0x5e1f0a02 path=127.0.0.1:2049 status=NFS4_OK 0.000412s SEQUENCE,PUTFH,READ

(time of completion, the RPC transaction id, the path (server address) that answered, the
COMPOUND status as RFC 8881 names it, the time from sending to the reply, and the operations in
order). The session layer calls the module-level :func:`rpc_done` after each reply; it costs one
attribute test while tracing is off. A request that fails without a reply (timeout, lost
connection) is traced by :func:`rpc_failed` with the error in place of the status.

The formatting is done by :class:`RpcTrace`, a plain object writing to any text stream, so it is
tested without files or sockets.
"""

from __future__ import annotations

import datetime
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from ._proto.nfs4.const import nfs_opnum4, nfsstat4

__all__ = [
    "RpcTrace",
    "configure_logging",
    "disable_rpc_trace",
    "enable_rpc_trace",
    "op_name",
    "rpc_done",
    "rpc_failed",
    "status_name",
    "tracer",
]

LOGGER_NAME = "pynfsrdma"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_OP_NAMES = {int(op): op.name.removeprefix("OP_") for op in nfs_opnum4}
_STATUS_NAMES = {int(s): s.name for s in nfsstat4}


def op_name(op: int | Any) -> str:
    """``nfs_opnum4.OP_READ`` (or an operation object whose class has ``OPNUM``) -> ``"READ"``."""
    num = op if isinstance(op, int) else getattr(op, "OPNUM", None)
    if num is None:
        return type(op).__name__
    return _OP_NAMES.get(int(num), f"OP_{int(num)}")


def status_name(status: int) -> str:
    """An nfsstat4 value -> its RFC 8881 name (the number itself when it has no name)."""
    return _STATUS_NAMES.get(status, str(status))


def _wall_clock() -> str:
    return datetime.datetime.now().isoformat(timespec="microseconds")


class RpcTrace:
    """Writes one line per RPC to ``stream``; ``clock`` gives the line's timestamp text."""

    def __init__(self, stream: TextIO, clock: Callable[[], str] = _wall_clock) -> None:
        self.stream = stream
        self.clock = clock
        self.lines = 0
        self._lock = threading.Lock()  # the FUSE daemon and the API may trace from several threads

    def rpc_done(
        self, xid: int, path_address: str, ops: Iterable[int | Any], status: int, seconds: float
    ) -> None:
        """A reply arrived for ``xid`` on ``path_address``; ``status`` is the COMPOUND's nfsstat4."""
        self._write(xid, path_address, ops, f"status={status_name(status)}", seconds)

    def rpc_failed(
        self, xid: int, path_address: str, ops: Iterable[int | Any], error: str, seconds: float
    ) -> None:
        """No reply for ``xid`` on ``path_address``: ``error`` says why (timeout, connection lost)."""
        self._write(xid, path_address, ops, f"error={error!r}", seconds)

    def _write(
        self, xid: int, path_address: str, ops: Iterable[int | Any], outcome: str, seconds: float
    ) -> None:
        names = ",".join(op_name(op) for op in ops) or "-"
        line = f"{self.clock()} xid=0x{xid:08x} path={path_address} {outcome} {seconds:.6f}s {names}\n"
        with self._lock:
            self.stream.write(line)
            self.stream.flush()
            self.lines += 1

    def close(self) -> None:
        with self._lock:
            if self.stream not in (sys.stdout, sys.stderr):
                self.stream.close()


_active: RpcTrace | None = None


def tracer() -> RpcTrace | None:
    """The active trace, or None when tracing is off."""
    return _active


def enable_rpc_trace(path: str) -> RpcTrace:
    """Trace every RPC to the file ``path`` (appended to; ``-`` is standard error) from now on."""
    global _active
    stream: TextIO = sys.stderr if path == "-" else open(path, "a", encoding="utf-8")  # noqa: SIM115
    disable_rpc_trace()
    _active = RpcTrace(stream)
    logging.getLogger(LOGGER_NAME).debug("RPC trace to %s", path)
    return _active


def install_rpc_trace(trace: RpcTrace | None) -> None:
    """Make ``trace`` the active one (None turns tracing off without closing anything)."""
    global _active
    _active = trace


def disable_rpc_trace() -> None:
    """Stop tracing and close the trace file."""
    global _active
    old, _active = _active, None
    if old is not None:
        old.close()


def rpc_done(xid: int, path_address: str, ops: Iterable[int | Any], status: int, seconds: float) -> None:
    """Called by the session layer after each reply; does nothing unless tracing is on.

    ``ops`` are operation numbers or the operation objects themselves (their class's ``OPNUM``);
    they are only looked at while tracing."""
    t = _active
    if t is not None:
        t.rpc_done(xid, path_address, ops, status, seconds)


def rpc_failed(xid: int, path_address: str, ops: Iterable[int | Any], error: str, seconds: float) -> None:
    """Called by the session layer when a request got no reply on a path; no-op unless tracing."""
    t = _active
    if t is not None:
        t.rpc_failed(xid, path_address, ops, error, seconds)


def level_for(verbosity: int | str) -> int:
    """``-v`` count (0 warnings, 1 info, 2+ debug) or a level name (``"debug"``) -> a logging level."""
    if isinstance(verbosity, str):
        level = logging.getLevelName(verbosity.upper())
        if not isinstance(level, int):
            raise ValueError(f"unknown log level {verbosity!r} (debug, info, warning, error, critical)")
        return level
    return max(logging.DEBUG, logging.WARNING - 10 * max(verbosity, 0))


def configure_logging(
    verbosity: int | str = 0, log_file: str | None = None, rpc_trace: str | None = None
) -> logging.Handler:
    """Set the ``pynfsrdma`` log's level and destination (standard error, or ``log_file``).

    With ``rpc_trace`` also start the RPC trace to that file. Calling it again replaces the handler
    installed before. Returns the handler."""
    logger = logging.getLogger(LOGGER_NAME)
    for h in list(logger.handlers):
        if getattr(h, "_pynfsrdma", False):
            logger.removeHandler(h)
            h.close()
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler._pynfsrdma = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level_for(verbosity))
    logger.propagate = False
    if rpc_trace:
        enable_rpc_trace(rpc_trace)
    return handler
