"""The path API answers as ``os`` and ``shutil`` do where it borrows their names, against a real
NFS-Ganesha: a path written as a directory's (``file/``) names a directory or nothing."""

from __future__ import annotations

import errno

import pytest

import pynfsrdma
from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def url_of(ganesha: Ganesha, ep: ExportPath) -> str:
    return f"nfs://{ganesha.host}:{ganesha.port}{ep.remote}"


async def test_a_file_written_as_a_directory_is_not_a_directory(ganesha: Ganesha, export_path: ExportPath) -> None:
    (export_path.local / "file").write_bytes(b"keep me")
    (export_path.local / "link").symlink_to("file")
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        calls = {
            "stat": lambda: nfs.stat("/file/"), "lstat": lambda: nfs.lstat("/file/"),
            "lstat of a link": lambda: nfs.lstat("/link/"), "stat /.": lambda: nfs.stat("/file/."),
            "remove": lambda: nfs.remove("/file/"), "unlink": lambda: nfs.unlink("/file/"),
            "rmdir": lambda: nfs.rmdir("/file/"), "rmtree": lambda: nfs.rmtree("/file/"),
            "open": lambda: nfs.open("/file/"), "open r+": lambda: nfs.open("/file/", "r+"),
            "read_file": lambda: nfs.read_file("/file/"), "listdir": lambda: nfs.listdir("/file/"),
            "scandir": lambda: nfs.scandir("/file/"), "rename": lambda: nfs.rename("/file/", "/moved"),
            "rename onto": lambda: nfs.rename("/file", "/moved/"), "chmod": lambda: nfs.chmod("/file/", 0o600),
            "truncate": lambda: nfs.truncate("/file/", 0), "readlink": lambda: nfs.readlink("/link/"),
            "link": lambda: nfs.link("/file/", "/hard"), "copy_file": lambda: nfs.copy_file("/file/", "/copy"),
            "get": lambda: nfs.get("/file/", "/nonexistent/never-written"),
        }
        for what, call in calls.items():
            with pytest.raises(NotADirectoryError) as ei:
                await call()
            assert ei.value.errno == errno.ENOTDIR and "Not a directory" in str(ei.value), what
        for make in (lambda: nfs.write_file("/file/", b"x"), lambda: nfs.open("/file/", "w"),
                     lambda: nfs.open("/file/", "a"), lambda: nfs.open("/new/", "x")):
            with pytest.raises(IsADirectoryError):  # (open(2) with O_CREAT answers so)
                await make()
        for make in (lambda: nfs.symlink("file", "/new/"), lambda: nfs.link("/file", "/new/")):
            with pytest.raises(FileNotFoundError):  # (symlink(2) and link(2) answer so)
                await make()
        assert not await nfs.exists("/file/") and not await nfs.isfile("/file/") and not await nfs.lexists("/link/")
        assert await nfs.read_file("/file") == b"keep me"
    assert sorted(p.name for p in export_path.local.iterdir()) == ["file", "link"]


async def test_a_directory_written_with_a_slash_is_one(ganesha: Ganesha, export_path: ExportPath) -> None:
    (export_path.local / "d").mkdir()
    (export_path.local / "to_d").symlink_to("d")
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        assert (await nfs.stat("/d/")).is_dir and (await nfs.lstat("/to_d/")).is_dir  # (lstat follows: as os)
        await nfs.mkdir("/d/e/")
        assert await nfs.listdir("/to_d/") == ["e"]
        with pytest.raises(NotADirectoryError):
            await nfs.rmdir("/to_d/")  # the link is not the directory (rmdir(2) answers so)
        await nfs.rename("/d/e/", "/d/f/")
        await nfs.rmdir("/d/f/")
        assert await nfs.listdir("/d") == []
    assert (export_path.local / "to_d").is_symlink()


def test_the_blocking_client_too(ganesha: Ganesha, export_path: ExportPath) -> None:
    (export_path.local / "victim.txt").write_bytes(b"keep me")
    with pynfsrdma.connect(url_of(ganesha, export_path)) as nfs:
        with pytest.raises(NotADirectoryError):
            nfs.remove("/victim.txt/")
        with pytest.raises(NotADirectoryError):
            nfs.open("/victim.txt/", "rb")
    assert (export_path.local / "victim.txt").read_bytes() == b"keep me"
