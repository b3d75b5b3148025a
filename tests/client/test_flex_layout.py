"""The flexfiles layout's decisions (RFC 8435), sans-I/O: the layout body checked as decoded from
nfsd's bytes, which data servers a READ (one mirror) and a WRITE (every mirror) go to and how a
striped mirror cuts them, the flags' rules, the device address, and LAYOUTERROR's status."""

from __future__ import annotations

import pytest

from pynfsrdma._client.data_servers import DataServerError, host_port
from pynfsrdma._client.flex_layout import (
    BadLayout,
    DataServer,
    DsIO,
    flex_body,
    plan_read,
    plan_write,
    reads_by_layout,
    wants_layoutcommit,
)
from pynfsrdma._client.flex_layouts import device_address, layouterror_status
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.layout_flexfiles import (
    ff_data_server4,
    ff_device_addr4,
    ff_device_versions4,
    ff_flags4,
    ff_layout4,
    ff_mirror4,
)
from pynfsrdma._proto.nfs4.types_base import netaddr4, stateid4

SID = stateid4(0, bytes(12))
NFSD_FLAGS = int(ff_flags4.FF_FLAGS_NO_LAYOUTCOMMIT | ff_flags4.FF_FLAGS_NO_IO_THRU_MDS | ff_flags4.FF_FLAGS_NO_READ_IO)


def ds(n: int, user: str = "0", group: str = "0", efficiency: int = 1) -> ff_data_server4:
    return ff_data_server4(bytes([n]) * 16, efficiency, SID, [bytes([n]) * 8], user, group)


def test_nfsds_layout_one_data_server_the_synthetic_owner() -> None:
    body = flex_body(ff_layout4(0, [ff_mirror4([ds(1, "1001", "100")])], NFSD_FLAGS, 0))
    assert body.mirrors == ((DataServer(b"\1" * 16, b"\1" * 8, 1001, 100, 1),),)
    # one data server: a READ or WRITE goes whole to it, at the file's own offset
    assert plan_read(body, 5000, 70000) == [DsIO(body.mirrors[0][0], 0, 5000, 70000)]
    assert plan_write(body, 5000, 70000) == [DsIO(body.mirrors[0][0], 0, 5000, 70000)]


@pytest.mark.parametrize("layout, why", [
    (ff_layout4(0, [], 0, 0), "no mirror"),
    (ff_layout4(0, [ff_mirror4([])], 0, 0), "no data server"),
    (ff_layout4(0, [ff_mirror4([ff_data_server4(b"\1" * 16, 1, SID, [], "0", "0")])], 0, 0), "no file handle"),
    (ff_layout4(0, [ff_mirror4([ds(1, "nobody@example")])], 0, 0), "uid is not a number: 'nobody@example'"),
    (ff_layout4(0, [ff_mirror4([ds(1, "0", "4294967296")])], 0, 0), "gid is out of range"),
    (ff_layout4(0, [ff_mirror4([ds(1), ds(2)])], 0, 0), "stripe unit of 0"),
])
def test_a_layout_no_io_can_go_by(layout: ff_layout4, why: str) -> None:
    with pytest.raises(BadLayout, match=why):
        flex_body(layout)


def test_reads_from_the_most_efficient_mirror_writes_to_every_mirror() -> None:
    body = flex_body(ff_layout4(0, [ff_mirror4([ds(1, efficiency=2)]), ff_mirror4([ds(2, efficiency=9)])], 0, 0))
    assert [io.server.deviceid[0] for io in plan_read(body, 0, 100)] == [2]
    assert [io.server.deviceid[0] for io in plan_write(body, 0, 100)] == [1, 2]
    assert [io.mirror for io in plan_write(body, 0, 100)] == [0, 1]


def test_write_one_mirror_writes_the_first_only() -> None:
    body = flex_body(ff_layout4(0, [ff_mirror4([ds(1)]), ff_mirror4([ds(2)])],
                                int(ff_flags4.FF_FLAGS_WRITE_ONE_MIRROR), 0))
    assert [io.server.deviceid[0] for io in plan_write(body, 0, 100)] == [1]


def test_a_striped_mirror_cuts_at_stripe_unit_boundaries() -> None:
    body = flex_body(ff_layout4(4096, [ff_mirror4([ds(1), ds(2), ds(3)])], 0, 0))
    plan = plan_read(body, 3000, 10000)  # 3000..4096 on 1, 4096..8192 on 2, 8192..12288 on 3, 12288..13000 on 1
    assert [(io.server.deviceid[0], io.offset, io.length) for io in plan] == [
        (1, 3000, 1096), (2, 4096, 4096), (3, 8192, 4096), (1, 12288, 712)]
    assert sum(io.length for io in plan) == 10000


def test_nfsds_rw_layout_serves_writes_only_and_wants_no_layoutcommit() -> None:
    body = flex_body(ff_layout4(0, [ff_mirror4([ds(1)])], NFSD_FLAGS, 0))
    assert reads_by_layout(body, iomode_rw=True) is False
    assert reads_by_layout(body, iomode_rw=False) is True
    assert wants_layoutcommit(body) is False
    plain = flex_body(ff_layout4(0, [ff_mirror4([ds(1)])], 0, 0))
    assert reads_by_layout(plain, iomode_rw=True) is True
    assert wants_layoutcommit(plain) is True


def test_nfsds_device_address() -> None:
    dev = device_address(ff_device_addr4([netaddr4("tcp", "192.0.2.1.8.1")],
                                         [ff_device_versions4(3, 0, 262144, 262144, False)]))
    assert (dev.where, dev.rsize, dev.wsize) == (("192.0.2.1", 2049), 262144, 262144)


def test_device_addresses_no_io_can_go_to() -> None:
    with pytest.raises(BadLayout, match=r"speaks no NFSv3 \(versions: 4.1\)"):
        device_address(ff_device_addr4([netaddr4("tcp", "192.0.2.1.8.1")], [ff_device_versions4(4, 1, 1, 1, True)]))
    with pytest.raises(BadLayout, match="no TCP address"):
        device_address(ff_device_addr4([netaddr4("rdma", "192.0.2.1.78.81")], [ff_device_versions4(3, 0, 1, 1, False)]))


def test_universal_addresses() -> None:
    assert host_port(netaddr4("tcp6", "fe80::1.8.1")) == ("fe80::1", 2049)
    assert host_port(netaddr4("tcp", "127.0.0.1.78.81")) == ("127.0.0.1", 20049)


def test_layouterror_status_of_a_data_servers_failure() -> None:
    assert layouterror_status(DataServerError("refused")) == c.NFS4ERR_NXIO
    assert layouterror_status(DataServerError("x", 13)) == c.NFS4ERR_ACCESS
    assert layouterror_status(DataServerError("x", 70)) == c.NFS4ERR_STALE
    assert layouterror_status(DataServerError("x", 10008)) == c.NFS4ERR_IO  # JUKEBOX: no NFSv4 twin
