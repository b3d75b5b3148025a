"""Mount options, named as the Linux NFS client (nfs(5)) and FUSE name them.

``parse_options("vers=4.1,soft,timeo=50,actimeo=10,allow_other")`` returns a :class:`MountOptions`;
anything not understood raises :class:`OptionError` naming every unknown option. Options that
mount(8) passes to every helper (``rw``, ``defaults``, ``nodev``, ``_netdev`` ...) are accepted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .._client.url import PROTOCOLS, SUPPORTED_VERSIONS
from .channel import CHANNELS, DEFAULT_CHANNEL

# nfs(5) defaults
DEFAULT_TIMEO_TCP = 600  # deciseconds
DEFAULT_RETRANS = 2
DEFAULT_ACREGMIN = 3
DEFAULT_ACREGMAX = 60
DEFAULT_ACDIRMIN = 30
DEFAULT_ACDIRMAX = 60
# nfs(5) lookupcache=: which names are cached (positive entries, negative ones, none)
LOOKUPCACHE_ALL = "all"
LOOKUPCACHE_POSITIVE = "positive"
LOOKUPCACHE_NONE = "none"
LOOKUPCACHE_MODES = {"all": LOOKUPCACHE_ALL, "positive": LOOKUPCACHE_POSITIVE, "pos": LOOKUPCACHE_POSITIVE,
                     "none": LOOKUPCACHE_NONE}
MAX_IO_SIZE = 1 << 20  # the largest FUSE request; rsize/wsize above it gain nothing
MIN_IO_SIZE = 4096

# Options mount(8) and fstab hand to helpers that mean nothing (more) to this client.
GENERIC_OPTIONS = frozenset(
    {
        "defaults",
        "rw",
        "auto",
        "noauto",
        "user",
        "nouser",
        "users",
        "owner",
        "group",
        "dev",
        "nodev",
        "suid",
        "nosuid",
        "exec",
        "noexec",
        "_netdev",
        "nofail",
        "atime",
        "noatime",
        "relatime",
        "norelatime",
        "strictatime",
        "nodiratime",
        "diratime",
        "async",
        "auto_unmount",
        "intr",
        "nointr",
        "lazytime",
        "nolazytime",
        "silent",
        "loud",
    }
)


# RPC-over-RDMA transport options (proto=rdma), handed to the transport as they are
# (pynfsrdma._transport.rdma.connect_rdma checks their values)
RDMA_OPTIONS = ("provider", "credits", "inline", "remote_invalidation", "pinned")


# Trunking (more paths to the same server), named as the Linux client names them where it can.
# In -o lists, the addresses of addrs= are separated by '+' (commas separate options).
TRUNKING_OPTIONS = ("addrs", "nconnect", "max_connect", "trunkinterval", "stalltimeo")
TRUNKING_FLAGS = ("trunkdiscovery", "notrunkdiscovery")


class OptionError(ValueError):
    """A mount option is unknown or has a bad value; the message names it."""


@dataclass(slots=True)
class MountOptions:
    vers: str = "4.1"
    proto: str = "tcp"
    port: int | None = None
    rsize: int = MAX_IO_SIZE
    wsize: int = MAX_IO_SIZE
    hard: bool = True
    timeo: int = DEFAULT_TIMEO_TCP  # deciseconds, as nfs(5)
    retrans: int = DEFAULT_RETRANS
    acregmin: float = DEFAULT_ACREGMIN
    acregmax: float = DEFAULT_ACREGMAX
    acdirmin: float = DEFAULT_ACDIRMIN
    acdirmax: float = DEFAULT_ACDIRMAX
    noac: bool = False
    lookupcache: str = LOOKUPCACHE_ALL
    ro: bool = False
    allow_other: bool = False
    default_permissions: bool = False
    squash_uid: int | None = None  # every request goes out with this uid (and squash_gid)
    squash_gid: int | None = None
    sec: str | None = None  # nfs(5)'s sec=: the security flavours to try (client.security), None: negotiate
    keytab: str | None = None  # the machine's Kerberos key for the lease and state operations
    debug: bool = False
    channel: str = DEFAULT_CHANNEL  # what carries FUSE requests (fuse.channel.CHANNELS)
    ignored: list[str] = field(default_factory=list)  # generic options accepted and not used
    rdma: dict[str, str] = field(default_factory=dict)  # RDMA_OPTIONS given, for the transport
    trunking: dict[str, str] = field(default_factory=dict)  # TRUNKING_OPTIONS/FLAGS given, URL style

    @property
    def negative_names(self) -> bool:
        """Whether names known not to exist are cached (and answered without asking the server)."""
        return self.lookupcache == LOOKUPCACHE_ALL and self.acdirmin > 0

    @property
    def timeo_seconds(self) -> float:
        return self.timeo / 10.0

    def fuse_options(self, fsname: str, mounter_uid: int | None = None) -> set[str]:
        """The FUSE options of the mount, for the channel (``fuse.channel.open_channel``). A mount
        made by root serves every user, as a kernel NFS mount does (FUSE's ``allow_other``): each
        request carries its caller's credential and the server decides; another user's mount serves
        others only when asked for ``allow_other``."""
        opts = {f"fsname={fsname}", "subtype=pynfsrdma", "auto_unmount"}
        uid = os.geteuid() if mounter_uid is None else mounter_uid
        if self.allow_other or uid == 0:
            opts.add("allow_other")
        if self.default_permissions:
            opts.add("default_permissions")
        if self.ro:
            opts.add("ro")
        return opts


def _int(name: str, value: str | None, lo: int = 0, hi: int | None = None) -> int:
    if value is None or value == "":
        raise OptionError(f"mount option {name} needs a value ({name}=N)")
    try:
        n = int(value, 0)
    except ValueError:
        raise OptionError(f"mount option {name}={value}: not a number") from None
    if n < lo or (hi is not None and n > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise OptionError(f"mount option {name}={value}: out of range ({rng})")
    return n


def _flag(name: str, value: str | None) -> None:
    if value is not None:
        raise OptionError(f"mount option {name} takes no value (got {name}={value})")


def split_options(text: str | None) -> list[tuple[str, str | None]]:
    """``"a,b=c"`` -> ``[("a", None), ("b", "c")]`` (empty items skipped)."""
    out: list[tuple[str, str | None]] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        k, eq, v = item.partition("=")
        out.append((k, v if eq else None))
    return out


def parse_options(*texts: str | None) -> MountOptions:
    """Parse one or more ``-o`` strings (later ones win)."""
    o = MountOptions()
    unknown: list[str] = []
    actimeo: int | None = None
    explicit: set[str] = set()
    for text in texts:
        for k, v in split_options(text):
            if k == "vers" or k == "nfsvers":
                if v not in SUPPORTED_VERSIONS:
                    raise OptionError(f"mount option {k}={v}: NFS versions 4.1 and 4.2 are supported")
                o.vers = v
            elif k == "proto":
                if v not in PROTOCOLS:
                    raise OptionError(f"mount option proto={v}: use one of {', '.join(PROTOCOLS)}")
                o.proto = v
            elif k == "port":
                o.port = _int(k, v, 1, 65535)
            elif k in ("rsize", "wsize"):
                n = _int(k, v, MIN_IO_SIZE)
                setattr(o, k, min(n, MAX_IO_SIZE))
            elif k in ("hard", "soft"):
                _flag(k, v)
                o.hard = k == "hard"
            elif k == "timeo":
                o.timeo = _int(k, v, 1)
            elif k == "retrans":
                o.retrans = _int(k, v, 0)
            elif k == "actimeo":
                actimeo = _int(k, v, 0)
            elif k in ("acregmin", "acregmax", "acdirmin", "acdirmax"):
                setattr(o, k, float(_int(k, v, 0)))
                explicit.add(k)
            elif k in ("noac", "ac"):
                _flag(k, v)
                o.noac = k == "noac"
            elif k == "lookupcache":
                if v not in LOOKUPCACHE_MODES:
                    raise OptionError(f"mount option lookupcache={v}: use one of all, positive, none")
                o.lookupcache = LOOKUPCACHE_MODES[v]
            elif k in ("ro", "rw"):
                _flag(k, v)
                o.ro = k == "ro"
            elif k in ("allow_other", "default_permissions", "debug"):
                _flag(k, v)
                setattr(o, k, True)
            elif k == "channel":
                if v not in CHANNELS:
                    raise OptionError(f"mount option channel={v}: use one of {', '.join(CHANNELS)}")
                o.channel = v
            elif k == "sec":
                from .._client.security import parse_sec

                try:
                    parse_sec(v or "")
                except ValueError as e:
                    raise OptionError(f"mount option {e}") from None
                o.sec = v
            elif k == "keytab":
                if not v:
                    raise OptionError("mount option keytab needs a file (keytab=/etc/krb5.keytab)")
                o.keytab = v
            elif k == "squash_uid":
                o.squash_uid = _int(k, v, 0, 0xFFFFFFFF)
            elif k == "squash_gid":
                o.squash_gid = _int(k, v, 0, 0xFFFFFFFF)
            elif k in RDMA_OPTIONS:
                if not v:
                    raise OptionError(f"mount option {k} needs a value ({k}=...)")
                o.rdma[k] = v
            elif k in TRUNKING_OPTIONS:
                if not v:
                    raise OptionError(f"mount option {k} needs a value ({k}=...)")
                o.trunking[k] = v.replace("+", ",") if k == "addrs" else v
            elif k in TRUNKING_FLAGS:
                _flag(k, v)
                for other in TRUNKING_FLAGS:
                    o.trunking.pop(other, None)
                o.trunking[k] = ""
            elif k in GENERIC_OPTIONS:
                o.ignored.append(k)
            else:
                unknown.append(k if v is None else f"{k}={v}")
    if unknown:
        s = "s" if len(unknown) > 1 else ""
        raise OptionError(f"unknown mount option{s}: {', '.join(unknown)}")
    if actimeo is not None:  # nfs(5): actimeo sets all four, unless one is given explicitly
        for k in ("acregmin", "acregmax", "acdirmin", "acdirmax"):
            if k not in explicit:
                setattr(o, k, float(actimeo))
    if o.noac:
        o.acregmin = o.acregmax = o.acdirmin = o.acdirmax = 0.0
    if o.acregmin > o.acregmax:
        raise OptionError(f"acregmin={o.acregmin:g} is larger than acregmax={o.acregmax:g}")
    if o.acdirmin > o.acdirmax:
        raise OptionError(f"acdirmin={o.acdirmin:g} is larger than acdirmax={o.acdirmax:g}")
    if o.squash_uid is not None and o.squash_gid is None:
        o.squash_gid = o.squash_uid
    if o.squash_gid is not None and o.squash_uid is None:
        raise OptionError("squash_gid= needs squash_uid=")
    if o.trunking:
        from .._trunking import TrunkingOptions
        from .._trunking.discovery import TrunkingOptionError

        try:
            TrunkingOptions.from_url_options(o.trunking)
        except TrunkingOptionError as e:
            raise OptionError(f"mount option {e}") from None
    return o
