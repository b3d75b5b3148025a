"""Paths that are links: what the kernel is told so that each path of the testbed has a rate and faults.

The link testbed (:mod:`.linked`) runs the server in a network namespace of its own, reached at
127.0.0.2, 127.0.0.3, ... Everything here is sans-I/O: it says which ``tc`` and ``nft`` commands
make and change the links, and reads the kernel's counters back; the shell runs them.

- **Rate.** An HTB qdisc on the namespace's ``lo``; per path two classes at the path's rate, one
  for what goes to the server (a u32 filter on the address as destination) and one for what comes
  back (the address as source), so each link is full duplex. Traffic between other addresses
  (127.0.0.1 to 127.0.0.1: the advertiser's and the delay proxies' own connections to the server)
  matches no filter and is not limited.
- **cut**: the path's connections are destroyed (``ss -K``) and new ones refused with a reset until
  ``restore`` (an nftables set); **stall**: everything to and from the address is dropped;
  **rate MBPS**: the classes' rate changes; **delay MS**: the path's connections go through a
  userspace proxy that delays them (a DNAT rule sends the port there; the connections in place are
  destroyed so that the client reconnects through it); **restore**: all of it undone, the rate
  back to the one the testbed started with.

Rates are in MB/s (10^6 bytes per second), as ``--link-rate`` takes them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .faults import FaultCommandError, Mode, parse_fault_words

__all__ = [
    "LINK_COMMANDS",
    "NFT_TABLE",
    "Link",
    "LinkChange",
    "apply_link_command",
    "class_bytes",
    "kill_command",
    "nft_script",
    "parse_link_rates",
    "parse_link_words",
    "qdisc_commands",
    "rate_commands",
    "read_orders",
    "teardown_commands",
]

MB = 1_000_000
NFT_TABLE = "pynfsrdma_testbed"
# command -> number of numeric arguments
LINK_COMMANDS: dict[str, int] = {"cut": 0, "stall": 0, "restore": 0, "delay": 1, "rate": 1}
MAX_ORDER = 200  # the fastest link's FSLI4BX_READORDER; the others in proportion to their rate
MIN_BURST = 256 * 1024  # bytes: above lo's largest packet (64 KiB), or HTB cannot send it whole
BURST_SECONDS = 0.004
QUANTUM = 70_000  # above lo's largest packet (HTB's own default warns at these rates)


@dataclass(frozen=True)
class Link:
    """One path of the link testbed and what it is set to now."""

    index: int  # 0 for the first path (127.0.0.2)
    address: str
    base_rate: float  # MB/s, as started
    rate: float  # MB/s now
    mode: Mode = Mode.PASS
    delay_ms: float = 0.0

    @property
    def up_class(self) -> str:
        """The HTB class of what goes to the server on this path."""
        return f"1:{0x100 + self.index:x}"

    @property
    def down_class(self) -> str:
        """The HTB class of what comes back from the server on this path."""
        return f"1:{0x200 + self.index:x}"

    def describe(self) -> str:
        parts = [f"{self.rate:g} MB/s"]
        if self.mode is not Mode.PASS:
            parts.append(self.mode.value)
        if self.delay_ms:
            parts.append(f"delay {self.delay_ms:g} ms")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "address": self.address,
            "base_rate_MBps": self.base_rate,
            "rate_MBps": self.rate,
            "mode": self.mode.value,
            "delay_ms": self.delay_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Link:
        return cls(
            int(data["index"]),
            str(data["address"]),
            float(data["base_rate_MBps"]),
            float(data["rate_MBps"]),
            Mode(data.get("mode", Mode.PASS.value)),
            float(data.get("delay_ms", 0.0)),
        )


@dataclass(frozen=True)
class LinkChange:
    """What applying a fault command asks of the shell."""

    link: Link  # the link's state afterwards
    rate: bool = False  # set the classes to link.rate
    rules: bool = False  # load the nftables rules again
    kill: bool = False  # destroy the path's connections (ss -K)
    proxy_delay: float | None = None  # the delay proxy's delay (ms) to set, when it is needed


def parse_link_rates(text: str, paths: int) -> list[float]:
    """``"40"`` (every path) or ``"80,40,20,20"`` (one per path) -> a rate per path, in MB/s."""
    try:
        rates = [float(r) for r in text.split(",")]
    except ValueError:
        raise ValueError(f"--link-rate takes MB/s numbers separated by commas, not {text!r}") from None
    if any(not (r > 0 and math.isfinite(r)) for r in rates):
        raise ValueError(f"link rates must be numbers > 0 (MB/s), not {text!r}")
    if len(rates) == 1:
        return rates * paths
    if len(rates) != paths:
        raise ValueError(f"--link-rate names {len(rates)} rates for {paths} paths (give one, or one per path)")
    return rates


def read_orders(rates: Sequence[float]) -> list[int]:
    """The FSLI4BX_READORDER each link is advertised with: higher for faster links, in proportion
    to their rates (the fastest gets MAX_ORDER; every link at least 1)."""
    top = max(rates)
    return [max(1, round(MAX_ORDER * r / top)) for r in rates]


def parse_link_words(words: Sequence[str]) -> tuple[str, float | None]:
    """``["rate", "20"]`` -> ``("rate", 20.0)``; the words of ``testbed fault`` on a link testbed."""
    command, value = parse_fault_words(words, LINK_COMMANDS)
    if command == "rate" and not (value is not None and value > 0):
        raise FaultCommandError("rate needs a number of MB/s > 0")
    return command, value


def apply_link_command(link: Link, command: str, value: float | None = None) -> LinkChange:
    """The link after ``command`` (cut, stall, rate MBPS, delay MS, restore), and what to do for it.

    cut and stall replace each other; ``delay 0`` removes the delay; ``restore`` clears the mode
    and the delay and sets the rate back to the one the link started with."""
    if command not in LINK_COMMANDS:
        raise FaultCommandError(f"unknown fault {command!r} (expected one of: {', '.join(LINK_COMMANDS)})")
    if command == "cut":
        return LinkChange(replace(link, mode=Mode.CUT), rules=True, kill=True)
    if command == "stall":
        return LinkChange(replace(link, mode=Mode.STALL), rules=True)
    if command == "rate":
        if value is None or not value > 0:
            raise FaultCommandError("rate needs a number of MB/s > 0")
        return LinkChange(replace(link, rate=float(value)), rate=True)
    if command == "delay":
        if value is None or value < 0 or not math.isfinite(value):
            raise FaultCommandError("delay needs a number of milliseconds >= 0")
        rerouted = bool(value) != bool(link.delay_ms)  # through the proxy, or back off it
        after = replace(link, delay_ms=float(value))
        return LinkChange(after, rules=rerouted, kill=rerouted, proxy_delay=float(value) if value else None)
    after = replace(link, mode=Mode.PASS, delay_ms=0.0, rate=link.base_rate)
    return LinkChange(
        after,
        rate=after.rate != link.rate,
        rules=link.mode is not Mode.PASS or bool(link.delay_ms),
        # (a cut path's connections are gone already; a delayed one's go through the proxy)
        kill=bool(link.delay_ms),
    )


# -- tc -----------------------------------------------------------------------------------------------


def _burst(rate: float) -> int:
    return max(MIN_BURST, int(rate * MB * BURST_SECONDS))


def _class_args(classid: str, rate: float) -> list[str]:
    bps = f"{round(rate * MB)}bps"  # tc's "bps" is bytes per second
    burst = str(_burst(rate))
    return [
        "classid", classid, "htb", "rate", bps, "ceil", bps,
        "burst", burst, "cburst", burst, "quantum", str(QUANTUM),
    ]  # fmt: skip


def qdisc_commands(links: Sequence[Link]) -> list[list[str]]:
    """The ``tc`` commands (run inside the namespace) that give every link its classes and filters.
    Unclassified traffic (``default 0``) passes unlimited."""
    cmds = [["tc", "qdisc", "replace", "dev", "lo", "root", "handle", "1:", "htb", "default", "0"]]
    for link in links:
        for classid in (link.up_class, link.down_class):
            cmds.append(["tc", "class", "add", "dev", "lo", "parent", "1:", *_class_args(classid, link.rate)])
        for prio, field, classid in ((1, "dst", link.up_class), (2, "src", link.down_class)):
            cmds.append(
                ["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", str(prio),
                 "u32", "match", "ip", field, f"{link.address}/32", "flowid", classid]
            )  # fmt: skip
    return cmds


def rate_commands(link: Link) -> list[list[str]]:
    """The ``tc`` commands that set the link's classes to ``link.rate``."""
    return [
        ["tc", "class", "change", "dev", "lo", "parent", "1:", *_class_args(classid, link.rate)]
        for classid in (link.up_class, link.down_class)
    ]


def teardown_commands() -> list[list[str]]:
    """What removes the qdisc and the nftables table (deleting the namespace removes them too)."""
    return [["tc", "qdisc", "del", "dev", "lo", "root"], ["nft", "delete", "table", "inet", NFT_TABLE]]


def kill_command(link: Link) -> list[str]:
    """``ss -K``: destroy every TCP connection to the link's address (their owners see ECONNABORTED)."""
    return ["ss", "-K", "-t", "dst", link.address]


_CLASS_LINE = re.compile(r"^class htb (\S+) .*?\n\s*Sent (\d+) bytes", re.MULTILINE)


def class_bytes(tc_output: str) -> dict[str, int]:
    """Bytes sent per class from ``tc -s class show dev lo``: ``{"1:100": 123, ...}``."""
    return {m.group(1): int(m.group(2)) for m in _CLASS_LINE.finditer(tc_output)}


# -- nftables -----------------------------------------------------------------------------------------


def nft_script(links: Sequence[Link], port: int, redirects: dict[str, int]) -> str:
    """The whole nftables table of the testbed (for ``nft -f -``), replacing the previous one at once.

    ``redirects``: address -> port its connections to ``port`` are sent to instead (the first
    path's advertiser, a delayed path's proxy); the address stays the same, so the link's classes
    still shape them."""
    cut = [x.address for x in links if x.mode is Mode.CUT]
    stalled = [x.address for x in links if x.mode is Mode.STALL]

    def addr_set(name: str, members: list[str]) -> str:
        elements = f" elements = {{ {', '.join(members)} }};" if members else ""
        return f"  set {name} {{ type ipv4_addr;{elements} }}\n"

    nat = "".join(
        f"    ip daddr {address} tcp dport {port} dnat ip to {address}:{to}\n"
        for address, to in sorted(redirects.items())
    )
    return (
        f"table inet {NFT_TABLE}\n"
        f"delete table inet {NFT_TABLE}\n"
        f"table inet {NFT_TABLE} {{\n"
        + addr_set("cut", cut)
        + addr_set("stalled", stalled)
        + "  chain output {\n"
        "    type filter hook output priority 0; policy accept;\n"
        "    ip daddr @stalled drop\n"
        "    ip saddr @stalled drop\n"
        "    ip daddr @cut tcp flags & (fin|syn|rst|ack) == syn reject with tcp reset\n"
        "  }\n"
        "  chain nat_output {\n"
        "    type nat hook output priority -100; policy accept;\n"
        f"{nat}"
        "  }\n"
        "}\n"
    )
