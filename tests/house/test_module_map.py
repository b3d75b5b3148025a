"""docs/architecture.md's map of the layers names every module of the package, in the row of its
package, and no module that is not there: a module added, moved or renamed shows up here."""

from __future__ import annotations

import re
from pathlib import Path

import pynfsrdma

PACKAGE = Path(pynfsrdma.__file__).parent
DOC = PACKAGE.parent / "docs" / "architecture.md"


def _rows() -> dict[str, str]:
    """The map's rows by their first cell (``_xdr/``, ``errors.py``, ...)."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `([a-z_0-9]+/|[a-z_0-9]+\.py)` \|(.*)", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def _named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_0-9*]+\.py)`", text))


def _modules(where: Path) -> set[str]:
    return {p.name for p in where.rglob("*.py") if p.name != "__init__.py"}


def test_every_package_and_top_level_module_has_a_row() -> None:
    rows = _rows()
    packages = {p.name + "/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    top = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert set(rows) == packages | top


def test_each_row_names_the_modules_of_its_package_and_no_others() -> None:
    rows = _rows()
    wrong = []
    for first, text in rows.items():
        if not first.endswith("/"):
            continue
        have = _modules(PACKAGE / first)
        named = {n for n in _named(text) if "*" not in n}
        patterns = [n for n in _named(text) if "*" in n]
        missing = {m for m in have - named if not any(Path(m).match(p) for p in patterns)}
        gone = named - have
        if missing:
            wrong.append(f"{first}: not in the map: {sorted(missing)}")
        if gone:
            wrong.append(f"{first}: in the map, not in the package: {sorted(gone)}")
    assert not wrong, "\n".join(wrong)
