"""Many calls at once through fsspec: ``cat_ranges`` sends a file's ranges several READs to a
COMPOUND, and ``pipe``/``cat`` of many paths, ``rm -r``, ``find`` and ``du`` send their work together
(as many in flight as the session's slots take), counted by the client's own statistics; a path
proxy that delays every reply shows them in flight side by side."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import fsspec
import pytest
import trio
from fsspec_support import counted

from pynfsrdma import _trace
from pynfsrdma._proto.nfs4.types import READ4args
from pynfsrdma._testbed.ganesha import ExportPath, Ganesha
from pynfsrdma.fsspec import NFSFileSystem

# ranges this far apart (17 pages; 4 KiB each, so 65,539 bytes lie between two) are not read by one
# READ: more than the 64,000 bytes by which cat_ranges joins ranges
FAR = 17 * 4096

# a directory's file handle is kept 3 s: on a slow machine one may age out between two calls and be
# looked up again, one RPC more
AGED = 1


class ReadsSent(_trace.RpcTrace):
    """The RPC trace of this process's client, kept as the (offset, count) of each COMPOUND's READs."""

    def __init__(self) -> None:
        super().__init__(io.StringIO())
        self.compounds: list[list[tuple[int, int]]] = []

    def rpc_done(self, xid: int, path_address: str, ops: Iterable[Any], status: int, seconds: float) -> None:
        reads = [(op.offset, op.count) for op in ops if isinstance(op, READ4args)]
        if reads:
            self.compounds.append(reads)


def reads_sent(call: Callable[[], Any]) -> tuple[Any, list[list[tuple[int, int]]]]:
    """What ``call()`` returned, and the READs (offset, count) of each COMPOUND it sent."""
    sent = ReadsSent()
    _trace.install_rpc_trace(sent)
    try:
        return call(), sent.compounds
    finally:
        _trace.install_rpc_trace(None)


def test_cat_ranges_batches_reads_of_whole_pages(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    # Linux's nfsd 7.3 misplaces a READ's data after a READ whose data does not end on a page of
    # the reply (tests/vm/README.md): two READs to a COMPOUND, each of whole pages from a page
    # boundary of the file (the ranges FAR apart: each a READ of its own)
    root, local = export_path.remote, export_path.local
    data = os.urandom(30 * FAR)
    (local / "columns.parquet").write_bytes(data)
    starts = [i * FAR + 7 for i in range(30)]
    ends = [s + 4093 for s in starts]
    fs.info(f"{root}/columns.parquet")
    got, compounds = reads_sent(lambda: fs.cat_ranges([f"{root}/columns.parquet"] * 30, starts, ends))
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=True)]
    # each range's two pages (it starts 7 bytes into one and ends 4 bytes into the next)
    assert sorted(compounds) == [[(i * FAR, 8192), ((i + 1) * FAR, 8192)] for i in range(0, 30, 2)], compounds


def test_cat_ranges_reads_again_what_follows_a_short_read(
    fs: fsspec.AbstractFileSystem, export_path: ExportPath
) -> None:
    # a READ that comes back short (the end of the file) ends the data a COMPOUND's reply can be
    # trusted for: the READ after it goes again, in a COMPOUND of its own. (The four ranges near
    # each other are one READ, short; the one far past the end follows it.)
    root, local = export_path.remote, export_path.local
    data = os.urandom(10_000)
    (local / "short").write_bytes(data)
    starts, ends = [9_000, 100, 5_000, 6_000, 10_000 + FAR], [14_000, 110, 5_020, 6_001, 10_010 + FAR]
    fs.info(f"{root}/short")
    got, compounds = reads_sent(lambda: fs.cat_ranges([f"{root}/short"] * 5, starts, ends))
    assert got == [data[9_000:], data[100:110], data[5_000:5_020], data[6_000:6_001], b""]
    assert compounds == [[(0, 16384), (FAR + 8192, 4096)], [(10_000 + FAR, 10)]], compounds


def test_cat_ranges_reads_ranges_near_each_other_by_one_read(
    fs: fsspec.AbstractFileSystem, export_path: ExportPath
) -> None:
    # ranges that overlap, touch, or lie less than 64,000 bytes apart, given in any order, are one
    # READ of whole pages up to rsize, each range sliced from its data
    root, local = export_path.remote, export_path.local
    data = os.urandom(3 * 1024 * 1024)
    (local / "columns.parquet").write_bytes(data)
    starts = [70_000, 5, 3_000, 1_000, 63_990, 130_000]
    ends = [70_100, 2_000, 3_001, 4_000, 64_100, 133_000]
    fs.info(f"{root}/columns.parquet")
    got, compounds = reads_sent(lambda: fs.cat_ranges([f"{root}/columns.parquet"] * 6, starts, ends))
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=True)]
    assert compounds == [[(0, 33 * 4096)]], compounds  # (pages 0 to 32: up to byte 133,000)
    # fsspec's max_gap says how far apart: 0 joins only ranges that touch or overlap
    got, compounds = reads_sent(lambda: fs.cat_ranges([f"{root}/columns.parquet"] * 6, starts, ends, max_gap=0))
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=True)]
    assert sorted(r for c in compounds for r in c) == [(0, 4096), (61440, 4096), (69632, 4096), (126976, 8192)]
    with pytest.raises(ValueError, match=r"^gap must be at least 0, not -1$"):
        fs.cat_ranges([f"{root}/columns.parquet"], 0, 1, max_gap=-1)
    # 300 ranges of 4 KiB, 4 KiB apart (the bench's), over 2.4 MB: READs of rsize, a handful of RPCs
    client = fs.client
    maxread = client.client.nfs.maxread
    starts = [i * 8192 + 7 for i in range(300)]
    ends = [s + 4093 for s in starts]
    (got, compounds), rpcs, ops = counted(
        client, lambda: reads_sent(lambda: fs.cat_ranges([f"{root}/columns.parquet"] * 300, starts, ends)))
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=True)]
    reads = sorted(r for c in compounds for r in c)
    assert all(n <= maxread and at % 4096 == 0 and n % 4096 == 0 for at, n in reads), reads
    assert reads[0][0] == 0 and sum(n for _, n in reads) == -(-ends[-1] // 4096) * 4096, reads
    assert ops["READ"] == len(reads) == -(-ends[-1] // maxread) and rpcs <= len(reads) + AGED, (rpcs, ops)


def test_cat_ranges_with_batchreads_0_reads_near_ranges_by_one_read_of_their_bytes(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    fs = fsspec.filesystem("nfs", host=ganesha.host, port=ganesha.port, batchreads=0)
    root, local = export_path.remote, export_path.local
    data = os.urandom(200_000)
    (local / "columns.parquet").write_bytes(data)
    starts, ends = [9_000, 100, 5_000, 100_000], [14_000, 110, 5_020, 100_007]
    fs.info(f"{root}/columns.parquet")
    got, compounds = reads_sent(lambda: fs.cat_ranges([f"{root}/columns.parquet"] * 4, starts, ends))
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=True)]
    assert sorted(compounds) == [[(100, 13_900)], [(100_000, 7)]], compounds


def test_cat_ranges_with_batchreads_0_sends_one_read_to_a_compound(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    fs = fsspec.filesystem("nfs", host=ganesha.host, port=ganesha.port, batchreads=0)
    root, local = export_path.remote, export_path.local
    data = os.urandom(30 * FAR)
    (local / "columns.parquet").write_bytes(data)
    starts = [i * FAR + 7 for i in range(30)]
    ends = [s + 4093 for s in starts]
    fs.info(f"{root}/columns.parquet")
    got, compounds = reads_sent(lambda: fs.cat_ranges([f"{root}/columns.parquet"] * 30, starts, ends))
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=True)]
    assert sorted(compounds) == [[(s, 4093)] for s in starts]
    with pytest.raises(ValueError, match=r"^batchreads must be 0 or 1, not 'yes'$"):
        NFSFileSystem(ganesha.host, ganesha.port, batchreads="yes")


def test_cat_ranges_with_batchreads_1_sends_as_many_reads_to_a_compound_as_fit(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    fs = fsspec.filesystem("nfs", host=ganesha.host, port=ganesha.port, batchreads=1)
    root, local = export_path.remote, export_path.local
    data = os.urandom(300 * FAR)
    (local / "columns.parquet").write_bytes(data)
    starts = [i * FAR + 7 for i in range(300)]
    ends = [s + 4093 for s in starts]
    client = fs.client
    per_compound = client.client.nfs.per_compound()
    fs.info(f"{root}/columns.parquet")  # (the directory's handle known, as after any first call there)
    got, rpcs, ops = counted(client, lambda: fs.cat_ranges([f"{root}/columns.parquet"] * 300, starts, ends))
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=True)]
    assert ops["READ"] == 300
    # each COMPOUND finds the file by its name itself (PUTFH of the directory, LOOKUP, READs): no
    # round trip of its own for the file's handle
    compounds = -(-300 // (per_compound - 1))
    assert rpcs <= compounds + AGED and ops["LOOKUP"] == rpcs, (rpcs, per_compound, ops)
    # a symbolic link to it is read the longer way: looked up (followed) first, then its handle read
    (local / "link.parquet").symlink_to("columns.parquet")
    got, rpcs, ops = counted(client, lambda: fs.cat_ranges([f"{root}/link.parquet"] * 300, starts, ends))
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=True)]
    # ranges of several files, some past the end, one from the end, one of a file not there
    (local / "other").write_bytes(b"0123456789")
    paths = [f"{root}/other", f"{root}/columns.parquet", f"{root}/nope", f"{root}/other", f"{root}/other"]
    got = fs.cat_ranges(paths, [2, 5, 0, 8, -3], [4, 9, 1, 100, None])
    assert got[:2] == [b"23", data[5:9]] and got[3:] == [b"89", b"789"]
    assert isinstance(got[2], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges(paths, 0, 1, on_error="raise")
    # a range larger than one READ is cut to READs, and joined again
    big = fs.cat_ranges([f"{root}/columns.parquet"] * 2, [1, 7], [len(data) - 1, 9])
    assert big == [data[1:-1], data[7:9]]


def test_many_paths_at_once(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root, local = export_path.remote, export_path.local
    files = {f"{root}/t/d{i % 5}/f{i:03d}": os.urandom(100 + i) for i in range(100)}
    for d in range(5):
        fs.makedirs(f"{root}/t/d{d}")
    client = fs.client

    _, rpcs, ops = counted(client, lambda: fs.pipe(files))
    assert ops["OPEN"] == ops["WRITE"] == 100 and rpcs <= 100 + 5 + AGED  # (each directory looked up once)
    for p, v in files.items():
        assert (local / p.removeprefix(root + "/")).read_bytes() == v

    got, rpcs, ops = counted(client, lambda: fs.cat(list(files)))
    assert got == files and ops["READ"] == 100 and rpcs <= 100 + AGED

    found, rpcs, ops = counted(client, lambda: fs.find(f"{root}/t"))
    assert found == sorted(files)
    # (the top's attributes, its READDIR, then the five directories' READDIRs in one COMPOUND)
    assert ops["READDIR"] == 6 and rpcs <= 3 + AGED, (rpcs, ops)

    total, rpcs, ops = counted(client, lambda: fs.du(f"{root}/t"))
    assert total == sum(len(v) for v in files.values())
    assert rpcs <= 3 + AGED and "READ" not in ops  # the listings' sizes: no GETATTR (nor OPEN) for each file

    _, rpcs, ops = counted(client, lambda: fs.rm(f"{root}/t", recursive=True))
    assert not (local / "t").exists()
    assert ops["REMOVE"] == 106 and rpcs < 40, (rpcs, ops)  # several REMOVEs of a directory to a COMPOUND


def test_walk_lists_each_level_at_once(fs: fsspec.AbstractFileSystem, export_path: ExportPath) -> None:
    root, local = export_path.remote, export_path.local
    for i in range(4):
        for j in range(3):
            (local / "w" / f"a{i}" / f"b{j}").mkdir(parents=True)
            (local / "w" / f"a{i}" / f"b{j}" / "f").write_bytes(b"x" * (i + j))
        (local / "w" / f"a{i}" / "g").write_bytes(b"yy")
    (local / "w" / "link").symlink_to("a0")
    client = fs.client
    fs.ls(f"{root}/w")  # (the top's handle known, as after any first call there)

    walked, rpcs, ops = counted(client, lambda: list(fs.walk(f"{root}/w", detail=True)))
    dirs_walked = [d for d, _, _ in walked]
    assert sorted(dirs_walked) == sorted([f"{root}/w"] + [f"{root}/w/a{i}" for i in range(4)] +
                                         [f"{root}/w/a{i}/b{j}" for i in range(4) for j in range(3)])
    assert [d.count("/") for d in dirs_walked] == sorted(d.count("/") for d in dirs_walked)  # level by level
    by_dir = {d: (dirs, files) for d, dirs, files in walked}
    assert sorted(by_dir[f"{root}/w"][0]) == ["a0", "a1", "a2", "a3", "link"]  # the link is listed, not walked into
    assert by_dir[f"{root}/w/a2/b1"][1]["f"]["size"] == 3
    # each directory one READDIR, a level's several to a COMPOUND; no GETATTR for an entry, only the
    # link's target is looked up
    room = client.client.nfs.batched.readdirs_per_compound()
    assert ops["READDIR"] == 17 and ops.get("GETATTR", 0) == ops.get("LOOKUP", 0) <= 2, ops
    assert rpcs <= 1 + -(-4 // room) + -(-12 // room) + 2 + AGED, (rpcs, room, ops)

    # pruning the directories of one level prunes the next (topdown), and bottom-up comes deepest first
    seen = []
    for d, dirs, _ in fs.walk(f"{root}/w"):
        seen.append(d)
        if d == f"{root}/w":
            dirs[:] = ["a1"]
    assert sorted(seen) == sorted([f"{root}/w", f"{root}/w/a1"] + [f"{root}/w/a1/b{j}" for j in range(3)])
    up = [d for d, _, _ in fs.walk(f"{root}/w", topdown=False, maxdepth=2)]
    assert up[-1] == f"{root}/w" and sorted(up[:-1]) == [f"{root}/w/a{i}" for i in range(4)]
    assert [w for w in fs.walk(f"{root}/w/a0/g")] == [(f"{root}/w/a0/g", [], [""])]  # a file, as fsspec's walk

    # what the user sees of a directory that cannot be listed: nothing, their callable, or the error
    assert list(fs.walk(f"{root}/nope")) == []
    errors: list[OSError] = []
    list(fs.walk(f"{root}/nope", on_error=errors.append))
    assert isinstance(errors[0], FileNotFoundError)
    with pytest.raises(FileNotFoundError, match="nope"):
        list(fs.walk(f"{root}/nope", on_error="raise"))


def test_a_directory_gone_from_a_batch_of_listings_has_its_error(
    fs: fsspec.AbstractFileSystem, export_path: ExportPath
) -> None:
    root, local = export_path.remote, export_path.local
    for d in range(5):
        (local / "g" / f"d{d}").mkdir(parents=True)
        for f in range(d + 1):
            (local / "g" / f"d{d}" / f"f{f}").write_bytes(b"x" * f)
    client = fs.client
    fs.ls(f"{root}/g")  # (the directories' handles known: READDIR brought them)
    for f in (local / "g" / "d2").iterdir():
        f.unlink()
    (local / "g" / "d2").rmdir()  # (gone after its handle was had: the server calls it stale)

    got, rpcs, ops = counted(client, lambda: client.scandir_many([f"{root}/g/d{d}" for d in range(5)]))
    assert isinstance(got[2], OSError) and "d2" in str(got[2])
    for d in (0, 1, 3, 4):
        assert sorted(e.name for e in got[d]) == [f"f{f}" for f in range(d + 1)], got[d]
        assert {e.name: e.stat().st_size for e in got[d]} == {f"f{f}": f for f in range(d + 1)}
    # one COMPOUND stopped at the stale directory; the others went again in a second one
    assert rpcs <= 2 + AGED and ops["READDIR"] >= 4, (rpcs, ops)


async def test_the_calls_are_in_flight_together(proxied_paths: Any, export_path: ExportPath) -> None:
    paths = await proxied_paths(count=1)
    paths[0].delay(30)  # every reply 30 ms late: calls sent one after another never overlap
    (export_path.local / "d").mkdir()
    for i in range(20):
        (export_path.local / f"d/f{i}").write_bytes(bytes([i]) * 10)
    root = export_path.remote
    fs = NFSFileSystem(host=paths[0].address, port=paths.port, skip_instance_cache=True)
    peak = [0]

    def run() -> dict[str, Any]:
        fs.ls(f"{root}/d")
        session = fs.client.client.clientid.session
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], session.table.in_use)
                stop.wait(0.002)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            return fs.cat([f"{root}/d/f{i}" for i in range(20)])
        finally:
            stop.set()
            watcher.join()

    got = await trio.to_thread.run_sync(run)
    assert got == {f"{root}/d/f{i}": bytes([i]) * 10 for i in range(20)}
    assert peak[0] > 1  # several of the 20 READs waited for their replies at once
    await trio.to_thread.run_sync(fs.client.close)
