"""Trunking discovery and the life of a session's paths (RFC 8881 sections 2.10.5 and 11.5).

After the first session is up, :func:`discover` asks the pseudo-fs root for fs_locations_info and
fs_locations (one COMPOUND: PUTROOTFH, GETATTR) and reads a connection-trunking list out of the
answer (:mod:`.fs_locations`). It is bounded (about a second by default) and never fails: a server
that does not support the attributes, an empty list, an error or no answer in time all mean "no
multipath list".

:class:`Trunking` owns the rest: it adds the addresses given by hand (``addrs=``), the extra
connections of ``nconnect=``, and the discovered candidates (at most ``max_connect`` distinct
addresses), each verified before use (:mod:`.verification`); it repeats discovery periodically and
whenever a path goes down; and it watches for stalled paths (a SEQUENCE probe on a path whose
oldest request waits too long while other paths answer).

Transports: a discovered address flagged FSLI4TF_RDMA becomes an RPC-over-RDMA path and the others
TCP paths, whatever the mount's own transport, so that one session runs over both (RFC 8881 section
2.10.5: a session's connections may use different transports). The RDMA paths use the verbs
provider named by the mount's ``provider=`` option (and its ``credits=``/``inline=``); with no such
option and no RDMA device on this machine, RDMA-flagged addresses are left out (an info log says
so). A request moved from one path to another is encoded again for the new path's transport
(:meth:`~pynfsrdma._session.session.Session._send` encodes per try), so READ data is placed through
Write chunks only on an RDMA path.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import bitmap4_from, decode_fattr4
from .._proto.nfs4.compound import result_of
from .._proto.nfs4.types import GETATTR4args, PUTROOTFH4args
from .._rpc.errors import RpcReplyError
from .._session.client_id import ClientID
from .._session.path_set import Connector, Path, PathRejected, PathState
from .._session.session import SessionLost
from .._transport.base import Transport, TransportError
from .._transport.tcp import TcpTransport
from .._xdr import XdrError
from .fs_locations import (
    NO_MULTIPATH,
    SOURCE_MANUAL,
    Candidate,
    MultipathList,
    multipath_from_fs_locations,
    multipath_from_fs_locations_info,
    parse_server,
    select_candidates,
)
from .verification import Verifier

__all__ = [
    "ConnectorFactory",
    "Trunking",
    "TrunkingOptionError",
    "TrunkingOptions",
    "connector_factory",
    "discover",
    "rdma_unavailable",
]

log = logging.getLogger(__name__)

ConnectorFactory = Callable[[str, int], Awaitable[Connector]]

DEFAULT_MAX_CONNECT = 16
MAX_NCONNECT = 16
MIN_REDISCOVERY_GAP = 5.0  # path-down rediscoveries at most this often
LOCATION_BITMAP = bitmap4_from([c.FATTR4_FS_LOCATIONS, c.FATTR4_FS_LOCATIONS_INFO])
TCP, RDMA = "tcp", "rdma"
DEFAULT_PORTS = {TCP: c.NFS_PORT, RDMA: c.NFS_RDMA_PORT}
RDMA_URL_OPTIONS = ("provider", "credits", "inline", "remote_invalidation")  # the options connect_rdma reads


class TrunkingOptionError(ValueError):
    """A trunking mount option that cannot be understood."""


@dataclass
class TrunkingOptions:
    """The mount options of trunking (named as the Linux client names them where it has them).

    ``addrs=a,b,c`` more addresses of the server (``host`` or ``host:port``); ``nconnect=N``
    connections per address; ``max_connect=N`` distinct addresses at most (the mount's included);
    ``trunkdiscovery`` / ``notrunkdiscovery`` ask the server for its addresses or not;
    ``trunkinterval=S`` repeat discovery every S seconds (default hourly); ``stalltimeo=S`` a
    request waiting S seconds on one path while others answer gets that path probed (and dropped
    if the probe gets no answer in S seconds either).
    """

    addrs: list[str] = field(default_factory=list)
    nconnect: int = 1
    max_connect: int = DEFAULT_MAX_CONNECT
    discovery: bool = True
    discovery_timeout: float = 1.0
    rediscover_interval: float = 3600.0
    stall_after: float = 1.0
    probe_timeout: float = 1.0
    verify_timeout: float = 5.0
    connect_timeout: float = 10.0
    rediscover_gap: float = MIN_REDISCOVERY_GAP  # path-down rediscoveries at most this often
    rdma_options: dict[str, str] = field(default_factory=dict)  # provider=, credits=, inline=

    KEYS = frozenset(
        {
            "addrs",
            "nconnect",
            "max_connect",
            "trunkdiscovery",
            "notrunkdiscovery",
            "trunkinterval",
            "stalltimeo",
        }
    )

    @classmethod
    def from_url_options(cls, options: Mapping[str, str]) -> TrunkingOptions:
        o = cls()
        if options.get("addrs"):
            o.addrs = [a.strip() for a in options["addrs"].split(",") if a.strip()]
            for a in o.addrs:
                try:
                    parse_server(a)
                except ValueError as e:
                    raise TrunkingOptionError(f"addrs: {e}") from e
        o.nconnect = _int(options, "nconnect", o.nconnect, 1, MAX_NCONNECT)
        o.max_connect = _int(options, "max_connect", o.max_connect, 1, 256)
        if "notrunkdiscovery" in options:
            o.discovery = False
        if "trunkdiscovery" in options:
            o.discovery = options["trunkdiscovery"].lower() not in ("0", "no", "false", "off")
        o.rediscover_interval = _float(options, "trunkinterval", o.rediscover_interval)
        o.stall_after = o.probe_timeout = _float(options, "stalltimeo", o.stall_after)
        o.rdma_options = {k: options[k] for k in RDMA_URL_OPTIONS if options.get(k)}
        return o


def _int(options: Mapping[str, str], key: str, default: int, lo: int, hi: int) -> int:
    if key not in options:
        return default
    try:
        v = int(options[key])
    except ValueError:
        raise TrunkingOptionError(f"{key} must be a number, not {options[key]!r}") from None
    if not lo <= v <= hi:
        raise TrunkingOptionError(f"{key} must be between {lo} and {hi}")
    return v


def _float(options: Mapping[str, str], key: str, default: float) -> float:
    if key not in options:
        return default
    try:
        v = float(options[key])
    except ValueError:
        raise TrunkingOptionError(f"{key} must be a number of seconds, not {options[key]!r}") from None
    if not v > 0:
        raise TrunkingOptionError(f"{key} must be > 0")
    return v


def rdma_unavailable(rdma_options: Mapping[str, str]) -> str | None:
    """Why RDMA paths cannot be made here (None: they can). A ``provider=`` option is taken at its
    word (its connection errors are the path's); without one, RDMA needs a device pyverbs sees."""
    if rdma_options.get("provider"):
        return None
    from .._transport.rdma import make_provider
    from .._transport.rdma.provider import NoRdmaDevice

    try:
        make_provider(None)
    except NoRdmaDevice as e:
        return str(e)
    return None


def connector_factory(kind: str, rdma_options: Mapping[str, str], timeout: float) -> ConnectorFactory:
    """Connectors of transport ``kind`` (``tcp`` or ``rdma``) for the addresses trunking finds."""
    if kind == RDMA:
        from .._transport.rdma import connect_rdma

        async def rdma_for(host: str, port: int) -> Connector:
            async def connect() -> Transport:
                return await connect_rdma(host, port, timeout=timeout, options=rdma_options)

            return connect

        return rdma_for

    async def tcp_for(host: str, port: int) -> Connector:
        async def connect() -> Transport:
            return await TcpTransport.connect(host, port, timeout=timeout)

        return connect

    return tcp_for


async def discover(client: ClientID, timeout: float = 1.0) -> MultipathList:
    """The server's connection-trunking list from its pseudo-fs root; NO_MULTIPATH when there is
    none, when the server does not answer within ``timeout`` seconds, or on any error."""
    res = None
    with trio.move_on_after(timeout):
        try:
            res = await client.compound(
                [PUTROOTFH4args(), GETATTR4args(LOCATION_BITMAP)], client.machine_cred
            )
        except (OSError, TransportError, RpcReplyError, XdrError) as e:
            log.info("trunking discovery failed: %s", e)
            return NO_MULTIPATH
    if res is None:
        log.info("trunking discovery: no answer within %g s", timeout)
        return NO_MULTIPATH
    if res.status != c.NFS4_OK or len(res.resarray) != 2:
        log.info("trunking discovery: GETATTR on the root failed (%s)", res.status)
        return NO_MULTIPATH
    try:
        attrs = decode_fattr4(result_of(res.resarray, c.OP_GETATTR).obj_attributes)
    except XdrError as e:
        log.info("trunking discovery: malformed attributes: %s", e)
        return NO_MULTIPATH
    mp = multipath_from_fs_locations_info(attrs.get(c.FATTR4_FS_LOCATIONS_INFO))
    if not mp:
        mp = multipath_from_fs_locations(attrs.get(c.FATTR4_FS_LOCATIONS))
    return mp


class Trunking:
    """The paths of one client beyond the first: given, discovered, verified, watched."""

    def __init__(
        self,
        client: ClientID,
        nursery: trio.Nursery,
        options: TrunkingOptions,
        connector_for: ConnectorFactory,
        *,
        default_port: int,
        rdma: bool = False,
        transport_kind: str = "tcp",
        own_kind_only: bool = False,
    ) -> None:
        self.client = client
        self.paths = client.paths
        self.options = options
        self.connector_for = connector_for
        self.default_port = default_port
        self.rdma = rdma
        self.transport_kind = transport_kind
        self.verifier = Verifier(client, options.verify_timeout)
        self.multipath: MultipathList = NO_MULTIPATH
        self.discoveries = 0
        self.settled = trio.Event()
        self._nursery = nursery
        self._last_discovery = -1e9
        self._factories: dict[str, ConnectorFactory | None] = {transport_kind: connector_for}
        # (under RPC-with-TLS every connection is a TLS one: addresses of another transport are left out)
        self.own_kind_only = own_kind_only

    # -- starting ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """After ClientID.start: bind new connections through the verifier, add the extra paths,
        discover (bounded), and leave the watchers running in the nursery."""
        self.paths.on_connect = self.verifier.on_connect
        for p in self.paths.paths:  # the mount's path: verified by the session made on it
            self.verifier.verified.add(id(p))
        mount = self.paths.paths[0] if self.paths.paths else None
        new: list[Path] = []
        if mount is not None:
            host, port = _split(mount.address, self.default_port)
            new += await self._paths_for(
                Candidate(host, port, rdma=self.rdma), mount.source, extra=self.options.nconnect - 1
            )
        if self.options.addrs:
            given = MultipathList(
                tuple(Candidate(*parse_server(a), rdma=self.rdma) for a in self.options.addrs),
                SOURCE_MANUAL,
            )
            for cand in select_candidates(
                given,
                rdma=self.rdma,
                default_port=self.default_port,
                max_connect=self.options.max_connect,
                exclude=self._in_use(self.transport_kind),
            ):
                new += await self._paths_for(cand, SOURCE_MANUAL)
        if self.options.discovery:
            new += await self._discover_and_add()
        self._nursery.start_soon(self._first_connects, new)
        self._nursery.start_soon(
            self.paths.watch_stalls, self._probe, self.options.stall_after, self.options.probe_timeout
        )
        if self.options.discovery:
            self._nursery.start_soon(self._rediscovery_loop)

    # -- transports -------------------------------------------------------------------------------
    def _kind_of(self, cand: Candidate) -> str:
        return RDMA if cand.rdma else TCP

    def _port_for(self, kind: str) -> int:
        return self.default_port if kind == self.transport_kind else DEFAULT_PORTS[kind]

    def _factory(self, kind: str) -> ConnectorFactory | None:
        """Connectors for ``kind``; None when RDMA cannot be used on this machine (said once)."""
        if kind not in self._factories:
            if self.own_kind_only:
                log.info("%s trunking addresses are left out: every connection of this session is under TLS", kind)
                self._factories[kind] = None
                return None
            reason = rdma_unavailable(self.options.rdma_options) if kind == RDMA else None
            if reason is not None:
                log.info("RDMA-flagged trunking addresses are left out: %s", reason)
                self._factories[kind] = None
            else:
                self._factories[kind] = connector_factory(
                    kind, self.options.rdma_options, self.options.connect_timeout
                )
        return self._factories[kind]

    def _in_use(self, kind: str) -> set[str]:
        """Addresses in use, as select_candidates counts them: the paths of ``kind`` by their
        address (left out of the choice), those of other transports tagged (counted only)."""
        return {
            p.address if p.transport_kind == kind else f"{p.transport_kind}:{p.address}"
            for p in self.paths.paths
        }

    async def _paths_for(self, cand: Candidate, source: str, extra: int | None = None) -> list[Path]:
        """New (unconnected) paths to ``cand``: nconnect of them, or ``extra``."""
        n = self.options.nconnect if extra is None else extra
        kind = self._kind_of(cand)
        factory = self._factory(kind)
        if factory is None or n <= 0:
            return []
        port = self._port_for(kind)
        connector = await factory(cand.host, cand.port_or(port))
        out = []
        for _ in range(n):
            p = Path(cand.address(port), connector, kind, rank=cand.rank, order=cand.order, source=source)
            await self.paths.add(p, connect=False)
            out.append(p)
        return out

    async def _first_connects(self, new: list[Path]) -> None:
        async with trio.open_nursery() as n:
            for p in new:
                n.start_soon(self._first_connect, p)
        self.settled.set()

    async def _first_connect(self, path: Path) -> None:
        try:
            await self.paths.connect(path)
        except PathRejected:
            await self.paths.remove(path)
            return
        except (TransportError, OSError, RpcReplyError) as e:
            path.last_error = str(e)
            log.info("path %s: first connection failed: %s", path.address, e)
        self._nursery.start_soon(self.paths.keep_alive, path)

    # -- discovery --------------------------------------------------------------------------------
    async def _discover_and_add(self) -> list[Path]:
        self._last_discovery = trio.current_time()
        self.discoveries += 1
        mp = await discover(self.client, self.options.discovery_timeout)
        if mp:
            self.multipath = mp
            log.info(
                "trunking discovery (%s): %s",
                mp.source,
                ", ".join(cd.address(self.default_port) for cd in mp.candidates),
            )
        new: list[Path] = []
        # the mount's transport first, then the other (RDMA-flagged addresses on a TCP mount...)
        for kind in (self.transport_kind, *(k for k in (TCP, RDMA) if k != self.transport_kind)):
            if not any(self._kind_of(cd) == kind for cd in mp.candidates) or self._factory(kind) is None:
                continue
            for cand in select_candidates(
                mp,
                rdma=kind == RDMA,
                default_port=self._port_for(kind),
                max_connect=self.options.max_connect,
                exclude=self._in_use(kind),
            ):
                new += await self._paths_for(cand, mp.source)
        # addresses already in use: keep their rank and order up to date
        for cand in mp.candidates:
            kind = self._kind_of(cand)
            for p in self.paths.paths:
                if p.transport_kind == kind and p.address == cand.address(self._port_for(kind)):
                    p.rank, p.order = cand.rank, cand.order
        return new

    async def rediscover(self) -> list[Path]:
        """Discover again now and connect whatever new addresses it names."""
        new = await self._discover_and_add()
        for p in new:
            self._nursery.start_soon(self._first_connect, p)
        return new

    async def _rediscovery_loop(self) -> None:
        """Discover again periodically, and whenever a path goes down (at most once per
        ``rediscover_gap`` seconds: a loss soon after a discovery is acted on when the gap ends)."""
        while True:
            was_up = {id(p) for p in self.paths.live()}
            with trio.move_on_after(self.options.rediscover_interval) as periodic:
                while True:
                    await self.paths.wait_changed()
                    up = {id(p) for p in self.paths.live()}
                    if was_up - up:
                        break
                    was_up = up
            if not periodic.cancelled_caught:
                await trio.sleep_until(self._last_discovery + self.options.rediscover_gap)
                log.info("a path went down: discovering the server's addresses again")
            await self.rediscover()

    # -- probing ----------------------------------------------------------------------------------
    async def _probe(self, path: Path) -> None:
        """A lone SEQUENCE on ``path`` (a NULL call if every slot is busy)."""
        session = self.client.session_of(path.group)
        rpc = path.rpc
        if rpc is None:
            return
        if session is None or session.table.in_use >= session.table.limit:
            await rpc.call(0, self.client.machine_cred)
            return
        try:
            await session.compound([], self.client.machine_cred, pin=path)
        except SessionLost:
            return  # not the path's fault; the session's owner recovers
        except NFS4Error as e:
            log.info("probe on %s: %s", path.address, e)

    # -- reporting --------------------------------------------------------------------------------
    def snapshot(self) -> list[dict[str, Any]]:
        """Every path: state, address, transport, rank/order, RTT, in-flight calls and bytes..."""
        out = []
        for p in self.paths.paths:
            d = p.snapshot()
            rec = self.verifier.records.get(p.address)
            d["verification"] = (
                rec.verdict.value
                if rec is not None and rec.verdict is not None
                else ("mount" if id(p) in self.verifier.verified else "pending")
            )
            out.append(d)
        for addr, rec in self.verifier.records.items():
            if rec.verdict is not None and not any(p.address == addr for p in self.paths.paths):
                out.append(
                    {
                        "address": addr,
                        "state": PathState.CLOSED.value,
                        "transport": self.transport_kind,
                        "verification": rec.verdict.value,
                        "last_error": rec.message,
                    }
                )
        return out


def _split(address: str, default_port: int) -> tuple[str, int]:
    host, port = parse_server(address)
    return host, port if port is not None else default_port
