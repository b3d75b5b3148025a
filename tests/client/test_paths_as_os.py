"""The path API answers as ``os`` and ``shutil`` do where it borrows their names, against a real
NFS-Ganesha: a path written as a directory's (``file/``) names a directory or nothing."""

from __future__ import annotations

import errno
import shutil

import pytest

import pynfsrdma
from pynfsrdma._client.api import Client
from pynfsrdma._client.export_paths import NORMED_PATHS
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
            "read_file": lambda: nfs.read_file("/file/"), "read_bytes": lambda: nfs.read_bytes("/file/"),
            "listdir": lambda: nfs.listdir("/file/"),
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


async def test_the_calls_named_after_os_and_shutil_answer_as_they_do(
        ganesha: Ganesha, export_path: ExportPath) -> None:
    local = export_path.local
    (local / "d/sub").mkdir(parents=True)
    (local / "d/sub/x").write_bytes(b"x")
    (local / "f").write_bytes(b"precious")
    (local / "g").write_bytes(b"other")
    (local / "to_d").symlink_to("d")
    (local / "to_f").symlink_to("f")
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        # os.makedirs: an existing path is FileExistsError unless a directory and exist_ok
        with pytest.raises(FileExistsError):
            await nfs.makedirs("/d/sub")
        await nfs.makedirs("/d/sub", exist_ok=True)
        with pytest.raises(FileExistsError):
            await nfs.makedirs("/f", exist_ok=True)
        with pytest.raises(NotADirectoryError):
            await nfs.makedirs("/f/below", exist_ok=True)
        with pytest.raises(FileExistsError):
            await nfs.makedirs("/")
        await nfs.makedirs("/", exist_ok=True)
        await nfs.makedirs("/new/deeper")
        with pytest.raises(FileExistsError):
            await nfs.mkdir("/new")
        # os.remove and os.unlink: files and links, never a directory
        for remove in (nfs.remove, nfs.unlink):
            with pytest.raises(IsADirectoryError):
                await remove("/new/deeper")
        await nfs.remove("/to_d")  # the link, not the directory
        assert (local / "d/sub/x").exists() and not (local / "to_d").exists()
        (local / "to_d").symlink_to("d")
        # os.rmdir: empty directories only
        with pytest.raises(NotADirectoryError):
            await nfs.rmdir("/f")
        with pytest.raises(NotADirectoryError):
            await nfs.rmdir("/to_d")
        with pytest.raises(OSError) as ei:
            await nfs.rmdir("/d")
        assert ei.value.errno == errno.ENOTEMPTY
        # shutil.rmtree: a directory, not a file nor a link to one
        with pytest.raises(NotADirectoryError):
            await nfs.rmtree("/f")
        with pytest.raises(OSError, match="Cannot call rmtree on a symbolic link"):
            await nfs.rmtree("/to_d")
        assert (local / "d/sub/x").read_bytes() == b"x" and (local / "f").read_bytes() == b"precious"
        # os.rename (os.replace): replaces a file; a file onto a directory or back, a full directory
        await nfs.write_file("/h", b"new")
        await nfs.rename("/h", "/g")
        assert (local / "g").read_bytes() == b"new" and not (local / "h").exists()
        with pytest.raises(IsADirectoryError):
            await nfs.rename("/g", "/new")
        with pytest.raises(NotADirectoryError):
            await nfs.rename("/new", "/g")
        with pytest.raises(OSError) as ei:
            await nfs.rename("/new", "/d")
        assert ei.value.errno == errno.ENOTEMPTY
        # listdir of a file, open of a directory, exclusive create, readlink of a file
        with pytest.raises(NotADirectoryError):
            await nfs.listdir("/f")
        with pytest.raises(IsADirectoryError):
            await nfs.open("/d")
        with pytest.raises(FileExistsError):
            await nfs.open("/f", "x")
        with pytest.raises(OSError) as ei:
            await nfs.readlink("/f")
        assert ei.value.errno == errno.EINVAL
        # shutil.copyfile: never onto itself (nothing truncated), by its name or a link to it
        for same in ("/f", "/to_f"):
            with pytest.raises(shutil.SameFileError):
                await nfs.copy_file("/f", same)
        assert (local / "f").read_bytes() == b"precious"
        # os.link follows a link unless told not to
        await nfs.link("/to_f", "/hard")
        assert (local / "hard").samefile(local / "f") and not (local / "hard").is_symlink()
        await nfs.link("/to_f", "/hard_link", follow_symlinks=False)
        assert (local / "hard_link").is_symlink()
        # os.utime(path): both times to now; os.chown's -1 leaves an id as it is
        await nfs.utime("/g", 1_000_000_000, 1_000_000_000)
        a = await nfs.utime("/g")
        assert a.mtime_ns > 1_000_000_000 and a.atime_ns > 1_000_000_000
        await nfs.chown("/g", 1234, 5678)
        a = await nfs.chown("/g", -1, 4321)
        assert (a.uid, a.gid) == (1234, 4321)


def test_the_blocking_client_and_fsspec_answer_so_too(ganesha: Ganesha, export_path: ExportPath) -> None:
    import fsspec

    (export_path.local / "d").mkdir()
    with pynfsrdma.connect(url_of(ganesha, export_path)) as nfs:
        with pytest.raises(FileExistsError):
            nfs.makedirs("/d")
        nfs.makedirs("/d", exist_ok=True)
        with pytest.raises(IsADirectoryError):
            nfs.remove("/d")
        with pytest.raises(IsADirectoryError):
            nfs.unlink("/d")
    fs = fsspec.filesystem("nfs", host=ganesha.host, port=ganesha.port)
    with pytest.raises(FileExistsError):
        fs.makedirs(f"{export_path.remote}/d")
    with pytest.raises(FileExistsError):
        fs.mkdir(f"{export_path.remote}/d")
    with pytest.raises(IsADirectoryError):
        fs.rm_file(f"{export_path.remote}/d")
    assert (export_path.local / "d").is_dir()


async def test_remove_and_rmdir_check_the_type_in_the_compound_that_removes(
        ganesha: Ganesha, export_path: ExportPath) -> None:
    """remove (not a directory) and rmdir (a directory) cost one COMPOUND, as REMOVE alone did: the
    type is checked by VERIFY/NVERIFY before the REMOVE in it, not by a LOOKUP with attributes first."""
    (export_path.local / "f").write_bytes(b"")
    (export_path.local / "d").mkdir()
    async with Client.connect(url_of(ganesha, export_path)) as nfs:

        def counts() -> dict[str, int]:
            return dict(nfs.stats()["op_counts"])

        for call, path, refused in ((nfs.remove, "/d", IsADirectoryError), (nfs.rmdir, "/f", NotADirectoryError),
                                    (nfs.remove, "/f", None), (nfs.rmdir, "/d", None)):
            before = counts()
            if refused is None:
                await call(path)
            else:
                with pytest.raises(refused):
                    await call(path)
            after = counts()
            sent = {op: after.get(op, 0) - before.get(op, 0) for op in ("GETFH", "GETATTR", "REMOVE")}
            assert sent == {"GETFH": 0, "GETATTR": 0, "REMOVE": 1}, (call, path)
    assert list(export_path.local.iterdir()) == []


async def test_a_path_written_any_way_names_the_same_file(ganesha: Ganesha, export_path: ExportPath) -> None:
    """Paths are normalised once per string and remembered: however a path is written, the second
    time as the first, and after more paths than are remembered, it names the same file; the root
    has no directory to be split from."""
    (export_path.local / "d").mkdir()
    (export_path.local / "d" / "f").write_bytes(b"12345")
    written = ["/d/f", "d/f", "//d//f", "/d/./f", "/d/x/../f"]
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        for _ in range(2):
            assert [(await nfs.stat(p)).size for p in written] == [5] * len(written)
            assert [nfs.paths.split(p) for p in written] == [("/d", "f")] * len(written)
        for i in range(NORMED_PATHS + 10):
            assert nfs.paths.norm(f"/e{i}/../d//f") == "/d/f"
        assert (await nfs.stat("/d//f")).size == 5
        with pytest.raises(FileNotFoundError):
            await nfs.stat("/d/x/f")
        for root in ("/", "", "//", "/d/.."):
            assert nfs.paths.norm(root) == "/"
            with pytest.raises(pynfsrdma.NFS4Error) as e:
                nfs.paths.split(root)
            assert e.value.errno == errno.EINVAL
