"""The RPCSEC_GSS core (pynfsrdma/_rpc/rpcsec_gss.py) with a fake mechanism below it: context creation,
sequence numbers and the window, verifiers, the three services' bodies, and what it refuses.

The fake mechanism's MIC is an HMAC under a key both "sides" share, its wrapping XOR plus a MIC, so
that a test can play the server: decode what the client sealed and seal replies the way a server does
(RFC 2203 sections 5.3.2 and 5.3.3)."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto import rpcsec_gss as gss
from pynfsrdma._rpc.rpcsec_gss import (
    GssContext,
    GssCredentialsExpired,
    GssError,
    GssIntegrityError,
    State,
)
from pynfsrdma._xdr import Packer, Unpacker

KEY = b"shared session key"
PROG, VERS, PROC = 100003, 4, 1


class FakeMechanism:
    """Two tokens to establish (so CONTINUE_INIT is exercised), HMAC-SHA256 as the MIC, XOR as the
    cipher."""

    def __init__(self, rounds: int = 2) -> None:
        self.rounds = rounds
        self.steps = 0
        self.complete = False
        self.expired = False

    def step(self, token: bytes | None) -> bytes | None:
        self.steps += 1
        if self.steps > self.rounds:
            self.complete = True
            return None
        return f"token-{self.steps}".encode()

    def get_mic(self, message: bytes) -> bytes:
        return hmac.new(KEY, message, hashlib.sha256).digest()

    def verify_mic(self, message: bytes, mic: bytes) -> None:
        if not hmac.compare_digest(self.get_mic(message), mic):
            raise GssIntegrityError("bad MIC")

    def wrap(self, message: bytes) -> bytes:
        return self.get_mic(message) + bytes(b ^ 0x5A for b in message)

    def unwrap(self, token: bytes) -> bytes:
        mic, body = token[:32], bytes(b ^ 0x5A for b in token[32:])
        self.verify_mic(body, mic)
        return body


def init_res(handle: bytes, major: int, window: int = 8, token: bytes = b"") -> Unpacker:
    return Unpacker(gss.rpc_gss_init_res.XDR.encode(gss.rpc_gss_init_res(handle, major, 0, window, token)))


def verf_of(message: bytes) -> rpcdef.opaque_auth:
    return rpcdef.opaque_auth(gss.RPCSEC_GSS, FakeMechanism().get_mic(message))


def established(service: int = gss.SVC_NONE, window: int = 8) -> GssContext:
    ctx = GssContext(FakeMechanism(rounds=1), service)
    ctx.init_call()
    assert ctx.init_reply(verf_of(gss.seq_num_bytes(window)), init_res(b"H1", gss.GSS_S_COMPLETE, window))
    return ctx


class Server:
    """What a server does with a sealed DATA call: check the verifier, take the body out."""

    def __init__(self, msg: Packer) -> None:
        self.u = Unpacker(msg.getvalue())
        u = self.u
        self.xid = u.uint32()
        assert u.uint32() == rpcdef.CALL
        start = 0
        body = rpcdef.decode_call_body(u)
        assert (body.prog, body.vers, body.proc) == (PROG, VERS, PROC)
        assert body.cred.flavor == gss.RPCSEC_GSS
        self.cred = gss.decode_gss_cred(body.cred.body)
        head_end = u.pos - 4 - 4 - len(body.verf.body) - (-len(body.verf.body) & 3)
        FakeMechanism().verify_mic(bytes(u.view[start:head_end]), bytes(body.verf.body))
        self.verf = body.verf

    def args(self, service: int) -> bytes:
        u = self.u
        if service == gss.SVC_NONE:
            return bytes(u.view[u.pos :])
        if service == gss.SVC_INTEGRITY:
            data, mic = bytes(u.opaque()), bytes(u.opaque())
            FakeMechanism().verify_mic(data, mic)
        else:
            data = FakeMechanism().unwrap(bytes(u.opaque()))
        u.done()
        assert int.from_bytes(data[:4], "big") == self.cred.seq_num
        return data[4:]

    def reply(self, service: int, results: bytes, seq: int | None = None) -> tuple[rpcdef.opaque_auth, Unpacker]:
        seq = self.cred.seq_num if seq is None else seq
        verf = verf_of(gss.seq_num_bytes(seq))
        if service == gss.SVC_NONE:
            return verf, Unpacker(results)
        body = gss.seq_num_bytes(seq) + results
        p = Packer()
        if service == gss.SVC_INTEGRITY:
            p.opaque(body)
            p.opaque(FakeMechanism().get_mic(body))
        else:
            p.opaque(FakeMechanism().wrap(body))
        return verf, Unpacker(p.getvalue())


def test_context_creation_takes_init_then_continue_init_and_checks_the_window_verifier() -> None:
    ctx = GssContext(FakeMechanism(rounds=2), gss.SVC_INTEGRITY)
    cred, args = ctx.init_call()
    u = Unpacker(cred)
    assert u.uint32() == gss.RPCSEC_GSS
    first = gss.decode_gss_cred(u.opaque())
    assert (first.gss_proc, first.handle) == (gss.RPCSEC_GSS_INIT, b"")
    assert Unpacker(args).opaque().tobytes() == b"token-1"
    assert not ctx.init_reply(None, init_res(b"H1", gss.GSS_S_CONTINUE_NEEDED, token=b"server-1"))

    cred, args = ctx.init_call()
    u = Unpacker(cred)
    u.uint32()
    second = gss.decode_gss_cred(u.opaque())
    assert (second.gss_proc, second.handle) == (gss.RPCSEC_GSS_CONTINUE_INIT, b"H1")
    assert Unpacker(args).opaque().tobytes() == b"token-2"
    assert ctx.init_reply(verf_of(gss.seq_num_bytes(16)), init_res(b"H2", gss.GSS_S_COMPLETE, 16, b"server-2"))
    assert ctx.state is State.ESTABLISHED and ctx.handle == b"H2" and ctx.seq_window == 16


def test_a_creation_reply_whose_verifier_is_not_the_windows_mic_is_refused() -> None:
    ctx = GssContext(FakeMechanism(rounds=1), gss.SVC_NONE)
    ctx.init_call()
    with pytest.raises(GssIntegrityError):
        ctx.init_reply(verf_of(gss.seq_num_bytes(99)), init_res(b"H", gss.GSS_S_COMPLETE, 8))
    assert ctx.state is State.CREATING


def test_a_refused_context_says_the_gss_status() -> None:
    ctx = GssContext(FakeMechanism(), gss.SVC_NONE)
    ctx.init_call()
    with pytest.raises(GssError, match=r"refused the security context.*0xd0000"):
        ctx.init_reply(None, init_res(b"", 0xD0000, 8))


@pytest.mark.parametrize("service", [gss.SVC_NONE, gss.SVC_INTEGRITY, gss.SVC_PRIVACY])
def test_a_sealed_call_and_its_reply_round_trip_under_each_service(service: int) -> None:
    ctx = established(service)
    args = Packer()
    args.uint32(7)
    args.bulk(b"payload " * 100)  # a WRITE's data (DDP-eligible: more than 512 bytes)
    seq, msg = ctx.seal_call(0x1234, PROG, VERS, PROC, args)
    assert seq == 1 and ctx.in_flight == 1
    server = Server(msg)
    assert server.xid == 0x1234
    assert (server.cred.gss_proc, server.cred.seq_num, server.cred.service, server.cred.handle) == (
        gss.RPCSEC_GSS_DATA, 1, service, b"H1")
    assert server.args(service) == args.getvalue()
    # under krb5 the payload stays a bulk segment (RPC-over-RDMA may place it); sealed, it cannot
    assert len(msg.bulk_segments) == (1 if service == gss.SVC_NONE else 0)
    if service == gss.SVC_NONE:
        seg = msg.bulk_segments[0]
        assert msg.getvalue()[seg.position : seg.position + 800] == b"payload " * 100
    verf, u = server.reply(service, b"\0\0\0\0results")
    inner = ctx.open_reply(seq, verf, u)
    assert bytes(inner.view[inner.pos : inner.end]) == b"\0\0\0\0results"
    ctx.finished(seq)
    assert ctx.in_flight == 0


def test_sealing_leaves_the_arguments_as_they_are_for_a_second_send() -> None:
    ctx = established(gss.SVC_NONE)
    args = Packer()
    args.bulk(b"x" * 1000)
    _, first = ctx.seal_call(1, PROG, VERS, PROC, args)
    _, second = ctx.seal_call(2, PROG, VERS, PROC, args)
    assert Server(first).cred.seq_num == 1 and Server(second).cred.seq_num == 2
    assert first.bulk_segments[0].position == second.bulk_segments[0].position
    assert len(args.getvalue()) == 1004 and args.bulk_segments[0].position == 4


@pytest.mark.parametrize("service", [gss.SVC_NONE, gss.SVC_INTEGRITY, gss.SVC_PRIVACY])
def test_a_reply_with_a_flipped_byte_anywhere_is_refused(service: int) -> None:
    ctx = established(service)
    args = Packer()
    args.uint32(1)
    seq, msg = ctx.seal_call(9, PROG, VERS, PROC, args)
    server = Server(msg)
    server.args(service)
    verf, u = server.reply(service, b"result data")
    reply = bytearray(u.view.tobytes())
    positions = range(len(reply)) if service != gss.SVC_NONE else []
    unnoticed = []
    for i in positions:
        flipped = bytearray(reply)
        flipped[i] ^= 0x01
        try:
            inner = ctx.open_reply(seq, verf, Unpacker(flipped))
        except GssIntegrityError:
            continue
        # only an XDR pad byte may change unnoticed, and then the results are the same
        assert bytes(inner.view[inner.pos : inner.end]) == b"result data"
        unnoticed.append(i)
    # (the first opaque holds the sequence number and the 11 bytes, plus the mechanism's 32 when wrapped)
    first = 4 + len(b"result data") + (32 if service == gss.SVC_PRIVACY else 0)
    pads = range(4 + first, 4 + first + (-first & 3))
    assert unnoticed == ([*pads] if service != gss.SVC_NONE else [])
    bad_verf = rpcdef.opaque_auth(verf.flavor, bytes([verf.body[0] ^ 1]) + bytes(verf.body[1:]))
    with pytest.raises(GssIntegrityError):
        ctx.open_reply(seq, bad_verf, Unpacker(reply))


def test_a_reply_for_another_sequence_number_is_refused() -> None:
    ctx = established(gss.SVC_INTEGRITY)
    seq1, _msg1 = ctx.seal_call(1, PROG, VERS, PROC, Packer())
    seq2, msg2 = ctx.seal_call(2, PROG, VERS, PROC, Packer())
    server = Server(msg2)
    # a reply sealed for the second call, handed to the first: the verifier names seq 2
    verf, u = server.reply(gss.SVC_INTEGRITY, b"r")
    with pytest.raises(GssIntegrityError):
        ctx.open_reply(seq1, verf, u)
    # the verifier right, the body for another call
    verf = verf_of(gss.seq_num_bytes(seq1))
    _, u = server.reply(gss.SVC_INTEGRITY, b"r", seq=seq2)
    with pytest.raises(GssIntegrityError, match="sequence number 2, not 1"):
        ctx.open_reply(seq1, verf, u)


def test_a_verifier_of_another_flavour_is_refused() -> None:
    ctx = established(gss.SVC_NONE)
    seq, _ = ctx.seal_call(1, PROG, VERS, PROC, Packer())
    with pytest.raises(GssIntegrityError, match="flavour 0"):
        ctx.open_reply(seq, rpcdef.NULL_AUTH, Unpacker(b""))


def test_the_window_holds_no_more_calls_than_the_server_keeps() -> None:
    ctx = established(gss.SVC_NONE, window=3)
    seqs = []
    while ctx.window_open:
        seqs.append(ctx.seal_call(len(seqs), PROG, VERS, PROC, Packer())[0])
    assert seqs == [1, 2, 3]
    ctx.finished(2)  # the oldest (1) is still out: still closed
    assert not ctx.window_open
    ctx.finished(1)
    assert ctx.window_open  # oldest now 3, next 4
    assert ctx.seal_call(9, PROG, VERS, PROC, Packer())[0] == 4


def test_sequence_numbers_end_below_maxseq_and_a_lost_context_seals_nothing() -> None:
    ctx = established(gss.SVC_NONE)
    ctx._next_seq = gss.MAXSEQ - 1
    ctx.seal_call(1, PROG, VERS, PROC, Packer())
    assert not ctx.usable
    with pytest.raises(GssError, match="ran out"):
        ctx.seal_call(2, PROG, VERS, PROC, Packer())
    other = established(gss.SVC_NONE)
    other.lost()
    with pytest.raises(GssError, match="stale"):
        other.seal_call(1, PROG, VERS, PROC, Packer())


def test_destroy_is_an_unsealed_null_call_with_the_contexts_service() -> None:
    ctx = established(gss.SVC_PRIVACY)
    _, msg = ctx.destroy_call(5, PROG, VERS)
    u = Unpacker(msg.getvalue())
    u.uint32()
    u.uint32()
    body = rpcdef.decode_call_body(u)
    cred = gss.decode_gss_cred(body.cred.body)
    assert body.proc == gss.NULLPROC
    assert (cred.gss_proc, cred.service, cred.handle) == (gss.RPCSEC_GSS_DESTROY, gss.SVC_PRIVACY, b"H1")
    assert u.remaining() == 0
    assert not ctx.usable


def test_flavours_by_their_nfs_names_and_secinfo_entries() -> None:
    assert gss.FLAVORS["krb5p"].service == gss.SVC_PRIVACY
    assert gss.flavor_of_secinfo(gss.RPCSEC_GSS, gss.KRB5_OID, gss.SVC_INTEGRITY) is gss.KRB5I
    assert gss.flavor_of_secinfo(gss.RPCSEC_GSS, gss.KRB5_OID_DER, gss.SVC_NONE) is gss.KRB5
    assert gss.flavor_of_secinfo(rpcdef.AUTH_SYS) is gss.SYS
    assert gss.flavor_of_secinfo(gss.RPCSEC_GSS, b"\x2b\x06", gss.SVC_NONE) is None


def test_a_context_whose_ticket_expired_seals_nothing_and_is_stale() -> None:
    ctx = established(gss.SVC_INTEGRITY)
    ctx.seal_call(1, PROG, VERS, PROC, Packer())
    ctx.mech.expired = True  # type: ignore[attr-defined]
    with pytest.raises(GssCredentialsExpired, match="expired"):
        ctx.seal_call(2, PROG, VERS, PROC, Packer())
    assert ctx.state is State.STALE and not ctx.usable
