"""RPC-with-TLS for tests: the testbed's TLS front (pynfsrdma._testbed.tls_front) run in a thread of
its own, so that async tests, CLI subprocesses and FUSE mounts can all go through it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from pynfsrdma._testbed.tls_front import FrontConnection, TlsFront

START_TIMEOUT = 10.0


@dataclass
class RunningFront:
    """A :class:`TlsFront` serving in a thread: its address, what it saw, and a cut."""

    front: TlsFront
    token: trio.lowlevel.TrioToken
    thread: threading.Thread
    done: list[BaseException] = field(default_factory=list)

    @property
    def host(self) -> str:
        return self.front.host

    @property
    def port(self) -> int:
        return self.front.port

    @property
    def address(self) -> str:
        return self.front.address

    @property
    def connections(self) -> list[FrontConnection]:
        return list(self.front.connections)

    def kinds(self) -> list[str]:
        return self.front.kinds()

    def _in_front(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run in the front's own trio run, from a thread of its own (the caller may be a
        trio task of another run, where trio.from_thread refuses to block)."""
        box: list[Any] = []
        t = threading.Thread(target=lambda: box.append(trio.from_thread.run_sync(fn, trio_token=self.token)))
        t.start()
        t.join(10)
        return box[0]

    def callback(self, prog: int, vers: int, proc: int = 0) -> bytes:
        """The server's side of the backchannel: call the client on its newest connection through
        the front (inside TLS when that is TLS); the client's reply record."""
        box: list[bytes] = []
        t = threading.Thread(target=lambda: box.append(
            trio.from_thread.run(self.front.callback, prog, vers, proc, trio_token=self.token)))
        t.start()
        t.join(20)
        return box[0]

    def cut(self) -> int:
        """End the front's open connections now; how many there were."""
        return int(self._in_front(self.front.cut))

    def stop(self) -> None:
        if self.thread.is_alive():
            self._in_front(self.front.stop)
            self.thread.join(timeout=10)


def start_front(target_host: str, target_port: int, certs: dict[str, Path], *, listen_host: str = "127.0.0.1",
                server_cert: str = "server", client_ca: str | None = None, **kwargs: Any) -> RunningFront:
    """A TLS front on ``listen_host`` (a free port) for the server at ``target_host:target_port``,
    with the certificate ``certs[server_cert]``; clients must show one ``certs[client_ca]``
    vouches for when that is given."""
    front = TlsFront(listen_host, 0, target_host, target_port, certificate=certs[server_cert],
                     private_key=certs[f"{server_cert}.key"],
                     client_truststore=certs[client_ca] if client_ca else None, **kwargs)
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["token"] = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            await nursery.start(front.run)
            ready.set()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as e:  # (seen by the test through RunningFront.done)
            box.setdefault("errors", []).append(e)
            ready.set()

    thread = threading.Thread(target=run, name=f"tls-front-{listen_host}", daemon=True)
    thread.start()
    assert ready.wait(START_TIMEOUT), "the TLS front did not start"
    assert "errors" not in box, f"the TLS front failed: {box['errors']}"
    return RunningFront(front, box["token"], thread)


def tls_query(certs: dict[str, Path], mode: str = "tls", *, ca: str = "ca", client: str | None = None) -> str:
    """The URL options of ``xprtsec=mode`` with the test CA as trust store (and a client certificate)."""
    q = f"xprtsec={mode}&truststore={certs[ca]}"
    if client is not None:
        q += f"&certificate={certs[client]}&private_key={certs[client + '.key']}"
    return q
