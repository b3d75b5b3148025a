"""A network namespace of the testbed's own, and the commands run inside it (``ip netns exec``).

Making and deleting a namespace needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN). A new namespace has
its own loopback (down until set up) with all of 127.0.0.0/8 on it, its own qdiscs and its own
nftables tables: nothing the testbed does there reaches the machine's own network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence

__all__ = ["Namespace", "NamespaceError", "missing_tools"]

TOOLS = ("ip", "tc", "nft", "ss")
PREFIX = "pynfsrdma-"


class NamespaceError(RuntimeError):
    """A namespace could not be made, used or removed."""


def missing_tools() -> str | None:
    """Why a link testbed cannot be made here (None: it can)."""
    if os.geteuid() != 0:
        return "a link testbed needs root (it makes a network namespace, qdiscs and nftables rules)"
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"a link testbed needs {', '.join(absent)} (Debian packages iproute2 and nftables)"
    return None


class Namespace:
    """A named network namespace (``ip netns``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    def create(cls) -> Namespace:
        """A new namespace with a fresh name and its loopback up."""
        why = missing_tools()
        if why is not None:
            raise NamespaceError(why)
        ns = cls(f"{PREFIX}{uuid.uuid4().hex[:8]}")
        _run(["ip", "netns", "add", ns.name])
        try:
            ns.run(["ip", "link", "set", "lo", "up"])
        except NamespaceError:
            ns.delete()
            raise
        return ns

    @property
    def prefix(self) -> list[str]:
        """What runs a command inside the namespace: ``prefix + argv``."""
        return ["ip", "netns", "exec", self.name]

    def exists(self) -> bool:
        return os.path.exists(f"/run/netns/{self.name}")

    def run(self, argv: Sequence[str], stdin: str | None = None) -> str:
        """Run ``argv`` inside the namespace; its output, or NamespaceError with its message."""
        return _run([*self.prefix, *argv], stdin)

    def run_all(self, commands: Sequence[Sequence[str]]) -> None:
        for argv in commands:
            self.run(argv)

    def pids(self) -> list[int]:
        """The processes in the namespace now."""
        out = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split() if p.isdigit()]

    def delete(self) -> None:
        """Remove the namespace's name (the kernel frees it, with its qdiscs and rules, once no
        process is left in it)."""
        if self.exists():
            _run(["ip", "netns", "delete", self.name])


def _run(argv: Sequence[str], stdin: str | None = None) -> str:
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NamespaceError(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise NamespaceError(f"{' '.join(argv)}: {message[-1] if message else f'exit {done.returncode}'}")
    return done.stdout
