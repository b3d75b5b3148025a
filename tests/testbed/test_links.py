"""The link testbed's decisions without a kernel: rates, read orders, fault commands, tc and nft text."""

from __future__ import annotations

import pytest

from pynfsrdma._testbed.faults import FaultCommandError, Mode
from pynfsrdma._testbed.links import (
    NFT_TABLE,
    Link,
    apply_link_command,
    class_bytes,
    kill_command,
    nft_script,
    parse_link_rates,
    parse_link_words,
    qdisc_commands,
    rate_commands,
    read_orders,
)


def test_one_rate_for_all_or_one_per_path() -> None:
    assert parse_link_rates("40", 3) == [40.0, 40.0, 40.0]
    assert parse_link_rates("80,40,20,20", 4) == [80.0, 40.0, 20.0, 20.0]
    for bad in ("40,20", "x", "0", "-5", "inf", "nan"):
        with pytest.raises(ValueError):
            parse_link_rates(bad, 3)


def test_faster_links_get_a_higher_read_order() -> None:
    orders = read_orders([80, 40, 20, 20])
    assert orders == [200, 100, 50, 50]
    assert read_orders([1000, 0.001]) == [200, 1]  # never 0


def test_link_words() -> None:
    assert parse_link_words(["rate", "20"]) == ("rate", 20.0)
    assert parse_link_words(["CUT"]) == ("cut", None)
    for bad in (["rate", "0"], ["rate"], ["throttle", "5"], ["delay", "-1"], []):
        with pytest.raises(FaultCommandError):
            parse_link_words(bad)


def test_commands_and_what_they_ask_of_the_shell() -> None:
    link = Link(1, "127.0.0.3", 40.0, 40.0)
    cut = apply_link_command(link, "cut")
    assert cut.link.mode is Mode.CUT and cut.rules and cut.kill and not cut.rate
    stall = apply_link_command(cut.link, "stall")
    assert stall.link.mode is Mode.STALL and stall.rules and not stall.kill
    slow = apply_link_command(stall.link, "rate", 10)
    assert slow.link.rate == 10.0 and slow.rate and not slow.rules
    delayed = apply_link_command(slow.link, "delay", 25)
    assert delayed.proxy_delay == 25.0 and delayed.rules and delayed.kill  # rerouted through the proxy
    more = apply_link_command(delayed.link, "delay", 50)
    assert more.proxy_delay == 50.0 and not more.rules and not more.kill  # the proxy only changes its delay
    back = apply_link_command(more.link, "restore")
    assert back.link == link
    assert back.rate and back.rules and back.kill
    assert apply_link_command(link, "restore") == type(back)(link)  # nothing to do on a clear link
    assert "stall" in stall.link.describe() and "10 MB/s" in slow.link.describe()
    assert Link.from_json(more.link.to_json()) == more.link
    with pytest.raises(FaultCommandError):
        apply_link_command(link, "throttle", 5)


def test_each_link_has_a_class_and_filter_per_direction() -> None:
    links = [Link(0, "127.0.0.2", 40.0, 40.0), Link(1, "127.0.0.3", 10.0, 10.0)]
    cmds = qdisc_commands(links)
    assert cmds[0][:6] == ["tc", "qdisc", "replace", "dev", "lo", "root"]
    classes = [c for c in cmds if c[1] == "class"]
    filters = [c for c in cmds if c[1] == "filter"]
    assert [c[c.index("classid") + 1] for c in classes] == ["1:100", "1:200", "1:101", "1:201"]
    assert [c[c.index("rate") + 1] for c in classes] == ["40000000bps"] * 2 + ["10000000bps"] * 2
    matched = [(c[c.index("ip", c.index("match")) + 1], c[c.index("flowid") + 1]) for c in filters]
    assert matched == [("dst", "1:100"), ("src", "1:200"), ("dst", "1:101"), ("src", "1:201")]
    assert all(f"{links[i // 2].address}/32" in c for i, c in enumerate(filters))
    changed = rate_commands(Link(1, "127.0.0.3", 10.0, 5.0))
    assert [c[2] for c in changed] == ["change", "change"] and all("5000000bps" in c for c in changed)
    assert kill_command(links[1]) == ["ss", "-K", "-t", "dst", "127.0.0.3"]


def test_nft_script_sets_and_redirects() -> None:
    links = [
        Link(0, "127.0.0.2", 40.0, 40.0),
        Link(1, "127.0.0.3", 40.0, 40.0, Mode.CUT),
        Link(2, "127.0.0.4", 40.0, 40.0, Mode.STALL),
    ]
    text = nft_script(links, 2049, {"127.0.0.2": 2050})
    assert text.startswith(f"table inet {NFT_TABLE}\ndelete table inet {NFT_TABLE}\n")
    assert "set cut { type ipv4_addr; elements = { 127.0.0.3 }; }" in text
    assert "set stalled { type ipv4_addr; elements = { 127.0.0.4 }; }" in text
    assert "ip daddr 127.0.0.2 tcp dport 2049 dnat ip to 127.0.0.2:2050" in text
    assert "elements" not in nft_script(links[:1], 2049, {})


def test_class_bytes_from_tc_output() -> None:
    out = (
        "class htb 1:101 root prio 0 rate 80Mbit ceil 80Mbit burst 262120b cburst 262120b \n"
        " Sent 10504358 bytes 239 pkt (dropped 0, overlimits 106 requeues 0) \n"
        " backlog 0b 0p requeues 0\n\n"
        "class htb 1:200 root prio 0 rate 320Mbit ceil 320Mbit burst 262080b cburst 262080b \n"
        " Sent 19398 bytes 207 pkt (dropped 0, overlimits 0 requeues 0) \n"
    )
    assert class_bytes(out) == {"1:101": 10504358, "1:200": 19398}
