"""The detached testbed behind ``pynfsrdma testbed up|down|status|fault``.

``up`` starts NFS-Ganesha on 127.0.0.1:P and N path proxies (127.0.0.2:Q, 127.0.0.3:Q, ... each a
process of its own, driven over a unix socket), all in sessions of their own so they outlive the
command, and records what it started in a state directory::

    STATE_DIR/state.json        what runs: URL, export, PIDs (with start times), control sockets
    STATE_DIR/ganesha/          the server's configuration, log, export/ and recovery records
    STATE_DIR/kdc/              with --krb5: the KDC's realm database, krb5.conf, keytabs and log
    STATE_DIR/pN.sock, pN.log   control socket and log of path N

``down`` stops exactly the processes recorded there (after checking each PID still is that process)
and removes only the files above. A lock file serialises concurrent ``up``/``down`` calls.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from . import linked
from .faults import parse_fault_words
from .ganesha import Ganesha, GaneshaError, find_free_port
from .kdc import SERVER_HOST, Kdc, KdcError
from .links import parse_link_rates
from .procs import ProcessRecord
from .proxied_paths import path_addresses
from .proxy_control import ControlError, control_request

__all__ = [
    "ENV_STATE_DIR",
    "TestbedError",
    "default_state_dir",
    "down",
    "ensure_testbed",
    "fault",
    "resolve_state_dir",
    "status",
    "up",
]

ENV_STATE_DIR = "PYNFSRDMA_TESTBED_DIR"
STATE_FILE = "state.json"
LOCK_FILE = "lock"
GANESHA_SUBDIR = "ganesha"
KDC_SUBDIR = "kdc"
KRB5_SECTYPES = ("krb5", "krb5i", "krb5p")
KRB5_USER = "testuser"  # the user principal a --krb5 testbed makes (password and keytab in the state)
PROXY_START_TIMEOUT = 15.0


class TestbedError(RuntimeError):
    """The testbed could not be started, found or driven."""

    __test__ = False  # not a pytest test class


def default_state_dir() -> Path:
    """``$XDG_RUNTIME_DIR/pynfsrdma/testbed``, else ``/run/pynfsrdma/testbed`` (if writable),
    else ``/tmp/pynfsrdma-testbed-$UID``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "pynfsrdma" / "testbed"
    if os.path.isdir("/run") and os.access("/run", os.W_OK):
        return Path("/run/pynfsrdma/testbed")
    return Path(f"/tmp/pynfsrdma-testbed-{os.getuid()}")


def resolve_state_dir(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """The state directory: the argument, else ``$PYNFSRDMA_TESTBED_DIR``, else the default."""
    if state_dir:
        return Path(state_dir).absolute()
    env = os.environ.get(ENV_STATE_DIR)
    if env:
        return Path(env).absolute()
    return default_state_dir()


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(state_dir / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        with open(state_dir / STATE_FILE) as f:
            state = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TestbedError(f"unreadable testbed state {state_dir / STATE_FILE}: {exc}") from exc
    return state if isinstance(state, dict) else None


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    tmp = state_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(state_dir / STATE_FILE)


def _records(state: dict[str, Any]) -> list[ProcessRecord]:
    if state.get("kind") == linked.KIND:
        return linked.records(state)
    recorded = state.get("processes", {})
    records = [ProcessRecord.from_json(r) for r in recorded.get("paths", [])]
    for extra in ("rdma", "advertiser"):  # before the server they talk to
        if recorded.get(extra):
            records.append(ProcessRecord.from_json(recorded[extra]))
    if recorded.get("server"):
        records.append(ProcessRecord.from_json(recorded["server"]))
    if recorded.get("kdc"):  # (after the server that asks it)
        records.append(ProcessRecord.from_json(recorded["kdc"]))
    return records


def _public(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "processes"}


def _remove_state(state_dir: Path, state: dict[str, Any] | None) -> None:
    """Remove the files the testbed made (never anything else a user keeps in that directory)."""
    names = [STATE_FILE, STATE_FILE + ".tmp", "advertiser.log", "rdma.log"]
    for path in (state or {}).get("paths", []):
        names += [path.get("control", ""), path.get("log", "")]
    for name in names:
        if name:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (state_dir / name).unlink()
    shutil.rmtree(state_dir / GANESHA_SUBDIR, ignore_errors=True)
    shutil.rmtree(state_dir / KDC_SUBDIR, ignore_errors=True)


def _stop_recorded(state: dict[str, Any]) -> list[int]:
    if state.get("kind") == linked.KIND:
        return linked.teardown(state)  # (and the namespace, its qdisc and its rules)
    stopped = []
    for record in _records(state):
        if record.stop():
            stopped.append(record.pid)
    return stopped


def _running(state: dict[str, Any]) -> bool:
    return all(r.is_running() for r in _records(state))


def _start_proxy(
    state_dir: Path, index: int, address: str, port: int, target: tuple[str, int]
) -> tuple[subprocess.Popen[bytes], str, str]:
    control, log = f"p{index}.sock", f"p{index}.log"
    argv = [
        sys.executable,
        "-m",
        "pynfsrdma._testbed.proxy",
        "--listen",
        f"{address}:{port}",
        "--target",
        f"{target[0]}:{target[1]}",
        "--control",
        str(state_dir / control),
    ]
    with contextlib.suppress(FileNotFoundError):
        (state_dir / control).unlink()
    with open(state_dir / log, "ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return proc, control, log


def _wait_ready(
    proc: subprocess.Popen[bytes], ready: Callable[[], bool], log_path: Path, what: str, deadline: float
) -> None:
    """Wait until ``ready()`` says a started helper process serves; its log's tail if it died."""
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise TestbedError(f"{what} exited with status {proc.returncode}: " + " / ".join(tail))
        if ready():
            return
        if time.monotonic() > deadline:
            proc.kill()
            raise TestbedError(f"{what} did not answer in time")
        time.sleep(0.02)


def _wait_proxy(proc: subprocess.Popen[bytes], control_path: Path, log_path: Path, deadline: float) -> None:
    def answers() -> bool:
        try:
            control_request(str(control_path), {"cmd": "status"}, timeout=1.0)
            return True
        except (ControlError, FileNotFoundError):
            return False

    _wait_ready(proc, answers, log_path, f"path proxy ({control_path})", deadline)


def _wait_listening(
    proc: subprocess.Popen[bytes], host: str, port: int, log_path: Path, what: str, deadline: float
) -> None:
    def listens() -> bool:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            return False

    _wait_ready(proc, listens, log_path, f"{what} ({host}:{port})", deadline)


def _start_advertiser(state_dir: Path, target: tuple[str, int], advertised: list[str]) -> tuple[int, int]:
    """The trunking advertiser in front of the server (NFS-Ganesha has no trunking discovery):
    it answers fs_locations_info on the pseudo root with the path addresses."""
    port = find_free_port(("127.0.0.1",))
    argv = [
        sys.executable,
        "-m",
        "pynfsrdma._testbed.advertiser",
        "--listen",
        f"127.0.0.1:{port}",
        "--target",
        f"{target[0]}:{target[1]}",
    ]
    for a in advertised:
        argv += ["--advertise", a]
    log = state_dir / "advertiser.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    _wait_listening(
        proc, "127.0.0.1", port, log, "trunking advertiser", time.monotonic() + PROXY_START_TIMEOUT
    )
    return proc.pid, port


def _start_kdc(state_dir: Path) -> tuple[Kdc, dict[str, Any]]:
    """A KDC for a --krb5 testbed, the server's key and a test user (password and keytab)."""
    try:
        kdc = Kdc(state_dir / KDC_SUBDIR, detached=True).start()
    except KdcError as exc:
        raise TestbedError(str(exc)) from exc
    try:
        keytab = kdc.service_keytab(f"nfs/{SERVER_HOST}")
        password = secrets.token_hex(8)
        user = kdc.add_user(KRB5_USER, password)
        user_keytab = kdc.directory / f"{KRB5_USER}.keytab"
        kdc.user_keytab(KRB5_USER, user_keytab)
    except BaseException:
        kdc.stop()
        raise
    described = {
        "realm": kdc.realm,
        "kdc": f"127.0.0.1:{kdc.port}",
        "pid": kdc.pid,
        "env": {"KRB5_CONFIG": str(kdc.config_path)},
        "service_principal": kdc.principal(f"nfs/{SERVER_HOST}"),
        "service_keytab": str(keytab),
        "user": user,
        "password": password,
        "user_keytab": str(user_keytab),
        "kinit": kdc.kinit_command(KRB5_USER),
        "kinit_keytab": f"KRB5_CONFIG={kdc.config_path} kinit -k -t {user_keytab} {user}",
        "sec": list(KRB5_SECTYPES),
    }
    return kdc, described


def _start(
    state_dir: Path, *, paths: int, port: int | None, grace: int | None, rdma: bool = False, krb5: bool = False,
    version: str | None = None,
) -> dict[str, Any]:
    if len(os.fsencode(str(state_dir / "p99.sock"))) > 107:
        raise TestbedError(f"state directory path too long for unix sockets: {state_dir}")
    addresses = path_addresses(paths)
    kdc, kerberos = _start_kdc(state_dir) if krb5 else (None, None)
    try:
        if kdc is not None and kerberos is not None:
            ganesha = Ganesha(state_dir / GANESHA_SUBDIR, port=port, grace=grace, detached=True,
                              sectype=KRB5_SECTYPES, keytab=kerberos["service_keytab"],
                              environment=kdc.environment, version=version)
        else:
            ganesha = Ganesha(state_dir / GANESHA_SUBDIR, port=port, grace=grace, detached=True, version=version)
        ganesha.start()
    except GaneshaError as exc:
        if kdc is not None:
            kdc.stop()
        raise TestbedError(str(exc)) from exc
    assert ganesha.pid is not None
    processes: dict[str, Any] = {
        "server": ProcessRecord.of(ganesha.pid, ganesha.command_marker).to_json(),
        "paths": [],
    }
    if kdc is not None and kdc.pid is not None:
        processes["kdc"] = ProcessRecord.of(kdc.pid, str(kdc.directory / "kdc.pid")).to_json()
    state: dict[str, Any] = {
        "url": ganesha.url,
        "direct_url": ganesha.url,
        "export_dir": str(ganesha.export_dir),
        "server": {
            "address": ganesha.host,
            "port": ganesha.port,
            "pid": ganesha.pid,
            "log": str(ganesha.log_path),
            "version": ganesha.version,
        },
        "paths": [],
        "state_dir": str(state_dir),
        "processes": processes,
    }
    if kerberos is not None:
        state["krb5"] = kerberos
    _write_state(state_dir, state)  # record the server at once, so a failure below can be cleaned up
    try:
        path_port = find_free_port(addresses, prefer=ganesha.port) if addresses else ganesha.port
        target = (ganesha.host, ganesha.port)
        rdma_port = find_free_port(("127.0.0.1",)) if rdma else None
        if addresses:
            advertised = [f"{a}:{path_port}" for a in addresses]
            if rdma_port is not None:
                advertised.append(f"127.0.0.1:{rdma_port},rdma")
            adv_pid, adv_port = _start_advertiser(state_dir, target, advertised)
            processes["advertiser"] = ProcessRecord.of(adv_pid, "pynfsrdma._testbed.advertiser").to_json()
            state["advertiser"] = {
                "address": "127.0.0.1",
                "port": adv_port,
                "pid": adv_pid,
                "advertised": advertised,
            }
            _write_state(state_dir, state)
            target = ("127.0.0.1", adv_port)
        if rdma_port is not None:
            from .rdma_responder import start_responder_process

            pid, rport = start_responder_process(
                target[0], target[1], "127.0.0.1", rdma_port, log_path=state_dir / "rdma.log"
            )
            processes["rdma"] = ProcessRecord.of(pid, "pynfsrdma._testbed.rdma_responder").to_json()
            state["rdma"] = {
                "address": "127.0.0.1",
                "port": rport,
                "pid": pid,
                "provider": "soft",
                "url": f"nfs://127.0.0.1:{rport}{ganesha.pseudo_path}?proto=rdma&provider=soft",
            }
            _write_state(state_dir, state)
        started = [
            (address, *_start_proxy(state_dir, i + 1, address, path_port, target))
            for i, address in enumerate(addresses)
        ]
        deadline = time.monotonic() + PROXY_START_TIMEOUT
        for address, proc, control, log in started:
            processes["paths"].append(ProcessRecord.of(proc.pid, str(state_dir / control)).to_json())
            state["paths"].append(
                {
                    "address": address,
                    "port": path_port,
                    "url": f"nfs://{address}:{path_port}{ganesha.pseudo_path}",
                    "pid": proc.pid,
                    "control": control,
                    "log": log,
                }
            )
            _write_state(state_dir, state)
        for _address, proc, control, log in started:
            _wait_proxy(proc, state_dir / control, state_dir / log, deadline)
    except BaseException:
        _stop_recorded(state)
        _remove_state(state_dir, state)
        raise
    if state["paths"]:
        state["url"] = state["paths"][0]["url"]
    elif "rdma" in state:
        state["url"] = state["rdma"]["url"]
    _write_state(state_dir, state)
    return state


def _start_links(
    state_dir: Path, *, paths: int, link_rates: str, grace: int | None, rdma: bool = False,
    version: str | None = None,
) -> dict[str, Any]:
    if paths < 1:
        raise TestbedError("--link-rate needs --paths N (N >= 1)")
    try:
        rates = parse_link_rates(link_rates, paths)
    except ValueError as exc:
        raise TestbedError(str(exc)) from exc
    try:
        return linked.start(state_dir, rates, grace=grace, record=lambda s: _write_state(state_dir, s), rdma=rdma,
                            version=version)
    except linked.LinkTestbedError as exc:
        _remove_state(state_dir, None)
        raise TestbedError(str(exc)) from exc
    except BaseException:
        _remove_state(state_dir, None)
        raise


def up(
    state_dir: str | os.PathLike[str] | None = None,
    *,
    paths: int = 0,
    port: int | None = None,
    grace: int | None = None,
    rdma: bool = False,
    link_rates: str | None = None,
    krb5: bool = False,
    ganesha: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Start the testbed unless it runs already; returns (its description, whether it was started now).

    With ``paths`` > 0 the URL is the first path's; ``direct_url`` always goes to the server itself.
    With ``link_rates`` (MB/s: one for every path, or one per path) the paths are links of a network
    namespace with kernel rate limits and faults (:mod:`.linked`), not proxies; ``rdma`` then makes the
    last path RPC-over-RDMA (the software provider, shaped by its link as the others). With ``krb5`` a KDC
    (:mod:`.kdc`) runs too, the export takes krb5, krb5i and krb5p only, and the description's
    ``krb5`` says what a user needs (KRB5_CONFIG, the realm, a test user, the kinit command).
    ``ganesha``: the NFS-Ganesha version, ``"4.3"`` (the host's) or ``"9"`` (from the Debian 13 root
    :mod:`.debian_root` builds once); default :func:`~.ganesha.default_version`.
    """
    if link_rates is not None and (port is not None or krb5):
        raise TestbedError("a link testbed has no --krb5 or --port (the server is on 2049 in its namespace)")
    directory = resolve_state_dir(state_dir)
    with _locked(directory):
        state = _read_state(directory)
        if state is not None:
            if _running(state):
                return _public(state), False
            _stop_recorded(state)  # a partly dead testbed: end what is left of it, start afresh
            _remove_state(directory, state)
        if link_rates is not None:
            return _public(_start_links(directory, paths=paths, link_rates=link_rates, grace=grace, rdma=rdma,
                                        version=ganesha)), True
        return _public(_start(directory, paths=paths, port=port, grace=grace, rdma=rdma, krb5=krb5,
                              version=ganesha)), True


def ensure_testbed(state_dir: str | os.PathLike[str] | None = None, *, paths: int = 0) -> dict[str, Any]:
    """The running testbed's description (the ``up --json`` object), starting it if needed."""
    return up(state_dir, paths=paths)[0]


def down(state_dir: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """Stop the recorded processes and remove the testbed's files; None if none was recorded."""
    directory = resolve_state_dir(state_dir)
    if not (directory / STATE_FILE).exists():
        return None
    with _locked(directory):
        state = _read_state(directory)
        if state is None:
            return None
        stopped = _stop_recorded(state)
        _remove_state(directory, state)
    with contextlib.suppress(OSError):
        (directory / LOCK_FILE).unlink()
        directory.rmdir()  # only if nothing else is in it
    return {**_public(state), "stopped_pids": stopped}


def status(state_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """What runs: the ``up --json`` object with ``running`` and, per path, its fault and counters."""
    directory = resolve_state_dir(state_dir)
    state = _read_state(directory)
    if state is None:
        return {"running": False, "state_dir": str(directory)}
    result = _public(state)
    result["running"] = _running(state)
    if state.get("kind") == linked.KIND:
        return linked.status(result)
    records = state.get("processes", {})
    if records.get("server"):
        result["server"]["running"] = ProcessRecord.from_json(records["server"]).is_running()
    for path, record in zip(result["paths"], records.get("paths", []), strict=False):
        path["running"] = ProcessRecord.from_json(record).is_running()
        if path["running"]:
            try:
                described = control_request(str(directory / path["control"]), {"cmd": "status"})["proxy"]
                path["fault"] = described["fault"]
                path["fault_text"] = described["fault_text"]
                path["stats"] = described["stats"]
            except ControlError as exc:
                path["error"] = str(exc)
    return result


def fault(
    state_dir: str | os.PathLike[str] | None, address: str, words: Sequence[str]
) -> list[dict[str, Any]]:
    """Apply a fault (``["cut"]``, ``["delay", "50"]``, ...) to the path at ``address`` (or ``all``).

    Returns each affected proxy's state after the change. On a link testbed the faults are
    ``cut``, ``stall``, ``rate MBPS``, ``delay MS`` and ``restore`` (:mod:`.links`).
    """
    directory = resolve_state_dir(state_dir)
    state = _read_state(directory)
    if state is None:
        raise TestbedError(f"no testbed running (state directory {directory})")
    if state.get("kind") == linked.KIND:
        with _locked(directory):
            state = _read_state(directory) or state
            try:
                return linked.fault(state, address, words)
            except linked.LinkTestbedError as exc:
                raise TestbedError(str(exc)) from exc
            finally:
                _write_state(directory, state)
    command, value = parse_fault_words(words)
    paths = state.get("paths", [])
    if not paths:
        raise TestbedError("this testbed has no path proxies (start it with `testbed up --paths N`)")
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
    chosen = paths if address == "all" else [p for p in paths if p["address"] == host]
    if not chosen:
        raise TestbedError(f"no path at {address} (paths: {', '.join(p['address'] for p in paths)})")
    answers = []
    for path in chosen:
        request: dict[str, Any] = {"cmd": command}
        if value is not None:
            request["value"] = value
        try:
            answers.append(control_request(str(directory / path["control"]), request)["proxy"])
        except ControlError as exc:
            raise TestbedError(f"path {path['address']}: {exc}") from exc
    return answers
