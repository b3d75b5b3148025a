"""The request machine: what to do about each thing that befalls a request, every rule here, one
table per kind of failure (RFC 8881 sections 2.10.6, 15.1 and 18.46), sans I/O, the limits named
once (below).

A :class:`Request` is fed the events of one request's way (:class:`Replied`, :class:`Failed`,
:class:`Finished`, :class:`SessionGone`), keeps what it met so far and returns one
:class:`Decision`; the session's send loop and the client ID's loop only carry it out. Its tables:

- :func:`on_sequence` takes the status of SEQUENCE (the first result of every reply), the
  COMPOUND's status, and what is known of the request (tries so far, whether it is idempotent,
  whether its slot's previous request was interrupted, whether the reply's results answer another
  request, the attempts made): an :class:`Act` and how long to wait first;
- :func:`on_compound` takes the status of a COMPOUND whose SEQUENCE succeeded: retry after a pause
  (DELAY, GRACE) or recover a lost client ID;
- :func:`on_fault` takes a send that brought no reply to use (a timeout, a lost connection, a
  refused call, a reply that breaks the protocol): the same slot and sequence id again until a
  limit ends it (a request pinned to one path fails with that path; replies that broke the
  protocol more than MAX_VIOLATIONS times fail with ``ProtocolError``; a call the transport refused
  twice fails; a soft mount fails at once once its server is taken for gone; past the request's
  deadline it gives up);
- :func:`on_lost` takes a session lost under a request: a new session (or client ID), a new
  trunked session, or fail;
- :func:`flag_actions` takes SEQUENCE's sr_status_flags: what the client ID's owner must do.

:func:`settles` and :func:`finishes` name the replies :func:`on_sequence` and :func:`on_compound`
answer DONE whatever the request met before: the loops return those at once and make a request's
machine only for the others.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .._proto.nfs4 import const as c

# SEQUENCE statuses after which the session cannot be used (the owner makes a new one)
SESSION_LOST = frozenset({c.NFS4ERR_BADSESSION, c.NFS4ERR_DEADSESSION, c.NFS4ERR_CONN_NOT_BOUND_TO_SESSION})
# statuses meaning the client ID is gone
CLIENT_LOST = frozenset({c.NFS4ERR_STALE_CLIENTID, c.NFS4ERR_EXPIRED})
# COMPOUND statuses answered by sending the request again after a pause (the server asks for it)
RETRY_LATER = frozenset({c.NFS4ERR_DELAY, c.NFS4ERR_GRACE})

# -- the limits ---------------------------------------------------------------------------------------
MAX_MISORDERED = 2  # steps back to an interrupted request's sequence id
MAX_BADSLOT = 4  # lower slots tried after NFS4ERR_BADSLOT
MAX_UNCACHED = 2  # idempotent requests run anew after NFS4ERR_RETRY_UNCACHED_REP
MAX_FALSE_RETRY = 2  # requests sent anew after a false retry
MAX_REFUSED = 1  # resends of a request its transport refused (CallFailed) before failing it
MAX_VIOLATIONS = 2  # resends of a request whose reply broke the protocol, each on a new connection
MAX_SESSION_LOST = 3  # sessions lost under one request (each recovered) before it fails
MAX_CLIENT_LOST = 3  # client IDs lost under one request (each recovered) before its reply stands
MAX_DELAY_WAIT = 5.0  # seconds between two sends of a request the server asked to delay, at most
FIRST_DELAY = 0.05  # SEQUENCE's NFS4ERR_DELAY: the server still works on this slot's request
FIRST_RETRY = 0.1  # a COMPOUND's NFS4ERR_DELAY or NFS4ERR_GRACE
MAX_RETRY_WAIT = 2.0
MAX_GRACE_WAIT = 300.0  # seconds a request waits out a server's grace period before it fails


class Act(enum.Enum):
    DONE = "the reply stands"  # (its COMPOUND status is the caller's to look at)
    RESEND = "send again on the same slot with the same sequence id"
    AGAIN = "send again as a new request on the same slot"
    STEP_BACK = "send again with the interrupted request's sequence id"
    OTHER_SLOT = "the server has fewer slots: shrink the table and send on a lower slot"
    NEW_SESSION = "the session is gone: the owner makes a new one, then the request goes again"
    NEW_CLIENT = "the client ID is gone: the owner makes a new one and reclaims, then the request goes again"
    LOST = "the slot's state disagrees with the server's: the session must be replaced"
    NEW_TRUNKED_SESSION = "a trunked session is gone: the owner makes a new one on its group's paths"
    VIOLATION = "the reply is not an answer to the request: it breaks the protocol"
    FAIL = "the request fails"
    RAISE = "the fault goes to the caller as it is (a request pinned to its path)"
    PROTOCOL_ERROR = "fail with ProtocolError: the server's replies break the protocol"
    REFUSED = "fail: the transport refused the request again, the request itself is at fault"
    UNREACHABLE = "fail: a soft mount's server is taken for gone"
    GIVE_UP = "fail: the request's deadline passed"
    OUT_OF_TIME = "a soft request's time ends before the pause the server asked for: it fails, its slot interrupted"


@dataclass(slots=True)
class Attempts:
    """What one request has been through (kept by the caller across its tries)."""

    misordered: int = 0
    badslot: int = 0
    uncached: int = 0
    false_retries: int = 0
    delays: int = 0
    client_lost: int = 0
    grace_waited: float = 0.0
    sessions_lost: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    act: Act
    wait: float = 0.0  # seconds to wait before acting
    status: int = c.NFS4_OK  # the status that decided it


_DONE = Decision(Act.DONE)  # (the decision on nearly every reply: one, shared, as decisions are frozen)


def on_sequence(
    seq_status: int,
    compound_status: int,
    *,
    tries: int,
    idempotent: bool,
    interrupted: bool,
    attempts: Attempts,
    foreign: bool = False,
    resent: bool = False,
    time_left: float | None = None,
) -> Decision:
    """The decision on a reply whose SEQUENCE came back with ``seq_status`` (``compound_status``:
    the whole COMPOUND's). ``tries``: sends of this request so far (more than one: a resend after a
    lost connection, which the server may have executed); ``interrupted``: the slot's request before
    this one got no reply; ``foreign``: SEQUENCE succeeded and names this request's session, slot and
    sequence id, but the other results do not answer its operations; ``resent``: this sequence id
    went out more than once for this request; ``time_left``: seconds a soft request has before its
    deadline (None: a hard one, which has no end). ``attempts`` is updated."""
    if foreign or seq_status == c.NFS4ERR_SEQ_FALSE_RETRY:
        # a reply cached under this sequence id for another request. After a step back (the
        # sequence id was the interrupted request's) that request is the interrupted one, which
        # reached the server after all, between the SEQ_MISORDERED and this send: the server took
        # this one for its retry (RFC 8881 2.10.6.1.3, a false retry; a server that does not
        # detect them answers with the cached reply) and did not execute it. The slot now stands
        # at this sequence id: send again as a new request, on the next one
        if attempts.misordered and attempts.false_retries < MAX_FALSE_RETRY:
            attempts.false_retries += 1
            return Decision(Act.AGAIN, status=c.NFS4ERR_SEQ_FALSE_RETRY)
        if foreign:
            # no step back explains it: a reply that does not answer the request is not licence
            # to run the request again
            return Decision(Act.VIOLATION, status=seq_status)
        # the bookkeeping of the slot disagrees with the server's
        return Decision(Act.LOST, status=seq_status)
    uncached = seq_status == c.NFS4ERR_RETRY_UNCACHED_REP or (
        seq_status == c.NFS4_OK and compound_status == c.NFS4ERR_RETRY_UNCACHED_REP
    )
    if uncached and attempts.misordered and not resent and attempts.false_retries < MAX_FALSE_RETRY:
        # the same false retry, answered by a server that held no reply for the interrupted request
        # (it did not ask for one to be cached): sent once with this sequence id, this request was
        # never executed under it
        attempts.false_retries += 1
        return Decision(Act.AGAIN, status=c.NFS4ERR_SEQ_FALSE_RETRY)
    if uncached and tries > 1 and idempotent and attempts.uncached < MAX_UNCACHED:
        # the first send was executed and its reply not cached: run it again, anew (RFC 8881 2.10.6.1.3)
        attempts.uncached += 1
        return Decision(Act.AGAIN, status=c.NFS4ERR_RETRY_UNCACHED_REP)
    if seq_status == c.NFS4_OK:
        return _DONE
    if seq_status == c.NFS4ERR_DELAY:
        wait = min(MAX_DELAY_WAIT, FIRST_DELAY * 2 ** min(attempts.delays, 7))
        if time_left is not None and wait >= time_left:
            return Decision(Act.OUT_OF_TIME, status=seq_status)
        attempts.delays += 1
        return Decision(Act.RESEND, wait, seq_status)
    if seq_status == c.NFS4ERR_SEQ_MISORDERED:
        if attempts.misordered < MAX_MISORDERED and interrupted:
            # the server never saw the interrupted request: this one takes its sequence id
            attempts.misordered += 1
            return Decision(Act.STEP_BACK, status=seq_status)
        return Decision(Act.LOST, status=seq_status)
    if seq_status == c.NFS4ERR_BADSLOT and attempts.badslot < MAX_BADSLOT:
        attempts.badslot += 1
        return Decision(Act.OTHER_SLOT, status=seq_status)
    if seq_status in SESSION_LOST:
        return Decision(Act.NEW_SESSION, status=seq_status)
    if seq_status in CLIENT_LOST:
        return Decision(Act.NEW_CLIENT, status=seq_status)
    return Decision(Act.FAIL, status=seq_status)


def settles(seq_status: int, compound_status: int) -> bool:
    """Whether a reply whose SEQUENCE answers this very request (not a :attr:`Replied.foreign` one)
    with ``seq_status``, its COMPOUND ending with ``compound_status``, is DONE whatever the request
    met before (:func:`on_sequence` says so for any tries and attempts): the common case, which the
    session carries out without building the request's machine."""
    return seq_status == c.NFS4_OK and compound_status != c.NFS4ERR_RETRY_UNCACHED_REP


def finishes(status: int) -> bool:
    """Whether a COMPOUND whose SEQUENCE succeeded and that ended with ``status`` is DONE whatever
    the request met before (:func:`on_compound` says so for any attempts and time left)."""
    return status not in RETRY_LATER and status not in CLIENT_LOST


def on_compound(status: int, *, recovering: bool, attempts: Attempts, time_left: float | None = None) -> Decision:
    """The decision on a COMPOUND whose SEQUENCE succeeded and that ended with ``status``:
    DONE (the caller reads the results), RESEND (the server asked for a pause: the whole request
    again, as a new one), NEW_CLIENT (the client ID went), FAIL (a retried request's limits ran out:
    the reply stands as an error). ``recovering``: the request is part of a recovery, which does not
    start another; ``time_left``: seconds a soft request has before its deadline (None: no end): a
    pause that would outlast it is not made, the reply (DELAY, GRACE) stands."""
    if status in RETRY_LATER:
        wait = min(MAX_RETRY_WAIT, FIRST_RETRY * 2 ** min(attempts.delays, 5))
        if time_left is not None and wait >= time_left:
            return Decision(Act.DONE, status=status)
        attempts.delays += 1
        if status == c.NFS4ERR_GRACE:
            if attempts.grace_waited >= MAX_GRACE_WAIT:
                return Decision(Act.DONE, status=status)
            attempts.grace_waited += wait
        return Decision(Act.RESEND, wait, status)
    if status in CLIENT_LOST and not recovering:
        attempts.client_lost += 1
        if attempts.client_lost > MAX_CLIENT_LOST:
            return Decision(Act.DONE, status=status)
        return Decision(Act.NEW_CLIENT, status=status)
    return _DONE if status == c.NFS4_OK else Decision(Act.DONE, status=status)


# -- a send that brought no reply to use ---------------------------------------------------------------


class Fault(enum.Enum):
    TIMEOUT = "no reply within timeo"
    LOST = "the connection ended with the request in flight"
    VIOLATION = "the connection ended on a message that broke the protocol"
    REFUSED = "the transport refused the call (RPC-over-RDMA ERR_CHUNK): the server did not run it"
    BAD_REPLY = "a reply came that is not one (malformed, or not an answer to the request)"


@dataclass(slots=True)
class Faults:
    """What one request's sends have met so far (kept by the caller across its sends)."""

    violations: int = 0
    refused: int = 0


def on_fault(fault: Fault, *, pinned: bool, failing_fast: bool, past_deadline: bool, faults: Faults) -> Decision:
    """The decision on ``fault`` (``faults`` is updated): RESEND (same slot and sequence id, another
    path if there is one), RAISE, PROTOCOL_ERROR, REFUSED, UNREACHABLE or GIVE_UP. ``pinned``: the
    request goes on one path only; ``failing_fast``: a soft mount's server was taken for gone;
    ``past_deadline``: the request's time ran out."""
    if fault is Fault.BAD_REPLY:
        faults.violations += 1
        return Decision(Act.PROTOCOL_ERROR if faults.violations > MAX_VIOLATIONS or pinned else Act.RESEND)
    if pinned:
        return Decision(Act.RAISE)
    if fault is Fault.TIMEOUT:
        return Decision(Act.GIVE_UP if past_deadline else Act.RESEND)
    if fault is Fault.VIOLATION:
        faults.violations += 1
        if faults.violations > MAX_VIOLATIONS:
            return Decision(Act.PROTOCOL_ERROR)
    if fault is Fault.REFUSED:
        faults.refused += 1
        if faults.refused > MAX_REFUSED:
            return Decision(Act.REFUSED)
    if failing_fast:
        return Decision(Act.UNREACHABLE)
    return Decision(Act.GIVE_UP if past_deadline else Act.RESEND)


# -- a session lost under a request ------------------------------------------------------------------


def on_lost(status: int, *, trunked: bool, recovering: bool, attempts: Attempts) -> Decision:
    """The decision on a request whose session was lost with ``status`` (``attempts`` is updated):
    NEW_SESSION (of the first session's: a new one, or a new client ID when ``status`` says the
    client ID went), NEW_TRUNKED_SESSION (``trunked``: a session of client ID trunking, replaced on a
    path of its group) or FAIL (``recovering``: a recovery's own request does not start another; or
    lost more than MAX_SESSION_LOST times)."""
    attempts.sessions_lost += 1
    if recovering or attempts.sessions_lost > MAX_SESSION_LOST:
        return Decision(Act.FAIL, status=status)
    if trunked and status not in CLIENT_LOST:
        return Decision(Act.NEW_TRUNKED_SESSION, status=status)
    return Decision(Act.NEW_SESSION, status=status)


# -- one request's machine ---------------------------------------------------------------------------
# (The events are plain slotted dataclasses, not frozen ones: one or two are built for every request,
# and a frozen dataclass sets each field through object.__setattr__, three times the cost.)


@dataclass(slots=True)
class Replied:
    """A reply to the request's SEQUENCE came (see :func:`on_sequence` for the fields)."""

    seq_status: int
    compound_status: int
    tries: int
    interrupted: bool
    foreign: bool = False
    resent: bool = False
    time_left: float | None = None  # a soft request's seconds before its deadline (None: no end)


@dataclass(slots=True)
class Failed:
    """A send brought no reply to use (see :func:`on_fault`)."""

    fault: Fault
    failing_fast: bool = False
    past_deadline: bool = False


@dataclass(slots=True)
class Finished:
    """The request's COMPOUND ended with ``status``, its SEQUENCE having succeeded (see :func:`on_compound`)."""

    status: int
    time_left: float | None = None  # a soft request's seconds before its deadline (None: no end)


@dataclass(slots=True)
class SessionGone:
    """The request's session was lost with ``status`` (see :func:`on_lost`)."""

    status: int
    trunked: bool = False


Event = Replied | Failed | Finished | SessionGone


@dataclass(slots=True)
class Request:
    """One request's machine: fed each event of its way (a reply, a fault, its COMPOUND's end, its
    session lost), it keeps what the request met so far and returns the one decision to carry out.
    ``idempotent``: its operations may run twice; ``pinned``: it goes on one path only (a probe);
    ``recovering``: it is part of a recovery, which does not start another."""

    idempotent: bool = False
    pinned: bool = False
    recovering: bool = False
    attempts: Attempts = field(default_factory=Attempts)
    faults: Faults = field(default_factory=Faults)

    def feed(self, event: Event) -> Decision:
        if isinstance(event, Replied):
            return on_sequence(event.seq_status, event.compound_status, tries=event.tries,
                               idempotent=self.idempotent, interrupted=event.interrupted, attempts=self.attempts,
                               foreign=event.foreign, resent=event.resent, time_left=event.time_left)
        if isinstance(event, Failed):
            return on_fault(event.fault, pinned=self.pinned, failing_fast=event.failing_fast,
                            past_deadline=event.past_deadline, faults=self.faults)
        if isinstance(event, Finished):
            return on_compound(event.status, recovering=self.recovering, attempts=self.attempts,
                               time_left=event.time_left)
        return on_lost(event.status, trunked=event.trunked, recovering=self.recovering, attempts=self.attempts)


class FlagAction(enum.Enum):
    RECLAIM = "the server restarted: reclaim our state"
    STATE_REVOKED = "some of our state was revoked: find it and tell its users"
    BIND_BACKCHANNEL = "no backchannel: bind a connection of ours to it"
    LEASE_MOVED = "the lease moved to another server (migration: not supported)"


_FLAG_RULES: tuple[tuple[int, FlagAction], ...] = (
    (c.SEQ4_STATUS_RESTART_RECLAIM_NEEDED, FlagAction.RECLAIM),
    (
        c.SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED
        | c.SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED
        | c.SEQ4_STATUS_ADMIN_STATE_REVOKED
        | c.SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
        FlagAction.STATE_REVOKED,
    ),
    (c.SEQ4_STATUS_CB_PATH_DOWN | c.SEQ4_STATUS_CB_PATH_DOWN_SESSION, FlagAction.BIND_BACKCHANNEL),
    (c.SEQ4_STATUS_LEASE_MOVED, FlagAction.LEASE_MOVED),
)


def flag_actions(flags: int) -> list[FlagAction]:
    """What SEQUENCE's sr_status_flags ask of the client ID's owner, in the order to do them."""
    return [action for bits, action in _FLAG_RULES if flags & bits]
