"""fsspec's transactions, exclusive creation, read-write opens and creation times, against the testbed:
what a transaction writes is seen whole at its end or not at all, and ``mode="create"`` is one
exclusive OPEN on the server (no window between a check and the write)."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import fsspec
import pytest

from pynfsrdma._testbed.ganesha import ExportPath


def _names(d: Path) -> list[str]:
    return sorted(os.listdir(d))


def test_an_aborted_transaction_leaves_nothing_on_the_server(fs: fsspec.AbstractFileSystem,
                                                             export_path: ExportPath) -> None:
    root, local = export_path.remote, export_path.local
    (local / "kept").write_bytes(b"as it was")
    big = os.urandom(3 << 20)
    with pytest.raises(RuntimeError, match="the job failed"), fs.transaction:
        fs.pipe_file(f"{root}/new", b"never seen")
        fs.pipe_file(f"{root}/kept", b"overwritten?")
        with fs.open(f"{root}/big", "wb", block_size=1 << 20) as f:  # blocks sent as they fill
            f.write(big)
        with fs.open(f"{root}/kept", "ab") as f:
            f.write(b" and more")
        # nothing is seen under its own name while the transaction runs
        assert not (local / "new").exists() and not (local / "big").exists()
        assert (local / "kept").read_bytes() == b"as it was"
        raise RuntimeError("the job failed")
    assert _names(local) == ["kept"]  # no staged file left behind either
    assert (local / "kept").read_bytes() == b"as it was"
    assert not fs.in_transaction


def test_a_committed_transaction_appears_whole(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root, local = export_path.remote, export_path.local
    (local / "kept").write_bytes(b"as it was")
    big = os.urandom(3 << 20 | 5)
    with fs.transaction:
        fs.pipe({f"{root}/a": b"first", f"{root}/b": b"second"})
        with fs.open(f"{root}/big", "wb", block_size=1 << 20) as f:
            for i in range(0, len(big), 1 << 19):
                f.write(big[i : i + (1 << 19)])
        with fs.open(f"{root}/kept", "ab") as f:
            f.write(b", and more")
        assert not (local / "big").exists() and len(_names(local)) == 5  # kept + 4 staged files
    assert _names(local) == ["a", "b", "big", "kept"]
    assert (local / "a").read_bytes() == b"first" and (local / "b").read_bytes() == b"second"
    assert (local / "big").read_bytes() == big
    assert (local / "kept").read_bytes() == b"as it was, and more"
    fs.start_transaction()  # (fsspec's other way to run one)
    fs.pipe_file(f"{root}/c", b"third")
    assert not (local / "c").exists()
    fs.end_transaction()
    assert (local / "c").read_bytes() == b"third" and not fs.in_transaction


def test_an_exclusive_file_of_a_transaction_fails_if_the_name_was_taken_meanwhile(
    fs: fsspec.AbstractFileSystem, export_path: ExportPath
) -> None:
    root, local = export_path.remote, export_path.local
    with pytest.raises(FileExistsError) as caught, fs.transaction:
        fs.pipe_file(f"{root}/x", b"ours", mode="create")
        (local / "x").write_bytes(b"theirs")  # somebody else creates the name before the end
    assert caught.value.errno == errno.EEXIST
    assert _names(local) == ["x"] and (local / "x").read_bytes() == b"theirs"


def test_create_mode_is_one_exclusive_open(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root, local = export_path.remote, export_path.local
    (local / "there").write_bytes(b"first")
    with pytest.raises(FileExistsError) as caught:
        fs.pipe_file(f"{root}/there", b"second", mode="create")
    assert caught.value.errno == errno.EEXIST
    assert (local / "there").read_bytes() == b"first"
    with pytest.raises(FileExistsError) as caught:
        fs.open(f"{root}/there", "xb")
    assert caught.value.errno == errno.EEXIST
    # writers racing for the same names: each name is created by exactly one of them, whole
    names = [f"{root}/race-{i}" for i in range(30)]
    won: list[tuple[str, bytes]] = []
    lost: list[BaseException] = []

    def writer(tag: bytes) -> None:
        for n in names:
            try:
                fs.pipe_file(n, tag * 1000, mode="create")
                won.append((n, tag))
            except FileExistsError as e:
                lost.append(e)

    threads = [threading.Thread(target=writer, args=(bytes([65 + k]),)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(n for n, _ in won) == sorted(names)
    assert len(lost) == 3 * len(names) and all(e.errno == errno.EEXIST for e in lost)
    for n, tag in won:
        assert (local / n.rsplit("/", 1)[1]).read_bytes() == tag * 1000


def test_read_write_open_and_creation_time(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root, local = export_path.remote, export_path.local
    (local / "f").write_bytes(b"0123456789")
    with fs.open(f"{root}/f", "rb+") as f:
        f.seek(3)
        f.write(b"abc")
        f.seek(0)
        assert f.read() == b"012abc6789"
    assert (local / "f").read_bytes() == b"012abc6789"
    # NFS-Ganesha's VFS back end keeps no time_create: the change time stands in, as fsspec's
    # local file system reports it
    assert fs.created(f"{root}/f").timestamp() == pytest.approx((local / "f").stat().st_ctime)
    with pytest.raises(ValueError, match="cannot be staged in a transaction"), fs.transaction:
        fs.open(f"{root}/g", "wb+")
    assert not (local / "g").exists()
