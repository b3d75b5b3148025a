"""The FUSE kernel protocol (``pynfsrdma/_fuse/kernel/``) is a package of its own, sans-I/O: its
modules import one another and the standard library, nothing else of the client. Its opcodes are one
table (``requests.OPCODES``, one record per opcode): an opcode added to the ABI, the table or the
channel alone shows up here."""

from __future__ import annotations

import inspect
import re

from test_layers import MODULES, PACKAGE

from pynfsrdma._fuse.devfuse import HANDLERS, NativeChannel
from pynfsrdma._fuse.kernel.requests import OPCODES
from pynfsrdma._fuse.lowlevel import Operations

KERNEL = "pynfsrdma._fuse.kernel"
ABI = PACKAGE / "_fuse" / "kernel" / "abi.py"
# the opcodes the channel answers itself (or, unanswered, keeps track of): they ask no operation
CHANNELS_OWN = {"INIT", "DESTROY", "FORGET", "BATCH_FORGET", "INTERRUPT"}


def test_the_kernel_package_imports_nothing_of_the_client_outside_it() -> None:
    wrong = sorted({
        f"{mod.path}:{line}: {mod.name} imports {target.rpartition(':')[2]}"
        for mod in MODULES.values() if mod.name == KERNEL or mod.name.startswith(KERNEL + ".")
        for target, line in mod.imports
        if not (target.rpartition(":")[2] + ".").startswith(KERNEL + ".")
    })
    assert MODULES[KERNEL + ".replies"].imports, "no imports read"
    assert not wrong, "\n".join(wrong)


def _abi_opcodes(text: str) -> dict[int, str]:
    """The opcodes the section ``# -- opcodes`` of abi.py's ``text`` defines, by number."""
    section = text.split("# -- opcodes", 1)[1].split("\n# --", 1)[0]
    return {int(n): name for name, n in re.findall(r"^FUSE_(\w+) = (\d+)\b", section, re.M)}


def _table_mismatch(abi_opcodes: dict[int, str]) -> list[str]:
    names = {n: o.name for n, o in OPCODES.items()}
    wrong = [f"{n} is {o.name} in the table, numbered {o.number}" for n, o in OPCODES.items() if n != o.number]
    wrong += [f"FUSE_{name} ({n}) has no record in OPCODES" for n, name in abi_opcodes.items() if n not in names]
    wrong += [f"the record {names[n]} ({n}) is no opcode of abi.py" for n in names if n not in abi_opcodes]
    wrong += [f"{n}: FUSE_{name} in abi.py, {names[n]} in OPCODES" for n, name in abi_opcodes.items()
              if n in names and names[n] != name]
    return wrong


def test_every_opcode_of_the_abi_has_one_record_of_its_name() -> None:
    opcodes = _abi_opcodes(ABI.read_text())
    assert len(opcodes) > 40, "the opcodes of abi.py were not read"
    assert _table_mismatch(opcodes) == []


def test_an_opcode_added_to_the_abi_alone_is_seen() -> None:
    text = ABI.read_text().replace("FUSE_COPY_FILE_RANGE_64 = 53\n", "FUSE_COPY_FILE_RANGE_64 = 53\nFUSE_NEW = 54\n")
    assert _table_mismatch(_abi_opcodes(text)) == ["FUSE_NEW (54) has no record in OPCODES"]


def test_each_operation_has_its_method_in_operations_and_its_handler_in_the_channel() -> None:
    wrong = []
    for o in OPCODES.values():
        if o.operation is None:
            continue
        if not inspect.iscoroutinefunction(getattr(Operations, o.operation, None)):
            wrong.append(f"{o.name}: Operations has no {o.operation}()")
        handler = getattr(NativeChannel, o.operation, None)
        if not inspect.iscoroutinefunction(handler) or HANDLERS.get(o.number) is not handler:
            wrong.append(f"{o.name}: the channel has no handler {o.operation}()")
    assert not wrong, "\n".join(wrong)
    assert set(HANDLERS) == {o.number for o in OPCODES.values() if o.operation is not None}


def test_every_handler_of_the_channel_is_named_by_the_table() -> None:
    handlers = {name for name, f in vars(NativeChannel).items()
                if inspect.iscoroutinefunction(f) and "r" in inspect.signature(f).parameters}
    assert len(handlers) > 30, "the channel's handlers were not found"
    assert handlers == {o.operation for o in OPCODES.values() if o.operation is not None}


def test_an_opcode_decoded_without_an_operation_is_one_the_channel_answers_itself() -> None:
    own = {o.name for o in OPCODES.values() if o.decoder is not None and o.operation is None}
    assert own == CHANNELS_OWN
    assert {o.name for o in OPCODES.values() if not o.answered} == {"FORGET", "BATCH_FORGET", "INTERRUPT"}


def test_the_parser_of_abi_reads_its_section_only() -> None:
    text = "FUSE_X = 9\n# -- opcodes (enum)\nFUSE_A = 1\nFUSE_B = 2  # why\n\n# -- flags\nFUSE_C = 3\n"
    assert _abi_opcodes(text) == {1: "A", 2: "B"}
