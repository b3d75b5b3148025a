"""``import pynfsrdma`` names the public API, and the list stays true: what the package exports at run
time, what a reader or an IDE sees in its source, and what each name documents."""

from __future__ import annotations

import ast
import inspect
import types
from pathlib import Path

import pynfsrdma
from pynfsrdma import Client, SyncClient

INIT = Path(pynfsrdma.__file__)


def test_the_list_names_every_public_name_and_only_those() -> None:
    public = {n for n, v in vars(pynfsrdma).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public | {"__version__"} == set(pynfsrdma.__all__)
    assert len(pynfsrdma.__all__) == len(set(pynfsrdma.__all__))


def test_the_source_names_the_same_list_without_running_it() -> None:
    """An IDE or a type checker reads the imports and ``__all__`` as written, not as computed."""
    tree = ast.parse(INIT.read_text())
    imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                if isinstance(t, ast.Name)}
    (all_node,) = [node for node in tree.body if isinstance(node, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
    listed = set(ast.literal_eval(all_node.value))
    assert listed == (imported | assigned) - {"__all__"}


def test_every_name_says_what_it_is() -> None:
    for name in pynfsrdma.__all__:
        obj = getattr(pynfsrdma, name)
        if name == "__version__":
            assert obj.count(".") == 2
            continue
        assert inspect.getdoc(obj), f"pynfsrdma.{name} has no documentation"
        assert obj.__module__.startswith("pynfsrdma."), name
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
