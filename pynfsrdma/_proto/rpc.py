"""ONC RPC version 2 (RFC 5531): message header definitions, AUTH_NONE and AUTH_SYS, and the
AUTH_TLS probe of RPC-with-TLS (RFC 9289).

The call header is on every request's path, so it has a hand-written fast encoder beside the
declarative types used for decoding calls (backchannel, test responders) and replies.
"""

from __future__ import annotations

import enum
import struct
from typing import Annotated, Final

from .._xdr import Array, Packer, String, Unpacker, VarOpaque, XdrError, XdrStruct, uint32, xdr_struct

RPC_VERSION: Final = 2

# Record marking (RFC 5531 section 11): the high bit of the 4-byte mark ends a record.
RM_LAST_FRAGMENT: Final = 0x80000000
RM_LENGTH_MASK: Final = 0x7FFFFFFF

MAX_AUTH_BYTES: Final = 400
AUTH_SYS_MAX_MACHINENAME: Final = 255
AUTH_SYS_MAX_GIDS: Final = 16


class msg_type(enum.IntEnum):
    CALL = 0
    REPLY = 1


class reply_stat(enum.IntEnum):
    MSG_ACCEPTED = 0
    MSG_DENIED = 1


class accept_stat(enum.IntEnum):
    SUCCESS = 0
    PROG_UNAVAIL = 1
    PROG_MISMATCH = 2
    PROC_UNAVAIL = 3
    GARBAGE_ARGS = 4
    SYSTEM_ERR = 5


class reject_stat(enum.IntEnum):
    RPC_MISMATCH = 0
    AUTH_ERROR = 1


class auth_stat(enum.IntEnum):
    AUTH_OK = 0
    AUTH_BADCRED = 1
    AUTH_REJECTEDCRED = 2
    AUTH_BADVERF = 3
    AUTH_REJECTEDVERF = 4
    AUTH_TOOWEAK = 5
    AUTH_INVALIDRESP = 6
    AUTH_FAILED = 7
    AUTH_KERB_GENERIC = 8
    AUTH_TIMEEXPIRE = 9
    AUTH_TKT_FILE = 10
    AUTH_DECODE = 11
    AUTH_NET_ADDR = 12
    RPCSEC_GSS_CREDPROBLEM = 13
    RPCSEC_GSS_CTXPROBLEM = 14


class auth_flavor(enum.IntEnum):
    AUTH_NONE = 0
    AUTH_SYS = 1
    AUTH_SHORT = 2
    AUTH_DH = 3
    RPCSEC_GSS = 6
    AUTH_TLS = 7  # RFC 9289: a NULL call that asks the server to start TLS on this connection


CALL: Final = msg_type.CALL
REPLY: Final = msg_type.REPLY
MSG_ACCEPTED: Final = reply_stat.MSG_ACCEPTED
MSG_DENIED: Final = reply_stat.MSG_DENIED
SUCCESS: Final = accept_stat.SUCCESS
PROG_MISMATCH: Final = accept_stat.PROG_MISMATCH
RPC_MISMATCH: Final = reject_stat.RPC_MISMATCH
AUTH_ERROR: Final = reject_stat.AUTH_ERROR
AUTH_NONE: Final = auth_flavor.AUTH_NONE
AUTH_SYS: Final = auth_flavor.AUTH_SYS
AUTH_TLS: Final = auth_flavor.AUTH_TLS


@xdr_struct
class opaque_auth(XdrStruct):
    flavor: Annotated[int, uint32]
    body: Annotated[bytes, VarOpaque(MAX_AUTH_BYTES)]


NULL_AUTH: Final = opaque_auth(AUTH_NONE, b"")


@xdr_struct
class authsys_parms(XdrStruct):
    stamp: Annotated[int, uint32]
    machinename: Annotated[str, String(AUTH_SYS_MAX_MACHINENAME)]
    uid: Annotated[int, uint32]
    gid: Annotated[int, uint32]
    gids: Annotated[list[int], Array(uint32, AUTH_SYS_MAX_GIDS)]


@xdr_struct
class call_body(XdrStruct):
    """The part of a CALL after xid and mtype."""

    rpcvers: Annotated[int, uint32]
    prog: Annotated[int, uint32]
    vers: Annotated[int, uint32]
    proc: Annotated[int, uint32]
    cred: opaque_auth
    verf: opaque_auth


_CALL_HEAD: Final = struct.Struct(">IIIIII")


def pack_call_header(p: Packer, xid: int, prog: int, vers: int, proc: int, cred: bytes) -> None:
    """Encode xid, CALL, rpcvers, prog, vers, proc, the pre-encoded credential and a null verifier."""
    p.buf += _CALL_HEAD.pack(xid, CALL, RPC_VERSION, prog, vers, proc)
    p.buf += cred
    p.buf += _NULL_VERF


def call_header_to_cred(xid: int, prog: int, vers: int, proc: int, cred: bytes) -> bytes:
    """A call header from the XID to the end of the (pre-encoded) credential: what an RPCSEC_GSS
    verifier signs (RFC 2203 section 5.3.1)."""
    return _CALL_HEAD.pack(xid, CALL, RPC_VERSION, prog, vers, proc) + cred


_NULL_VERF: Final = opaque_auth.XDR.encode(NULL_AUTH)


def pack_accepted_reply_header(p: Packer, xid: int, stat: int = SUCCESS) -> None:
    """Encode a reply header (we answer the server's callbacks with it)."""
    p.uint32(xid)
    p.uint32(REPLY)
    p.uint32(MSG_ACCEPTED)
    opaque_auth.XDR.pack(p, NULL_AUTH)
    p.uint32(stat)


class ReplyHeader:
    """A decoded reply header: either accepted (with its accept_stat) or denied (with reasons)."""

    __slots__ = ("accept", "auth", "denied", "high", "low", "verf")

    def __init__(self) -> None:
        self.denied: int | None = None  # reject_stat when MSG_DENIED
        self.accept: int | None = None  # accept_stat when MSG_ACCEPTED
        self.low = self.high = 0  # version ranges for PROG_MISMATCH / RPC_MISMATCH
        self.auth: int | None = None  # auth_stat for AUTH_ERROR
        self.verf: opaque_auth | None = None


def _accepted_null_success() -> ReplyHeader:
    h = ReplyHeader()
    h.accept = SUCCESS
    h.verf = NULL_AUTH
    return h


# the header of nearly every reply (accepted, no verifier, SUCCESS): its bytes, and one decoded
# header shared by all of them (read only, as every header is once decoded)
_ACCEPTED_NULL_SUCCESS: Final = struct.pack(">IIII", MSG_ACCEPTED, AUTH_NONE, 0, SUCCESS)
ACCEPTED_NULL_SUCCESS: Final = _accepted_null_success()


def unpack_reply_header(u: Unpacker) -> ReplyHeader:
    """Decode what follows xid and mtype (REPLY) of a reply message (read only: the common header
    is one object shared by the replies that have it)."""
    pos = u.pos
    if u.end - pos >= 16 and u.view[pos:pos + 16] == _ACCEPTED_NULL_SUCCESS:
        u.pos = pos + 16
        return ACCEPTED_NULL_SUCCESS
    h = ReplyHeader()
    stat = u.uint32()
    if stat == MSG_ACCEPTED:
        h.verf = opaque_auth.XDR.unpack(u)
        a = u.uint32()
        h.accept = a
        if a == PROG_MISMATCH:
            h.low = u.uint32()
            h.high = u.uint32()
        elif a not in _ACCEPT_VALUES:
            raise XdrError(f"bad accept_stat {a}")
    elif stat == MSG_DENIED:
        r = u.uint32()
        h.denied = r
        if r == RPC_MISMATCH:
            h.low = u.uint32()
            h.high = u.uint32()
        elif r == AUTH_ERROR:
            h.auth = u.uint32()
        else:
            raise XdrError(f"bad reject_stat {r}")
    else:
        raise XdrError(f"bad reply_stat {stat}")
    return h


_ACCEPT_VALUES: Final = frozenset(int(a) for a in accept_stat)


def read_to_results(u: Unpacker) -> bool:
    """Read a message's XID and header: True when it is a reply accepted with SUCCESS (``u`` then
    stands at the procedure's results), False when it is a call or a reply without results.
    XdrError when the header is malformed or ends early."""
    u.uint32()  # xid
    if u.uint32() != REPLY:
        return False
    return unpack_reply_header(u).accept == SUCCESS


def describe(h: ReplyHeader) -> str:
    """A person-readable reason for a reply that is not an accepted SUCCESS."""
    if h.denied == RPC_MISMATCH:
        return f"RPC version mismatch (server supports {h.low}..{h.high})"
    if h.denied == AUTH_ERROR:
        name = auth_stat(h.auth).name if h.auth in _AUTH_VALUES else str(h.auth)
        return f"authentication error ({name})"
    if h.accept == PROG_MISMATCH:
        return f"program version mismatch (server supports {h.low}..{h.high})"
    if h.accept is not None:
        return accept_stat(h.accept).name
    return "unknown reply"


_AUTH_VALUES: Final = frozenset(int(a) for a in auth_stat)


def encode_auth_sys(parms: authsys_parms) -> bytes:
    """A whole opaque_auth carrying AUTH_SYS parameters, ready to splice into call headers."""
    body = authsys_parms.XDR.encode(parms)
    return opaque_auth.XDR.encode(opaque_auth(AUTH_SYS, body))


def decode_auth_sys(cred: opaque_auth) -> authsys_parms:
    if cred.flavor != AUTH_SYS:
        raise XdrError(f"credential flavor {cred.flavor} is not AUTH_SYS")
    return authsys_parms.XDR.decode(cred.body)


def decode_call_body(u: Unpacker) -> call_body:
    """Decode a CALL's body (after xid and mtype); rpcvers is checked by the caller."""
    return call_body.XDR.unpack(u)



# -- RPC-with-TLS (RFC 9289) -------------------------------------------------------------------------------
NULLPROC: Final = 0
STARTTLS: Final = b"STARTTLS"  # the body of the AUTH_NONE verifier a server that does TLS answers with
TLS_ALPN: Final = "sunrpc"  # the ALPN identifier of the TLS session (RFC 9289 section 4.1)
_AUTH_TLS_CRED: Final = opaque_auth.XDR.encode(opaque_auth(AUTH_TLS, b""))


def pack_tls_probe(xid: int, prog: int, vers: int) -> bytes:
    """The AUTH_TLS probe: a NULL call of ``prog``/``vers`` with an AUTH_TLS credential (empty body)
    and an AUTH_NONE verifier (RFC 9289 section 4.1)."""
    p = Packer()
    pack_call_header(p, xid, prog, vers, NULLPROC, _AUTH_TLS_CRED)
    return bytes(p.buf)


def tls_probe_refusal(xid: int, reply: Unpacker) -> str | None:
    """What the reply to the AUTH_TLS probe ``xid`` says: None when the server starts TLS (an
    accepted SUCCESS whose verifier is AUTH_NONE with the body "STARTTLS"), else why not, in words.
    XdrError when the reply is not an RPC reply."""
    got = reply.uint32()
    if got != xid or reply.uint32() != REPLY:
        return "answered the AUTH_TLS probe with something that is not its reply"
    h = unpack_reply_header(reply)
    if h.accept != SUCCESS:
        return describe(h)
    if h.verf is None or h.verf.flavor != AUTH_NONE or h.verf.body != STARTTLS:
        return "its reply has no STARTTLS verifier"
    return None


def pack_starttls_reply(p: Packer, xid: int) -> None:
    """A server's yes to the AUTH_TLS probe (the testbed's TLS front answers with it)."""
    p.uint32(xid)
    p.uint32(REPLY)
    p.uint32(MSG_ACCEPTED)
    opaque_auth.XDR.pack(p, opaque_auth(AUTH_NONE, STARTTLS))
    p.uint32(SUCCESS)
