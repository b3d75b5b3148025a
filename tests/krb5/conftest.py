"""Fixtures for Kerberos: one MIT KDC and one NFS-Ganesha whose export takes krb5, krb5i and krb5p,
for the whole run (started on first use), and users with tickets of their own.

- ``kdc`` (session): a :class:`~pynfsrdma.testbed.kdc.Kdc` on loopback; ``KRB5_CONFIG`` points at its
  realm for the whole run (the client's gssapi reads it).
- ``krb5_ganesha`` (session): NFS-Ganesha with the ``nfs/localhost`` key, SecType = krb5, krb5i, krb5p.
- ``krb5_user``: a user principal of this test's own with a ticket in a cache of its own, and
  ``KRB5CCNAME`` naming that cache for the test (what a user's ``kinit`` leaves).
- ``krb5_dir``: a fresh directory in the Kerberos export (mode 0777: the users map to nobody).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from krb5_support import KERBEROS_SECTYPES, KerberosUser

from pynfsrdma.testbed import Ganesha
from pynfsrdma.testbed.ganesha import ExportPath
from pynfsrdma.testbed.kdc import SERVER_HOST, Kdc


@pytest.fixture(scope="session")
def kdc() -> Iterator[Kdc]:
    with Kdc() as k:
        saved = {key: os.environ.get(key) for key in k.environment}
        os.environ.update(k.environment)
        try:
            yield k
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture(scope="session")
def krb5_ganesha(kdc: Kdc) -> Iterator[Ganesha]:
    keytab = kdc.service_keytab(f"nfs/{SERVER_HOST}")
    with Ganesha(sectype=KERBEROS_SECTYPES, keytab=keytab, environment=kdc.environment) as server:
        yield server


@pytest.fixture
def krb5_dir(krb5_ganesha: Ganesha) -> Iterator[ExportPath]:
    path = krb5_ganesha.new_directory()
    yield path
    shutil.rmtree(path.local, ignore_errors=True)


@pytest.fixture
def krb5_user(kdc: Kdc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KerberosUser:
    name = f"user{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    kdc.add_user(name, password)
    ccache = kdc.kinit(name, password, tmp_path / "ccache")
    monkeypatch.setenv("KRB5CCNAME", ccache)
    return KerberosUser(kdc.principal(name), password, ccache)
