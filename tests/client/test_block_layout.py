"""The block layout's extent maths (RFC 5663 2.3): plans applied to a bytearray disk, checked against a
plain bytes model of the file, and the LAYOUTCOMMIT body nfsd's rules accept.

``Disk`` is the device itself, in memory (the layer below is a block device; here it is a bytearray):
a plan is carried out on it the way the block I/O edge carries it out on a real one."""

from __future__ import annotations

import errno

import pytest

from pynfsrdma._client.block_layout import (
    INVALID_DATA,
    NONE_DATA,
    READ_DATA,
    READWRITE_DATA,
    BadLayout,
    CommitList,
    DeviceRead,
    DeviceWrite,
    Extent,
    Uncovered,
    Zeros,
    device_error,
    extents_of,
    own_writes,
    plan_read,
    plan_write,
    written,
)
from pynfsrdma._proto.nfs4.const import nfs_opnum4, nfsstat4
from pynfsrdma._proto.nfs4.layout_block import (
    pnfs_block_extent4,
    pnfs_block_layout4,
    pnfs_block_layoutupdate4,
)

BS = 4096
DEV = b"D" * 16


def body(*ext: tuple[int, int, int, int]) -> pnfs_block_layout4:
    return pnfs_block_layout4([pnfs_block_extent4(DEV, f, n, s, st) for f, n, s, st in ext])


class Disk:
    def __init__(self, size: int) -> None:
        self.b = bytearray(size)

    def read(self, plan: list[DeviceRead | Zeros | Uncovered], offset: int) -> bytes:
        out = bytearray()
        for p in plan:
            assert isinstance(p, DeviceRead | Zeros), p
            assert p.file_offset == offset + len(out)
            if isinstance(p, DeviceRead):
                out += self.b[p.storage_offset:p.storage_offset + p.length]
            else:
                out += bytes(p.length)
        return bytes(out)

    def write(self, plan: list[DeviceWrite | Uncovered], offset: int, data: bytes, ext: list[Extent],
              commit: CommitList) -> None:
        for p in plan:
            assert isinstance(p, DeviceWrite), p
            assert p.file_offset % BS == 0 and p.length % BS == 0 and p.storage_offset % BS == 0
            block = (bytearray(self.b[p.storage_offset:p.storage_offset + p.length]) if p.edges == "device"
                     else bytearray(p.length))
            block[p.data_from - p.file_offset:p.data_to - p.file_offset] = data[p.data_from - offset:p.data_to - offset]
            self.b[p.storage_offset:p.storage_offset + p.length] = block
            written(ext, p.file_offset, p.length)
            commit.add(p)


def test_reads_device_where_data_is_valid_zeros_where_not_and_stop_at_the_size() -> None:
    ext = extents_of(body((0, BS, 8 * BS, READ_DATA), (BS, BS, 0, NONE_DATA), (2 * BS, BS, 9 * BS, INVALID_DATA),
                          (3 * BS, BS, 10 * BS, READWRITE_DATA)), BS)
    disk = Disk(16 * BS)
    disk.b[8 * BS:9 * BS] = b"a" * BS
    disk.b[9 * BS:10 * BS] = b"stale" * (BS // 5) + b"s"  # INVALID_DATA: never read from the device
    disk.b[10 * BS:11 * BS] = b"d" * BS
    size = 3 * BS + 100
    plan = plan_read(ext, 10, 4 * BS, size)
    assert disk.read(plan, 10) == b"a" * (BS - 10) + bytes(2 * BS) + b"d" * 100
    assert plan_read(ext, size, 10, size) == []


def test_a_read_the_layout_does_not_cover_goes_through_the_mds() -> None:
    ext = extents_of(body((BS, BS, 0, READ_DATA)), BS)
    assert plan_read(ext, 0, 3 * BS, 10 * BS) == [
        Uncovered(0, BS), DeviceRead(DEV, BS, 0, BS), Uncovered(2 * BS, BS)]


@pytest.mark.parametrize(("offset", "length"), [(0, 3 * BS), (100, 5000), (BS - 1, 2), (3 * BS - 7, 7), (5, 1)])
def test_writes_into_invalid_then_readwrite_extents_match_a_plain_model(offset: int, length: int) -> None:
    # an RW layout as XFS hands out a new file's blocks: unwritten (INVALID_DATA)
    ext = extents_of(body((0, 4 * BS, 4 * BS, INVALID_DATA)), BS)
    disk = Disk(8 * BS)
    disk.b[:] = b"\xee" * len(disk.b)  # garbage where nothing was ever written
    model = bytearray(4 * BS)
    commit = CommitList()
    for i, (off, n) in enumerate([(offset, length), (offset + length // 2, length), (1, 3)]):
        data = bytes([0x30 + i]) * n
        if off + n > 4 * BS:
            continue
        plan = plan_write(ext, off, n, BS)
        disk.write(plan, off, data, ext, commit)
        model[off:off + n] = data
        # the file reads back as the model, in the layout's view after the writes
        assert disk.read(plan_read(ext, 0, 4 * BS, 4 * BS), 0) == bytes(model)
    assert commit.last_write_offset == max(
        o + n - 1 for o, n in [(offset, length), (offset + length // 2, length), (1, 3)] if o + n <= 4 * BS)


def test_an_unaligned_write_into_readwrite_data_keeps_the_edge_bytes() -> None:
    ext = extents_of(body((0, 2 * BS, 0, READWRITE_DATA)), BS)
    plan = plan_write(ext, 100, 50, BS)
    assert plan == [DeviceWrite(DEV, 0, 0, BS, 100, 150, "device")]
    assert not plan[0].whole
    whole = plan_write(ext, 0, 2 * BS, BS)
    assert [w.whole for w in whole if isinstance(w, DeviceWrite)] == [True]


def test_a_write_over_read_only_or_missing_extents_is_left_to_the_mds() -> None:
    ext = extents_of(body((0, BS, 0, READ_DATA), (BS, BS, BS, INVALID_DATA), (2 * BS, BS, 0, NONE_DATA)), BS)
    plan = plan_write(ext, 0, 4 * BS, BS)
    assert plan == [Uncovered(0, BS), DeviceWrite(DEV, BS, BS, BS, BS, 2 * BS, "zeros"),
                    Uncovered(2 * BS, BS), Uncovered(3 * BS, BS)]


def test_overlapping_unaligned_or_empty_extents_refuse_the_layout() -> None:
    with pytest.raises(BadLayout, match="overlap"):
        extents_of(body((0, 2 * BS, 0, READ_DATA), (BS, BS, 8 * BS, READ_DATA)), BS)
    with pytest.raises(BadLayout, match="aligned"):
        extents_of(body((512, BS, 0, READ_DATA)), BS)
    with pytest.raises(BadLayout, match="empty"):
        extents_of(body((0, 0, 0, READ_DATA)), BS)


def nfsd_accepts(data: bytes, block_size: int) -> bool:
    """nfsd4_block_decode_layoutupdate's checks (fs/nfsd/blocklayoutxdr.c), restated in Python from the C:
    the count matches the length at 44 bytes an extent; every offset and length aligned to the block
    size; every state READWRITE_DATA."""
    n = int.from_bytes(data[:4], "big")
    if n * 44 != len(data) - 4:
        return False
    for i in range(n):
        e = data[4 + 44 * i:4 + 44 * (i + 1)]
        foff, length, soff = (int.from_bytes(e[16 + 8 * k:24 + 8 * k], "big") for k in range(3))
        state = int.from_bytes(e[40:44], "big")
        if (foff | length | soff) % block_size or state != READWRITE_DATA:
            return False
    return True


def test_the_commit_list_merges_writes_and_is_what_nfsd_takes() -> None:
    ext = extents_of(body((0, 8 * BS, 16 * BS, INVALID_DATA)), BS)
    commit = CommitList()
    for off, n in [(0, 10), (BS, BS), (2 * BS + 5, 3), (6 * BS, 100)]:
        for p in plan_write(ext, off, n, BS):
            assert isinstance(p, DeviceWrite)
            written(ext, p.file_offset, p.length)
            commit.add(p)
    upd = commit.body()
    assert [(e.bex_file_offset, e.bex_length, e.bex_storage_offset) for e in upd.blu_commit_list] == [
        (0, 3 * BS, 16 * BS), (6 * BS, BS, 22 * BS)]
    assert commit.range() == (0, 7 * BS)
    assert commit.last_write_offset == 6 * BS + 99
    assert nfsd_accepts(pnfs_block_layoutupdate4.XDR.encode(upd), BS)
    # the extents the commit names read from the device from now on
    assert [e.state for e in ext] == [READWRITE_DATA, INVALID_DATA, READWRITE_DATA, INVALID_DATA]
    commit.clear()
    assert not commit


def test_layouterror_says_gone_full_or_io_and_which_operation_failed() -> None:
    # RFC 7862 15.6: one device_error4 per failed device: its id, a status, the operation
    read_gone = device_error(DEV, OSError(errno.ENXIO, "No such device or address"), nfs_opnum4.OP_READ)
    assert (read_gone.de_deviceid, read_gone.de_status, read_gone.de_opnum) == \
        (DEV, nfsstat4.NFS4ERR_NXIO, nfs_opnum4.OP_READ)
    assert device_error(DEV, OSError(errno.ENODEV, "x"), nfs_opnum4.OP_WRITE).de_status == nfsstat4.NFS4ERR_NXIO
    assert device_error(DEV, None, nfs_opnum4.OP_WRITE).de_status == nfsstat4.NFS4ERR_NXIO  # no device carries it
    full = device_error(DEV, OSError(errno.ENOSPC, "No space left on device"), nfs_opnum4.OP_WRITE)
    assert (full.de_status, full.de_opnum) == (nfsstat4.NFS4ERR_NOSPC, nfs_opnum4.OP_WRITE)
    assert device_error(DEV, OSError(errno.EIO, "Input/output error"), nfs_opnum4.OP_WRITE).de_status == \
        nfsstat4.NFS4ERR_IO


def test_a_layout_granted_before_the_commit_keeps_the_blocks_this_client_wrote() -> None:
    # The Debian 13 guest's restart step, with the extents nfsd 7.3 answered: after the server
    # restart the writer sends the file again; the first of those writes (at 258048) got a layout
    # from there, the next (at 0) a second one from 0, before any LAYOUTCOMMIT. XFS's extents there
    # are still unwritten, so the second layout calls the blocks just written INVALID_DATA, and
    # reading them by it gave zeros (RFC 5663 2.3.2: the client must remember what it wrote).
    disk = Disk(32 << 20)
    size = (16 << 20) + 777
    want = bytes(range(256)) * (size // 256 + 1)
    first = extents_of(body((258048, 10227712, 356352, INVALID_DATA),
                            (10485760, 6295552, 10584064, READWRITE_DATA),
                            (16781312, 253952, 16879616, INVALID_DATA)), BS)
    commit, wrote = CommitList(), CommitList()
    for at, n in ((258048, 4096), (262144, 258048), (520192, 4096)):
        plan = plan_write(first, at, n, BS)
        disk.write(plan, at, want[at:at + n], first, commit)
        for p in plan:
            assert isinstance(p, DeviceWrite)
            wrote.add(p)
    second = extents_of(body((0, 10485760, 98304, INVALID_DATA),
                             (10485760, 6295552, 10584064, READWRITE_DATA)), BS)
    own_writes(second, wrote.extents)
    assert disk.read(plan_read(second, 258048, 266240, size), 258048) == want[258048:524288]
    # an unaligned write into one of those blocks keeps the rest of the block (not zeros)
    disk.write(plan_write(second, 300001, 10, BS), 300001, b"x" * 10, second, commit)
    assert disk.read(plan_read(second, 299008, 8192, size), 299008) == \
        want[299008:300001] + b"x" * 10 + want[300011:307200]
    # the blocks it did not write stay INVALID_DATA, read as zeros
    assert disk.read(plan_read(second, 0, 258048, size), 0) == bytes(258048)


def test_a_layout_on_other_storage_keeps_its_invalid_data() -> None:
    # blocks written at one place on the device say nothing of an extent mapped elsewhere
    first = [Extent(DEV, 0, 1 << 20, 1 << 20, INVALID_DATA)]
    wrote = CommitList()
    for p in plan_write(first, 0, 8192, BS):
        assert isinstance(p, DeviceWrite)
        wrote.add(p)
    moved = [Extent(DEV, 0, 1 << 20, 8 << 20, INVALID_DATA)]
    own_writes(moved, wrote.extents)
    assert [(e.file_offset, e.length, e.state) for e in moved] == [(0, 1 << 20, INVALID_DATA)]
