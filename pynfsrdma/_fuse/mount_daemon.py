"""The mount daemon: connect, look up the export, mount with FUSE, serve until unmounted.

Order matters for "a mount that cannot reach its server leaves no mount behind": the session and
the export's root come first, the FUSE mount only once they are there. In the background (the
default) a child process does all of it and tells the parent (:mod:`.mount_start`, which loads none
of this) through a pipe whether the mount is up (``ok``) or why not; the parent exits only then.
SIGTERM, SIGINT and SIGHUP end the FUSE loop; the daemon then commits and closes every open file,
unmounts, and destroys its session and client ID. The same signals before the mount is up stop the
daemon's tries at once (:class:`Interrupted`), and a parent interrupted while it waits (Ctrl-C)
passes SIGTERM on to its daemon, which runs in a session of its own, and waits for it to end:
nothing stays mounted or running.
``auto_unmount`` makes a killed daemon's mount go away too.

    python -m pynfsrdma._fuse.mount_daemon [-f] [-o OPTIONS] SOURCE MOUNTPOINT
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from .. import _control_socket as control_socket
from .. import _stats as stats
from .._client.attributes import FileAttrs
from .._client.security import (
    FlavorChoice,
    UserCredentials,
    credential,
    machine_credential,
    negotiate,
    parse_sec,
)
from .._client.stack import Stack, start_stack
from .._client.url import minor_version
from .._proto.rpcsec_gss import SYS
from .._rpc.auth import Credential, auth_sys
from .._rpc.gss_auth import GssCredential
from .._session.client_id import ClientID, SessionOptions, default_owner_id
from .._session.errors import NotNFSv41Server
from .._session.session import RetryPolicy
from .._trio_compat import run_sync_abandoning
from .._trunking import TrunkingOptions
from .channel import Channel, open_channel
from .mount_start import BACKGROUND, READY, MountError, MountRequest, mount, prepare
from .options import MountOptions, OptionError, parse_remount
from .payload_memory import keep_payload_memory
from .readahead import KERNEL_READ_AHEAD_MOST, kernel_window

log = logging.getLogger(__name__)

MOUNT_TIMEOUT = 15.0  # seconds to reach the server and find the export at mount time
SHUTDOWN_TIMEOUT = 30.0
READ_AHEAD_RECHECK = 5.0  # seconds between sizings of the kernel's read-ahead from the paths, at most
# the least and the most of the window of WRITEs the kernel's limit of the mount's dirty data is
# sized for (twice it; never above the kernel's own limit)
DIRTY_WINDOW_LEAST = 4 << 20
DIRTY_WINDOW_MOST = 32 << 20
INTERRUPTED_SHUTDOWN = 1.0  # seconds to end the session of a mount interrupted before it was up
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
RETRY_PAUSE = 5.0  # seconds between tries to reach the server (retry=, bg)
# what makes a mount try again (retry=, bg), as mount.nfs: the server cannot be reached (yet)
TEMPORARY = frozenset({errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH,
                       errno.ECONNRESET, errno.ECONNABORTED, errno.EAGAIN})


class Interrupted(Exception):
    """A signal (SIGINT, SIGTERM, SIGHUP) came before the mount was up: nothing is left mounted."""


@dataclass
class Reached:
    """The server reached and the export found: the NFS version spoken, the client ID (the caller
    shuts it down), its stack, the credential the mount's flavour gave, and the export's root."""

    vers: str
    cid: ClientID
    stack: Stack
    cred: Credential
    root_fh: bytes
    root_attrs: FileAttrs


async def reach(req: MountRequest, nursery: trio.Nursery, timeout: float,
                backgrounding: Callable[[str], None]) -> Reached:
    """Reach the server and find the export: with each version ``vers=`` allows (4: 4.2, then 4.1 when
    the server has no 4.2), and again every RETRY_PAUSE seconds while the server cannot be reached,
    for ``retry=`` minutes (``bg``: first ``backgrounding`` is told why, and the caller goes on)."""
    o = req.options
    deadline = trio.current_time() + o.retry_seconds
    while True:
        try:
            return await _reach_once(req, nursery, timeout)
        except MountError as e:
            if not e.temporary or trio.current_time() + RETRY_PAUSE > deadline:
                raise
            if o.bg:
                backgrounding(str(e))
            log.info("%s; trying again in %g s", e, RETRY_PAUSE)
        await trio.sleep(RETRY_PAUSE)


async def _reach_once(req: MountRequest, nursery: trio.Nursery, timeout: float) -> Reached:
    o = req.options
    versions = o.versions if len(o.versions) > 1 else (req.url.vers,)
    for vers in versions:
        cid = ClientID(
            nursery,
            options=SessionOptions(rsize=o.rsize, wsize=o.wsize, minorversion=minor_version(vers), pnfs=o.pnfs),
            policy=RetryPolicy(timeo=o.timeo_seconds, retrans=o.retrans, hard=o.hard),
            cred=machine_credential(req.url.host, o.keytab, parse_sec(o.sec), auth_sys(0, 0),
                                    f"mount-{os.getpid()}"),
            # one client owner per mount point: two mounts of one server are two clients (with one
            # owner they would take each other's client ID and sessions away, again and again)
            owner_id=default_owner_id(f"mount:{os.path.realpath(req.mountpoint)}"),
        )
        cred = auth_sys(o.squash_uid, o.squash_gid or 0) if o.squash_uid is not None else auth_sys(0, 0)
        try:
            stack = await start_stack(cid, nursery, req.url,
                                      TrunkingOptions.from_url_options({**o.trunking, **o.rdma}), timeout)
            if o.pnfs:
                stack.nfs.read_write.use_pnfs(nursery)
            choice = FlavorChoice(parse_sec(o.sec), given=o.sec is not None, xprtsec=o.tls.get("xprtsec") or "none")
            with trio.fail_after(timeout):
                # (the flavour is found with the mounting user's own credentials)
                cred = await negotiate(stack.nfs, req.url.path, req.url.path, choice, cred,
                                       lambda f: credential(f, req.url.host, os.getuid(), os.getgid()))
                root_fh, root_attrs = await stack.nfs.names.mount(req.url.path, cred)
        except BaseException as e:
            with trio.CancelScope(shield=True):
                # (a mount given up on at the user's word: its session goes without a long wait)
                await cid.shutdown(INTERRUPTED_SHUTDOWN if isinstance(e, trio.Cancelled) else None)
            if isinstance(e, NotNFSv41Server) and vers != versions[-1]:
                log.info("%s; trying NFSv%s", e, versions[versions.index(vers) + 1])
                continue
            if isinstance(e, trio.TooSlowError):
                raise MountError(f"cannot mount {req.source}: no answer within {timeout:g} s", True) from e
            if isinstance(e, OSError):
                raise MountError(f"cannot mount {req.source}: {str(e) or type(e).__name__}",
                                 e.errno in TEMPORARY) from e
            raise
        if not root_attrs.is_dir:
            await cid.shutdown()
            raise MountError(f"cannot mount {req.source}: not a directory")
        if len(versions) > 1:
            log.info("%s: NFSv%s", req.source, vers)
        return Reached(vers, cid, stack, cred, root_fh, root_attrs)
    raise AssertionError("no NFS version to try")  # (versions is never empty)


class Stop:
    """What a signal (SIGTERM, SIGINT, SIGHUP) does to the daemon: before the mount serves, it
    cancels everything (reaching the server, finding the export: ``scope``); once the channel
    serves, it ends the channel, which unmounts."""

    def __init__(self) -> None:
        self.scope: trio.CancelScope | None = None  # the daemon's work, until the channel serves
        self.channel: Channel | None = None
        self.up = trio.Event()  # the mount answered its first request
        self.signalled = False

    @property
    def interrupted(self) -> bool:
        """A signal came before the mount was up: nothing stays mounted, and the daemon says nothing."""
        return self.signalled and not self.up.is_set()

    def signal(self, signum: int) -> None:
        self.signalled = True
        if self.channel is not None:
            log.info("signal %d: unmounting", signum)
            self.channel.terminate()
        elif self.scope is not None:
            log.info("signal %d before the mount was up: giving up", signum)
            self.scope.cancel()


async def serve(req: MountRequest, ready: Callable[[str | None], None],
                backgrounding: Callable[[str], None] = lambda reason: None) -> None:
    """Mount and serve until unmounted or signalled. Raises MountError if the mount never came up,
    Interrupted if a signal came first."""
    stop = Stop()
    failed: MountError | None = None
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:

        async def watch() -> None:
            async for signum in signals:
                stop.signal(signum)
                return

        async with trio.open_nursery() as watching:
            watching.start_soon(watch)
            try:
                await _serve(req, ready, stop, backgrounding)
            except MountError as e:
                failed = e
            finally:
                watching.cancel_scope.cancel()  # (before the signal receiver closes, however it ended)
    if stop.interrupted:
        raise Interrupted()
    if failed is not None:
        raise failed


async def _serve(req: MountRequest, ready: Callable[[str | None], None], stop: Stop,
                 backgrounding: Callable[[str], None]) -> None:
    """:func:`serve`'s work; a signal reaches it through ``stop``."""
    from .operations import NFSOperations

    o = req.options
    timeout = min(MOUNT_TIMEOUT, max(o.timeo_seconds * (o.retrans + 1), 1.0))
    error: str | None = None
    async with trio.open_nursery() as nursery:
        stop.scope = nursery.cancel_scope
        cid: ClientID | None = None
        ops: NFSOperations | None = None
        channel: Channel | None = None
        try:
            reached = await reach(req, nursery, timeout, backgrounding)
            cid = client = reached.cid
            cred, root_fh, root_attrs = reached.cred, reached.root_fh, reached.root_attrs
            trunking, nfs = reached.stack.trunking, reached.stack.nfs
            flavor = cred.flavor if isinstance(cred, GssCredential) else SYS
            users = UserCredentials(flavor, req.url.host)
            ops = NFSOperations(nfs, root_fh, root_attrs, o, nursery, users)
            ops.kernel_files.mountpoint = req.mountpoint
            if flavor.gss:
                log.info("%s: requests go with each user's Kerberos ticket (sec=%s)", req.source, flavor.name)
            # the control socket (pynfsrdma stats/paths MOUNTPOINT) is there before the mount, so
            # that whoever sees the mount can ask it; it goes away with the nursery
            info = {"mountpoint": req.mountpoint, "server": req.fsname, "pid": os.getpid(), "nfs_version": reached.vers,
                    "options": stats.effective_options(o), "mounted_at_ns": time.time_ns(), "sec": flavor.name}
            fuse_options = o.fuse_options(req.fsname)
            mounted_ops = ops

            def remount(options: list[str], apply: bool = False) -> dict[str, Any]:
                """``mount -o remount,...``: check the options (the kernel's own remount comes between
                the check and ``apply``), then take them."""
                if not isinstance(options, list) or not all(isinstance(t, str) for t in options):
                    raise control_socket.CommandError("remount: options is a list of strings")
                try:
                    new = parse_remount(o, fuse_options, *options)
                except OptionError as e:
                    raise control_socket.CommandError(str(e)) from None
                if apply:
                    mounted_ops.reconfigure(new)
                    info["options"] = stats.effective_options(o)
                    log.info("remounted %s with %s", req.mountpoint, ",".join(options))
                return {"ro": new.ro}
            try:
                await nursery.start(
                    control_socket.serve,
                    control_socket.socket_path(req.mountpoint),
                    {
                        "stats": lambda: {
                            **stats.snapshot(client, trunking, info=info),
                            "delegations": {**nfs.delegation_counts, "held": len(nfs.delegations),
                                            "timestamps_asked": nfs.deleg_timestamps},
                            "locks": dict(nfs.lock_counts),
                            "cache": ops.cache_counts(),
                            "payload": payload_counts(channel, client),
                            "fuse_requests": fuse_requests(channel),
                            "pnfs": nfs.read_write.pnfs_report(),
                        },
                        "paths": lambda: [*stats.path_rows(client, trunking),
                                          *nfs.read_write.pnfs_rows()],
                        "remount": remount,
                    },
                )
            except (OSError, control_socket.ControlError) as e:  # the mount works without it
                log.warning("no control socket for %s: %s", req.mountpoint, e)
            most = o.max_readahead if o.max_readahead is not None else KERNEL_READ_AHEAD_MOST
            channel = stop.channel = open_channel(o.channel, ops, req.mountpoint, fuse_options,
                                                  io_uring=o.io_uring, max_pages=o.max_pages,
                                                  read_ahead=most, max_background=o.max_background)
            try:
                channel.mount()
            except OSError as e:
                channel = None
                raise MountError(f"cannot mount on {req.mountpoint}: {e.strerror or e}") from e
            least = o.rsize
            if getattr(channel, "pipes", None) is not None and ops.opens.readahead_window:
                # a channel that splices READ data reaches the kernel only with a READ of the kernel's
                # own request: the kernel reads ahead, as far as the daemon would have, in requests of
                # rsize (several in flight), and each is answered by a READ of its own, spliced
                least = max(o.rsize, ops.opens.readahead_window)
                ops.opens.readahead_window = 0

            def read_ahead() -> int:
                if o.max_readahead is not None:
                    return o.max_readahead
                return kernel_window(nfs.maxread, nfs.io_window(nfs.maxread), least, most)

            kernels_dirty_limit = dirty_limit_of(req.mountpoint)
            dirty_window = [0]  # the window the kernel's limit was last sized for

            def write_behind() -> None:
                # the WRITEs that fill the paths in flight and as much again dirty behind them
                window = kernel_window(o.wsize, nfs.io_window(o.wsize), DIRTY_WINDOW_LEAST, DIRTY_WINDOW_MOST)
                if window != dirty_window[0]:
                    dirty_window[0] = window
                    limit = set_dirty_limit(req.mountpoint, 2 * window, kernels_dirty_limit)
                    log.debug("dirty data of %s: %s bytes at most", req.mountpoint, limit)

            # the kernel's window, in force from its first read: the bdi is there once mounted, and the
            # kernel keeps the smaller of it and INIT's max_readahead (the channel asks for ``most``)
            set_read_ahead(req.mountpoint, read_ahead())
            write_behind()
            log.info("mounted %s on %s", req.source, req.mountpoint)
            up = stop.up  # set once the kernel's first request was answered: then "ok" goes out
            nursery.start_soon(announce_when_up, req.mountpoint, read_ahead, ready, up)
            nursery.start_soon(follow_paths, req.mountpoint, read_ahead if o.max_readahead is None else None,
                               write_behind, cid.paths.wait_changed, up)
            try:
                await channel.serve()
            finally:
                stop.channel = None  # (a signal from here on cancels what is left, not the channel)
            if not up.is_set():
                raise MountError(f"cannot mount {req.source}: the mount went away before it answered")
        except MountError as e:
            error = str(e)
        finally:
            with trio.CancelScope(shield=True):
                if channel is not None and ops is not None and cid is not None:
                    cid.stopping = True  # (unmounted: ops.shutdown's CLOSEs never recover a client ID)
                    with trio.move_on_after(SHUTDOWN_TIMEOUT):
                        await ops.shutdown()
                        for made in ops.users.made() if ops.users is not None else ():
                            await cid.forget(made)  # (RPCSEC_GSS_DESTROY of every user's context)
                    channel.close()
                if ops is not None:
                    with trio.move_on_after(SHUTDOWN_TIMEOUT):
                        await ops.nfs.read_write.close_layouts()  # (a SCSI unit's key off: the session ends)
                if cid is not None:
                    # (a mount given up on at the user's word: its session goes without a long wait)
                    await cid.shutdown(INTERRUPTED_SHUTDOWN if stop.interrupted else None)
            nursery.cancel_scope.cancel()
    if error is not None:
        raise MountError(error)


def fuse_requests(channel: Channel | None) -> dict[str, int]:
    """The FUSE requests the native channel answered, by opcode name, from /dev/fuse and its
    io_uring together (empty for a channel that does not count them)."""
    counts: dict[str, int] = {}
    for workers in (channel, getattr(channel, "ring", None)):
        by_name = getattr(workers, "answered_by_name", None)
        if by_name is not None:
            for name, n in by_name().items():
                counts[name] = counts.get(name, 0) + n
    return counts


def payload_counts(channel: Channel | None, cid: ClientID) -> dict[str, int]:
    """How READ data went from the server to the kernel: bytes spliced from a socket into a pipe and
    from the pipe into FUSE (never in this process's memory), and bytes that passed through it; and
    how WRITE data went from the kernel to the socket (in the request's buffer, sent by reference)."""
    counts = {"transport_bytes_spliced": 0, "transport_bytes_staged": 0, "transport_splice_fallbacks": 0,
              "transport_bulk_bytes_sent": 0, "transport_memory_registrations": 0,
              "transport_memory_windows_bound": 0, "transport_payload_bytes_copied": 0}
    for path in cid.paths.paths:
        t = getattr(path.rpc, "transport", None)
        # (RPC-over-RDMA: registrations, windows, WRITE payload bytes copied on the way out)
        counts["transport_memory_registrations"] += getattr(t, "memory_registrations", 0)
        counts["transport_memory_windows_bound"] += getattr(t, "memory_windows_bound", 0)
        counts["transport_payload_bytes_copied"] += getattr(t, "payload_bytes_copied", 0)
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


def set_read_ahead(mountpoint: str, nbytes: int) -> int | None:
    """Make the kernel read ahead ``nbytes`` on the mount (its bdi's read_ahead_kb: the window INIT
    can only lower from the kernel's 128 KiB; a window of whole requests costs fewer of them, and
    several in flight fill the paths). Best effort (root only); returns the read_ahead_kb now in
    force, or None."""
    dev = bdi_of(mountpoint)
    if dev is None:
        return None
    return _set_bdi(dev, "read_ahead_kb", nbytes // 1024)


def set_dirty_limit(mountpoint: str, nbytes: int, most: int | None) -> int | None:
    """Let the kernel hold at most ``nbytes`` (never above ``most``, the limit it set itself) of the
    mount's written data dirty or under writeback: its bdi's max_bytes (kernels 6.2 and later). The
    kernel starts writing back once about half of it is dirty, so a writer's data flows to the server
    close behind it instead of gathering in the page cache (FUSE's own limit is 1% of the machine's
    dirty memory: 46 MiB on a host with 24 GiB). Best effort (root only); returns the limit now in
    force, or None."""
    dev = bdi_of(mountpoint)
    if dev is None or most is None:
        return None
    return _set_bdi(dev, "max_bytes", min(nbytes, most))


def _set_bdi(dev: str, name: str, want: int) -> int | None:
    """Set the bdi ``dev``'s setting ``name`` to ``want`` unless it is so already; the value now in
    force as the kernel reads it back (max_bytes is kept as a share of the machine's limit: rounded),
    or None (one log line) if it cannot be read or set."""
    path = f"/sys/class/bdi/{dev}/{name}"
    try:
        with open(path) as f:
            now = int(f.read())
        if now != want:
            with open(path, "w") as f:
                f.write(str(want))
            with open(path) as f:
                now = int(f.read())
    except (OSError, ValueError) as e:
        log.info("cannot set %s to %d: %s", path, want, e)
        return None
    return now


def dirty_limit_of(mountpoint: str) -> int | None:
    """The kernel's own limit of the mount's dirty data (its bdi's max_bytes), or None."""
    dev = bdi_of(mountpoint)
    try:
        with open(f"/sys/class/bdi/{dev}/max_bytes") as f:
            return int(f.read())
    except (OSError, ValueError, TypeError):
        return None


async def announce_when_up(mountpoint: str, read_ahead: Callable[[], int], ready: Callable[[str | None], None],
                           up: trio.Event) -> None:
    """Tell whoever waits that the mount is up once it answers: a stat(2) of the mount point waits for
    the kernel's FUSE_INIT and a GETATTR, both served by our own loop. Then set the read-ahead
    (``read_ahead()`` bytes), which the kernel set from INIT's reply (the smaller of the two)."""
    try:
        st = await run_sync_abandoning(os.stat, mountpoint)
    except OSError:
        return
    if bdi_of(mountpoint) != f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}":
        return  # the directory under a mount already gone
    up.set()
    ready(None)
    kb = set_read_ahead(mountpoint, read_ahead())
    log.debug("read_ahead_kb of %s: %s", mountpoint, kb)


async def follow_paths(mountpoint: str, read_ahead: Callable[[], int] | None, write_behind: Callable[[], None],
                       changed: Callable[[], Awaitable[None]], up: trio.Event) -> None:
    """Size the kernel's read-ahead (``read_ahead()`` bytes; None: the mount's option fixed it) and
    its limit of dirty data (``write_behind()``) again as paths come and go (trunking discovery adds
    them after the mount) and as their rates become known: at each change of a path, and every
    READ_AHEAD_RECHECK seconds."""
    await up.wait()
    last = None
    while True:
        with trio.move_on_after(READ_AHEAD_RECHECK):
            await changed()
        write_behind()
        if read_ahead is None:
            continue
        want = read_ahead()
        if want != last:
            kb = set_read_ahead(mountpoint, want)
            log.debug("read_ahead_kb of %s: %s", mountpoint, kb)
            last = want


def run(req: MountRequest, ready_fd: int | None = None) -> int:
    """Serve in this process (the foreground, or the background child); 0 after a clean unmount."""

    told = False  # whether the waiting parent has its answer

    def ready(err: str | None, background: bool = False) -> None:
        nonlocal told
        if ready_fd is None or told:
            return
        told = True
        try:
            os.write(ready_fd, READY if err is None else (BACKGROUND if background else b"") + f"{err}\n".encode())
        except BrokenPipeError:
            pass  # (the parent was interrupted and no longer waits)
        os.close(ready_fd)
        _detach(req.options)

    def backgrounding(reason: str) -> None:
        ready(reason, background=True)

    keep_payload_memory()  # (the writes' payloads: see there)
    try:
        trio.run(serve, req, ready, backgrounding)
    except Interrupted:
        return EXIT_INTERRUPTED
    except MountError as e:
        if ready_fd is None:
            print(f"pynfsrdma: {e}", file=sys.stderr)
        elif told:  # (bg: the one who mounted has gone; -o debug keeps this on standard error)
            log.error("%s", e)
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
    if a.ready_fd is None and a.foreground:
        for note in req.options.notes:
            print(f"pynfsrdma: {note}", file=sys.stderr)
    if a.ready_fd is not None or a.foreground:
        return run(req, a.ready_fd)
    try:
        return mount(a.source, a.mountpoint, a.options, verbose=a.verbose)
    except MountError as e:
        print(f"pynfsrdma: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
