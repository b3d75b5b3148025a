"""A TCP proxy in front of an NFS server that changes its replies as a :class:`~.mutations.ReplyMutator`
decides: a server that breaks the protocol, made from a real one, to test a client against.

In-process, from trio code::

    mutator = ReplyMutator(seed=7, rate=0.15)               # or rules=[Rule(Mutation.HEADER, OP_READ, ...)]
    proxy = MutatingProxy("127.0.0.1", 0, ganesha.host, ganesha.port, mutator)
    await nursery.start(proxy.run)                          # then connect a client to proxy.port
    mutator.counts                                          # what was changed, by class

or as a process of its own (prints the counts at the end)::

    python -m pynfsrdma._testbed.mutating_proxy --listen 127.0.0.1:20499 --target 127.0.0.1:20490 --seed 7 --rate 0.15

Every record the client sends is shown to the mutator and forwarded as it is; every record the server
sends is replaced by what the mutator answers (one record, two, or bytes whose framing is broken on
purpose). A connection either side closes is closed on the other.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import trio

from .listener import host_port
from .mutations import ALL, Mutation, ReplyMutator, frame
from .record_proxy import RecordProxy, records, serve_until_signalled

__all__ = ["MutatingProxy", "main", "records"]

class MutatingProxy(RecordProxy):
    """Forwards ``listen_host:listen_port`` to ``target_host:target_port`` through ``mutator``."""

    def __init__(
        self, listen_host: str, listen_port: int, target_host: str, target_port: int, mutator: ReplyMutator
    ) -> None:
        super().__init__(listen_host, listen_port, target_host, target_port)
        self.mutator = mutator

    @property
    def url(self) -> str:
        return f"nfs://{self.listen_host}:{self.listen_port}"

    def to_server(self, state: Any, record: bytes) -> bytes:
        self.mutator.call(record)
        return frame(record)

    def to_client(self, state: Any, record: bytes) -> bytes:
        return b"".join(self.mutator.reply(record).chunks)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pynfsrdma._testbed.mutating_proxy",
        description="A proxy in front of an NFS server that breaks the protocol in its replies, seeded.",
    )
    p.add_argument("--listen", type=host_port, required=True, metavar="HOST:PORT")
    p.add_argument("--target", type=host_port, required=True, metavar="HOST:PORT")
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

    ready = f"mutating proxy {args.listen[0]}:{{port}} -> {args.target[0]}:{args.target[1]} ready"
    try:
        trio.run(serve_until_signalled, proxy, ready)
    except OSError as e:
        print(f"mutating proxy: {e}", file=sys.stderr)
        return 1
    counts: dict[str, Any] = dict(sorted(mutator.counts.items()))
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
