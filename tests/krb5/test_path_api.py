"""The path API under Kerberos against a real KDC and a real NFS-Ganesha whose export takes krb5, krb5i
and krb5p only: each flavour does the whole round (create, write, read back, list, rename, remove),
the flavour is negotiated when none is named, a flavour the export refuses gets an error naming what
it wants, and a user with no ticket gets EACCES and a log line naming the uid."""

from __future__ import annotations

import errno
import logging
import os

import pytest
from krb5_support import KERBEROS_SECTYPES, KerberosUser

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def url_of(server: Ganesha, where: ExportPath, sec: str | None = None) -> str:
    return f"nfs://{server.host}:{server.port}{where.remote}" + (f"?sec={sec}" if sec else "")


@pytest.mark.parametrize("sec", KERBEROS_SECTYPES)
async def test_each_flavour_creates_writes_reads_lists_renames_and_removes(
    krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser, sec: str
) -> None:
    data = os.urandom(3 * (1 << 20) + 777)  # several READs and WRITEs
    async with Client.connect(url_of(krb5_ganesha, krb5_dir, sec)) as nfs:
        assert nfs.sec == sec
        await nfs.mkdir("/d")
        await nfs.write_file("/d/f", data)
        assert await nfs.read_file("/d/f") == data
        assert await nfs.listdir("/d") == ["f"]
        await nfs.rename("/d/f", "/d/g")
        assert await nfs.listdir("/d") == ["g"]
        assert (await nfs.stat("/d/g")).size == len(data)
        assert (krb5_dir.local / "d" / "g").read_bytes() == data
        await nfs.remove("/d/g")
        assert await nfs.listdir("/d") == []
    assert not (krb5_dir.local / "d" / "g").exists()


async def test_without_sec_the_flavour_the_server_names_first_is_used(
    krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser
) -> None:
    async with Client.connect(url_of(krb5_ganesha, krb5_dir)) as nfs:
        assert nfs.sec == "krb5p"  # AUTH_SYS got NFS4ERR_WRONGSEC; SECINFO lists krb5p first
        await nfs.write_file("/x", b"negotiated")
    assert (krb5_dir.local / "x").read_bytes() == b"negotiated"


async def test_a_list_of_flavours_goes_on_past_those_refused(
    krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser
) -> None:
    async with Client.connect(url_of(krb5_ganesha, krb5_dir, "sys:krb5i")) as nfs:
        assert nfs.sec == "krb5i"


async def test_a_flavour_the_export_refuses_names_what_it_wants(
    krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser
) -> None:
    with pytest.raises(PermissionError) as info:
        async with Client.connect(url_of(krb5_ganesha, krb5_dir, "sys")):
            pass
    assert info.value.errno == errno.EACCES
    assert "the server wants sec=krb5p, krb5i, krb5; refused sec=sys" in str(info.value)


async def test_an_unknown_flavour_is_a_clear_error(krb5_ganesha: Ganesha, krb5_dir: ExportPath) -> None:
    with pytest.raises(ValueError, match=r"sec=krb6: unknown security flavour krb6 \(known: sys, krb5"):
        async with Client.connect(url_of(krb5_ganesha, krb5_dir, "krb6")):
            pass


async def test_a_user_without_a_ticket_gets_eacces_and_a_log_line(
    krb5_ganesha: Ganesha, krb5_dir: ExportPath, tmp_path: object, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, kdc: object,
) -> None:
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/no-such-cache")
    with caplog.at_level(logging.WARNING), pytest.raises(PermissionError) as info:
        async with Client.connect(url_of(krb5_ganesha, krb5_dir, "krb5")):
            pass
    uid = os.getuid()
    assert info.value.errno == errno.EACCES
    assert f"no Kerberos credentials for uid {uid}" in str(info.value)
    assert "No Kerberos credentials available" in str(info.value)
    assert any(f"no Kerberos credentials for uid {uid}" in r.getMessage() for r in caplog.records)
