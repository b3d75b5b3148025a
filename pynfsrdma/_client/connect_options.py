"""The options of ``connect`` (:meth:`.api.Client.connect` and the blocking :func:`.sync.connect`): one
frozen :class:`ConnectOptions`, checked when it is made, before anything is sent.

Both ``connect`` calls take these options as keywords (:data:`takes_connect_options` gives each one
the signature of :class:`ConnectOptions` itself, for type checkers, ``help()`` and IDEs) and hand the
function body one checked object.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from .._proto.rpcsec_gss import Flavor
from .security import DEFAULT, parse_sec
from .stack import xprtsec_of
from .url import (
    MIN_IO_SIZE,
    NfsURL,
    URLError,
    check_url_options,
    parse_url,
    pnfs_of,
    reads_per_compound,
    url_identity,
)

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")

TLS_OPTIONS = ("xprtsec", "truststore", "certificate", "private_key")  # the keywords that are URL options too


def _fail(name: str, value: object, want: str) -> URLError:
    return URLError(f"connect option {name}={value!r}: {want}")


def _whole(name: str, value: object, least: int, most: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least or (most is not None and value > most):
        span = f"from {least} to {most}" if most is not None else f"{least} or more"
        raise _fail(name, value, f"a whole number {span}")


def _seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise _fail(name, value, "a number of seconds above 0")


def _text(name: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise _fail(name, value, "a string")


@dataclass(frozen=True)
class ConnectOptions:
    """How to connect to an export; every field is a keyword of ``connect``.

    ``url``: ``nfs://host[:port]/export?vers=4.2&proto=tcp&...`` (or an :class:`~.url.NfsURL`); else
    ``host``, ``port``, ``export`` and ``proto`` (``tcp`` or ``rdma``).
    ``uid``, ``gid``, ``groups``: the AUTH_SYS identity the requests go as; by default the URL's
    ``uid=``/``gid=``, else the calling process's own, with its supplementary groups.
    ``timeout``: seconds to connect, create the session and look up the export.
    ``hard``, ``timeo`` (seconds) and ``retrans``: as nfs(5) (a soft request fails after ``timeo``
    times ``retrans + 1`` without an answer). ``rsize``, ``wsize``: the largest READ and WRITE.
    ``sec`` (or the URL's ``sec=``): the security flavours to try, as nfs(5) names them (``krb5p``,
    ``krb5i:krb5``, ...); under Kerberos the requests go with the calling user's own ticket
    (``ccache``, a Kerberos cache name such as ``FILE:/tmp/krb5cc_1000``; by default ``KRB5CCNAME`` or
    the default cache), and a user with none gets EACCES. ``sec_path``: the path below the export
    whose security decides the flavour, when it is not the export itself (the command line connects
    at the server's root and names files in exports below it). ``keytab`` (or the URL's ``keytab=``):
    the lease and state operations go under Kerberos with this keytab's first key (by default
    /etc/krb5.keytab when readable and a Kerberos flavour is asked for; else AUTH_SYS).
    ``xprtsec`` (or the URL's ``xprtsec=``): ``none``, ``tls`` or ``mtls``, as nfs(5): every
    connection of the session goes under TLS (RPC-with-TLS, RFC 9289), the server's certificate
    checked against ``truststore`` (a PEM file of CA certificates; by default the system's) for the
    URL's host; under ``mtls`` with the client's ``certificate`` and ``private_key`` (PEM files;
    tlshd.conf's names). A server that will not do TLS, or whose certificate fails the check, is an
    error (EACCES) naming the server and what failed: never plain text.
    ``pnfs`` (or the URL's ``pnfs``/``nopnfs``): READs and WRITEs of open files go straight to the
    block device when the server hands out block layouts (RFC 5663) and the device is on this
    machine (found by its signature; reading it needs the rights to), or by NFSv3 to the data servers
    of a flexfiles layout (RFC 8435) where the server hands out those and no block layout, and
    through the server when not. Off by default.

    An option that does not fit is a :class:`~.url.URLError` (a ValueError) naming it, raised when the
    options are made; a keyword that is none of these is a TypeError, as for any call.
    """

    url: str | NfsURL | None = None
    _: KW_ONLY
    host: str | None = None
    port: int | None = None
    export: str = "/"
    proto: str = "tcp"
    uid: int | None = None
    gid: int | None = None
    groups: Iterable[int] | None = None  # (kept as a tuple)
    timeout: float = 10.0
    hard: bool = False
    timeo: float = 30.0
    retrans: int = 2
    rsize: int = 1 << 20
    wsize: int = 1 << 20
    sec: str | None = None
    sec_path: str | None = None
    ccache: str | None = None
    keytab: str | None = None
    xprtsec: str | None = None
    truststore: str | None = None
    certificate: str | None = None
    private_key: str | None = None
    pnfs: bool | None = None
    # what the options come to (made and checked in __post_init__)
    nfs_url: NfsURL = field(init=False, repr=False, compare=False)
    flavors: tuple[Flavor, ...] = field(init=False, repr=False, compare=False)  # sec=, in order

    def __post_init__(self) -> None:
        for name in ("host", "export", "sec", "sec_path", "ccache", "keytab", *TLS_OPTIONS):
            _text(name, getattr(self, name))
        if self.port is not None:
            _whole("port", self.port, 1, 65535)
        for name in ("uid", "gid"):
            if getattr(self, name) is not None:
                _whole(name, getattr(self, name), 0)
        if self.groups is not None:
            if isinstance(self.groups, str | bytes) or not hasattr(self.groups, "__iter__"):
                raise _fail("groups", self.groups, "a sequence of group ids")
            object.__setattr__(self, "groups", tuple(self.groups))
            for gid in self.groups:
                _whole("groups", gid, 0)
        _seconds("timeout", self.timeout)
        _seconds("timeo", self.timeo)
        _whole("retrans", self.retrans, 0)
        _whole("rsize", self.rsize, MIN_IO_SIZE)
        _whole("wsize", self.wsize, MIN_IO_SIZE)
        for name in ("hard", "pnfs"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "pnfs" and value is None):
                raise _fail(name, value, "True or False")
        u = self._url()
        check_url_options(u)
        xprtsec_of(u)
        reads_per_compound(u)
        pnfs_of(u, self.pnfs)
        url_identity(u)
        given = self.sec if self.sec is not None else u.options.get("sec")
        try:
            flavors = parse_sec(given) if given is not None else DEFAULT
        except ValueError as e:
            raise URLError(str(e)) from None
        object.__setattr__(self, "nfs_url", u)
        object.__setattr__(self, "flavors", tuple(flavors))

    def _url(self) -> NfsURL:
        url = self.url
        if url is None:
            if self.host is None:
                raise URLError("connect needs a URL or a host")
            if self.proto not in ("tcp", "rdma"):
                raise _fail("proto", self.proto, "tcp or rdma")
            hostpart = f"[{self.host}]" if ":" in self.host else self.host
            port = f":{self.port}" if self.port else ""
            url = f"nfs://{hostpart}{port}/{self.export.lstrip('/')}?proto={self.proto}"
        elif not isinstance(url, str | NfsURL):
            raise _fail("url", url, "an nfs:// URL")
        u = parse_url(url) if isinstance(url, str) else url
        tls = {k: getattr(self, k) for k in TLS_OPTIONS if getattr(self, k) is not None}
        return dataclasses.replace(u, options={**u.options, **tls}) if tls else u

    @property
    def sec_given(self) -> bool:
        """Whether the flavours were named (``sec`` or the URL's ``sec=``), not left to the server."""
        return self.sec is not None or "sec" in self.nfs_url.options

    @property
    def xprtsec_mode(self) -> str:
        return xprtsec_of(self.nfs_url).mode

    @property
    def want_pnfs(self) -> bool:
        return pnfs_of(self.nfs_url, self.pnfs)

    def identity(self) -> tuple[int, int, tuple[int, ...]]:
        """The AUTH_SYS uid, gid and groups: those given, else the URL's, else the calling process's
        own (with its supplementary groups when the uid and gid are its own too)."""
        url_uid, url_gid = url_identity(self.nfs_url)
        uid = self.uid if self.uid is not None else url_uid if url_uid is not None else os.getuid()
        gid = self.gid if self.gid is not None else url_gid if url_gid is not None else os.getgid()
        if self.groups is not None:
            return uid, gid, tuple(self.groups)
        return uid, gid, tuple(os.getgroups()) if (uid, gid) == (os.getuid(), os.getgid()) else ()


class _KeywordsOf(Generic[P]):
    """Makes a function or method that takes one :class:`ConnectOptions` callable with the options'
    own parameters: the call makes (and so checks) the options and hands them on. Type checkers,
    ``inspect.signature`` and ``help()`` see the options' parameters."""

    def __init__(self, options: Callable[P, ConnectOptions]) -> None:
        self._options = options
        self._signature = inspect.signature(options)

    def _make(self, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> ConnectOptions:
        unknown = [k for k in kwargs if k not in self._signature.parameters]
        if unknown:
            raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}")
        return self._options(*args, **kwargs)

    def function(self, fn: Callable[[ConnectOptions], R]) -> Callable[P, R]:
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return fn(self._make(args, kwargs, fn.__name__))

        return self._dressed(call, fn, self._signature)

    def method(self, fn: Callable[[S, ConnectOptions], R]) -> Callable[Concatenate[S, P], R]:
        def call(owner: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return fn(owner, self._make(args, kwargs, fn.__name__))

        first = next(iter(inspect.signature(fn).parameters.values()))
        signature = self._signature.replace(parameters=[first, *self._signature.parameters.values()])
        return self._dressed(call, fn, signature)

    @staticmethod
    def _dressed(call: Any, fn: Any, signature: inspect.Signature) -> Any:
        signature = signature.replace(return_annotation=inspect.signature(fn).return_annotation)
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(call, attr, getattr(fn, attr))
        call.__signature__ = signature
        # (what inspect.unwrap finds under a decorator such as asynccontextmanager shows the same)
        call.__wrapped__ = fn
        inner = inspect.unwrap(fn)
        inner.__signature__ = signature
        return call


takes_connect_options = _KeywordsOf(ConnectOptions)
