"""The link testbed behind ``pynfsrdma testbed up --paths N --link-rate MBPS[,MBPS...]``.

Each path is a link with a rate of its own, enforced by the kernel (:mod:`.links`), in a network
namespace made for the testbed (:mod:`.netns`)::

    namespace pynfsrdma-XXXXXXXX, loopback only
      NFS-Ganesha            *:2049 (no Bind_Addr: every 127.x address of the namespace reaches it)
      trunking advertiser    *:ADVERTISER_PORT -> 127.0.0.1:2049; path 1's port 2049 is sent to it
                             (DNAT), so that discovery on the mount path learns the other paths
      path i                 127.0.0.(1+i):2049, HTB classes at its rate, both directions
      RDMA responder         with ``rdma``: the last path is 127.0.0.(1+N):20049, RPC-over-RDMA through
                             the software provider (whose emulated queue pair is a TCP connection, so
                             the link's classes shape it as any other) to the server at 127.0.0.1:2049
      delay proxy of path i  127.0.0.(1+i):DELAY_PORT+i, started at the first ``delay`` on it

The client runs inside the namespace (``client_prefix``, e.g. ``ip netns exec NAME``) and mounts
``url`` (path 1; with ``rdma`` it says ``provider=soft``, so that the client can open the RDMA path
discovery finds); ``direct_url`` reaches the server at 127.0.0.1, through no link (the CPU limit).
The advertiser names every path with a read order in proportion to its rate (faster, higher), the
RDMA one as an FSLI4TF_RDMA entry.

What is made here is recorded in the state (by the caller, :mod:`.daemon`) as it is made, and
:func:`teardown` ends the processes started (by PID, checked) and removes the namespace with its
qdisc and nftables table.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._proto.nfs4.const import NFS_PORT, NFS_RDMA_PORT
from .ganesha import Ganesha, GaneshaError, process_listens_on
from .links import (
    Link,
    apply_link_command,
    class_bytes,
    kill_command,
    nft_script,
    parse_link_words,
    qdisc_commands,
    rate_commands,
    read_orders,
    teardown_commands,
)
from .netns import Namespace, NamespaceError
from .procs import ProcessRecord
from .proxied_paths import path_addresses
from .proxy_control import ControlError, control_request

__all__ = ["KIND", "LinkTestbedError", "fault", "records", "start", "status", "teardown"]

KIND = "links"
ADVERTISER_PORT = 2050
DELAY_PORT = 21000  # path i's delay proxy listens on DELAY_PORT + i
GANESHA_SUBDIR = "ganesha"
START_TIMEOUT = 15.0

Record = Callable[[dict[str, Any]], None]


class LinkTestbedError(RuntimeError):
    """The link testbed could not be made or driven."""


def _links(state: dict[str, Any]) -> list[Link]:
    return [Link.from_json(p["link"]) for p in state["paths"]]


def _redirects(state: dict[str, Any], links: Sequence[Link]) -> dict[str, int]:
    """Where each path's port 2049 goes: the first path to the advertiser, a delayed one to its proxy."""
    out = {links[0].address: ADVERTISER_PORT} if links else {}
    for link in links:
        if link.delay_ms:
            out[link.address] = DELAY_PORT + link.index
    return out


def _load_rules(ns: Namespace, state: dict[str, Any], links: Sequence[Link]) -> None:
    ns.run(["nft", "-f", "-"], stdin=nft_script(links, state["server"]["port"], _redirects(state, links)))


def _path_json(link: Link, port: int, order: int, pseudo: str, rdma: bool = False) -> dict[str, Any]:
    return {
        "address": link.address,
        "port": port,
        "transport": "rdma" if rdma else "tcp",
        "url": f"nfs://{link.address}:{port}{pseudo}" + ("?proto=rdma&provider=soft" if rdma else ""),
        "rate_MBps": link.rate,
        "order": order,
        "fault_text": link.describe(),
        "link": link.to_json(),
    }


def _wait(proc: subprocess.Popen[bytes], ready: Callable[[], bool], log: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise LinkTestbedError(f"{what} exited with status {proc.returncode}: " + " / ".join(tail))
        if time.monotonic() > deadline:
            proc.kill()
            raise LinkTestbedError(f"{what} did not answer in time")
        time.sleep(0.02)


def _spawn(ns: Namespace, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*ns.prefix, sys.executable, *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start(
    state_dir: Path, rates: Sequence[float], *, grace: int | None, record: Record, rdma: bool = False,
    version: str | None = None,
) -> dict[str, Any]:
    """Make the namespace, its links, the server and the advertiser (and with ``rdma`` the RDMA
    responder of the last path); ``record(state)`` is called whenever something was made (so that a
    failure half way can be undone from the record)."""
    if rdma and len(rates) < 2:
        raise LinkTestbedError("--rdma on links makes the last path RPC-over-RDMA: it needs --paths 2 or more "
                               "(the first path, where the client mounts and discovers the others, is TCP)")
    ns = Namespace.create()
    processes: dict[str, Any] = {"paths": [], "delay_proxies": {}}
    state: dict[str, Any] = {
        "kind": KIND,
        "netns": ns.name,
        "client_prefix": ns.prefix,
        "paths": [],
        "state_dir": str(state_dir),
        "processes": processes,
    }
    record(state)
    try:
        addresses = path_addresses(len(rates))
        links = [Link(i, a, float(r), float(r)) for i, (a, r) in enumerate(zip(addresses, rates, strict=True))]
        ns.run_all(qdisc_commands(links))
        ganesha = Ganesha(
            state_dir / GANESHA_SUBDIR,
            port=NFS_PORT,
            bind_address="",  # every address of the namespace
            grace=grace,
            server_owner="pynfsrdma-testbed",
            server_scope="pynfsrdma-testbed",
            detached=True,
            command_prefix=ns.prefix,
            version=version,
        )
        try:
            ganesha.start()
        except GaneshaError as exc:
            raise LinkTestbedError(str(exc)) from exc
        assert ganesha.pid is not None
        processes["server"] = ProcessRecord.of(ganesha.pid, ganesha.command_marker).to_json()
        pseudo = ganesha.pseudo_path
        state.update(
            {
                "export_dir": str(ganesha.export_dir),
                "server": {"address": "127.0.0.1", "port": NFS_PORT, "pid": ganesha.pid, "log": str(ganesha.log_path),
                           "version": ganesha.version},
                "direct_url": f"nfs://127.0.0.1:{NFS_PORT}{pseudo}",
            }
        )
        orders = read_orders(rates)
        kinds = [rdma and x is links[-1] for x in links]
        state["paths"] = [
            _path_json(x, NFS_RDMA_PORT if r else NFS_PORT, o, pseudo, r)
            for x, o, r in zip(links, orders, kinds, strict=True)
        ]
        state["url"] = state["paths"][0]["url"] + ("?provider=soft" if rdma else "")
        record(state)
        if rdma:
            _start_responder(ns, state, links[-1])
        advertised = [
            f"{x.address}:{NFS_RDMA_PORT},order={o},rdma" if r else f"{x.address}:{NFS_PORT},order={o}"
            for x, o, r in zip(links, orders, kinds, strict=True)
        ]
        argv = ["-m", "pynfsrdma._testbed.advertiser", "--listen", f"0.0.0.0:{ADVERTISER_PORT}",
                "--target", f"127.0.0.1:{NFS_PORT}"]  # fmt: skip
        for a in advertised:
            argv += ["--advertise", a]
        log = state_dir / "advertiser.log"
        adv = _spawn(ns, argv, log)
        processes["advertiser"] = ProcessRecord.of(adv.pid, "pynfsrdma._testbed.advertiser").to_json()
        state["advertiser"] = {"address": links[0].address, "port": ADVERTISER_PORT, "pid": adv.pid,
                               "advertised": advertised}  # fmt: skip
        record(state)
        _wait(adv, lambda: process_listens_on(adv.pid, ADVERTISER_PORT), log, "trunking advertiser")
        _load_rules(ns, state, links)
    except (NamespaceError, OSError) as exc:
        teardown(state)
        raise LinkTestbedError(str(exc)) from exc
    except BaseException:
        teardown(state)
        raise
    return state


def _start_responder(ns: Namespace, state: dict[str, Any], link: Link) -> None:
    """The RPC-over-RDMA responder (software provider) of ``link``, listening on its address; its
    RDMA data goes over the emulation's socket, so that the link's rate limit and counters see it."""
    state_dir = Path(state["state_dir"])
    log = state_dir / "rdma.log"
    proc = _spawn(
        ns,
        ["-m", "pynfsrdma._testbed.rdma_responder", "--listen", f"{link.address}:{NFS_RDMA_PORT}",
         "--target", f"127.0.0.1:{NFS_PORT}", "--provider", "soft", "--no-placement"],
        log,
    )  # fmt: skip
    state["processes"]["rdma"] = ProcessRecord.of(proc.pid, "pynfsrdma._testbed.rdma_responder").to_json()
    state["rdma"] = {"address": link.address, "port": NFS_RDMA_PORT, "pid": proc.pid, "provider": "soft"}
    _wait(proc, lambda: process_listens_on(proc.pid, NFS_RDMA_PORT), log, "RDMA responder")


def records(state: dict[str, Any]) -> list[ProcessRecord]:
    """The processes of a link testbed, in the order to end them (the server last)."""
    recorded = state.get("processes", {})
    out = [ProcessRecord.from_json(r) for r in recorded.get("delay_proxies", {}).values()]
    for extra in ("rdma", "advertiser"):  # before the server they talk to
        if recorded.get(extra):
            out.append(ProcessRecord.from_json(recorded[extra]))
    if recorded.get("server"):
        out.append(ProcessRecord.from_json(recorded["server"]))
    return out


def teardown(state: dict[str, Any]) -> list[int]:
    """End the processes recorded (those still ours), remove the qdisc, the nftables table and the
    namespace, and the delay proxies' files. Returns the PIDs signalled."""
    stopped = [r.pid for r in records(state) if r.stop()]
    name = state.get("netns")
    if name:
        ns = Namespace(name)
        if ns.exists():
            for argv in teardown_commands():
                with contextlib.suppress(NamespaceError):
                    ns.run(argv)
            ns.delete()
    state_dir = Path(state.get("state_dir", "."))
    for index in state.get("processes", {}).get("delay_proxies", {}):
        for suffix in (".sock", ".log"):
            with contextlib.suppress(FileNotFoundError):
                (state_dir / f"d{int(index) + 1}{suffix}").unlink()
    for name in ("advertiser.log", "rdma.log"):
        with contextlib.suppress(FileNotFoundError):
            (state_dir / name).unlink()
    return stopped


def _delay_proxy(ns: Namespace, state: dict[str, Any], link: Link) -> str:
    """The control socket of the path's delay proxy, started now if it is not running."""
    state_dir = Path(state["state_dir"])
    control = state_dir / f"d{link.index + 1}.sock"
    recorded = state["processes"].setdefault("delay_proxies", {})
    known = recorded.get(str(link.index))
    if known is not None and ProcessRecord.from_json(known).is_running():
        return str(control)
    with contextlib.suppress(FileNotFoundError):
        control.unlink()
    target = ADVERTISER_PORT if link.index == 0 else state["server"]["port"]
    log = state_dir / f"d{link.index + 1}.log"
    proc = _spawn(
        ns,
        ["-m", "pynfsrdma._testbed.proxy", "--listen", f"{link.address}:{DELAY_PORT + link.index}",
         "--target", f"127.0.0.1:{target}", "--control", str(control)],
        log,
    )  # fmt: skip
    recorded[str(link.index)] = ProcessRecord.of(proc.pid, str(control)).to_json()

    def answers() -> bool:
        try:
            control_request(str(control), {"cmd": "status"}, timeout=1.0)
            return True
        except (ControlError, FileNotFoundError):
            return False

    _wait(proc, answers, log, f"delay proxy of {link.address}")
    return str(control)


def fault(state: dict[str, Any], address: str, words: Sequence[str]) -> list[dict[str, Any]]:
    """Apply ``words`` (cut | stall | rate MBPS | delay MS | restore) to the path at ``address`` (or
    ``all``), updating ``state`` in place; each affected path's description afterwards."""
    command, value = parse_link_words(words)
    ns = Namespace(state["netns"])
    links = _links(state)
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
    chosen = links if address == "all" else [x for x in links if x.address == host]
    if not chosen:
        raise LinkTestbedError(f"no path at {address} (paths: {', '.join(x.address for x in links)})")
    rdma_link = state.get("rdma", {}).get("address")
    if command == "delay" and value and any(x.address == rdma_link for x in chosen):
        raise LinkTestbedError(f"delay is not available on the RPC-over-RDMA path {rdma_link} "
                               "(its delay proxy would forward TCP, not the RDMA framing)")
    changes = [apply_link_command(x, command, value) for x in chosen]
    try:
        for change in changes:
            links[change.link.index] = change.link
            if change.proxy_delay is not None:
                control = _delay_proxy(ns, state, change.link)
                control_request(control, {"cmd": "delay", "value": change.proxy_delay})
            if change.rate:
                ns.run_all(rate_commands(change.link))
        if any(ch.rules for ch in changes):
            _load_rules(ns, state, links)
        for change in changes:
            if change.kill:
                ns.run(kill_command(change.link))
    except (NamespaceError, ControlError, OSError) as exc:
        raise LinkTestbedError(f"{command} on {address}: {exc}") from exc
    finally:
        for link, path in zip(links, state["paths"], strict=True):
            path["link"] = link.to_json()
            path["rate_MBps"] = link.rate
            path["fault_text"] = link.describe()
    return [state["paths"][ch.link.index] for ch in changes]


def status(state: dict[str, Any]) -> dict[str, Any]:
    """The state with, per path, whether its processes run and the bytes its link carried each way
    (the kernel's class counters: to the server, back to the client)."""
    ns = Namespace(state["netns"])
    counted: dict[str, int] = {}
    if ns.exists():
        with contextlib.suppress(NamespaceError):
            counted = class_bytes(ns.run(["tc", "-s", "class", "show", "dev", "lo"]))
    for link, path in zip(_links(state), state["paths"], strict=True):
        path["stats"] = {
            "bytes_to_server": counted.get(link.up_class, 0),
            "bytes_to_client": counted.get(link.down_class, 0),
        }
    return state
