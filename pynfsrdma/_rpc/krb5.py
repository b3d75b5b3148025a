"""Kerberos V5 as the GSS-API mechanism of RPCSEC_GSS, through the ``gssapi`` package
(``pip install pynfsrdma[krb5]``; it builds against MIT Kerberos' libgssapi_krb5).

:class:`Krb5Mechanism` is one initiator context toward the server's service principal
(``nfs@HOST``, a host-based service name: ``nfs/HOST@REALM``), made with the credentials of a
Kerberos ticket cache: the one named (``ccache=``), else the process's own (``KRB5CCNAME`` or the
library's default for this user), or with a keytab's key (``keytab=``: the machine's credential).
Its failures are :mod:`.rpcsec_gss`'s errors, so nothing above this module knows ``gssapi``.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any

from .rpcsec_gss import GssCredentialsExpired, GssError, GssIntegrityError

NFS_SERVICE = "nfs"  # the service part of an NFS server's principal (RFC 7530 section 3.2.1.1)
INSTALL_HINT = "Kerberos needs the gssapi package: pip install 'pynfsrdma[krb5]' (with libkrb5-dev)"


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError as e:
        raise GssError(INSTALL_HINT) from e
    return gssapi


def server_host(host: str) -> str:
    """The host name in the server's principal: ``host`` itself, or for an address the name it
    resolves back to (as rpc.gssd does), e.g. 127.0.0.1 -> localhost."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host
    try:
        return socket.gethostbyaddr(host)[0]
    except OSError as e:
        raise GssError(f"the server's address {host} has no host name for its Kerberos principal ({e})") from e


def target_name(host: str) -> str:
    return f"{NFS_SERVICE}@{server_host(host)}"


class Krb5Mechanism:
    """One Kerberos V5 initiator context (mutual authentication, no replay or sequence checks: RPC
    messages may arrive in any order, and RPCSEC_GSS has its own window)."""

    def __init__(self, target: str, *, ccache: str | None = None, keytab: str | None = None,
                 principal: str | None = None) -> None:
        gssapi = _gssapi()
        self._gssapi = gssapi
        store: dict[bytes, bytes] = {}
        if ccache:
            store[b"ccache"] = ccache.encode()
        if keytab:
            store[b"client_keytab"] = keytab.encode()
        name = gssapi.Name(principal, gssapi.NameType.kerberos_principal) if principal else None
        try:
            creds = gssapi.Credentials(name=name, usage="initiate", store=store or None)
            if creds.lifetime == 0:
                raise GssCredentialsExpired("the Kerberos ticket has expired (run kinit)")
            self.principal = str(creds.name)
            self._ctx = gssapi.SecurityContext(
                name=gssapi.Name(target, gssapi.NameType.hostbased_service),
                creds=creds,
                usage="initiate",
                mech=gssapi.MechType.kerberos,
                flags=gssapi.RequirementFlag.mutual_authentication,
            )
        except gssapi.exceptions.ExpiredCredentialsError as e:
            raise GssCredentialsExpired(f"the Kerberos ticket has expired (run kinit): {_say(e)}") from e
        except gssapi.exceptions.GSSError as e:
            raise GssError(_say(e)) from e
        self.target = target

    @property
    def complete(self) -> bool:
        return bool(self._ctx.complete)

    @property
    def expired(self) -> bool:
        if not self._ctx.complete:
            return False
        try:
            return bool(self._ctx.lifetime <= 0)
        except self._gssapi.exceptions.GSSError:  # (ExpiredContextError)
            return True

    def step(self, token: bytes | None) -> bytes | None:
        try:
            out = self._ctx.step(token)
        except self._gssapi.exceptions.ExpiredCredentialsError as e:
            raise GssCredentialsExpired(f"the Kerberos ticket has expired (run kinit): {_say(e)}") from e
        except self._gssapi.exceptions.GSSError as e:
            raise GssError(f"Kerberos context for {self.target}: {_say(e)}") from e
        return bytes(out) if out else None

    def get_mic(self, message: bytes) -> bytes:
        try:
            return bytes(self._ctx.get_signature(message))
        except self._gssapi.exceptions.GSSError as e:
            raise self._failed(e) from e

    def verify_mic(self, message: bytes, mic: bytes) -> None:
        try:
            self._ctx.verify_signature(message, mic)
        except self._gssapi.exceptions.GSSError as e:
            raise self._failed(e, integrity=True) from e

    def wrap(self, message: bytes) -> bytes:
        try:
            res = self._ctx.wrap(message, True)
        except self._gssapi.exceptions.GSSError as e:
            raise self._failed(e) from e
        if not res.encrypted:
            raise GssError("the Kerberos context cannot encrypt")
        return bytes(res.message)

    def unwrap(self, token: bytes) -> bytes:
        try:
            res = self._ctx.unwrap(token)
        except self._gssapi.exceptions.GSSError as e:
            raise self._failed(e, integrity=True) from e
        if not res.encrypted:
            raise GssIntegrityError("a reply under privacy came back unencrypted")
        return bytes(res.message)

    def _failed(self, e: Exception, integrity: bool = False) -> GssError:
        if isinstance(e, self._gssapi.exceptions.ExpiredContextError):
            return GssCredentialsExpired(f"the Kerberos context expired: {_say(e)}")
        return GssIntegrityError(_say(e)) if integrity else GssError(_say(e))


def _say(e: Exception) -> str:
    """gssapi's message without its status numbers: the minor (mechanism) part says what happened,
    e.g. "No Kerberos credentials available (default cache: FILE:/tmp/krb5cc_1000)"."""
    text = str(e)
    match = _STATUS.search(text)
    if match is None:
        return text
    minor = match.group("minor").strip()
    return minor if minor and minor not in ("Unknown error", "Success") else match.group("major").strip()


_STATUS = re.compile(r"Major \(\d+\): (?P<major>.*?), Minor \(\d+\): (?P<minor>.*)$", re.S)
