"""``nfs://`` through fsspec as pandas, pyarrow and Dask users meet it: no import of ours, the usual
file-system calls, the usual errors, and a file system that crosses process boundaries."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


@pytest.fixture
def base(ganesha: Ganesha, export_path: ExportPath) -> str:
    return f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"


def test_the_nfs_protocol_is_known_to_fsspec_without_importing_us() -> None:
    code = "import fsspec, sys; cls = fsspec.get_filesystem_class('nfs'); print(cls.__module__, 'pynfsrdma' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["pynfsrdma.fsspec", "True"]


def test_listing_and_information(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root = export_path.remote
    (export_path.local / "d/sub").mkdir(parents=True)
    (export_path.local / "d/a.csv").write_text("abc")
    (export_path.local / "d/sub/b.csv").write_text("defg")
    (export_path.local / "d/link").symlink_to("a.csv")
    listing = {e["name"]: e for e in fs.ls(f"{root}/d", detail=True)}
    assert sorted(listing) == [f"{root}/d/a.csv", f"{root}/d/link", f"{root}/d/sub"]
    assert listing[f"{root}/d/a.csv"]["type"] == "file" and listing[f"{root}/d/a.csv"]["size"] == 3
    assert listing[f"{root}/d/sub"]["type"] == "directory"
    assert listing[f"{root}/d/link"]["islink"] and listing[f"{root}/d/link"]["size"] == 3
    assert sorted(fs.ls(f"{root}/d", detail=False)) == sorted(listing)
    info = fs.info(f"{root}/d/sub/b.csv")
    assert (info["type"], info["size"]) == ("file", 4)
    assert info["mtime_ns"] == (export_path.local / "d/sub/b.csv").stat().st_mtime_ns
    assert fs.exists(f"{root}/d/a.csv") and not fs.exists(f"{root}/d/nope")
    assert fs.isdir(f"{root}/d/sub") and fs.isfile(f"{root}/d/a.csv") and not fs.isfile(f"{root}/d/sub")
    assert fs.find(f"{root}/d") == [f"{root}/d/a.csv", f"{root}/d/link", f"{root}/d/sub/b.csv"]
    assert fs.glob(f"{root}/d/**/*.csv") == [f"{root}/d/a.csv", f"{root}/d/sub/b.csv"]
    walked = {top: (sorted(dirs), sorted(files)) for top, dirs, files in fs.walk(f"{root}/d")}
    assert walked == {f"{root}/d": (["sub"], ["a.csv", "link"]), f"{root}/d/sub": ([], ["b.csv"])}
    assert fs.modified(f"{root}/d/a.csv").timestamp() == pytest.approx((export_path.local / "d/a.csv").stat().st_mtime)
    before = fs.checksum(f"{root}/d/a.csv")
    fs.pipe_file(f"{root}/d/a.csv", b"changed")
    assert fs.checksum(f"{root}/d/a.csv") != before


def test_reading_and_writing_files_with_ranges(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root = export_path.remote
    data = os.urandom(20 << 20 | 999)
    with fs.open(f"{root}/big", "wb", block_size=5 << 20) as f:  # several blocks sent as they fill
        for i in range(0, len(data), 3 << 20):
            f.write(data[i : i + (3 << 20)])
    assert (export_path.local / "big").read_bytes() == data
    with fs.open(f"{root}/big", "rb") as f:
        f.seek(7 << 20)
        assert f.read(100) == data[7 << 20 : (7 << 20) + 100]
        assert f.size == len(data)
    assert fs.cat_file(f"{root}/big", start=10, end=20) == data[10:20]
    assert fs.cat_file(f"{root}/big", start=-5) == data[-5:]
    assert fs.cat_file(f"{root}/big") == data
    fs.pipe_file(f"{root}/small", b"hello")
    assert fs.cat(f"{root}/small") == b"hello"
    with fs.open(f"{root}/small", "ab") as f:
        f.write(b" world")
    assert (export_path.local / "small").read_bytes() == b"hello world"
    with pytest.raises(FileExistsError):
        fs.open(f"{root}/small", "xb")
    with fs.open(f"{root}/text.txt", "w", encoding="utf-8") as f:
        f.write("\u00e9t\u00e9\n")
    with fs.open(f"{root}/text.txt", "r", encoding="utf-8") as f:
        assert f.read() == "\u00e9t\u00e9\n"


def test_copy_move_remove_and_make(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root = export_path.remote
    fs.mkdir(f"{root}/a/b/c")
    assert (export_path.local / "a/b/c").is_dir()
    fs.makedirs(f"{root}/a/b/c", exist_ok=True)
    with pytest.raises(FileExistsError):
        fs.makedirs(f"{root}/a/b/c")
    fs.pipe_file(f"{root}/a/f", b"x" * 100_000)
    fs.cp_file(f"{root}/a/f", f"{root}/a/g")  # the server copies where it can (NFS-Ganesha cannot)
    assert (export_path.local / "a/g").read_bytes() == b"x" * 100_000
    fs.copy(f"{root}/a/b", f"{root}/copied", recursive=True)
    assert (export_path.local / "copied/c").is_dir()
    fs.mv(f"{root}/a/g", f"{root}/a/b/h")
    assert (export_path.local / "a/b/h").exists() and not (export_path.local / "a/g").exists()
    fs.touch(f"{root}/t")
    assert (export_path.local / "t").read_bytes() == b""
    fs.rm(f"{root}/t")
    with pytest.raises(IsADirectoryError):
        fs.rm(f"{root}/a")
    fs.rm(f"{root}/a", recursive=True)
    assert not (export_path.local / "a").exists()
    fs.rmdir(f"{root}/copied/c")
    assert not (export_path.local / "copied/c").exists()


def test_errors_are_the_standard_ones(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root = export_path.remote
    (export_path.local / "f").write_text("x")
    (export_path.local / "locked").mkdir(mode=0o700)
    with pytest.raises(FileNotFoundError):
        fs.info(f"{root}/nope")
    with pytest.raises(FileNotFoundError):
        fs.open(f"{root}/nope", "rb")
    with pytest.raises(NotADirectoryError):
        fs.ls(f"{root}/f/x")
    (export_path.local / "d").mkdir()
    (export_path.local / "d/x").write_text("")
    with pytest.raises(OSError, match="Directory not empty"):
        fs.rmdir(f"{root}/d")
    other = fsspec.filesystem("nfs", host=fs.storage_options["host"], port=fs.storage_options["port"],
                              uid=4321, gid=4321)
    with pytest.raises(PermissionError):
        other.pipe_file(f"{root}/locked/x", b"no")
    with pytest.raises(ValueError, match="unknown URL option: nconect"):
        fsspec.filesystem("nfs", host="127.0.0.1", nconect=2)


def test_it_pickles_without_sockets_and_connects_again_in_another_process(
    fs: fsspec.AbstractFileSystem, export_path: ExportPath, tmp_path: Path
) -> None:
    fs.pipe_file(f"{export_path.remote}/p", b"pickled")  # this process's client is connected
    blob = pickle.dumps(fs)
    assert b"socket" not in blob and len(blob) < 2000
    assert pickle.loads(blob).cat_file(f"{export_path.remote}/p") == b"pickled"
    (tmp_path / "fs.pickle").write_bytes(blob)
    code = (
        "import pickle, sys\n"
        "fs = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "sys.stdout.write(fs.cat_file(sys.argv[2]).decode())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "fs.pickle"), f"{export_path.remote}/p"],
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == "pickled"
    assert not any(isinstance(v, socket.socket) for v in vars(fs).values())


def test_a_closed_client_is_replaced_at_the_next_call(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    """The file system keeps its client at hand between calls, but not once it is closed: the next
    call connects again (as after the interpreter's exit handler closed it)."""
    (export_path.local / "c").write_bytes(b"again")
    first = fs.client
    assert fs.client is first
    first.close()
    assert fs.cat_file(f"{export_path.remote}/c") == b"again"
    assert fs.client is not first and not fs.client.closed


def test_pandas_round_trips_by_url(base: str, ganesha: Ganesha, export_path: ExportPath) -> None:
    df = pd.DataFrame({"k": range(5000), "v": [i * 0.5 for i in range(5000)], "s": [f"s{i}" for i in range(5000)]})
    df.to_parquet(f"{base}/df.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(f"{base}/df.parquet"), df)
    pd.testing.assert_frame_equal(pd.read_parquet(export_path.local / "df.parquet"), df)
    # pandas hands CSV and JSON URLs of schemes urllib knows by name (nfs, sftp) to urllib: an fsspec
    # file object takes them, options in the URL or in storage_options
    with fsspec.open(f"{base}/df.csv", "w", newline="") as f:
        df.to_csv(f, index=False)
    pd.testing.assert_frame_equal(pd.read_csv(export_path.local / "df.csv"), df)
    with fsspec.open(f"nfs://{ganesha.host}{export_path.remote}/df.csv", port=ganesha.port, uid=0, gid=0) as f:
        pd.testing.assert_frame_equal(pd.read_csv(f), df)


def test_a_pyarrow_dataset_of_several_files(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root = export_path.remote
    parts = [pa.table({"part": [i] * 100, "x": list(range(i * 100, i * 100 + 100))}) for i in range(4)]
    fs.makedirs(f"{root}/ds")
    for i, t in enumerate(parts):
        with fs.open(f"{root}/ds/part-{i}.parquet", "wb") as f:
            pq.write_table(t, f)
    dataset = ds.dataset(f"{root}/ds", filesystem=fs, format="parquet")
    assert len(dataset.files) == 4
    table = dataset.to_table().sort_by("x")
    assert table.column("x").to_pylist() == list(range(400))
    assert dataset.to_table(filter=ds.field("part") == 2).num_rows == 100
    local = ds.dataset(str(export_path.local / "ds"), format="parquet").to_table().sort_by("x")
    assert table.equals(local)
