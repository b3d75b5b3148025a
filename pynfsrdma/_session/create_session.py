"""Establishing the client ID and its sessions (RFC 8881 sections 2.4, 2.10, 18.35, 18.36): EXCHANGE_ID,
CREATE_SESSION with the channel attributes we offer, BIND_CONN_TO_SESSION of each (re)connected path,
and the sessions of client ID trunking (2.10.5): one per server instance."""

from __future__ import annotations

import errno
import logging
from collections.abc import Sequence
from typing import Any

from .._errors import NFS4Error, ProtocolError
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import (
    COMPOUND4args,
    COMPOUND4res,
    check_compound_res,
    decode_compound_res,
    encode_compound_args,
)
from .._proto.nfs4.types import (
    BIND_CONN_TO_SESSION4args,
    CREATE_SESSION4args,
    EXCHANGE_ID4args,
    EXCHANGE_ID4resok,
    channel_attrs4,
    nfs_impl_id4,
    nfstime4,
)
from .._proto.rpc import auth_flavor
from .._rpc.auth import Credential
from .._rpc.errors import RpcReplyError
from .._transport.base import NO_HINTS, ProtocolViolation, TransportError
from .._xdr import XdrError
from .client_state import ClientState, ServerIdentity
from .errors import NotNFSv41Server
from .path_set import Path
from .session import CACHED_REPLY, COMPOUND_ROOM, Session, main_op

log = logging.getLogger(__name__)

# tries at connecting and setting up the session when a reply to it broke the protocol
START_ATTEMPTS = 3
# what we offer the server for its callbacks: one slot (RFC 8881 section 18.36.3: it may not change it)
BACK_CHANNEL_SLOTS = 1
IMPL_DOMAIN = "pynfsrdma.invalid"


class Establishment:
    """What EXCHANGE_ID, CREATE_SESSION and BIND_CONN_TO_SESSION make of the client ID's ``state``."""

    def __init__(self, state: ClientState) -> None:
        self.state = state

    async def raw_compound(self, path: Path, ops: Sequence[Any], cred: Credential | None = None,
                            timeout: float | None = None) -> COMPOUND4res:
        """A COMPOUND with no SEQUENCE (EXCHANGE_ID, CREATE_SESSION, BIND_CONN_TO_SESSION...)."""
        rpc = path.rpc
        if rpc is None:
            raise TransportError("path is not connected", path.address)
        xid, p = rpc.start_call(c.NFSPROC4_COMPOUND, cred or self.state.machine_cred)
        encode_compound_args(p, COMPOUND4args("", self.state.options.minorversion, list(ops)))
        try:
            u = await rpc.call_packed(xid, p, NO_HINTS, timeout or self.state.policy.timeo)
        except RpcReplyError as e:
            if e.errno == errno.EPROTONOSUPPORT:
                raise NotNFSv41Server(f"{path.address} does not serve NFSv4.1: {e}") from e
            raise e.located(main_op(ops)) from None
        except ProtocolViolation as e:
            raise ProtocolError(str(e).removeprefix(f"{path.address}: "), path.address, main_op(ops)) from e
        self.state.policy.answered()
        try:
            res = decode_compound_res(u)
            u.done()
            if res.status == c.NFS4ERR_MINOR_VERS_MISMATCH:
                raise NotNFSv41Server(
                    f"{path.address} does not support NFSv4.{self.state.options.minorversion} (NFS4ERR_MINOR_VERS_MISMATCH)"
                )
            check_compound_res(ops, res)
        except XdrError as e:
            rpc.misbehaved("violation", f"{e}; the connection is closed")
            await rpc.aclose()  # (its framing can no longer be trusted: the path connects again)
            raise ProtocolError(str(e), path.address, getattr(e, "op", None) or main_op(ops)) from e
        return res

    async def exchange_id(self, path: Path) -> EXCHANGE_ID4resok:
        args = EXCHANGE_ID4args(
            eia_clientowner=self.state.owner,
            eia_flags=c.EXCHGID4_FLAG_SUPP_MOVED_REFER | c.EXCHGID4_FLAG_SUPP_MOVED_MIGR
            | (c.EXCHGID4_FLAG_USE_PNFS_MDS if self.state.options.pnfs else 0),
            eia_state_protect=(c.SP4_NONE, None),
            eia_client_impl_id=[nfs_impl_id4(IMPL_DOMAIN, "pynfsrdma", nfstime4(0, 0))],
        )
        res = await self.raw_compound(path, [args])
        r = res.resarray[0] if res.resarray else None
        if r is None or r.opnum != c.OP_EXCHANGE_ID:
            raise NotNFSv41Server(f"{path.address}: EXCHANGE_ID got no answer ({status_name(res.status)})")
        if r.status != c.NFS4_OK:
            raise NFS4Error(r.status, c.OP_EXCHANGE_ID)
        ok: EXCHANGE_ID4resok = r.res
        return ok

    async def establish(self) -> None:
        """EXCHANGE_ID and CREATE_SESSION on a live path (a new client ID: the trunked sessions,
        which went with the old one, are made again)."""
        st = self.state
        path = await st.live_path()
        ok = await self.exchange_id(path)
        so = ok.eir_server_owner
        st.identity = ServerIdentity(
            ok.eir_clientid, bytes(so.so_major_id), so.so_minor_id, bytes(ok.eir_server_scope),
            ok.eir_server_impl_id[0].nii_name if ok.eir_server_impl_id else "", ok.eir_flags,
        )
        st.sequenceid = ok.eir_sequenceid
        await self.create_session(path)
        if st.trunked_sessions:
            await self._renew_trunked_sessions()

    def _channels(self) -> tuple[channel_attrs4, channel_attrs4]:
        """The fore and back channel attributes we ask CREATE_SESSION for."""
        o = self.state.options
        room = COMPOUND_ROOM
        fore = channel_attrs4(0, o.wsize + room, o.rsize + room, CACHED_REPLY, o.max_operations, o.max_requests, [])
        back = channel_attrs4(0, 16 * 1024, 16 * 1024, 0, 8, BACK_CHANNEL_SLOTS, [])
        return fore, back

    def _new_session(self, ok: Any, path: Path, group: int, stats: Any = None) -> Session:
        """A Session for CREATE_SESSION's result: of what the server granted, no more than we asked
        for (slots, operations, sizes: a server may lower them, RFC 8881 section 18.36.3), and its
        connections refuse replies larger than it allows."""
        fore, _ = self._channels()
        fa = ok.csr_fore_chan_attrs
        session = Session(
            bytes(ok.csr_sessionid), max(1, min(fa.ca_maxrequests, fore.ca_maxrequests)), self.state.paths, self.state.policy,
            min(fa.ca_maxrequestsize, fore.ca_maxrequestsize), min(fa.ca_maxresponsesize, fore.ca_maxresponsesize),
            stats=stats, group=group, minorversion=self.state.options.minorversion,
            max_operations=max(2, min(fa.ca_maxoperations, fore.ca_maxoperations)),
            max_response_size_cached=min(fa.ca_maxresponsesize_cached, fore.ca_maxresponsesize_cached),
        )
        self.state.paths.limit_records(max(session.max_response_size, COMPOUND_ROOM))
        if fa.ca_maxrequests > fore.ca_maxrequests:
            log.info("%s grants %d slots; %d are used, as asked", path.address, fa.ca_maxrequests,
                     fore.ca_maxrequests)
        return session

    async def create_session(self, path: Path) -> None:
        assert self.state.identity is not None
        o = self.state.options
        fore, back = self._channels()
        flags = c.CREATE_SESSION4_FLAG_CONN_BACK_CHAN if o.back_channel else 0
        args = CREATE_SESSION4args(
            csa_clientid=self.state.identity.clientid,
            csa_sequence=self.state.sequenceid,
            csa_flags=flags,
            csa_fore_chan_attrs=fore,
            csa_back_chan_attrs=back,
            csa_cb_program=c.CB_PROGRAM,
            csa_sec_parms=[(auth_flavor.AUTH_NONE, None)],
        )
        res = await self.raw_compound(path, [args])
        r = res.resarray[0] if res.resarray else None
        if r is None or r.status != c.NFS4_OK:
            raise NFS4Error(r.status if r else res.status, c.OP_CREATE_SESSION)
        ok = r.res
        self.state.sequenceid = (self.state.sequenceid + 1) % c.SEQUENCEID_MODULUS
        fa = ok.csr_fore_chan_attrs
        old = self.state.session
        self.state.session = self._new_session(ok, path, 0)
        back_slots = min(ok.csr_back_chan_attrs.ca_maxrequests, back.ca_maxrequests)
        self.state.backchannel.reset(back_slots if ok.csr_flags & c.CREATE_SESSION4_FLAG_CONN_BACK_CHAN else 0)
        if old is not None:
            old.kill(c.NFS4ERR_BADSESSION)
        path.bound_session = self.state.session.sessionid
        log.info("session %s created on %s (%d slots)", self.state.session.sessionid.hex(), path.address, fa.ca_maxrequests)

    # -- client ID trunking ---------------------------------------------------------------------------
    async def open_trunked_session(self, path: Path, group: int, sequenceid: int | None = None) -> Session:
        """CREATE_SESSION on our client ID over ``path`` (an address of another instance of the
        server: client ID trunking) for the paths of ``group``; replaces that group's session."""
        assert self.state.identity is not None and group != 0
        fore, back = self._channels()
        st: int = c.NFS4ERR_SEQ_MISORDERED
        ok = None
        # the client record's sequence: what EXCHANGE_ID said there, else what we count
        for seq in dict.fromkeys(x for x in (sequenceid, self.state.sequenceid) if x is not None):
            args = CREATE_SESSION4args(self.state.identity.clientid, seq, 0, fore, back, c.CB_PROGRAM,
                                       [(auth_flavor.AUTH_NONE, None)])
            res = await self.raw_compound(path, [args])
            r = res.resarray[0] if res.resarray else None
            st = r.status if r is not None else res.status
            if st == c.NFS4_OK and r is not None:
                ok = r.res
                self.state.sequenceid = (seq + 1) % c.SEQUENCEID_MODULUS
                break
            if st != c.NFS4ERR_SEQ_MISORDERED:
                break
        if ok is None:
            raise NFS4Error(st, c.OP_CREATE_SESSION)
        session = self._new_session(ok, path, group, self.state.session.stats if self.state.session else None)
        old = self.state.trunked_sessions.get(group)
        self.state.trunked_sessions[group] = session
        if old is not None:
            old.kill(c.NFS4ERR_BADSESSION)
        path.group = group
        path.bound_session = session.sessionid
        log.info("trunked session %s (group %d) created on %s", session.sessionid.hex(), group, path.address)
        return session

    async def _renew_trunked_sessions(self) -> None:
        """After the first session was replaced (a new client ID, or a lost session): replace the
        trunked sessions on a live path of their group; a group with none gets one when a path
        of it is bound again (see the trunking verifier)."""
        for group, old in list(self.state.trunked_sessions.items()):
            old.kill(c.NFS4ERR_BADSESSION)
            path = self.state.paths.choose(group=group)
            try:
                if path is None:
                    raise TransportError("no live path", f"group {group}")
                await self.open_trunked_session(path, group)
            except (OSError, TransportError, NFS4Error) as e:
                log.info("trunked session of group %d not replaced now: %s", group, e)
                del self.state.trunked_sessions[group]

    async def bind_connection(self, path: Path) -> None:
        """A (re)connected path: bind it to the current session, fore and back channel."""
        s = self.state.session_of(path.group)
        if s is None or path.bound_session == s.sessionid:
            return
        res = await self.raw_compound(
            path, [BIND_CONN_TO_SESSION4args(s.sessionid, c.CDFC4_FORE_OR_BOTH, False)]
        )
        r = res.resarray[0] if res.resarray else None
        st = r.status if r is not None else res.status
        if st == c.NFS4_OK:
            path.bound_session = s.sessionid
            return
        if st in (c.NFS4ERR_BADSESSION, c.NFS4ERR_DEADSESSION, c.NFS4ERR_STALE_CLIENTID):
            s.kill(st)  # the next request recovers
            return
        raise NFS4Error(st, c.OP_BIND_CONN_TO_SESSION)

    async def bind_backchannel(self) -> None:
        """The server has no backchannel for us: bind one of our live connections to it."""
        s = self.state.session
        path = self.state.paths.choose(group=0)
        if s is None or path is None:
            return
        res = await self.raw_compound(
            path, [BIND_CONN_TO_SESSION4args(s.sessionid, c.CDFC4_BACK_OR_BOTH, False)]
        )
        st = res.resarray[0].status if res.resarray else res.status
        if st != c.NFS4_OK:
            log.warning("%s: could not bind the backchannel: %s", path.address, status_name(st))


def status_name(status: int) -> str:
    try:
        return c.nfsstat4(status).name
    except ValueError:
        return str(status)
