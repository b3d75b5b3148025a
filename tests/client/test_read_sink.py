"""A READ's sink (the FUSE channel's reply pipe) is handed down as a parameter: the READ given it has
its data spliced into the pipe, any other READ gets its data as usual. A READ of an open file is a
prepared COMPOUND shape: its reply of success is decoded, and its data located, by the shape's
decoder."""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio

from pynfsrdma._client import read_payload
from pynfsrdma._client.api import Client
from pynfsrdma._client.read_payload import locate_read_data, read_data_locator
from pynfsrdma._client.read_write import READ_SHAPE
from pynfsrdma._fuse.reply_pipe import ReplyPipe
from pynfsrdma._proto import rpc as rpcdef
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import COMPOUND4res, ResOp, encode_compound_res
from pynfsrdma._proto.nfs4.types import READ4resok, SEQUENCE4resok
from pynfsrdma._session import session as session_module
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._transport.base import NEED_MORE, SplicedPayload
from pynfsrdma._xdr import Packer

RSIZE = 64 * 1024


def test_the_read_given_a_sink_has_its_data_spliced_into_it(ganesha: Ganesha, export_path: ExportPath) -> None:
    data = os.urandom(3 * RSIZE)
    (export_path.local / "f").write_bytes(data)
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"

    async def main() -> None:
        async with Client.connect(url, rsize=RSIZE) as client, await client.open("/f") as f:
            nfs, of, pipe = client.nfs, f.of, ReplyPipe()
            try:
                assert nfs.maxread == RSIZE
                got, _ = await nfs.read_write.read(of, of.fh, RSIZE, RSIZE, client.cred, sink=pipe)
                assert isinstance(got, SplicedPayload) and pipe.holds(got)
                assert bytes(got.materialize()) == data[RSIZE:2 * RSIZE]
                # no sink given: a view of the reply, whatever READs before were given
                plain, _ = await nfs.read_write.read(of, of.fh, 0, RSIZE, client.cred)
                assert isinstance(plain, memoryview) and bytes(plain) == data[:RSIZE]
                # a READ cut to maxread is not the range the pipe was given for: as usual
                cut, _ = await nfs.read_write.read(of, of.fh, 0, 2 * RSIZE, client.cred, sink=pipe)
                assert isinstance(cut, memoryview) and bytes(cut) == data[:RSIZE]
                assert pipe.fillings == 1
            finally:
                pipe.close()

    trio.run(main)


def _reply(results: list[ResOp], status: int = c.NFS4_OK) -> bytes:
    p = Packer()
    rpcdef.pack_accepted_reply_header(p, 0x52)
    encode_compound_res(p, COMPOUND4res(status, "", results))
    return p.getvalue()


SEQ = ResOp(c.OP_SEQUENCE, c.NFS4_OK, SEQUENCE4resok(bytes(16), 5, 2, 63, 63, 0))


def test_a_shaped_read_finds_its_data_where_the_general_decoder_does() -> None:
    """The READ of an open file is located by its shape's decoder: the same place and length as the
    general decoder finds, NEED_MORE for every head too short to tell, None for a failed READ."""
    data = bytes(range(256)) * 40 + b"xyz"
    ok = _reply([SEQ, ResOp(c.OP_PUTFH, c.NFS4_OK, None), ResOp(c.OP_READ, c.NFS4_OK, READ4resok(True, data))])
    shaped = read_data_locator(READ_SHAPE, len(data))
    found = shaped(memoryview(ok))
    assert found == locate_read_data(memoryview(ok)) and found is not None
    at, length = found
    assert length == len(data) and ok[at:at + length] == data
    for end in range(at):
        assert shaped(memoryview(ok[:end])) == NEED_MORE, end
    failed = _reply([SEQ, ResOp(c.OP_PUTFH, c.NFS4_OK, None), ResOp(c.OP_READ, c.NFS4ERR_BAD_STATEID, None)],
                    c.NFS4ERR_BAD_STATEID)
    assert shaped(memoryview(failed)) is None
    # data longer than asked: not the shape's reply; the general decoder locates it (and the
    # session's checks refuse it as they always did)
    assert read_data_locator(READ_SHAPE, len(data) - 1)(memoryview(ok)) == found


def test_reads_of_an_open_file_need_no_general_decoding(
    ganesha: Ganesha, export_path: ExportPath, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A READ's COMPOUND is a prepared shape: its reply of success, spliced or not, is decoded and its
    data located by the shape's decoder, and the general COMPOUND decoder never runs for it."""
    data = os.urandom(3 * RSIZE)
    (export_path.local / "f").write_bytes(data)
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"
    general: list[int] = []

    def counted(module: Any) -> None:
        real = module.decode_compound_res

        def decode(u: Any) -> Any:
            general.append(1)
            return real(u)

        monkeypatch.setattr(module, "decode_compound_res", decode)

    counted(session_module)
    counted(read_payload)

    async def main() -> None:
        async with Client.connect(url, rsize=RSIZE) as client, await client.open("/f") as f:
            nfs, of, pipe = client.nfs, f.of, ReplyPipe()
            try:
                general.clear()
                got, _ = await nfs.read_write.read(of, of.fh, RSIZE, RSIZE, client.cred, sink=pipe)
                assert isinstance(got, SplicedPayload) and bytes(got.materialize()) == data[RSIZE:2 * RSIZE]
                plain, eof = await nfs.read_write.read(of, of.fh, 2 * RSIZE, RSIZE, client.cred)
                assert bytes(plain) == data[2 * RSIZE:] and eof
                assert general == []
            finally:
                pipe.close()

    trio.run(main)
