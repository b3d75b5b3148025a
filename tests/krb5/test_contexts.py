"""Kerberos contexts over time against the real KDC and NFS-Ganesha: two users each with their own
ticket (the server sees two principals), a context the server lost in a restart made again without
losing the call, and a ticket that expires (EACCES saying so) then renewed by kinit while the client
goes on."""

from __future__ import annotations

import errno
import logging
import uuid
from pathlib import Path

import pytest
import trio
from krb5_support import KerberosUser

from pynfsrdma._client.api import Client
from pynfsrdma._rpc.gss_auth import GssCredential
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.kdc import Kdc


def url_of(server: Ganesha, where: ExportPath, sec: str) -> str:
    return f"nfs://{server.host}:{server.port}{where.remote}?sec={sec}"


def new_user(kdc: Kdc, tmp_path: Path, lifetime: str | None = None) -> tuple[str, str, str]:
    name = f"user{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    kdc.add_user(name, password)
    return name, password, kdc.kinit(name, password, tmp_path / f"{name}.cc", lifetime=lifetime)


async def test_two_users_each_with_their_own_ticket(
    kdc: Kdc, krb5_ganesha: Ganesha, krb5_dir: ExportPath, tmp_path: Path
) -> None:
    _, _, alice = new_user(kdc, tmp_path)
    _, _, bob = new_user(kdc, tmp_path)
    url = url_of(krb5_ganesha, krb5_dir, "krb5i")
    async with Client.connect(url, ccache=alice) as a, Client.connect(url, ccache=bob) as b:
        assert a.cred is not b.cred
        await a.write_file("/alice", b"from alice")
        await b.write_file("/bob", b"from bob")
        assert sorted(await a.listdir("/")) == ["alice", "bob"]
        assert await b.read_file("/alice") == b"from alice"
    # a user without a ticket of their own, beside them, gets nothing of theirs
    with pytest.raises(PermissionError) as info:
        async with Client.connect(url, ccache=f"FILE:{tmp_path}/nobody.cc"):
            pass
    assert info.value.errno == errno.EACCES and "no Kerberos credentials" in str(info.value)


async def test_a_context_the_server_lost_in_a_restart_is_made_again(
    krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser, caplog: pytest.LogCaptureFixture
) -> None:
    async with Client.connect(url_of(krb5_ganesha, krb5_dir, "krb5p"), hard=True) as nfs:
        await nfs.write_file("/before", b"1")
        await krb5_ganesha.arestart()  # (contexts live in the server's memory only)
        with caplog.at_level(logging.INFO):
            await nfs.write_file("/after", b"2")
        assert await nfs.read_file("/before") == b"1"
        assert sorted(await nfs.listdir("/")) == ["after", "before"]
    assert any("lost the RPCSEC_GSS context" in r.getMessage() for r in caplog.records)
    assert (krb5_dir.local / "after").read_bytes() == b"2"


async def test_an_expired_ticket_gets_eacces_until_kinit_again(
    kdc: Kdc, krb5_ganesha: Ganesha, krb5_dir: ExportPath, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, password, ccache = new_user(kdc, tmp_path, lifetime="6s")
    monkeypatch.setenv("KRB5CCNAME", ccache)
    async with Client.connect(url_of(krb5_ganesha, krb5_dir, "krb5")) as nfs:
        await nfs.write_file("/one", b"1")
        await trio.sleep(7)
        with pytest.raises(PermissionError) as info:
            await nfs.write_file("/two", b"2")
        assert info.value.errno == errno.EACCES
        assert "expired Kerberos credentials for uid" in str(info.value)
        # (the request never reached the server: its slot is not left in doubt)
        session = nfs.clientid.session
        assert session is not None and not any(s.interrupted for s in session.table.slots.values())
        kdc.kinit(name, password, ccache.removeprefix("FILE:"))
        await nfs.write_file("/two", b"2")
        assert sorted(await nfs.listdir("/")) == ["one", "two"]


async def test_the_lease_and_state_operations_go_with_the_machines_keytab(
    kdc: Kdc, krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser, tmp_path: Path
) -> None:
    keytab = kdc.service_keytab("host/localhost", tmp_path / "machine.keytab")
    async with Client.connect(url_of(krb5_ganesha, krb5_dir, "krb5p"), keytab=str(keytab)) as nfs:
        machine = nfs.clientid.machine_cred
        assert isinstance(machine, GssCredential) and machine.flavor.name == "krb5i" and machine.established
        assert machine is not nfs.cred
        await nfs.write_file("/m", b"state under the machine's key, data under the user's")
        assert await nfs.read_file("/m") == b"state under the machine's key, data under the user's"
    assert not machine.established  # (destroyed at the end, after DESTROY_CLIENTID)


async def test_a_keytab_that_is_not_there_is_a_clear_error(
    krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser, tmp_path: Path
) -> None:
    with pytest.raises(PermissionError) as info:
        async with Client.connect(url_of(krb5_ganesha, krb5_dir, "krb5"), keytab=f"{tmp_path}/none.keytab"):
            pass
    assert info.value.errno == errno.EACCES
    assert f"no Kerberos credentials for this machine (keytab {tmp_path}/none.keytab)" in str(info.value)
