"""The start of a mount: check the options, the URL and the mount point, then serve in this process
(``-f``) or start the mount daemon in a process of its own and wait for its word through a pipe.

This side imports neither trio nor the client: ``pynfsrdma mount`` and ``mount.pynfsrdma`` load only
what they check before the daemon (:mod:`.mount_daemon`) starts, and that process loads the rest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._client.url import NfsURL, URLError, parse_url
from .fusermount import is_mounted
from .options import VERSIONS_TO_TRY, MountOptions, OptionError, parse_options, split_options

STOP_WAIT = 10.0  # seconds an interrupted parent waits for its daemon to end before it kills it
READY = b"ok\n"
BACKGROUND = b"bg "  # the first try failed and the daemon goes on trying (bg): "bg REASON\n"
URL_OVERRIDES = ("vers", "proto", "port")
DAEMON = "pynfsrdma._fuse.mount_daemon"


class MountError(OSError):
    """The file system could not be mounted; the message says why (and nothing is left mounted).
    ``temporary``: the server could not be reached, and may be later (retry=, bg)."""

    def __init__(self, message: str, temporary: bool = False) -> None:
        super().__init__(message)
        self.temporary = temporary


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
            # (vers=4 is no version of the URL's: the mount finds the highest both speak)
            if k in URL_OVERRIDES and v is not None and not (k == "vers" and len(VERSIONS_TO_TRY.get(v, ())) > 1):
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
    url.options = {**opts.rdma, **opts.tls}  # what the transport reads (proto=rdma, xprtsec=); the rest is ours
    mp = os.path.abspath(mountpoint)
    if not os.path.isdir(mp):
        reason = "Not a directory" if os.path.exists(mp) else "No such file or directory"
        raise MountError(f"mount point {mountpoint}: {reason}")
    if os.path.ismount(mp) and is_mounted(mp):
        raise MountError(f"{mountpoint} is already mounted")
    return MountRequest(source, url, mp, opts, texts)


def mount(
    source: str, mountpoint: str, option_texts: Sequence[str] = (), verbose: int = 0, prog: str = "pynfsrdma",
    serve_here: Callable[[MountRequest], int] | None = None,
) -> int:
    """Mount; in the background (default), return once the mount is up or has failed (or, with
    ``bg``, once the first try failed to reach the server: the daemon goes on trying). With
    ``serve_here`` (the daemon's ``run``, for ``-f``), serve in this process until unmounted. With
    ``remount`` among the options, change the options of the mount on ``mountpoint`` instead."""
    if any(k == "remount" for t in option_texts for k, _ in split_options(t)):
        return remount(mountpoint, option_texts)
    req = prepare(source, mountpoint, option_texts)
    for note in req.options.notes:
        print(f"{prog}: {note}", file=sys.stderr)
    if serve_here is not None:
        return serve_here(req)
    r, w = os.pipe()
    cmd = [sys.executable, "-m", DAEMON, "--ready-fd", str(w)]
    cmd += [x for t in req.option_texts for x in ("-o", t)]
    cmd += ["-v"] * verbose + [source, mountpoint]
    proc = subprocess.Popen(cmd, pass_fds=(w,), stdin=subprocess.DEVNULL, start_new_session=True)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as f:
            msg = f.read()
    except KeyboardInterrupt:
        # (the daemon has a session of its own: the terminal's Ctrl-C reached only us)
        _stop(proc)
        raise
    if msg == READY:
        return 0
    if msg.startswith(BACKGROUND):
        reason = msg[len(BACKGROUND):].decode(errors="replace").strip()
        minutes = req.options.retry_seconds / 60
        print(f"{prog}: {reason}; trying again in the background for {minutes:g} minutes (bg)", file=sys.stderr)
        return 0
    rc = proc.wait()
    text = msg.decode(errors="replace").strip() or f"the mount daemon ended with status {rc}"
    raise MountError(text)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a daemon whose parent was interrupted: SIGTERM (it stops trying, or unmounts if it was up
    already), and SIGKILL if it has not ended within STOP_WAIT seconds or a second interrupt comes."""
    proc.terminate()
    try:
        proc.wait(STOP_WAIT)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()


# the generic options of a mount (mount(8)'s, for the kernel's own remount of it)
VFS_OPTIONS = frozenset({"ro", "rw", "nosuid", "suid", "nodev", "dev", "noexec", "exec", "atime", "noatime",
                         "relatime", "norelatime", "strictatime", "nostrictatime", "nodiratime", "diratime",
                         "lazytime", "nolazytime", "sync", "async", "dirsync", "silent", "loud"})


def remount(mountpoint: str, option_texts: Sequence[str]) -> int:
    """``mount -o remount,...`` (root's): the mount's daemon checks the options (what may change:
    read-only and the attribute cache's timeouts), the kernel remounts with the generic ones (then
    writes get EROFS from the kernel), and the daemon takes them: after the kernel when the mount
    becomes read-only, before it when it becomes writable again."""
    from .. import _control_socket as control_socket

    mp = os.path.abspath(mountpoint)
    if os.geteuid() != 0:
        raise MountError(f"cannot remount {mountpoint}: only root can (as mount(8))")
    texts = [t for t in option_texts if t]
    generic = [k for t in texts for k, v in split_options(t) if v is None and k in VFS_OPTIONS - {"ro", "rw"}]
    try:
        with control_socket.Connection(mp) as conn:
            ro = bool(conn.request("remount", options=texts)["ro"])
            if not ro:
                conn.request("remount", options=texts, apply=True)
            _remount_kernel(mp, ["remount", "ro" if ro else "rw", *generic])
            if ro:
                conn.request("remount", options=texts, apply=True)
    except (control_socket.ControlError, KeyError, TypeError) as e:
        raise MountError(f"cannot remount {mountpoint}: {e}") from None
    return 0


def _remount_kernel(mountpoint: str, options: list[str]) -> None:
    """mount(8) without the helper (``--internal-only``) and without fstab's options for the mount."""
    from .. import _control_socket as control_socket

    p = subprocess.run(["mount", "--internal-only", "--options-mode", "ignore", "-o", ",".join(options), mountpoint],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise control_socket.ControlError(p.stderr.strip().removeprefix("mount: ") or f"mount exited with {p.returncode}")
