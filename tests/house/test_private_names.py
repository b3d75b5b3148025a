"""The package's face is curated as trio's is: ``pynfsrdma/__init__.py`` names the public API,
``fsspec.py`` is fsspec's entry point, and every other top-level module or subpackage has a leading
underscore, so a user sees by its name what may change between releases. A new module or subpackage
goes under a private name (or into PUBLIC here, on purpose, with the API it adds)."""

from __future__ import annotations

from pathlib import Path

import pynfsrdma

PACKAGE = Path(pynfsrdma.__file__).parent
PUBLIC = {"__init__.py", "fsspec.py", "py.typed"}


def _public_looking(package: Path) -> list[str]:
    """The top-level entries of ``package`` whose names say they are public, beyond PUBLIC (a directory
    counts when it holds Python source: one left with only __pycache__ by a checkout does not)."""
    return sorted(
        p.name for p in package.iterdir()
        if not p.name.startswith((".", "_")) and p.name not in PUBLIC
        and (p.is_file() or any(p.rglob("*.py")))
    )


def test_only_the_public_modules_have_public_names() -> None:
    assert _public_looking(PACKAGE) == [], "give these a leading underscore (or make them public in PUBLIC)"


def test_the_public_modules_are_there() -> None:
    assert {p.name for p in PACKAGE.iterdir()} >= PUBLIC


def test_the_check_sees_a_new_public_module_or_subpackage(tmp_path: Path) -> None:
    for name in ("__init__.py", "fsspec.py", "py.typed", "_inner.py", "helpers.py"):
        (tmp_path / name).touch()
    for name in ("_core", "newthing", "__pycache__"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").touch()
    (tmp_path / "gone" / "__pycache__").mkdir(parents=True)
    (tmp_path / "gone" / "__pycache__" / "x.cpython-311.pyc").touch()
    assert _public_looking(tmp_path) == ["helpers.py", "newthing"]
