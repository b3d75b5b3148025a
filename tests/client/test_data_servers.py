"""The flexfiles data servers' calls (RFC 8435 over RFC 1813) on a real TCP connection to a small
NFSv3 responder on loopback: the credential is AUTH_SYS with the layout's synthetic uid and gid, READ
data comes back as a view of the reply, WRITE data goes as the caller's bytes, COMMIT's verifier; an
NFSv3 error and a data server that cannot be reached are each a ``DataServerError`` (what the layout
turns into LAYOUTERROR and I/O through the metadata server)."""

from __future__ import annotations

import functools
import socket
import struct
from typing import Any

import pytest
import trio

from pynfsrdma._client.data_servers import DataServerError, DataServers
from pynfsrdma._proto import nfs3
from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._xdr import Packer, Unpacker

FH = b"F" * 28
VERF = b"verf-ds1"


class Responder:
    """An NFSv3 READ/WRITE/COMMIT answerer over one file's bytes, remembering each call's credential."""

    def __init__(self, status: int = 0) -> None:
        self.data = bytearray(b"0123456789" * 1000)
        self.status = status
        self.calls: list[tuple[int, int, int]] = []  # (proc, uid, gid)

    def answer(self, record: bytes) -> bytes:
        u = Unpacker(record)
        xid = u.uint32()
        assert u.uint32() == rpcdef.CALL
        body = rpcdef.decode_call_body(u)
        cred = rpcdef.decode_auth_sys(body.cred)
        self.calls.append((body.proc, cred.uid, cred.gid))
        assert (body.prog, body.vers) == (nfs3.NFS_PROGRAM, nfs3.NFS_V3)
        p = Packer()
        rpcdef.pack_accepted_reply_header(p, xid)
        if self.status:
            p.uint32(self.status)
            p.uint32(0)  # post_op_attr / pre_op_attr absent
            if body.proc != nfs3.nfsproc3.NFSPROC3_READ:
                p.uint32(0)
            return p.getvalue()
        if body.proc == nfs3.nfsproc3.NFSPROC3_READ:
            args = nfs3.READ3args.XDR.unpack(u)
            chunk = bytes(self.data[args.offset:args.offset + args.count])
            nfs3.READ3res.pack(p, (0, nfs3.READ3resok(None, len(chunk), args.offset + len(chunk) >= len(self.data),
                                                      chunk)))
        elif body.proc == nfs3.nfsproc3.NFSPROC3_WRITE:
            args = nfs3.WRITE3args.XDR.unpack(u)
            self.data[args.offset:args.offset + args.count] = bytes(args.data)
            nfs3.WRITE3res.pack(p, (0, nfs3.WRITE3resok(nfs3.wcc_data(None, None), args.count, args.stable, VERF)))
        else:
            nfs3.COMMIT3res.pack(p, (0, nfs3.COMMIT3resok(nfs3.wcc_data(None, None), VERF)))
        return p.getvalue()

    async def serve(self, stream: trio.SocketStream) -> None:
        buf = b""
        async with stream:
            while True:
                got = await stream.receive_some(65536)
                if not got:
                    return
                buf += got
                while len(buf) >= 4:
                    (mark,) = struct.unpack(">I", buf[:4])
                    n = mark & rpcdef.RM_LENGTH_MASK
                    if len(buf) < 4 + n:
                        break
                    reply = self.answer(buf[4:4 + n])
                    buf = buf[4 + n:]
                    await stream.send_all(struct.pack(">I", rpcdef.RM_LAST_FRAGMENT | len(reply)) + reply)


async def _with_responder(responder: Responder, body: Any) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, responder.serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        ds = DataServers(nursery)
        try:
            await body(ds, ("127.0.0.1", port))
        finally:
            await ds.aclose()
            nursery.cancel_scope.cancel()


async def test_read_write_commit_as_the_layouts_synthetic_owner() -> None:
    responder = Responder()

    async def body(ds: DataServers, where: tuple[str, int]) -> None:
        data, eof = await ds.read(where, FH, 5, 20, 1001, 100)
        assert isinstance(data, memoryview) and bytes(data) == b"56789012345678901234" and eof is False
        out = bytearray(b"abcdef")
        count, committed, verf = await ds.write(where, FH, 9995, out, nfs3.stable_how.UNSTABLE, 1000, 100)
        assert (count, committed, verf) == (6, nfs3.stable_how.UNSTABLE, VERF)
        assert await ds.commit(where, FH, 1000, 100) == VERF
        data, eof = await ds.read(where, FH, 9990, 100, 1001, 100)
        assert bytes(data) == b"01234abcdef" and eof is True

    await _with_responder(responder, body)
    assert responder.calls == [(6, 1001, 100), (7, 1000, 100), (21, 1000, 100), (6, 1001, 100)]


async def test_a_data_servers_nfsv3_error_names_its_status() -> None:
    async def body(ds: DataServers, where: tuple[str, int]) -> None:
        with pytest.raises(DataServerError, match=r"data server 127.0.0.1:\d+: READ: NFS3ERR_ACCES") as e:
            await ds.read(where, FH, 0, 10, 1, 0)
        assert e.value.status == nfs3.nfsstat3.NFS3ERR_ACCES
        with pytest.raises(DataServerError, match="WRITE: NFS3ERR_ACCES"):
            await ds.write(where, FH, 0, b"x", nfs3.stable_how.FILE_SYNC, 1, 0)

    await _with_responder(Responder(status=nfs3.nfsstat3.NFS3ERR_ACCES), body)


async def test_a_data_server_that_cannot_be_reached() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # (nothing listens there now)
    async with trio.open_nursery() as nursery:
        ds = DataServers(nursery)
        with pytest.raises(DataServerError, match=rf"data server 127.0.0.1:{port}: ") as e:
            await ds.read(("127.0.0.1", port), FH, 0, 10, 0, 0)
        assert e.value.status is None
