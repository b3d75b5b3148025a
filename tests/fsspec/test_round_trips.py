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
    assert "GETATTR" not in ops  # (nobody needs the attributes after the write)
    assert (local / "small").read_bytes() == b"s" * 100

    data, rpcs, ops = count(lambda: fs.cat_file(f"{root}/small"))
    assert data == b"s" * 100 and rpcs == 1 and ops["READ"] == 1 and "OPEN" not in ops

    data, rpcs, ops = count(lambda: fs.cat_file(f"{root}/old", start=10, end=14))
    assert data == b"oooo" and rpcs == 1 and ops["READ"] == 1
    assert "GETATTR" not in ops and "GETFH" not in ops  # (a range needs neither the size nor the handle)

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


def test_each_call_hands_over_to_the_clients_loop_once(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    """A blocking call waits for the client's loop in another thread: each fsspec call does so once,
    the calls it makes of the client carried out together on the loop (a link's info, a read from
    the end, created, touch, cp_file), and a file opened to read reads its ranges without an open,
    one COMPOUND each, as cat_file does: no OPEN, no CLOSE."""
    root, local = export_path.remote, export_path.local
    (local / "f").write_bytes(b"0123456789")
    (local / "link").symlink_to("f")
    loop = fs.client._loop

    def handed(call: Callable[[], Any]) -> tuple[Any, int]:
        fs.info(f"{root}/f")  # (the directory's handle known)
        before = loop.calls_handed
        out = call()
        return out, loop.calls_handed - before

    info, n = handed(lambda: fs.info(f"{root}/link"))
    assert (info["size"], info["islink"], n) == (10, True, 1)
    assert handed(lambda: fs.cat_file(f"{root}/f", start=-4)) == (b"6789", 1)
    assert handed(lambda: fs.cat_file(f"{root}/f", start=2, end=-6)) == (b"23", 1)
    created, n = handed(lambda: fs.created(f"{root}/f"))
    assert n == 1 and created.year >= 2000
    assert handed(lambda: fs.touch(f"{root}/f", truncate=False)) == (None, 1)
    assert handed(lambda: fs.touch(f"{root}/new", truncate=False)) == (None, 1)
    assert (local / "new").read_bytes() == b""
    assert handed(lambda: fs.cp_file(f"{root}/f", f"{root}/copy")) == (None, 1)
    assert (local / "copy").read_bytes() == b"0123456789"

    def read_opened() -> bytes:
        with fs.open(f"{root}/f", "rb") as f:
            f.seek(3)
            return f.read(4)

    data, n = handed(read_opened)
    assert (data, n) == (b"3456", 2)  # its info when opened, its range
    data, rpcs, ops = counted(fs.client, read_opened, prime=lambda: fs.info(f"{root}/f"))
    assert data == b"3456" and rpcs == 2 and ops["READ"] == 1 and "OPEN" not in ops and "CLOSE" not in ops
    with fs.open(f"{root}/f", "rb") as f:  # the name gone after the open: the read says so
        fs.rm_file(f"{root}/f")
        with pytest.raises(FileNotFoundError) as gone:
            f.read()
    assert gone.value.errno == errno.ENOENT


def test_a_whole_read_asks_for_the_size_alone(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    """A small file read whole (LOOKUP, GETFH, GETATTR, READ) asks for its size and nothing more of
    its attributes: its reply, less the data, is smaller than an info's (LOOKUP, GETFH, GETATTR of a
    stat's worth), by far more than the READ's own few bytes."""
    root, local = export_path.remote, export_path.local
    (local / "f").write_bytes(b"d" * 100)
    client = fs.client

    def received(call: Callable[[], Any]) -> tuple[Any, int]:
        fs.info(f"{root}/f")  # (the directory's handle known)
        before = client.stats()["rpc"]["bytes_received"]
        out = call()
        return out, client.stats()["rpc"]["bytes_received"] - before

    info, info_bytes = received(lambda: fs.info(f"{root}/f"))
    data, read_bytes = received(lambda: fs.cat_file(f"{root}/f"))
    assert info["size"] == 100 and data == b"d" * 100
    assert read_bytes - len(data) < info_bytes - 64, (read_bytes, info_bytes)



def test_a_file_opened_reads_the_file_it_opened(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    """The atomic update: a new version written under a temporary name and RENAMEd over the file. A
    reader that opened the file before never reads a mix of the two: its ranges go by the file
    handle its first range learned, to the old file while the server still has it (here another
    link keeps it), FileNotFoundError (ENOENT, with the path) once the server has let it go (no
    open is kept: nothing holds it there). Each range after the first is one COMPOUND and one
    hand-over to the client's loop: no OPEN, no CLOSE, no LOOKUP."""
    root, local = export_path.remote, export_path.local
    old, new = b"o" * 8192, b"N" * 8192
    (local / "data").write_bytes(old)
    loop = fs.client._loop

    def replace(version: bytes) -> None:
        fs.pipe_file(f"{root}/.data.new", version)
        fs.mv(f"{root}/.data.new", f"{root}/data")
        assert (local / "data").read_bytes() == version

    with fs.open(f"{root}/data", "rb", block_size=4096, cache_type="none") as f:
        assert f.read(4096) == old[:4096]
        fs.client.link(f"{root}/data", f"{root}/kept")  # (the old version stays on the server)
        replace(new)
        before = loop.calls_handed
        data, rpcs, ops = counted(fs.client, lambda: f.read(2048))
        assert data == old[4096:6144]  # (by name: the new file's bytes, "N" * 2048)
        assert (rpcs, loop.calls_handed - before) == (1, 1)
        assert ops["READ"] == 1 and not {"LOOKUP", "OPEN", "CLOSE"} & set(ops)
        assert f.read() == old[6144:]
    (local / "link").symlink_to("kept")
    with fs.open(f"{root}/link", "rb", block_size=4096, cache_type="none") as f:  # a link: its target's handle
        assert f.read(4096) == old[:4096]
        data, rpcs, ops = counted(fs.client, lambda: f.read(4096))
        assert data == old[4096:] and rpcs == 1 and "LOOKUP" not in ops

    with fs.open(f"{root}/data", "rb", block_size=4096, cache_type="none") as f:
        assert f.read(4096) == new[:4096]  # (opened again: the name's file now)
        replace(b"3" * 8192)  # its only name goes to another file: the server lets it go
        with pytest.raises(FileNotFoundError) as gone:
            f.read(4096)  # (by name: the third version's bytes)
    assert gone.value.errno == errno.ENOENT and gone.value.filename.endswith("/data")
    assert "No such file or directory" in str(gone.value)

    with fs.open(f"{root}/data", "rb", block_size=4096, cache_type="none") as f:
        assert f.read(4096) == b"3" * 4096
        fs.rm_file(f"{root}/data")  # removed after its first range: the same answer
        with pytest.raises(FileNotFoundError) as gone:
            f.read(4096)
    assert gone.value.errno == errno.ENOENT and gone.value.filename.endswith("/data")


def test_a_file_opened_reads_every_range_as_the_file_has_it(fs: fsspec.AbstractFileSystem,
                                                             export_path: ExportPath) -> None:
    """The ranges of a file opened "rb" after its first: one READ by the handle each when they fit in
    one (one RPC), two or more when larger; at, across and past the end of the file fewer bytes or
    none, as a local file reads."""
    root, local = export_path.remote, export_path.local
    maxread = fs.client.client.nfs.maxread
    data = os.urandom(2 * maxread + 100)
    (local / "f").write_bytes(data)
    ranges = [(0, 10), (5, 4096), (maxread - 3, 7), (len(data) - 50, 50), (len(data) - 50, 4096),
              (len(data), 10), (len(data) + 100, 10), (3, maxread + 10), (17, 0), (maxread, maxread)]
    with fs.open(f"{root}/f", "rb", block_size=4096, cache_type="none") as f:
        assert f.read(3) == data[:3]  # (the first range: the handle learned)
        for start, count in ranges:
            f.seek(start)
            got, rpcs, ops = counted(fs.client, lambda: f.read(count))  # noqa: B023
            want = data[start:start + count]
            assert got == want, (start, count)
            if 0 < count <= maxread and start < len(data):
                assert (rpcs, ops["READ"]) == (1, 1), (start, count)
            assert "LOOKUP" not in ops and "OPEN" not in ops
