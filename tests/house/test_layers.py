"""The package's layers hold (docs/architecture.md): every import points down the stack or sideways
within a layer, no two modules import each other (directly or around a loop), and no module reaches
into another's private members (``obj._name`` where ``_name`` is not defined in the same module).
Every import counts: at the top of a module, inside a function (it runs late, but the two modules
still need each other) and under ``if TYPE_CHECKING:`` (the types still do).
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
    imports: list[tuple[str, int]] = field(default_factory=list)  # (module, line), each "how: module"


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


def _in_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return True
    return False


def _imports(name: str, package: str, tree: ast.Module, names: set[str]) -> list[tuple[str, int]]:
    """The package's modules that module ``name`` (of ``package``) imports, with the line, each
    marked how it is imported: "top:", "late:" (inside a function) or "typing:" (TYPE_CHECKING)."""
    out = []
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom | ast.Import):
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
        how = ("typing:" if _type_checking_only(node, parents) else "late:" if _in_function(node, parents)
               else "top:")
        out += [(how + t, node.lineno) for t in targets if t.startswith("pynfsrdma")]
    return out


def _modules() -> dict[str, Module]:
    names = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    out = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text(), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out[name] = Module(name, path, tree, _imports(name, package, tree, set(names)))
    return out


MODULES = _modules()


def _layer(module: str) -> str | None:
    parts = module.rpartition(":")[2].split(".")
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


def _graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Who imports whom among ``modules``, however the import is made."""
    graph: dict[str, set[str]] = {}
    for mod in modules.values():
        for target, _ in mod.imports:
            target = target.rpartition(":")[2]
            # "from ..session import x" loads the package's __init__ only: a dependency on it
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target != mod.name and not mod.name.startswith(target + "."):
                graph.setdefault(mod.name, set()).add(target)
    return graph


def test_no_module_imports_itself_around_a_loop() -> None:
    loops = list(_cycles(_graph(MODULES)))
    assert not loops, "import loops: " + "; ".join(" <-> ".join(c) for c in loops)


def test_no_module_of_the_stack_serves_only_the_testbed() -> None:
    """A module that only the testbed imports is the testbed's: it lives in ``_testbed/``, not in the
    product (its own tests may import it from there)."""
    users: dict[str, set[str]] = {}
    for importer, targets in _graph(MODULES).items():
        for target in targets:
            users.setdefault(target, set()).add(importer)
    wrong = [
        f"{MODULES[name].path}: imported only by the testbed ({', '.join(sorted(by))})"
        for name, by in users.items()
        if _layer(name) in LAYERS and not name.endswith(f"{_layer(name)}")
        and all(_layer(u) in TOOLS for u in by)
    ]
    assert not wrong, "\n".join(wrong)


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


# Private members one object reaches in another (``obj._name`` where ``obj`` is neither ``self`` nor
# ``cls`` nor a name the module itself defines at its top, such as a class's own table of its methods)
REACHES_LIMIT = 10


def _top_level_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top: its classes, functions and module-level variables."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _reaches(tree: ast.Module) -> list[ast.Attribute]:
    """The places in ``tree`` where an object reaches a private member of another object."""
    own, theirs = _top_level_names(tree), _outside_modules(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        obj = node.value
        if isinstance(obj, ast.Name) and (obj.id in ("self", "cls") or obj.id in own or obj.id in theirs):
            continue
        if isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "super":
            continue
        out.append(node)
    return out


def test_few_private_members_are_reached_from_another_object() -> None:
    reached = [f"{mod.path}:{node.lineno}: {ast.unparse(node)}" for mod in MODULES.values()
               for node in _reaches(mod.tree)]
    assert len(reached) <= REACHES_LIMIT, (
        f"{len(reached)} private members reached from another object (at most {REACHES_LIMIT}): give the "
        "object a method or a parameter for it\n" + "\n".join(reached))


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The checks above find a loop, an upward import and a private reach when there is one."""
    assert list(_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})) == [["a", "b", "c"]]
    # a loop closed by a TYPE_CHECKING import, and one closed by an import inside a function
    sources = {
        "pynfsrdma.p.a": "from .b import B\n",
        "pynfsrdma.p.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
        "pynfsrdma.p.c": "from .d import D\n",
        "pynfsrdma.p.d": "def f():\n    from .c import C\n",
    }
    fake = {n: Module(n, tmp_path, ast.parse(src), _imports(n, "pynfsrdma.p", ast.parse(src), set(sources)))
            for n, src in sources.items()}
    assert fake["pynfsrdma.p.b"].imports == [("typing:pynfsrdma.p.a", 3)]
    assert fake["pynfsrdma.p.d"].imports == [("late:pynfsrdma.p.c", 2)]
    assert list(_cycles(_graph(fake))) == [["pynfsrdma.p.a", "pynfsrdma.p.b"], ["pynfsrdma.p.c", "pynfsrdma.p.d"]]
    assert not list(_cycles({"a": {"b"}, "b": {"c"}}))
    tree = ast.parse("import argparse\nclass K:\n    def f(self):\n        self._x = 1\n"
                     "def g(o):\n    return o._x, o._y, argparse._SubParsersAction\n")
    own, theirs = _defined_here(tree), _outside_modules(tree)
    reached = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
               and n.attr not in own and not (isinstance(n.value, ast.Name) and n.value.id in theirs)]
    assert reached == ["_y"]
    tree = ast.parse("import os\nclass K:\n    TABLE = {1: '_f'}\n    def _f(self, o):\n        super()._g()\n"
                     "        return self._x, o._x, o.p._y, K._f, os._exit, cls._z\n")
    assert [ast.unparse(n) for n in _reaches(tree)] == ["o._x", "o.p._y"]
    assert MODULES["pynfsrdma._session.session"].imports, "no imports read"
    assert _layer("pynfsrdma._fuse.mount_daemon") == "_fuse" and LAYERS.index("_fuse") > LAYERS.index("_client")
