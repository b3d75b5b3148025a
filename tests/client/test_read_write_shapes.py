"""A WRITE of an open file is a prepared COMPOUND shape (``ReadWrite.write``): its reply of success
is decoded by the shape's decoder into what the writer keeps (the bytes written, their stability
and the write verifier that a COMMIT must return), with no general decoding; a reply the shape does
not take (a failed WRITE) goes the general way and says the same as ever."""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio

from pynfsrdma._client.api import Client
from pynfsrdma._client.read_write import WRITE_SHAPE
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.compound import COMPOUND4res, ResOp, encode_compound_res
from pynfsrdma._proto.nfs4.types import SEQUENCE4resok, WRITE4args, WRITE4resok, stateid4
from pynfsrdma._session import session as session_module
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._xdr import Packer, Unpacker

SEQ = ResOp(c.OP_SEQUENCE, c.NFS4_OK, SEQUENCE4resok(bytes(16), 5, 2, 63, 63, 0))


def test_the_write_shape_gives_count_stability_and_verifier() -> None:
    data = b"x" * 5000
    ops = WRITE_SHAPE.ops(b"\x07" * 28, WRITE4args(stateid4(0, b"s" * 12), 0, c.UNSTABLE4, data))
    p = Packer()
    encode_compound_res(p, COMPOUND4res(c.NFS4_OK, "", [
        SEQ, ResOp(c.OP_PUTFH, c.NFS4_OK, None), ResOp(c.OP_WRITE, c.NFS4_OK, WRITE4resok(4096, c.UNSTABLE4, b"verifier"))]))
    got = WRITE_SHAPE.decode(Unpacker(p.getvalue()), ops)
    assert got is not None and got[1] == ((4096, c.UNSTABLE4, b"verifier"),)
    assert WRITE_SHAPE.data(got[1]) == (None, 4096)


def test_writes_of_an_open_file_need_no_general_decoding(
    ganesha: Ganesha, export_path: ExportPath, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"
    data = os.urandom(200_000)
    general: list[int] = []
    real = session_module.decode_compound_res

    def decode(u: Any) -> Any:
        general.append(1)
        return real(u)

    monkeypatch.setattr(session_module, "decode_compound_res", decode)

    async def main() -> None:
        async with Client.connect(url) as client, await client.open("/f", "wb") as f:
            rw, of = client.nfs.read_write, f.of
            general.clear()
            count, committed, verifier = await rw.write(of, 0, memoryview(data), client.cred, c.UNSTABLE4)
            assert general == []  # (the shape's decoder took the reply)
            assert count == len(data) and committed in (c.UNSTABLE4, c.DATA_SYNC4, c.FILE_SYNC4)
            assert verifier == await rw.commit(of.fh, client.cred)
            # a WRITE the server refuses (a stateid it never gave) is decoded the general way, as ever
            general.clear()
            of_stateid = of.stateid
            of.stateid = stateid4(1, b"\xee" * 12)
            try:
                with pytest.raises(OSError) as refused:
                    await rw.write(of, 0, b"y" * 10, client.cred)
            finally:
                of.stateid = of_stateid
            # (NFS-Ganesha 4.3 calls a stateid it never gave stale, 9 bad)
            assert general and str(refused.value) in (
                "Bad file descriptor (NFS4ERR_STALE_STATEID)", "Bad file descriptor (NFS4ERR_BAD_STATEID)"
            )
            assert getattr(refused.value, "op", None) == c.OP_WRITE
        assert (export_path.local / "f").read_bytes() == data

    trio.run(main)
