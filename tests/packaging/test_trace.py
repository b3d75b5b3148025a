"""The RPC trace and the logging set-up (sans-I/O: the trace writes to a StringIO)."""

from __future__ import annotations

import io
import logging
import re

import pytest

from pynfsrdma import _trace as trace
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.types import PUTFH4args, READ4args, stateid4


def test_line_names_xid_path_status_duration_and_ops() -> None:
    out = io.StringIO()
    t = trace.RpcTrace(out, clock=lambda: "T")
    t.rpc_done(0x1234ABCD, "127.0.0.1:2049", [c.OP_SEQUENCE, c.OP_PUTFH, c.OP_READ], c.NFS4_OK, 0.0004125)
    assert (
        out.getvalue()
        == "T xid=0x1234abcd path=127.0.0.1:2049 status=NFS4_OK 0.000412s SEQUENCE,PUTFH,READ\n"
    )
    assert t.lines == 1


def test_ops_may_be_operation_objects_and_errors_are_named() -> None:
    out = io.StringIO()
    t = trace.RpcTrace(out, clock=lambda: "T")
    ops = [PUTFH4args(b"\x01\x02"), READ4args(stateid4(0, bytes(12)), 0, 4096)]
    t.rpc_done(7, "10.0.0.1:2049", ops, c.NFS4ERR_NOENT, 1.5)
    t.rpc_failed(8, "10.0.0.2:2049", [c.OP_SEQUENCE, c.OP_GETATTR], "timed out", 60.0)
    lines = out.getvalue().splitlines()
    assert lines[0] == "T xid=0x00000007 path=10.0.0.1:2049 status=NFS4ERR_NOENT 1.500000s PUTFH,READ"
    assert lines[1] == "T xid=0x00000008 path=10.0.0.2:2049 error='timed out' 60.000000s SEQUENCE,GETATTR"


def test_unknown_numbers_are_printed_as_numbers() -> None:
    out = io.StringIO()
    trace.RpcTrace(out, clock=lambda: "T").rpc_done(1, "h:1", [9999], 77777, 0.0)
    assert out.getvalue() == "T xid=0x00000001 path=h:1 status=77777 0.000000s OP_9999\n"


def test_every_op_number_has_its_rfc_name() -> None:
    for op in c.nfs_opnum4:
        assert trace.op_name(int(op)) == op.name.removeprefix("OP_")


def test_module_hook_is_silent_until_enabled_and_writes_to_the_file(tmp_path) -> None:
    path = tmp_path / "rpc.trace"
    trace.rpc_done(1, "127.0.0.1:2049", [c.OP_SEQUENCE], c.NFS4_OK, 0.001)  # off: nothing, no error
    assert trace.tracer() is None
    t = trace.enable_rpc_trace(str(path))
    try:
        trace.rpc_done(2, "127.0.0.1:2049", [c.OP_SEQUENCE, c.OP_GETATTR], c.NFS4_OK, 0.001)
        trace.rpc_failed(3, "127.0.0.1:2049", [c.OP_SEQUENCE], "connection lost", 0.5)
        assert t.lines == 2
    finally:
        trace.disable_rpc_trace()
    trace.rpc_done(4, "127.0.0.1:2049", [c.OP_SEQUENCE], c.NFS4_OK, 0.001)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6} xid=0x00000002 path=127\.0\.0\.1:2049 status=NFS4_OK "
        r"0\.001000s SEQUENCE,GETATTR",
        lines[0],
    )
    assert "xid=0x00000003" in lines[1] and "error='connection lost'" in lines[1]


@pytest.mark.parametrize(
    ("verbosity", "level"),
    [
        (0, logging.WARNING),
        (1, logging.INFO),
        (2, logging.DEBUG),
        (5, logging.DEBUG),
        ("error", logging.ERROR),
    ],
)
def test_levels(verbosity: int | str, level: int) -> None:
    assert trace.level_for(verbosity) == level


def test_bad_level_name() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        trace.level_for("chatty")


def test_configure_logging_to_a_file_replaces_its_handler(tmp_path) -> None:
    logger = logging.getLogger("pynfsrdma")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        trace.configure_logging(0, str(tmp_path / "a.log"))
        h = trace.configure_logging("info", str(tmp_path / "b.log"))
        ours = [x for x in logger.handlers if getattr(x, "_pynfsrdma", False)]
        assert ours == [h]
        logging.getLogger("pynfsrdma._session").debug("not shown")
        logging.getLogger("pynfsrdma._session").info("path %s is up again", "127.0.0.2:2049")
        h.flush()
        assert (tmp_path / "a.log").read_text() == ""
        text = (tmp_path / "b.log").read_text()
        assert "INFO pynfsrdma._session: path 127.0.0.2:2049 is up again" in text
        assert "not shown" not in text
    finally:
        for x in list(logger.handlers):
            if getattr(x, "_pynfsrdma", False):
                logger.removeHandler(x)
                x.close()
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
