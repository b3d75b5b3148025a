"""What to do when a request's send brings no reply to use: it timed out, its connection ended,
the transport refused it, or the reply (or the connection's framing) broke the protocol. One table,
sans I/O: :meth:`.session.Session.compound` and its send loop only carry the answer out.

A request goes again with the same slot and sequence id (the server answers one it already ran
from its reply cache, RFC 8881 section 2.10.6.2) until a limit ends it: a request pinned to one path
fails with that path; a reply that broke the protocol more than :data:`MAX_VIOLATIONS` times fails
with ``ProtocolError``; a call the transport refused twice fails; a soft mount fails at once once
its server is taken for gone; past the request's deadline it gives up."""

from __future__ import annotations

import enum
from dataclasses import dataclass

MAX_REFUSED = 1  # resends of a request its transport refused (CallFailed) before failing it
MAX_VIOLATIONS = 2  # resends of a request whose reply broke the protocol, each on a new connection


class Fault(enum.Enum):
    TIMEOUT = "no reply within timeo"
    LOST = "the connection ended with the request in flight"
    VIOLATION = "the connection ended on a message that broke the protocol"
    REFUSED = "the transport refused the call (RPC-over-RDMA ERR_CHUNK): the server did not run it"
    BAD_REPLY = "a reply came that is not one (malformed, or not an answer to the request)"


class Then(enum.Enum):
    RESEND = "send again, same slot and sequence id (another path if there is one)"
    RAISE = "the fault goes to the caller as it is (a request pinned to its path)"
    PROTOCOL_ERROR = "fail with ProtocolError: the server's replies break the protocol"
    REFUSED = "fail: the transport refused the request again, the request itself is at fault"
    UNREACHABLE = "fail: a soft mount's server is taken for gone"
    GIVE_UP = "fail: the request's deadline passed"


@dataclass(slots=True)
class Faults:
    """What one request's sends have met so far (kept by the caller across its sends)."""

    violations: int = 0
    refused: int = 0


def on_fault(fault: Fault, *, pinned: bool, failing_fast: bool, past_deadline: bool, faults: Faults) -> Then:
    """The decision on ``fault`` (``faults`` is updated). ``pinned``: the request goes on one path
    only; ``failing_fast``: a soft mount's server was taken for gone; ``past_deadline``: the
    request's time ran out."""
    if fault is Fault.BAD_REPLY:
        faults.violations += 1
        return Then.PROTOCOL_ERROR if faults.violations > MAX_VIOLATIONS or pinned else Then.RESEND
    if pinned:
        return Then.RAISE
    if fault is Fault.TIMEOUT:
        return Then.GIVE_UP if past_deadline else Then.RESEND
    if fault is Fault.VIOLATION:
        faults.violations += 1
        if faults.violations > MAX_VIOLATIONS:
            return Then.PROTOCOL_ERROR
    if fault is Fault.REFUSED:
        faults.refused += 1
        if faults.refused > MAX_REFUSED:
            return Then.REFUSED
    if failing_fast:
        return Then.UNREACHABLE
    return Then.GIVE_UP if past_deadline else Then.RESEND
