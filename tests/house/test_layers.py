"""The package's layers hold (docs/architecture.md): every import points down the stack or sideways
within a layer, no two modules import each other (directly or around a loop), and no module reaches
into another's private members (``obj._name`` where ``_name`` is not defined in the same module).
Read from the source with ``ast``, so a violation fails here, naming the file and line."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pynfsrdma

PACKAGE = Path(pynfsrdma.__file__).parent

# bottom to top: a module may import from its own layer and the ones before it
LAYERS = ["_xdr", "_proto", "_transport", "_rpc", "_session", "_trunking", "_client", "_fuse", "_cli"]
# modules outside the stack, and who may import them
TOOLS = {"_testbed": {"_testbed", "_cli"}}


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: list[tuple[str, int]] = field(default_factory=list)  # (module, line), at run time


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _modules() -> dict[str, Module]:
    names = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    out = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text(), str(path))
        mod = Module(name, path, tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom | ast.Import) or _type_checking_only(node, parents):
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # "from . import x" names a module when x is one
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in names else target for a in node.names]
            # (an import inside a function runs late: it may point anywhere a top-level one may,
            # but it does not make a cycle at import time)
            top_level = parents.get(node) is tree or isinstance(parents.get(node), ast.If | ast.Try)
            for t in targets:
                if t.startswith("pynfsrdma"):
                    mod.imports.append((t if top_level else f"late:{t}", node.lineno))
        out[name] = mod
    return out


MODULES = _modules()


def _layer(module: str) -> str | None:
    parts = module.removeprefix("late:").split(".")
    return parts[1] if len(parts) > 1 else None


def test_imports_point_down_the_stack() -> None:
    wrong = []
    for mod in MODULES.values():
        here = _layer(mod.name)
        for target, line in mod.imports:
            there = _layer(target)
            if there in TOOLS and here not in TOOLS[there]:
                wrong.append(f"{mod.path}:{line}: {mod.name} imports the test tool {target}")
            if here in LAYERS and there in LAYERS and LAYERS.index(there) > LAYERS.index(here):
                wrong.append(f"{mod.path}:{line}: {mod.name} ({here}) imports {target} ({there}), a layer above")
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """The import loops of ``graph`` (Tarjan's strongly connected components of more than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(v: str) -> Iterator[list[str]]:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                yield from visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                yield sorted(component)

    for v in sorted(graph):
        if v not in index:
            yield from visit(v)


def test_no_module_imports_itself_around_a_loop() -> None:
    graph: dict[str, set[str]] = {}
    for mod in MODULES.values():
        for target, _ in mod.imports:
            if target.startswith("late:"):
                continue
            # "from ..session import x" loads the package's __init__ only: a dependency on it
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target != mod.name and not mod.name.startswith(target + "."):
                graph.setdefault(mod.name, set()).add(target)
    loops = list(_cycles(graph))
    assert not loops, "import loops: " + "; ".join(" <-> ".join(c) for c in loops)


def _defined_here(tree: ast.Module) -> set[str]:
    """Private names a module defines: functions, classes, their attributes and fields."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_"):
            names.add(node.value)  # (__slots__ entries, attributes set by setattr)
    return names


def _outside_modules(tree: ast.Module) -> set[str]:
    """Names bound to modules from outside the package (``argparse._SubParsersAction`` is theirs)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if not a.name.startswith("pynfsrdma")}
        elif isinstance(node, ast.ImportFrom) and not node.level and not (node.module or "").startswith("pynfsrdma"):
            names |= {a.asname or a.name for a in node.names}
    return names


def test_no_module_reaches_into_another_modules_private_members() -> None:
    wrong = []
    for mod in MODULES.values():
        own = _defined_here(mod.tree)
        theirs = _outside_modules(mod.tree)
        for node in ast.walk(mod.tree):
            if not isinstance(node, ast.Attribute):
                continue
            name = node.attr
            if not name.startswith("_") or name.startswith("__") or name in own:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in theirs:
                continue
            wrong.append(f"{mod.path}:{node.lineno}: {ast.unparse(node)} is private to another module")
    assert not wrong, "\n".join(wrong)


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The checks above find a loop, an upward import and a private reach when there is one."""
    assert list(_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})) == [["a", "b", "c"]]
    assert not list(_cycles({"a": {"b"}, "b": {"c"}}))
    tree = ast.parse("import argparse\nclass K:\n    def f(self):\n        self._x = 1\n"
                     "def g(o):\n    return o._x, o._y, argparse._SubParsersAction\n")
    own, theirs = _defined_here(tree), _outside_modules(tree)
    reached = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
               and n.attr not in own and not (isinstance(n.value, ast.Name) and n.value.id in theirs)]
    assert reached == ["_y"]
    assert MODULES["pynfsrdma._session.session"].imports, "no imports read"
    assert _layer("pynfsrdma._fuse.mount_daemon") == "_fuse" and LAYERS.index("_fuse") > LAYERS.index("_client")
