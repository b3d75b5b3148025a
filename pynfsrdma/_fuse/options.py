"""Mount options, named as the Linux NFS client (nfs(5)) and FUSE name them.

``parse_options("vers=4.1,soft,timeo=50,actimeo=10,allow_other")`` returns a :class:`MountOptions`;
anything not understood raises :class:`OptionError` naming every unknown option. Options that
mount(8) passes to every helper (``rw``, ``defaults``, ``nodev``, ``_netdev`` ...) are accepted.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, fields

from .._client.url import MIN_IO_SIZE, PROTOCOLS, SUPPORTED_VERSIONS
from .._transport.xprtsec import TLS_OPTIONS, XPRTSEC_MODES, XprtSec, XprtSecError
from .channel import CHANNELS, DEFAULT_CHANNEL
from .kernel.abi import MAX_PAGES_FIELD

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
# vers=: the minor versions a mount tries, in order (nfs(5): vers=4 is the highest both speak)
VERSIONS_TO_TRY = {"4": ("4.2", "4.1"), **{v: (v,) for v in SUPPORTED_VERSIONS}}
# local_lock= (nfs(5)): which kinds of lock stay local to the mount instead of going to the server
LOCAL_LOCKS = {"none": frozenset(), "flock": frozenset({"flock"}), "posix": frozenset({"posix"}),
               "all": frozenset({"flock", "posix"})}
# retry= (nfs(5), minutes): how long a mount keeps trying to reach the server; nfs(5)'s default in the
# background (bg). In the foreground a mount tries once unless retry= is given.
DEFAULT_BG_RETRY = 10000
# nfs(5) options that mean nothing to this client: accepted, with a one-line note saying why
NOTED_OPTIONS = {
    "cto": None,
    "nocto": "every open asks the server (an OPEN, whose reply carries the change attribute), "
    "as with cto",
    "fg": None,
    "noresvport": None,  # (every connection goes from an unprivileged port, as noresvport asks)
}
MAX_IO_SIZE = 1 << 20  # the largest FUSE request; rsize/wsize above it gain nothing
MAX_BACKGROUND_FIELD = 0xFFFF  # max_background= (16 bits too)
MAX_READ_AHEAD_OPTION = 1 << 30  # max_readahead= in bytes

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
    pnfs: bool = False  # READs and WRITEs by the block or flexfiles layout (pNFS) where the server hands one out
    lookupcache: str = LOOKUPCACHE_ALL
    ro: bool = False
    allow_other: bool = False
    # the kernel checks each caller's permission from the mode, owner and group (FUSE's
    # default_permissions); None: on whenever other users are served (see fuse_options)
    default_permissions: bool | None = None
    squash_uid: int | None = None  # every request goes out with this uid (and squash_gid)
    squash_gid: int | None = None
    sec: str | None = None  # nfs(5)'s sec=: the security flavours to try (client.security), None: negotiate
    keytab: str | None = None  # the machine's Kerberos key for the lease and state operations
    debug: bool = False
    channel: str = DEFAULT_CHANNEL  # what carries FUSE requests (fuse.channel.CHANNELS)
    # io_uring: the native channel takes requests by FUSE over io_uring where the kernel offers it
    # (the fuse module's enable_uring; else by /dev/fuse, with a warning); noio_uring: by /dev/fuse;
    # None: IO_URING_DEFAULT (off)
    io_uring: bool | None = None
    local_lock: str = "none"  # nfs(5)'s local_lock= (nolock: all), a key of LOCAL_LOCKS
    # the kernel gathers writes in its page cache and sends them as large WRITEs in the background
    # (FUSE's writeback cache; the default); nowriteback_cache: every write(2) reaches the daemon
    # as it comes (with the cache the kernel keeps mtimes by its own coarse clock, and O_APPEND
    # writes, which go around it, leave its mtime behind)
    writeback_cache: bool = True
    # FUSE's request sizes (channel=native): pages a READ or WRITE request carries at most (None: as
    # many as the kernel allows, fs.fuse.max_pages_limit), the kernel's read-ahead window in bytes
    # (None: sized from the paths), and its background requests (None: sized from that window)
    max_pages: int | None = None
    max_readahead: int | None = None
    max_background: int | None = None
    bg: bool = False  # a mount that cannot reach the server goes on trying in the background
    retry: int | None = None  # minutes to keep trying to reach the server (None: see DEFAULT_BG_RETRY)
    ignored: list[str] = field(default_factory=list)  # generic options accepted and not used
    notes: list[str] = field(default_factory=list)  # one line each for options that mean nothing here
    rdma: dict[str, str] = field(default_factory=dict)  # RDMA_OPTIONS given, for the transport
    trunking: dict[str, str] = field(default_factory=dict)  # TRUNKING_OPTIONS/FLAGS given, URL style
    tls: dict[str, str] = field(default_factory=dict)  # TLS_OPTIONS given (xprtsec=...), for the transport

    @property
    def negative_names(self) -> bool:
        """Whether names known not to exist are cached (and answered without asking the server)."""
        return self.lookupcache == LOOKUPCACHE_ALL and self.acdirmin > 0

    @property
    def timeo_seconds(self) -> float:
        return self.timeo / 10.0

    @property
    def versions(self) -> tuple[str, ...]:
        """The NFS versions to try, in order (``vers=4``: 4.2, then 4.1)."""
        return VERSIONS_TO_TRY[self.vers]

    @property
    def local_locks(self) -> frozenset[str]:
        """The kinds of lock (``posix``, ``flock``) kept local to the mount (``local_lock=``, ``nolock``)."""
        return LOCAL_LOCKS[self.local_lock]

    @property
    def retry_seconds(self) -> float:
        """How long to keep trying to reach the server at mount time (0: one attempt)."""
        minutes = self.retry if self.retry is not None else DEFAULT_BG_RETRY if self.bg else 0
        return minutes * 60.0

    def serves_others(self, mounter_uid: int | None = None) -> bool:
        """Whether users other than the one who mounts use the mount (``allow_other``, or root's)."""
        return self.allow_other or (os.geteuid() if mounter_uid is None else mounter_uid) == 0

    def kernel_checks_permissions(self, mounter_uid: int | None = None) -> bool:
        """Whether the kernel checks each caller's permission from the mode bits (FUSE's
        ``default_permissions``): see :meth:`fuse_options`."""
        if self.default_permissions is not None:
            return self.default_permissions
        return self.serves_others(mounter_uid) and self.squash_uid is None

    def server_checks_each_name(self, mounter_uid: int | None = None) -> bool:
        """Whether every name a caller reaches is looked up on the server as that caller (the kernel
        keeps no name: entry timeout 0), so that the server checks each directory's search
        permission by its own rules: on a mount other users share where the kernel checks nothing
        (``nodefault_permissions``), as the Linux client asks the server each user's access."""
        return (self.serves_others(mounter_uid) and not self.kernel_checks_permissions(mounter_uid)
                and self.squash_uid is None)

    def fuse_options(self, fsname: str, mounter_uid: int | None = None) -> set[str]:
        """The FUSE options of the mount, for the channel (``fuse.channel.open_channel``). A mount
        made by root serves every user, as a kernel NFS mount does (FUSE's ``allow_other``): each
        request carries its caller's credential and the server decides; another user's mount serves
        others only when asked for ``allow_other``.

        A mount that serves other users has the kernel check permissions too (``default_permissions``),
        as the Linux NFS client checks each user's access: without it FUSE checks neither a
        directory's search permission for names the kernel has cached nor the mode of a FIFO or
        device before opening it, and neither reaches the daemon. ``nodefault_permissions`` leaves
        every check to the server (for rules the mode bits do not show: ACLs, id mapping; see
        :meth:`server_checks_each_name`), and so does ``squash_uid=``, where the server sees one
        user for every caller."""
        opts = {f"fsname={fsname}", "subtype=pynfsrdma", "auto_unmount"}
        if self.serves_others(mounter_uid):
            opts.add("allow_other")
        if self.kernel_checks_permissions(mounter_uid):
            opts.add("default_permissions")
        if self.ro:
            opts.add("ro")
        return opts


# What the kernel shows among a FUSE mount's options, which mount(8) hands back on a remount
KERNEL_OPTIONS = frozenset({"user_id", "group_id", "rootmode", "blksize", "max_read", "fd"})
# What a remount changes: the read-only flag (as nfs(5)'s remount) and the attribute cache's timeouts.
# bg, retry=, notes and the generic options are for the mount's start only.
REMOUNT_CHANGES = frozenset({"ro", "acregmin", "acregmax", "acdirmin", "acdirmax", "noac"})
MOUNT_TIME_ONLY = frozenset({"bg", "retry", "notes", "ignored"})


def parse_remount(current: MountOptions, fuse_options: set[str], *texts: str | None) -> MountOptions:
    """The options of a mount after ``mount -o remount,...``: ``current`` with what ``texts`` change.
    Options that cannot change may be given again with the value in force (fstab lines repeat them;
    mount(8) adds the kernel's own, ``fuse_options`` those the mount was made with); any other value
    raises :class:`OptionError` naming them."""
    kept: list[str] = []
    for text in texts:
        for k, v in split_options(text):
            if k == "remount" or k in KERNEL_OPTIONS:
                continue
            if v is None and k in ("allow_other", "default_permissions") and k in fuse_options:
                continue
            kept.append(k if v is None else f"{k}={v}")
    new = parse_options(",".join(kept), base=current)
    fixed = [f.name for f in fields(MountOptions)
             if f.name not in REMOUNT_CHANGES | MOUNT_TIME_ONLY and getattr(new, f.name) != getattr(current, f.name)]
    if fixed:
        s = "s" if len(fixed) > 1 else ""
        raise OptionError(f"a remount cannot change the option{s} {', '.join(fixed)} (unmount and mount again)")
    return new


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


def parse_options(*texts: str | None, base: MountOptions | None = None) -> MountOptions:
    """Parse one or more ``-o`` strings (later ones win), onto a copy of ``base`` if given (a remount)."""
    o = copy.deepcopy(base) if base is not None else MountOptions()
    unknown: list[str] = []
    actimeo: int | None = None
    explicit: set[str] = set()
    for text in texts:
        for k, v in split_options(text):
            if k == "vers" or k == "nfsvers":
                if v not in VERSIONS_TO_TRY:
                    raise OptionError(f"mount option {k}={v}: NFS versions 4 (the highest both speak), "
                                      "4.1 and 4.2 are supported")
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
                if k == "ac" and o.noac:  # (back from noac: nfs(5)'s timeouts, unless given)
                    o.acregmin, o.acregmax = DEFAULT_ACREGMIN, DEFAULT_ACREGMAX
                    o.acdirmin, o.acdirmax = DEFAULT_ACDIRMIN, DEFAULT_ACDIRMAX
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
            elif k in ("writeback_cache", "nowriteback_cache"):
                _flag(k, v)
                o.writeback_cache = k == "writeback_cache"
            elif k in ("io_uring", "noio_uring"):
                _flag(k, v)
                o.io_uring = k == "io_uring"
            elif k == "max_pages":
                o.max_pages = _int(k, v, 1, MAX_PAGES_FIELD)
            elif k == "max_readahead":
                o.max_readahead = _int(k, v, 0, MAX_READ_AHEAD_OPTION)
            elif k == "max_background":
                o.max_background = _int(k, v, 1, MAX_BACKGROUND_FIELD)
            elif k == "nodefault_permissions":
                _flag(k, v)
                o.default_permissions = False
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
            elif k in TLS_OPTIONS:
                if not v:
                    raise OptionError(f"mount option {k} needs a value ({k}=...)")
                o.tls[k] = v
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
            elif k in ("pnfs", "nopnfs"):
                _flag(k, v)
                o.pnfs = k == "pnfs"
            elif k in ("lock", "nolock"):
                _flag(k, v)
                o.local_lock = "all" if k == "nolock" else "none"
            elif k == "local_lock":
                if v not in LOCAL_LOCKS:
                    raise OptionError(f"mount option local_lock={v}: use one of {', '.join(LOCAL_LOCKS)}")
                o.local_lock = v
            elif k in ("bg", "fg"):
                _flag(k, v)
                o.bg = k == "bg"
            elif k == "retry":
                o.retry = _int(k, v, 0)
            elif k in NOTED_OPTIONS:
                _flag(k, v)
                note = NOTED_OPTIONS[k]
                if note is not None and all(not n.startswith(f"{k}: ") for n in o.notes):
                    o.notes.append(f"{k}: {note}")
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
    if o.channel != "native":
        sizes = [k for k in ("max_pages", "max_readahead", "max_background") if getattr(o, k) is not None]
        if sizes:
            raise OptionError(f"mount option {sizes[0]} needs channel=native (libfuse, under channel={o.channel}, "
                              "sizes FUSE's requests itself)")
    if o.squash_uid is not None and o.squash_gid is None:
        o.squash_gid = o.squash_uid
    if o.squash_gid is not None and o.squash_uid is None:
        raise OptionError("squash_gid= needs squash_uid=")
    if o.tls:
        try:
            xprtsec = XprtSec.from_options(o.tls)
        except XprtSecError as e:
            raise OptionError(f"mount option {e}") from None
        if xprtsec.on and o.proto == "rdma":
            raise OptionError(f"mount option xprtsec={xprtsec.mode} needs proto=tcp: RPC-with-TLS (RFC 9289) is "
                              "for stream transports, not RDMA")
    if o.trunking:
        from .._trunking import TrunkingOptions
        from .._trunking.discovery import TrunkingOptionError

        try:
            TrunkingOptions.from_url_options(o.trunking)
        except TrunkingOptionError as e:
            raise OptionError(f"mount option {e}") from None
    return o


# -- the list mount --help shows, made from the options themselves ------------------------------------------
# Each field of MountOptions is an option of the same name: a flag (bool), a number (int), seconds (float),
# or one of the values named here. Options that set a field under another name, or its opposite, follow
# it; the fields that gather several (lists and dicts: rdma, trunking, ignored) are listed from the
# option lists above.
_VALUES = {
    "vers": "|".join(VERSIONS_TO_TRY),
    "local_lock": "|".join(LOCAL_LOCKS),
    "retry": "MINUTES",
    "proto": "|".join(PROTOCOLS),
    "lookupcache": "|".join(dict.fromkeys(LOOKUPCACHE_MODES.values())),
    "channel": "|".join(CHANNELS),
    "sec": "sys|krb5|krb5i|krb5p[:...]",
    "keytab": "FILE",
    "timeo": "DECISECONDS",
    "max_readahead": "BYTES",
}
_ALSO = {"vers": ["nfsvers=..."], "hard": ["soft"], "ro": ["rw"], "noac": ["ac"], "acregmin": ["actimeo=S"],
         "default_permissions": ["nodefault_permissions"], "local_lock": ["nolock", "lock"], "bg": ["fg"],
         "pnfs": ["nopnfs"], "writeback_cache": ["nowriteback_cache"], "io_uring": ["noio_uring"]}


def _syntax(name: str, kind: str) -> str:
    if name in _VALUES:
        return f"{name}={_VALUES[name]}"
    if kind.startswith("bool"):
        return name
    if kind.startswith("float"):
        return f"{name}=S"
    return f"{name}=N"


def option_list() -> list[str]:
    """Every option :func:`parse_options` takes, as ``mount --help`` lists them (``vers=4.1|4.2``,
    ``hard``, ``soft``, ``rsize=N`` ...), then the ones mount(8) passes to every helper."""
    out: list[str] = []
    for f in fields(MountOptions):
        if str(f.type).startswith(("list", "dict")):
            continue
        out.append(_syntax(f.name, str(f.type)))
        out += _ALSO.get(f.name, [])
    out += [f"xprtsec={'|'.join(XPRTSEC_MODES)}"] + [f"{k}=FILE" for k in TLS_OPTIONS if k != "xprtsec"]
    out += [f"{k}=..." for k in (*RDMA_OPTIONS, *TRUNKING_OPTIONS)] + list(TRUNKING_FLAGS)
    out += [k for k in NOTED_OPTIONS if k not in out]  # (accepted, with a note where they mean nothing here)
    return out


def options_help(width: int = 100) -> str:
    """The text of ``mount --help`` after the usage: every option, from :func:`option_list`."""
    import textwrap

    wrap = textwrap.TextWrapper(width=width, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join([
        textwrap.fill("mount options (comma-separated, several -o allowed), as nfs(5) and FUSE name them "
                      "(mount.pynfsrdma(8) says what each does):", width),
        wrap.fill(" ".join(option_list())),
        "and, accepted with no effect, those mount(8) and fstab pass to every helper:",
        wrap.fill(" ".join(sorted(GENERIC_OPTIONS))),
    ])
