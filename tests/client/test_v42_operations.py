"""NFSv4.2's file operations (RFC 7862) against a real NFS-Ganesha with ``vers=4.2``: holes found with
SEEK, space reserved with ALLOCATE and freed with DEALLOCATE, copies that fall back to reading and
writing where the server cannot COPY or CLONE (NFS-Ganesha 4.3 cannot), and the two operations that
must never reach it (READ_PLUS returns no data there, and IO_ADVISE makes it crash at the next CLOSE)."""

from __future__ import annotations

import errno
import fcntl
import os

import pytest

from pynfsrdma._client.api import Client
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath

MIB = 1 << 20
BLOCK = 64 * 1024  # larger than any file system's block, so holes and data fall on block boundaries


def url_of(server: Ganesha, ep: ExportPath, vers: str = "4.2") -> str:
    return f"nfs://{server.host}:{server.port}{ep.remote}?vers={vers}"


def op_counts(nfs: Client) -> dict[str, int]:
    return dict(nfs.stats()["op_counts"])


async def test_seek_finds_the_data_written_after_a_hole(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(url_of(ganesha, export_path)) as nfs, await nfs.open("/sparse", "w+") as f:
        await f.pwrite(4 * MIB, b"d" * BLOCK)  # a hole of 4 MiB, then data to the end
        await f.fsync()
        size = 4 * MIB + BLOCK
        assert await f.seek_hole(0) == 0
        assert await f.seek_data(0) == 4 * MIB and f.pos == 4 * MIB  # lseek(SEEK_DATA) moves
        assert await f.seek_data(4 * MIB + 10) == 4 * MIB + 10  # inside the data: where it is
        assert await f.seek_hole(4 * MIB) == size  # the end of the file counts as a hole
        for call in (f.seek_data(size), f.seek_hole(size + 1)):  # at or past the end: ENXIO
            with pytest.raises(NFS4Error) as ei:
                await call
            assert ei.value.errno == errno.ENXIO
    local = os.open(export_path.local / "sparse", os.O_RDONLY)  # the server's file says the same
    try:
        assert os.lseek(local, 0, os.SEEK_DATA) == 4 * MIB
    finally:
        os.close(local)


async def test_deallocate_punches_a_hole_that_reads_back_as_zeros(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        data = os.urandom(3 * BLOCK)
        async with await nfs.open("/f", "w+") as f:
            await f.pwrite(0, data)
            await f.fsync()
            used = (await nfs.stat("/f")).used
            attrs = await f.punch_hole(BLOCK, BLOCK)
            assert attrs.size == 3 * BLOCK  # the size stays
            assert attrs.used <= used - BLOCK  # the space is freed
            assert await f.pread(0, 3 * BLOCK) == data[:BLOCK] + bytes(BLOCK) + data[2 * BLOCK:]
            assert await f.seek_hole(0) == BLOCK and await f.seek_data(BLOCK) == 2 * BLOCK
            await f.punch_hole(2 * BLOCK, BLOCK)
            with pytest.raises(NFS4Error) as ei:  # no data after the first block any more
                await f.seek_data(BLOCK)
            assert ei.value.errno == errno.ENXIO
    assert (export_path.local / "f").read_bytes() == data[:BLOCK] + bytes(2 * BLOCK)


async def test_allocate_reserves_space_and_grows_the_file(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        async with await nfs.open("/f", "w+") as f:
            attrs = await f.allocate(0, MIB)
            assert attrs.size == MIB and attrs.used >= MIB
            assert f.size == MIB
            assert await f.pread(0, 10) == bytes(10)
        st = os.stat(export_path.local / "f")
        assert st.st_size == MIB and st.st_blocks * 512 >= MIB
        async with await nfs.open("/f", "r") as f:
            with pytest.raises(OSError) as ei:
                await f.allocate(0, 10)  # as fallocate(2) on a descriptor open for reading only
            assert ei.value.errno == errno.EBADF


async def test_copy_falls_back_to_reading_and_writing_and_copy_is_asked_once(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    data = os.urandom(3 * MIB + 123)
    (export_path.local / "src").write_bytes(data)
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        assert await nfs.copy_file("/src", "/dst") == len(data)
        assert (export_path.local / "dst").read_bytes() == data
        assert not nfs.nfs.nfs42.supports(c.OP_COPY)  # NFS-Ganesha said NFS4ERR_NOTSUPP: remembered
        assert await nfs.copy_file("/src", "/dst2") == len(data)
        assert (export_path.local / "dst2").read_bytes() == data
        assert op_counts(nfs)["COPY"] == 1
        (export_path.local / "zero").write_bytes(b"")
        assert await nfs.copy_file("/zero", "/zero2") == 0 and (export_path.local / "zero2").read_bytes() == b""


async def test_clone_answered_notsupp_is_eopnotsupp_and_remembered(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        await nfs.write_file("/a", b"abc")
        src, dst = await nfs.open("/a", "r"), await nfs.open("/b", "w")
        for _ in range(2):
            with pytest.raises(NFS4Error) as ei:
                await nfs.nfs.nfs42.clone(src.of, dst.of, 0, 0, 0, nfs.cred)
            assert ei.value.errno == errno.EOPNOTSUPP and ei.value.op == c.OP_CLONE
        assert op_counts(nfs)["CLONE"] == 1
        await src.close()
        await dst.close()


async def test_on_nfsv4_1_the_nfsv4_2_calls_fail_without_asking_the_server(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    async with Client.connect(url_of(ganesha, export_path, "4.1")) as nfs:
        async with await nfs.open("/f", "w+") as f:
            await f.write(b"x" * 100)
            for call in (f.seek_data(0), f.seek_hole(0), f.allocate(0, 10), f.punch_hole(0, 10)):
                with pytest.raises(OSError) as ei:
                    await call
                assert ei.value.errno == errno.EOPNOTSUPP
        assert await nfs.copy_file("/f", "/g") == 100  # read and written
        assert (export_path.local / "g").read_bytes() == b"x" * 100
        counts = op_counts(nfs)
        assert not {"SEEK", "ALLOCATE", "DEALLOCATE", "COPY"} & set(counts), counts


async def test_read_plus_and_io_advise_are_never_sent(ganesha: Ganesha, export_path: ExportPath) -> None:
    """Every kind of call of the API, on an NFSv4.2 session: the COMPOUNDs it sent (the client's own
    count of the operations in them) hold neither operation; and NFS-Ganesha, which dies at the CLOSE
    after an IO_ADVISE, is still there to answer."""
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        await nfs.makedirs("/d/e")
        await nfs.write_file("/d/f", os.urandom(2 * MIB))
        await nfs.put(__file__, "/d/put.py")
        async with await nfs.open("/d/f", "r+") as f:
            await f.read()
            await f.pread(MIB, 100)
            await f.pwrite(3 * MIB, b"tail")
            await f.seek_data(0)
            await f.seek_hole(0)
            await f.allocate(4 * MIB, MIB)
            await f.punch_hole(0, MIB)
            await f.lock(fcntl.F_WRLCK, 0, 10)
            await f.test_lock(fcntl.F_RDLCK)
            await f.unlock()
        await nfs.copy_file("/d/f", "/d/g")
        async with await nfs.open("/d/g", "r") as g:
            async for _ in g.iter_views():
                pass
        await nfs.get("/d/g", str(export_path.local.parent / f"{export_path.name}-local-copy"))
        os.unlink(export_path.local.parent / f"{export_path.name}-local-copy")
        await nfs.scandir("/d")
        await nfs.rename("/d/g", "/d/h")
        await nfs.symlink("h", "/d/l")
        await nfs.read_file("/d/l")
        await nfs.remove("/d/l")
        await nfs.rmtree("/d")
        counts = op_counts(nfs)
        assert {"READ", "WRITE", "COMMIT", "SEEK", "ALLOCATE", "DEALLOCATE", "COPY", "LOCK", "LOCKT", "LOCKU",
                "CLOSE", "OPEN", "READDIR"} <= set(counts), counts  # (the count saw the whole workload)
        assert "READ_PLUS" not in counts and "IO_ADVISE" not in counts
        assert await nfs.listdir("/") == []  # the server is still up
