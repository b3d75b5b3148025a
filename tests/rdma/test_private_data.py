"""RFC 8797 private data: wire bytes, where it may lie, defaults, negotiation."""

import pytest

from pynfsrdma._proto.private_data import (
    V1_DEFAULTS,
    ConnectPrivateData,
    InlineThresholds,
    PrivateDataError,
    encode_size,
    find_private_data,
    negotiate,
)


def test_exact_wire_bytes():
    m = ConnectPrivateData(send_size=4096, recv_size=262144, remote_invalidation=True)
    assert m.encode() == bytes.fromhex("f6ab0e18") + bytes([1, 1, 3, 255])
    assert ConnectPrivateData.decode(m.encode()) == m
    small = ConnectPrivateData(1024, 1024)
    assert small.encode() == bytes.fromhex("f6ab0e18") + bytes([1, 0, 0, 0])


def test_sizes_round_down_to_whole_kib_and_clamp():
    assert encode_size(1024) == 0 and encode_size(2047) == 0 and encode_size(2048) == 1
    assert encode_size(10 << 20) == 255
    with pytest.raises(PrivateDataError):
        encode_size(1023)


def test_absent_message_gives_v1_defaults():
    for data in (None, b"", b"\0" * 56):
        assert find_private_data(data) is None
        t = negotiate(ConnectPrivateData(65536, 65536, True), data)
        assert t == InlineThresholds(1024, 1024, False, False)


def test_too_small_private_data():
    m = ConnectPrivateData(8192, 8192).encode()
    assert find_private_data(m[:7]) is None


def test_found_at_any_offset_aligned_or_not():
    m = ConnectPrivateData(8192, 16384, True)
    for off in (0, 1, 3, 4, 36, 51):
        data = bytes(range(off)) + m.encode() + b"\xff" * 5
        assert find_private_data(data) == m


def test_large_private_data_and_garbage_before_a_real_message():
    m = ConnectPrivateData(32768, 4096)
    fake = bytes.fromhex("f6ab0e18") + bytes([2, 0, 0, 0])  # identifier with an unknown version
    data = b"\x13" * 17 + fake + b"\xf6\xab\x0e" + m.encode() + b"\x00" * 150
    assert find_private_data(data) == m


def test_wrong_version_only_is_no_message():
    wrong = bytes.fromhex("f6ab0e18") + bytes([2, 1, 7, 7])
    assert find_private_data(wrong) is None
    with pytest.raises(PrivateDataError):
        ConnectPrivateData.decode(wrong)
    assert negotiate(ConnectPrivateData(8192, 8192), wrong).send == 1024


def test_garbage():
    assert find_private_data(b"hello, world, this is no RPC-over-RDMA") is None
    with pytest.raises(PrivateDataError):
        ConnectPrivateData.decode(b"\x00" * 8)


def test_negotiation_takes_the_minimum_each_way():
    client = ConnectPrivateData(send_size=4096, recv_size=65536, remote_invalidation=True)
    server = ConnectPrivateData(send_size=16384, recv_size=2048, remote_invalidation=False)
    c = negotiate(client, server.encode())
    assert (c.send, c.recv, c.remote_invalidation, c.peer_sent_message) == (2048, 16384, False, True)
    s = negotiate(server, client.encode())
    assert (s.send, s.recv, s.remote_invalidation) == (16384, 2048, True)
    # the two ends agree on each direction
    assert c.send == s.recv and c.recv == s.send
    assert V1_DEFAULTS.send_size == V1_DEFAULTS.recv_size == 1024
