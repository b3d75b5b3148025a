"""connect's options: one ConnectOptions for the blocking and the async connect, checked before
anything is sent; a bad one is a one-line error that names it."""

from __future__ import annotations

import inspect
import socket
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest
import trio

import pynfsrdma
from pynfsrdma import Client, URLError
from pynfsrdma._client.connect_options import ConnectOptions
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

BAD: list[tuple[dict[str, Any], str]] = [
    ({"rsize": 0}, "connect option rsize=0: a whole number 4096 or more"),
    ({"wsize": 1024}, "connect option wsize=1024: a whole number 4096 or more"),
    ({"wsize": "1M"}, "connect option wsize='1M': a whole number 4096 or more"),
    ({"timeout": 0}, "connect option timeout=0: a number of seconds above 0"),
    ({"timeo": -1.5}, "connect option timeo=-1.5: a number of seconds above 0"),
    ({"retrans": -1}, "connect option retrans=-1: a whole number 0 or more"),
    ({"hard": "yes"}, "connect option hard='yes': True or False"),
    ({"pnfs": 1}, "connect option pnfs=1: True or False"),
    ({"uid": -2}, "connect option uid=-2: a whole number 0 or more"),
    ({"groups": [10, "wheel"]}, "connect option groups='wheel': a whole number 0 or more"),
    ({"groups": "10"}, "connect option groups='10': a sequence of group ids"),
    ({"port": 70000}, "connect option port=70000: a whole number from 1 to 65535"),
    ({"sec": "krb9"}, "sec=krb9: unknown security flavour krb9"),
    ({"xprtsec": "tlz"}, "xprtsec=tlz: use one of none, tls, mtls"),
    ({"keytab": 5}, "connect option keytab=5: a string"),
]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A real socket that would see a connection: the bad options must never reach it."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        s.setblocking(False)
        yield s


def _nothing_came(s: socket.socket) -> bool:
    try:
        s.accept()[0].close()
    except BlockingIOError:
        return True
    return False


def _url(s: socket.socket) -> str:
    return f"nfs://127.0.0.1:{s.getsockname()[1]}/export"


@pytest.mark.parametrize(("bad", "message"), BAD, ids=[f"{k}-{i}" for i, (b, _) in enumerate(BAD) for k in b])
def test_a_bad_option_is_one_line_naming_it_and_nothing_is_sent(listener: socket.socket, bad: dict[str, Any],
                                                                 message: str) -> None:
    with pytest.raises(URLError) as blocking:
        pynfsrdma.connect(_url(listener), **bad)

    async def main() -> None:
        async with Client.connect(_url(listener), **bad):
            raise AssertionError("connected")

    with pytest.raises(URLError) as async_:
        trio.run(main)
    for e in (blocking.value, async_.value):
        assert str(e).startswith(message), str(e)
        assert "\n" not in str(e)
    assert str(blocking.value) == str(async_.value)
    assert _nothing_came(listener)


def test_a_bad_option_given_by_host_is_checked_the_same(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    with pytest.raises(URLError, match=r"^connect option proto='udp': tcp or rdma$"):
        pynfsrdma.connect(host="127.0.0.1", port=port, proto="udp")
    with pytest.raises(URLError, match=r"^connect needs a URL or a host$"):
        pynfsrdma.connect(port=port)
    assert _nothing_came(listener)


def test_an_unknown_keyword_is_a_type_error_naming_connect(listener: socket.socket) -> None:
    with pytest.raises(TypeError, match=r"^connect\(\) got an unexpected keyword argument 'rsiz'$"):
        pynfsrdma.connect(_url(listener), rsiz=4096)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^connect\(\) got an unexpected keyword argument 'nconnect'$"):
        Client.connect(_url(listener), nconnect=2)  # type: ignore[call-arg]
    assert _nothing_came(listener)


def test_fsspec_users_see_the_same_error(listener: socket.socket) -> None:
    with pytest.raises(URLError, match=r"^connect option rsize=0: a whole number 4096 or more$"):
        fs = fsspec.filesystem("nfs", host="127.0.0.1", port=listener.getsockname()[1], rsize=0,
                               skip_instance_cache=True)
        fs.ls("/")
    assert _nothing_came(listener)


def test_both_connects_show_the_options_own_parameters() -> None:
    """help(), IDEs and type checkers see each keyword with its default, written once: the options'."""
    options = inspect.signature(ConnectOptions).parameters
    assert list(inspect.signature(pynfsrdma.connect).parameters) == list(options)
    assert list(inspect.signature(Client.connect).parameters) == list(options)
    assert inspect.signature(pynfsrdma.connect).parameters["rsize"].default == 1 << 20
    assert "nfs_url" not in options and "flavors" not in options


def test_the_options_given_are_the_ones_the_session_uses(ganesha: Ganesha, export_path: ExportPath) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"
    (export_path.local / "f").write_bytes(b"x" * 300_000)
    with pynfsrdma.connect(url, rsize=65536, wsize=32768, timeo=7, retrans=1, hard=True, groups=[5, 6]) as nfs:
        cid = nfs.client.clientid
        assert (cid.options.rsize, cid.options.wsize) == (65536, 32768)
        assert (cid.policy.timeo, cid.policy.retrans, cid.policy.hard) == (7, 1, True)
        assert nfs.client.cred.gids == (5, 6)
        assert nfs.read_file("/f") == b"x" * 300_000

    async def main() -> None:
        async with Client.connect(host=ganesha.host, port=ganesha.port, export=export_path.remote, wsize=16384,
                                  uid=1234, gid=1234) as client:
            assert client.clientid.options.wsize == 16384
            assert (client.cred.uid, client.cred.gid, client.cred.gids) == (1234, 1234, ())
            assert (await client.stat("/f")).size == 300_000

    trio.run(main)


def test_groups_may_come_from_any_iterable_of_ids() -> None:
    assert ConnectOptions("nfs://127.0.0.1/export", groups=(g for g in (5, 6))).groups == (5, 6)
    assert ConnectOptions("nfs://127.0.0.1/export", groups=[7]).groups == (7,)
