"""The function calls one small fsspec call makes on the client's loop thread, layer by layer.

    .venv/bin/python bench/bench_fsspec_calls.py [--calls 500] [--only info,cat_file] [--by FILE-PART] [--json]

Starts its own NFS-Ganesha (testbed) on loopback, writes one small file through our fsspec back end
(``nfs://``) and makes each call below CALLS times, the loop thread's calls counted meanwhile
(``sys.setprofile`` set in that thread: a Python function's call, and each resumption of a
coroutine's frame, is one; functions written in C are counted apart). Real TCP, a real server: the
loop's own steps (trio's share) vary with how soon the caller hands its next call, so repeat on a
busy host. The lines:

- ``info``: ``fs.info`` of the file;
- ``cat_file``: ``fs.cat_file`` of the whole file (1 KiB);
- ``cat_range``: ``fs.cat_file(path, 0, 512)``;
- ``pipe_file``: ``fs.pipe_file`` of 1 KiB over the file.

For each: the Python calls and C calls per call, and the Python calls by layer (the fsspec adapter,
the blocking client's hand-over, the path API, the client's operations, session, RPC, transport,
XDR, protocol definitions, statistics, trio); with ``--by FILE-PART``, also the Python functions of
the files whose path holds FILE-PART (``_session``, ``trio/``...), by name.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_target
from pynfsrdma._client.api import Client
from pynfsrdma.fsspec import NFSFileSystem

LINES = ("info", "cat_file", "cat_range", "pipe_file")
SMALL = 1024
WARM = 50  # calls of each line before counting (caches and prepared shapes made)

#: the layer a Python function is of, by the start of its file's path inside the package
_LAYERS = (
    ("fsspec.py", "fsspec adapter"),
    ("_client/sync.py", "blocking hand-over"),
    ("_client/api.py", "path API"),
    ("_client/", "client operations"),
    ("_session/", "session"),
    ("_rpc/", "RPC"),
    ("_transport/", "transport"),
    ("_xdr/", "XDR"),
    ("_proto/", "protocol definitions"),
    ("_stats.py", "statistics"),
)


def layer(filename: str) -> str:
    """The layer of a function defined in ``filename``."""
    if "/trio/" in filename:
        return "trio"
    _, sep, rest = filename.rpartition("pynfsrdma/")
    if not sep:
        return "other (outcome, attrs, the standard library...)"
    return next((name for start, name in _LAYERS if rest.startswith(start)), "other of ours")


class Counts:
    """The calls seen by a profile function set in one thread."""

    def __init__(self, by: str | None) -> None:
        self.by = by
        self.c_calls = 0
        self.layers: Counter[str] = Counter()
        self.named: Counter[str] = Counter()

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            self.layers[layer(code.co_filename)] += 1
            if self.by is not None and self.by in code.co_filename:
                self.named[f"{code.co_filename.rpartition('/')[2]}:{code.co_qualname}"] += 1
        elif event == "c_call":
            self.c_calls += 1

    def per_call(self, calls: int) -> dict[str, float]:
        out = {"python calls": sum(self.layers.values()) / calls, "C calls": self.c_calls / calls}
        out.update({f"  {k}": n / calls for k, n in self.layers.most_common()})
        out.update({f"    {k}": n / calls for k, n in self.named.most_common()})
        return out


def count(fs: NFSFileSystem, call: Callable[[], Any], calls: int, by: str | None) -> dict[str, float]:
    """Calls per call of ``call`` on ``fs``'s loop thread, over ``calls`` calls."""
    seen = Counts(by)

    async def start(client: Client) -> None:
        sys.setprofile(seen.profile)

    async def stop(client: Client) -> None:
        sys.setprofile(None)

    for _ in range(WARM):
        call()
    fs.client.run(start)
    try:
        for _ in range(calls):
            call()
    finally:
        fs.client.run(stop)
    return seen.per_call(calls)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=500, help="calls counted per line (default 500)")
    ap.add_argument("--only", default=",".join(LINES), help=f"lines to run, comma-separated (of {', '.join(LINES)})")
    ap.add_argument("--by", metavar="FILE-PART", help="also the Python functions of files whose path holds FILE-PART")
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    args = ap.parse_args(argv)
    wanted = [w for w in args.only.split(",") if w]
    unknown = [w for w in wanted if w not in LINES]
    if unknown:
        ap.error(f"unknown line(s): {', '.join(unknown)} (known: {', '.join(LINES)})")
    if args.calls < 1:
        ap.error("--calls must be at least 1")
    with bench_target(None) as target:
        u = urlsplit(target.ours_url)
        fs = NFSFileSystem(u.hostname or "127.0.0.1", u.port or 2049, skip_instance_cache=True)
        try:
            path = f"{target.remote_dir}/small"
            fs.pipe_file(path, b"x" * SMALL)
            todo: dict[str, Callable[[], Any]] = {
                "info": lambda: fs.info(path),
                "cat_file": lambda: fs.cat_file(path),
                "cat_range": lambda: fs.cat_file(path, 0, SMALL // 2),
                "pipe_file": lambda: fs.pipe_file(path, b"y" * SMALL),
            }
            counts = {name: count(fs, todo[name], args.calls, args.by) for name in wanted}
        finally:
            fs.client.close()
    if args.json:
        print(json.dumps({"calls": args.calls, "per_call": counts}, sort_keys=True))
        return 0
    for name, per in counts.items():
        print(name)
        print("\n".join(f"  {what:64s} {n:8.2f}" for what, n in per.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
