"""``pynfsrdma testbed up --krb5 --json``: a KDC and a Kerberos-only export, and what a user needs to use
them (KRB5_CONFIG, the realm, the kinit command): the test runs that kinit, then the CLI against the
export under each flavour, and ``down`` stops the KDC with the server."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pynfsrdma._testbed import daemon
from pynfsrdma._testbed.procs import pid_alive

pytestmark = pytest.mark.ganesha


@pytest.fixture
def state_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="tbk-", dir="/tmp"))
    yield directory
    daemon.down(directory)
    shutil.rmtree(directory, ignore_errors=True)


def cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", *args], capture_output=True, text=True,
                          timeout=60, env=env, input=stdin)


def run_testbed(state_dir: Path, *args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "pynfsrdma._cli.testbed", *args, "--dir", str(state_dir)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if "--json" in args else done


def test_up_krb5_gives_what_a_user_needs_and_down_stops_the_kdc(state_dir: Path, tmp_path: Path) -> None:
    info = run_testbed(state_dir, "up", "--krb5", "--json")
    k = info["krb5"]
    assert k["realm"] == "PYNFSRDMA.TEST" and k["service_principal"] == "nfs/localhost@PYNFSRDMA.TEST"
    assert k["sec"] == ["krb5", "krb5i", "krb5p"]
    assert Path(k["env"]["KRB5_CONFIG"]).is_relative_to(state_dir)  # nothing of /etc is used or changed
    assert pid_alive(k["pid"]) and pid_alive(info["server"]["pid"])
    Path(info["export_dir"]).chmod(0o777)

    # the kinit command the JSON gives, as a user types it (password on standard input)
    ccache = f"FILE:{tmp_path}/cc"
    env = {**os.environ, "KRB5CCNAME": ccache}
    words = shlex.split(k["kinit"])
    assert words[0] == f"KRB5_CONFIG={k['env']['KRB5_CONFIG']}"
    done = subprocess.run(words[1:], input=k["password"] + "\n", capture_output=True, text=True,
                          env={**env, **k["env"]}, timeout=30)
    assert done.returncode == 0, done.stderr
    env.update(k["env"])

    url = info["url"]
    local = tmp_path / "hello.txt"
    local.write_bytes(b"hello over krb5p\n")
    for sec in k["sec"]:
        done = cli("put", str(local), f"{url}/{sec}.txt?sec={sec}", env=env)
        assert done.returncode == 0, done.stderr
    done = cli("ls", url, env=env)  # no sec=: negotiated from SECINFO
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["krb5.txt", "krb5i.txt", "krb5p.txt"]
    assert cli("cat", f"{url}/krb5i.txt", env=env).stdout == "hello over krb5p\n"

    # without a ticket: EACCES, saying so; with sec=sys: the flavours the export wants
    done = cli("ls", f"{url}?sec=krb5", env={**env, "KRB5CCNAME": f"FILE:{tmp_path}/none"})
    assert done.returncode == 1 and f"no Kerberos credentials for uid {os.getuid()}" in done.stderr
    done = cli("ls", f"{url}?sec=sys", env=env)
    assert done.returncode == 1 and "the server wants sec=krb5p, krb5i, krb5" in done.stderr

    down = run_testbed(state_dir, "down", "--json")
    assert k["pid"] in down["stopped_pids"] and not pid_alive(k["pid"])
    assert not state_dir.exists()
