"""A TCP proxy in front of an NFS server that changes its replies as a :class:`~.mutations.ReplyMutator`
decides: a server that breaks the protocol, made from a real one, to test a client against.

In-process, from trio code::

    mutator = ReplyMutator(seed=7, rate=0.15)               # or rules=[Rule(Mutation.HEADER, OP_READ, ...)]
    proxy = MutatingProxy("127.0.0.1", 0, ganesha.host, ganesha.port, mutator)
    await nursery.start(proxy.run)                          # then connect a client to proxy.port
    mutator.counts                                          # what was changed, by class

or as a process of its own (prints the counts at the end)::

    python -m pynfsrdma.testbed.mutating_proxy --listen 127.0.0.1:20499 --target 127.0.0.1:20490 --seed 7 --rate 0.15

Every record the client sends is shown to the mutator and forwarded as it is; every record the server
sends is replaced by what the mutator answers (one record, two, or bytes whose framing is broken on
purpose). A connection either side closes is closed on the other.
"""

from __future__ import annotations

import argparse
import json
import signal
import struct
import sys
from collections.abc import AsyncIterator
from typing import Any

import trio

from ..proto.rpc import RM_LAST_FRAGMENT, RM_LENGTH_MASK
from .mutations import ALL, Mutation, ReplyMutator, frame

__all__ = ["MutatingProxy", "main", "records"]

_MARK = struct.Struct(">I")
READ_CHUNK = 256 * 1024


async def records(stream: trio.SocketStream) -> AsyncIterator[bytes]:
    """Whole RPC records (fragments joined) from a record-marked stream, until it ends."""
    buf = bytearray()
    fragments: list[bytes] = []
    while True:
        while len(buf) >= _MARK.size:
            (mark,) = _MARK.unpack_from(buf)
            n = mark & RM_LENGTH_MASK
            if len(buf) < _MARK.size + n:
                break
            fragments.append(bytes(buf[_MARK.size : _MARK.size + n]))
            del buf[: _MARK.size + n]
            if mark & RM_LAST_FRAGMENT:
                yield b"".join(fragments)
                fragments = []
        data = await stream.receive_some(READ_CHUNK)
        if not data:
            return
        buf += data


class MutatingProxy:
    """Forwards ``listen_host:listen_port`` to ``target_host:target_port`` through ``mutator``."""

    def __init__(
        self, listen_host: str, listen_port: int, target_host: str, target_port: int, mutator: ReplyMutator
    ) -> None:
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.target_host = target_host
        self.target_port = target_port
        self.mutator = mutator
        self.connections = 0
        self._scope: trio.CancelScope | None = None

    @property
    def port(self) -> int:
        return self.listen_port

    @property
    def url(self) -> str:
        return f"nfs://{self.listen_host}:{self.listen_port}"

    async def run(self, *, task_status: trio.TaskStatus[MutatingProxy] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.listen_port, host=self.listen_host)
        for extra in listeners[1:]:
            await extra.aclose()
        listener = listeners[0]
        self.listen_port = listener.socket.getsockname()[1]
        try:
            with trio.CancelScope() as self._scope:
                async with trio.open_nursery() as nursery:
                    task_status.started(self)
                    while True:
                        client = await listener.accept()
                        self.connections += 1
                        nursery.start_soon(self._serve, client)
        finally:
            with trio.CancelScope(shield=True):
                await listener.aclose()

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def _serve(self, client: trio.SocketStream) -> None:
        try:
            server = await trio.open_tcp_stream(self.target_host, self.target_port)
        except OSError:
            await client.aclose()
            return
        mutator = self.mutator
        try:
            async with trio.open_nursery() as nursery:

                async def calls() -> None:
                    try:
                        async for record in records(client):
                            mutator.call(record)
                            await server.send_all(frame(record))
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
                    nursery.cancel_scope.cancel()

                async def replies() -> None:
                    try:
                        async for record in records(server):
                            for chunk in mutator.reply(record).chunks:
                                await client.send_all(chunk)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
                    nursery.cancel_scope.cancel()

                nursery.start_soon(calls)
                nursery.start_soon(replies)
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()
                await server.aclose()


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not {text!r}")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pynfsrdma.testbed.mutating_proxy",
        description="A proxy in front of an NFS server that breaks the protocol in its replies, seeded.",
    )
    p.add_argument("--listen", type=_host_port, required=True, metavar="HOST:PORT")
    p.add_argument("--target", type=_host_port, required=True, metavar="HOST:PORT")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rate", type=float, default=0.1, help="share of replies changed (default 0.1)")
    p.add_argument("--mutations", default=",".join(m.value for m in ALL),
                   help="classes to use, comma-separated (default: all)")
    args = p.parse_args(argv)
    try:
        kinds = [Mutation(k) for k in args.mutations.split(",") if k]
    except ValueError as e:
        p.error(str(e))
    mutator = ReplyMutator(args.seed, args.rate, kinds)
    proxy = MutatingProxy(args.listen[0], args.listen[1], args.target[0], args.target[1], mutator)

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(proxy.run)
                print(f"mutating proxy {args.listen[0]}:{proxy.port} -> {args.target[0]}:{args.target[1]} ready",
                      flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(run)
    except OSError as e:
        print(f"mutating proxy: {e}", file=sys.stderr)
        return 1
    counts: dict[str, Any] = dict(sorted(mutator.counts.items()))
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
