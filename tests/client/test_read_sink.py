"""A READ's sink (the FUSE channel's reply pipe) is handed down as a parameter: the READ given it has
its data spliced into the pipe, any other READ gets its data as usual."""

from __future__ import annotations

import os

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._fuse.reply_pipe import ReplyPipe
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._transport.base import SplicedPayload

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
