"""What people install: the wheel in a fresh venv, the .deb, the RPM, and the man pages.

Every build works on a copy of the source tree in a temporary directory (other work in the tree is
never touched, nothing is installed on this machine). The .deb is unpacked with ``dpkg -x`` into a
throwaway root and run from there.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pynfsrdma import __version__
from pynfsrdma._cli.main import build_parser
from pynfsrdma._fuse.options import (
    GENERIC_OPTIONS,
    NOTED_OPTIONS,
    RDMA_OPTIONS,
    TRUNKING_FLAGS,
    TRUNKING_OPTIONS,
    MountOptions,
    parse_options,
)

ROOT = Path(__file__).resolve().parents[2]
MAN = ROOT / "packaging" / "man"
SKIP_DIRS = {
    ".git",
    ".venv",
    "build",
    "dist",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "mnt",
    "vm",
}
# Debian's tools, not the pyenv/venv Python that may come first on PATH
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def copy_tree(dest: Path) -> Path:
    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if n in SKIP_DIRS or n.endswith(".egg-info")}

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    return dest


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    assert p.returncode == 0, f"{cmd} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


# -- man pages ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", ["pynfsrdma.1", "mount.pynfsrdma.8"])
def test_man_page_renders_without_warnings(page: str) -> None:
    p = run(["groff", "-man", "-ww", "-Tutf8", "-z", str(MAN / page)])
    assert p.stderr == ""
    text = run(["groff", "-man", "-Tutf8", "-P-c", "-P-b", "-P-u", str(MAN / page)]).stdout
    assert "NAME" in text and "SYNOPSIS" in text


def _man_text(page: str) -> str:
    return run(["groff", "-man", "-Tascii", "-P-c", "-P-b", "-P-u", str(MAN / page)]).stdout


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def test_cli_man_page_names_every_command_and_option() -> None:
    text = _man_text("pynfsrdma.1")
    missing = []
    parser = build_parser()
    todo = [("", parser)]
    while todo:
        prefix, p = todo.pop()
        for a in p._actions:
            for opt in a.option_strings:
                if opt not in ("-h", "--help") and not re.search(
                    rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text
                ):
                    missing.append(f"{prefix or 'pynfsrdma'} {opt}")
        for name, sp in _subparsers(p).items():
            if not re.search(rf"\b{re.escape(name)}\b", text):
                missing.append(f"command {prefix} {name}".strip())
            todo.append((f"{prefix} {name}".strip(), sp))
    assert not missing, f"pynfsrdma(1) does not document: {missing}"


def test_mount_man_page_names_every_mount_option() -> None:
    text = _man_text("mount.pynfsrdma.8")
    groups = {"ignored", "notes", "rdma", "trunking"}  # fields that collect the options named below
    fields = [f.name for f in dataclasses.fields(MountOptions) if f.name not in groups]
    names = [*fields, "soft", "noac", "ac", "rw", "actimeo", "nfsvers", "nodefault_permissions", "lock", "nolock",
             "fg", "remount", *NOTED_OPTIONS, *GENERIC_OPTIONS,
             *RDMA_OPTIONS, *TRUNKING_OPTIONS, *TRUNKING_FLAGS]
    missing = [n for n in names if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)]
    assert not missing, f"mount.pynfsrdma(8) does not document: {missing}"


def test_mount_options_in_the_examples_are_accepted() -> None:
    """The options the man page, the unit and the fstab line show all parse."""
    unit = (ROOT / "packaging/systemd/mnt-nfs.mount").read_text()
    fstab = [
        ln
        for ln in (ROOT / "packaging/systemd/fstab.example").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    texts = [re.search(r"^Options=(.*)$", unit, re.M).group(1)]  # type: ignore[union-attr]
    texts += [ln.split()[3] for ln in fstab]
    assert len(texts) == 2
    assert re.search(r"^Type=fuse\.pynfsrdma$", unit, re.M) and fstab[0].split()[2] == "fuse.pynfsrdma"
    for t in texts:
        o = parse_options(t)
        assert o.hard and o.allow_other and "_netdev" in o.ignored


# -- the wheel ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv(tmp_path: Path) -> None:
    src = copy_tree(tmp_path / "src")
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)])
    (wheel,) = dist.glob("pynfsrdma-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = z.read(f"pynfsrdma-{__version__}.dist-info/entry_points.txt").decode()
        metadata = z.read(f"pynfsrdma-{__version__}.dist-info/METADATA").decode()
    assert "pynfsrdma/py.typed" in names
    assert "pynfsrdma/_trace.py" in names and "pynfsrdma/_proto/nfs4/const.py" in names
    assert "mount.pynfsrdma = pynfsrdma._cli.mount:helper_main" in entry_points
    assert re.search(r"^Provides-Extra: rdma$", metadata, re.M)
    assert re.search(r"^Requires-Dist: pyverbs.*extra == .rdma.", metadata, re.M)

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])  # no --system-site-packages: only what the wheel pulls in
    pip = venv / "bin" / "pip"
    run([str(pip), "install", "-q", str(wheel)])
    out = run([str(venv / "bin" / "pynfsrdma"), "--version"], cwd=tmp_path).stdout
    assert out.strip() == f"pynfsrdma {__version__}"
    helper = run([str(venv / "bin" / "mount.pynfsrdma"), "--help"], cwd=tmp_path).stdout
    assert "usage: mount.pynfsrdma" in helper
    # the helper refuses an unknown option with mount(8)'s usage error, before touching anything
    p = subprocess.run(
        [str(venv / "bin" / "mount.pynfsrdma"), "h:/e", str(tmp_path), "-o", "bogus"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert (p.returncode, p.stderr) == (1, "mount.pynfsrdma: unknown mount option: bogus\n")
    typed = run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.resources as r; print(r.files('pynfsrdma').joinpath('py.typed').is_file())",
        ],
        cwd=tmp_path,
    ).stdout
    assert typed.strip() == "True"


# -- the Debian package ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_debian_package_builds_installs_and_runs(tmp_path: Path) -> None:
    src = copy_tree(tmp_path / "pynfsrdma")
    env = {**os.environ, "PATH": SYSTEM_PATH}
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    run(["make", "deb"], cwd=src, env=env)  # as the README gives it
    (deb,) = (src / "build/deb").glob("pynfsrdma_*_all.deb")
    assert deb.name == f"pynfsrdma_{__version__}_all.deb"

    listing = run(["dpkg-deb", "-c", str(deb)]).stdout
    paths = {line.split()[5].removeprefix(".") for line in listing.splitlines()}
    for p in (
        "/usr/bin/pynfsrdma",
        "/usr/sbin/mount.pynfsrdma",
        "/usr/sbin/mount.fuse.pynfsrdma",
        "/usr/share/man/man1/pynfsrdma.1.gz",
        "/usr/share/man/man8/mount.pynfsrdma.8.gz",
        "/usr/lib/python3/dist-packages/pynfsrdma/py.typed",
        "/usr/share/doc/pynfsrdma/examples/mnt-nfs.mount",
    ):
        assert p in paths, f"{p} not in the package"
    assert "mount.fuse.pynfsrdma -> mount.pynfsrdma" in listing

    depends = run(["dpkg-deb", "-f", str(deb), "Depends"]).stdout
    for dep in ("fuse3", "python3-trio (>= 0.22)", "python3-pyfuse3", "python3-tqdm"):
        assert dep in depends

    root = tmp_path / "root"
    run(["dpkg", "-x", str(deb), str(root)])
    # the installed command with the package's own files only; its Python dependencies from the
    # venv's site-packages (Debian's python3-trio etc. are not installed on this machine)
    deps = [p for p in sys.path if p.endswith("site-packages")]
    run_env = {**env, "PYTHONPATH": os.pathsep.join([str(root / "usr/lib/python3/dist-packages"), *deps])}
    out = run(["/usr/bin/python3", str(root / "usr/bin/pynfsrdma"), "--version"], env=run_env, cwd=tmp_path)
    assert out.stdout.strip() == f"pynfsrdma {__version__}"
    loc = run(
        ["/usr/bin/python3", "-c", "import pynfsrdma; print(pynfsrdma.__file__)"], env=run_env, cwd=tmp_path
    )
    assert loc.stdout.strip().startswith(str(root))
    helper = run(
        ["/usr/bin/python3", str(root / "usr/sbin/mount.fuse.pynfsrdma"), "--help"], env=run_env, cwd=tmp_path
    )
    assert "usage: mount.pynfsrdma" in helper.stdout
    man = run(
        ["man", "-l", str(root / "usr/share/man/man8/mount.pynfsrdma.8.gz")],
        env={**run_env, "MANPAGER": "cat", "MANWIDTH": "80"},
    )
    assert "fuse.pynfsrdma" in man.stdout


# -- the RPM --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_rpm_builds_with_the_documented_command(tmp_path: Path) -> None:
    src = copy_tree(tmp_path / f"pynfsrdma-{__version__}")
    env = {**os.environ, "PATH": SYSTEM_PATH, "HOME": str(tmp_path)}
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    run(["make", "rpm"], cwd=src, env=env)  # the tarball, then rpmbuild -ba (README "Install")
    top = src / "build/rpmbuild"
    (srpm,) = (top / "SRPMS").glob("*.src.rpm")
    assert srpm.name.startswith(f"pynfsrdma-{__version__}-1")
    (rpm,) = (top / "RPMS" / "noarch").glob("*.rpm")
    files = set(run(["rpm", "-qlp", str(rpm)], env=env).stdout.split())
    for p in ("/usr/bin/pynfsrdma", "/usr/sbin/mount.pynfsrdma", "/usr/sbin/mount.fuse.pynfsrdma"):
        assert p in files
    assert any(f.endswith("/pynfsrdma/py.typed") for f in files)
    assert any(f.endswith("/pynfsrdma/fsspec.py") for f in files)
    assert any(f.startswith("/usr/share/man/man8/mount.pynfsrdma.8") for f in files)
    requires = run(["rpm", "-qp", "--requires", str(rpm)], env=env).stdout
    assert "python3-trio >= 0.22" in requires and "fuse3" in requires and "python3-tqdm" in requires
    suggests = run(["rpm", "-qp", "--suggests", str(rpm)], env=env).stdout
    assert "nfs-ganesha" in suggests
