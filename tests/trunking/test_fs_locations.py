"""Multipath lists out of fs_locations_info and fs_locations, without a network."""

from __future__ import annotations

import pytest

from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.attrs import decode_fattr4, encode_fattr4
from pynfsrdma._proto.nfs4.types import fs_location4, fs_locations4, fs_locations_info4, fs_locations_item4
from pynfsrdma._session.client_id import ServerIdentity
from pynfsrdma._testbed.advertiser import AdvertisedAddress, fs_locations_for, fs_locations_info_for
from pynfsrdma._trunking.discovery import TrunkingOptionError, TrunkingOptions
from pynfsrdma._trunking.fs_locations import (
    Candidate,
    multipath_from_fs_locations,
    multipath_from_fs_locations_info,
    parse_server,
    select_candidates,
)
from pynfsrdma._trunking.verification import Observed, Verdict, decide

LIST = [
    AdvertisedAddress("10.0.0.1", rank=0, order=5),
    AdvertisedAddress("10.0.0.2:2050", rank=1, order=9),
    AdvertisedAddress("10.0.0.3", rank=0, order=7),
    AdvertisedAddress("[fd00::1]:20049", rank=0, order=3, rdma=True),
]


def roundtrip(info: fs_locations_info4) -> fs_locations_info4:
    """Through the attribute codec, as it comes off the wire."""
    attrs = decode_fattr4(encode_fattr4({c.FATTR4_FS_LOCATIONS_INFO: info}))
    out: fs_locations_info4 = attrs[c.FATTR4_FS_LOCATIONS_INFO]
    return out


def test_ranks_orders_and_rdma_flags_are_read() -> None:
    mp = multipath_from_fs_locations_info(roundtrip(fs_locations_info_for(LIST)))
    assert mp.source == "fs_locations_info"
    assert mp.candidates == (
        Candidate("10.0.0.1", None, 0, 5, False),
        Candidate("10.0.0.2", 2050, 1, 9, False),
        Candidate("10.0.0.3", None, 0, 7, False),
        Candidate("fd00::1", 20049, 0, 3, True),
    )


def test_selection_by_transport_rank_then_order_within_max_connect() -> None:
    mp = multipath_from_fs_locations_info(fs_locations_info_for(LIST))
    tcp = select_candidates(mp, rdma=False, default_port=2049, max_connect=16)
    assert [x.address(2049) for x in tcp] == ["10.0.0.3:2049", "10.0.0.1:2049", "10.0.0.2:2050"]
    rdma = select_candidates(mp, rdma=True, default_port=20049, max_connect=16)
    assert [x.address(20049) for x in rdma] == ["[fd00::1]:20049"]
    # the mount's address counts against max_connect and is not added twice
    two = select_candidates(mp, rdma=False, default_port=2049, max_connect=2, exclude=["10.0.0.3:2049"])
    assert [x.address(2049) for x in two] == ["10.0.0.1:2049"]


def test_empty_list_and_absent_attribute_mean_no_multipath() -> None:
    assert not multipath_from_fs_locations_info(roundtrip(fs_locations_info_for([])))
    assert not multipath_from_fs_locations_info(None)
    assert not multipath_from_fs_locations(None)
    assert not multipath_from_fs_locations(fs_locations4([], []))


def test_referrals_and_replica_lists_are_not_trunking_lists() -> None:
    servers = fs_locations_info_for(LIST[:2]).fli_items[0].fli_entries
    other_root = fs_locations_info4(0, 0, ["export"], [fs_locations_item4(servers, [])])
    other_path = fs_locations_info4(0, 0, [], [fs_locations_item4(servers, ["data"])])
    two_items = fs_locations_info4(
        0, 0, [], [fs_locations_item4(servers, []), fs_locations_item4(servers, [])]
    )
    for info in (other_root, other_path, two_items):
        assert not multipath_from_fs_locations_info(info)
    referral = fs_locations4(["export"], [fs_location4(["10.0.0.9"], ["export"])])
    assert not multipath_from_fs_locations(referral)


def test_legacy_fs_locations_list() -> None:
    value = decode_fattr4(encode_fattr4({c.FATTR4_FS_LOCATIONS: fs_locations_for(LIST)}))[
        c.FATTR4_FS_LOCATIONS
    ]
    mp = multipath_from_fs_locations(value)
    assert mp.source == "fs_locations"
    assert [(x.host, x.port, x.rank, x.order, x.rdma) for x in mp.candidates] == [
        ("10.0.0.1", None, 0, 0, False),
        ("10.0.0.2", 2050, 0, 0, False),
        ("10.0.0.3", None, 0, 0, False),
    ]


def test_unusable_names_are_skipped_not_fatal() -> None:
    info = fs_locations_info_for([AdvertisedAddress("10.0.0.1:99999"), AdvertisedAddress("10.0.0.4")])
    assert [x.host for x in multipath_from_fs_locations_info(info).candidates] == ["10.0.0.4"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("server.example", ("server.example", None)),
        ("10.1.2.3:2049", ("10.1.2.3", 2049)),
        ("10.1.2.3.8.1", ("10.1.2.3", 2049)),  # RFC 5665 universal address
        ("[fd00::2]:20049", ("fd00::2", 20049)),
        ("fd00::2", ("fd00::2", None)),
    ],
)
def test_server_strings(text: str, expected: tuple[str, int | None]) -> None:
    assert parse_server(text) == expected


@pytest.mark.parametrize("text", ["", "[fd00::2", "host:0", "host:x", ":2049", "10.1.2.3.300.1", "host:\u00b9"])
def test_bad_server_strings(text: str) -> None:
    with pytest.raises(ValueError):
        parse_server(text)


def test_verification_decisions() -> None:
    ours = ServerIdentity(7, b"vm", 0, b"scope\x00")
    assert decide(ours, Observed(7, b"vm", 0, b"scope\x00")) is Verdict.SESSION_TRUNKING
    assert decide(ours, Observed(8, b"vm", 0, b"scope\x00")) is Verdict.SAME_SERVER_NEW_CLIENTID
    assert decide(ours, Observed(7, b"vm", 1, b"scope\x00")) is Verdict.CLIENT_ID_TRUNKING
    assert decide(ours, Observed(7, b"other", 0, b"scope\x00")) is Verdict.OTHER_SERVER
    assert decide(ours, Observed(7, b"vm", 0, b"elsewhere")) is Verdict.OTHER_SERVER


def test_mount_options() -> None:
    o = TrunkingOptions.from_url_options(
        {
            "addrs": "127.0.0.3,127.0.0.4:2050",
            "nconnect": "2",
            "max_connect": "3",
            "notrunkdiscovery": "",
            "stalltimeo": "0.5",
        }
    )
    assert (o.addrs, o.nconnect, o.max_connect, o.discovery, o.stall_after) == (
        ["127.0.0.3", "127.0.0.4:2050"],
        2,
        3,
        False,
        0.5,
    )
    assert TrunkingOptions.from_url_options({}).discovery
    for bad in ({"nconnect": "0"}, {"max_connect": "x"}, {"addrs": "[::1"}, {"stalltimeo": "-1"}):
        with pytest.raises(TrunkingOptionError):
            TrunkingOptions.from_url_options(bad)


def test_advertised_address_words() -> None:
    from pynfsrdma._testbed.advertiser import parse_advertised

    assert parse_advertised("127.0.0.2:2049,rank=1,order=7") == AdvertisedAddress(
        "127.0.0.2:2049", 1, 7, False
    )
    assert parse_advertised("127.0.0.9:20049,rdma") == AdvertisedAddress("127.0.0.9:20049", rdma=True)
    for bad in ("", "h,rank=x", "h,speed=3", "h,order=300"):
        with pytest.raises(ValueError):
            parse_advertised(bad)
