"""Exceptions of the session layer, each with an errno a person and a filesystem understand."""

from __future__ import annotations

import errno


class SessionError(OSError):
    """The session could not carry a request (lost and not recoverable, or misbehaving server)."""

    def __init__(self, message: str, err: int = errno.EIO) -> None:
        super().__init__(err, message)

    def __str__(self) -> str:
        return str(self.strerror)


class ServerUnreachable(SessionError):
    """No path to the server answered in time (a ``soft`` mount's timeout, or mount time)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, errno.EIO)


class NotNFSv41Server(SessionError):
    """The peer answered, but not as an NFSv4.1 server (not NFS, or only NFSv4.0 / v3)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, errno.EPROTONOSUPPORT)
