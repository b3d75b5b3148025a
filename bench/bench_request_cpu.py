"""The client's own CPU per request at each layer, with no socket and no server in the timing.

    .venv/bin/python bench/bench_request_cpu.py [--calls 2000] [--repeat 5] [--only stat,lookup] [--json]

Starts its own NFS-Ganesha (testbed) and connects a :class:`~pynfsrdma.Client` to it through a
transport that records every reply (real TCP). Each line below runs against the server first, so
that the replies it needs are captured; then the transport is switched to replay: a call's reply is
the one captured for the same call (the same procedure and operations), its XID and its SEQUENCE's
sequence id and slot id rewritten to those of the call, handed in-process to whoever reads the
connection (the caller itself, as over TCP, or the receive loop). What is left in the timing is the
client's own work on the way down and up, trio's task switches included. The lines, one layer each:

- ``transport``: the replay transport alone (a send and its reply, no RPC): what the others carry
  on top of their own cost, to subtract when comparing against socket-bound figures;
- ``rpc_null``: an RPC NULL call (``RpcConnection.call``);
- ``compound_codec``: encoding a SEQUENCE-only COMPOUND call (RPC header included) and decoding its
  reply, sans I/O;
- ``session``: a SEQUENCE-only COMPOUND through ``Session.compound``;
- ``clientid``: the same through ``ClientID.compound`` (the recovery loop over the session);
- ``lookup``: PUTFH+LOOKUP+GETFH+GETATTR as the mount sends it (``NFSv4.lookup``), attributes parsed;
- ``stat``: ``Client.stat`` of a file in the export's root;
- ``read_4k``: ``File.pread`` of 4 KiB;
- ``write_4k``: ``File.pwrite`` of 4 KiB (an UNSTABLE WRITE; a COMMIT now and then, as the engine
  decides);
- ``write_attrs_4k``: a FILE_SYNC WRITE of 4 KiB with a SETATTR (mode and times) and a GETATTR in its
  COMPOUND, as the mount's FLUSH of a small new file sends it (``ReadWrite.write_getattr``);
- ``info``: ``Client.lstat`` of a file in the export's root (fsspec's ``info``: one LOOKUP and GETATTR);
- ``cat_small``: ``Client.read_bytes`` of a small file to its end (fsspec's ``cat_file``: PUTFH, LOOKUP,
  GETFH, GETATTR, READ in one COMPOUND);
- ``cat_range``: ``Client.read_bytes`` of 4 KiB at an offset (a ranged ``cat_file``: PUTFH, LOOKUP, READ);
- ``read_held_4k``: 4 KiB read by a file handle already learned (``HeldFile.read``, fsspec's file opened
  "rb": PUTFH, READ with the anonymous stateid);
- ``pipe_small``: ``Client.write_file`` of a small file (fsspec's ``pipe_file``: PUTFH, OPEN, GETFH, WRITE
  FILE_SYNC4, CLOSE in one COMPOUND);
- ``create``: an OPEN that may create (UNCHECKED4) with its GETFH, ACCESS, GETATTR and the directory's
  GETATTR, as the mount's CREATE sends it (``Opens.open``);
- ``close_4``: four files' CLOSEs that nobody waits for, in one COMPOUND, as the mount's releases
  close them (``Opens.close_later``, then ``flush_closes``; a nursery opened for them each call);
- ``readdir_entry``: decoding a READDIR result of 10,000 entries as a listing takes it (the entries of a
  page read from the server, repeated under new names and cookies; ``Directories.readdir_plus``'s
  decoding, sans I/O), per entry;
- ``readdirplus_entry``: those entries, decoded once (each under a fileid and handle of its own), handed
  to the kernel as the mount's listing does with a file it keeps no Inode of: kept as a listed record
  (``InodeTable.listed``), its entry's fields (``NFSOperations._listed_fields``) packed into READDIRPLUS
  replies of READDIRPLUS_SIZE bytes (``DirentBuffer.add_fields``), each listing into a fresh inode
  table (a cold mount's), sans I/O, per entry.

Each line runs CALLS calls (``readdir_entry``, ``readdirplus_entry``: CALLS x 5 entries, at least one result), REPEAT times;
the table gives the CPU time of this process per call
(``time.process_time``), best and median of the repeats, in microseconds. The session's own share is
``session - rpc_null - compound_codec``.

``--count`` prints instead, per line, the function calls a call makes (``sys.setprofile``: Python
functions, and functions written in C), and with ``--count-by FILE-PART`` the Python functions
whose file's path holds FILE-PART (``_session``, ``_stats``, ``_rpc``...), by name, per call.

After the replay the client goes back to the server for its goodbye (closing the file, the
session): its slots' sequence ids ran ahead of the server's meanwhile, the server answers
SEQ_MISORDERED, and the client makes a new session first (the "recovering" line on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import struct
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import trio

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import align, bench_target
from pynfsrdma._client import stack
from pynfsrdma._client.api import Client, HeldFile
from pynfsrdma._client.attributes import RECORD_FILEID, AttrRecord, file_attrs, setattr_fattr4
from pynfsrdma._client.compounds import VERIFIER_SIZE
from pynfsrdma._client.directories import READDIR_BITMAP, listed_page
from pynfsrdma._fuse.cache import AttrTimeouts
from pynfsrdma._fuse.inodes import ROOT_INODE, InodeTable
from pynfsrdma._fuse.kernel.replies import DirentBuffer
from pynfsrdma._fuse.operations import NFSOperations
from pynfsrdma._fuse.options import MountOptions
from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import (
    COMPOUND4args,
    ResOp,
    decode_compound_res,
    encode_compound_args,
    result_of,
)
from pynfsrdma._proto.nfs4.types import (
    PUTFH4args,
    READDIR4args,
    READDIR4resok,
    SEQUENCE4args,
    dirlist4,
    entry4,
)
from pynfsrdma._transport.base import NO_HINTS, ReceiveInterrupted, ReplyHints, Transport
from pynfsrdma._transport.tcp import TcpTransport
from pynfsrdma._xdr import Packer, Unpacker

LINES = ("transport", "rpc_null", "compound_codec", "session", "clientid", "lookup", "stat", "info", "cat_small",
         "cat_range", "read_held_4k", "pipe_small", "read_4k", "write_4k", "write_attrs_4k", "create", "close_4", "readdir_entry", "readdirplus_entry")
FILE = "f"
SMALL = "s"  # a small file, read and written whole
SMALL_SIZE = 100
CREATED = "c"  # the name the create line opens (and creates, the first time)
LISTED_DIR = "d"
LISTED_FILES = 64  # files in the directory whose READDIR page is captured
LISTED_ENTRIES = 10_000  # entries of the READDIR result the readdir_entry line decodes
PER_ENTRY = {"readdir_entry": LISTED_ENTRIES, "readdirplus_entry": LISTED_ENTRIES}
READDIRPLUS_SIZE = 32 * 1024  # bytes a READDIRPLUS asks for (the buffer of ls's getdents)  # lines whose call decodes that many entries
FILE_SIZE = 64 * 1024
IO = 4096
_U32 = struct.Struct(">I")
_TWO = struct.Struct(">II")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _skip_opaque(buf: memoryview | bytes | bytearray, off: int) -> int:
    (n,) = _U32.unpack_from(buf, off)
    return off + 4 + ((n + 3) & ~3)


def call_key(head: memoryview) -> tuple[bytes, int]:
    """What identifies a call message (its first segment, from its XID on) for the replay: its
    procedure and, for a COMPOUND, the operations after SEQUENCE (their encoded arguments); and the
    offset of SEQUENCE's sequence id and slot id in it (-1: none)."""
    (proc,) = _U32.unpack_from(head, 20)
    off = _skip_opaque(head, 28)  # the credential's body
    off = _skip_opaque(head, off + 4)  # the verifier's
    if proc != c.NFSPROC4_COMPOUND:
        return _U32.pack(proc), -1
    off = _skip_opaque(head, off) + 8  # the tag, minorversion and the count of operations
    (op,) = _U32.unpack_from(head, off)
    if op != c.OP_SEQUENCE:
        return bytes(head[off:]), -1
    seq = off + 4 + c.NFS4_SESSIONID_SIZE
    return bytes(head[seq + 16:]), seq


def reply_seq_offset(reply: bytes) -> int:
    """The offset of a COMPOUND reply's SEQUENCE sequence id (-1: no successful SEQUENCE in it)."""
    off = _skip_opaque(reply, 16)  # xid, REPLY, MSG_ACCEPTED, the verifier's flavour: its body
    off += 4  # accept_stat
    if len(reply) < off + 4:
        return -1
    off = _skip_opaque(reply, off + 4)  # COMPOUND status, the tag
    if len(reply) < off + 12:
        return -1
    count, op, status = struct.unpack_from(">III", reply, off)
    if count == 0 or op != c.OP_SEQUENCE or status != c.NFS4_OK:
        return -1
    return off + 12 + c.NFS4_SESSIONID_SIZE


class Replies:
    """The replies captured, by call (:func:`call_key`): the reply and the offset of its SEQUENCE's
    sequence id."""

    def __init__(self) -> None:
        self.by_call: dict[bytes, tuple[bytes, int]] = {}
        self.replaying = False
        self.transports: list[Recording] = []
        self.answered = 0  # calls answered from a captured reply


class Uncaptured(Exception):
    """A call in the replay with no reply captured for it (not a transport fault: the bench fails)."""


class Recording(Transport):
    """A transport over a real one that keeps the reply of each call (by :func:`call_key`); once
    :meth:`replay` is called, it answers calls from those replies instead, in-process."""

    kind = "tcp"
    caller_receives = True  # (as TcpTransport's: the caller that sent a call reads its reply)

    def __init__(self, real: Transport, replies: Replies) -> None:
        self.real = real
        self.peer = real.peer
        self.replies = replies
        self._calls: dict[int, bytes] = {}  # xid -> its call's key, while capturing
        self._live: trio.CancelScope | None = None
        self._ready: deque[Unpacker] = deque()
        self._waiter = trio.lowlevel.ParkingLot()
        self._interrupted = False
        replies.transports.append(self)

    def replay(self) -> None:
        """From now on calls are answered from the replies captured (the real receive is given up)."""
        if self._live is not None:
            self._live.cancel()

    def live(self) -> None:
        """Calls go to the server again (the client's goodbye)."""
        self._waiter.unpark_all()

    async def send_call(self, xid: int, msg: Packer, hints: ReplyHints = NO_HINTS, deadline: float = float("inf")) -> None:
        head = memoryview(msg.segments()[0])
        key, seq = call_key(head)
        if not self.replies.replaying:
            self._calls[xid] = key
            await self.real.send_call(xid, msg, hints, deadline)
            return
        got = self.replies.by_call.get(key)
        if got is None:
            raise Uncaptured(f"no reply captured for a call of {len(key)} bytes ({key[:24].hex()}...)")
        reply, rseq = got
        self.replies.answered += 1
        buf = bytearray(reply)
        _U32.pack_into(buf, 0, xid)
        if rseq >= 0 and seq >= 0:
            buf[rseq:rseq + 8] = head[seq:seq + 8]  # (the call's sequence id and slot id)
        self._ready.append(Unpacker(buf))
        self._waiter.unpark()  # (no checkpoint: TcpTransport's send makes none when the socket takes it all)

    async def send_reply(self, xid: int, msg: Packer) -> None:
        if not self.replies.replaying:
            await self.real.send_reply(xid, msg)

    async def wait_receivable(self) -> None:
        while not self._ready:
            if not self.replies.replaying:
                await self.real.wait_receivable()
                return
            await self._park()

    def interrupt_receive(self) -> None:
        self._interrupted = True
        self._waiter.unpark_all()
        self.real.interrupt_receive()

    async def _park(self) -> None:
        self._interrupted = False
        await self._waiter.park()
        if self._interrupted:
            raise ReceiveInterrupted

    async def receive(self) -> Unpacker:
        while True:
            if self._ready:
                return self._ready.popleft()
            if self.replies.replaying:
                await self._park()
                continue
            with trio.CancelScope() as self._live:
                u = await self.real.receive()
                assert not isinstance(u, Exception)
                view = u.view
                xid, mtype = _TWO.unpack_from(view, u.pos)
                key = self._calls.pop(xid, None) if mtype == rpcdef.REPLY else None
                if key is not None:
                    reply = bytes(view[u.pos:u.end])
                    self.replies.by_call[key] = (reply, reply_seq_offset(reply))
                return u
            self._live = None  # (given up for the replay)

    async def aclose(self) -> None:
        self._waiter.unpark_all()
        await self.real.aclose()


def recording_connector(replies: Replies) -> type:
    """A stand-in for TcpTransport in the client's stack: its connections record (see Recording)."""

    class RecordingTcp:
        @staticmethod
        async def connect(host: str, port: int, **kwargs: Any) -> Transport:
            return Recording(await TcpTransport.connect(host, port, **kwargs), replies)

    return RecordingTcp


# -- the lines --------------------------------------------------------------------------------------
async def readdir_result(client: Client) -> bytes:
    """A READDIR4resok of LISTED_ENTRIES entries, XDR-encoded: the entries of a page read from the
    server (the listing's own attribute request), repeated under new names and cookies."""
    fh, _ = await client.nfs.names.lookup(client.root_fh, LISTED_DIR, client.cred)
    got: list[Any] = []

    def parse(res: list[ResOp]) -> None:
        ok = result_of(res, c.OP_READDIR)
        got.extend((e.attrs, bytes(ok.cookieverf)) for e in ok.reply.entries)

    await client.nfs.query(
        [PUTFH4args(fh), READDIR4args(0, bytes(VERIFIER_SIZE), 65536, 65536, READDIR_BITMAP)], client.cred, parse)
    assert got, "the listed directory has no entries"
    entries = [entry4(i + 3, f"entry-{i:05d}", got[i % len(got)][0]) for i in range(LISTED_ENTRIES)]
    return READDIR4resok.XDR.encode(READDIR4resok(got[0][1], dirlist4(entries, True)))


def lines(client: Client, f: Any, replies: Replies, listed: bytes) -> dict[str, Callable[[], Awaitable[Any]]]:
    cid = client.clientid
    session = cid.session
    assert session is not None
    path = session.paths.paths[0]
    rpc = path.rpc
    assert rpc is not None
    cred = client.cred
    machine = cid.machine_cred
    data = bytes(IO)
    # a transport of its own, in replay, that no receive loop reads: the transport line's
    transport = Recording(replies.transports[0].real, Replies())
    transport.replies.by_call = replies.by_call
    transport.replies.replaying = True

    async def transport_only() -> None:
        # a NULL's reply, handed through the transport's send and receive (no RPC matching)
        xid, p = rpc.start_call(c.NFSPROC4_NULL, machine)
        await transport.send_call(xid, p)
        await transport.receive()

    seq_args = COMPOUND4args("", session.minorversion, [SEQUENCE4args(session.sessionid, 1, 0, 0, False)])
    seq_reply = replies.by_call[b""][0]

    async def codec() -> None:
        _, p = rpc.start_call(c.NFSPROC4_COMPOUND, machine)
        encode_compound_args(p, seq_args)
        u = Unpacker(seq_reply)
        u.uint32()
        u.uint32()
        rpcdef.unpack_reply_header(u)
        decode_compound_res(u)
        u.done()

    async def null() -> None:
        await rpc.call(c.NFSPROC4_NULL, machine)

    async def in_session() -> None:
        await session.compound([], machine)

    async def in_clientid() -> None:
        await cid.compound([], machine)

    async def lookup() -> None:
        await client.nfs.names.lookup(client.root_fh, FILE, cred)

    async def stat() -> None:
        await client.stat(FILE)

    async def info() -> None:
        await client.lstat(FILE)

    async def cat_small() -> None:
        await client.read_bytes(SMALL)

    async def cat_range() -> None:
        await client.read_bytes(FILE, IO, IO)

    held = HeldFile(FILE)

    async def read_held() -> None:
        await held.read(client, IO, IO)

    small = bytes(SMALL_SIZE)
    # (one open owner for every call, so that the replay finds the captured OPEN: a once-owner is
    # new each time)
    client.nfs.whole_files._once_owners = itertools.count(1, 0)  # (1, always)

    async def pipe_small() -> None:
        await client.write_file(SMALL, small)

    async def read() -> None:
        await f.pread(0, IO)

    async def write() -> None:
        await f.pwrite(0, data)

    setting = setattr_fattr4(mode=0o644, atime_ns=1_600_000_000_000_000_000, mtime_ns=1_600_000_000_000_000_000)

    async def write_attrs() -> None:
        await client.nfs.read_write.write_getattr(f.of, 0, data, cred, c.FILE_SYNC4, setting)

    async def create() -> None:
        nfs = client.nfs
        per_open, nfs.owner_per_open = nfs.owner_per_open, False  # (one open owner per user, as the mount has)
        try:
            of = await nfs.open(client.root_fh, CREATED, cred, access=c.OPEN4_SHARE_ACCESS_BOTH, create=True,
                                mode=0o644, check=c.ACCESS4_READ | c.ACCESS4_MODIFY, dir_attrs=True)
        finally:
            nfs.owner_per_open = per_open
        nfs.opens.pop(id(of), None)  # (forgotten, not closed: the server's open is the same every time)

    closing: list[Any] = []  # the files close_4 closes (opened again before each call to the server)

    async def close_4() -> None:
        nfs = client.nfs
        if not replies.replaying:  # (new stateids to close; the replay's calls close the last ones again)
            closing[:] = [await nfs.open(client.root_fh, f"{CREATED}-{i}", cred, access=c.OPEN4_SHARE_ACCESS_BOTH,
                                         create=True) for i in range(4)]
        async with trio.open_nursery() as nursery:
            for of in closing:
                of.closed = False
                nfs.close_later(of, cred, nursery)
            await nfs.flush_closes()

    async def readdir_entries() -> None:
        listed_page(READDIR4resok.XDR.decode(listed))

    # the mount's operations as far as a listed entry's fields need them (its timeouts), and the
    # entries under fileids and handles of their own
    opts = MountOptions()
    ops = NFSOperations.__new__(NFSOperations)
    ops.timeouts, ops.entry_timeout = AttrTimeouts.from_options(opts), opts.acdirmin
    decoded = listed_page(READDIR4resok.XDR.decode(listed))[0] if listed else []
    first_fileid = 1 << 40
    entries = [
        (name, cookie, (fh or b"") + i.to_bytes(4, "big"),
         cast(AttrRecord, (*record[:RECORD_FILEID], first_fileid + i, *record[RECORD_FILEID + 1 :])))
        for i, (name, cookie, fh, record) in enumerate(decoded) if record is not None
    ]  # fmt: skip
    root_attrs = file_attrs(entries[0][3]) if entries else None

    async def readdirplus_entries() -> None:
        assert root_attrs is not None
        inodes = InodeTable(b"root", dataclasses.replace(root_attrs, fileid=1), ops.timeouts, 0.0)
        listed_as, fields = inodes.listed, ops._listed_fields
        token = DirentBuffer(READDIRPLUS_SIZE, plus=True)
        for name, cookie, fh, record in entries:
            ino = listed_as(fh, record, 0.0, ROOT_INODE, str(name, "utf-8", "surrogateescape"))
            if not token.add_fields(name, fields(ino, record), cookie):
                token.reply(1)
                token = DirentBuffer(READDIRPLUS_SIZE, plus=True)
                token.add_fields(name, fields(ino, record), cookie)
        token.reply(1)

    return {"transport": transport_only, "rpc_null": null, "compound_codec": codec, "session": in_session,
            "clientid": in_clientid, "lookup": lookup, "stat": stat, "info": info, "cat_small": cat_small,
            "cat_range": cat_range, "read_held_4k": read_held, "pipe_small": pipe_small, "read_4k": read, "write_4k": write,
            "write_attrs_4k": write_attrs, "create": create, "close_4": close_4, "readdir_entry": readdir_entries,
            "readdirplus_entry": readdirplus_entries}


async def cpu_per_call(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    """Microseconds of this process's CPU per call, over ``calls`` calls one after another."""
    start = time.process_time_ns()
    for _ in range(calls):
        await call()
    return (time.process_time_ns() - start) / calls / 1000


Counts = dict[str, dict[str, float]]


async def count_per_call(call: Callable[[], Awaitable[Any]], calls: int, by: str | None) -> dict[str, float]:
    """Function calls per call over ``calls`` calls: Python's and C's, and (``by``) the Python
    functions whose file's path holds ``by``, by qualified name."""
    python = c_functions = 0
    named: dict[str, int] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal python, c_functions
        if event == "call":
            python += 1
            if by is not None and by in frame.f_code.co_filename:
                name = frame.f_code.co_qualname
                named[name] = named.get(name, 0) + 1
        elif event == "c_call":
            c_functions += 1

    sys.setprofile(profile)
    try:
        for _ in range(calls):
            await call()
    finally:
        sys.setprofile(None)
    out = {"python calls": python / calls, "C calls": c_functions / calls}
    out.update({f"  {name}": n / calls for name, n in sorted(named.items(), key=lambda kv: -kv[1])})
    return out


async def run(url: str, wanted: list[str], calls: int, repeat: int, count: bool = False,
              count_by: str | None = None) -> tuple[dict[str, list[float]], int, Counts]:
    replies = Replies()
    real = stack.TcpTransport
    stack.TcpTransport = recording_connector(replies)  # type: ignore[misc]
    try:
        async with Client.connect(url) as client:
            stack.TcpTransport = real  # type: ignore[misc]
            async with await client.open(FILE, "r+") as f:
                cid = client.clientid
                session = cid.session
                assert session is not None
                # capture: each call against the server (the NULL's and a lone SEQUENCE's replies too)
                rpc = session.paths.paths[0].rpc
                assert rpc is not None
                await rpc.call(c.NFSPROC4_NULL, cid.machine_cred)
                await session.compound([], cid.machine_cred)
                listed = await readdir_result(client) if {"readdir_entry", "readdirplus_entry"} & set(wanted) else b""
                todo = lines(client, f, replies, listed)
                for name in wanted:
                    if name not in ("transport", "compound_codec", "readdir_entry", "readdirplus_entry"):
                        for _ in range(3):
                            await todo[name]()
                if "write_4k" in wanted:
                    await f.fsync()  # (a COMMIT's reply)
                replies.replaying = True
                for t in replies.transports:
                    t.replay()
                results: dict[str, list[float]] = {name: [] for name in wanted}
                counts: Counts = {}
                try:
                    for name in wanted if count else ():
                        await todo[name]()  # (warm)
                        per = PER_ENTRY.get(name, 1)
                        n = max(1, calls * 5 // per)
                        counts[name] = {k: v / per for k, v in (await count_per_call(todo[name], n, count_by)).items()}
                    for _ in range(0 if count else repeat):
                        for name in wanted:
                            await todo[name]()  # (warm)
                            per = PER_ENTRY.get(name, 1)
                            results[name].append(await cpu_per_call(todo[name], max(1, calls * 5 // per)) / per)
                finally:
                    replies.replaying = False
                    for t in replies.transports:
                        t.live()
                return results, replies.answered, counts
    finally:
        stack.TcpTransport = real  # type: ignore[misc]


def table(results: dict[str, list[float]]) -> str:
    rows = [("line", "CPU us/call best", "median")]
    for name, samples in results.items():
        rows.append((name, f"{min(samples):.1f}", f"{statistics.median(samples):.1f}"))
    return align(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000, help="calls per measurement (default 2000)")
    ap.add_argument("--repeat", type=int, default=5, help="measurements per line (default 5)")
    ap.add_argument("--only", default=",".join(LINES), help=f"lines to run, comma-separated (of {', '.join(LINES)})")
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    ap.add_argument("--count", action="store_true", help="count the function calls per call instead of timing")
    ap.add_argument("--count-by", metavar="FILE-PART", help="with --count: also the Python functions of files whose "
                    "path holds FILE-PART, by name")
    args = ap.parse_args(argv)
    wanted = [w for w in args.only.split(",") if w]
    unknown = [w for w in wanted if w not in LINES]
    if unknown:
        ap.error(f"unknown line(s): {', '.join(unknown)} (known: {', '.join(LINES)})")
    with bench_target(None) as target:
        assert target.local_dir is not None
        (target.local_dir / FILE).write_bytes(bytes(FILE_SIZE))
        (target.local_dir / SMALL).write_bytes(bytes(SMALL_SIZE))
        (target.local_dir / LISTED_DIR).mkdir(exist_ok=True)
        for i in range(LISTED_FILES):
            (target.local_dir / LISTED_DIR / f"{i:02d}").write_bytes(bytes(i))
        log(f"server: {target.description}; {args.calls} calls x {args.repeat} repeats per line, replayed")
        results, answered, counts = trio.run(run, target.ours_url, wanted, args.calls, args.repeat, args.count,
                                             args.count_by)
    if args.count:
        if args.json:
            print(json.dumps({"calls": args.calls, "per_call": counts}, sort_keys=True))
        else:
            for name, per in counts.items():
                print(name)
                print("\n".join(f"  {what:60s} {n:8.2f}" for what, n in per.items()))
        return 0
    if args.json:
        print(json.dumps({"calls": args.calls, "repeat": args.repeat, "replayed": answered,
                          "us_per_call": {k: [round(x, 2) for x in v] for k, v in results.items()}}, sort_keys=True))
    else:
        print(table(results))
        log(f"{answered} calls answered from the captured replies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
