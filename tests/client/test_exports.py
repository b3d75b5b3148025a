"""``import pynfsrdma`` names the public API, and the list stays true: what the package exports at run
time, what a reader or an IDE sees in its source, what each name documents, what the README's examples
use, and what the public classes take and return (a user can name it). The testbed's list too."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import pynfsrdma
import pynfsrdma._testbed
from pynfsrdma import Client, SyncClient

INIT = Path(pynfsrdma.__file__)
ROOT = INIT.parent.parent


def test_the_list_names_every_public_name_and_only_those() -> None:
    public = {n for n in dir(pynfsrdma) if not n.startswith("_")
              and not isinstance(getattr(pynfsrdma, n), types.ModuleType)}
    assert public | {"__version__"} == set(pynfsrdma.__all__)
    assert len(pynfsrdma.__all__) == len(set(pynfsrdma.__all__))
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = pynfsrdma.Nothing


def test_the_source_names_the_same_list_without_running_it() -> None:
    """An IDE or a type checker reads the imports (under TYPE_CHECKING: at run time each name is loaded
    on first use) and ``__all__`` as written, not as computed; the table the names are loaded from
    says what those imports say."""
    tree = ast.parse(INIT.read_text())
    (checking,) = [node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)]
    imports = [node for node in checking.body if isinstance(node, ast.ImportFrom)]
    imported = {alias.asname or alias.name for node in imports for alias in node.names}
    where = {alias.name: "." * node.level + (node.module or "") for node in imports for alias in node.names}
    assert where == vars(pynfsrdma)["_WHERE"]
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                if isinstance(t, ast.Name)}
    (all_node,) = [node for node in tree.body if isinstance(node, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
    listed = set(ast.literal_eval(all_node.value))
    assert listed == {n for n in imported | assigned if not n.startswith("_")} | {"__version__"}


def test_every_name_says_what_it_is() -> None:
    for name in pynfsrdma.__all__:
        obj = getattr(pynfsrdma, name)
        if name == "__version__":
            assert obj.count(".") == 2
            continue
        assert inspect.getdoc(obj), f"pynfsrdma.{name} has no documentation"
        assert obj.__module__ == "pynfsrdma", name
        assert not any(part.startswith("_") for part in obj.__module__.split(".")), name


def test_the_blocking_client_has_each_call_of_the_async_one_as_a_method_of_its_own() -> None:
    """help(SyncClient) and an IDE show the calls with their parameters (no forwarding magic)."""
    calls = {n for n, f in vars(Client).items() if inspect.iscoroutinefunction(f) and not n.startswith("_")}
    assert calls <= set(vars(SyncClient)), calls - set(vars(SyncClient))
    for name in calls - {"open"}:
        async_params = list(inspect.signature(getattr(Client, name)).parameters)
        sync_params = list(inspect.signature(getattr(SyncClient, name)).parameters)
        assert sync_params == async_params, name
    assert "__getattr__" not in vars(SyncClient)
    assert list(inspect.signature(pynfsrdma.connect).parameters) == list(
        inspect.signature(inspect.unwrap(Client.connect)).parameters)[1:]


def test_the_testbed_lists_its_public_names() -> None:
    tb = pynfsrdma._testbed
    public = {n for n, v in vars(tb).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public == set(tb.__all__)
    for name in tb.__all__:
        assert inspect.getdoc(getattr(tb, name)), f"pynfsrdma._testbed.{name} has no documentation"


def _readme_python() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_readme_uses_only_exported_names() -> None:
    used = set()
    for block in _readme_python():
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module == "pynfsrdma":
                used |= {a.name for a in node.names}
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pynfsrdma":
                used.add(node.attr)
    assert used, "the README's examples import nothing of ours: this test reads them wrong"
    assert used <= set(pynfsrdma.__all__)


IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def _named_in_signatures(cls: type) -> set[type]:
    """The classes of ours that ``cls``'s public methods and properties take or return. Not its
    constructors (``__init__``, ``from_*``): a user gets these objects from the API (``Client.connect``,
    ``Client.open``, ``stat``), which builds them from the protocol's own types."""
    module = importlib.import_module(cls.__module__)
    found = set()
    for name, member in vars(cls).items():
        if name.startswith(("_", "from_")):
            continue
        fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if not callable(fn):
            continue
        for annotation in getattr(fn, "__annotations__", {}).values():
            for ident in IDENT.findall(str(annotation)):
                obj = getattr(fn, "__globals__", {}).get(ident) or getattr(module, ident, None)
                if inspect.isclass(obj) and obj.__module__.startswith("pynfsrdma."):
                    found.add(obj)
    return found


def test_what_the_public_classes_take_and_return_is_exported() -> None:
    exported = {getattr(pynfsrdma, n) for n in pynfsrdma.__all__}
    missing = {}
    for name in pynfsrdma.__all__:
        obj = getattr(pynfsrdma, name)
        if inspect.isclass(obj):
            for cls in _named_in_signatures(obj) - exported:
                missing.setdefault(name, set()).add(cls.__qualname__)
    assert not missing, f"named in the public API but not exported: {missing}"


def test_the_checks_see_what_they_look_for() -> None:
    """A class whose method returns one of ours that is not exported is found."""

    class Probe:
        def f(self) -> pynfsrdma._testbed.Proxy:  # (not in pynfsrdma.__all__)
            raise NotImplementedError

    Probe.__module__ = "pynfsrdma._testbed"
    assert pynfsrdma._testbed.Proxy in _named_in_signatures(Probe)


def test_importing_the_package_loads_no_client_until_a_name_is_used() -> None:
    """``import pynfsrdma`` is cheap (the CLI's ``--version`` starts with it); a name loads its module."""
    code = ("import sys, pynfsrdma; before = sorted(m for m in sys.modules if m.startswith('pynfsrdma.'));"
            "pynfsrdma.connect; print(before, 'pynfsrdma._client.sync' in sys.modules, pynfsrdma.connect.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "True", "pynfsrdma"]
