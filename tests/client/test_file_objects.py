"""The blocking client's files are Python's io objects: what works on a local file works on ours
(shutil, csv, json, zipfile, tarfile, pandas, pyarrow), and the path calls are os's and pathlib's."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pynfsrdma
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


@pytest.fixture
def nfs(ganesha: Ganesha, export_path: ExportPath) -> Iterator[pynfsrdma.SyncClient]:
    with pynfsrdma.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as client:
        yield client


def test_open_gives_the_io_classes_open_gives(nfs: pynfsrdma.SyncClient, export_path: ExportPath) -> None:
    kinds = {"wb": io.BufferedWriter, "rb": io.BufferedReader, "ab": io.BufferedWriter,
             "r+b": io.BufferedRandom, "w": io.TextIOWrapper, "r": io.TextIOWrapper, "a": io.TextIOWrapper}
    for mode, kind in kinds.items():
        with nfs.open("/f", mode) as f:
            assert isinstance(f, kind), mode
            assert f.name == "/f" and not f.closed and f.seekable()
            assert f.readable() == ("r" in mode or "+" in mode)
            assert f.writable() == ("r" not in mode or "+" in mode)
        assert f.closed
    with nfs.open("/f", "rb", buffering=0) as raw:
        assert isinstance(raw, io.RawIOBase) and isinstance(raw, pynfsrdma.RawFile)
    with pytest.raises(ValueError, match="unbuffered text"):
        nfs.open("/f", "r", buffering=0)
    with pytest.raises(ValueError, match="invalid mode"):
        nfs.open("/f", "rw")


def test_text_with_encoding_and_newlines_as_open_has_them(nfs: pynfsrdma.SyncClient, export_path: ExportPath) -> None:
    with nfs.open("/t.txt", "w", encoding="latin-1", newline="\r\n") as f:
        f.write("caf\xe9\nline two\n")
    assert (export_path.local / "t.txt").read_bytes() == b"caf\xe9\r\nline two\r\n"
    with nfs.open("/t.txt", encoding="latin-1") as f:
        assert f.readline() == "caf\xe9\n"
        assert list(f) == ["line two\n"]
    with nfs.open("/t.txt", encoding="latin-1", newline="") as f:
        assert f.read() == "caf\xe9\r\nline two\r\n"
    with nfs.open("/t.txt", "a", encoding="latin-1") as f:
        f.write("three\n")
    with nfs.open("/t.txt", "rb") as f:
        assert f.read().endswith(b"two\r\nthree\n")
        assert f.tell() == (export_path.local / "t.txt").stat().st_size


def test_binary_reads_seeks_and_readinto(nfs: pynfsrdma.SyncClient, export_path: ExportPath) -> None:
    data = os.urandom(3 << 20 | 12345)
    (export_path.local / "blob").write_bytes(data)
    with nfs.open("/blob", "rb") as f:
        assert f.read(10) == data[:10] and f.tell() == 10
        f.seek(-100, os.SEEK_END)
        assert f.read() == data[-100:]
        f.seek(1 << 20)
        buf = bytearray(2 << 20)
        assert f.readinto(buf) == len(buf) and buf == data[1 << 20 : 3 << 20]
    with nfs.open("/blob", "rb", buffering=0) as raw:
        assert raw.readall() == data
        raw.seek(len(data) - 5)
        buf = bytearray(10)
        assert raw.readinto(buf) == 5 and buf[:5] == data[-5:]
    with nfs.open("/blob", "r+b") as f:
        f.seek(100)
        f.write(b"XYZ")
        f.seek(99)
        assert f.read(5) == data[99:100] + b"XYZ" + data[103:104]
    assert (export_path.local / "blob").read_bytes()[100:103] == b"XYZ"


def test_shutil_copyfileobj_both_ways(nfs: pynfsrdma.SyncClient, export_path: ExportPath, tmp_path: Path) -> None:
    local = tmp_path / "in"
    local.write_bytes(os.urandom(5 << 20))
    with open(local, "rb") as src, nfs.open("/copy", "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert (export_path.local / "copy").read_bytes() == local.read_bytes()
    with nfs.open("/copy", "rb") as src, open(tmp_path / "back", "wb") as out:
        shutil.copyfileobj(src, out)
    assert (tmp_path / "back").read_bytes() == local.read_bytes()


def test_csv_and_json(nfs: pynfsrdma.SyncClient) -> None:
    rows = [["name", "n"], ["a", "1"], ["b, with a comma", "2"]]
    with nfs.open("/rows.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    with nfs.open("/rows.csv", newline="") as f:
        assert list(csv.reader(f)) == rows
    doc = {"list": [1, 2, 3], "text": "\u00e9t\u00e9"}
    with nfs.open("/doc.json", "w", encoding="utf-8") as f:
        json.dump(doc, f)
    with nfs.open("/doc.json", encoding="utf-8") as f:
        assert json.load(f) == doc


def test_zipfile_and_tarfile_write_and_read_archives(nfs: pynfsrdma.SyncClient, export_path: ExportPath) -> None:
    with nfs.open("/a.zip", "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("one.txt", "one")
        z.writestr("dir/two.bin", os.urandom(100_000))
    assert zipfile.ZipFile(export_path.local / "a.zip").namelist() == ["one.txt", "dir/two.bin"]
    with nfs.open("/a.zip", "rb") as f, zipfile.ZipFile(f) as z:
        assert z.read("one.txt") == b"one" and z.testzip() is None
    with nfs.open("/a.tar.gz", "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    with nfs.open("/a.tar.gz", "rb") as f, tarfile.open(fileobj=f, mode="r:gz") as tar:
        member = tar.extractfile("hello.txt")
        assert member is not None and member.read() == b"hello"


def test_pandas_and_pyarrow_on_file_objects(nfs: pynfsrdma.SyncClient, export_path: ExportPath) -> None:
    df = pd.DataFrame({"x": range(1000), "y": [f"row {i}" for i in range(1000)]})
    with nfs.open("/df.csv", "w", newline="") as f:
        df.to_csv(f, index=False)
    with nfs.open("/df.csv") as f:
        pd.testing.assert_frame_equal(pd.read_csv(f), df)
    with nfs.open("/df.parquet", "wb") as f:
        df.to_parquet(f)
    with nfs.open("/df.parquet", "rb") as f:
        pd.testing.assert_frame_equal(pd.read_parquet(f), df)
    with nfs.open("/df.parquet", "rb") as f:
        assert pq.read_table(f).equals(pa.Table.from_pandas(df, preserve_index=False))
    pd.testing.assert_frame_equal(pd.read_parquet(export_path.local / "df.parquet"), df)


def test_path_calls_as_os_names_them(nfs: pynfsrdma.SyncClient, export_path: ExportPath) -> None:
    (export_path.local / "d/sub").mkdir(parents=True)
    (export_path.local / "d/a.csv").write_text("1")
    (export_path.local / "d/sub/b.csv").write_text("22")
    (export_path.local / "d/sub/.hidden.csv").write_text("")
    (export_path.local / "d/link").symlink_to("sub")
    os.symlink("nowhere", export_path.local / "d/dangling")

    assert nfs.exists("/d/a.csv") and nfs.isfile("/d/a.csv") and not nfs.isdir("/d/a.csv")
    assert nfs.isdir("/d/link") and nfs.islink("/d/link")
    assert not nfs.exists("/d/dangling") and nfs.lexists("/d/dangling") and not nfs.exists("/nope/x")
    st = nfs.stat("/d/sub/b.csv")
    local = os.stat(export_path.local / "d/sub/b.csv")
    assert (st.st_size, st.st_mtime_ns, st.st_ino, st.st_nlink) == (2, local.st_mtime_ns, local.st_ino, 1)
    assert stat.S_ISREG(st.st_mode) and st.st_mtime == local.st_mtime

    entries = {e.name: e for e in nfs.scandir("/d")}
    assert sorted(entries) == ["a.csv", "dangling", "link", "sub"]
    assert entries["sub"].is_dir() and not entries["sub"].is_symlink() and entries["sub"].path == "/d/sub"
    assert entries["link"].is_dir() and not entries["link"].is_dir(follow_symlinks=False)
    assert entries["a.csv"].is_file() and entries["a.csv"].stat().st_size == 1
    assert not entries["dangling"].is_file() and entries["dangling"].is_symlink()
    with pytest.raises(FileNotFoundError):
        entries["dangling"].stat()

    walked = {top: (sorted(dirs), sorted(files)) for top, dirs, files in nfs.walk("/d")}
    assert walked == {"/d": (["link", "sub"], ["a.csv", "dangling"]), "/d/sub": ([], [".hidden.csv", "b.csv"])}
    assert nfs.glob("/d/*.csv") == ["/d/a.csv"]
    assert nfs.glob("/d/**/*.csv") == ["/d/a.csv", "/d/link/b.csv", "/d/sub/b.csv"]
    assert nfs.glob("/d/sub/.*") == ["/d/sub/.hidden.csv"]
    assert nfs.glob("/nope/*") == []


async def test_the_async_client_walks_globs_and_reads_into_buffers(ganesha: Ganesha, export_path: ExportPath) -> None:
    (export_path.local / "d/sub").mkdir(parents=True)
    (export_path.local / "d/sub/f").write_bytes(b"0123456789")
    (export_path.local / "d/link").symlink_to("sub")
    async with pynfsrdma.Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        walked = [(top, sorted(dirs), files) async for top, dirs, files in nfs.walk("/")]
        assert walked == [("/", ["d"], []), ("/d", ["link", "sub"], []), ("/d/sub", [], ["f"])]
        bottom_up = [top async for top, _, _ in nfs.walk("/", topdown=False, followlinks=True)]
        assert bottom_up == ["/d/link", "/d/sub", "/d", "/"] or bottom_up == ["/d/sub", "/d/link", "/d", "/"]
        assert await nfs.glob("/*/*/f") == ["/d/link/f", "/d/sub/f"]
        async with await nfs.open("/d/sub/f") as f:
            buf = bytearray(4)
            assert await f.readinto(buf) == 4 and buf == b"0123" and f.tell() == 4 and f.name == "/d/sub/f"
