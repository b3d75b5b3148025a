"""The FUSE kernel protocol (``pynfsrdma/_fuse/kernel/``) is a package of its own, sans-I/O: its
modules import one another and the standard library, nothing else of the client."""

from __future__ import annotations

from test_layers import MODULES

KERNEL = "pynfsrdma._fuse.kernel"


def test_the_kernel_package_imports_nothing_of_the_client_outside_it() -> None:
    wrong = sorted({
        f"{mod.path}:{line}: {mod.name} imports {target.rpartition(':')[2]}"
        for mod in MODULES.values() if mod.name == KERNEL or mod.name.startswith(KERNEL + ".")
        for target, line in mod.imports
        if not (target.rpartition(":")[2] + ".").startswith(KERNEL + ".")
    })
    assert MODULES[KERNEL + ".replies"].imports, "no imports read"
    assert not wrong, "\n".join(wrong)
