"""LOCK, LOCKT, LOCKU, CB_NOTIFY_LOCK (RFC 8881 18.10-18.12, 20.11) and SEEK, ALLOCATE, DEALLOCATE,
COPY, CLONE, LAYOUTERROR, LAYOUTSTATS (RFC 7862 section 15): encodings computed by hand from the RFCs' XDR, numbers included
(operation numbers, lock types, statuses), then decoded back."""

from __future__ import annotations

from typing import Any

from pynfsrdma._proto.nfs4.callback import CB_NOTIFY_LOCK4args, nfs_cb_argop4, nfs_cb_resop4
from pynfsrdma._proto.nfs4.compound import ResOp, nfs_argop4, nfs_resop4
from pynfsrdma._proto.nfs4.types import (
    ALLOCATE4args,
    CLONE4args,
    COPY4args,
    COPY4resok,
    DEALLOCATE4args,
    LAYOUTERROR4args,
    LAYOUTSTATS4args,
    LOCK4args,
    LOCK4resok,
    LOCKT4args,
    LOCKU4args,
    SEEK4args,
    copy_requirements4,
    device_error4,
    exist_lock_owner4,
    io_info4,
    layoutupdate4,
    lock_owner4,
    open_to_lock_owner4,
    seek_res4,
    stateid4,
    write_response4,
)
from pynfsrdma._xdr import XdrType

OPEN = stateid4(1, b"O" * 12)
LOCKSID = stateid4(3, b"L" * 12)
OWNER = lock_owner4(0x1122334455667788, b"own")
ALL_ONES = 0xFFFFFFFFFFFFFFFF


def w(*words: int) -> bytes:
    return b"".join(x.to_bytes(4, "big") for x in words)


def u64(x: int) -> bytes:
    return x.to_bytes(8, "big")


def sid(s: stateid4) -> bytes:
    return w(s.seqid) + s.other


OWNER_BYTES = w(0x11223344, 0x55667788, 3) + b"own\0"


def both_ways(t: XdrType[Any], value: Any, data: bytes) -> None:
    assert t.encode(value) == data
    assert t.decode(data) == value


def test_lock_with_a_new_lock_owner_and_with_its_stateid() -> None:
    first = LOCK4args(2, False, 16, ALL_ONES, (True, open_to_lock_owner4(0, OPEN, 0, OWNER)))
    both_ways(nfs_argop4, first,
              w(12, 2, 0) + u64(16) + u64(ALL_ONES)  # OP_LOCK, WRITE_LT, not a reclaim, offset, length
              + w(1) + w(0) + sid(OPEN) + w(0) + OWNER_BYTES)  # new_lock_owner TRUE: open_to_lock_owner4
    later = LOCK4args(3, True, 0, 10, (False, exist_lock_owner4(LOCKSID, 0)))
    both_ways(nfs_argop4, later, w(12, 3, 1) + u64(0) + u64(10) + w(0) + sid(LOCKSID) + w(0))  # READW_LT
    both_ways(nfs_resop4, ResOp(12, 0, LOCK4resok(LOCKSID)), w(12, 0) + sid(LOCKSID))


def test_lockt_and_locku() -> None:
    both_ways(nfs_argop4, LOCKT4args(1, 5, 6, OWNER), w(13, 1) + u64(5) + u64(6) + OWNER_BYTES)
    both_ways(nfs_resop4, ResOp(13, 0, None), w(13, 0))
    both_ways(nfs_argop4, LOCKU4args(2, 0, LOCKSID, 0, ALL_ONES), w(14, 2, 0) + sid(LOCKSID) + u64(0) + u64(ALL_ONES))
    both_ways(nfs_resop4, ResOp(14, 0, stateid4(4, b"L" * 12)), w(14, 0, 4) + b"L" * 12)


def test_cb_notify_lock() -> None:
    both_ways(nfs_cb_argop4, CB_NOTIFY_LOCK4args(b"FH", OWNER), w(13, 2) + b"FH\0\0" + OWNER_BYTES)
    both_ways(nfs_cb_resop4, ResOp(13, 0, None), w(13, 0))


def test_seek() -> None:
    both_ways(nfs_argop4, SEEK4args(OPEN, 4096, 1), w(69) + sid(OPEN) + u64(4096) + w(1))  # NFS4_CONTENT_HOLE
    both_ways(nfs_resop4, ResOp(69, 0, seek_res4(True, 8192)), w(69, 0, 1) + u64(8192))
    both_ways(nfs_resop4, ResOp(69, 6, None), w(69, 6))  # NFS4ERR_NXIO: no result


def test_allocate_deallocate_clone() -> None:
    both_ways(nfs_argop4, ALLOCATE4args(OPEN, 0, 1 << 20), w(59) + sid(OPEN) + u64(0) + u64(1 << 20))
    both_ways(nfs_argop4, DEALLOCATE4args(OPEN, 10, 20), w(62) + sid(OPEN) + u64(10) + u64(20))
    both_ways(nfs_argop4, CLONE4args(OPEN, LOCKSID, 1, 2, 0),
              w(71) + sid(OPEN) + sid(LOCKSID) + u64(1) + u64(2) + u64(0))
    for op in (59, 62, 71):
        both_ways(nfs_resop4, ResOp(op, 0, None), w(op, 0))
        both_ways(nfs_resop4, ResOp(op, 10004, None), w(op, 10004))  # NFS4ERR_NOTSUPP


def test_copy() -> None:
    args = COPY4args(OPEN, LOCKSID, 100, 200, 300, True, True, [])
    both_ways(nfs_argop4, args,
              w(60) + sid(OPEN) + sid(LOCKSID) + u64(100) + u64(200) + u64(300) + w(1, 1, 0))
    ok = COPY4resok(write_response4([], 300, 0, b"verifier"), copy_requirements4(True, True))
    both_ways(nfs_resop4, ResOp(60, 0, ok), w(60, 0, 0) + u64(300) + w(0) + b"verifier" + w(1, 1))  # UNSTABLE4
    both_ways(nfs_resop4, ResOp(60, 10094, copy_requirements4(False, True)), w(60, 10094, 0, 1))  # OFFLOAD_NO_REQS


def test_layouterror_of_a_block_device_read() -> None:
    # RFC 7862 15.6: LAYOUTERROR (64) of 1 MiB at 4096 under a layout stateid: one device_error4 (the
    # 16-byte deviceid, NFS4ERR_IO = 5, the operation that failed: READ = 25)
    layout = stateid4(2, b"Y" * 12)
    dev = bytes(range(16))
    args = LAYOUTERROR4args(4096, 1 << 20, layout, [device_error4(dev, 5, 25)])
    data = w(64) + u64(4096) + u64(1 << 20) + sid(layout) + w(1) + dev + w(5, 25)
    both_ways(nfs_argop4, args, data)
    both_ways(nfs_resop4, ResOp(64, 0, None), w(64, 0))
    both_ways(nfs_resop4, ResOp(64, 10004, None), w(64, 10004))  # NFS4ERR_NOTSUPP: what nfsd answers


def test_layoutstats_bytes() -> None:
    # RFC 7862 15.7: LAYOUTSTATS (65): reads and writes (count, bytes), the device, an opaque update
    layout = stateid4(2, b"Y" * 12)
    dev = b"D" * 16
    args = LAYOUTSTATS4args(0, ALL_ONES, layout, io_info4(3, 12288), io_info4(1, 4096), dev,
                            layoutupdate4(3, b"xy"))  # LAYOUT4_BLOCK_VOLUME
    data = (w(65) + u64(0) + u64(ALL_ONES) + sid(layout) + u64(3) + u64(12288) + u64(1) + u64(4096) + dev
            + w(3, 2) + b"xy\0\0")
    both_ways(nfs_argop4, args, data)
