"""RPCSEC_GSS version 1 (RFC 2203): the credential, the context creation exchange, the data bodies of
the integrity and privacy services; and the Kerberos V5 pseudo-flavours NFS names (RFC 2623, nfs(5)).

The credential of every RPCSEC_GSS call is ``rpc_gss_cred_t`` (version 1: ``rpc_gss_cred_vers_1_t``)
inside an ``opaque_auth`` of flavour RPCSEC_GSS. The verifier of a DATA call is a GSS MIC of the call
header from the XID to the end of the credential; the verifier of its reply a MIC of the sequence
number (RFC 2203 sections 5.3.1 and 5.3.3.2).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, Final

from .._xdr import Packer, Unpacker, VarOpaque, XdrError, XdrStruct, uint32, xdr_struct
from .rpc import MAX_AUTH_BYTES, auth_flavor

RPCSEC_GSS: Final = auth_flavor.RPCSEC_GSS
RPCSEC_GSS_VERS_1: Final = 1
# sequence numbers run below MAXSEQ; a context that reaches it is used no more (RFC 2203 section 5.3.3.1)
MAXSEQ: Final = 0x80000000
NULLPROC: Final = 0  # context creation and destruction go as calls of the program's NULL procedure


class rpc_gss_proc_t(enum.IntEnum):
    RPCSEC_GSS_DATA = 0
    RPCSEC_GSS_INIT = 1
    RPCSEC_GSS_CONTINUE_INIT = 2
    RPCSEC_GSS_DESTROY = 3


class rpc_gss_service_t(enum.IntEnum):
    rpc_gss_svc_none = 1
    rpc_gss_svc_integrity = 2
    rpc_gss_svc_privacy = 3


RPCSEC_GSS_DATA: Final = rpc_gss_proc_t.RPCSEC_GSS_DATA
RPCSEC_GSS_INIT: Final = rpc_gss_proc_t.RPCSEC_GSS_INIT
RPCSEC_GSS_CONTINUE_INIT: Final = rpc_gss_proc_t.RPCSEC_GSS_CONTINUE_INIT
RPCSEC_GSS_DESTROY: Final = rpc_gss_proc_t.RPCSEC_GSS_DESTROY
SVC_NONE: Final = rpc_gss_service_t.rpc_gss_svc_none
SVC_INTEGRITY: Final = rpc_gss_service_t.rpc_gss_svc_integrity
SVC_PRIVACY: Final = rpc_gss_service_t.rpc_gss_svc_privacy

# GSS-API major status codes an RPCSEC_GSS_INIT reply carries (RFC 2743 section 1.2.1.1)
GSS_S_COMPLETE: Final = 0
GSS_S_CONTINUE_NEEDED: Final = 1

# The context handle and the rest of the credential fit in an opaque_auth's 400 bytes.
CRED_FIXED_BYTES: Final = 4 * 4  # version, gss_proc, seq_num, service
MAX_HANDLE_BYTES: Final = MAX_AUTH_BYTES - CRED_FIXED_BYTES - 4
# a context token larger than this from a server is not one (Kerberos AP-REP tokens are a few hundred bytes)
MAX_INIT_TOKEN_BYTES: Final = 64 * 1024

# The Kerberos V5 GSS-API mechanism, 1.2.840.113554.1.2.2 (RFC 1964): the OID's DER contents, as NFSv4's
# sec_oid4 carries them, and with the DER tag and length, as some servers send it.
KRB5_OID: Final = bytes.fromhex("2a864886f712010202")
KRB5_OID_DER: Final = bytes.fromhex("0609") + KRB5_OID

# Pseudo-flavours of Kerberos V5 under RPCSEC_GSS (RFC 2623 section 2.2), by service.
RPC_AUTH_GSS_KRB5: Final = 390003
RPC_AUTH_GSS_KRB5I: Final = 390004
RPC_AUTH_GSS_KRB5P: Final = 390005


@dataclass(frozen=True, slots=True)
class Flavor:
    """A security flavour as nfs(5)'s ``sec=`` names it: AUTH_SYS, or Kerberos V5 with one service."""

    name: str
    flavor: int  # auth_flavor (AUTH_SYS or RPCSEC_GSS)
    service: int | None = None  # rpc_gss_service_t under RPCSEC_GSS
    pseudoflavor: int | None = None

    @property
    def gss(self) -> bool:
        return self.flavor == RPCSEC_GSS


SYS: Final = Flavor("sys", auth_flavor.AUTH_SYS)
KRB5: Final = Flavor("krb5", RPCSEC_GSS, SVC_NONE, RPC_AUTH_GSS_KRB5)
KRB5I: Final = Flavor("krb5i", RPCSEC_GSS, SVC_INTEGRITY, RPC_AUTH_GSS_KRB5I)
KRB5P: Final = Flavor("krb5p", RPCSEC_GSS, SVC_PRIVACY, RPC_AUTH_GSS_KRB5P)
FLAVORS: Final = {f.name: f for f in (SYS, KRB5, KRB5I, KRB5P)}


def flavor_of_secinfo(flavor: int, oid: bytes | None = None, service: int | None = None) -> Flavor | None:
    """The flavour a SECINFO entry names (None for one this client does not speak)."""
    if flavor == auth_flavor.AUTH_SYS:
        return SYS
    if flavor == RPCSEC_GSS and oid in (KRB5_OID, KRB5_OID_DER):
        return next((f for f in (KRB5, KRB5I, KRB5P) if f.service == service), None)
    return None


@xdr_struct
class rpc_gss_cred_vers_1_t(XdrStruct):
    gss_proc: Annotated[int, uint32]
    seq_num: Annotated[int, uint32]
    service: Annotated[int, uint32]
    handle: Annotated[bytes, VarOpaque(MAX_HANDLE_BYTES)]


@xdr_struct
class rpc_gss_init_res(XdrStruct):
    handle: Annotated[bytes, VarOpaque(MAX_HANDLE_BYTES)]
    gss_major: Annotated[int, uint32]
    gss_minor: Annotated[int, uint32]
    seq_window: Annotated[int, uint32]
    gss_token: Annotated[bytes, VarOpaque(MAX_INIT_TOKEN_BYTES)]


def encode_gss_cred(proc: int, seq_num: int, service: int, handle: bytes) -> bytes:
    """A whole opaque_auth of flavour RPCSEC_GSS holding an ``rpc_gss_cred_t`` of version 1."""
    body = Packer()
    body.uint32(RPCSEC_GSS_VERS_1)
    rpc_gss_cred_vers_1_t.XDR.pack(body, rpc_gss_cred_vers_1_t(proc, seq_num, service, handle))
    p = Packer()
    p.uint32(RPCSEC_GSS)
    p.opaque(body.getvalue(), MAX_AUTH_BYTES)
    return p.getvalue()


def decode_gss_cred(body: bytes | memoryview) -> rpc_gss_cred_vers_1_t:
    """The ``rpc_gss_cred_t`` of an RPCSEC_GSS credential's body (a test server's side)."""
    u = Unpacker(body)
    version = u.uint32()
    if version != RPCSEC_GSS_VERS_1:
        raise XdrError(f"RPCSEC_GSS version {version} (only version 1 is known)")
    cred = rpc_gss_cred_vers_1_t.XDR.unpack(u)
    u.done()
    return cred


def seq_num_bytes(seq_num: int) -> bytes:
    """A sequence number (or window) as XDR: what a reply's verifier is a MIC of."""
    p = Packer()
    p.uint32(seq_num)
    return bytes(p.buf)
