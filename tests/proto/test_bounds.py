"""Every number a server sends that sizes something is bounded where it is decoded: the largest
allowed value decodes, one past it is an XdrError (a clean protocol error) raised before anything is
made from it, and quickly (a bound that allocated first would take seconds and gigabytes here)."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import pytest

from pynfsrdma._client.attributes import decode_entry_attrs
from pynfsrdma._proto import rpcrdma
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.attrs import encode_fattr4
from pynfsrdma._proto.nfs4.types import (
    GETFH4resok,
    channel_attrs4,
    dirlist4,
    fattr4,
    nfstime4,
)
from pynfsrdma._xdr import Packer, XdrError

U32 = struct.Struct(">I").pack


def quickly(fn: Callable[[], Any]) -> Any:
    start = time.monotonic()
    try:
        return fn()
    finally:
        assert time.monotonic() - start < 1.0, "the bound was checked after the work it bounds"


def refused(fn: Callable[[], Any], match: str) -> None:
    with pytest.raises(XdrError, match=match):
        quickly(fn)


def channel(maxrequests: int) -> bytes:
    p = Packer()
    for v in (0, 1 << 20, 1 << 20, 0, 16, maxrequests, 0):  # ..., ca_maxrequests, no ca_rdma_ird
        p.uint32(v)
    return p.getvalue()


def test_slot_count_bound() -> None:
    assert channel_attrs4.XDR.decode(channel(c.NFS4_SLOTS_MAX)).ca_maxrequests == c.NFS4_SLOTS_MAX
    refused(lambda: channel_attrs4.XDR.decode(channel(c.NFS4_SLOTS_MAX + 1)), "ca_maxrequests")
    refused(lambda: channel_attrs4.XDR.decode(channel(0xFFFFFFFF)), "ca_maxrequests")


def test_nfstime4_nseconds_below_one_second() -> None:
    assert nfstime4.XDR.decode(struct.pack(">qI", 5, c.NFS4_NSECONDS_MAX)).nseconds == 999_999_999
    refused(lambda: nfstime4.XDR.decode(struct.pack(">qI", 5, c.NFS4_NSECONDS_MAX + 1)), "nseconds")
    with pytest.raises(XdrError):  # and we never send one
        nfstime4.XDR.encode(nfstime4(5, 1_000_000_000))


def test_nfstime4_nseconds_in_stat_attributes() -> None:
    """The straight-line decoder of a GETATTR's attributes checks the times too."""

    def attrs(nseconds: int) -> fattr4:
        f = encode_fattr4({c.FATTR4_TYPE: c.NF4REG, c.FATTR4_FILEID: 7, c.FATTR4_TIME_MODIFY: nfstime4(9, 0)})
        vals = bytearray(f.attr_vals)
        struct.pack_into(">I", vals, len(vals) - 4, nseconds)  # time_modify is the last value
        return fattr4(f.attrmask, bytes(vals))

    a, _ = decode_entry_attrs(attrs(c.NFS4_NSECONDS_MAX))
    assert a is not None and a.mtime_ns == 9 * 10**9 + c.NFS4_NSECONDS_MAX
    refused(lambda: decode_entry_attrs(attrs(c.NFS4_NSECONDS_MAX + 1)), "nseconds")


def bitmap_fattr(words: int) -> bytes:
    return U32(words) + U32(0) * words + U32(0)  # bitmap4, then an empty attrlist4


def test_bitmap4_words_bound() -> None:
    assert fattr4.XDR.decode(bitmap_fattr(c.NFS4_BITMAP4_WORDS_MAX)).attrmask == [0] * c.NFS4_BITMAP4_WORDS_MAX
    refused(lambda: fattr4.XDR.decode(bitmap_fattr(c.NFS4_BITMAP4_WORDS_MAX + 1)), "bound")
    refused(lambda: fattr4.XDR.decode(U32(0xFFFFFFFF)), "bound")


def entries(n: int, words: int = 1) -> bytes:
    one = U32(1) + struct.pack(">Q", 3) + U32(1) + b"a\0\0\0" + bitmap_fattr(words)
    return one * n + U32(0) + U32(1)  # end of the list, eof


def test_dirlist4_entries_bound() -> None:
    assert len(dirlist4.XDR.decode(entries(c.NFS4_DIRLIST4_ENTRIES_MAX)).entries) == c.NFS4_DIRLIST4_ENTRIES_MAX
    refused(lambda: dirlist4.XDR.decode(entries(c.NFS4_DIRLIST4_ENTRIES_MAX + 1)), "dirlist4")


def test_dirlist4_entry_bitmap_bound() -> None:
    assert len(dirlist4.XDR.decode(entries(2, c.NFS4_BITMAP4_WORDS_MAX)).entries) == 2
    refused(lambda: dirlist4.XDR.decode(entries(2, c.NFS4_BITMAP4_WORDS_MAX + 1)), "bitmap4")


def test_file_handle_bound() -> None:
    def fh(n: int) -> bytes:
        return U32(n) + b"h" * n + b"\0" * (-n & 3)

    assert len(GETFH4resok.XDR.decode(fh(c.NFS4_FHSIZE)).object) == c.NFS4_FHSIZE
    refused(lambda: GETFH4resok.XDR.decode(fh(c.NFS4_FHSIZE + 1)), "bound")
    # a file handle among the attributes of a READDIR entry: the same bound (our encoder refuses to
    # write one too long, so its length word is raised by hand)
    f = encode_fattr4({c.FATTR4_TYPE: c.NF4REG, c.FATTR4_FILEHANDLE: b"h" * c.NFS4_FHSIZE})
    assert decode_entry_attrs(f)[1] == b"h" * c.NFS4_FHSIZE
    vals = bytearray(f.attr_vals) + b"h\0\0\0"
    struct.pack_into(">I", vals, 4, c.NFS4_FHSIZE + 1)  # after the type
    refused(lambda: decode_entry_attrs(fattr4(f.attrmask, bytes(vals))), "bound")


# -- RPC-over-RDMA headers (RFC 8166) ------------------------------------------------------------------------
def segment(length: int) -> rpcrdma.xdr_rdma_segment:
    return rpcrdma.xdr_rdma_segment(7, length, 0)


def header(writes: list[rpcrdma.xdr_write_chunk] | None = None,
           reads: list[rpcrdma.xdr_read_chunk] | None = None) -> bytes:
    return rpcrdma.encode_rdma_msg(
        rpcrdma.rdma_msg(1, 1, 8, (rpcrdma.RDMA_MSG, rpcrdma.rpc_rdma_header(reads or [], writes or [], None)))
    ).getvalue()


def test_rdma_write_list_bound() -> None:
    n = rpcrdma.RPCRDMA_CHUNKS_MAX
    ok = header([rpcrdma.xdr_write_chunk([segment(4)])] * n)
    assert len(rpcrdma.decode_rdma_msg(ok)[0].chunks.rdma_writes) == n
    # one chunk more: spliced in by hand (our encoder refuses to write it)
    chunk = U32(1) + U32(1) + struct.pack(">IIQ", 7, 4, 0)
    bad = ok[:16] + U32(0) + chunk * (n + 1) + U32(0) + U32(0)
    refused(lambda: rpcrdma.decode_rdma_msg(bad), "bound")


def test_rdma_read_list_bound() -> None:
    n = rpcrdma.RPCRDMA_CHUNKS_MAX
    read = rpcrdma.xdr_read_chunk(0, segment(4))
    assert len(rpcrdma.decode_rdma_msg(header(reads=[read] * n))[0].chunks.rdma_reads) == n
    item = U32(1) + U32(0) + struct.pack(">IIQ", 7, 4, 0)
    bad = header()[:16] + item * (n + 1) + U32(0) + U32(0) + U32(0)
    refused(lambda: rpcrdma.decode_rdma_msg(bad), "bound")


def test_rdma_segments_per_chunk_bound() -> None:
    n = rpcrdma.RPCRDMA_SEGMENTS_MAX
    ok = header([rpcrdma.xdr_write_chunk([segment(4)] * n)])
    assert len(rpcrdma.decode_rdma_msg(ok)[0].chunks.rdma_writes[0].target) == n
    bad = header()[:16] + U32(0) + U32(1) + U32(n + 1) + struct.pack(">IIQ", 7, 4, 0) * (n + 1) + U32(0) + U32(0)
    refused(lambda: rpcrdma.decode_rdma_msg(bad), "bound")
    refused(lambda: rpcrdma.decode_rdma_msg(header()[:16] + U32(0) + U32(1) + U32(0xFFFFFFFF)), "bound")


def test_rdma_segment_length_bound() -> None:
    top = rpcrdma.RPCRDMA_SEGMENT_LENGTH_MAX
    ok = header([rpcrdma.xdr_write_chunk([segment(top)])])
    assert rpcrdma.decode_rdma_msg(ok)[0].chunks.rdma_writes[0].target[0].length == top
    bad = header()[:16] + U32(0) + U32(1) + U32(1) + struct.pack(">IIQ", 7, top + 1, 0) + U32(0) + U32(0)
    refused(lambda: rpcrdma.decode_rdma_msg(bad), "segment length")
