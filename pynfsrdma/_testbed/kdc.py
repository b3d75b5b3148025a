"""A local MIT Kerberos KDC for tests and the testbed: its own realm, database and configuration under a
directory of its own, on a free loopback port; nothing of the host's (/etc/krb5.conf) is read or changed.

::

    with Kdc() as kdc:                             # realm PYNFSRDMA.TEST on 127.0.0.1:PORT
        keytab = kdc.service_keytab("nfs/localhost")   # for NFS-Ganesha
        kdc.add_user("alice", "secret")
        kdc.kinit("alice", "secret", ccache)       # a ticket cache for the client
        os.environ.update(kdc.environment)         # KRB5_CONFIG for every Kerberos user of this realm

Clients and servers find the realm through :attr:`Kdc.environment` (``KRB5_CONFIG`` naming
:attr:`Kdc.config_path`). The configuration keeps host names as they are (no DNS canonicalisation,
no reverse lookups), so the server's principal on loopback is ``nfs/localhost``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .ganesha import find_free_port, process_listens_on

__all__ = ["KDC_INSTALL_HINT", "Kdc", "KdcError", "KdcNotInstalled"]

KDC_INSTALL_HINT = "apt-get install krb5-kdc krb5-admin-server krb5-user"
REALM = "PYNFSRDMA.TEST"
SERVER_HOST = "localhost"  # the host part of the NFS server's principal on loopback
TICKET_LIFETIME = "10h"
_TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit", "kdestroy")
_SBIN = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")


class KdcError(RuntimeError):
    """The KDC could not be made, started or asked; the message says what the tool said."""


class KdcNotInstalled(KdcError):
    """A Kerberos tool is missing."""


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for directory in _SBIN:
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    raise KdcNotInstalled(f"{name} not found: {KDC_INSTALL_HINT}")


class Kdc:
    """One KDC process with its realm (``realm``), database and configuration under ``directory``."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, realm: str = REALM,
                 port: int | None = None, start_timeout: float = 10.0, detached: bool = False) -> None:
        self.tools = {name: _tool(name) for name in _TOOLS}
        self._owns_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="pynfsrdma-kdc-")).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.realm = realm
        self._port = port
        self.start_timeout = start_timeout
        self.detached = detached
        self._proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None

    # -- where things are ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port is None:
            raise KdcError("the port is chosen when the KDC starts")
        return self._port

    @property
    def config_path(self) -> Path:
        """krb5.conf for clients and servers of this realm (``KRB5_CONFIG``)."""
        return self.directory / "krb5.conf"

    @property
    def kdc_config_path(self) -> Path:
        """kdc.conf of this KDC (``KRB5_KDC_PROFILE``)."""
        return self.directory / "kdc.conf"

    @property
    def log_path(self) -> Path:
        return self.directory / "kdc.log"

    @property
    def environment(self) -> dict[str, str]:
        """What every program of this realm needs in its environment."""
        return {"KRB5_CONFIG": str(self.config_path), "KRB5_KDC_PROFILE": str(self.kdc_config_path)}

    def principal(self, name: str) -> str:
        return name if "@" in name else f"{name}@{self.realm}"

    # -- configuration ------------------------------------------------------------------------------
    def _write_config(self) -> None:
        d = self.directory
        self.config_path.write_text(
            "# Written by pynfsrdma._testbed.kdc: a realm on loopback for tests.\n"
            "[libdefaults]\n"
            f"    default_realm = {self.realm}\n"
            "    dns_lookup_kdc = false\n"
            "    dns_lookup_realm = false\n"
            "    dns_canonicalize_hostname = false\n"
            "    rdns = false\n"
            f"    ticket_lifetime = {TICKET_LIFETIME}\n"
            "    forwardable = true\n"
            "[realms]\n"
            f"    {self.realm} = {{\n"
            f"        kdc = 127.0.0.1:{self.port}\n"
            "    }\n"
            "[domain_realm]\n"
            f"    {SERVER_HOST} = {self.realm}\n"
        )
        self.kdc_config_path.write_text(
            "[kdcdefaults]\n"
            f"    kdc_ports = {self.port}\n"
            f"    kdc_tcp_ports = {self.port}\n"
            "[realms]\n"
            f"    {self.realm} = {{\n"
            f"        database_name = {d / 'principal'}\n"
            f"        key_stash_file = {d / 'stash'}\n"
            f"        acl_file = {d / 'kadm5.acl'}\n"
            f"        max_life = {TICKET_LIFETIME}\n"
            "    }\n"
            "[logging]\n"
            f"    kdc = FILE:{self.log_path}\n"
        )
        (d / "kadm5.acl").write_text("")

    def _run(self, tool: str, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run([self.tools[tool], *args], input=stdin, capture_output=True, text=True,
                              env={**os.environ, **self.environment}, timeout=30, check=False)
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip().splitlines()
            raise KdcError(f"{tool} {' '.join(args)} failed: {' / '.join(said[-3:]) or proc.returncode}")
        return proc.stdout

    def _kadmin(self, query: str) -> str:
        out = self._run("kadmin.local", "-q", query)
        return out

    # -- life cycle ---------------------------------------------------------------------------------
    def start(self) -> Kdc:
        """Make the realm's database (the first time) and start the KDC; wait until it listens."""
        if self._proc is not None:
            raise KdcError(f"the KDC runs already (pid {self.pid})")
        if self._port is None:
            self._port = find_free_port(["127.0.0.1"])
        self._write_config()
        if not (self.directory / "principal").exists():
            self._run("kdb5_util", "create", "-s", "-r", self.realm, "-P", os.urandom(12).hex())
        with open(self.directory / "kdc.out", "ab") as out:
            self._proc = subprocess.Popen(
                [self.tools["krb5kdc"], "-n", "-r", self.realm, "-P", str(self.directory / "kdc.pid")],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, **self.environment}, start_new_session=self.detached,
            )
        self.pid = self._proc.pid
        deadline = time.monotonic() + self.start_timeout
        while not process_listens_on(self._proc.pid, self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                said = (self.directory / "kdc.out").read_text(errors="replace").strip().splitlines()
                raise KdcError(f"krb5kdc did not start on 127.0.0.1:{self._port}: {' / '.join(said[-3:])}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        self.stop()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Kdc:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- principals, keytabs, tickets ---------------------------------------------------------------
    def service_keytab(self, principal: str, keytab: str | os.PathLike[str] | None = None) -> Path:
        """Make ``principal`` (e.g. ``nfs/localhost``) with a random key, written to ``keytab``."""
        path = Path(keytab) if keytab is not None else self.directory / f"{principal.replace('/', '_')}.keytab"
        self._kadmin(f"addprinc -randkey {self.principal(principal)}")
        self._kadmin(f"ktadd -k {path} {self.principal(principal)}")
        return path

    def add_user(self, name: str, password: str, *, lifetime: str | None = None) -> str:
        """Make a user principal with ``password`` (and a ticket lifetime of its own, e.g. "20s")."""
        life = f" -maxlife {lifetime}" if lifetime else ""
        self._kadmin(f"addprinc -pw {password}{life} {self.principal(name)}")
        return self.principal(name)

    def user_keytab(self, name: str, keytab: str | os.PathLike[str]) -> Path:
        """A keytab holding ``name``'s key as it is now (``-norandkey``: the password stays valid)."""
        self._kadmin(f"ktadd -norandkey -k {keytab} {self.principal(name)}")
        return Path(keytab)

    def kinit(self, name: str, password: str, ccache: str | os.PathLike[str], *,
              lifetime: str | None = None) -> str:
        """Get ``name``'s ticket into the cache ``ccache`` (a file path); returns ``FILE:path``."""
        cache = f"FILE:{ccache}"
        args = ["-c", cache, *(["-l", lifetime] if lifetime else []), self.principal(name)]
        self._run("kinit", *args, stdin=password + "\n")
        return cache

    def kdestroy(self, ccache: str) -> None:
        self._run("kdestroy", "-c", ccache)

    def kinit_command(self, name: str) -> str:
        """The shell command a user runs to get ``name``'s ticket from this KDC."""
        return f"KRB5_CONFIG={self.config_path} kinit {self.principal(name)}"
