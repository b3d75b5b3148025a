"""``pynfsrdma paths MOUNTPOINT|URL [--json]``: the paths (connections) of a session to one server.

For a URL it connects, runs trunking discovery and verification (as a mount would), and prints each
path: state, address, transport, read rank and order, round-trip time, calls and bytes in flight,
where the address came from and how it was verified. For a mount point it asks the mount daemon
through its control socket (:mod:`pynfsrdma._control_socket`), opening no session of its own.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .output import print_json

__all__ = ["format_table", "handler", "register"]

PROG = "pynfsrdma paths"
COLUMNS = (
    ("state", "STATE"),
    ("address", "ADDRESS"),
    ("transport", "TRANSPORT"),
    ("rank", "RANK"),
    ("order", "ORDER"),
    ("rtt_ms", "RTT_MS"),
    ("in_flight", "IN_FLIGHT"),
    ("bytes_in_flight", "BYTES_IN_FLIGHT"),
    ("calls", "CALLS"),
    ("source", "SOURCE"),
    ("verification", "VERIFICATION"),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "paths",
        help="list the paths (connections) to a server: state, address, transport, rank/order, RTT, in flight",
        description="Connect to URL (running trunking discovery and verification) and list the paths, "
        "or list those of a mount point.",
    )
    p.add_argument("target", metavar="MOUNTPOINT|URL")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the server")
    p.add_argument("--uid", type=int, help="AUTH_SYS uid for a URL (default 0)")
    p.add_argument("--gid", type=int, help="AUTH_SYS gid for a URL (default 0)")
    p.set_defaults(func=handler, sends_rpcs=lambda args: not _names_a_mount(args.target))


def _names_a_mount(target: str) -> bool:
    """A mount point (its daemon is asked), else a URL (a session of our own)."""
    return os.path.isdir(target) and "://" not in target


def format_table(rows: list[dict[str, Any]]) -> str:
    table = [[h for _, h in COLUMNS]] + [[str(r.get(k, "")) for k, _ in COLUMNS] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table
    )


async def _from_url(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    import trio

    from .._client.api import Client
    from .._client.url import parse_url

    u = parse_url(url)
    uid, gid = (0 if n is None else n for n in (args.uid, args.gid))
    async with Client.connect(u, uid=uid, gid=gid, timeout=args.timeout, timeo=args.timeout) as nfs:
        assert nfs.trunking is not None
        with trio.move_on_after(args.timeout):
            await nfs.trunking.settled.wait()
        await nfs.stat("/")  # one round trip, so that the table shows a measured path
        return nfs.trunking.snapshot()


def handler(args: argparse.Namespace) -> int:
    import trio

    from .._control_socket import ControlError, query

    target: str = args.target
    if _names_a_mount(target):
        if args.uid is not None or args.gid is not None:
            print(f"{PROG}: --uid and --gid are for a URL: a mount's daemon answers for the mount", file=sys.stderr)
            return 2
        try:
            rows = query(target, "paths", timeout=args.timeout)
        except ControlError as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            return 1
    else:
        rows = trio.run(_from_url, target, args)
    if args.json:
        print_json({"paths": rows})
    else:
        print(format_table(rows))
    return 0
