"""A workload of the path API and the command line against a server whose replies a
:class:`~.mutating_proxy.MutatingProxy` changes, every result checked against the export's directory on
disk. What a client must show, whatever the server sends:

- every call returns the right result (the same as the files on the server's disk say) or raises an
  OSError subclass with ``errno`` set: nothing else escapes (an ExceptionGroup, a decoding error, an
  AttributeError ...), which :attr:`Outcomes.escaped` would count;
- no call takes longer than its deadline (:attr:`Outcomes.hangs`);
- every command line run either succeeds with the right output or prints exactly one line on standard
  error, never a traceback (:attr:`Outcomes.cli_bad`).

Used by ``tests/test_reply_fuzz.py`` (a few thousand replies) and ``bench/fuzz_replies.py`` (as long as
you like). Each worker works in a directory of its own, one call at a time, so that the directory on
disk says what every result must be.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import logging
import os
import posixpath
import random
import resource
import subprocess
import sys
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio

from .._client.api import Client

__all__ = ["Outcomes", "WorkerSettings", "run_worker", "run_workload"]

MAX_SIZE = 192 * 1024  # files the workload writes: up to this many bytes (several READs and WRITEs)
PAUSE_AFTER_ERROR = 0.05
# a worker process's address space (RLIMIT_AS): the interpreter, trio's threads' stacks and the
# client take about 0.3 GiB of it; what a client allocates past that is a blow-up
MEMORY_CAP = 1 << 30


@dataclass(frozen=True)
class WorkerSettings:
    """How every worker of :func:`run_workload` works: ``seed`` its random choices (with its index);
    it stops after ``seconds``, or after ``calls`` calls (None: no such end); its client is soft
    (``timeo`` seconds a try, ``retrans`` tries more); every ``cli_every`` calls (0: never) it runs
    the command line once; ``values``: the replies' values may be changed (:data:`.mutations.VALUES`),
    so a stat's size is not checked (the client cannot tell it wrong), everything else is. A worker
    process gets them as one JSON argument (:meth:`to_json`, :meth:`from_json`)."""

    seed: int = 0
    seconds: float | None = None
    calls: int | None = None
    timeo: float = 2.0
    retrans: int = 1
    cli_every: int = 0
    values: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSettings:
        return cls(**json.loads(text))


@dataclass
class Outcomes:
    """What the calls came to. ``right`` and ``errors`` are fine; the rest are failures of the client."""

    right: Counter[str] = field(default_factory=Counter)  # by operation
    errors: Counter[str] = field(default_factory=Counter)  # by errno name (and operation)
    wrong: list[str] = field(default_factory=list)  # a result that is not what the server's disk says
    escaped: list[str] = field(default_factory=list)  # an exception that is not an OSError with errno
    hangs: list[str] = field(default_factory=list)  # a call past its deadline
    cli_runs: int = 0
    cli_bad: list[str] = field(default_factory=list)  # a command's output that is not right or one line
    samples: dict[str, str] = field(default_factory=dict)  # an error's message, one per kind
    peaks: list[int] = field(default_factory=list)  # each worker process's peak resident memory, bytes
    slowest: tuple[float, str] = (0.0, "")  # the longest call: seconds, and which

    def merge(self, other: Outcomes) -> None:
        """Add ``other``'s outcomes (another worker's) to these."""
        self.right.update(other.right)
        self.errors.update(other.errors)
        self.wrong += other.wrong
        self.escaped += other.escaped
        self.hangs += other.hangs
        self.cli_runs += other.cli_runs
        self.cli_bad += other.cli_bad
        for kind, sample in other.samples.items():
            self.samples.setdefault(kind, sample)
        self.peaks += other.peaks
        self.slowest = max(self.slowest, other.slowest)

    def error(self, kind: str, e: BaseException) -> None:
        self.errors[kind] += 1
        self.samples.setdefault(kind, repr(e) if type(e).__name__.startswith("NFS4Error") else str(e))

    @property
    def calls(self) -> int:
        return sum(self.right.values()) + sum(self.errors.values()) + len(self.wrong) + len(self.escaped) + len(
            self.hangs
        )

    @property
    def failures(self) -> list[str]:
        return [*self.wrong, *self.escaped, *self.hangs, *self.cli_bad]

    def summary(self) -> dict[str, object]:
        return {
            "calls": self.calls,
            "right": sum(self.right.values()),
            "errors": sum(self.errors.values()),
            "wrong": len(self.wrong),
            "escaped": len(self.escaped),
            "hangs": len(self.hangs),
            "cli_runs": self.cli_runs,
            "cli_bad": len(self.cli_bad),
            "peak_rss_bytes": self.peaks,
            "slowest_call": [round(self.slowest[0], 2), self.slowest[1]],
            "errors_by_kind": dict(self.errors.most_common()),
            "error_samples": dict(sorted(self.samples.items())),
        }


class _Wrong(Exception):
    pass


def _errno_name(e: OSError) -> str:
    return errno.errorcode.get(e.errno or 0, str(e.errno))


@dataclass
class _Worker:
    """One worker: its directory (remote path, and on disk), its random choices, its client."""

    name: str
    remote: str  # the directory as the client names it (below the export it connected to)
    full: str  # the directory from the server's root (for the command line's URLs)
    local: Path  # the same directory on the server's disk
    rng: random.Random
    out: Outcomes
    deadline: float  # seconds a call may take at most
    values: bool = False  # the replies' values may be wrong (a stat's size is not checked)

    def files(self) -> list[str]:
        return sorted(p.name for p in self.local.iterdir() if p.is_file())

    async def one(self, client: Client) -> None:
        """One call, chosen at random, and its check."""
        rng = self.rng
        files = self.files()
        ops = ["write", "write", "read", "read", "listdir", "stat", "rename", "remove", "mkdir"]
        op = rng.choice(ops if files else ["write", "listdir", "mkdir"])
        start = trio.current_time()
        try:
            with trio.fail_after(self.deadline):
                await self._do(client, op, files)
            self.out.right[op] += 1
        except trio.TooSlowError:
            self.out.hangs.append(f"{self.name}: {op} took more than {self.deadline:g} s")
        except _Wrong as e:
            self.out.wrong.append(f"{self.name}: {op}: {e}")
        except OSError as e:
            if not isinstance(e.errno, int):
                self.out.escaped.append(f"{self.name}: {op}: OSError without errno: {e!r}")
            else:
                self.out.error(f"{_errno_name(e)} ({type(e).__name__})", e)
            await trio.sleep(PAUSE_AFTER_ERROR)  # (as a program would, rather than spin on a failing server)
        except Exception as e:  # (what must never happen: counted, with where it came from)
            tb = "".join(traceback.format_exception(e)[-6:])
            self.out.escaped.append(f"{self.name}: {op}: {type(e).__name__}: {e}\n{tb}")
        finally:
            self.out.slowest = max(self.out.slowest, (trio.current_time() - start, f"{self.name}: {op}"))

    async def _do(self, client: Client, op: str, files: list[str]) -> None:
        rng = self.rng
        if op == "write":
            name = rng.choice([*files, f"f{rng.randrange(1000)}"]) if files else f"f{rng.randrange(1000)}"
            data = rng.randbytes(rng.choice((0, 1, 100, 4096, rng.randrange(MAX_SIZE))))
            await client.write_file(posixpath.join(self.remote, name), data)
            if (self.local / name).read_bytes() != data:
                raise _Wrong(f"{name}: the server's file differs from what was written")
        elif op == "read":
            name = rng.choice(files)
            data = await client.read_file(posixpath.join(self.remote, name))
            want = (self.local / name).read_bytes()
            if data != want:
                raise _Wrong(f"{name}: read {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}; "
                             f"the file has {len(want)}, {hashlib.sha256(want).hexdigest()[:12]}")
        elif op == "listdir":
            names = sorted(await client.listdir(self.remote))
            there = sorted(os.listdir(self.local))
            if names != there:
                raise _Wrong(f"listed {names}, the directory holds {there}")
        elif op == "stat":
            name = rng.choice(files)
            a = await client.stat(posixpath.join(self.remote, name))
            st = os.stat(self.local / name)
            size = st.st_size if self.values else a.size  # (a size changed on the way: no client can tell)
            if (size, a.fileid, a.is_dir) != (st.st_size, st.st_ino, False):
                raise _Wrong(f"{name}: size {a.size}, fileid {a.fileid}; the file has {st.st_size}, {st.st_ino}")
        elif op == "rename":
            old = rng.choice(files)
            new = f"r{rng.randrange(1000)}"
            await client.rename(posixpath.join(self.remote, old), posixpath.join(self.remote, new))
            if ((self.local / old).exists() and old != new) or not (self.local / new).exists():
                raise _Wrong(f"rename {old} -> {new}: not so on the server")
        elif op == "remove":
            name = rng.choice(files)
            await client.remove(posixpath.join(self.remote, name))
            if (self.local / name).exists():
                raise _Wrong(f"{name}: still there after remove")
        elif op == "mkdir":
            name = f"d{rng.randrange(1000)}"
            try:
                await client.mkdir(posixpath.join(self.remote, name))
            except FileExistsError:
                if not (self.local / name).is_dir():
                    raise _Wrong(f"{name}: EEXIST, and nothing there") from None
                await client.rmdir(posixpath.join(self.remote, name))
                if (self.local / name).exists():
                    raise _Wrong(f"{name}: still there after rmdir") from None
                return
            if not (self.local / name).is_dir():
                raise _Wrong(f"{name}: no directory after mkdir")

    async def cli(self, url: str, timeout: float) -> None:
        """One command line run: right output, or one line on standard error."""
        files = self.files()
        rng = self.rng
        if files and rng.random() < 0.5:
            name = rng.choice(files)
            argv = ["cat", f"{url}{self.full}/{name}"]
            want: bytes | None = (self.local / name).read_bytes()
        else:
            argv = ["ls", f"{url}{self.full}"]
            want = None
        cmd = [sys.executable, "-m", "pynfsrdma._cli.main", *argv, "--timeout", f"{timeout:g}"]
        self.out.cli_runs += 1
        try:
            with trio.fail_after(self.deadline + 10):  # (the interpreter's start besides)
                p = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)
        except trio.TooSlowError:
            self.out.cli_bad.append(f"{' '.join(argv)}: did not end")
            return
        err = p.stderr.decode(errors="replace")
        if p.returncode == 0:
            got_names = sorted(p.stdout.decode(errors="replace").split())
            if want is not None and p.stdout != want:
                self.out.cli_bad.append(f"{' '.join(argv)}: exit 0 with {len(p.stdout)} bytes, not the file's")
            elif want is None and got_names != sorted(os.listdir(self.local)):
                self.out.cli_bad.append(f"{' '.join(argv)}: exit 0 listing {got_names}")
            elif err:
                self.out.cli_bad.append(f"{' '.join(argv)}: exit 0 but wrote {err!r}")
            return
        if "Traceback" in err or err.count("\n") != 1 or not err.startswith("pynfsrdma: "):
            self.out.cli_bad.append(f"{' '.join(argv)}: exit {p.returncode}: {err[-2000:]!r}")


async def run_worker(
    url: str,
    local_root: Path,
    remote_root: str,
    index: int,
    settings: WorkerSettings,
    *,
    stop: Callable[[], bool] | None = None,
) -> Outcomes:
    """One worker (see :func:`run_workload`), in this process: it works in ``w<index>`` below
    ``remote_root`` until its ``settings`` end it or ``stop()`` says so."""
    out = Outcomes()
    s = settings
    budget = s.timeo * (s.retrans + 1)
    connect_timeout = budget + 2
    deadline = 3 * budget + 5  # a call: a few COMPOUNDs, each within the soft budget, and the slack of a busy host
    until = trio.current_time() + s.seconds if s.seconds is not None else None
    rng = random.Random(f"{s.seed}/{index}")
    name = f"w{index}"
    local = local_root / name
    local.mkdir(exist_ok=True)
    local.chmod(0o777)
    w = _Worker(name, f"/{name}", f"{remote_root}/{name}", local, rng, out, deadline, s.values)
    done = 0

    def going() -> bool:
        return ((s.calls is None or done < s.calls) and (until is None or trio.current_time() < until)
                and (stop is None or not stop()))

    while going():
        start = trio.current_time()
        try:
            async with Client.connect(f"{url}{remote_root}", timeout=connect_timeout, timeo=s.timeo,
                                      retrans=s.retrans) as client:
                took = trio.current_time() - start
                if took > connect_timeout + 1:
                    out.hangs.append(f"{name}: connect took {took:.1f} s, timeout={connect_timeout:g}")
                while going():
                    await w.one(client)
                    done += 1
                    if s.cli_every and done % s.cli_every == 0:
                        await w.cli(url, connect_timeout)
        except OSError as e:  # (connect failed, or leaving the client did)
            took = trio.current_time() - start
            if took > connect_timeout + 1 and not done:
                out.hangs.append(f"{name}: connect failed after {took:.1f} s, timeout={connect_timeout:g}")
            out.error(f"connect: {_errno_name(e)} ({type(e).__name__})", e)
            done += 1
        except Exception as e:
            tb = "".join(traceback.format_exception(e)[-6:])
            out.escaped.append(f"{name}: connect: {type(e).__name__}: {e}\n{tb}")
            done += 1
    return out


async def run_workload(
    url: str,
    local_root: Path,
    remote_root: str,
    settings: WorkerSettings,
    *,
    workers: int = 3,
    stop: Callable[[], bool] | None = None,
    memory_cap: int = MEMORY_CAP,
) -> Outcomes:
    """Run the workload against ``url`` (``nfs://host:port``, the proxy) with ``workers`` workers, each
    working as its ``settings`` say (:class:`WorkerSettings`: until its time or its calls run out), or
    until ``stop()`` says so, in ``remote_root`` ("/export/dir", from the server's root), which is
    ``local_root`` on the server's disk. Each worker is a process of its own (``python -m
    pynfsrdma._testbed.reply_fuzz``) whose address space is capped at ``memory_cap`` bytes (RLIMIT_AS: a
    client that allocates what a server claims fails there, with a MemoryError counted as escaped,
    instead of taking the machine), and works in a subdirectory of its own; a worker whose client cannot
    connect or whose connection ends connects again. The outcomes of all workers, with each one's peak
    memory (:attr:`Outcomes.peaks`)."""
    out = Outcomes()
    procs: list[trio.Process] = []
    results: list[bytes] = [b""] * workers
    errors: list[bytes] = [b""] * workers

    async def collect(i: int, stream: trio.abc.ReceiveStream, into: list[bytes]) -> None:
        chunks = []
        async for chunk in stream:
            chunks.append(chunk)
        into[i] = b"".join(chunks)

    async with trio.open_nursery() as nursery:
        for i in range(workers):
            argv = [sys.executable, "-m", __name__, url, str(local_root), remote_root, str(i),
                    "--settings", settings.to_json(), "--memory-cap", str(memory_cap)]
            p = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE)
            procs.append(p)
            assert p.stdout is not None and p.stderr is not None
            nursery.start_soon(collect, i, p.stdout, results)
            nursery.start_soon(collect, i, p.stderr, errors)
        stopped = False
        while any(p.returncode is None for p in procs):
            if not stopped and stop is not None and stop():
                stopped = True
                for p in procs:  # (a worker ends when its standard input does)
                    assert p.stdin is not None
                    await p.stdin.aclose()
            await trio.sleep(0.2)
        for p in procs:
            await p.wait()
    for i, p in enumerate(procs):
        try:
            part = _outcomes_from(json.loads(results[i].splitlines()[-1]))
        except (IndexError, ValueError) as e:
            why = errors[i].decode(errors="replace")[-2000:]
            out.escaped.append(f"w{i}: the worker process ended with status {p.returncode} and no outcomes "
                               f"({type(e).__name__}): {why}")
            continue
        out.merge(part)
    return out


def rss_bytes() -> int:
    """This process's resident memory now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (VmHWM)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmHWM:"))


def _outcomes_from(d: dict[str, Any]) -> Outcomes:
    return Outcomes(Counter(d["right"]), Counter(d["errors"]), d["wrong"], d["escaped"], d["hangs"], d["cli_runs"],
                    d["cli_bad"], d["samples"], d["peaks"], tuple(d["slowest"]))


def main(argv: list[str] | None = None) -> int:
    """One worker process of :func:`run_workload`: its outcomes as one JSON line on standard output."""
    p = argparse.ArgumentParser(prog=f"python -m {__name__}", description=main.__doc__)
    p.add_argument("url")
    p.add_argument("local_root", type=Path)
    p.add_argument("remote_root")
    p.add_argument("index", type=int)

    def settings(text: str) -> WorkerSettings:
        try:
            return WorkerSettings.from_json(text)
        except (ValueError, TypeError) as e:
            raise argparse.ArgumentTypeError(f"not WorkerSettings as JSON: {text!r} ({e})") from None

    p.add_argument("--settings", type=settings, default=WorkerSettings(),
                   help="the worker's settings as JSON (WorkerSettings' fields), e.g. '{\"calls\": 100}'")
    p.add_argument("--memory-cap", type=int, default=MEMORY_CAP, help="RLIMIT_AS, bytes")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # (the misbehaviour it provokes is what is counted)
    resource.setrlimit(resource.RLIMIT_AS, (args.memory_cap, args.memory_cap))

    async def run() -> Outcomes:
        ended = False

        async def until_stdin_ends() -> None:
            nonlocal ended
            stdin = trio.lowlevel.FdStream(os.dup(0))
            async with stdin:
                while await stdin.receive_some():
                    pass
            ended = True

        async with trio.open_nursery() as nursery:
            nursery.start_soon(until_stdin_ends)
            out = await run_worker(args.url, args.local_root, args.remote_root, args.index, args.settings,
                                   stop=lambda: ended)
            nursery.cancel_scope.cancel()
        return out

    out = trio.run(run)
    out.peaks.append(peak_rss_bytes())
    print(json.dumps({k: dict(v) if isinstance(v, Counter) else v for k, v in vars(out).items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
