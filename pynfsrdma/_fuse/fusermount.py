"""Mounting a FUSE file system without libfuse: the kernel connection (/dev/fuse) is opened and the
file system mounted either by ``mount(2)`` (root) or by ``fusermount3``, which sends the connection's
file descriptor back over a socket (``_FUSE_COMMFD``).

``auto_unmount`` (a killed daemon leaves no dead mount) always goes through ``fusermount3``, as libfuse
does, root or not: fusermount3 then stays, holding the other end of the socket, and unmounts when it
reads the end of it, which happens when the daemon exits however it exits. A clean unmount closes the
connection first (so that the unmount cannot wait for requests nobody will answer), then lets that
fusermount3 unmount (or, without it, unmounts lazily itself) and reaps it.

When the daemon dies, fusermount3 unmounts only if opening the mount's root fails with ENOTCONN, that is
only if the connection is gone by then. The kernel lets go of a dead process's files from its highest
descriptor down, so the connection's descriptor must be above the socket's (:func:`connection_above`,
:func:`socket_below`): else fusermount3 may open the root while the connection still lives, its OPENDIR
ends with ECONNABORTED when the connection goes, and the dead mount is left.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import select
import socket
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

FUSERMOUNT = "fusermount3"
COMMFD_ENV = "_FUSE_COMMFD"  # fusermount3 sends the /dev/fuse descriptor over this socket
DEV_FUSE = "/dev/fuse"
HELPER_WAIT = 10.0  # seconds for fusermount3 to unmount and end after the socket is closed

# mount(2) flags and umount2(2)'s lazy flag (<sys/mount.h>)
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MNT_DETACH = 2

_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc = lib
    return _libc


@dataclass(slots=True)
class MountSpec:
    """What to mount: the options of ``-o`` that FUSE itself knows."""

    mountpoint: str
    fsname: str = "fuse"
    subtype: str = ""
    allow_other: bool = False
    default_permissions: bool = False
    ro: bool = False
    auto_unmount: bool = False

    @classmethod
    def from_options(cls, mountpoint: str, options: set[str]) -> MountSpec:
        """From a set such as ``{"fsname=srv:/x", "subtype=pynfsrdma", "allow_other", "auto_unmount"}``
        (ValueError for anything else)."""
        spec = cls(os.path.abspath(mountpoint))
        for opt in options:
            key, eq, value = opt.partition("=")
            if eq and key in ("fsname", "subtype"):
                if "," in value:
                    raise ValueError(f"FUSE option {opt!r}: no commas in a value")
                setattr(spec, key, value)
            elif not eq and key in ("allow_other", "default_permissions", "ro", "auto_unmount"):
                setattr(spec, key, True)
            elif not eq and key == "rw":
                spec.ro = False
            else:
                raise ValueError(f"unknown FUSE option {opt!r}")
        return spec

    @property
    def fstype(self) -> str:
        return f"fuse.{self.subtype}" if self.subtype else "fuse"

    def kernel_options(self) -> list[str]:
        """Options of the kernel's own (besides fd=, rootmode=, user_id=, group_id=)."""
        return [o for o, on in (("allow_other", self.allow_other), ("default_permissions", self.default_permissions))
                if on]


@dataclass
class Mounted:
    """A mounted file system and its kernel connection ``fd``."""

    spec: MountSpec
    fd: int
    helper: subprocess.Popen[bytes] | None = None  # fusermount3 waiting to auto-unmount
    commsock: socket.socket | None = field(default=None, repr=False)

    def unmount(self) -> None:
        """Close the connection and unmount (if still mounted); reap fusermount3."""
        gone = True
        if self.fd >= 0:
            gone = connection_gone(self.fd)
            os.close(self.fd)
            self.fd = -1
        if self.helper is not None:
            if self.commsock is not None:
                self.commsock.close()  # fusermount3 reads the end and unmounts (if it is still our mount)
                self.commsock = None
            try:
                self.helper.wait(HELPER_WAIT)
            except subprocess.TimeoutExpired:
                log.warning("%s did not end after %g s", FUSERMOUNT, HELPER_WAIT)
            self.helper = None
        if not gone and is_mounted(self.spec.mountpoint):
            lazy_unmount(self.spec.mountpoint)


def connection_gone(fd: int) -> bool:
    """The kernel connection was unmounted or aborted (its device reports an error to poll)."""
    p = select.poll()
    p.register(fd, 0)
    return any(ev & select.POLLERR for _, ev in p.poll(0))


def is_mounted(mountpoint: str) -> bool:
    try:
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == mountpoint for line in f)
    except OSError:
        return False


def lazy_unmount(mountpoint: str) -> None:
    """Unmount now, letting go of files still open in it (``umount -l``); quiet if not mounted."""
    if os.geteuid() == 0:
        if _c().umount2(os.fsencode(mountpoint), MNT_DETACH) != 0:
            e = ctypes.get_errno()
            if e not in (errno.EINVAL, errno.ENOENT):
                raise OSError(e, f"umount2 {mountpoint}: {os.strerror(e)}")
        return
    subprocess.run([FUSERMOUNT, "-u", "-q", "-z", "--", mountpoint], check=False, stdin=subprocess.DEVNULL)


def mount(spec: MountSpec) -> Mounted:
    """Mount ``spec`` (OSError saying why not): ``mount(2)`` as root without auto_unmount,
    ``fusermount3`` otherwise."""
    if os.geteuid() == 0 and not spec.auto_unmount:
        return Mounted(spec, mount_syscall(spec))
    return mount_fusermount(spec)


def mount_syscall(spec: MountSpec) -> int:
    """Open /dev/fuse and mount it on the mount point with ``mount(2)``; the connection's fd."""
    fd = os.open(DEV_FUSE, os.O_RDWR | os.O_CLOEXEC)
    try:
        root = os.stat(spec.mountpoint)
        data = [
            f"fd={fd}",
            f"rootmode={stat.S_IFMT(root.st_mode):o}",
            f"user_id={os.getuid()}",
            f"group_id={os.getgid()}",
            *spec.kernel_options(),
        ]
        flags = MS_NOSUID | MS_NODEV | (MS_RDONLY if spec.ro else 0)
        res = _c().mount(
            spec.fsname.encode(), os.fsencode(spec.mountpoint), spec.fstype.encode(), flags, ",".join(data).encode()
        )
        if res != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"mount {spec.mountpoint}: {os.strerror(e)}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def mount_fusermount(spec: MountSpec) -> Mounted:
    """Have ``fusermount3`` mount and send back the connection; with auto_unmount it stays."""
    opts = ["ro" if spec.ro else "rw", "nosuid", "nodev", f"fsname={spec.fsname}"]
    if spec.subtype:
        opts.append(f"subtype={spec.subtype}")
    opts += spec.kernel_options()
    if spec.auto_unmount:
        opts.append("auto_unmount")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with tempfile.TemporaryFile() as errors, theirs:
        env = {**os.environ, COMMFD_ENV: str(theirs.fileno())}
        try:
            helper = subprocess.Popen(
                [FUSERMOUNT, "-o", ",".join(opts), "--", spec.mountpoint],
                env=env,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
        except OSError as e:
            ours.close()
            raise OSError(e.errno, f"cannot run {FUSERMOUNT}: {e.strerror}") from e
        theirs.close()
        try:
            _, fds, _, _ = socket.recv_fds(ours, 1, 1)
        except OSError:
            fds = []
        if not fds:
            helper.wait()
            ours.close()
            errors.seek(0)
            text = errors.read().decode(errors="replace").strip() or f"{FUSERMOUNT} exited with {helper.returncode}"
            raise OSError(errno.EIO, text)
    fd = fds[0]
    for extra in fds[1:]:
        os.close(extra)
    os.set_inheritable(fd, False)
    if not spec.auto_unmount:
        helper.wait()
        ours.close()
        return Mounted(spec, fd)
    return Mounted(spec, connection_above(fd, ours.fileno()), helper, ours)


def connection_above(fd: int, commfd: int) -> int:
    """The connection ``fd``, moved above the socket fusermount3 watches if it is below it (see the
    module's documentation); the descriptor to use from then on."""
    if fd > commfd:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, commfd + 1)
    os.close(fd)
    return moved


def open_descriptors() -> set[int]:
    """This process's open file descriptors (and the one the listing used, closed by now)."""
    return {int(n) for n in os.listdir("/proc/self/fd")}


def _is_socket(fd: int) -> bool:
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:  # (closed: the descriptor that listed them)
        return False


def socket_below(spare: int, opened: set[int]) -> None:
    """After libfuse mounted with auto_unmount, opening ``opened`` (the descriptors new since): move
    the one socket among them, the one fusermount3 watches, to ``spare``, a descriptor opened before
    and so below the connection's (see the module's documentation). ``spare`` is closed if there is
    no such socket (a mount without fusermount3)."""
    sockets = [n for n in opened if n != spare and _is_socket(n)]
    if len(sockets) != 1:
        os.close(spare)
        return
    os.dup2(sockets[0], spare, inheritable=False)
    os.close(sockets[0])
