"""The FUSE mount under Kerberos (a real KDC, NFS-Ganesha taking krb5, krb5i and krb5p only): each
flavour does the whole round through ordinary programs (shell, cat, ls, mv, rm), each calling process
goes with the ticket its KRB5CCNAME names (a user's context is never another's), and a user with no
ticket gets EACCES and a log line naming the uid."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Mount
from krb5_support import KERBEROS_SECTYPES, KerberosUser

from pynfsrdma._control_socket import Connection
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.kdc import Kdc

pytestmark = pytest.mark.fuse


def sh(script: str, ccache: str | None, *, user: int | None = None) -> subprocess.CompletedProcess[str]:
    """``script`` in a shell of its own: a program the mount serves, with its own environment."""
    env = {k: v for k, v in os.environ.items() if k != "KRB5CCNAME"}
    if ccache is not None:
        env["KRB5CCNAME"] = ccache
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=60,
                          user=user)


@pytest.mark.parametrize("sec", KERBEROS_SECTYPES)
def test_each_flavour_through_the_mount(
    mount_export: Callable[..., Mount], krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser,
    sec: str,
) -> None:
    m = mount_export(f"sec={sec}", subdir=krb5_dir.name, server=krb5_ganesha)
    d = m.path
    data = os.urandom(2 * (1 << 20) + 99).hex()
    (Path(str(m.path) + ".in")).write_text(data)
    done = sh(f"mkdir {d}/sub && cp {m.path}.in {d}/sub/f && cat {d}/sub/f > {m.path}.out && ls {d}/sub "
              f"&& mv {d}/sub/f {d}/sub/g && ls {d}/sub", krb5_user.ccache)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["f", "g"]
    assert Path(str(m.path) + ".out").read_text() == data
    assert (krb5_dir.local / "sub" / "g").read_text() == data
    done = sh(f"rm {d}/sub/g && rmdir {d}/sub && ls -A {d}", krb5_user.ccache)
    assert done.returncode == 0 and done.stdout == "", done.stderr
    with Connection(str(m.path)) as conn:  # (pynfsrdma stats MOUNTPOINT)
        assert conn.request("stats")["sec"] == sec
    for suffix in (".in", ".out"):
        Path(str(m.path) + suffix).unlink()


def test_each_caller_goes_with_its_own_ticket_and_one_without_gets_eacces(
    mount_export: Callable[..., Mount], kdc: Kdc, krb5_ganesha: Ganesha, krb5_dir: ExportPath,
    krb5_user: KerberosUser, tmp_path: Path,
) -> None:
    m = mount_export("sec=krb5i", subdir=krb5_dir.name, server=krb5_ganesha)
    other = f"other{uuid.uuid4().hex[:6]}"
    kdc.add_user(other, "pw-other")
    other_cc = kdc.kinit(other, "pw-other", tmp_path / "other.cc")
    assert sh(f"echo mine > {m.path}/mine", krb5_user.ccache).returncode == 0
    assert sh(f"echo theirs > {m.path}/theirs", other_cc).returncode == 0
    done = sh(f"cat {m.path}/mine {m.path}/theirs", other_cc)
    assert done.stdout == "mine\ntheirs\n", done.stderr

    # another local user (65534) with a ticket of its own, in a cache it owns: its calls go with it
    third = f"third{uuid.uuid4().hex[:6]}"
    kdc.add_user(third, "pw-third")
    third_cc = kdc.kinit(third, "pw-third", tmp_path / "third.cc")
    os.chown(third_cc.removeprefix("FILE:"), 65534, 65534)
    done = sh(f"echo from-65534 > {m.path}/third && cat {m.path}/mine", third_cc, user=65534)
    assert done.returncode == 0 and done.stdout == "mine\n", done.stderr
    assert (krb5_dir.local / "third").read_text() == "from-65534\n"

    # without it, uid 65534 has no ticket: EACCES, and the daemon's log says whose tickets are missing
    done = sh(f"ls {m.path}", None, user=65534)
    assert done.returncode != 0 and "Permission denied" in done.stderr
    assert "no Kerberos credentials for uid 65534" in m.log.read_text()
    # another user's cache named in one's environment is not lent: still nobody's (missing) tickets
    done = sh(f"ls {m.path}", krb5_user.ccache, user=65534)
    assert done.returncode != 0 and "Permission denied" in done.stderr


def test_an_expired_ticket_then_kinit_and_the_mount_goes_on(
    mount_export: Callable[..., Mount], kdc: Kdc, krb5_ganesha: Ganesha, krb5_dir: ExportPath, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = f"short{uuid.uuid4().hex[:6]}"
    kdc.add_user(name, "pw-short")
    ccache = kdc.kinit(name, "pw-short", tmp_path / "short.cc", lifetime="6s")
    monkeypatch.setenv("KRB5CCNAME", ccache)  # (the mounting user's own, for the mount itself)
    m = mount_export("sec=krb5", subdir=krb5_dir.name, server=krb5_ganesha)
    assert sh(f"echo one > {m.path}/one", ccache).returncode == 0
    time.sleep(7)
    done = sh(f"echo two > {m.path}/two", ccache)
    assert done.returncode != 0 and "Permission denied" in done.stderr
    assert f"expired Kerberos credentials for uid {os.getuid()}" in m.log.read_text()
    kdc.kinit(name, "pw-short", tmp_path / "short.cc")
    done = sh(f"echo two > {m.path}/two && cat {m.path}/one {m.path}/two", ccache)
    assert done.returncode == 0 and done.stdout == "one\ntwo\n", done.stderr


@pytest.mark.recovers
def test_a_server_restart_loses_the_contexts_and_the_mount_goes_on(
    mount_export: Callable[..., Mount], krb5_ganesha: Ganesha, krb5_dir: ExportPath, krb5_user: KerberosUser,
) -> None:
    m = mount_export("sec=krb5p,hard", subdir=krb5_dir.name, server=krb5_ganesha)
    assert sh(f"echo before > {m.path}/before", krb5_user.ccache).returncode == 0
    krb5_ganesha.restart()
    done = sh(f"echo after > {m.path}/after && cat {m.path}/before {m.path}/after", krb5_user.ccache)
    assert done.returncode == 0 and done.stdout == "before\nafter\n", done.stderr
    assert (krb5_dir.local / "after").read_text() == "after\n"
