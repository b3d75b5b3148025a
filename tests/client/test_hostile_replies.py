"""The path API and the command line against NFS-Ganesha whose replies the testbed's mutating proxy
changes, one kind of change at a time: what a user sees is the right result (the request went again
on a new connection) or one OSError naming the server, the operation and the path; never a short
file, a traceback, a hang, or a client that allocates what a server claims."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest
import trio
from mutating_support import ALWAYS, Proxy, url

from pynfsrdma._client.api import Client
from pynfsrdma._errors import ProtocolError
from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._rpc.errors import RpcReplyError
from pynfsrdma._session.sequence import MAX_VIOLATIONS
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.mutations import Mutation, Rule
from pynfsrdma._testbed.reply_fuzz import rss_bytes


async def ticking(gaps: list[float]) -> None:
    """Note how long the event loop took to come back to us, every few milliseconds."""
    last = time.monotonic()
    while True:
        await trio.sleep(0.005)
        now = time.monotonic()
        gaps.append(now - last)
        last = now


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pynfsrdma._cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def one_line_error(p: subprocess.CompletedProcess[str]) -> str:
    """What a script sees of a failure: exit status 1, one line on stderr, no traceback."""
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("pynfsrdma: ") and "Traceback" not in p.stderr, p.stderr
    return p.stderr


@pytest.mark.parametrize("channel", ["csr_fore_chan_attrs", "csr_back_chan_attrs"])
async def test_a_huge_slot_count_is_refused_at_once(mutating: Proxy, export_path: ExportPath, channel: str,
                                                     nursery: trio.Nursery) -> None:
    """CREATE_SESSION claiming 2^32-1 slots: the client used to build a slot object for each (19 s
    and 2.8 GB before a MemoryError, the event loop blocked all the while)."""
    proxy = await mutating(Rule(Mutation.LENGTH, c.OP_CREATE_SESSION, f"{channel}.ca_maxrequests", 0xFFFFFFFF,
                                ALWAYS))
    gaps: list[float] = []
    nursery.start_soon(ticking, gaps)
    before = rss_bytes()
    start = time.monotonic()
    with pytest.raises(ProtocolError) as e:
        async with Client.connect(url(proxy, export_path), timeout=5):
            pass
    assert time.monotonic() - start < 3
    assert e.value.errno == errno.EIO and "ca_maxrequests 4294967295 exceeds its bound 1024" in str(e.value)
    assert "CREATE_SESSION" in str(e.value) and f"127.0.0.1:{proxy.port}" in str(e.value)
    await trio.sleep(0.02)  # the ticker's turn: a refusal sooner than its first tick left it nothing to note
    assert gaps and max(gaps) < 0.5, "the event loop stood still"
    assert rss_bytes() - before < 50 << 20

    p = await trio.to_thread.run_sync(lambda: cli("ls", "--timeout", "2", url(proxy, export_path)))
    assert "ca_maxrequests" in one_line_error(p)


async def test_system_err_on_reads_is_one_oserror(mutating: Proxy, export_path: ExportPath) -> None:
    """accept_stat SYSTEM_ERR on two of the READs in flight together: one OSError (EIO) naming the
    server, READ and the file, not trio's ExceptionGroup that 'except OSError' misses."""
    data = os.urandom(3 << 20)
    (export_path.local / "f").write_bytes(data)
    proxy = await mutating(Rule(Mutation.HEADER, c.OP_READ, "accept_stat", rpcdef.accept_stat.SYSTEM_ERR, 2))
    async with Client.connect(url(proxy, export_path), rsize=256 << 10) as nfs:
        with pytest.raises(RpcReplyError) as e:
            await nfs.read_file("/f")
        assert isinstance(e.value, OSError) and e.value.errno == errno.EIO
        assert str(e.value) == f"127.0.0.1:{proxy.port}: /f: READ: SYSTEM_ERR"
        assert await nfs.read_file("/f") == data  # (the connection lives on: an RPC-level answer)


async def test_a_shortened_read_with_bytes_left_over_is_never_the_whole_file(
    mutating: Proxy, export_path: ExportPath
) -> None:
    """A READ reply whose data length was cut, eof set, the rest of the data left in the record: once,
    the READ goes again on a new connection and the file comes whole; every time, a ProtocolError."""
    data = os.urandom(164_703)
    (export_path.local / "f").write_bytes(data)
    rule = Rule(Mutation.READ_SHORT, c.OP_READ, count=1)
    proxy = await mutating(rule)
    async with Client.connect(url(proxy, export_path)) as nfs:
        assert await nfs.read_file("/f") == data
        assert rule.count == 0 and nfs.clientid.session is not None and nfs.clientid.session.violations == 1
        rule.count = MAX_VIOLATIONS + 1
        with pytest.raises(ProtocolError) as e:
            await nfs.read_file("/f")
        assert str(e.value).startswith(f"127.0.0.1:{proxy.port}: /f: READ: ")
        assert "trailing garbage" in str(e.value)
        assert await nfs.read_file("/f") == data


async def test_nseconds_of_a_second_or_more_is_a_protocol_error(mutating: Proxy, export_path: ExportPath) -> None:
    (export_path.local / "f").write_bytes(b"x")
    rule = Rule(Mutation.NSECONDS, c.OP_GETATTR, "time_modify", count=1)
    proxy = await mutating(rule)
    async with Client.connect(url(proxy, export_path)) as nfs:
        st = os.stat(export_path.local / "f")
        assert (await nfs.stat("/f")).mtime_ns == st.st_mtime_ns  # (sent again: the time as it is)
        rule.count = ALWAYS
        with pytest.raises(ProtocolError, match=r"nseconds \d+ is not below one second"):
            await nfs.stat("/f")
    p = await trio.to_thread.run_sync(lambda: cli("stat", "--timeout", "5", url(proxy, export_path) + "/f"))
    assert f"127.0.0.1:{proxy.port}: " in one_line_error(p) and ": GETATTR: nfstime4 nseconds" in p.stderr


@pytest.mark.parametrize(
    "rule",
    [
        Rule(Mutation.HEADER, c.OP_READDIR, "COMPOUND status"),
        Rule(Mutation.HEADER, c.OP_READDIR, "result 2 opnum"),
        Rule(Mutation.HEADER, c.OP_READDIR, "result count"),
        Rule(Mutation.COOKIE, c.OP_READDIR),
        Rule(Mutation.LENGTH, c.OP_READDIR),
        Rule(Mutation.TRAILING, c.OP_READDIR),
        Rule(Mutation.TRUNCATE, c.OP_READDIR),
        Rule(Mutation.XID, c.OP_READDIR),
        Rule(Mutation.DUPLICATE, c.OP_READDIR),
        Rule(Mutation.RECORD_MARK, c.OP_READDIR, "huge"),
        Rule(Mutation.RECORD_MARK, c.OP_READDIR, "not last"),
        Rule(Mutation.RECORD_MARK, c.OP_READDIR, "shorter"),
        Rule(Mutation.RECORD_MARK, c.OP_READDIR, "longer"),
    ],
    ids=lambda r: f"{r.mutation.value}-{r.site or 'any'}",
)
async def test_a_listing_through_one_bad_reply_is_right(
    mutating: Proxy, export_path: ExportPath, rule: Rule
) -> None:
    names = sorted(f"n{i:03d}" for i in range(40))
    for n in names:
        (export_path.local / n).write_bytes(b"")
    proxy = await mutating(rule)
    async with Client.connect(url(proxy, export_path), timeo=2, retrans=1) as nfs:
        with trio.fail_after(10):
            assert sorted(await nfs.listdir("/")) == names
    assert rule.count == 0  # (the reply was changed)


async def test_connect_keeps_to_its_timeout_when_the_export_lookup_goes_unanswered(
    mutating: Proxy, export_path: ExportPath
) -> None:
    """The session is made, then the export's lookup never gets its reply (its record never ends):
    connect(timeout=3) fails after 3 s, not after the lookup's own tries (it took 10-12 s)."""
    proxy = await mutating(Rule(Mutation.RECORD_MARK, c.OP_PUTROOTFH, "not last", count=ALWAYS))
    start = time.monotonic()
    with pytest.raises(OSError) as e:
        async with Client.connect(url(proxy, export_path), timeout=3):
            pass
    took = time.monotonic() - start
    assert 2.9 < took < 3.8, took
    assert e.value.errno == errno.EIO and "not reached within 3 s" in str(e.value)


async def test_the_command_line_reports_a_misbehaving_server_only_when_asked(
    mutating: Proxy, export_path: ExportPath
) -> None:
    """A listing through a reply to an XID never sent: right, and silent; with -v, one warning."""
    (export_path.local / "a").write_bytes(b"")
    for verbose in ([], ["-v"]):
        rule = Rule(Mutation.XID, c.OP_READDIR)
        proxy = await mutating(rule)
        p = await trio.to_thread.run_sync(cli, *verbose, "ls", url(proxy, export_path))
        assert rule.count == 0
        assert p.returncode == 0 and p.stdout == "a\n", p
        warnings = [line for line in p.stderr.splitlines() if " WARNING " in line]
        if verbose:
            assert len(warnings) == 1 and "which no call of ours waits for" in warnings[0], p.stderr
        else:
            assert p.stderr == ""
