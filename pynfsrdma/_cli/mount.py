"""``pynfsrdma mount URL MOUNTPOINT [-o OPTIONS] [-f]`` and ``pynfsrdma umount MOUNTPOINT``.

Also the mount(8) helper's entry (``bin/mount.pynfsrdma SOURCE MOUNTPOINT [-o OPTIONS]``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from typing import Any


class _HelpWithOptions(argparse.Action):
    """``mount -h``: the usage, then every mount option, listed from the option parser's own tables
    (imported only when the help is asked for)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from .._fuse.options import options_help

        parser.epilog = options_help()
        parser.print_help()
        parser.exit()


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "mount",
        help="mount an NFSv4.1 export with FUSE",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    p.add_argument("-h", "--help", action=_HelpWithOptions, help="show this help and every mount option, and exit")
    p.add_argument("url", help="nfs://host[:port]/export[/dir] or host:/export")
    p.add_argument("mountpoint")
    p.add_argument("-o", "--options", dest="mount_options", action="append", default=[], metavar="OPTIONS")
    p.add_argument("-f", "--foreground", action="store_true", help="serve in the foreground")
    p.set_defaults(func=cmd_mount, sends_rpcs=lambda args: args.foreground)  # (in this process with -f only)
    u = subparsers.add_parser("umount", help="unmount a pynfsrdma mount")
    u.add_argument("mountpoint")
    u.add_argument("-l", "--lazy", action="store_true", help="detach now, clean up when no longer busy")
    u.set_defaults(func=cmd_umount)
    h = subparsers.add_parser(
        "install-helper",
        help="let mount(8) and /etc/fstab find this installation (type fuse.pynfsrdma)",
        description="Link mount.pynfsrdma and mount.fuse.pynfsrdma in DIR (default /sbin, where mount(8) "
        "looks for mount.TYPE) to this installation's mount.pynfsrdma, as the Debian and RPM packages "
        "install them; for installs made with pip.",
    )
    h.add_argument("--dir", default=HELPER_DIR, help=f"where mount(8) looks (default {HELPER_DIR})")
    h.add_argument("--remove", action="store_true", help="remove the links made before")
    h.set_defaults(func=cmd_install_helper)


HELPER_DIR = "/sbin"
HELPER_NAMES = ("mount.pynfsrdma", "mount.fuse.pynfsrdma")  # -t pynfsrdma, -t fuse.pynfsrdma


def helper_script() -> str | None:
    """This installation's mount.pynfsrdma (beside its Python, or in its scripts directory)."""
    import sysconfig

    for d in (os.path.dirname(sys.executable), sysconfig.get_path("scripts"),
              sysconfig.get_path("scripts", f"{os.name}_user")):
        candidate = os.path.join(d, HELPER_NAMES[0])
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return shutil.which(HELPER_NAMES[0])


def cmd_install_helper(args: argparse.Namespace) -> int:
    links = [os.path.join(args.dir, name) for name in HELPER_NAMES]
    if args.remove:
        for link in links:
            if os.path.islink(link):
                os.unlink(link)
                print(f"removed {link}")
        return 0
    script = helper_script()
    if script is None:
        print("pynfsrdma: mount.pynfsrdma is not installed beside this pynfsrdma", file=sys.stderr)
        return 1
    for link in links:
        if os.path.realpath(link) == os.path.realpath(script):
            continue
        if os.path.lexists(link):
            print(f"pynfsrdma: {link} exists (another installation's?): remove it first", file=sys.stderr)
            return 1
        os.symlink(script, link)
        print(f"{link} -> {script}")
    return 0


def cmd_mount(args: argparse.Namespace) -> int:
    from .._fuse.mount_start import mount

    serve_here = None
    if args.foreground:  # (the daemon's code, loaded here only to serve in this process)
        from .._fuse import mount_daemon

        serve_here = mount_daemon.run
    return mount(args.url, args.mountpoint, args.mount_options, verbose=getattr(args, "verbose", 0),
                 serve_here=serve_here)


def cmd_umount(args: argparse.Namespace) -> int:
    fusermount = shutil.which("fusermount3") or shutil.which("fusermount")
    if fusermount is None:
        print("pynfsrdma: fusermount3 not found (apt-get install fuse3)", file=sys.stderr)
        return 1
    mountpoint = os.path.abspath(args.mountpoint)
    if not _mounted(os.path.realpath(mountpoint)):
        print(f"pynfsrdma: {args.mountpoint}: not mounted", file=sys.stderr)
        return 1
    pid = None if args.lazy else _daemon_pid(mountpoint)
    rc = subprocess.run([fusermount, "-u"] + (["-z"] if args.lazy else []) + [mountpoint]).returncode
    if rc == 0 and pid is not None:
        _wait_gone(pid, DAEMON_EXIT_WAIT)
    return rc


# seconds umount waits for the mount daemon to finish (it commits data, closes files, and ends its
# session and client ID after the kernel let the mount go); a mount made again on the same mount point
# before that would share its client owner with a client still at work
DAEMON_EXIT_WAIT = 40.0


def _mounted(mountpoint: str) -> bool:
    """Whether something is mounted on ``mountpoint`` (as /proc/self/mountinfo lists it, escaped)."""
    escaped = mountpoint.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")
    try:
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == escaped for line in f)
    except OSError:
        return True  # no way to tell: let fusermount3 decide


def _daemon_pid(mountpoint: str) -> int | None:
    from .. import _control_socket as control_socket

    try:
        pid = control_socket.query(mountpoint, "stats").get("pid")
    except (OSError, control_socket.ControlError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def _wait_gone(pid: int, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(0.05)


def helper_main(argv: list[str] | None = None) -> int:
    """mount(8) calls ``mount.TYPE SOURCE MOUNTPOINT [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]``."""
    from .._fuse.mount_start import MountError, mount
    from .._fuse.options import OptionError

    p = argparse.ArgumentParser(prog="mount.pynfsrdma", formatter_class=argparse.RawDescriptionHelpFormatter,
                                add_help=False)
    p.add_argument("-h", "--help", action=_HelpWithOptions, help="show this help and every mount option, and exit")
    p.add_argument("source")
    p.add_argument("mountpoint")
    p.add_argument("-o", dest="options", action="append", default=[])
    p.add_argument("-t", dest="type")
    p.add_argument("-N", dest="namespace")
    for flag in ("-s", "-n", "-v", "-f"):  # sloppy, no mtab, verbose, fake: nothing to do for FUSE
        p.add_argument(flag, action="store_true")
    a = p.parse_args(argv)
    if a.f:
        return 0
    try:
        return mount(a.source, a.mountpoint, a.options, prog="mount.pynfsrdma")
    except OptionError as e:
        print(f"mount.pynfsrdma: {e}", file=sys.stderr)
        return 1
    except MountError as e:
        print(f"mount.pynfsrdma: {e}", file=sys.stderr)
        return 32  # mount(8): mount failure
    except KeyboardInterrupt:  # (the daemon was stopped: see mount_start.mount)
        return 130
