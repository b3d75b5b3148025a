"""The blocking wrapper for plain scripts, and connecting by arguments instead of a URL."""

from __future__ import annotations

import errno

import pytest

from pynfsrdma.client.api import Client
from pynfsrdma.client.sync import connect
from pynfsrdma.errors import NFS4Error
from pynfsrdma.testbed import Ganesha
from pynfsrdma.testbed.ganesha import ExportPath


def test_blocking_client_for_plain_scripts(ganesha: Ganesha, export_path: ExportPath) -> None:
    with connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        nfs.mkdir("/d")
        with nfs.open("/d/f", "w") as f:
            f.write(b"hello ")
            f.write(b"world")
        with nfs.open("/d/f") as f:
            assert f.read() == b"hello world"
        assert nfs.listdir("/d") == ["f"]
        assert nfs.stat("/d/f").size == 11
        with pytest.raises(NFS4Error) as ei:
            nfs.stat("/nope")
        assert ei.value.errno == errno.ENOENT
    assert (export_path.local / "d" / "f").read_bytes() == b"hello world"


def test_blocking_connect_errors_reach_the_caller() -> None:
    with pytest.raises(OSError, match="refused"):
        connect("nfs://127.0.0.1:1/export", timeout=3)


async def test_connect_by_arguments(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(host=ganesha.host, port=ganesha.port, export=export_path.remote) as nfs:
        await nfs.write_file("/x", b"1")
        assert await nfs.listdir("/") == ["x"]
