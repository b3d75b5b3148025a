"""fsspec's calls on ``nfs://`` refuse a file written as a directory (``file/``), as ``os`` does:
NotADirectoryError, and the file stays."""

from __future__ import annotations

import fsspec
import pytest

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def test_a_file_written_as_a_directory_is_not_a_directory(ganesha: Ganesha, export_path: ExportPath,
                                                           tmp_path) -> None:
    fs = fsspec.filesystem("nfs", host=ganesha.host, port=ganesha.port)
    (export_path.local / "victim.txt").write_bytes(b"keep me")
    path = f"{export_path.remote}/victim.txt/"
    url = f"nfs://{ganesha.host}:{ganesha.port}{path}"
    for what, call in {
        "rm_file": lambda: fs.rm_file(path), "rm": lambda: fs.rm(path), "rm -r": lambda: fs.rm(path, recursive=True),
        "rm by URL": lambda: fs.rm(url), "info": lambda: fs.info(path), "ls": lambda: fs.ls(path),
        "cat": lambda: fs.cat(path), "cat_file": lambda: fs.cat_file(path), "open": lambda: fs.open(path, "rb"),
        "get": lambda: fs.get(path, str(tmp_path / "x")), "copy": lambda: fs.copy(path, f"{export_path.remote}/c"),
        "mv": lambda: fs.mv(path, f"{export_path.remote}/m"), "rmdir": lambda: fs.rmdir(path),
        "open by URL": lambda: fs.open(url, "rb"), "modified": lambda: fs.modified(path),
    }.items():
        with pytest.raises(NotADirectoryError):
            call()
        assert (export_path.local / "victim.txt").read_bytes() == b"keep me", what
    for call in (lambda: fs.open(path, "wb"), lambda: fs.pipe_file(path, b"x"), lambda: fs.touch(path)):
        with pytest.raises(IsADirectoryError):
            call()
    assert not fs.exists(path) and not fs.isfile(path) and not fs.isdir(path)
    assert sorted(p.name for p in export_path.local.iterdir()) == ["victim.txt"]
    assert list(tmp_path.iterdir()) == []
    assert (export_path.local / "victim.txt").read_bytes() == b"keep me"


def test_each_way_of_writing_a_path_keeps_its_own_answer(ganesha: Ganesha, export_path: ExportPath) -> None:
    """A path's cleaned form is remembered by the string as written: the same file named plainly,
    by URL, with ``..`` or ``//`` in it, and as a directory's (``file/``), in turns and past the
    number of paths remembered, each gets its own answer."""
    from pynfsrdma.fsspec import CLEANED_PATHS

    fs = fsspec.filesystem("nfs", host=ganesha.host, port=ganesha.port)
    (export_path.local / "d").mkdir()
    (export_path.local / "d" / "f").write_bytes(b"12345")
    base = export_path.remote
    url = f"nfs://{ganesha.host}:{ganesha.port}{base}/d/f"
    named = [f"{base}/d/f", url, f"{base}/d/../d/f", f"{base}//d///f", f"{base.lstrip('/')}/d/f"]
    for _ in range(2):
        for p in named:
            assert fs.info(p)["name"] == f"{base}/d/f", p
            assert fs.cat_file(p, 1, 3) == b"23", p
        for p in (f"{base}/d/f/", url + "/", f"{base}/d/../d/f/."):
            with pytest.raises(NotADirectoryError):
                fs.info(p)
        for i in range(CLEANED_PATHS + 1):  # (more paths than are kept)
            fs._path(f"{base}/other-{i}")
    assert fs.info(f"{base}/d/")["type"] == "directory"
    assert fs.info(f"{base}/d")["name"] == f"{base}/d"
