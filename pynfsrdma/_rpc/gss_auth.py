"""RPCSEC_GSS credentials: one user's Kerberos identity toward one server, under one service
(krb5, krb5i or krb5p), and the I/O around its context (:mod:`.rpcsec_gss` decides, this sends).

A :class:`GssCredential` is passed wherever an AUTH_SYS credential would be. The RPC connection
hands it each call to send (:meth:`GssCredential.call`): it makes the context on that connection
first when there is none (RPCSEC_GSS_INIT, CONTINUE_INIT), waits while the sequence window is full,
seals the call, checks the reply's verifier and opens its body. When the server says it lost the
context (RPCSEC_GSS_CREDPROBLEM, RPCSEC_GSS_CTXPROBLEM) or the ticket behind it expired, a new
context is made and the call goes once more. The context is shared by every connection to the
server (the server keeps it by its handle, not by connection) and by every call of this user;
another user has a credential of their own.

A user with no Kerberos ticket gets EACCES, and the log says "no Kerberos credentials for uid N".
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import trio

from .._proto import rpc as rpcdef
from .._proto import rpcsec_gss as gss
from .._transport.base import NO_HINTS, ReplyHints
from .._xdr import Packer, Unpacker, XdrError
from .auth import Connection, Credential
from .errors import RpcReplyError
from .rpcsec_gss import GssContext, GssCredentialsExpired, GssError, GssIntegrityError, GssMechanism

log = logging.getLogger(__name__)
T = TypeVar("T")

# auth_stat values saying the server no longer knows the context: make a new one, send again once
CONTEXT_LOST = frozenset({rpcdef.auth_stat.RPCSEC_GSS_CREDPROBLEM, rpcdef.auth_stat.RPCSEC_GSS_CTXPROBLEM})
LOG_EVERY = 60.0  # seconds between two log lines about one user's missing credentials
DESTROY_TIMEOUT = 2.0
SEALING_ROOM = 1024  # what a MIC or a wrapping adds to a reply, at most
OFF_LOOP_BYTES = 64 * 1024  # bodies this large are signed or sealed in a worker thread


class KerberosAccessError(PermissionError):
    """No usable Kerberos credentials for a call, or the server refused them: EACCES, saying which."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, message)

    def __str__(self) -> str:
        return str(self.strerror)


class GssCredential(Credential):
    """One user's RPCSEC_GSS credential toward one server: ``flavor`` (krb5, krb5i, krb5p) and
    ``mechanism()``, which makes a new GSS-API initiator (a Kerberos one from the user's ticket
    cache: :class:`~.krb5.Krb5Mechanism`). ``uid`` and ``gid`` are the local user's, for the
    layers above that compare credentials; the server learns who the user is from the ticket."""

    __slots__ = ("_context", "_crypto_lock", "_lock", "_logged", "_window", "flavor", "mechanism", "who")

    seals_at_send: ClassVar[bool] = True

    def __init__(self, flavor: gss.Flavor, mechanism: Callable[[], GssMechanism], uid: int,
                 gid: int | None = None, gids: tuple[int, ...] = (), who: str | None = None) -> None:
        if not flavor.gss or flavor.service is None:
            raise ValueError(f"{flavor.name} is not an RPCSEC_GSS flavour")
        super().__init__(b"", uid, gid, gids)
        self.flavor = flavor
        self.mechanism = mechanism
        self.who = who or f"uid {uid}"
        self._context: GssContext | None = None
        self._lock = trio.Lock()
        self._crypto_lock = trio.Lock()
        self._window = trio.Event()
        self._logged = -LOG_EVERY

    def __repr__(self) -> str:
        return f"GssCredential({self.flavor.name} {self.who})"

    @property
    def established(self) -> bool:
        return self._context is not None and self._context.usable

    # -- the context ----------------------------------------------------------------------------------
    async def context(self, conn: Connection, timeout: float | None = None) -> GssContext:
        """The usable context, made on ``conn`` if there is none."""
        ctx = self._context
        if ctx is not None and ctx.usable:
            return ctx
        async with self._lock:
            ctx = self._context
            if ctx is not None and ctx.usable:
                return ctx
            self._context = None
            ctx = GssContext(self._new_mechanism(), int(self.flavor.service or 0))
            try:
                while True:
                    cred, args = ctx.init_call()
                    xid, p = conn.start_call(gss.NULLPROC, Credential(cred))
                    p.buf += args
                    try:
                        h, u = await conn.exchange(xid, p, NO_HINTS, timeout)
                    except RpcReplyError as e:
                        raise KerberosAccessError(f"{conn.peer} refused the Kerberos context of {self.who} "
                                                  f"({e.reason})") from e
                    try:
                        if ctx.init_reply(h.verf, u):
                            break
                    except XdrError as e:
                        raise await conn.violated(f"a malformed RPCSEC_GSS_INIT reply: {e}") from e
                    except GssIntegrityError as e:
                        raise await conn.violated(f"the RPCSEC_GSS_INIT reply does not verify: {e}") from e
            except GssError as e:
                raise self._refused(e) from e
            self._context = ctx
            log.debug("%s: RPCSEC_GSS context of %s made (%s, window %d)", conn.peer, self.who,
                      self.flavor.name, ctx.seq_window)
            return ctx

    def _new_mechanism(self) -> GssMechanism:
        try:
            return self.mechanism()
        except GssError as e:
            raise self._refused(e) from e

    def _refused(self, e: GssError) -> KerberosAccessError:
        now = time.monotonic()
        expired = isinstance(e, GssCredentialsExpired)
        what = "expired Kerberos credentials" if expired else "no Kerberos credentials"
        message = f"{what} for {self.who}: {e}"
        if now - self._logged >= LOG_EVERY:
            self._logged = now
            log.warning("%s", message)
        return KerberosAccessError(message)

    def _lost(self, ctx: GssContext) -> None:
        ctx.lost()
        if self._context is ctx:
            self._context = None

    def _finished(self, ctx: GssContext, seq: int) -> None:
        ctx.finished(seq)
        self._window.set()
        self._window = trio.Event()

    async def _crypto(self, off_loop: bool, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, one of the context's signing or sealing steps: one at a time (a GSS-API
        context is not to be used from two threads at once), and in a worker thread when
        ``off_loop`` (a large body: encrypting a MiB takes milliseconds the event loop needs for
        the connections; the mechanism lets go of the GIL meanwhile)."""
        async with self._crypto_lock:
            if off_loop:
                return await trio.to_thread.run_sync(fn, *args)
            return fn(*args)

    async def _take_window(self, ctx: GssContext) -> None:
        while not ctx.window_open:
            await self._window.wait()

    # -- calls ----------------------------------------------------------------------------------------
    async def call(self, conn: Connection, xid: int, proc: int, args: Packer,
                   hints: ReplyHints = NO_HINTS, timeout: float | None = None) -> Unpacker:
        """Send a DATA call of ``proc`` with ``args`` on ``conn``; its results, checked and opened."""
        if self.flavor.service != gss.SVC_NONE:
            # (a sealed body is one opaque: nothing in it may be placed directly)
            size = hints.max_reply + sum(hints.ddp_sizes)
            hints = ReplyHints(max_reply=size + SEALING_ROOM if size else 0)
        sealed = self.flavor.service != gss.SVC_NONE
        for attempt in (0, 1):
            ctx = await self.context(conn, timeout)
            await self._take_window(ctx)
            if not ctx.usable:
                continue
            try:
                seq = ctx.take_seq()
            except GssCredentialsExpired:
                self._lost(ctx)
                xid = conn.next_xid()
                continue
            except GssError as e:
                raise self._refused(e) from e
            try:
                try:
                    msg = await self._crypto(sealed and len(args) >= OFF_LOOP_BYTES,
                                             ctx.seal, seq, xid, conn.prog, conn.vers, proc, args)
                except GssError as e:
                    raise self._refused(e) from e
                try:
                    h, u = await conn.exchange(xid, msg, hints, timeout)
                except RpcReplyError as e:
                    if attempt == 0 and e.header is not None and e.header.auth in CONTEXT_LOST:
                        log.info("%s: the server lost the RPCSEC_GSS context of %s (%s); making a new one",
                                 conn.peer, self.who, e.reason)
                        self._lost(ctx)
                        xid = conn.next_xid()
                        continue
                    raise
                try:
                    return await self._crypto(sealed and u.remaining() >= OFF_LOOP_BYTES,
                                              ctx.open_reply, seq, h.verf, u)
                except GssCredentialsExpired as e:
                    self._lost(ctx)
                    raise await conn.violated(f"the reply could not be checked: {e}") from e
                except GssError as e:
                    raise await conn.violated(f"a reply that fails its RPCSEC_GSS checks ({e})") from e
            finally:
                self._finished(ctx, seq)
        raise KerberosAccessError(f"{conn.peer} lost the Kerberos context of {self.who} again at once")

    async def destroy(self, conn: Connection) -> None:
        """Tell the server to forget this context (RPCSEC_GSS_DESTROY), if there is one; a server
        that does not answer is not waited for long."""
        ctx, self._context = self._context, None
        if ctx is None or not ctx.usable:
            return
        xid = conn.next_xid()
        try:
            seq, msg = ctx.destroy_call(xid, conn.prog, conn.vers)
        except GssError as e:
            log.debug("RPCSEC_GSS_DESTROY of %s not sent: %s", self.who, e)
            return
        try:
            h, _ = await conn.exchange(xid, msg, NO_HINTS, DESTROY_TIMEOUT)
            ctx.check_verifier(seq, h.verf)
        except (OSError, GssError) as e:
            log.debug("%s: RPCSEC_GSS_DESTROY of %s: %s", conn.peer, self.who, e)
