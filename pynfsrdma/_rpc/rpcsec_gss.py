"""RPCSEC_GSS version 1 (RFC 2203), sans I/O: one security context and what it does to calls and replies.

A :class:`GssContext` is given a :class:`GssMechanism` (the GSS-API mechanism: Kerberos V5 through
``gssapi`` in :mod:`.krb5`, a fake one in tests) and a service, and then:

- creates the context: :meth:`GssContext.init_call` is the next RPCSEC_GSS_INIT or CONTINUE_INIT call's
  credential and arguments, :meth:`GssContext.init_reply` takes the server's answer (and its verifier,
  a MIC of the sequence window, once the context is complete);
- seals DATA calls (:meth:`GssContext.seal_call`): a sequence number inside the window, the credential,
  the verifier (a MIC of the header from the XID to the end of the credential), and the arguments as
  they are (krb5), with a MIC (krb5i: ``rpc_gss_integ_data``) or wrapped (krb5p: ``rpc_gss_priv_data``),
  each beginning with the sequence number;
- opens replies (:meth:`GssContext.open_reply`): the verifier must be a MIC of the call's sequence
  number, and the results' MIC must verify (or their wrapping unwrap, encrypted) around that same
  sequence number. Anything else raises :class:`GssIntegrityError`: the reply is not to be believed.

The calling shell (:mod:`.gss_auth`) does the I/O: it sends the calls, waits when the window is full
(:attr:`GssContext.window_open`), and makes a new context when the server says it lost this one
(RPCSEC_GSS_CREDPROBLEM, RPCSEC_GSS_CTXPROBLEM) or the sequence numbers run out (:attr:`GssContext.usable`).
"""

from __future__ import annotations

import enum
from typing import Protocol

from .._proto import rpc as rpcdef
from .._proto import rpcsec_gss as gss
from .._xdr import Packer, Unpacker, XdrError

FIRST_SEQ = 1


class GssError(Exception):
    """The GSS-API mechanism failed (no credentials, a context the server refused, an expired ticket)."""


class GssCredentialsExpired(GssError):
    """The credentials behind a context ran out: a new context needs new credentials (kinit)."""


class GssIntegrityError(GssError):
    """A reply's verifier, MIC or wrapping does not verify: its bytes are not what the server sent."""


class GssMechanism(Protocol):
    """What RPCSEC_GSS needs of a GSS-API mechanism, as the initiator. Each method raises
    :class:`GssError` (or :class:`GssCredentialsExpired`) on failure."""

    @property
    def complete(self) -> bool:
        """The context is established (no more tokens to exchange)."""
        ...

    @property
    def expired(self) -> bool:
        """The established context's lifetime (its ticket's) is over: a new one is needed. (Kerberos
        itself goes on signing with it, and servers accept it for minutes of clock skew.)"""
        ...

    def step(self, token: bytes | None) -> bytes | None:
        """Take the acceptor's token (None at first); return the next token to send (None: none)."""
        ...

    def get_mic(self, message: bytes) -> bytes: ...

    def verify_mic(self, message: bytes, mic: bytes) -> None:
        """Raise :class:`GssIntegrityError` unless ``mic`` is a MIC of ``message``."""
        ...

    def wrap(self, message: bytes) -> bytes:
        """``message`` sealed with integrity and confidentiality."""
        ...

    def unwrap(self, token: bytes) -> bytes:
        """The message in ``token``; :class:`GssIntegrityError` unless it verifies and was encrypted."""
        ...


class State(enum.Enum):
    CREATING = "creating"
    ESTABLISHED = "established"
    STALE = "stale"  # the server lost it, it expired or its sequence numbers ran out: make a new one


class GssContext:
    """One RPCSEC_GSS context: creation, sequence numbers and window, sealing and opening."""

    def __init__(self, mech: GssMechanism, service: int) -> None:
        if service not in (gss.SVC_NONE, gss.SVC_INTEGRITY, gss.SVC_PRIVACY):
            raise ValueError(f"unknown RPCSEC_GSS service {service}")
        self.mech = mech
        self.service = service
        self.state = State.CREATING
        self.handle = b""
        self.seq_window = 0
        self._token: bytes | None = None  # the next token to send while creating
        self._started = False
        self._next_seq = FIRST_SEQ
        self._in_flight: dict[int, None] = {}  # sequence numbers of calls not yet answered, oldest first

    # -- creation -----------------------------------------------------------------------------------
    def init_call(self) -> tuple[bytes, bytes]:
        """The next context creation call: (the whole credential, as an opaque_auth; the arguments,
        an XDR opaque holding the mechanism's token). Its verifier is AUTH_NONE."""
        if self.state is not State.CREATING:
            raise GssError(f"the context is {self.state.value}, not being created")
        if not self._started:
            self._token = self.mech.step(None)
            self._started = True
            proc = gss.RPCSEC_GSS_INIT
        else:
            proc = gss.RPCSEC_GSS_CONTINUE_INIT
        if self._token is None:
            raise GssError("the mechanism has no token to send")
        cred = gss.encode_gss_cred(proc, 0, gss.SVC_NONE, self.handle)
        args = Packer()
        args.opaque(self._token)
        return cred, args.getvalue()

    def init_reply(self, verf: rpcdef.opaque_auth | None, results: Unpacker) -> bool:
        """Take a creation call's results (``rpc_gss_init_res``) and its reply's verifier; True once
        the context is established. Raises :class:`GssError` when the server refused it, and
        :class:`GssIntegrityError` when the final verifier is not a MIC of the window."""
        res = gss.rpc_gss_init_res.XDR.unpack(results)
        results.done()
        if res.gss_major not in (gss.GSS_S_COMPLETE, gss.GSS_S_CONTINUE_NEEDED):
            raise GssError(f"the server refused the security context (GSS major {res.gss_major:#x}, "
                           f"minor {res.gss_minor:#x})")
        if not res.handle:
            raise GssError("the server sent no context handle")
        self.handle = bytes(res.handle)
        token = bytes(res.gss_token)
        if res.gss_major == gss.GSS_S_CONTINUE_NEEDED:
            self._token = self.mech.step(token)
            if self.mech.complete or self._token is None:
                raise GssError("the server wants more tokens than the mechanism makes")
            return False
        if not self.mech.complete:
            out = self.mech.step(token if token else None)
            if out or not self.mech.complete:
                raise GssError("the server took the context for complete; the mechanism does not")
        if res.seq_window == 0:
            raise GssError("the server granted a sequence window of 0")
        if verf is None or verf.flavor != gss.RPCSEC_GSS:
            raise GssIntegrityError("the context's creation reply has no RPCSEC_GSS verifier")
        self.mech.verify_mic(gss.seq_num_bytes(res.seq_window), bytes(verf.body))
        self.seq_window = res.seq_window
        self.state = State.ESTABLISHED
        self._token = None
        return True

    # -- sequence numbers -----------------------------------------------------------------------------
    @property
    def usable(self) -> bool:
        return self.state is State.ESTABLISHED and self._next_seq < gss.MAXSEQ

    @property
    def window_open(self) -> bool:
        """A call may take a sequence number now: the oldest still unanswered stays inside the
        server's window (RFC 2203 section 5.3.3.1: the server drops what falls below it)."""
        if not self._in_flight:
            return True
        return self._next_seq - next(iter(self._in_flight)) < self.seq_window

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def take_seq(self) -> int:
        """The next call's sequence number, held in the window until :meth:`finished`;
        :class:`GssCredentialsExpired` when the ticket behind the context ran out."""
        if self.state is State.ESTABLISHED and self.mech.expired:
            self.state = State.STALE
            raise GssCredentialsExpired("the Kerberos ticket behind the context has expired (run kinit)")
        if not self.usable:
            raise GssError(f"the context is {self.state.value}" if self.state is not State.ESTABLISHED
                           else "the context's sequence numbers ran out")
        seq = self._next_seq
        self._next_seq += 1
        self._in_flight[seq] = None
        return seq

    def finished(self, seq: int) -> None:
        """The call with ``seq`` was answered, failed or given up: it no longer holds the window."""
        self._in_flight.pop(seq, None)

    def lost(self) -> None:
        """The server no longer knows this context (CREDPROBLEM, CTXPROBLEM) or its credentials expired."""
        self.state = State.STALE

    # -- calls and replies ----------------------------------------------------------------------------
    def _header(self, xid: int, prog: int, vers: int, proc: int, gss_proc: int, seq: int) -> bytes:
        cred = gss.encode_gss_cred(gss_proc, seq, self.service, self.handle)
        head = rpcdef.call_header_to_cred(xid, prog, vers, proc, cred)
        verf = Packer()
        verf.uint32(gss.RPCSEC_GSS)
        verf.opaque(self.mech.get_mic(head), rpcdef.MAX_AUTH_BYTES)
        return head + verf.getvalue()

    def seal_call(self, xid: int, prog: int, vers: int, proc: int, args: Packer) -> tuple[int, Packer]:
        """A DATA call with ``args`` (left as they are: a call sent again is sealed again, with a
        sequence number of its own): its sequence number and the whole message. Under krb5 the
        arguments' bulk payloads stay DDP-eligible; under krb5i and krb5p none is: a sealed body is
        one opaque that RPC-over-RDMA does not reduce (RFC 8166 section 9.2; it goes inline, or
        whole in a Position Zero Read chunk)."""
        seq = self.take_seq()
        try:
            return seq, self.seal(seq, xid, prog, vers, proc, args)
        except BaseException:
            self.finished(seq)
            raise

    def seal(self, seq: int, xid: int, prog: int, vers: int, proc: int, args: Packer) -> Packer:
        """The message of the DATA call ``seq`` (from :meth:`take_seq`): only the mechanism is used
        here, so that a caller may run it away from its event loop (one at a time per context)."""
        head = self._header(xid, prog, vers, proc, gss.RPCSEC_GSS_DATA, seq)
        if self.service == gss.SVC_NONE:
            return args.prefixed(head)
        body = gss.seq_num_bytes(seq) + b"".join(args.segments())
        msg = Packer()
        msg.buf += head
        if self.service == gss.SVC_INTEGRITY:
            msg.opaque_ref(body)
            msg.opaque(self.mech.get_mic(body))
        else:
            msg.opaque_ref(self.mech.wrap(body))
        return msg

    def open_reply(self, seq: int, verf: rpcdef.opaque_auth | None, u: Unpacker) -> Unpacker:
        """The results of the DATA call ``seq`` from its accepted reply: ``u`` as it is (krb5), or an
        unpacker over the checked or unwrapped body (krb5i, krb5p). :class:`GssIntegrityError` when
        the verifier, the MIC or the wrapping does not verify or names another sequence number."""
        self.check_verifier(seq, verf)
        if self.service == gss.SVC_NONE:
            return u
        try:
            if self.service == gss.SVC_INTEGRITY:
                body = bytes(u.opaque())
                mic = bytes(u.opaque(rpcdef.MAX_AUTH_BYTES))
                u.done()
                self.mech.verify_mic(body, mic)
            else:
                token = bytes(u.opaque())
                u.done()
                body = self.mech.unwrap(token)
            inner = Unpacker(body)
            inner_seq = inner.uint32()
        except XdrError as e:
            raise GssIntegrityError(f"a malformed RPCSEC_GSS reply body: {e}") from e
        if inner_seq != seq:
            raise GssIntegrityError(f"the reply's body holds sequence number {inner_seq}, not {seq}")
        return inner

    def check_verifier(self, seq: int, verf: rpcdef.opaque_auth | None) -> None:
        """:class:`GssIntegrityError` unless ``verf`` is the server's MIC of ``seq``."""
        if verf is None or verf.flavor != gss.RPCSEC_GSS:
            flavor = "none" if verf is None else verf.flavor
            raise GssIntegrityError(f"the reply's verifier is of flavour {flavor}, not RPCSEC_GSS")
        self.mech.verify_mic(gss.seq_num_bytes(seq), bytes(verf.body))

    def destroy_call(self, xid: int, prog: int, vers: int) -> tuple[int, Packer]:
        """RPCSEC_GSS_DESTROY of this context (a NULL call; its body is not sealed, as Linux and
        NFS-Ganesha do it): its sequence number and message. The context is used no more."""
        seq = self.take_seq()
        msg = Packer()
        msg.buf += self._header(xid, prog, vers, gss.NULLPROC, gss.RPCSEC_GSS_DESTROY, seq)
        self.state = State.STALE
        return seq, msg
