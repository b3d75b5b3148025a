"""Security flavours of a mount: nfs(5)'s ``sec=`` (``sys``, ``krb5``, ``krb5i``, ``krb5p``, or a list
of them separated by colons, tried in order), the credential each gives a user, which to try after the
server answered NFS4ERR_WRONGSEC (:class:`FlavorChoice`, sans I/O), and the look-ups that try them
(:func:`negotiate`).

Without ``sec=`` the mount tries AUTH_SYS and, if the server wants another flavour, those its
SECINFO names for the export, in the server's order, that this client speaks. With ``sec=``
only the flavours given are tried; when the server takes none of them the error names what it
wants (from SECINFO).

A Kerberos flavour gives each user a credential of their own, made from their ticket cache
(``KRB5CCNAME``, else Kerberos' default for the user), for the server's principal ``nfs/HOST``
(:class:`UserCredentials`). The lease and state operations (EXCHANGE_ID, CREATE_SESSION, SEQUENCE
alone, DESTROY_*) go with the machine's key from a keytab (:func:`machine_credential`), else under
AUTH_SYS, as the Linux client does when it has no keytab.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .._errors import NFS4Error
from .._proto import rpcsec_gss as gss
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential, auth_sys
from .._rpc.gss_auth import GssCredential
from .._rpc.krb5 import Krb5Mechanism, target_name
from .nfs4 import NFSv4

DEFAULT: tuple[gss.Flavor, ...] = (gss.SYS,)


class SecurityError(PermissionError):
    """The server takes none of the flavours this mount may use (EACCES, naming what it wants)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, message)

    def __str__(self) -> str:
        return str(self.strerror)


def parse_sec(value: str | None) -> tuple[gss.Flavor, ...]:
    """The flavours ``sec=`` names, in order (ValueError for one this client does not speak)."""
    if value is None:
        return DEFAULT
    names = [n.strip().lower() for n in value.split(":") if n.strip()]
    unknown = [n for n in names if n not in gss.FLAVORS]
    if unknown or not names:
        raise ValueError(f"sec={value}: unknown security flavour {', '.join(unknown) or '(none)'} "
                         f"(known: {', '.join(gss.FLAVORS)}, separated by ':')")
    return tuple(dict.fromkeys(gss.FLAVORS[n] for n in names))


@dataclass
class FlavorChoice:
    """Which flavour to try next: those given, in order; without ``sec=`` (``given`` False), then
    those the server's SECINFO names that were not tried yet."""

    flavors: Sequence[gss.Flavor] = DEFAULT
    given: bool = False
    tried: list[gss.Flavor] = field(default_factory=list)
    wanted: list[gss.Flavor] | None = None  # what SECINFO said, once asked
    xprtsec: str = "none"  # the connections' transport security (nfs(5)'s xprtsec=: none, tls, mtls)

    def next(self) -> gss.Flavor | None:
        """The next flavour to try; None once the given ones are used up and (without ``sec=``) the
        server's are too, or when the server must be asked first (``wanted`` is None)."""
        for f in self.flavors:
            if f not in self.tried:
                self.tried.append(f)
                return f
        if self.given or self.wanted is None:
            return None
        for f in self.wanted:
            if f not in self.tried:
                self.tried.append(f)
                return f
        return None

    @property
    def must_ask(self) -> bool:
        """The flavours to try are used up: SECINFO should say what the server wants."""
        return self.wanted is None

    def refusal(self, where: str) -> str:
        tried = ":".join(f.name for f in self.tried)
        if self.wanted is None:
            return f"{where}: the server refused sec={tried} (NFS4ERR_WRONGSEC)"
        if self.wanted and set(self.wanted) <= set(self.tried) and self.xprtsec != "mtls":
            # every flavour the server names was refused: what it wants is the connection's
            # security (Linux's nfsd so refuses an export of xprtsec=tls or mtls over less)
            more = "xprtsec=tls or mtls" if self.xprtsec == "none" else "xprtsec=mtls"
            return (f"{where}: the server refused sec={tried}, which it names itself: the export wants "
                    f"more transport security than xprtsec={self.xprtsec} (RPC-with-TLS: {more}) "
                    "(NFS4ERR_WRONGSEC)")
        wants = ", ".join(f.name for f in self.wanted) or "no flavour this client speaks"
        return f"{where}: the server wants sec={wants}; refused sec={tried} (NFS4ERR_WRONGSEC)"


def credential(flavor: gss.Flavor, host: str, uid: int, gid: int, groups: tuple[int, ...] = (),
               ccache: str | None = None) -> Credential:
    """The credential of user ``uid`` under ``flavor`` toward the server at ``host``: AUTH_SYS, or
    RPCSEC_GSS with a Kerberos context from the user's tickets (``ccache``, else the default)."""
    if not flavor.gss:
        return auth_sys(uid, gid, groups)
    target = target_name(host)
    return GssCredential(flavor, lambda: Krb5Mechanism(target, ccache=ccache), uid, gid, groups)


SYSTEM_KEYTAB = "/etc/krb5.keytab"


def machine_credential(host: str, keytab: str | None, flavors: Sequence[gss.Flavor], fallback: Credential,
                       tag: str) -> Credential:
    """The credential of the lease and state operations (EXCHANGE_ID, CREATE_SESSION, SEQUENCE alone,
    DESTROY_*): Kerberos (krb5i) with the first key of ``keytab`` (``keytab=``; or the system's
    /etc/krb5.keytab when it can be read and a Kerberos flavour was asked for), else ``fallback``
    (AUTH_SYS, as the Linux client does without a keytab). ``tag`` names the in-memory cache its
    tickets go to (one per client: the user's caches are not touched)."""
    if keytab is None:
        if not any(f.gss for f in flavors) or not os.access(SYSTEM_KEYTAB, os.R_OK):
            return fallback
        keytab = SYSTEM_KEYTAB
    target = target_name(host)
    cache = f"MEMORY:pynfsrdma-{tag}"
    return GssCredential(gss.KRB5I, lambda: Krb5Mechanism(target, keytab=keytab, ccache=cache), 0,
                         0, (), who=f"this machine (keytab {keytab})")


def default_ccache(uid: int) -> str:
    """Kerberos' own default ticket cache of user ``uid`` (where kinit leaves a ticket when nothing
    else is configured; rpc.gssd looks there too)."""
    return f"FILE:/tmp/krb5cc_{uid}"


class UserCredentials:
    """A mount's credential for each calling user under its flavour: AUTH_SYS, or RPCSEC_GSS from
    the user's own ticket cache, one credential (and context) per user and cache: a user's context
    is never used for another user's call."""

    def __init__(self, flavor: gss.Flavor, host: str, own_uid: int | None = None) -> None:
        self.flavor = flavor
        self.host = host
        self.own_uid = os.getuid() if own_uid is None else own_uid
        self._gss: dict[tuple[int, str | None], Credential] = {}

    def get(self, uid: int, gid: int, groups: tuple[int, ...] = (), ccache: str | None = None) -> Credential:
        """``uid``'s credential; ``ccache``: the caller's own cache (from its KRB5CCNAME), else the
        default: this process's for its own user, Kerberos' default for another."""
        if not self.flavor.gss:
            return auth_sys(uid, gid, groups)
        if ccache is None and uid != self.own_uid:
            ccache = default_ccache(uid)
        key = (uid, ccache)
        cred = self._gss.get(key)
        if cred is None:
            cred = self._gss[key] = credential(self.flavor, self.host, uid, gid, groups, ccache)
        return cred

    def made(self) -> list[Credential]:
        """The RPCSEC_GSS credentials given out (their contexts are destroyed at unmount)."""
        return list(self._gss.values())


async def negotiate(ops: NFSv4, export: str, probe: str, choice: FlavorChoice, sys_cred: Credential,
                 make: Callable[[gss.Flavor], Credential]) -> Credential:
    """Look up ``export`` (and ``probe`` below it, whose security decides) with each flavour ``choice``
    gives in turn, until the server takes one (NFS4ERR_WRONGSEC: the next; once they are used up,
    SECINFO says what the server wants); returns the credential it took. :class:`SecurityError`
    (EACCES) names what the server wants."""
    while True:
        flavor = choice.next()
        if flavor is None:
            if not choice.must_ask:
                raise SecurityError(choice.refusal(f"{ops.client.server}:{probe}"))
            choice.wanted = await ops.names.secinfo(probe, sys_cred)
            continue
        cred = sys_cred if not flavor.gss else make(flavor)
        try:
            root, _ = await ops.names.mount(export, cred)
            names = [n for n in probe[len(export):].split("/") if n]
            if names:
                try:
                    await ops.names.lookup_path(root, names, cred)
                except NFS4Error as e:
                    if e.status == c.NFS4ERR_WRONGSEC:
                        raise
                    # (a name not there yet: the server took the flavour up to it)
        except NFS4Error as e:
            if e.status != c.NFS4ERR_WRONGSEC:
                raise
            continue
        return cred
