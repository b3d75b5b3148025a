"""The control socket of a mount: how ``pynfsrdma stats`` and ``paths`` ask the mount daemon.

The daemon listens on a unix stream socket named after its mount point (see
:func:`socket_path`): for root in ``/run/pynfsrdma/mounts/``, for other users in
``$XDG_RUNTIME_DIR/pynfsrdma/mounts/`` (or ``/tmp/pynfsrdma-UID/mounts/``). The directory is
mode 0700 and the socket 0600, and the daemon also checks each peer's credentials: only root and
the daemon's own user are answered.

The protocol is JSON lines. A request is one line holding an object with ``cmd``::

    {"cmd": "stats"}         -> {"ok": true, "result": {... the stats report ...}}
    {"cmd": "paths"}         -> {"ok": true, "result": [... one object per path ...]}
    {"cmd": "ping"}          -> {"ok": true, "result": "pong"}
    {"cmd": "remount", "args": {"options": ["ro"], "apply": true}}
                             -> {"ok": true, "result": {"ro": true, ...}} (see the mount daemon)
    anything else            -> {"ok": false, "error": "..."}

A command's ``args`` (an object, optional) are its handler's keyword arguments.

A connection may carry any number of requests, each answered by one line, in order.
:class:`ControlProtocol` (requests in, replies out) is sans-I/O; :func:`serve` is the daemon's
listener (a trio task for the daemon's nursery) and :func:`query` the blocking client the CLI uses.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import socket
import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import trio

__all__ = [
    "MAX_REQUEST",
    "CommandError",
    "Connection",
    "ControlError",
    "ControlProtocol",
    "NotAMount",
    "mount_type",
    "query",
    "serve",
    "socket_dir",
    "socket_path",
]

log = logging.getLogger(__name__)

FSTYPE = "fuse.pynfsrdma"
ROOT_DIR = "/run/pynfsrdma/mounts"
MAX_REQUEST = 4096  # bytes in one request line
MAX_CLIENTS = 16  # connections served at once
SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes with the terminating NUL
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid

Handler = Callable[..., Any]


class ControlError(Exception):
    """The mount daemon could not be asked, or answered with an error."""


class NotAMount(ControlError):
    """The directory is not a pynfsrdma mount."""


class CommandError(ValueError):
    """A handler refuses what it was asked; the message goes back to the one who asked, as it is."""


# -- names ------------------------------------------------------------------------------------------
def canonical(mountpoint: str) -> str:
    """The absolute mount point with its parents' symlinks resolved (the mount point itself is not
    looked at, so that a hung mount does not hang the caller)."""
    mp = os.path.abspath(mountpoint)
    parent, name = os.path.split(mp)
    return os.path.join(os.path.realpath(parent), name) if name else mp


def socket_dir(uid: int | None = None) -> str:
    """Where the sockets of mounts made by ``uid`` (default: this process's) live."""
    uid = os.geteuid() if uid is None else uid
    if uid == 0:
        return ROOT_DIR
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "pynfsrdma", "mounts")
    return f"/tmp/pynfsrdma-{uid}/mounts"


def _escape(mountpoint: str) -> str:
    """A file name for the mount point: ``/`` as ``-``, ``-``, ``\\`` and unusual bytes as ``\\xNN``
    (as systemd escapes paths)."""
    raw = mountpoint.strip("/").encode("utf-8", "surrogateescape")
    out = []
    for i, b in enumerate(raw):
        ch = chr(b)
        if ch == "/":
            out.append("-")
        elif (ch.isalnum() and b < 128) or ch in "_:" or (ch == "." and i > 0):
            out.append(ch)
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out) or "-"


def socket_path(mountpoint: str, directory: str | None = None) -> str:
    """The control socket of the mount on ``mountpoint`` (a hash of it when the name is too long)."""
    d = directory if directory is not None else socket_dir()
    mp = canonical(mountpoint)
    path = os.path.join(d, _escape(mp) + ".sock")
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        digest = hashlib.sha256(os.fsencode(mp)).hexdigest()[:32]
        path = os.path.join(d, f"h-{digest}.sock")
    return path


def mount_type(mountpoint: str) -> str | None:
    """The file system type mounted on ``mountpoint`` (``fuse.pynfsrdma`` for ours), None if none."""
    mp = canonical(mountpoint)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.readlines()
    except OSError:
        return None
    found = None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) > 4 and _unescape_mountinfo(fields[4]) == mp and right:
            found = right.split()[0]  # the last mount on a point is the one seen
    return found


def _unescape_mountinfo(s: str) -> str:
    if "\\" not in s:
        return s
    out = []
    i = 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1 : i + 4].isdigit():
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


# -- the protocol (sans I/O) ----------------------------------------------------------------------
class ControlProtocol:
    """Requests (lines of JSON) to replies (lines of JSON) by a table of commands."""

    def __init__(self, handlers: Mapping[str, Handler]) -> None:
        self.handlers = dict(handlers)
        self.handlers.setdefault("ping", lambda: "pong")

    def handle(self, line: bytes) -> bytes:
        """One request line (without its newline) -> one reply line (with it)."""
        try:
            req = json.loads(line)
        except (ValueError, UnicodeDecodeError) as e:
            return self._error(f"not JSON: {e}")
        if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
            return self._error('a request is an object with "cmd"')
        fn = self.handlers.get(req["cmd"])
        if fn is None:
            return self._error(f"unknown command {req['cmd']!r} (known: {', '.join(sorted(self.handlers))})")
        args = req.get("args", {})
        if not isinstance(args, dict):
            return self._error('"args" is an object')
        try:
            result = fn(**args)
        except CommandError as e:  # the command's own refusal, for the one who asked
            return self._error(str(e))
        except Exception as e:  # a report that fails must not end the daemon
            log.exception("control command %s failed", req["cmd"])
            return self._error(f"{req['cmd']} failed: {e}")
        return json.dumps({"ok": True, "result": result}, separators=(",", ":")).encode() + b"\n"

    @staticmethod
    def _error(text: str) -> bytes:
        return json.dumps({"ok": False, "error": text}).encode() + b"\n"


def decode_reply(line: bytes) -> Any:
    """A reply line -> its result; raises ControlError for an error reply or a malformed one."""
    try:
        rep = json.loads(line)
    except ValueError as e:
        raise ControlError(f"malformed reply from the mount daemon: {e}") from e
    if not isinstance(rep, dict) or "ok" not in rep:
        raise ControlError("malformed reply from the mount daemon")
    if not rep["ok"]:
        raise ControlError(str(rep.get("error", "the mount daemon refused the request")))
    return rep.get("result")


# -- the daemon's side ----------------------------------------------------------------------------
async def serve(
    path: str,
    handlers: Mapping[str, Handler],
    *,
    task_status: trio.TaskStatus[str],
) -> None:
    """Listen on ``path`` and answer requests until cancelled; the socket file is removed then.

    Use as ``await nursery.start(serve, path, handlers)``: it returns once the socket accepts. (trio
    is imported here, by the daemon: the CLI's side of this module is for commands that start at once.)"""
    import trio

    proto = ControlProtocol(handlers)
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.stat(directory)
    if st.st_uid != os.geteuid():
        raise ControlError(f"{directory} belongs to uid {st.st_uid}, not to us")
    os.chmod(directory, 0o700)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            os.unlink(path)  # a socket left by a daemon that was killed
        except FileNotFoundError:
            pass
        old = os.umask(0o177)
        try:
            await sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(MAX_CLIENTS)
        log.info("control socket %s", path)
        listener = trio.SocketListener(sock)
        limit = trio.CapacityLimiter(MAX_CLIENTS)
        task_status.started(path)
        async with trio.open_nursery() as nursery:
            while True:
                stream = await listener.accept()
                nursery.start_soon(_serve_one, stream, proto, limit)
    finally:
        sock.close()
        with trio.CancelScope(shield=True):
            _unlink_if_ours(path)


def _unlink_if_ours(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as e:
        if e.errno != errno.ENOENT:
            log.warning("cannot remove %s: %s", path, e)


def _peer_allowed(stream: trio.SocketStream) -> bool:
    try:
        raw = stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    except OSError:
        return False
    _, uid, _ = _UCRED.unpack(raw)
    return uid in (0, os.geteuid())


async def _serve_one(stream: trio.SocketStream, proto: ControlProtocol, limit: trio.CapacityLimiter) -> None:
    import trio

    async with stream, limit:
        if not _peer_allowed(stream):
            return
        buf = bytearray()
        try:
            while True:
                data = await stream.receive_some(MAX_REQUEST)
                if not data:
                    return
                buf += data
                while (nl := buf.find(b"\n")) >= 0:
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    await stream.send_all(proto.handle(line))
                if len(buf) > MAX_REQUEST:
                    await stream.send_all(ControlProtocol._error("request too long"))
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


# -- the CLI's side -------------------------------------------------------------------------------
def socket_candidates(mountpoint: str) -> list[str]:
    """Where the socket of ``mountpoint`` may be: this user's directory, then root's."""
    out = [socket_path(mountpoint)]
    root = socket_path(mountpoint, ROOT_DIR)
    if root not in out:
        out.append(root)
    return out


class Connection:
    """A blocking connection to a mount daemon's control socket (several requests in turn)."""

    def __init__(self, mountpoint: str, timeout: float = 5.0) -> None:
        self.mountpoint = mountpoint
        kind = mount_type(mountpoint)
        if kind != FSTYPE:
            what = "nothing is mounted there" if kind is None else f"it is a {kind} mount"
            raise NotAMount(f"{mountpoint}: not a pynfsrdma mount ({what})")
        last: OSError | None = None
        self.sock: socket.socket | None = None
        for path in socket_candidates(mountpoint):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(path)
            except OSError as e:
                s.close()
                last = e if last is None or isinstance(last, FileNotFoundError) else last
                continue
            self.sock = s
            break
        if self.sock is None:
            assert last is not None
            if isinstance(last, FileNotFoundError):
                msg = "the mount daemon has no control socket (it runs as another user, or is older)"
            elif isinstance(last, PermissionError):
                msg = "permission denied on the mount daemon's control socket (it belongs to another user)"
            elif isinstance(last, ConnectionRefusedError):
                msg = "the mount daemon does not answer on its control socket"
            else:
                msg = f"cannot reach the mount daemon: {last.strerror or last}"
            raise ControlError(f"{mountpoint}: {msg}")
        self._buf = bytearray()

    def request(self, cmd: str, **args: Any) -> Any:
        """Send ``{"cmd": cmd, "args": args}`` and return the reply's result (ControlError on failure)."""
        assert self.sock is not None
        req: dict[str, Any] = {"cmd": cmd, "args": args} if args else {"cmd": cmd}
        try:
            self.sock.sendall(json.dumps(req).encode() + b"\n")
            while (nl := self._buf.find(b"\n")) < 0:
                data = self.sock.recv(1 << 16)
                if not data:
                    raise ControlError(f"{self.mountpoint}: the mount daemon went away")
                self._buf += data
        except TimeoutError as e:
            raise ControlError(f"{self.mountpoint}: the mount daemon does not answer") from e
        except ControlError:
            raise
        except OSError as e:
            raise ControlError(f"{self.mountpoint}: {e.strerror or e}") from e
        line = bytes(self._buf[:nl])
        del self._buf[: nl + 1]
        return decode_reply(line)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def query(mountpoint: str, cmd: str, timeout: float = 5.0) -> Any:
    """Ask the daemon of the mount on ``mountpoint`` one command; its result.

    Raises NotAMount when no pynfsrdma mount is there, ControlError when the daemon cannot be
    asked or answers with an error."""
    with Connection(mountpoint, timeout) as conn:
        return conn.request(cmd)
