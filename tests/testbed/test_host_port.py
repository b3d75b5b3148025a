"""The testbed's programs read their ``--listen``/``--target`` HOST:PORT arguments by one rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from pynfsrdma._testbed import advertiser, mutating_proxy, proxy, rdma_responder

PROGRAMS: list[Callable[[list[str]], int]] = [advertiser.main, mutating_proxy.main, proxy.main, rdma_responder.main]


@pytest.mark.parametrize("main", PROGRAMS, ids=lambda m: m.__module__.rpartition(".")[2])
@pytest.mark.parametrize("bad", ["127.0.0.1", "127.0.0.1:", ":2049", "127.0.0.1:x", "127.0.0.1:\u00b9", "127.0.0.1:65536"])
def test_a_bad_address_is_a_usage_error_naming_it(
    main: Callable[[list[str]], int], bad: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def serve(*args: object) -> None:
        raise AssertionError(f"started with --listen {bad!r}")

    monkeypatch.setattr(trio, "run", serve)
    with pytest.raises(SystemExit) as e:
        main(["--listen", bad, "--target", "127.0.0.1:2049"])
    assert e.value.code == 2
    assert f"expected HOST:PORT, not {bad!r}" in capsys.readouterr().err


def test_an_address_with_a_port() -> None:
    from pynfsrdma._testbed.listener import host_port

    assert host_port("127.0.0.1:0") == ("127.0.0.1", 0)
    assert host_port("[::1]:2049") == ("::1", 2049)
    assert host_port("localhost:65535") == ("localhost", 65535)
