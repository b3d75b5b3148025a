"""The control socket: its protocol without I/O, its names, and the listener over a real unix socket."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from pynfsrdma import _control_socket as control_socket
from pynfsrdma._control_socket import CommandError, ControlError, ControlProtocol, NotAMount, decode_reply


def test_protocol_answers_known_commands() -> None:
    proto = ControlProtocol({"stats": lambda: {"rpc": {"calls": 3}}})
    assert json.loads(proto.handle(b'{"cmd": "stats"}')) == {"ok": True, "result": {"rpc": {"calls": 3}}}
    assert decode_reply(proto.handle(b'{"cmd": "ping"}')) == "pong"
    assert proto.handle(b'{"cmd": "ping"}').endswith(b"\n")


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", '"cmd"'),
        (b'{"command": "stats"}', '"cmd"'),
        (b'{"cmd": "reboot"}', "unknown command 'reboot'"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_protocol_refuses_bad_requests(line: bytes, error: str) -> None:
    rep = json.loads(ControlProtocol({}).handle(line))
    assert rep["ok"] is False
    assert error in rep["error"]


def test_a_failing_report_is_an_error_reply() -> None:
    def broken() -> object:
        raise RuntimeError("no session")

    with pytest.raises(ControlError, match="stats failed: no session"):
        decode_reply(ControlProtocol({"stats": broken}).handle(b'{"cmd":"stats"}'))


def test_a_command_takes_its_arguments_and_may_refuse_them() -> None:
    def remount(options: list[str], apply: bool = False) -> dict[str, object]:
        if "port=1" in options:
            raise CommandError("a remount cannot change the option port")
        return {"options": options, "apply": apply}

    proto = ControlProtocol({"remount": remount})
    line = b'{"cmd": "remount", "args": {"options": ["ro"], "apply": true}}'
    assert decode_reply(proto.handle(line)) == {"options": ["ro"], "apply": True}
    assert json.loads(proto.handle(b'{"cmd": "remount", "args": {"options": ["port=1"]}}')) == {
        "ok": False, "error": "a remount cannot change the option port"}
    assert json.loads(proto.handle(b'{"cmd": "remount", "args": [1]}')) == {"ok": False, "error": '"args" is an object'}


def test_socket_names() -> None:
    assert control_socket.socket_path("/mnt/data", "/run/x") == "/run/x/mnt-data.sock"
    assert control_socket.socket_path("/mnt/my-data dir/", "/run/x") == "/run/x/mnt-my\\x2ddata\\x20dir.sock"
    assert control_socket.socket_path("/mnt/a/../b", "/run/x") == "/run/x/mnt-b.sock"
    assert control_socket.socket_path("/mnt/a", "/d") != control_socket.socket_path("/mnt-a", "/d")  # '-' is escaped
    long = "/mnt/" + "x" * 200
    p = control_socket.socket_path(long, "/run/pynfsrdma/mounts")
    assert len(p) <= control_socket.SUN_PATH_MAX
    assert p != control_socket.socket_path(long + "y", "/run/pynfsrdma/mounts")
    assert control_socket.socket_dir(0) == control_socket.ROOT_DIR


def test_not_a_mount(tmp_path: Path) -> None:
    assert control_socket.mount_type(str(tmp_path)) is None
    with pytest.raises(NotAMount, match="not a pynfsrdma mount"):
        control_socket.query(str(tmp_path), "stats")
    assert control_socket.mount_type("/proc") == "proc"
    with pytest.raises(NotAMount, match="it is a proc mount"):
        control_socket.query("/proc", "stats")


@pytest.fixture
def sock_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="pnr-ctl-")  # short: unix socket paths are limited
    yield os.path.join(d, "mounts")
    shutil.rmtree(d)


async def _ask(path: str, lines: list[bytes]) -> list[object]:
    s = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await s.connect(path)
    stream = trio.SocketStream(s)
    async with stream:
        await stream.send_all(b"".join(lines))
        buf = b""
        while buf.count(b"\n") < len(lines):
            data = await stream.receive_some(65536)
            assert data, "the server closed the connection early"
            buf += data
    return [json.loads(x) for x in buf.splitlines()]


async def test_listener_over_a_unix_socket(sock_dir: str) -> None:
    calls = []

    def paths() -> list[dict[str, str]]:
        calls.append(1)
        return [{"address": "127.0.0.1:2049", "state": "up"}]

    path = os.path.join(sock_dir, "mnt-x.sock")
    Path(sock_dir).mkdir(mode=0o755)
    Path(path).write_text("left by a killed daemon")
    async with trio.open_nursery() as nursery:
        got = await nursery.start(control_socket.serve, path, {"paths": paths})
        assert got == path
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(sock_dir).st_mode) == 0o700
        # several requests on one connection, answered in order; two clients at once
        replies = await _ask(path, [b'{"cmd":"paths"}\n', b'{"cmd":"nope"}\n', b'{"cmd":"ping"}\n'])
        assert replies[0] == {"ok": True, "result": [{"address": "127.0.0.1:2049", "state": "up"}]}
        assert replies[1]["ok"] is False  # type: ignore[index]
        assert replies[2] == {"ok": True, "result": "pong"}
        async with trio.open_nursery() as n2:
            for _ in range(3):
                n2.start_soon(_ask, path, [b'{"cmd":"paths"}\n'])
        assert len(calls) == 4
        nursery.cancel_scope.cancel()
    assert not os.path.exists(path)


async def test_request_too_long(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "m.sock")
    async with trio.open_nursery() as nursery:
        await nursery.start(control_socket.serve, path, {})
        replies = await _ask(path, [b"x" * (control_socket.MAX_REQUEST * 3)])
        assert replies == [{"ok": False, "error": "request too long"}]
        nursery.cancel_scope.cancel()
