"""The flexfiles layout's bodies (RFC 8435 sections 4-5) and the NFSv3 calls to its data servers
(RFC 1813 READ, WRITE, COMMIT): encodings computed by hand from the RFCs' XDR, in the shapes Linux
nfsd writes them (fs/nfsd/flexfilelayoutxdr.c: one mirror of one data server, one file handle, the
synthetic uid and gid as decimal strings, a zero stateid), then decoded back."""

from __future__ import annotations

from typing import Any

import pytest

from pynfsrdma._proto import nfs3
from pynfsrdma._proto.nfs4.const import layouttype4
from pynfsrdma._proto.nfs4.layout_flexfiles import (
    ff_data_server4,
    ff_device_addr4,
    ff_device_versions4,
    ff_flags4,
    ff_layout4,
    ff_mirror4,
)
from pynfsrdma._proto.nfs4.types_base import netaddr4, stateid4
from pynfsrdma._xdr import Packer, XdrError, XdrType

DEV = bytes(range(16))
FH = bytes(range(100, 128))  # 28 bytes: a whole number of words


def w(*words: int) -> bytes:
    return b"".join(x.to_bytes(4, "big") for x in words)


def u64(x: int) -> bytes:
    return x.to_bytes(8, "big")


def s(text: bytes) -> bytes:
    return w(len(text)) + text + b"\0" * (-len(text) % 4)


def both_ways(t: XdrType[Any], value: Any, data: bytes) -> None:
    assert t.encode(value) == data
    assert t.decode(data) == value


def test_flex_files_is_layout_type_4() -> None:
    assert layouttype4.LAYOUT4_FLEX_FILES == 4


def test_nfsds_layout_one_mirror_one_data_server() -> None:
    flags = ff_flags4.FF_FLAGS_NO_LAYOUTCOMMIT | ff_flags4.FF_FLAGS_NO_IO_THRU_MDS | ff_flags4.FF_FLAGS_NO_READ_IO
    value = ff_layout4(0, [ff_mirror4([ff_data_server4(DEV, 1, stateid4(0, bytes(12)), [FH], "0", "0")])],
                       int(flags), 0)
    data = (u64(0) + w(1) + w(1) + DEV + w(1) + w(0) + bytes(12) + w(1) + s(FH) + s(b"0") + s(b"0")
            + w(7) + w(0))
    both_ways(ff_layout4.XDR, value, data)


def test_a_read_layouts_uid_is_the_owners_plus_one() -> None:
    # nfsd gives an IOMODE_READ layout the owner's uid + 1 (no write permission); the strings decode as given
    ds = ff_data_server4.XDR.decode(DEV + w(1) + w(0) + bytes(12) + w(1) + s(FH) + s(b"1001") + s(b"100"))
    assert (ds.ffds_user, ds.ffds_group) == ("1001", "100")


def test_two_mirrors_of_two_data_servers_each() -> None:
    def ds(n: int) -> ff_data_server4:
        return ff_data_server4(bytes([n]) * 16, n, stateid4(n, bytes([n]) * 12), [bytes([n]) * 5], str(n), str(n))

    value = ff_layout4(1 << 20, [ff_mirror4([ds(1), ds(2)]), ff_mirror4([ds(3), ds(4)])],
                       int(ff_flags4.FF_FLAGS_WRITE_ONE_MIRROR), 5)
    enc = ff_layout4.XDR.encode(value)
    assert ff_layout4.XDR.decode(enc) == value
    # 8 (unit) + 4 (mirrors) + 2 * (4 + 2 * ds) + 4 + 4; a ds: 16 + 4 + 16 + 4 + (4 + 8) + 8 + 8
    assert len(enc) == 8 + 4 + 2 * (4 + 2 * 68) + 8


def test_nfsds_device_address_one_netaddr_version_3() -> None:
    value = ff_device_addr4([netaddr4("tcp", "192.0.2.1.8.1")], [ff_device_versions4(3, 0, 1 << 20, 1 << 20, False)])
    data = w(1) + s(b"tcp") + s(b"192.0.2.1.8.1") + w(1) + w(3, 0, 1 << 20, 1 << 20, 0)
    both_ways(ff_device_addr4.XDR, value, data)


def test_a_truncated_layout_is_an_error() -> None:
    enc = ff_layout4.XDR.encode(ff_layout4(0, [ff_mirror4([])], 0, 0))
    with pytest.raises(XdrError):
        ff_layout4.XDR.decode(enc[:-1])


def test_nfsv3_procedures_and_statuses() -> None:
    assert (nfs3.NFS_PROGRAM, nfs3.NFS_V3) == (100003, 3)
    assert (nfs3.nfsproc3.NFSPROC3_READ, nfs3.nfsproc3.NFSPROC3_WRITE, nfs3.nfsproc3.NFSPROC3_COMMIT) == (6, 7, 21)
    assert nfs3.status_name(13) == "NFS3ERR_ACCES"
    assert nfs3.status_name(70) == "NFS3ERR_STALE"
    assert nfs3.status_name(12345) == "NFSv3 status 12345"


def test_read3_args() -> None:
    both_ways(nfs3.READ3args.XDR, nfs3.READ3args(FH, 1 << 33, 65536), s(FH) + u64(1 << 33) + w(65536))


def _fattr3() -> tuple[nfs3.fattr3, bytes]:
    t = nfs3.nfstime3(1700000000, 5)
    value = nfs3.fattr3(1, 0o644, 1, 0, 0, 12345, 16384, nfs3.specdata3(0, 0), 7, 99, t, t, t)
    data = w(1, 0o644, 1, 0, 0) + u64(12345) + u64(16384) + w(0, 0) + u64(7) + u64(99) + w(1700000000, 5) * 3
    return value, data


def test_read3_ok_data_is_a_view_of_the_reply() -> None:
    attrs, attr_bytes = _fattr3()
    reply = w(0) + w(1) + attr_bytes + w(5) + w(1) + s(b"hello")
    status, ok = nfs3.READ3res.decode(reply)
    assert status == nfs3.nfsstat3.NFS3_OK
    assert ok.file_attributes == attrs and ok.count == 5 and ok.eof is True
    assert isinstance(ok.data, memoryview) and bytes(ok.data) == b"hello"


def test_read3_failure_carries_only_attributes() -> None:
    status, fail = nfs3.READ3res.decode(w(13) + w(0))
    assert status == nfs3.nfsstat3.NFS3ERR_ACCES
    assert fail.file_attributes is None


def test_write3_args_send_the_callers_buffer_by_reference() -> None:
    data = bytearray(b"x" * 4099)
    p = Packer()
    nfs3.WRITE3args.XDR.pack(p, nfs3.WRITE3args(FH, 4096, len(data), nfs3.stable_how.UNSTABLE, data))
    segments = p.segments()
    # the data goes as a segment of its own that is the caller's memory, not a copy of it
    assert any(isinstance(seg, memoryview) and seg.obj is data for seg in segments)
    assert b"".join(bytes(seg) for seg in segments) == (
        s(FH) + u64(4096) + w(4099) + w(0) + w(4099) + bytes(data) + b"\0")


def test_write3_ok_and_failure() -> None:
    _, attr_bytes = _fattr3()
    wcc = w(1) + u64(12345) + w(1, 2, 3, 4) + w(1) + attr_bytes
    status, ok = nfs3.WRITE3res.decode(w(0) + wcc + w(4099) + w(2) + b"verifier")
    assert status == 0 and ok.count == 4099 and ok.committed == nfs3.stable_how.FILE_SYNC and ok.verf == b"verifier"
    assert ok.file_wcc.before.size == 12345
    status, fail = nfs3.WRITE3res.decode(w(70) + w(0) + w(0))
    assert status == nfs3.nfsstat3.NFS3ERR_STALE and fail.before is None and fail.after is None


def test_commit3() -> None:
    both_ways(nfs3.COMMIT3args.XDR, nfs3.COMMIT3args(FH, 0, 0), s(FH) + u64(0) + w(0))
    status, ok = nfs3.COMMIT3res.decode(w(0) + w(0) + w(0) + b"12345678")
    assert status == 0 and ok.verf == b"12345678"
