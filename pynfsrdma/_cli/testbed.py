"""``pynfsrdma testbed``: a local NFS-Ganesha with fault-injecting path proxies, for the demo, the tests,
the benchmarks and multipath failover testing.

    pynfsrdma testbed up [--ganesha 4.3|9] [--paths N] [--rdma] [--krb5] [--port P] [--grace SECONDS] [--json]
                         [--dir DIR]
    pynfsrdma testbed up --paths N --link-rate MBPS[,MBPS...] [--ganesha 4.3|9] [--rdma] [--grace SECONDS]
                         [--json] [--dir DIR]
    pynfsrdma testbed status [--json] [--dir DIR]
    pynfsrdma testbed fault ADDRESS|all cut|stall|delay MS|throttle KBPS|restore [--dir DIR]
    pynfsrdma testbed fault ADDRESS|all cut|stall|rate MBPS|delay MS|restore [--dir DIR]   (links)
    pynfsrdma testbed down [--json] [--dir DIR]

The ``pynfsrdma`` command calls :func:`register`; ``python -m pynfsrdma._cli.testbed`` runs it on its own.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pynfsrdma._cli.output import print_json

__all__ = ["handler", "main", "register"]

PROG = "pynfsrdma testbed"
# (pynfsrdma._testbed.daemon's ENV_STATE_DIR, named here so that the parser imports no testbed)
ENV_STATE_DIR = "PYNFSRDMA_TESTBED_DIR"
# (pynfsrdma._testbed.ganesha's VERSIONS)
GANESHA_VERSIONS = ("4.3", "9")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``testbed`` command (with up, down, status, fault) to the main CLI."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        metavar="DIR",
        help=f"state directory (default: ${ENV_STATE_DIR}, else $XDG_RUNTIME_DIR/pynfsrdma/testbed, "
        "/run/pynfsrdma/testbed or /tmp/pynfsrdma-testbed-$UID)",
    )
    parser = subparsers.add_parser(
        "testbed",
        help="start/stop a local NFS-Ganesha and path proxies with fault controls",
        description="A local NFS-Ganesha (127.0.0.1) and optional path proxies (127.0.0.2, .3, ...) "
        "that can be cut, stalled, delayed and throttled. They run detached until `down`.",
    )
    sub = parser.add_subparsers(dest="testbed_command", metavar="COMMAND", required=True)

    p_up = sub.add_parser("up", parents=[common], help="start the testbed (or report the running one)")
    p_up.add_argument("--paths", type=int, default=0, metavar="N", help="path proxies to start (default 0)")
    p_up.add_argument("--port", type=int, metavar="P", help="server port (default: a free one)")
    p_up.add_argument(
        "--grace", type=int, metavar="SECONDS", help="grace period after a server start (default: graceless)"
    )
    p_up.add_argument("--json", action="store_true", help="print a JSON object")
    p_up.add_argument(
        "--ganesha", choices=GANESHA_VERSIONS, metavar="4.3|9",
        help="the server: 4.3, the host's NFS-Ganesha (Debian 12's packages; the default, or $PYNFSRDMA_GANESHA), "
        "or 9, NFS-Ganesha 9 from trixie-backports in a Debian 13 root the testbed builds once (about a minute; "
        "root and debootstrap) and caches in ~/.cache/pynfsrdma-ganesha9",
    )
    p_up.add_argument(
        "--rdma", action="store_true",
        help="also an RPC-over-RDMA responder (software provider) in front of the server; the URL is proto=rdma "
        "(with --link-rate: the last path is RPC-over-RDMA on its link, the others TCP)",
    )
    p_up.add_argument(
        "--krb5", action="store_true",
        help="also an MIT KDC on loopback (a realm of its own, the server's key, a test user); the export "
        "takes sec=krb5, krb5i and krb5p only; the JSON's krb5 says KRB5_CONFIG and the kinit command",
    )
    p_up.add_argument(
        "--link-rate", metavar="MBPS[,MBPS...]",
        help="make each path a link of its own rate (MB/s; one for all, or one per path): the server in a "
        "network namespace, kernel rate limits and faults (root); run the client with the JSON's client_prefix",
    )

    p_down = sub.add_parser("down", parents=[common], help="stop the testbed and remove its files")
    p_down.add_argument("--json", action="store_true", help="print a JSON object")

    p_status = sub.add_parser("status", parents=[common], help="show the testbed, its paths and their faults")
    p_status.add_argument("--json", action="store_true", help="print a JSON object")

    p_fault = sub.add_parser(
        "fault",
        parents=[common],
        help="set a path's fault: cut | stall | delay MS | throttle KBPS | rate MBPS | restore",
        description="cut: reset every connection and new ones; stall: black hole in both directions; "
        "delay MS: add latency to every chunk; throttle KBPS: limit each direction to KBPS kilobytes/s "
        "(0 removes it; proxies only); rate MBPS: the link's rate in MB/s (links only); restore: clear "
        "every fault (a link's rate back to the one it started with).",
    )
    p_fault.add_argument("address", metavar="ADDRESS", help="a path's address (127.0.0.2) or `all`")
    p_fault.add_argument(
        "fault", nargs="+", metavar="FAULT", help="cut | stall | delay MS | throttle KBPS | rate MBPS | restore"
    )
    p_fault.add_argument("--json", action="store_true", help="print a JSON object")

    parser.set_defaults(func=handler)


def _print_json(obj: Any) -> None:
    print_json(obj, indent=2)


def _describe_paths(paths: list[dict[str, Any]]) -> None:
    for path in paths:
        extra = ""
        if "link" in path:
            stats = path.get("stats")
            counted = (
                f"; {stats['bytes_to_server']} B to server, {stats['bytes_to_client']} B back" if stats else ""
            )
            print(
                f"  path {path['address']}:{path['port']} (read order {path['order']})  [{path['fault_text']}{counted}]",
                file=sys.stderr,
            )
            continue
        if "fault_text" in path:
            stats = path.get("stats", {})
            extra = (
                f"  [{path['fault_text']}; {stats.get('connections_active', 0)} connections, "
                f"{stats.get('bytes_to_server', 0)} B to server, {stats.get('bytes_to_client', 0)} B back]"
            )
        elif path.get("running") is False:
            extra = "  [not running]"
        print(f"  path {path['address']}:{path['port']} (pid {path['pid']}){extra}", file=sys.stderr)


def _not_as_asked(args: argparse.Namespace, state: dict[str, Any]) -> list[str]:
    """How the testbed that runs already differs from what ``up`` asked for (the options it ignored)."""
    differ = []
    if args.paths != len(state["paths"]):
        differ.append(f"with {len(state['paths'])} paths")
    if args.ganesha is not None and args.ganesha != state["server"].get("version", "4.3"):
        differ.append(f"with NFS-Ganesha {state['server'].get('version', '4.3')}")
    if args.port is not None and args.port != state["server"]["port"]:
        differ.append(f"on port {state['server']['port']}")
    for flag, key in (("rdma", "rdma"), ("krb5", "krb5"), ("link_rate", "netns")):
        if getattr(args, flag) and key not in state:
            differ.append(f"without --{flag.replace('_', '-')}")
    return differ


def _up(args: argparse.Namespace) -> int:
    from pynfsrdma._testbed.daemon import TestbedError, up

    if args.paths < 0:
        raise TestbedError("--paths must be >= 0")
    state, started = up(
        args.dir, paths=args.paths, port=args.port, grace=args.grace, rdma=args.rdma, link_rates=args.link_rate,
        krb5=args.krb5, ganesha=args.ganesha,
    )
    if args.json:
        _print_json({**state, "started": started})
        return 0
    print(state["url"])
    server = state["server"]
    verb = "started" if started else "already running"
    print(
        f"{PROG}: {verb}: NFS-Ganesha {server.get('version', '4.3')} {server['address']}:{server['port']} "
        f"(pid {server['pid']}), "
        f"export {state['export_dir']}, state {state['state_dir']}",
        file=sys.stderr,
    )
    if not started and (differ := _not_as_asked(args, state)):
        print(f"{PROG}: it runs {'; '.join(differ)}: run `down` first for another layout", file=sys.stderr)
    if "krb5" in state:
        k = state["krb5"]
        print(f"{PROG}: Kerberos realm {k['realm']} (KDC {k['kdc']}, pid {k['pid']}); the export takes "
              f"sec={':'.join(k['sec'])}", file=sys.stderr)
        print(f"{PROG}: get a ticket: {k['kinit']}   (password {k['password']}), or: {k['kinit_keytab']}",
              file=sys.stderr)
        print(f"{PROG}: then: KRB5_CONFIG={k['env']['KRB5_CONFIG']} pynfsrdma ls '{state['url']}?sec=krb5p'",
              file=sys.stderr)
    if "netns" in state:
        print(f"{PROG}: network namespace {state['netns']}: run clients with {' '.join(state['client_prefix'])}",
              file=sys.stderr)
    _describe_paths(state["paths"])
    return 0


def _down(args: argparse.Namespace) -> int:
    from pynfsrdma._testbed.daemon import down

    result = down(args.dir)
    if args.json:
        _print_json(result if result is not None else {"stopped_pids": []})
        return 0
    if result is None:
        print(f"{PROG}: no testbed was running")
    else:
        pids = ", ".join(map(str, result["stopped_pids"])) or "none still running"
        print(f"{PROG}: stopped (pids {pids}), removed {result['state_dir']}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from pynfsrdma._testbed.daemon import status

    result = status(args.dir)
    if args.json:
        _print_json(result)
    elif "url" not in result:
        print(f"{PROG}: no testbed running (state directory {result['state_dir']})")
    else:
        server = result["server"]
        state = "running" if result["running"] else "NOT RUNNING (some processes are gone; run `down`)"
        print(result["url"])
        print(
            f"{PROG}: {state}: NFS-Ganesha {server.get('version', '4.3')} {server['address']}:{server['port']} "
            f"(pid {server['pid']}), export {result['export_dir']}, state {result['state_dir']}",
            file=sys.stderr,
        )
        _describe_paths(result["paths"])
    return 0 if result["running"] else 1


def _fault(args: argparse.Namespace) -> int:
    from pynfsrdma._testbed.daemon import fault

    answers = fault(args.dir, args.address, args.fault)
    if args.json:
        _print_json({"answers": answers})
    else:
        for answer in answers:
            print(f"path {answer['address']}:{answer['port']}: {answer['fault_text']}")
    return 0


def handler(args: argparse.Namespace) -> int:
    """Run one ``testbed`` sub-command; returns the exit code."""
    from pynfsrdma._testbed.daemon import TestbedError
    from pynfsrdma._testbed.faults import FaultCommandError
    from pynfsrdma._testbed.ganesha import GaneshaError
    from pynfsrdma._testbed.proxy_control import ControlError

    commands = {"up": _up, "down": _down, "status": _status, "fault": _fault}
    try:
        return commands[args.testbed_command](args)
    except (TestbedError, GaneshaError, ControlError, FaultCommandError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """``python -m pynfsrdma._cli.testbed up ...``: the testbed command without the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="pynfsrdma")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["testbed", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
