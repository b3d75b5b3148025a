"""The mount daemon: connect, look up the export, mount with FUSE, serve until unmounted.

Order matters for "a mount that cannot reach its server leaves no mount behind": the session and
the export's root come first, the FUSE mount only once they are there. In the background (the
default) a child process does all of it and tells the parent through a pipe whether the mount is up
(``ok``) or why not; the parent exits only then. SIGTERM, SIGINT and SIGHUP end the FUSE loop; the
daemon then commits and closes every open file, unmounts, and destroys its session and client ID.
``auto_unmount`` makes a killed daemon's mount go away too.

    python -m pynfsrdma._fuse.mount_daemon [-f] [-o OPTIONS] SOURCE MOUNTPOINT
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from .. import _control_socket as control_socket
from .. import _stats as stats
from .._client.security import (
    FlavorChoice,
    UserCredentials,
    credential,
    machine_credential,
    negotiate,
    parse_sec,
)
from .._client.stack import start_stack
from .._client.url import NfsURL, URLError, minor_version, parse_url
from .._proto.rpcsec_gss import SYS
from .._rpc.auth import auth_sys
from .._rpc.gss_auth import GssCredential
from .._session.client_id import ClientID, SessionOptions, default_owner_id
from .._session.session import RetryPolicy
from .._trio_compat import run_sync_abandoning
from .._trunking import TrunkingOptions
from .channel import Channel, open_channel
from .options import MountOptions, OptionError, parse_options, split_options
from .payload_memory import keep_payload_memory

log = logging.getLogger(__name__)

MOUNT_TIMEOUT = 15.0  # seconds to reach the server and find the export at mount time
SHUTDOWN_TIMEOUT = 30.0
READY = b"ok\n"
URL_OVERRIDES = ("vers", "proto", "port")


class MountError(OSError):
    """The file system could not be mounted; the message says why (and nothing is left mounted)."""


@dataclass
class MountRequest:
    source: str  # as given (host:/export or nfs://...)
    url: NfsURL
    mountpoint: str
    options: MountOptions
    option_texts: list[str]

    @property
    def fsname(self) -> str:
        return f"{self.url.host}:{self.url.path}"


def prepare(source: str, mountpoint: str, option_texts: Sequence[str] = ()) -> MountRequest:
    """Check everything that can be checked without the server: URL, options, mount point."""
    texts = [t for t in option_texts if t]
    overrides: dict[str, str] = {}
    for t in texts:
        for k, v in split_options(t):
            if k in URL_OVERRIDES and v is not None:
                overrides[k] = v
    try:
        url = parse_url(source, **overrides)
    except URLError as e:
        raise OptionError(str(e)) from None
    # URL options as -o text; addrs' addresses are comma-separated in a URL, '+'-separated in -o
    url_opts = ",".join(
        k if v == "" else f"{k}={v.replace(',', '+') if k == 'addrs' else v}" for k, v in url.options.items()
    )
    opts = parse_options(url_opts, *texts)
    url.options = dict(opts.rdma)  # what the transport reads (proto=rdma); the rest is ours
    mp = os.path.abspath(mountpoint)
    if not os.path.isdir(mp):
        reason = "Not a directory" if os.path.exists(mp) else "No such file or directory"
        raise MountError(f"mount point {mountpoint}: {reason}")
    if os.path.ismount(mp) and _is_our_mount(mp):
        raise MountError(f"{mountpoint} is already mounted")
    return MountRequest(source, url, mp, opts, texts)


def _is_our_mount(mp: str) -> bool:
    try:
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == mp for line in f)
    except OSError:
        return False


async def serve(req: MountRequest, ready: Callable[[str | None], None]) -> None:
    """Mount and serve until unmounted or signalled. Raises MountError if the mount never came up."""
    from .operations import NFSOperations

    o = req.options
    cred = auth_sys(o.squash_uid, o.squash_gid or 0) if o.squash_uid is not None else auth_sys(0, 0)
    timeout = min(MOUNT_TIMEOUT, max(o.timeo_seconds * (o.retrans + 1), 1.0))
    error: str | None = None
    async with trio.open_nursery() as nursery:
        cid = ClientID(
            nursery,
            options=SessionOptions(rsize=o.rsize, wsize=o.wsize, minorversion=minor_version(req.url.vers)),
            policy=RetryPolicy(timeo=o.timeo_seconds, retrans=o.retrans, hard=o.hard),
            cred=machine_credential(req.url.host, o.keytab, parse_sec(o.sec), auth_sys(0, 0),
                                    f"mount-{os.getpid()}"),
            # one client owner per mount point: two mounts of one server are two clients (with one
            # owner they would take each other's client ID and sessions away, again and again)
            owner_id=default_owner_id(f"mount:{os.path.realpath(req.mountpoint)}"),
        )
        ops: NFSOperations | None = None
        channel: Channel | None = None
        try:
            try:
                stack = await start_stack(cid, nursery, req.url,
                                          TrunkingOptions.from_url_options({**o.trunking, **o.rdma}), timeout)
                trunking, nfs = stack.trunking, stack.nfs
                choice = FlavorChoice(parse_sec(o.sec), given=o.sec is not None)
                with trio.fail_after(timeout):
                    # (the flavour is found with the mounting user's own credentials)
                    cred = await negotiate(nfs, req.url.path, req.url.path, choice, cred,
                                           lambda f: credential(f, req.url.host, os.getuid(), os.getgid()))
                    root_fh, root_attrs = await nfs.mount(req.url.path, cred)
            except (OSError, trio.TooSlowError) as e:
                text = str(e) or type(e).__name__
                if isinstance(e, trio.TooSlowError):
                    text = f"no answer within {timeout:g} s"
                raise MountError(f"cannot mount {req.source}: {text}") from e
            if not root_attrs.is_dir:
                raise MountError(f"cannot mount {req.source}: not a directory")
            flavor = cred.flavor if isinstance(cred, GssCredential) else SYS
            users = UserCredentials(flavor, req.url.host)
            ops = NFSOperations(nfs, root_fh, root_attrs, o, nursery, users)
            if flavor.gss:
                log.info("%s: requests go with each user's Kerberos ticket (sec=%s)", req.source, flavor.name)
            # the control socket (pynfsrdma stats/paths MOUNTPOINT) is there before the mount, so
            # that whoever sees the mount can ask it; it goes away with the nursery
            info = {"mountpoint": req.mountpoint, "server": req.fsname, "pid": os.getpid(),
                    "options": stats.effective_options(o), "mounted_at_ns": time.time_ns(), "sec": flavor.name}
            try:
                await nursery.start(
                    control_socket.serve,
                    control_socket.socket_path(req.mountpoint),
                    {
                        "stats": lambda: {
                            **stats.snapshot(cid, trunking, info=info),
                            "delegations": {**nfs.delegation_counts, "held": len(nfs.delegations)},
                            "locks": dict(nfs.lock_counts),
                            "cache": ops.cache_counts(),
                            "payload": payload_counts(channel, cid),
                        },
                        "paths": lambda: stats.path_rows(cid, trunking),
                    },
                )
            except (OSError, control_socket.ControlError) as e:  # the mount works without it
                log.warning("no control socket for %s: %s", req.mountpoint, e)
            channel = open_channel(o.channel, ops, req.mountpoint, o.fuse_options(req.fsname))
            try:
                channel.mount()
            except OSError as e:
                channel = None
                raise MountError(f"cannot mount on {req.mountpoint}: {e.strerror or e}") from e
            read_ahead = o.rsize
            if getattr(channel, "pipes", None) is not None and ops.opens.readahead_window:
                # a channel that splices READ data reaches the kernel only with a READ of the kernel's
                # own request: the kernel reads ahead, as far as the daemon would have, in requests of
                # rsize (several in flight), and each is answered by a READ of its own, spliced
                read_ahead = max(o.rsize, ops.opens.readahead_window)
                ops.opens.readahead_window = 0
            log.info("mounted %s on %s", req.source, req.mountpoint)
            up = trio.Event()  # set once the kernel's first request was answered: then "ok" goes out
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:

                async def on_signal() -> None:
                    async for signum in signals:
                        log.info("signal %d: unmounting", signum)
                        assert channel is not None
                        channel.terminate()
                        return

                watcher = trio.CancelScope()

                async def watch() -> None:
                    with watcher:
                        await trio.lowlevel.checkpoint()  # (serve may have ended before this task ran)
                        await on_signal()

                nursery.start_soon(watch)
                nursery.start_soon(announce_when_up, req.mountpoint, read_ahead, ready, up)
                try:
                    await channel.serve()
                finally:
                    watcher.cancel()  # (before the signal receiver closes, however serve ended)
            if not up.is_set():
                raise MountError(f"cannot mount {req.source}: the mount went away before it answered")
        except MountError as e:
            error = str(e)
        finally:
            with trio.CancelScope(shield=True):
                if channel is not None and ops is not None:
                    cid.stopping = True  # (unmounted: ops.shutdown's CLOSEs never recover a client ID)
                    with trio.move_on_after(SHUTDOWN_TIMEOUT):
                        await ops.shutdown()
                        for made in ops.users.made() if ops.users is not None else ():
                            await cid.forget(made)  # (RPCSEC_GSS_DESTROY of every user's context)
                    channel.close()
                await cid.shutdown()
            nursery.cancel_scope.cancel()
    if error is not None:
        raise MountError(error)


def payload_counts(channel: Channel | None, cid: ClientID) -> dict[str, int]:
    """How READ data went from the server to the kernel: bytes spliced from a socket into a pipe and
    from the pipe into FUSE (never in this process's memory), and bytes that passed through it; and
    how WRITE data went from the kernel to the socket (in the request's buffer, sent by reference)."""
    counts = {"transport_bytes_spliced": 0, "transport_bytes_staged": 0, "transport_splice_fallbacks": 0,
              "transport_bulk_bytes_sent": 0}
    for path in cid.paths.paths:
        t = getattr(path.rpc, "transport", None)
        counts["transport_bulk_bytes_sent"] += getattr(t, "bulk_bytes_sent", 0)
        counts["transport_bytes_spliced"] += getattr(t, "bytes_spliced", 0)
        counts["transport_bytes_staged"] += getattr(t, "bytes_staged_to_pipe", 0)
        counts["transport_splice_fallbacks"] += getattr(t, "splice_fallbacks", 0)
    counts_of = getattr(channel, "counts", None)
    if counts_of is not None:
        counts.update(counts_of())
    return counts


def bdi_of(mountpoint: str) -> str | None:
    """The backing device of a mount (``major:minor``) from /proc/self/mountinfo: no stat(2), which
    on our own mount would wait for the FUSE loop that is not running yet."""
    dev = None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4 and fields[4] == mountpoint:
                    dev = fields[2]  # the last one: the mount on top
    except OSError:
        return None
    return dev


def raise_read_ahead(mountpoint: str, rsize: int) -> int | None:
    """Let the kernel read ahead ``rsize`` bytes (at least 1 MiB, FUSE's largest request) instead of
    its 128 KiB default: buffered sequential reads then cost a quarter as many FUSE requests
    (measured: ~300 -> ~650 MiB/s). Best effort (root only); returns the read_ahead_kb now in force,
    or None."""
    dev = bdi_of(mountpoint)
    if dev is None:
        return None
    path = f"/sys/class/bdi/{dev}/read_ahead_kb"
    want = max(rsize // 1024, 1)
    try:
        with open(path) as f:
            now = int(f.read())
        if now < want:
            with open(path, "w") as f:
                f.write(str(want))
            now = want
    except (OSError, ValueError) as e:
        log.info("cannot raise %s to %d: %s", path, want, e)
        return None
    return now


async def announce_when_up(mountpoint: str, rsize: int, ready: Callable[[str | None], None],
                           up: trio.Event) -> None:
    """Tell whoever waits that the mount is up once it answers: a stat(2) of the mount point waits for
    the kernel's FUSE_INIT and a GETATTR, both served by our own loop. Then raise the read-ahead, which
    the kernel sets from INIT's reply (the smaller of the two)."""
    try:
        st = await run_sync_abandoning(os.stat, mountpoint)
    except OSError:
        return
    if bdi_of(mountpoint) != f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}":
        return  # the directory under a mount already gone
    up.set()
    ready(None)
    kb = raise_read_ahead(mountpoint, rsize)
    log.debug("read_ahead_kb of %s: %s", mountpoint, kb)


def run(req: MountRequest, ready_fd: int | None = None) -> int:
    """Serve in this process (the foreground, or the background child); 0 after a clean unmount."""

    told = False  # whether the waiting parent has its answer

    def ready(err: str | None) -> None:
        nonlocal told
        if ready_fd is None or told:
            return
        told = True
        os.write(ready_fd, READY if err is None else f"{err}\n".encode())
        os.close(ready_fd)
        _detach(req.options)

    keep_payload_memory()  # (the writes' payloads: see there)
    try:
        trio.run(serve, req, ready)
    except MountError as e:
        if ready_fd is None:
            print(f"pynfsrdma: {e}", file=sys.stderr)
        ready(str(e))
        return 1
    except BaseException as e:
        if told or ready_fd is None:
            raise
        # the daemon failed before the mount was up: its error goes to the one waiting for it
        log.exception("the mount daemon failed")
        leaf = _first_leaf(e)
        ready(f"cannot mount {req.source}: the mount daemon failed: {type(leaf).__name__}: {leaf}")
        return 1
    return 0


def _first_leaf(e: BaseException) -> BaseException:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def _detach(o: MountOptions) -> None:
    """The background daemon keeps no terminal: standard streams go to /dev/null."""
    fd = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1) if o.debug else (0, 1, 2):
        os.dup2(fd, std)
    os.close(fd)


def mount(
    source: str, mountpoint: str, option_texts: Sequence[str] = (), foreground: bool = False, verbose: int = 0
) -> int:
    """Mount; in the background (default), return once the mount is up or has failed."""
    req = prepare(source, mountpoint, option_texts)
    if foreground:
        return run(req)
    r, w = os.pipe()
    cmd = [sys.executable, "-m", "pynfsrdma._fuse.mount_daemon", "--ready-fd", str(w)]
    cmd += [x for t in req.option_texts for x in ("-o", t)]
    cmd += ["-v"] * verbose + [source, mountpoint]
    proc = subprocess.Popen(cmd, pass_fds=(w,), stdin=subprocess.DEVNULL, start_new_session=True)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        msg = f.read()
    if msg == READY:
        return 0
    rc = proc.wait()
    text = msg.decode(errors="replace").strip() or f"the mount daemon ended with status {rc}"
    raise MountError(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pynfsrdma._fuse.mount_daemon")
    p.add_argument("source")
    p.add_argument("mountpoint")
    p.add_argument("-o", dest="options", action="append", default=[])
    p.add_argument("-f", "--foreground", action="store_true")
    p.add_argument("-v", "--verbose", action="count", default=0)
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.ready_fd is not None:
        os.set_inheritable(a.ready_fd, False)  # not to fusermount3 (auto_unmount), which outlives us
    logging.basicConfig(
        level=logging.WARNING - 10 * min(a.verbose, 2),
        format="pynfsrdma-mount: %(levelname)s %(name)s: %(message)s",
    )
    try:
        req = prepare(a.source, a.mountpoint, a.options)
    except (OptionError, MountError) as e:
        if a.ready_fd is not None:
            os.write(a.ready_fd, f"{e}\n".encode())
            return 1
        print(f"pynfsrdma: {e}", file=sys.stderr)
        return 2 if isinstance(e, OptionError) else 1
    if a.ready_fd is not None or a.foreground:
        return run(req, a.ready_fd)
    try:
        return mount(a.source, a.mountpoint, a.options, verbose=a.verbose)
    except MountError as e:
        print(f"pynfsrdma: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
