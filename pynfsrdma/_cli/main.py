"""The ``pynfsrdma`` command: scripted file access to NFSv4.1 servers, the testbed, the mount.

Remote paths are NFS URLs (``nfs://host[:port]/export/dir/file``) or ``host:/export/dir/file``;
the whole path is resolved from the server's pseudo-filesystem root. Errors are one line on
standard error, like ``pynfsrdma: 127.0.0.1:2049:/export/x: No such file or directory
(NFS4ERR_NOENT)`` (a path on a server is named with the server, local paths as they are), with a
non-zero exit status, whatever the server sends (never a traceback: one from our own code shows with
``-vv``). The file commands log nothing else unless asked (``-v``): a server's misbehaviour on the
way to the result goes to the log, not into a script's output.
"""

from __future__ import annotations

import argparse
import logging
import posixpath
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import __version__
from . import coreutils
from .output import print_json

if TYPE_CHECKING:
    from .._client.api import Client
    from .._client.attributes import FileAttrs
    from .._client.url import NfsURL

# Each command imports what it uses when it runs (the client, trio, the progress bar): the parser and
# --version import none of it (tests/cli/test_startup.py).

PROG = "pynfsrdma"
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
EXIT_SOFTWARE = 70  # (sysexits.h's EX_SOFTWARE: an error of ours, not of the server or the caller)
log = logging.getLogger(__name__)


def is_remote(s: str) -> bool:
    return s.startswith("nfs://") or (":" in s and not s.startswith("/") and ":/" in s)


def _split_remote(s: str, args: argparse.Namespace) -> tuple[NfsURL, str]:
    """The server (connected at the pseudo-fs root) and the path on it. The server is kept in ``args``
    for the error messages (:func:`_message`)."""
    from .._client.url import parse_url

    u = parse_url(s)
    path = u.path
    u.path = "/"
    args.server = u.address
    return u, path


def _connect_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    # uid/gid: --uid/--gid, else the URL's uid=/gid=, else the caller's own
    return {"uid": args.uid, "gid": args.gid, "timeout": args.timeout, "timeo": args.timeout}


def _name_given(url: str) -> str:
    """A remote file's name as the user gave it, to print where coreutils print the name given: the
    URL without its options."""
    return url.split("?", 1)[0]


def _stat_json(name: str, a: FileAttrs) -> dict[str, Any]:
    d = a.as_dict()
    d["name"] = name
    return d




async def _with_client(url: NfsURL, args: argparse.Namespace, fn: Callable[[Client], Awaitable[int]],
                       path: str | None = None) -> int:
    from .._client.api import Client

    # (connected at the server's root: the security flavour is the one of the export ``path`` is in)
    async with Client.connect(url, **_connect_kwargs(args), sec_path=path) as client:
        return await fn(client)


def _run(url: NfsURL, args: argparse.Namespace, fn: Callable[[Client], Awaitable[int]],
         path: str | None = None) -> int:
    """``fn(client)`` on a client connected to ``url``, in a trio run of its own."""
    import trio

    return trio.run(_with_client, url, args, fn, path)


def _out(args: argparse.Namespace, obj: dict[str, Any], text: str | None) -> None:
    if args.json:
        print_json(obj)
    elif text is not None:
        print(text)


# -- commands -----------------------------------------------------------------------------------------
def cmd_ls(args: argparse.Namespace) -> int:
    from . import listing

    url, path = _split_remote(args.url, args)
    return _run(url, args, lambda client: listing.run(client, path, args), path)


def cmd_stat(args: argparse.Namespace) -> int:
    url, path = _split_remote(args.url, args)

    async def run(client: Client) -> int:
        a = await (client.stat(path) if args.dereference else client.lstat(path))
        target = await client.readlink(path) if a.is_symlink else None
        d = _stat_json(path, a)
        if target is not None:
            d["target"] = target
        _out(args, d, coreutils.stat_text(_name_given(args.url), a, target))
        return 0

    return _run(url, args, run, path)


def cmd_cat(args: argparse.Namespace) -> int:
    url, path = _split_remote(args.url, args)

    async def run(client: Client) -> int:
        out = sys.stdout.buffer
        async with await client.open(path, "r") as f:
            async for _, view in f.iter_views():
                out.write(view)
        out.flush()
        return 0

    return _run(url, args, run, path)


def _progress(args: argparse.Namespace) -> bool:
    return not args.json


def cmd_get(args: argparse.Namespace) -> int:
    from . import transfer

    url, path = _split_remote(args.remote, args)
    local = args.local or "."
    args.local_paths = [local]

    async def run(client: Client) -> int:
        target, totals = await transfer.get(client, path, local, args.recursive, _progress(args))
        _out(args, {"remote": path, "local": target, "bytes": totals.bytes, "files": totals.files}, None)
        return 0

    return _run(url, args, run, path)


def cmd_put(args: argparse.Namespace) -> int:
    from . import transfer

    url, path = _split_remote(args.remote, args)
    args.local_paths = [args.local]

    async def run(client: Client) -> int:
        target, totals = await transfer.put(client, args.local, path, args.recursive, _progress(args))
        _out(args, {"remote": target, "local": args.local, "bytes": totals.bytes, "files": totals.files}, None)
        return 0

    return _run(url, args, run, path)


def cmd_cp(args: argparse.Namespace) -> int:
    from .._client.url import URLError, names_version
    from .._session.errors import NotNFSv41Server
    from . import transfer

    src_remote, dst_remote = is_remote(args.src), is_remote(args.dst)
    if src_remote and not dst_remote:
        args.remote, args.local = args.src, args.dst
        return cmd_get(args)
    if dst_remote and not src_remote:
        args.remote, args.local = args.dst, args.src
        return cmd_put(args)
    if not src_remote:
        raise URLError("cp needs at least one NFS URL (for local copies use cp(1))")
    su, spath = _split_remote(args.src, args)
    du, dpath = _split_remote(args.dst, args)
    if su.address != du.address:
        raise URLError("cp between two different servers is not supported; use get then put")
    # NFSv4.2 unless a URL says otherwise: the server may then copy the data itself (COPY)
    upgraded = not names_version(args.src) and not names_version(args.dst) and su.vers != "4.2"
    if upgraded:
        su.vers = "4.2"

    async def run(client: Client) -> int:
        target, totals = await transfer.copy(client, spath, dpath, args.recursive, _progress(args))
        _out(args, {"src": spath, "dst": target, "bytes": totals.bytes, "files": totals.files}, None)
        return 0

    try:
        return _run(su, args, run, spath)
    except NotNFSv41Server:
        if not upgraded:
            raise
        su.vers = "4.1"  # a server without NFSv4.2: READs and WRITEs over NFSv4.1
        return _run(su, args, run, spath)


def cmd_mkdir(args: argparse.Namespace) -> int:
    url, path = _split_remote(args.url, args)

    async def run(client: Client) -> int:
        if args.parents:
            await client.makedirs(path, int(args.mode, 8), exist_ok=True)
        else:
            await client.mkdir(path, int(args.mode, 8))
        _out(args, {"created": path}, None)
        return 0

    return _run(url, args, run, path)


def cmd_rm(args: argparse.Namespace) -> int:
    url, path = _split_remote(args.url, args)

    async def run(client: Client) -> int:
        try:
            await client.remove(path)
        except IsADirectoryError:
            if args.recursive:
                await client.rmtree(path)
            elif args.dir:
                await client.rmdir(path)
            else:
                raise
        _out(args, {"removed": path}, None)
        return 0

    return _run(url, args, run, path)


def cmd_mv(args: argparse.Namespace) -> int:
    import shutil

    from .._client.url import URLError
    from . import transfer

    su, spath = _split_remote(args.src, args)
    if is_remote(args.dst):
        du, dpath = _split_remote(args.dst, args)
        if du.address != su.address:
            raise URLError("mv between two different servers is not supported")
    else:
        dpath = args.dst if args.dst.startswith("/") else posixpath.join(posixpath.dirname(spath.rstrip("/")), args.dst)

    async def run(client: Client) -> int:
        target = await transfer.remote_destination(client, dpath, posixpath.basename(spath.rstrip("/")))
        s, t = await client.lstat(spath), await _lstat_or_none(client, target)
        if t is not None and (t.fsid, t.fileid) == (s.fsid, s.fileid):
            raise shutil.SameFileError(f"{spath!r} and {target!r} are the same file")
        await client.rename(spath, target)
        _out(args, {"src": spath, "dst": target}, None)
        return 0

    return _run(su, args, run, spath)


async def _lstat_or_none(client: Client, path: str) -> FileAttrs | None:
    try:
        return await client.lstat(path)
    except FileNotFoundError:
        return None


def cmd_df(args: argparse.Namespace) -> int:
    url, path = _split_remote(args.url, args)

    async def run(client: Client) -> int:
        s = await client.statfs(path)
        used = s.space_total - s.space_free
        d = {"path": path, "size": s.space_total, "used": used, "avail": s.space_avail,
             "files": s.files_total, "files_free": s.files_free}
        # (the file system as a mount of it names itself, host:/path)
        host = f"[{url.host}]" if ":" in url.host else url.host
        _out(args, d, coreutils.df_table([(f"{host}:{path}", s.space_total, used, s.space_avail)], args.human))
        return 0

    return _run(url, args, run, path)


# -- the parser ---------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="A userspace NFSv4.1 client.",
        epilog="URLs: nfs://host[:port]/path?option=value&... (or host:/path); e.g. vers=4.2, proto=rdma, "
               "sec=krb5p, xprtsec=tls&truststore=ca.pem (RPC-with-TLS), pnfs (data by the block, SCSI or flexfiles layout). pynfsrdma(1) lists "
               "every URL option "
               "and says what each does.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    p.add_argument("--trace", metavar="FILE", help="trace every RPC (xid, path, status, time, ops) to FILE (- for stderr)")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="machine-readable output")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--uid", type=int, help="AUTH_SYS uid (default: yours)")
    common.add_argument("--gid", type=int, help="AUTH_SYS gid (default: yours)")
    common.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the server")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help: str,
            add_help: bool = True, json: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, parents=[as_json, common] if json else [common], help=help, description=help,
                            add_help=add_help)
        # (one line of error at most without -v)
        sp.set_defaults(func=fn, quiet_log=True, sends_rpcs=True, subparser=sp)
        return sp

    sp = add("ls", cmd_ls, "list a directory (or name a file) as ls(1) does", add_help=False)  # -h is ls(1)'s human-readable sizes
    sp.add_argument("--help", action="help", help="show this help message and exit")
    sp.add_argument("url")
    sp.add_argument("-l", "--long", action="store_true", help="mode, links, owner, group, size, time, name")
    sp.add_argument("-a", "--all", action="store_true", help="names starting with . too, and . and ..")
    sp.add_argument("-R", "--recursive", action="store_true", help="the directories below too")
    sp.add_argument("-h", "--human-readable", dest="human", action="store_true",
                    help="sizes as 1.5K, 20M, 3.1G (with -l)")
    sp = add("stat", cmd_stat, "show a file's attributes as stat(1) does (--json: as numbers)")
    sp.add_argument("url")
    sp.add_argument("-L", "--dereference", action="store_true",
                    help="follow a final symlink (without -L: the link itself, as stat(1))")
    sp = add("cat", cmd_cat, "write a file to standard output", json=False)
    sp.add_argument("url")
    # (its output is the file: --json is refused by name, see _refused)
    sp.add_argument("--json", action="store_true", dest="json_refused", help=argparse.SUPPRESS)
    sp = add("get", cmd_get, "copy a remote file (or tree, -r) to a local path")
    sp.add_argument("remote")
    sp.add_argument("local", nargs="?")
    sp.add_argument("-r", "--recursive", action="store_true", help="copy directories and what is in them")
    sp = add("put", cmd_put, "copy a local file (or tree, -r) to a remote path")
    sp.add_argument("local")
    sp.add_argument("remote")
    sp.add_argument("-r", "--recursive", action="store_true", help="copy directories and what is in them")
    sp = add("cp", cmd_cp, "copy (local to remote, remote to local, or within one server: there the server "
                           "copies the data itself when it can, NFSv4.2 COPY)")
    sp.add_argument("src")
    sp.add_argument("dst")
    sp.add_argument("-r", "--recursive", action="store_true", help="copy directories and what is in them")
    sp = add("mkdir", cmd_mkdir, "make a directory")
    sp.add_argument("url")
    sp.add_argument("-p", "--parents", action="store_true")
    sp.add_argument("-m", "--mode", default="755")
    sp = add("rm", cmd_rm, "remove a file (or a directory with -d / -r)")
    sp.add_argument("url")
    sp.add_argument("-r", "--recursive", action="store_true")
    sp.add_argument("-d", "--dir", action="store_true", help="remove an empty directory")
    sp = add("mv", cmd_mv, "rename within one server")
    sp.add_argument("src")
    sp.add_argument("dst")
    sp = add("df", cmd_df, "show the file system's space as df(1) does: 1K blocks, or sizes with -h; the "
                           "use in percent is used/(used+available), rounded up", add_help=False)  # -h is df(1)'s
    sp.add_argument("--help", action="help", help="show this help message and exit")
    sp.add_argument("url", help="any path on the server")
    sp.add_argument("-h", "--human-readable", dest="human", action="store_true",
                    help="sizes as 1.5K, 20M, 3.1G (powers of 1024, rounded up)")
    for mod in _plugin_modules():
        mod.register(sub)
    return p


def _plugin_modules() -> list[Any]:
    """Commands that live in their own modules (testbed, mount, paths, ...)."""
    import importlib

    mods = []
    for name in ("testbed", "mount", "paths", "stats", "failover"):
        try:
            mods.append(importlib.import_module(f"{__package__}.{name}"))
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{name}":
                raise
    return mods


def _message(e: BaseException, args: argparse.Namespace | None = None) -> str:
    """The error as one line. A path on the server is named with the server, as the mount(8) form
    ``host:port:/path`` that the commands take back (``127.0.0.1:2049:/export/x: No such file or
    directory (NFS4ERR_NOENT)``); a local path as it is."""
    from .._client.url import URLError
    from .._errors import NFS4Error, ReplyError
    from .._rpc.errors import RpcReplyError
    from .._session.errors import SessionError
    from .._transport.base import TransportError

    if isinstance(e, ReplyError | SessionError | TransportError | RpcReplyError | URLError):
        return _without_errno(str(e))  # (these name their server themselves)
    server = getattr(args, "server", None)
    if isinstance(e, OSError) and e.filename:
        detail = f"{e.strerror} ({e.name})" if isinstance(e, NFS4Error) else e.strerror
        remote = server is not None and (isinstance(e, NFS4Error) or _remote_path(str(e.filename), args))
        return f"{server}:{e.filename}: {detail}" if remote else f"{e.filename}: {detail}"
    if isinstance(e, NFS4Error):
        return f"{server}: {e}" if server else str(e)
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def _remote_path(name: str, args: argparse.Namespace | None) -> bool:
    """Whether an error's file name is a path on the server: paths there are absolute, and a local
    path is the local argument of get/put/cp or below it."""
    if not name.startswith("/"):
        return False
    for local in getattr(args, "local_paths", ()):
        top = local.rstrip("/") or "/"
        if name in (local, top) or name.startswith(top.rstrip("/") + "/"):
            return False
    return True


def _without_errno(text: str) -> str:
    """OSError's str() puts "[Errno N] " in front of the message: the message is what people read."""
    if text.startswith("[Errno ") and "] " in text:
        return text.split("] ", 1)[1]
    return text


def _refused(args: argparse.Namespace) -> str | None:
    """Options given together that would be ignored: the usage error that says so, or None."""
    if getattr(args, "json_refused", False):
        return f"--json: `{PROG} {args.command}` writes the file itself (`{PROG} stat --json` gives its attributes)"
    if getattr(args, "json", False) and getattr(args, "human", False):
        return "-h and --json do not go together (--json gives sizes in bytes)"
    sends = getattr(args, "sends_rpcs", False)
    if args.trace and not (sends(args) if callable(sends) else sends):
        also = " (with -f it does)" if args.command == "mount" else ""
        return f"--trace: `{PROG} {args.command}` sends no RPC of its own{also}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) and (problem := _refused(args)):
        getattr(args, "subparser", parser).error(problem)
    quiet = getattr(args, "quiet_log", False) and not args.verbose
    from .. import _trace as trace

    trace.configure_logging("error" if quiet else args.verbose, rpc_trace=args.trace)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except BaseException as e:  # (trio wraps errors from nurseries in groups)
        leaf = _first_leaf(e) if isinstance(e, BaseExceptionGroup) else e
        if isinstance(leaf, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        if isinstance(leaf, BrokenPipeError):
            return 0
        if isinstance(leaf, SystemExit):
            raise
        if not isinstance(leaf, Exception):
            raise
        code = _exit_code(leaf)
        if code == EXIT_SOFTWARE:
            # a bug of ours, whatever the server sent: one line; the traceback with -vv
            log.debug("the error in full:", exc_info=leaf)
            print(f"{PROG}: internal error: {type(leaf).__name__}: {leaf} (-vv shows where)", file=sys.stderr)
        else:
            print(f"{PROG}: {_message(leaf, args)}", file=sys.stderr)
        return code


def _first_leaf(eg: BaseExceptionGroup) -> BaseException:
    """The error a group stands for: its first leaf that is not an OSError (an interrupt, a bug),
    else its first."""
    leaves: list[BaseException] = []
    todo: list[BaseException] = [eg]
    while todo:
        e = todo.pop(0)
        if isinstance(e, BaseExceptionGroup):
            todo[:0] = list(e.exceptions)
        else:
            leaves.append(e)
    return next((e for e in leaves if not isinstance(e, OSError)), leaves[0]) if leaves else eg


def _exit_code(e: BaseException) -> int:
    from .._rpc.errors import RpcReplyError
    from .._xdr import XdrError

    if isinstance(e, OSError | RpcReplyError):
        return 1
    if isinstance(e, ValueError) and not isinstance(e, XdrError):  # (a bad URL, option or argument)
        return EXIT_USAGE
    return EXIT_SOFTWARE


if __name__ == "__main__":
    sys.exit(main())
