"""The coroutines a small call goes through on its way down, counted on real calls to NFS-Ganesha:
from ``Client.stat`` (and the mount's LOOKUP) to the transport's send, each layer awaited is one
that does work of its own (a layer that only forwarded a call, adding an argument or unwrapping a
result, is called past)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pynfsrdma._client.api import Client
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._transport.tcp import TcpTransport


def url_of(ganesha: Ganesha, ep: ExportPath) -> str:
    return f"nfs://{ganesha.host}:{ganesha.port}{ep.remote}"


def awaited_chain() -> list[str]:
    """The qualified names of the coroutines running now (the current task's, which await each other
    down to the caller of this function), outermost first."""
    names = []
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_flags & inspect.CO_COROUTINE:
            names.append(frame.f_code.co_qualname)
        frame = frame.f_back  # type: ignore[assignment]
    return names[::-1]


def record_sends(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    chains: list[list[str]] = []
    send: Callable[..., Awaitable[None]] = TcpTransport.send_call

    async def recording_send(self: TcpTransport, *args: Any, **kwargs: Any) -> None:
        chains.append(awaited_chain()[:-1])  # (without this wrapper)
        await send(self, *args, **kwargs)

    monkeypatch.setattr(TcpTransport, "send_call", recording_send)
    return chains


BELOW_THE_CLIENT = ["Recovery.compound", "Session.compound", "RpcConnection._carry"]


async def test_a_stat_goes_down_through_the_layers_that_work(
    ganesha: Ganesha, export_path: ExportPath, monkeypatch: pytest.MonkeyPatch
) -> None:
    (export_path.local / "f").write_bytes(b"x")
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        chains = record_sends(monkeypatch)
        assert (await nfs.stat("/f")).size == 1
        chain = chains[-1]
        assert chain[chain.index("Client.stat"):] == [
            "Client.stat", "ExportPaths.resolve", "Compounds.query", *BELOW_THE_CLIENT,
        ]


async def test_a_lookup_as_the_mount_sends_it_goes_down_as_a_stat(
    ganesha: Ganesha, export_path: ExportPath, monkeypatch: pytest.MonkeyPatch
) -> None:
    (export_path.local / "f").write_bytes(b"x")
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        chains = record_sends(monkeypatch)
        fh, attrs = await nfs.nfs.names.lookup(nfs.root_fh, "f", nfs.cred)
        assert attrs.size == 1 and fh
        chain = chains[-1]
        here = "test_a_lookup_as_the_mount_sends_it_goes_down_as_a_stat"
        assert chain[chain.index(here):] == [here, "Compounds.query", *BELOW_THE_CLIENT]


async def test_the_caller_reads_its_own_reply_one_coroutine_below_its_send(
    ganesha: Ganesha, export_path: ExportPath, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TCP the caller reads its own reply (nobody else reading): from the same coroutine that
    sent it, with no coroutine of its own for the reading."""
    (export_path.local / "f").write_bytes(b"x")
    async with Client.connect(url_of(ganesha, export_path)) as nfs:
        chains: list[list[str]] = []
        receive: Callable[..., Awaitable[Any]] = TcpTransport.receive

        async def recording_receive(self: TcpTransport, *args: Any, **kwargs: Any) -> Any:
            chains.append(awaited_chain()[:-1])  # (without this wrapper)
            return await receive(self, *args, **kwargs)

        monkeypatch.setattr(TcpTransport, "receive", recording_receive)
        fh, attrs = await nfs.nfs.names.lookup(nfs.root_fh, "f", nfs.cred)
        assert attrs.size == 1 and fh
        here = "test_the_caller_reads_its_own_reply_one_coroutine_below_its_send"
        mine = [chain for chain in chains if here in chain]
        assert mine, "the caller did not read its reply itself"
        chain = mine[-1]
        assert chain[chain.index(here):] == [here, "Compounds.query", *BELOW_THE_CLIENT]
