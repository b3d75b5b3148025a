"""Multipath lists in fs_locations_info and fs_locations (RFC 8881 sections 11.5, 11.16, 11.17), sans I/O.

A server tells its clients the network addresses it can be reached at (for trunking) in the
location attributes of the pseudo-fs root. A *connection-trunking* list is recognised by its shape:

- fs_locations_info: ``fli_fs_root`` is "/" and there is a single item whose ``fli_rootpath`` is
  "/"; each ``fs_locations_server4`` of that item is one address. ``FSLI4BX_READRANK`` is the
  server interface index (equal rank: the same interface), ``FSLI4BX_READORDER`` the relative
  performance of the interface (higher is faster), ``FSLI4TF_RDMA`` in ``FSLI4BX_TFLAGS`` marks
  an address reachable over RPC-over-RDMA. fls_currency, fli_flags, fli_valid_for, the write
  rank and order and the other class flags are ignored.
- fs_locations (a server without fs_locations_info): ``fs_root`` "/" and a single location whose
  ``rootpath`` is "/"; its server names are the addresses (no ranks, orders or RDMA flags).

Anything else (no attribute, an empty list, referrals and replicas with other paths) is "no
multipath list": the client stays on the address it mounted.

A server string is a host name, an IPv4 or IPv6 address, optionally with a port as
``host:port`` / ``[v6]:port``, or an RFC 5665 universal address (``a.b.c.d.p1.p2``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import fls_info_byte
from .._proto.nfs4.types import fs_locations4, fs_locations_info4

__all__ = [
    "Candidate",
    "MultipathList",
    "is_root_path",
    "multipath_from_fs_locations",
    "multipath_from_fs_locations_info",
    "parse_server",
    "select_candidates",
]

SOURCE_FS_LOCATIONS_INFO = "fs_locations_info"
SOURCE_FS_LOCATIONS = "fs_locations"
SOURCE_NONE = "none"
SOURCE_MANUAL = "addrs"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One address a server was said to be reachable at."""

    host: str
    port: int | None = None  # None: the port the client mounted with
    rank: int = 0  # FSLI4BX_READRANK
    order: int = 0  # FSLI4BX_READORDER (higher is faster)
    rdma: bool = False  # FSLI4TF_RDMA

    def address(self, default_port: int) -> str:
        port = self.port if self.port is not None else default_port
        return f"[{self.host}]:{port}" if ":" in self.host else f"{self.host}:{port}"

    def port_or(self, default_port: int) -> int:
        return self.port if self.port is not None else default_port


@dataclass(frozen=True, slots=True)
class MultipathList:
    """The trunking addresses a server advertised (empty: none), and where they came from."""

    candidates: tuple[Candidate, ...] = ()
    source: str = SOURCE_NONE

    def __bool__(self) -> bool:
        return bool(self.candidates)


NO_MULTIPATH = MultipathList()


def is_root_path(components: Sequence[str]) -> bool:
    """Whether a pathname4 names "/" (no components; a lone empty or "/" component is tolerated)."""
    return all(part in ("", "/") for part in components)


def parse_server(text: str) -> tuple[str, int | None]:
    """``(host, port)`` of a server string; port None when it has none. ValueError if malformed."""
    s = text.strip()
    if not s:
        raise ValueError("empty server name")
    if s.startswith("["):
        host, sep, rest = s[1:].partition("]")
        if not sep:
            raise ValueError(f"unbalanced brackets in {text!r}")
        ipaddress.IPv6Address(host)
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ValueError(f"junk after the address in {text!r}")
        return host, _port(rest[1:], text)
    if s.count(":") > 1:  # a bare IPv6 address
        ipaddress.IPv6Address(s)
        return s, None
    if ":" in s:
        host, _, port = s.partition(":")
        if not host:
            raise ValueError(f"no host in {text!r}")
        return host, _port(port, text)
    parts = s.split(".")
    if len(parts) == 6 and all(p.isascii() and p.isdigit() for p in parts):  # RFC 5665 universal address, IPv4
        hi, lo = int(parts[4]), int(parts[5])
        if hi > 255 or lo > 255:
            raise ValueError(f"bad port octets in universal address {text!r}")
        host = ".".join(parts[:4])
        ipaddress.IPv4Address(host)
        return host, _port(str(hi * 256 + lo), text)
    return s, None


def _port(text: str, whole: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise ValueError(f"bad port in {whole!r}")
    return int(text)


def multipath_from_fs_locations_info(info: fs_locations_info4 | None) -> MultipathList:
    """The connection-trunking list in an fs_locations_info value (empty if it is not one)."""
    if info is None or not is_root_path(info.fli_fs_root) or len(info.fli_items) != 1:
        return NO_MULTIPATH
    item = info.fli_items[0]
    if not is_root_path(item.fli_rootpath):
        return NO_MULTIPATH
    out: list[Candidate] = []
    for server in item.fli_entries:
        try:
            host, port = parse_server(server.fls_server)
        except ValueError:
            continue  # one unusable name does not spoil the list
        out.append(
            Candidate(
                host,
                port,
                rank=fls_info_byte(server, c.FSLI4BX_READRANK),
                order=fls_info_byte(server, c.FSLI4BX_READORDER),
                rdma=bool(fls_info_byte(server, c.FSLI4BX_TFLAGS) & c.FSLI4TF_RDMA),
            )
        )
    return MultipathList(tuple(_unique(out)), SOURCE_FS_LOCATIONS_INFO) if out else NO_MULTIPATH


def multipath_from_fs_locations(locs: fs_locations4 | None) -> MultipathList:
    """The connection-trunking list in a (legacy) fs_locations value (empty if it is not one)."""
    if locs is None or not is_root_path(locs.fs_root) or len(locs.locations) != 1:
        return NO_MULTIPATH
    loc = locs.locations[0]
    if not is_root_path(loc.rootpath):
        return NO_MULTIPATH
    out: list[Candidate] = []
    for name in loc.server:
        try:
            host, port = parse_server(name)
        except ValueError:
            continue
        out.append(Candidate(host, port))
    return MultipathList(tuple(_unique(out)), SOURCE_FS_LOCATIONS) if out else NO_MULTIPATH


def _unique(cands: Iterable[Candidate]) -> list[Candidate]:
    seen: set[tuple[str, int | None, bool]] = set()
    out: list[Candidate] = []
    for cand in cands:
        key = (cand.host, cand.port, cand.rdma)
        if key not in seen:
            seen.add(key)
            out.append(cand)
    return out


def select_candidates(
    mp: MultipathList,
    *,
    rdma: bool,
    default_port: int,
    max_connect: int,
    exclude: Iterable[str] = (),
) -> list[Candidate]:
    """The addresses to try, best first: those of our transport (RDMA-flagged ones for an RDMA
    mount, the others for TCP), lowest read rank first and, within a rank, highest read order first;
    at most ``max_connect`` distinct addresses counting those in ``exclude`` (already in use, given
    as ``host:port``), which are left out."""
    used = set(exclude)
    room = max(0, max_connect - len(used))
    chosen: list[Candidate] = []
    for cand in sorted((x for x in mp.candidates if x.rdma == rdma), key=lambda x: (x.rank, -x.order)):
        addr = cand.address(default_port)
        if addr in used:
            continue
        if len(chosen) >= room:
            break
        used.add(addr)
        chosen.append(cand)
    return chosen
