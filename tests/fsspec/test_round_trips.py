"""One round trip where one is enough, counted by the client's own statistics (``stats()``, what
``pynfsrdma stats`` shows): a small file read or written whole, a range of a file not open and an
``info`` are one COMPOUND each, and a read to the end sends no READ past the end."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any

import fsspec
import pytest
from fsspec_support import counted

import pynfsrdma
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def test_small_files_are_one_compound_each(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root, local = export_path.remote, export_path.local
    (local / "old").write_bytes(b"o" * 100)
    client = fs.client

    def count(call: Callable[[], Any]) -> tuple[Any, int, dict[str, int]]:
        # (the directory's file handle known as each call starts: it ages out of the cache in 3 s)
        return counted(client, call, prime=lambda: fs.info(f"{root}/old"))

    _, rpcs, ops = count(lambda: fs.pipe_file(f"{root}/small", b"s" * 100))
    assert rpcs == 1 and ops["OPEN"] == ops["WRITE"] == ops["CLOSE"] == 1 and "COMMIT" not in ops
    assert (local / "small").read_bytes() == b"s" * 100

    data, rpcs, ops = count(lambda: fs.cat_file(f"{root}/small"))
    assert data == b"s" * 100 and rpcs == 1 and ops["READ"] == 1 and "OPEN" not in ops

    data, rpcs, ops = count(lambda: fs.cat_file(f"{root}/old", start=10, end=14))
    assert data == b"oooo" and rpcs == 1 and ops["READ"] == 1

    info, rpcs, _ = count(lambda: fs.info(f"{root}/small"))
    assert info["size"] == 100 and rpcs == 1

    _, rpcs, ops = count(lambda: fs.pipe_file(f"{root}/new", b"n" * 10, mode="create"))
    assert rpcs == 1 and ops["OPEN"] == 1
    with pytest.raises(FileExistsError) as caught:
        fs.pipe_file(f"{root}/new", b"again", mode="create")
    assert caught.value.errno == errno.EEXIST and (local / "new").read_bytes() == b"n" * 10
    assert fs.cat_file(f"{root}/new", start=-3) == b"nnn"
    assert fs.cat_file(f"{root}/new", start=8, end=100) == b"nn"
    assert fs.cat_file(f"{root}/new", start=20) == b""


def test_a_read_to_the_end_sends_no_read_past_it(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root, local = export_path.remote, export_path.local
    client = fs.client
    maxread = client.client.nfs.maxread
    for size in (100, maxread, maxread + 1, 5 * maxread + 7):
        data = os.urandom(size)
        name = f"{root}/f{size}"
        (local / f"f{size}").write_bytes(data)
        fs.info(name)  # (the directory's file handle is known from here on)
        got, rpcs, ops = counted(client, lambda: fs.cat_file(name))  # noqa: B023
        assert got == data
        assert ops["READ"] == -(-size // maxread), (size, ops)  # to the size the first COMPOUND learned
        assert rpcs <= ops["READ"] + 1  # (+1: the directory looked up again, its cached handle aged out)
        (local / f"l{size}").symlink_to(f"f{size}")
        assert fs.cat_file(f"{root}/l{size}") == data  # a link takes the longer way, to the same bytes


def test_the_path_api_has_them_too(ganesha: Ganesha, export_path: ExportPath) -> None:
    with pynfsrdma.connect(ganesha.url, uid=0, gid=0) as nfs:
        d = export_path.remote.removeprefix(ganesha.pseudo_path)
        nfs.makedirs(d, exist_ok=True)
        _, rpcs, _ = counted(nfs, lambda: nfs.write_file(f"{d}/w", b"written whole"), prime=lambda: nfs.listdir(d))
        assert rpcs == 1
        big = os.urandom(3 * nfs.client.nfs.maxwrite + 1)  # larger than one WRITE: the engine's way
        nfs.write_file(f"{d}/big", big)
        assert (export_path.local / "big").read_bytes() == big
        got, rpcs, _ = counted(nfs, lambda: nfs.read_bytes(f"{d}/w", 8), prime=lambda: nfs.listdir(d))
        assert got == b"whole" and rpcs == 1
        assert nfs.read_bytes(f"{d}/big", 5, 10) == big[5:15] and nfs.read_bytes(f"{d}/big") == big
        with pytest.raises(FileExistsError):
            nfs.write_file(f"{d}/big", b"", exclusive=True)
        with pytest.raises(IsADirectoryError):
            nfs.read_bytes(d)
        with pytest.raises(FileNotFoundError):
            nfs.read_bytes(f"{d}/nope")
        with pytest.raises(ValueError, match="negative"):
            nfs.read_bytes(f"{d}/w", -1)
