"""What the parts of a client ID share (RFC 8881 sections 2.4 and 2.10): the owner and options we
send, the server's identity, the sessions (the first one and those of client ID trunking), the
paths with the back channel on their connections, and the lease and recovery figures.

The parts (:mod:`.create_session`'s establishment, :mod:`.recovery`, :mod:`.lease`) each hold this
one state and change it; :class:`~.client_id.ClientID` puts them together."""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from .._proto.nfs4 import const as c
from .._proto.nfs4.types import client_owner4
from .._rpc.auth import Credential, auth_sys
from .backchannel import Backchannel
from .errors import ServerUnreachable
from .path_set import NoPathError, Path, PathSet
from .session import COMPOUND_ROOM, RetryPolicy, Session


def default_owner_id(identity: str = "") -> bytes:
    """A client owner stable for this host and mount identity (RFC 8881 section 2.4)."""
    return f"pynfsrdma/{socket.gethostname()}/{identity}".encode()


def boot_verifier() -> bytes:
    """Changes on every client instance, so the server can tell a restarted client."""
    return os.urandom(8)


@dataclass(slots=True)
class SessionOptions:
    """What we ask CREATE_SESSION for."""

    rsize: int = 1 << 20
    wsize: int = 1 << 20
    max_requests: int = 64
    max_operations: int = 64
    back_channel: bool = True
    minorversion: int = c.NFS4_MINOR_VERSION_1  # of every COMPOUND (the session's, its callbacks')
    pnfs: bool = False  # EXCHANGE_ID asks for the client ID to be one of a pNFS metadata server's


@dataclass
class ServerIdentity:
    """What EXCHANGE_ID said about the server (compared when trunking)."""

    clientid: int
    server_owner_major: bytes
    server_owner_minor: int
    server_scope: bytes
    impl: str = ""
    flags: int = 0


Hook = Callable[[Any], Awaitable[None]]  # given the client ID (a ReclaimHook of client_id.py)


class ClientState:
    """The client ID's state, over a set of paths: what its parts read and change."""

    def __init__(
        self,
        nursery: trio.Nursery,
        owner_id: bytes | None = None,
        options: SessionOptions | None = None,
        policy: RetryPolicy | None = None,
        cred: Credential | None = None,
    ) -> None:
        self._nursery = nursery
        self.owner = client_owner4(boot_verifier(), owner_id or default_owner_id())
        self.options = options or SessionOptions()
        self.policy = policy or RetryPolicy()
        self.machine_cred = cred or auth_sys(0, 0)
        self.backchannel = Backchannel(nursery, self.first_session)
        self.backchannel.minorversion = self.options.minorversion
        # (on_connect: the establishment's, set when the client ID is put together)
        self.paths = PathSet(nursery, c.NFS4_PROGRAM, c.NFS_V4, callback_handler=self.backchannel.handle_rpc)
        # no reply is larger than the session we ask for allows (nor, once made, than it allows)
        self.paths.limit_records(self.options.rsize + COMPOUND_ROOM)
        self.identity: ServerIdentity | None = None
        self.session: Session | None = None  # the first session (group 0)
        self.trunked_sessions: dict[int, Session] = {}  # group -> session (client ID trunking)
        self.trunked_groups: dict[int, int] = {}  # server owner minor id -> group
        self.lease_time = 90
        self.status_flags_seen = 0
        self.in_grace = False
        self.sequenceid = 0  # EXCHANGE_ID's eir_sequenceid, for CREATE_SESSION
        self.closed = False  # shut down: no request is sent any more
        self.stopping = False  # set by the owner once nothing of ours needs the state any longer
        self.recoveries = 0
        self.reclaim_hooks: list[Hook] = []  # run in the grace period of a new client ID
        self.state_revoked_hooks: list[Hook] = []  # run when SEQUENCE says state was revoked

    @property
    def server(self) -> str:
        """The server's address as the first path names it (for messages)."""
        return self.paths.paths[0].address if self.paths.paths else "the server"

    @property
    def nursery(self) -> trio.Nursery:
        """Where the client's background work runs (delegation returns, recalls): it lives as long
        as the client."""
        return self._nursery

    def first_session(self) -> Session | None:
        """The first session (group 0), whose back channel the server calls us on."""
        return self.session

    def session_of(self, group: int) -> Session | None:
        """The session whose requests go over the paths of ``group`` (None: none yet)."""
        return self.session if group == 0 else self.trunked_sessions.get(group)

    def group_for_minor(self, minor: int) -> int:
        """The session group of the server instance with server owner minor id ``minor``."""
        if self.identity is not None and minor == self.identity.server_owner_minor:
            return 0
        return self.trunked_groups.setdefault(minor, len(self.trunked_groups) + 1)

    async def live_path(self) -> Path:
        """A live path of the first session, waiting for one (a soft mount: ``timeo`` at most)."""
        try:
            return await self.paths.wait_live(
                None if self.policy.hard else trio.current_time() + self.policy.timeo, group=0
            )
        except NoPathError as e:
            raise ServerUnreachable(str(e)) from e
