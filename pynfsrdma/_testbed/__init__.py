"""Test and demo infrastructure: a local NFS-Ganesha, per-path TCP proxies with fault controls, and the
detached testbed the ``pynfsrdma testbed`` command manages.

- :class:`Ganesha` -- one NFS-Ganesha process with its own export, port and recovery directory.
- :class:`Proxy` -- a TCP proxy for one path: cut, stall, delay, throttle, restore (trio, in-process).
- :func:`open_paths` / :class:`ProxiedPaths` -- N proxies at 127.0.0.2, .3, ... in front of a server.
- :class:`MutatingProxy` / :class:`ReplyMutator` -- a proxy that breaks the protocol in a server's
  replies (seeded, at a rate or by :class:`Rule`; the classes of change are :class:`Mutation`).
- :func:`ensure_testbed` -- the detached testbed's description, starting it if needed.
"""

from .daemon import TestbedError, ensure_testbed
from .faults import Fault, Mode, TokenBucket
from .ganesha import Ganesha, GaneshaError, GaneshaNotInstalled
from .mutating_proxy import MutatingProxy
from .mutations import Mutation, ReplyMutator, Rule
from .proxied_paths import ProxiedPaths, open_paths, path_addresses
from .proxy import Proxy, ProxyStats

__all__ = [
    "Fault",
    "Ganesha",
    "GaneshaError",
    "GaneshaNotInstalled",
    "Mode",
    "MutatingProxy",
    "Mutation",
    "ProxiedPaths",
    "Proxy",
    "ProxyStats",
    "ReplyMutator",
    "Rule",
    "TestbedError",
    "TokenBucket",
    "ensure_testbed",
    "open_paths",
    "path_addresses",
]
