"""An export that wants RPC-with-TLS, reached without it (or with tls where it wants mtls): Linux's
nfsd answers NFS4ERR_WRONGSEC to the LOOKUP and then names sec=sys, the very flavour refused, in its
SECINFO (seen in the Debian 13 guest of tests/vm). The error then says that the export wants more
transport security, not that it wants sec=sys. The choice of flavours is sans I/O (FlavorChoice);
tests/vm's guest runs the same against nfsd with tlshd."""

from __future__ import annotations

from pynfsrdma._client.security import FlavorChoice
from pynfsrdma._proto import rpcsec_gss as gss

WHERE = "192.0.2.1:2049:/tls"


def refused_after_secinfo(xprtsec: str, wanted: list[gss.Flavor], sec: tuple[gss.Flavor, ...] = (gss.SYS,)) -> str:
    """What the user is told when every flavour tried is refused, SECINFO having named ``wanted``."""
    choice = FlavorChoice(sec, xprtsec=xprtsec)
    while choice.next() is not None:  # each refused (NFS4ERR_WRONGSEC)
        pass
    assert choice.must_ask
    choice.wanted = wanted
    while choice.next() is not None:
        pass
    return choice.refusal(WHERE)


def test_a_flavour_refused_that_the_server_names_is_the_transport_security() -> None:
    assert refused_after_secinfo("none", [gss.SYS]) == (
        f"{WHERE}: the server refused sec=sys, which it names itself: the export wants more transport "
        "security than xprtsec=none (RPC-with-TLS: xprtsec=tls or mtls) (NFS4ERR_WRONGSEC)")
    assert refused_after_secinfo("tls", [gss.SYS]) == (
        f"{WHERE}: the server refused sec=sys, which it names itself: the export wants more transport "
        "security than xprtsec=tls (RPC-with-TLS: xprtsec=mtls) (NFS4ERR_WRONGSEC)")


def test_a_flavour_the_server_wants_and_was_not_tried_is_named() -> None:
    # with sec= given, only those are tried: the server's own choice is named, as before
    choice = FlavorChoice((gss.SYS,), given=True, xprtsec="none")
    assert choice.next() is gss.SYS and choice.next() is None
    choice.wanted = [gss.KRB5]
    assert choice.refusal(WHERE) == f"{WHERE}: the server wants sec=krb5; refused sec=sys (NFS4ERR_WRONGSEC)"
    # under mtls there is no more transport security to ask for: the flavours are what is named
    assert refused_after_secinfo("mtls", [gss.SYS]) == (
        f"{WHERE}: the server wants sec=sys; refused sec=sys (NFS4ERR_WRONGSEC)")
