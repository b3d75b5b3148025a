"""The trunking advertiser: a TCP proxy in front of an NFSv4.1 server that advertises a multipath list.

NFS-Ganesha does not implement trunking discovery: ``fs_locations_info`` and ``fs_locations`` are not
in its supported_attrs on the pseudo-fs root, and a GETATTR of them answers an empty bitmap. So that
a client's discovery can be tested against a server that behaves as RFC 8881 (sections 11.5 and 11.17)
asks, this proxy sits in front of the server and

- forwards every RPC record both ways unchanged, except
- a COMPOUND call with PUTROOTFH followed by a GETATTR asking for fs_locations_info and/or
  fs_locations: the bits are removed from the request the server sees (the server still runs the
  whole COMPOUND, SEQUENCE and slot bookkeeping included), and the server's reply gets the
  configured multipath list added to that GETATTR's attributes (``supported_attrs`` asked on the
  root also gets the two bits).

The list is a connection-trunking list (fli_fs_root "/" and one item with fli_rootpath "/"), one
``fs_locations_server4`` per :class:`AdvertisedAddress`, with its read rank, read order and RDMA flag
in ``fls_info``. It can be changed while the advertiser runs (:attr:`TrunkingAdvertiser.addresses`).

**Test-only rewriting mode** (``rewrite_minor_id=N``, ``--rewrite-minor-id N``): the server owner's
``so_minor_id`` in every EXCHANGE_ID reply through this advertiser is replaced by ``N``. A client
then takes the server behind it for *another instance of the same server* (same major id and scope,
another minor id) and, by RFC 8881 section 2.10.5, must use client ID trunking there: a second
session on the same client ID. It exists only so that client ID trunking can be tested against one
real NFS-Ganesha (which does accept a second session on a client ID); it misrepresents the server
and is never for anything else.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from typing import Any

import trio

from .._proto import rpc as rpcdef
from .._proto.nfs4 import const as c
from .._proto.nfs4.attrs import attrs_in, bitmap4_from, decode_fattr4, encode_fattr4
from .._proto.nfs4.compound import (
    COMPOUND4res,
    decode_compound_args,
    decode_compound_res,
    encode_compound_args,
    encode_compound_res,
)
from .._proto.nfs4.types import (
    EXCHANGE_ID4args,
    EXCHANGE_ID4resok,
    GETATTR4args,
    GETATTR4resok,
    PUTROOTFH4args,
    fs_location4,
    fs_locations4,
    fs_locations_info4,
    fs_locations_item4,
    fs_locations_server4,
    server_owner4,
)
from .._xdr import Packer, Unpacker, XdrError
from .listener import host_port
from .record_proxy import RecordProxy, frame, serve_until_signalled

__all__ = [
    "AdvertisedAddress",
    "AdvertiserStats",
    "TrunkingAdvertiser",
    "fs_locations_for",
    "fs_locations_info_for",
    "main",
    "parse_advertised",
]

log = logging.getLogger(__name__)

_WORD = struct.Struct(">I")
INSPECT_LIMIT = 64 * 1024  # calls larger than this (WRITEs) are forwarded without decoding
LOCATION_ATTRS = frozenset({c.FATTR4_FS_LOCATIONS, c.FATTR4_FS_LOCATIONS_INFO})
FLS_INFO_LEN = c.FSLI4BX_WRITEORDER + 1


@dataclass(frozen=True, slots=True)
class AdvertisedAddress:
    """One address of the multipath list: ``server`` is ``host``, ``host:port`` or ``[v6]:port``."""

    server: str
    rank: int = 0
    order: int = 0
    rdma: bool = False


def _fls_info(a: AdvertisedAddress) -> bytes:
    info = bytearray(FLS_INFO_LEN)
    info[c.FSLI4BX_TFLAGS] = c.FSLI4TF_RDMA if a.rdma else 0
    info[c.FSLI4BX_READRANK] = info[c.FSLI4BX_WRITERANK] = a.rank & 0xFF
    info[c.FSLI4BX_READORDER] = info[c.FSLI4BX_WRITEORDER] = a.order & 0xFF
    return bytes(info)


def fs_locations_info_for(addresses: list[AdvertisedAddress]) -> fs_locations_info4:
    """A connection-trunking fs_locations_info naming ``addresses`` (empty list: no items)."""
    if not addresses:
        return fs_locations_info4(0, 0, [], [])
    servers = [fs_locations_server4(0, _fls_info(a), a.server) for a in addresses]
    return fs_locations_info4(0, 0, [], [fs_locations_item4(servers, [])])


def fs_locations_for(addresses: list[AdvertisedAddress]) -> fs_locations4:
    """The legacy fs_locations form: one location at "/" with every non-RDMA address."""
    names = [a.server for a in addresses if not a.rdma]
    return fs_locations4([], [fs_location4(names, [])] if names else [])


@dataclass
class AdvertiserStats:
    connections: int = 0
    calls_rewritten: int = 0
    replies_rewritten: int = 0
    minor_ids_rewritten: int = 0  # EXCHANGE_ID replies changed by the test-only rewriting mode


@dataclass
class _Pending:
    index: int  # position of the GETATTR in the reply's resarray
    wanted: frozenset[int]  # location attributes asked for
    supported: bool  # supported_attrs was asked for too


@dataclass
class _Conn:
    pending: dict[int, _Pending] = field(default_factory=dict)
    exchange_ids: set[int] = field(default_factory=set)  # XIDs of EXCHANGE_ID calls (rewriting mode)


class TrunkingAdvertiser(RecordProxy):
    """Forwards ``listen_host:listen_port`` to ``target_host:target_port``, advertising a multipath list."""

    def __init__(self, listen_host: str, listen_port: int, target_host: str, target_port: int,
                 addresses: list[AdvertisedAddress] | None = None, *, legacy_only: bool = False,
                 rewrite_minor_id: int | None = None) -> None:
        super().__init__(listen_host, listen_port, target_host, target_port)
        self.addresses: list[AdvertisedAddress] = list(addresses or [])
        self.legacy_only = legacy_only  # answer fs_locations only, as a server without fs_locations_info
        self.rewrite_minor_id = rewrite_minor_id  # TEST ONLY: see the module's documentation
        self.stats = AdvertiserStats()

    def connection_state(self) -> _Conn:
        self.stats.connections += 1
        return _Conn()

    def to_server(self, state: _Conn, record: bytes) -> bytes:
        return frame(self._to_server(state, record))

    def to_client(self, state: _Conn, record: bytes) -> bytes:
        return frame(self._to_client(state, record))

    # -- rewriting ----------------------------------------------------------------------------------
    def _to_server(self, conn: _Conn, record: bytes) -> bytes:
        if len(record) > INSPECT_LIMIT or len(record) < 8:
            return record
        try:
            u = Unpacker(record)
            xid = u.uint32()
            if u.uint32() != rpcdef.CALL:
                return record
            body = rpcdef.decode_call_body(u)
            if body.prog != c.NFS4_PROGRAM or body.proc != c.NFSPROC4_COMPOUND:
                return record
            head = record[: u.pos]
            args = decode_compound_args(u)
        except XdrError:
            return record
        ops = args.argarray
        if self.rewrite_minor_id is not None and any(isinstance(op, EXCHANGE_ID4args) for op in ops):
            conn.exchange_ids.add(xid)
        for i in range(len(ops) - 1):
            if not (isinstance(ops[i], PUTROOTFH4args) and isinstance(ops[i + 1], GETATTR4args)):
                continue
            asked = set(attrs_in(ops[i + 1].attr_request))
            wanted = frozenset(asked & LOCATION_ATTRS)
            if not wanted:
                continue
            ops[i + 1] = GETATTR4args(bitmap4_from(sorted(asked - LOCATION_ATTRS)))
            conn.pending[xid] = _Pending(i + 1, wanted, c.FATTR4_SUPPORTED_ATTRS in asked)
            self.stats.calls_rewritten += 1
            p = Packer()
            encode_compound_args(p, args)
            return head + p.getvalue()
        return record

    def _to_client(self, conn: _Conn, record: bytes) -> bytes:
        if conn.exchange_ids and len(record) >= 8:
            xid = _WORD.unpack_from(record)[0]
            if xid in conn.exchange_ids:
                conn.exchange_ids.discard(xid)
                return self._rewrite_minor_id(record)
        if not conn.pending or len(record) < 8:
            return record
        reply = _compound_reply(record)
        if reply is None or reply[0] not in conn.pending:
            return record
        xid, head, res = reply
        want = conn.pending.pop(xid)
        if res is None or len(res.resarray) <= want.index:
            return record
        r = res.resarray[want.index]
        if r.status != c.NFS4_OK or not isinstance(r.res, GETATTR4resok):
            return record
        try:
            attrs: dict[int, Any] = decode_fattr4(r.res.obj_attributes)
        except XdrError:
            return record
        if want.supported and c.FATTR4_SUPPORTED_ATTRS in attrs:
            extra = [c.FATTR4_FS_LOCATIONS] if self.legacy_only else sorted(LOCATION_ATTRS)
            attrs[c.FATTR4_SUPPORTED_ATTRS] = bitmap4_from(
                set(attrs_in(attrs[c.FATTR4_SUPPORTED_ATTRS])) | set(extra)
            )
        if c.FATTR4_FS_LOCATIONS in want.wanted:
            attrs[c.FATTR4_FS_LOCATIONS] = fs_locations_for(self.addresses)
        if c.FATTR4_FS_LOCATIONS_INFO in want.wanted and not self.legacy_only:
            attrs[c.FATTR4_FS_LOCATIONS_INFO] = fs_locations_info_for(self.addresses)
        r.res = GETATTR4resok(encode_fattr4(attrs))
        self.stats.replies_rewritten += 1
        return _encoded_reply(head, res)

    def _rewrite_minor_id(self, record: bytes) -> bytes:
        """TEST ONLY: the EXCHANGE_ID reply with so_minor_id replaced by ``rewrite_minor_id``."""
        reply = _compound_reply(record)
        if reply is None:
            return record
        _, head, res = reply
        if res is None:
            return record
        changed = False
        for r in res.resarray:
            if (
                r.status == c.NFS4_OK
                and isinstance(r.res, EXCHANGE_ID4resok)
                and self.rewrite_minor_id is not None
            ):
                so = r.res.eir_server_owner
                r.res.eir_server_owner = server_owner4(self.rewrite_minor_id, so.so_major_id)
                changed = True
        if not changed:
            return record
        self.stats.minor_ids_rewritten += 1
        return _encoded_reply(head, res)


def _compound_reply(record: bytes) -> tuple[int, bytes, COMPOUND4res | None] | None:
    """A reply record's XID, its RPC header (to send again as it is) and its COMPOUND's results
    (None when the call was not accepted, or they do not decode); None when it is no RPC reply."""
    u = Unpacker(record)
    try:
        xid = u.uint32()
        if u.uint32() != rpcdef.REPLY:
            return None
    except XdrError:
        return None
    try:
        h = rpcdef.unpack_reply_header(u)
        if h.accept != rpcdef.SUCCESS:
            return xid, b"", None
        head = record[: u.pos]
        return xid, head, decode_compound_res(u)
    except XdrError:
        return xid, b"", None


def _encoded_reply(head: bytes, res: COMPOUND4res) -> bytes:
    p = Packer()
    encode_compound_res(p, res)
    return head + p.getvalue()


# -- the advertiser as a process of its own ------------------------------------------------------------


def parse_advertised(text: str) -> AdvertisedAddress:
    """``HOST[:PORT][,rank=R][,order=O][,rdma]`` (fields after the address separated by commas)."""
    server, *fields = text.split(",")
    kw: dict[str, Any] = {}
    for f in fields:
        key, _, value = f.partition("=")
        if key == "rdma" and not value:
            kw["rdma"] = True
        elif key in ("rank", "order") and value.isdigit() and int(value) < 256:
            kw[key] = int(value)
        else:
            raise ValueError(f"bad field {f!r} in {text!r} (rank=N, order=N, rdma)")
    if not server:
        raise ValueError(f"no address in {text!r}")
    return AdvertisedAddress(server, **kw)


def main(argv: list[str] | None = None) -> int:
    """``python -m pynfsrdma._testbed.advertiser --listen H:P --target H:P --advertise ADDR ...``"""
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m pynfsrdma._testbed.advertiser",
        description="A proxy in front of an NFSv4.1 server that answers fs_locations_info/fs_locations on "
        "the pseudo root with a multipath list (NFS-Ganesha has no trunking discovery of its own).",
    )
    parser.add_argument("--listen", type=host_port, required=True, metavar="HOST:PORT")
    parser.add_argument("--target", type=host_port, required=True, metavar="HOST:PORT")
    parser.add_argument(
        "--advertise", action="append", default=[], metavar="HOST[:PORT][,rank=R][,order=O][,rdma]"
    )
    parser.add_argument("--legacy", action="store_true", help="answer fs_locations only")
    parser.add_argument(
        "--rewrite-minor-id",
        type=int,
        default=None,
        metavar="N",
        help="TEST ONLY: replace so_minor_id in EXCHANGE_ID replies by N (client ID trunking tests)",
    )
    args = parser.parse_args(argv)
    try:
        (lh, lp), (th, tp) = args.listen, args.target
        addresses = [parse_advertised(a) for a in args.advertise]
        adv = TrunkingAdvertiser(
            lh,
            lp,
            th,
            tp,
            addresses,
            legacy_only=args.legacy,
            rewrite_minor_id=args.rewrite_minor_id,
        )
    except ValueError as e:
        parser.error(str(e))

    try:
        trio.run(serve_until_signalled, adv, f"advertiser {adv.host}:{{port}} -> {th}:{tp} ready")
    except OSError as e:
        print(f"advertiser: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
