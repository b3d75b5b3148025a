"""RPC reply headers (RFC 5531) as the client decodes them: the common one (accepted, no verifier,
SUCCESS) by a shortcut, every other one field by field, each to the same fields."""

from __future__ import annotations

import struct

import pytest

from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._xdr import Unpacker, XdrError


def decoded(words: bytes, results: bytes = b"RES!") -> tuple[rpcdef.ReplyHeader, bytes]:
    u = Unpacker(words + results)
    h = rpcdef.unpack_reply_header(u)
    return h, bytes(u.view[u.pos:u.end])


def test_the_common_header_is_accepted_success_with_no_verifier_and_the_results_follow() -> None:
    h, rest = decoded(struct.pack(">IIII", rpcdef.MSG_ACCEPTED, rpcdef.AUTH_NONE, 0, rpcdef.SUCCESS))
    assert (h.accept, h.denied, h.auth) == (rpcdef.SUCCESS, None, None)
    assert h.verf is not None and (h.verf.flavor, bytes(h.verf.body)) == (rpcdef.AUTH_NONE, b"")
    assert rest == b"RES!"


def test_a_header_with_a_verifier_keeps_it() -> None:
    h, rest = decoded(struct.pack(">III4sI", rpcdef.MSG_ACCEPTED, rpcdef.AUTH_SYS, 4, b"VERF", rpcdef.SUCCESS))
    assert h.accept == rpcdef.SUCCESS
    assert h.verf is not None and (h.verf.flavor, bytes(h.verf.body)) == (rpcdef.AUTH_SYS, b"VERF")
    assert rest == b"RES!"
    assert h is not rpcdef.ACCEPTED_NULL_SUCCESS


@pytest.mark.parametrize("stat", [rpcdef.accept_stat.PROG_UNAVAIL, rpcdef.accept_stat.GARBAGE_ARGS, rpcdef.accept_stat.SYSTEM_ERR])
def test_an_accepted_error_is_not_taken_for_success(stat: int) -> None:
    h, _ = decoded(struct.pack(">IIII", rpcdef.MSG_ACCEPTED, rpcdef.AUTH_NONE, 0, stat))
    assert h.accept == stat
    assert "SUCCESS" not in rpcdef.describe(h)


def test_a_denied_reply_and_a_short_one() -> None:
    h, _ = decoded(struct.pack(">III", rpcdef.MSG_DENIED, rpcdef.AUTH_ERROR, rpcdef.auth_stat.AUTH_BADCRED), b"")
    assert (h.denied, h.auth, h.accept) == (rpcdef.AUTH_ERROR, rpcdef.auth_stat.AUTH_BADCRED, None)
    with pytest.raises(XdrError):  # (the common header cut short is no header)
        decoded(struct.pack(">III", rpcdef.MSG_ACCEPTED, rpcdef.AUTH_NONE, 0), b"")
