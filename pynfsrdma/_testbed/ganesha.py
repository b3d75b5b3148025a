"""A local NFS-Ganesha (NFSv4.1/4.2 over TCP, VFS backend) for tests, benchmarks and the demo.

::

    with Ganesha() as server:          # a fresh temporary directory, a free port on 127.0.0.1
        print(server.url)              # nfs://127.0.0.1:PORT/export
        (server.export_dir / "f").write_bytes(b"seen over NFS as /export/f")
        server.restart()               # same port, same export and recovery directory

``Ganesha(version="9")`` runs NFS-Ganesha 9 from a Debian 13 root the testbed builds and caches
(:mod:`.debian_root`), as the root of a mount namespace of its own: the server's directory is
bind-mounted at ``/srv/pynfsrdma`` in it; the network (loopback, or the namespace of
``command_prefix``) is the caller's. ``PYNFSRDMA_GANESHA=9`` makes it the default version.

Everything the server writes (configuration, log, pid file, export, recovery records) lives under
:attr:`Ganesha.directory`. The export is the local directory :attr:`Ganesha.export_dir`, so a test can
check over the file system what it did over NFS.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from . import debian_root
from .procs import pid_alive

__all__ = [
    "INSTALL_HINT",
    "PSEUDO_PATH",
    "VERSIONS",
    "VERSION_ENV",
    "ExportPath",
    "Ganesha",
    "GaneshaError",
    "GaneshaNotInstalled",
    "default_version",
    "find_free_port",
    "find_ganesha_binary",
    "find_plugins_dir",
    "listening_inodes",
    "process_listens_on",
]

INSTALL_HINT = "apt-get install nfs-ganesha nfs-ganesha-vfs"
PSEUDO_PATH = "/export"
BINARY = "ganesha.nfsd"
BINARY_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")
_FSAL_VFS = "libfsalvfs.so"
_PLUGIN_DIR_PATTERNS = (
    "/usr/lib/x86_64-linux-gnu/ganesha",
    "/usr/lib/*-linux-gnu*/ganesha",
    "/usr/lib64/ganesha",
    "/usr/lib/ganesha",
    "/usr/local/lib/*-linux-gnu*/ganesha",
    "/usr/local/lib64/ganesha",
    "/usr/local/lib/ganesha",
)
# The servers the testbed runs: the host's (Debian 12's packages) and the one of the Debian 13 root.
VERSIONS = ("4.3", "9")
VERSION_ENV = "PYNFSRDMA_GANESHA"
_ROOT_BINARY = "/usr/bin/ganesha.nfsd"
_ROOT_PLUGINS_DIR = "/usr/lib/x86_64-linux-gnu/ganesha"
# In its own mount namespace: the server's directory at SERVER_MOUNT_POINT, /proc and /dev, then the
# root made the namespace's root and the host's tree detached from it, so that the namespace holds no
# copy of the host's other mounts (a copy of a FUSE mount made before the server started would keep
# that mount alive after its fusermount3 -u, and its daemon would never hear that it was unmounted);
# then the server (exec all the way: the pid started is the server's).
_ROOT_SCRIPT = (
    'mount --bind "$1" "$1" && mount --bind "$2" "$1$3" && mount -t proc proc "$1/proc" '
    '&& mount --rbind /dev "$1/dev" && cd "$1" && pivot_root . . && umount -l . && cd / '
    '&& shift 3 && exec "$@"'
)
# Log lines of a configuration the server accepted but did not understand (it would run without them).
_CONFIG_MISTAKES = ("Unknown parameter", "Unknown block")
# Log lines of a configuration the server could not read (a syntax error): 9 goes on starting after one
# and then fails for a reason of its own, the settings past the error lost.
_CONFIG_ERRORS = (":CONFIG :CRIT :", ":CONFIG :MAJ :")


@dataclass(frozen=True)
class ExportPath:
    """A directory inside the export, seen both ways: ``local`` on disk, ``remote`` over NFS."""

    local: Path  # e.g. /tmp/pynfsrdma-ganesha-x/export/t-1a2b3c
    remote: str  # e.g. /export/t-1a2b3c

    @property
    def name(self) -> str:
        return self.local.name


# glibc hands buffers of 1 MiB and more (each READ/WRITE payload) out of fresh mmap()s by default and
# unmaps them at free(): about a quarter of the server's CPU went to those page faults in a
# sequential read. With a 32 MiB threshold they come from the heap, reused. (The server's own
# tuning: every client measured against the testbed gains alike.)
SERVER_ENVIRONMENT = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20)}


class GaneshaError(RuntimeError):
    """NFS-Ganesha could not be started or stopped; the message quotes the end of its log."""


class GaneshaNotInstalled(GaneshaError):
    """ganesha.nfsd or its VFS backend is not installed."""


def default_version() -> str:
    """The version :class:`Ganesha` runs when none is given: ``$PYNFSRDMA_GANESHA``, else 4.3."""
    return os.environ.get(VERSION_ENV) or VERSIONS[0]


def find_ganesha_binary() -> str:
    """The path of ``ganesha.nfsd``, or :class:`GaneshaNotInstalled` naming the packages to install."""
    found = shutil.which(BINARY)
    if found:
        return found
    for directory in BINARY_DIRS:
        candidate = os.path.join(directory, BINARY)
        if os.access(candidate, os.X_OK):
            return candidate
    raise GaneshaNotInstalled(f"{BINARY} not found (on PATH, /usr/bin, /usr/sbin): {INSTALL_HINT}")


def find_plugins_dir() -> str:
    """The directory holding NFS-Ganesha's FSAL plugins (it must contain the VFS backend)."""
    for pattern in _PLUGIN_DIR_PATTERNS:
        for directory in sorted(glob.glob(pattern)):
            if os.path.exists(os.path.join(directory, _FSAL_VFS)):
                return directory
    raise GaneshaNotInstalled(f"NFS-Ganesha's VFS backend ({_FSAL_VFS}) not found: {INSTALL_HINT}")


def _bindable(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def find_free_port(addresses: Sequence[str] = ("127.0.0.1",), prefer: int | None = None) -> int:
    """A TCP port that is free on every one of ``addresses`` (``prefer`` if it is)."""
    if prefer and all(_bindable(a, prefer) for a in addresses):
        return prefer
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((addresses[0], 0))
            port = int(sock.getsockname()[1])
        if all(_bindable(a, port) for a in addresses):
            return port
    raise OSError(f"no TCP port free on all of {', '.join(addresses)}")


def listening_inodes(port: int, pid: int | str = "self") -> set[int]:
    """Socket inodes of every TCP listener on ``port`` in the network namespace of process ``pid``
    (this one's by default)."""
    inodes: set[int] = set()
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(int(fields[9]))
        except OSError:
            continue
    return inodes


def process_listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a listening TCP socket on ``port``."""
    inodes = listening_inodes(port, pid)
    if not inodes:
        return False
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if link.startswith("socket:[") and int(link[8:-1]) in inodes:
            return True
    return False


def _tail(path: Path, lines: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


class Ganesha:
    """One NFS-Ganesha server process with its own directory, export and port.

    ``grace`` None starts it graceless; a number of seconds gives a grace period after every
    (re)start, for reclaim tests. ``detached`` puts the server in its own session so that it outlives
    the Python process that started it (the CLI's ``testbed up`` uses that). ``command_prefix`` starts
    it through another command: ``ip netns exec NAME`` runs it in that network namespace (give
    ``port`` then: a free port is looked for in this process's namespace). ``minor_versions``: the
    NFSv4 minor versions it serves (``(1,)``: a server without NFSv4.2). ``version``: ``"4.3"`` (the
    host's ganesha.nfsd) or ``"9"`` (from the Debian 13 root, built on first use); default
    :func:`default_version`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        bind_address: str = "127.0.0.1",
        grace: int | None = None,
        lease: int = 20,
        server_owner: str | None = None,
        server_scope: str | None = None,
        extra_config: str = "",
        detached: bool = False,
        command_prefix: Sequence[str] = (),
        start_timeout: float = 10.0,
        stop_timeout: float = 10.0,
        sectype: Sequence[str] = ("sys",),
        keytab: str | os.PathLike[str] | None = None,
        environment: dict[str, str] | None = None,
        minor_versions: Sequence[int] = (1, 2),
        version: str | None = None,
    ) -> None:
        self.version = version or default_version()
        if self.version not in VERSIONS:
            raise GaneshaError(
                f"NFS-Ganesha version {self.version!r} is not one the testbed runs (one of {', '.join(VERSIONS)})"
            )
        self._root: Path | None = None
        if self.version == "4.3":
            self._binary = find_ganesha_binary()
            self._plugins_dir = find_plugins_dir()
        else:
            try:
                self._root = debian_root.build_root()
            except debian_root.DebianRootError as exc:
                raise GaneshaNotInstalled(str(exc)) from exc
            self._binary = _ROOT_BINARY
            self._plugins_dir = _ROOT_PLUGINS_DIR
        self._owns_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="pynfsrdma-ganesha-")).resolve()
        self._port = port
        self._port_given = port is not None
        self.bind_address = bind_address
        self.grace = grace
        self.lease = lease
        self.server_owner = server_owner
        self.server_scope = server_scope
        self.extra_config = extra_config
        self.detached = detached
        self.command_prefix = list(command_prefix)  # e.g. ip netns exec NAME: where the server runs
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.sectype = list(sectype)  # the export's SecType: sys, krb5, krb5i, krb5p
        self.keytab = Path(keytab) if keytab is not None else None  # Kerberos: the nfs/HOST key
        self.environment = dict(environment or {})  # e.g. KRB5_CONFIG of a testbed KDC
        self.minor_versions = tuple(minor_versions)  # the NFSv4 minor versions it serves
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        for sub in ("export", "recov"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)

    # -- where things are ---------------------------------------------------------------------------
    @property
    def host(self) -> str:
        """The address clients connect to."""
        return self.bind_address if self.bind_address not in ("", "0.0.0.0", "::") else "127.0.0.1"

    @property
    def port(self) -> int:
        if self._port is None:
            raise GaneshaError("the port is chosen when the server starts")
        return self._port

    @property
    def url(self) -> str:
        return f"nfs://{self.host}:{self.port}{PSEUDO_PATH}"

    @property
    def pseudo_path(self) -> str:
        return PSEUDO_PATH

    @property
    def export_dir(self) -> Path:
        """The local directory behind the export (``/export`` over NFS)."""
        return self.directory / "export"

    def new_directory(self, prefix: str = "t-") -> ExportPath:
        """Create a fresh, uniquely named directory in the export (directly on disk), writable by all."""
        name = f"{prefix}{uuid.uuid4().hex[:12]}"
        local = self.export_dir / name
        local.mkdir()
        local.chmod(0o777)
        return ExportPath(local, f"{PSEUDO_PATH}/{name}")

    @property
    def recovery_dir(self) -> Path:
        return self.directory / "recov"

    @property
    def config_path(self) -> Path:
        return self.directory / "ganesha.conf"

    @property
    def log_path(self) -> Path:
        return self.directory / "ganesha.log"

    @property
    def pid_path(self) -> Path:
        return self.directory / "ganesha.pid"

    @property
    def output_path(self) -> Path:
        """stdout and stderr of the server (what it says before its log is open)."""
        return self.directory / "ganesha.out"

    @property
    def command_marker(self) -> str:
        """A string the server's command line holds: its configuration file, as the server names it."""
        return self._seen(self.config_path)

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self._pid is not None and pid_alive(self._pid)

    # -- configuration ------------------------------------------------------------------------------
    def config_text(self) -> str:
        """The configuration file this server runs with."""
        bind = f"    Bind_Addr = {self.bind_address};\n" if self.bind_address else ""
        if self.grace is None:
            grace = "    Graceless = true;\n"
        else:
            grace = f"    Graceless = false;\n    Grace_Period = {int(self.grace)};\n"
        identity = ""
        if self.server_owner is not None:
            identity += f"    Server_Owner = {_quote(self.server_owner)};\n"
        if self.server_scope is not None:
            identity += f"    Server_Scope = {_quote(self.server_scope)};\n"
        return (
            "# Written by pynfsrdma._testbed.ganesha; every path is under this server's own directory.\n"
            "NFS_CORE_PARAM {\n"
            f"    NFS_Port = {self.port};\n"
            f"{bind}"
            "    Protocols = 4;\n"
            "    Enable_NLM = false;\n"
            "    Enable_RQUOTA = false;\n"
            "    Enable_UDP = false;\n"
            f"{self._version_config()}"
            f"    Plugins_Dir = {_quote(self._plugins_dir)};\n"
            "}\n"
            "NFSv4 {\n"
            f"{grace}"
            f"    Lease_Lifetime = {int(self.lease)};\n"
            f"    Minor_Versions = {', '.join(map(str, self.minor_versions))};\n"
            f"    RecoveryRoot = {_quote(self._seen(self.recovery_dir))};\n"
            f"{identity}"
            "}\n"
            f"{self._krb5_block()}"
            "LOG { Default_Log_Level = EVENT; }\n"
            "EXPORT {\n"
            "    Export_Id = 1;\n"
            f"    Path = {_quote(self._seen(self.export_dir))};\n"
            f"    Pseudo = {_quote(PSEUDO_PATH)};\n"
            "    Protocols = 4;\n"
            "    Transports = TCP;\n"
            "    Access_Type = RW;\n"
            "    Squash = No_Root_Squash;\n"
            f"    SecType = {', '.join(self.sectype)};\n"
            "    FSAL { Name = VFS; }\n"
            "}\n"
            f"{self.extra_config}\n"
        )

    def _version_config(self) -> str:
        if self.version == "4.3":
            return ""
        # 9 asks the kernel to treat it as an I/O flusher (PR_SET_IO_FLUSHER), which needs
        # CAP_SYS_RESOURCE: without this it stops at start where that capability is missing.
        return "    allow_set_io_flusher_fail = true;\n"

    def _seen(self, path: Path) -> str:
        """``path`` (in this server's directory) as the server sees it: in the Debian 13 root, the
        directory is at the root's SERVER_MOUNT_POINT."""
        if self._root is None:
            return str(path)
        return str(Path(debian_root.SERVER_MOUNT_POINT) / path.relative_to(self.directory))

    def _keytab_path(self) -> Path:
        """The keytab the server reads: the given one, or for the Debian 13 root a copy in the
        server's directory (the root sees no other host file)."""
        assert self.keytab is not None
        return self.keytab if self._root is None else self.directory / "krb5" / "keytab"

    def _krb5_block(self) -> str:
        if self.keytab is None:
            return "NFS_KRB5 { Active_krb5 = false; }\n"
        return ("NFS_KRB5 {\n    Active_krb5 = true;\n    PrincipalName = \"nfs\";\n"
                f"    KeytabPath = {_quote(self._seen(self._keytab_path()))};\n}}\n")

    # -- life cycle ---------------------------------------------------------------------------------
    def start(self) -> Ganesha:
        """Start the server and wait until it listens; :class:`GaneshaError` quoting its log if not."""
        if self.running:
            raise GaneshaError(f"NFS-Ganesha is already running (pid {self._pid})")
        attempts = 1 if self._port_given else 3
        for attempt in range(attempts):
            if not self._port_given and (attempt > 0 or self._port is None):
                self._port = find_free_port([self.host])
            try:
                self._start_once()
                return self
            except GaneshaError as exc:
                if attempt + 1 < attempts and "Address already in use" in str(exc):
                    continue  # another process took the free port we found; try another one
                raise
        raise AssertionError("unreachable")

    def _start_once(self) -> None:
        self.config_path.write_text(self.config_text())
        with contextlib.suppress(FileNotFoundError):
            self.pid_path.unlink()
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        server = [
            self._binary,
            "-F",
            "-L",
            self._seen(self.log_path),
            "-f",
            self._seen(self.config_path),
            "-p",
            self._seen(self.pid_path),
        ]
        if self._root is not None:
            self._copy_krb5_files()
            server = [
                "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _ROOT_SCRIPT, "sh",
                str(self._root), str(self.directory), debian_root.SERVER_MOUNT_POINT, *server,
            ]
        argv = [*self.command_prefix, *server]
        with open(self.output_path, "ab") as out:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=self.detached,
                env={**os.environ, **SERVER_ENVIRONMENT, **self._krb5_environment()},
            )
        self._pid = self._proc.pid
        deadline = time.monotonic() + self.start_timeout
        while True:
            status = self._proc.poll()
            if status is not None:
                self._proc = None
                raise GaneshaError(self._failure(f"exited with status {status} while starting", log_start))
            if process_listens_on(self._proc.pid, self.port):
                break
            if time.monotonic() > deadline:
                self._kill_now()
                raise GaneshaError(self._failure(f"did not listen within {self.start_timeout:g} s", log_start))
            time.sleep(0.01)
        mistakes = [line for line in self._log_since(log_start) if any(m in line for m in _CONFIG_MISTAKES)]
        if mistakes:
            self._kill_now()
            raise GaneshaError(
                f"NFS-Ganesha did not understand its configuration {self.config_path}:\n  "
                + "\n  ".join(mistakes)
            )

    def _krb5_environment(self) -> dict[str, str]:
        env = dict(self.environment)
        if self.keytab is not None:
            env.setdefault("KRB5_KTNAME", f"FILE:{self._seen(self._keytab_path())}")
        if self._root is not None and "KRB5_CONFIG" in env:
            env["KRB5_CONFIG"] = self._seen(self.directory / "krb5" / "krb5.conf")
        return env

    def _copy_krb5_files(self) -> None:
        """For the Debian 13 root: the keytab and the realm's krb5.conf, copied into the server's
        directory (the KDC's own files stay outside the root)."""
        if self.keytab is None and "KRB5_CONFIG" not in self.environment:
            return
        krb5 = self.directory / "krb5"
        krb5.mkdir(exist_ok=True)
        if self.keytab is not None:
            shutil.copyfile(self.keytab, krb5 / "keytab")
        if "KRB5_CONFIG" in self.environment:
            shutil.copyfile(self.environment["KRB5_CONFIG"], krb5 / "krb5.conf")

    def _log_since(self, offset: int) -> list[str]:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []

    def _failure(self, what: str, log_start: int) -> str:
        """What went wrong at a start: the configuration's errors first when the log has any (they
        can be far from its end), then the end of the output and the log."""
        errors = [line for line in self._log_since(log_start) if any(e in line for e in _CONFIG_ERRORS)]
        lines = _tail(self.output_path, 5) + _tail(self.log_path, 15)
        quoted = "\n  ".join(lines) if lines else "(empty)"
        config = (
            f"; its configuration {self.config_path} has errors:\n  " + "\n  ".join(errors) if errors else ""
        )
        return (
            f"NFS-Ganesha {self.version} ({self._binary}, {self.host}:{self.port}) {what}{config}\n"
            f"the end of its log {self.log_path}:\n  {quoted}"
        )

    def log_tail(self, lines: int = 20) -> list[str]:
        """The last ``lines`` lines of the server's log."""
        return _tail(self.log_path, lines)

    def _kill_now(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server: SIGTERM (SIGKILL at once with ``kill``, like a crash), SIGKILL after
        ``stop_timeout``. The directory, export and recovery records stay."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def restart(self, *, kill: bool = False) -> Ganesha:
        """Stop and start again on the same port with the same export and recovery records."""
        self.stop(kill=kill)
        return self.start()

    def close(self) -> None:
        """Stop the server and remove its directory if this object made it."""
        self.stop()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Ganesha:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- from trio code (the blocking calls run in a worker thread) --------------------------------
    async def astart(self) -> Ganesha:
        import trio

        return await trio.to_thread.run_sync(self.start)

    async def astop(self, *, kill: bool = False) -> None:
        import trio

        await trio.to_thread.run_sync(lambda: self.stop(kill=kill))

    async def arestart(self, *, kill: bool = False) -> Ganesha:
        import trio

        return await trio.to_thread.run_sync(lambda: self.restart(kill=kill))

    def __repr__(self) -> str:
        port = self._port if self._port is not None else "?"
        state = f"pid {self._pid}" if self.running else "stopped"
        return f"<Ganesha {self.version} {self.host}:{port} {state} dir={self.directory}>"


def _quote(value: str) -> str:
    if any(c in value for c in '"\n\\'):
        raise GaneshaError(f"cannot put {value!r} into an NFS-Ganesha configuration")
    return f'"{value}"'
