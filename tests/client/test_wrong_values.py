"""Replies that are well-formed but whose values are wrong, through the testbed's mutating proxy in front
of NFS-Ganesha: a number from a reply never sizes what the client allocates or how long it works. A file
whose size a GETATTR says is 2**62 is read to its real end, in a process whose memory stays where it was."""

from __future__ import annotations

import errno
import json
import os
import sys

import pytest
import trio
from mutating_support import ALWAYS, Proxy, url

from pynfsrdma._client.api import Client
from pynfsrdma._client.names import MIN_SERVER_IO
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.mutations import Mutation, Rule

HUGE = 1 << 62

# A client in a process of its own reads one file; its peak memory is reset before the read (Linux:
# clear_refs 5) and read after it. Its address space is capped a little above what it holds, so that
# a client that allocates what a size says fails there instead of taking the machine.
READER = r"""
import json, resource, sys, trio
from pynfsrdma._client.api import Client

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) << 10 for l in f if l.startswith(key + ":"))

async def main(url, path, how):
    async with Client.connect(url, rsize=64 << 10) as nfs:
        async with await nfs.open(path) as f:  # (warms what a read needs: its first READ)
            await f.pread(0, 1)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = status("VmRSS")
        limit = status("VmSize") + (256 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            if how == "read_file":
                data = await nfs.read_file(path)
            else:
                async with await nfs.open(path) as f:
                    data = await f.read()
            out = {"size": len(data), "data": data.hex()}
        except OSError as e:
            out = {"error": f"{type(e).__name__}: {e}"}
        except MemoryError:
            out = {"error": "MemoryError"}
        out["grown"] = status("VmHWM") - before
        print(json.dumps(out))

trio.run(main, *sys.argv[1:])
"""


@pytest.mark.parametrize("how", ["read_file", "File.read"])
@pytest.mark.parametrize("length", [3, 700_001])
async def test_a_file_said_to_hold_2_to_the_62_bytes_is_read_to_its_real_end(
    mutating: Proxy, export_path: ExportPath, how: str, length: int
) -> None:
    """The OPEN's GETATTR says 2**62 bytes (a flipped high bit, as a fuzzing proxy made one): the read
    returns the file's bytes, and the reading process's peak memory grows by a few MiB at most."""
    data = os.urandom(length)
    (export_path.local / "f").write_bytes(data)
    rule = Rule(Mutation.VALUE, c.OP_OPEN, "attr_vals size", HUGE, count=2)
    proxy = await mutating(rule)
    p = await trio.run_process([sys.executable, "-c", READER, url(proxy, export_path), "/f", how],
                               capture_stdout=True, capture_stderr=True, check=False)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    out = json.loads(p.stdout)
    assert rule.count == 0  # (both OPENs were told 2**62 bytes)
    assert "error" not in out, out
    assert bytes.fromhex(out["data"]) == data
    assert out["grown"] < 8 << 20, out["grown"]


async def test_a_read_and_a_listing_whose_eof_never_comes_end(mutating: Proxy, export_path: ExportPath) -> None:
    """Every READ and READDIR reply says eof false, the last ones too: the file is read to its end (the
    READ past it returns nothing) and the directory listed to its end (the READDIR past the last entry
    returns none), each once."""
    data = os.urandom(300_001)
    (export_path.local / "f").write_bytes(data)
    names = sorted(["f", *(f"n{i:03}" for i in range(300))])
    for n in names[1:]:
        (export_path.local / n).write_bytes(b"")
    read_eof = Rule(Mutation.EOF, c.OP_READ, count=ALWAYS)
    list_eof = Rule(Mutation.EOF, c.OP_READDIR, count=ALWAYS)
    proxy = await mutating(read_eof, list_eof)
    async with Client.connect(url(proxy, export_path), rsize=64 << 10) as nfs:
        with trio.fail_after(60):
            assert await nfs.read_file("/f") == data
            assert sorted(await nfs.listdir("/")) == names
    assert read_eof.count < ALWAYS and list_eof.count < ALWAYS  # (the eofs were there, and changed)


async def test_a_maxread_and_maxwrite_of_one_byte_are_taken_as_4_kib(mutating: Proxy, export_path: ExportPath) -> None:
    """The export's GETATTR says maxread 1 and maxwrite 1: a file is not read and written a byte per
    READ and WRITE (200,000 of each for this one), but by 4 KiB at least."""
    data = os.urandom(200_000)
    rules = [Rule(Mutation.VALUE, c.OP_PUTROOTFH, f"attr_vals {a}", 1) for a in ("maxread", "maxwrite")]
    proxy = await mutating(*rules)  # (one change a reply: the first client's maxread, the second's maxwrite)
    async with Client.connect(url(proxy, export_path)) as reader, Client.connect(url(proxy, export_path)) as writer:
        assert [r.count for r in rules] == [0, 0]
        assert (reader.nfs.maxread, writer.nfs.maxwrite) == (MIN_SERVER_IO, MIN_SERVER_IO)
        with trio.fail_after(60):
            await writer.write_file("/f", data)
            assert await reader.read_file("/f") == data
    assert (export_path.local / "f").read_bytes() == data


async def test_a_made_up_readdir_cookie_is_one_oserror_or_the_right_listing(
    mutating: Proxy, export_path: ExportPath
) -> None:
    """An entry's cookie changed to 0, 1, 2**62, 2**64 - 1, ...: the listing is right (the server knew
    the cookie) or fails with one OSError (a cookie repeated, or one the server refuses); it never
    goes round in circles."""
    names = sorted(f"n{i:03}" for i in range(400))
    for n in names:
        (export_path.local / n).write_bytes(b"")
    rule = Rule(Mutation.VALUE, c.OP_READDIR, "cookie", count=ALWAYS)
    proxy = await mutating(rule)
    async with Client.connect(url(proxy, export_path), timeo=2.0, retrans=1) as nfs:
        for _ in range(6):
            with trio.fail_after(60):
                try:
                    got = sorted(await nfs.listdir("/"))
                except OSError as e:
                    assert isinstance(e.errno, int)
                    continue
            assert got == names
    assert rule.count < ALWAYS - 5


@pytest.mark.parametrize("result", [0, 2], ids=["SEQUENCE", "an operation"])
async def test_a_server_asking_for_a_pause_forever_holds_a_soft_call_to_its_deadline(
    mutating: Proxy, export_path: ExportPath, result: int
) -> None:
    """Every reply says NFS4ERR_DELAY (SEQUENCE's: the request is resent on its slot; an operation's: it
    goes again as a new one), well-formed each time: a soft client (timeo=1, retrans=1: 2 s) waits the
    pauses out for its 2 s and then fails the call with EAGAIN, where it had waited for ever."""
    (export_path.local / "f").write_bytes(b"x")
    proxy = await mutating()
    async with Client.connect(url(proxy, export_path), timeo=1.0, retrans=1) as nfs:
        rule = Rule(Mutation.STATUS, c.OP_GETATTR, f"result {result} failed", c.NFS4ERR_DELAY, ALWAYS)
        proxy.mutator.rules.append(rule)
        with trio.fail_after(30), pytest.raises(OSError) as e:
            await nfs.stat("/f")
        assert e.value.errno == errno.EAGAIN and "NFS4ERR_DELAY" in repr(e.value), repr(e.value)
        assert rule.count <= ALWAYS - 4  # (the server was asked again, a few times)
        rule.count = 0
        assert (await nfs.stat("/f")).size == 1


async def test_a_small_write_whose_file_handle_never_came_closes_its_open(
    mutating: Proxy, export_path: ExportPath
) -> None:
    """The one-COMPOUND write of a small file (OPEN, GETFH, WRITE, CLOSE, GETATTR) answered with its
    GETFH failed after the OPEN succeeded: the call fails with one OSError (EIO, as the server said),
    and a CLOSE goes for the open the reply says was made, its file handle found by name (LOOKUP).
    (The server here did run the whole COMPOUND; only its reply was changed, so that CLOSE finds the
    open already closed, which the client takes quietly.)"""
    proxy = await mutating(Rule(Mutation.STATUS, c.OP_OPEN, "result 3 failed", value=c.NFS4ERR_IO))
    async with Client.connect(url(proxy, export_path)) as nfs:
        await nfs.listdir("/")  # (the directory's file handle is known: the write is one COMPOUND)
        before = nfs.stats()["op_counts"]
        with pytest.raises(OSError) as caught:
            await nfs.write_file("/small", b"data")
        assert caught.value.errno == errno.EIO
        after = nfs.stats()["op_counts"]
        sent = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}
        assert sent["OPEN"] == 1 and sent["LOOKUP"] == 1 and sent["CLOSE"] == 2, sent
        await nfs.write_file("/small", b"again")  # (the proxy changes one reply only)
    assert (export_path.local / "small").read_bytes() == b"again"
