"""No room too big to live in: no class in ``pynfsrdma/`` over CLASS_LINES lines, and no function on
the request path (a FUSE request down to the socket, and its reply back up) over FUNCTION_LINES
lines. Measured with ``ast``, from a definition's first line (its decorators included) to its last.

The request path, by module (REQUEST_PATH): the FUSE channels and the operations they call
(``_fuse/``, but for the mount's start: ``mount_daemon.py``, ``mount_start.py``, ``options.py``,
``fusermount.py``), the FUSE kernel protocol (``_fuse/kernel/``), the client's COMPOUNDs, READs and
WRITEs and opens (``_client/compounds.py``, ``read_write.py``, ``opens.py``), the sessions
(``_session/``), RPC (``_rpc/``), the transports (``_transport/``) and XDR (``_xdr/``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pynfsrdma

CLASS_LINES = 600
FUNCTION_LINES = 80
PACKAGE = Path(pynfsrdma.__file__).parent
REQUEST_PATH = ("_fuse/", "_client/compounds.py", "_client/read_write.py", "_client/opens.py", "_session/",
                "_rpc/", "_transport/", "_xdr/")
# (the mount's start)
NOT_REQUEST_PATH = ("_fuse/mount_daemon.py", "_fuse/mount_start.py", "_fuse/options.py", "_fuse/fusermount.py")


def _definitions(kinds: tuple[type, ...]) -> Iterator[tuple[str, str, int]]:
    """(module path under the package, qualified name, lines) of every definition of ``kinds``."""
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        yield from _walk(module, tree, "", kinds)


def _walk(module: str, node: ast.AST, prefix: str, kinds: tuple[type, ...]) -> Iterator[tuple[str, str, int]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + child.name
            if isinstance(child, kinds):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                assert child.end_lineno is not None
                yield module, name, child.end_lineno - first + 1
            yield from _walk(module, child, name + ".", kinds)
        else:
            yield from _walk(module, child, prefix, kinds)


def on_request_path(module: str) -> bool:
    return module.startswith(REQUEST_PATH) and not module.startswith(NOT_REQUEST_PATH)


def test_no_class_over_the_limit() -> None:
    over = [f"{m}:{name} ({n} lines)" for m, name, n in _definitions((ast.ClassDef,)) if n > CLASS_LINES]
    assert not over, f"classes over {CLASS_LINES} lines: {over}; split them along their seams"


def test_no_function_on_the_request_path_over_the_limit() -> None:
    over = [f"{m}:{name} ({n} lines)" for m, name, n in _definitions((ast.FunctionDef, ast.AsyncFunctionDef))
            if on_request_path(m) and n > FUNCTION_LINES]
    assert not over, f"functions on the request path over {FUNCTION_LINES} lines: {over}"


def test_the_request_path_is_where_it_is_said_to_be() -> None:
    """Each module named in REQUEST_PATH is there (a move must take its name along), and the
    measure sees what it is meant to: Session.compound's loop and the FUSE channel's handlers."""
    for where in REQUEST_PATH:
        assert (PACKAGE / where).exists(), f"{where} is gone: say where the request path went"
    measured = {(m, name) for m, name, _ in _definitions((ast.FunctionDef, ast.AsyncFunctionDef))
                if on_request_path(m)}
    assert ("_session/session.py", "Session.compound") in measured
    assert ("_transport/tcp.py", "TcpTransport._receive_spliced") in measured
    assert not any(m == "_fuse/mount_daemon.py" for m, _ in measured)
