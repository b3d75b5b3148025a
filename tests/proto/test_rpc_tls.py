"""The AUTH_TLS probe of RPC-with-TLS (RFC 9289 section 4.1), sans-I/O: the probe decodes as a NULL call
with an AUTH_TLS credential and an AUTH_NONE verifier, and each kind of answer is read for what it
says (STARTTLS; an AUTH_ERROR; an accepted reply with no STARTTLS verifier; another call's reply)."""

from __future__ import annotations

from collections.abc import Callable

from pynfsrdma._proto import rpc
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._xdr import Packer, Unpacker


def test_the_probe_is_a_null_call_with_auth_tls() -> None:
    u = Unpacker(memoryview(rpc.pack_tls_probe(77, c.NFS4_PROGRAM, c.NFS_V4)))
    assert u.uint32() == 77 and u.uint32() == rpc.CALL
    body = rpc.decode_call_body(u)
    assert (body.rpcvers, body.prog, body.vers, body.proc) == (rpc.RPC_VERSION, c.NFS4_PROGRAM, c.NFS_V4, 0)
    assert body.cred == rpc.opaque_auth(rpc.AUTH_TLS, b"") and body.verf == rpc.NULL_AUTH
    assert int(rpc.AUTH_TLS) == 7


def answer(build: Callable[[Packer], None]) -> Unpacker:
    p = Packer()
    build(p)
    return Unpacker(memoryview(bytes(p.buf)))


def test_each_answer_says_what_it_says() -> None:
    assert rpc.tls_probe_refusal(5, answer(lambda p: rpc.pack_starttls_reply(p, 5))) is None
    assert rpc.tls_probe_refusal(5, answer(lambda p: rpc.pack_accepted_reply_header(p, 5))) == (
        "its reply has no STARTTLS verifier")

    def denied(p: Packer) -> None:
        for word in (5, rpc.REPLY, rpc.MSG_DENIED, rpc.AUTH_ERROR, rpc.auth_stat.AUTH_REJECTEDCRED):
            p.uint32(word)

    assert rpc.tls_probe_refusal(5, answer(denied)) == "authentication error (AUTH_REJECTEDCRED)"
    assert rpc.tls_probe_refusal(6, answer(lambda p: rpc.pack_starttls_reply(p, 5))) == (
        "answered the AUTH_TLS probe with something that is not its reply")
