"""NFSv4's families that are objects of their own, given its COMPOUND runner rather than rungs of its
class ladder: the names (``nfs.names``), the byte-range locks (``nfs.byte_range_locks``), READ, WRITE and COMMIT (``nfs.read_write``), the state recovery (``nfs.state_recovery``), the directories (``nfs.directories``), NFSv4.2's operations (``nfs.nfs42``), whole files by name (``nfs.whole_files``), the extended attributes (``nfs.xattrs``) and the
batched operations (``nfs.batched``)."""

from __future__ import annotations

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._client.batched import Batched
from pynfsrdma._client.byte_range_locks import ByteRangeLocks
from pynfsrdma._client.compounds import Compounds
from pynfsrdma._client.directories import Directories
from pynfsrdma._client.names import Names
from pynfsrdma._client.nfs4 import NFSv4
from pynfsrdma._client.nfs42 import NFS42
from pynfsrdma._client.read_write import ReadWrite
from pynfsrdma._client.state_recovery import StateRecovery
from pynfsrdma._client.whole_files import WholeFiles
from pynfsrdma._client.xattrs import ExtendedAttributes
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def test_the_composed_families_are_no_rungs_of_the_ladder() -> None:
    for family in (Names, ByteRangeLocks, ReadWrite, StateRecovery, Directories, NFS42, WholeFiles, ExtendedAttributes, Batched):
        assert not issubclass(NFSv4, family), family
        assert Compounds not in family.__mro__, family


def test_batched_reads_and_removes_run_through_the_runner_they_are_given(ganesha: Ganesha,
                                                                          export_path: ExportPath) -> None:
    data = bytes(range(256)) * 64
    (export_path.local / "f").write_bytes(data)
    for name in ("a", "b", "c"):
        (export_path.local / name).write_bytes(b"x")
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"

    async def main() -> None:
        async with Client.connect(url) as client:
            nfs = client.nfs
            assert isinstance(nfs.batched, Batched) and nfs.batched.compounds is nfs
            assert nfs.batched.read_batches([(0, 10), (4096, 10)]) == [[0, 1]]  # (two to a COMPOUND)
            fh = (await client.nfs.names.lookup(client.root_fh, "f", client.cred))[0]
            got = await nfs.batched.read_spans(fh, [(0, 10), (4096, 10)], client.cred)
            assert [(bytes(d), eof) for d, eof in got] == [(data[:10], False), (data[4096:4106], False)]
            done, error = await nfs.batched.remove_names(client.root_fh, ["a", "b", "c"], client.cred,
                                                         ["/a", "/b", "/c"])
            assert (done, error) == (3, None)

    trio.run(main)
    assert sorted(p.name for p in export_path.local.iterdir()) == ["f"]


def test_directories_run_through_the_runner_they_are_given(ganesha: Ganesha, export_path: ExportPath) -> None:
    (export_path.local / "f").write_bytes(b"data")
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"

    async def main() -> None:
        async with Client.connect(url) as client:
            nfs, root, cred = client.nfs, client.root_fh, client.cred
            assert isinstance(nfs.directories, Directories) and nfs.directories.compounds is nfs
            await nfs.directories.create(root, "d", c.NF4DIR, cred, mode=0o750)
            fh = (await nfs.names.lookup(root, "f", cred))[0]
            await nfs.directories.link(fh, root, "hard", cred)
            await nfs.directories.rename(root, "f", root, "g", cred)
            await nfs.directories.remove(root, "hard", cred)
            assert sorted(e.name for e in await nfs.directories.listdir(root, cred)) == ["d", "g"]

    trio.run(main)
    assert sorted(p.name for p in export_path.local.iterdir()) == ["d", "g"]
    assert (export_path.local / "g").read_bytes() == b"data"


def test_nfs42_runs_through_the_runner_it_is_given(ganesha: Ganesha, export_path: ExportPath) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}?vers=4.2"

    async def main() -> None:
        async with Client.connect(url) as client:
            nfs = client.nfs
            assert isinstance(nfs.nfs42, NFS42) and nfs.nfs42.compounds is nfs
            assert nfs.nfs42.read_write is nfs.read_write
            assert nfs.nfs42.supports(c.OP_SEEK)
            f = await client.open("/f", "w")
            attrs = await nfs.nfs42.allocate(f.of, 0, 8192, client.cred)
            assert attrs.size == 8192
            assert await nfs.nfs42.seek(f.of, 0, c.NFS4_CONTENT_HOLE, client.cred) in (0, 8192)
            await f.close()

    trio.run(main)
    assert (export_path.local / "f").stat().st_size == 8192


def test_whole_files_run_through_the_runner_they_are_given(ganesha: Ganesha, export_path: ExportPath) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"

    async def main() -> None:
        async with Client.connect(url) as client:
            nfs, root, cred = client.nfs, client.root_fh, client.cred
            assert isinstance(nfs.whole_files, WholeFiles) and nfs.whole_files.compounds is nfs
            fh, written = await nfs.whole_files.write_named(root, "w", b"whole", cred)
            assert written == 5
            got = await nfs.whole_files.read_named(root, "w", 0, 100, cred)
            assert got is not None and got.fh == fh and (bytes(got.data), got.eof) == (b"whole", True)

    trio.run(main)
    assert (export_path.local / "w").read_bytes() == b"whole"


def test_state_recovery_is_given_the_state_it_recovers_and_hooks_itself_to_the_client_id(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"

    async def main() -> None:
        async with Client.connect(url) as client:
            nfs = client.nfs
            recovery = nfs.state_recovery
            assert isinstance(recovery, StateRecovery) and recovery.compounds is nfs
            for hooks in (nfs.client.reclaim_hooks, nfs.client.state_revoked_hooks):
                assert [getattr(h, "__self__", None) for h in hooks].count(recovery) == 1

    trio.run(main)


def test_reads_writes_and_commits_run_through_the_runner_they_are_given(ganesha: Ganesha,
                                                                        export_path: ExportPath) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"

    async def main() -> None:
        async with Client.connect(url) as client:
            nfs = client.nfs
            assert isinstance(nfs.read_write, ReadWrite) and nfs.read_write.compounds is nfs
            assert nfs.read_write.pnfs is None  # (no pnfs asked for)
            f = await client.open("/f", "w+")
            count, _, verifier = await nfs.read_write.write(f.of, 0, b"written", client.cred)
            assert count == 7
            assert await nfs.read_write.commit(f.of.fh, client.cred) == verifier
            data, eof = await nfs.read_write.read(f.of, f.of.fh, 0, 100, client.cred)
            assert (bytes(data), eof) == (b"written", True)
            await f.close()

    trio.run(main)
    assert (export_path.local / "f").read_bytes() == b"written"


def test_names_run_through_the_runner_they_are_given_and_record_the_export_there(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    (export_path.local / "f").write_bytes(b"12345")
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"

    async def main() -> None:
        async with Client.connect(url) as client:
            nfs, cred = client.nfs, client.cred
            assert isinstance(nfs.names, Names) and nfs.names.compounds is nfs
            root, _ = await nfs.names.mount(export_path.remote, cred)
            assert nfs.root_fh == root and nfs.supported_attrs  # (what mount learns, kept by the runner)
            fh, attrs = await nfs.names.lookup(root, "f", cred)
            assert attrs.size == 5
            assert (await nfs.names.setattr(fh, cred, size=2)).size == 2
            assert (await nfs.names.getattr(fh, cred)).size == 2

    trio.run(main)
    assert (export_path.local / "f").read_bytes() == b"12"


def test_byte_range_locks_run_through_the_runner_they_are_given(ganesha: Ganesha, export_path: ExportPath) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"

    async def main() -> None:
        async with Client.connect(url) as client:
            nfs, cred = client.nfs, client.cred
            locks = nfs.byte_range_locks
            assert isinstance(locks, ByteRangeLocks) and locks.compounds is nfs
            f = await client.open("/f", "w")
            await locks.lock(f.of, "owner", c.WRITE_LT, 0, 10, cred)
            assert locks.lock_state(f.of, "owner") is not None and nfs.lock_counts["granted"] == 1
            await locks.locku(f.of, "owner", 0, 10, cred)
            assert locks.lock_state(f.of, "owner") is None
            await f.close()

    trio.run(main)
