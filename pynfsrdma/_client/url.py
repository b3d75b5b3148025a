"""NFS URLs: ``nfs://host[:port]/path?vers=4.1&proto=tcp&...`` (RFC 2224's form, with options)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from .._proto.nfs4.const import NFS_PORT, NFS_RDMA_PORT

MIN_IO_SIZE = 4096  # the smallest rsize/wsize: one page, for the API and the mount alike

SUPPORTED_VERSIONS = ("4.1", "4.2")  # vers= (the minor version every COMPOUND of the mount carries)
PROTOCOLS = ("tcp", "rdma")


# What a URL may say to the path API, the CLI and fsspec besides vers=, proto= and port= (a mount takes
# every mount option in its URL too): the trunking and RPC-over-RDMA options, libnfs's uid=/gid=
# (the AUTH_SYS identity to send), nfs(5)'s sec= (the security flavours to try) and keytab= (the
# machine's Kerberos key for the lease and state operations), and RPC-with-TLS's xprtsec= with the
# files it uses (truststore=, certificate=, private_key=: _transport.tls), and batchreads= (several
# READs of a file to a COMPOUND: reads_per_compound).
URL_OPTIONS = frozenset({
    "addrs", "nconnect", "max_connect", "trunkdiscovery", "notrunkdiscovery", "trunkinterval", "stalltimeo",
    "provider", "credits", "inline", "remote_invalidation", "private_data", "pinned",
    "uid", "gid", "sec", "keytab", "xprtsec", "truststore", "certificate", "private_key", "batchreads",
    "pnfs", "nopnfs",
})


def reads_per_compound(url: NfsURL) -> int | None:
    """How many READs of a file ``read_ranges`` (fsspec's ``cat_ranges``) puts in one COMPOUND: two
    by default, the first of whole pages of the file (Linux's nfsd 7.3 misplaces the data of a
    READ that follows one whose data does not end on a page of the reply: tests/vm/README.md);
    one with ``batchreads=0``; as many as fit with ``batchreads=1`` (for a server known to place
    them right: NFS-Ganesha, nfsd 6.1). None: as many as fit."""
    raw = url.options.get("batchreads")
    if raw not in (None, "0", "1"):
        raise URLError(f"batchreads must be 0 or 1, not {raw!r}")
    return {None: 2, "0": 1, "1": None}[raw]


def check_url_options(url: NfsURL) -> None:
    """URLError naming the options of ``url`` that scripted access does not know (a typo is not ignored)."""
    unknown = sorted(set(url.options) - URL_OPTIONS)
    if unknown:
        raise URLError(f"unknown URL option{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)} "
                       f"(known: vers, proto, port, {', '.join(sorted(URL_OPTIONS))})")


def url_identity(url: NfsURL) -> tuple[int | None, int | None]:
    """The uid and gid a URL names (libnfs's ``uid=`` and ``gid=``), or None."""
    ids: list[int | None] = []
    for key in ("uid", "gid"):
        raw = url.options.get(key)
        try:
            ids.append(None if raw is None else int(raw))
        except ValueError:
            raise URLError(f"{key} must be a number, not {raw!r}") from None
    return ids[0], ids[1]


def minor_version(vers: str) -> int:
    """The NFSv4 minor version of a ``vers=`` value ("4.1" -> 1)."""
    return int(vers.partition(".")[2] or 0)


class URLError(ValueError):
    """The URL (or a mount option in it) is not one we understand."""


@dataclass(slots=True)
class NfsURL:
    host: str
    port: int
    path: str = "/"
    vers: str = "4.1"
    proto: str = "tcp"
    options: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        q = "&".join([f"vers={self.vers}", f"proto={self.proto}"] + [f"{k}={v}" for k, v in self.options.items()])
        return f"nfs://{self.address}{self.path}?{q}"


def names_version(url: str) -> bool:
    """Whether the URL says which NFS version to speak (``vers=`` or ``version=``)."""
    if "://" not in url:
        return False
    return any(k in ("vers", "version") for k, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True))


def parse_url(url: str, **overrides: str) -> NfsURL:
    """Parse an NFS URL; ``host:/path`` (the mount(8) form) is accepted too."""
    if "://" not in url:
        if ":" not in url:
            raise URLError(f"{url!r} is not an NFS URL (nfs://host[:port]/path) nor host:/path")
        host, _, path = url.rpartition(":")
        url = f"nfs://{host}/{path.lstrip('/')}"
    parts = urlsplit(url)
    if parts.scheme != "nfs":
        raise URLError(f"{url!r}: the scheme must be nfs://")
    if not parts.hostname:
        raise URLError(f"{url!r}: no server host")
    opts = dict(parse_qsl(parts.query, keep_blank_values=True))
    opts.update(overrides)
    vers = opts.pop("vers", opts.pop("version", "4.1"))
    if vers not in SUPPORTED_VERSIONS:
        raise URLError(f"NFS version {vers} is not supported (this client speaks NFSv4.1 and NFSv4.2)")
    proto = opts.pop("proto", "tcp")
    if proto not in PROTOCOLS:
        raise URLError(f"unknown transport proto={proto} (use tcp or rdma)")
    try:
        port = parts.port
    except ValueError as e:
        raise URLError(f"{url!r}: {e}") from e
    if "port" in opts:
        try:
            port = int(opts.pop("port"))
        except ValueError as e:
            raise URLError(f"port must be a number: {e}") from e
    if port is None:
        port = NFS_RDMA_PORT if proto == "rdma" else NFS_PORT
    path = unquote(parts.path) or "/"
    return NfsURL(parts.hostname, port, path, vers, proto, opts)


def pnfs_of(url: NfsURL, given: bool | None = None) -> bool:
    """pNFS on or off: ``given`` (``connect(pnfs=)``), else the URL's ``pnfs`` (``pnfs=0`` or ``1``, or
    alone) or ``nopnfs``; off by default."""
    if given is not None:
        return given
    if "pnfs" in url.options and "nopnfs" in url.options:
        raise URLError("pnfs and nopnfs together: choose one")
    if "nopnfs" in url.options:
        return False
    raw = url.options.get("pnfs")
    if raw is None:
        return False
    if raw not in ("", "0", "1"):
        raise URLError(f"pnfs must be 0 or 1, not {raw!r}")
    return raw != "0"
