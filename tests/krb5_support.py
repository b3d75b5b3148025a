"""What the Kerberos tests share besides their fixtures (conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass

KERBEROS_SECTYPES = ("krb5", "krb5i", "krb5p")


@dataclass
class KerberosUser:
    principal: str
    password: str
    ccache: str  # FILE:path
