"""The control protocol of a proxy process: JSON lines over a unix socket.

Each request is one JSON object on one line, each answer too::

    {"cmd": "status"}                    -> {"ok": true, "proxy": {address, port, target, fault, stats}}
    {"cmd": "cut"} | {"cmd": "stall"} | {"cmd": "restore"}
    {"cmd": "delay", "value": 50}        (milliseconds; 0 removes the delay)
    {"cmd": "throttle", "value": 100}    (kilobytes per second; 0 removes the limit)

Every fault answer carries the proxy's state after the change. An error answers
``{"ok": false, "error": "..."}`` and leaves the connection open for the next request.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Protocol

import trio

from .faults import COMMANDS, FaultCommandError

__all__ = ["ControlError", "acontrol_request", "control_request", "handle_request", "serve_control"]

MAX_LINE = 64 * 1024
UNIX_PATH_MAX = 107


class Controlled(Protocol):
    """What the control socket drives: a path proxy (testbed.proxy.Proxy)."""

    def describe(self) -> dict[str, Any]: ...

    def apply(self, cmd: str, value: float | None) -> None: ...


class ControlError(RuntimeError):
    """A control request failed (no such socket, refused, or the proxy answered an error)."""


def handle_request(proxy: Controlled, request: Any) -> dict[str, Any]:
    """Carry out one decoded request on ``proxy`` and return the answer (never raises)."""
    if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
        return {"ok": False, "error": 'a request is a JSON object with a "cmd" string'}
    cmd = request["cmd"]
    if cmd == "status":
        return {"ok": True, "proxy": proxy.describe()}
    if cmd not in COMMANDS:
        return {"ok": False, "error": f"unknown command {cmd!r}"}
    value = request.get("value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        return {"ok": False, "error": "value must be a number"}
    try:
        proxy.apply(cmd, value)
    except FaultCommandError as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "proxy": proxy.describe()}


async def _serve_client(stream: trio.SocketStream, proxy: Controlled) -> None:
    buffer = bytearray()
    async with stream:
        try:
            while True:
                data = await stream.receive_some(4096)
                if not data:
                    return
                buffer += data
                if len(buffer) > MAX_LINE and b"\n" not in buffer:
                    await stream.send_all(b'{"ok": false, "error": "request too long"}\n')
                    return
                while b"\n" in buffer:
                    line, _, rest = bytes(buffer).partition(b"\n")
                    buffer[:] = rest
                    if not line.strip():
                        continue
                    try:
                        request = json.loads(line)
                    except ValueError as exc:
                        answer: dict[str, Any] = {"ok": False, "error": f"bad JSON: {exc}"}
                    else:
                        answer = handle_request(proxy, request)
                    await stream.send_all(json.dumps(answer).encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


async def serve_control(
    path: str, proxy: Controlled, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Listen on the unix socket ``path`` and apply requests to ``proxy`` until cancelled."""
    if len(os.fsencode(path)) > UNIX_PATH_MAX:
        raise OSError(f"control socket path is longer than {UNIX_PATH_MAX} bytes: {path}")
    if os.path.exists(path):
        os.unlink(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(16)
    listener = trio.SocketListener(sock)
    try:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                stream = await listener.accept()
                nursery.start_soon(_serve_client, stream, proxy)
    finally:
        with trio.CancelScope(shield=True):
            await listener.aclose()
        try:
            os.unlink(path)
        except OSError:
            pass


def _check(answer: Any) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise ControlError(f"unexpected answer {answer!r}")
    if not answer.get("ok"):
        raise ControlError(str(answer.get("error", "request failed")))
    return answer


def control_request(path: str, request: dict[str, Any], *, timeout: float = 5.0) -> dict[str, Any]:
    """Send one request to the proxy process behind ``path`` (blocking) and return its answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise ControlError(f"control socket {path}: {exc.strerror or exc}") from exc
    try:
        return _check(json.loads(data))
    except ValueError:
        raise ControlError(f"control socket {path}: unreadable answer {data[:200]!r}") from None


async def acontrol_request(path: str, request: dict[str, Any]) -> dict[str, Any]:
    """Like :func:`control_request`, from trio code."""
    try:
        stream = await trio.open_unix_socket(path)
        async with stream:
            await stream.send_all(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                data += chunk
    except (OSError, trio.BrokenResourceError) as exc:
        raise ControlError(f"control socket {path}: {exc}") from exc
    try:
        return _check(json.loads(data))
    except ValueError:
        raise ControlError(f"control socket {path}: unreadable answer {data[:200]!r}") from None
