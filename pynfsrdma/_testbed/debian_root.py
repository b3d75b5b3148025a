"""A Debian 13 ("trixie") root with NFS-Ganesha 9 from trixie-backports, built once and cached outside
the repository, for :class:`~pynfsrdma._testbed.ganesha.Ganesha` ``(version="9")`` to run its server in
(chroot; the host's own packages stay as they are).

The build: ``debootstrap --variant=minbase trixie`` from the host's Debian mirror, then, in the root,
``apt-get install -t trixie-backports nfs-ganesha nfs-ganesha-vfs``. It takes about a minute and
365 MB; a stamp file names what was built, and a lock keeps two builders apart.
The cache is ``$PYNFSRDMA_GANESHA9_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/pynfsrdma-ganesha9``;
the root is its ``root/``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "GANESHA9_PACKAGES",
    "SERVER_MOUNT_POINT",
    "DebianRootError",
    "build_root",
    "cache_dir",
    "root_ready",
]

SUITE = "trixie"
BACKPORTS = "trixie-backports"
GANESHA9_PACKAGES = ("nfs-ganesha", "nfs-ganesha-vfs")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
DEFAULT_MIRROR = "http://deb.debian.org/debian/"
# Where a server's own directory (configuration, log, export, recovery records) is bind-mounted
# inside the root: each server has a mount namespace of its own, so they all use this one place.
SERVER_MOUNT_POINT = "/srv/pynfsrdma"
_STAMP = f"{SUITE} minbase; {BACKPORTS}: {' '.join(GANESHA9_PACKAGES)}; /etc/mtab; {SERVER_MOUNT_POINT}\n"


class DebianRootError(RuntimeError):
    """The root could not be built; the message says which step failed and quotes its output."""


def cache_dir() -> Path:
    """The cache directory of the root (``$PYNFSRDMA_GANESHA9_CACHE`` or the XDG cache's)."""
    given = os.environ.get("PYNFSRDMA_GANESHA9_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pynfsrdma-ganesha9"


def root_ready(cache: Path | None = None) -> Path | None:
    """The built root, or None if there is none (or an older build)."""
    cache = cache or cache_dir()
    try:
        if (cache / "root.stamp").read_text() == _STAMP:
            return cache / "root"
    except OSError:
        pass
    return None


def host_mirror() -> str:
    """The Debian mirror the host's apt uses (the one that serves bookworm), else deb.debian.org."""
    try:
        out = subprocess.run(
            ["apt-get", "indextargets", "--format", "$(REPO_URI) $(CODENAME)"],
            capture_output=True, text=True, check=False,
        ).stdout
    except OSError:
        return DEFAULT_MIRROR
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1] == "bookworm" and fields[0].endswith("debian/"):
            return fields[0]
    return DEFAULT_MIRROR


@contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _say(message: str) -> None:
    print(f"pynfsrdma testbed: {message}", file=sys.stderr, flush=True)


def build_root(cache: Path | None = None, *, say: Callable[[str], None] = _say) -> Path:
    """The root, built first if the cache has none (needs root, debootstrap and the mirror)."""
    cache = cache or cache_dir()
    ready = root_ready(cache)
    if ready is not None:
        return ready
    with _locked(cache):
        ready = root_ready(cache)  # another process built it while we waited
        if ready is not None:
            return ready
        for tool in ("debootstrap", "chroot"):
            if shutil.which(tool) is None:
                raise DebianRootError(f"{tool} not found: apt-get install debootstrap (it builds the Debian 13 root)")
        mirror = host_mirror()
        building = cache / "root.tmp"
        shutil.rmtree(building, ignore_errors=True)
        started = time.monotonic()
        say(f"building a Debian 13 root with NFS-Ganesha 9 in {cache} (about a minute, once)")
        _run(["debootstrap", "--variant=minbase", f"--keyring={KEYRING}", SUITE, str(building), mirror],
             "debootstrap", cache)
        (building / "etc/apt/sources.list.d/backports.list").write_text(
            f"deb [signed-by={KEYRING}] {mirror} {BACKPORTS} main\n"
        )
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
        _run(["chroot", str(building), "apt-get", "-q", "update"], "apt-get update", cache, env)
        _run(["chroot", str(building), "apt-get", "install", "-y", "-q", "--no-install-recommends",
              "-t", BACKPORTS, *GANESHA9_PACKAGES], "apt-get install", cache, env)
        _run(["chroot", str(building), "apt-get", "clean"], "apt-get clean", cache, env)
        # the VFS backend finds file systems in /etc/mtab, which minbase does not make
        mtab = building / "etc/mtab"
        if not mtab.is_symlink() and not mtab.exists():
            mtab.symlink_to("../proc/self/mounts")
        (building / SERVER_MOUNT_POINT.lstrip("/")).mkdir(parents=True, exist_ok=True)
        shutil.rmtree(cache / "root", ignore_errors=True)
        building.rename(cache / "root")
        (cache / "root.stamp").write_text(_STAMP)
        say(f"Debian 13 root ready in {time.monotonic() - started:.0f} s: {cache / 'root'}")
        return cache / "root"


def _run(argv: list[str], step: str, cache: Path, env: dict[str, str] | None = None) -> None:
    log = cache / "build.log"
    with open(log, "ab") as out:
        status = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, check=False).returncode
    if status != 0:
        lines = log.read_text(errors="replace").splitlines()[-10:]
        raise DebianRootError(
            f"building the Debian 13 root: {step} failed (status {status}); the end of {log}:\n  "
            + "\n  ".join(lines)
        )
