"""A request sent with its slot's interrupted sequence id (after SEQ_MISORDERED) can be taken by the
server for a retry of the interrupted request, when that request, held in a stalled connection,
reaches the server in between: NFS-Ganesha then answers it with the interrupted request's cached
reply, without executing it. The request goes again as a new one, and the user gets its answer."""

from __future__ import annotations

import logging
import os

import trio

from pynfsrdma._client.api import Client
from pynfsrdma._proto.nfs4.types import PUTFH4args, READ4args
from pynfsrdma._testbed.ganesha import ExportPath

HOP = 0.5  # seconds each way on the path the request after the interrupted one takes
DATA = os.urandom(5000)


async def _race(proxied_paths, export_path: ExportPath, interrupted_ops, then) -> tuple[object, int]:
    """Interrupt a request of ``interrupted_ops(open file)`` on slot 0, held in a stalled path, then
    run ``then(open file)`` (its first send SEQ_MISORDERED, its step back's send arriving after the
    held request, which the stalled path lets through as the SEQ_MISORDERED answer passes). Returns
    what ``then`` returned and the interrupted sequence id; asserts that no reply was taken for a
    broken one and that slot 0 ends one sequence id further on."""
    paths = await proxied_paths(count=2)
    (export_path.local / "f").write_bytes(DATA)
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}?addrs={paths.addresses[1]}"
    async with Client.connect(url, timeo=30, hard=True) as nfs:
        session = nfs.clientid.session
        assert session is not None
        with trio.fail_after(10):
            while len(session.paths.live(session.group)) < 2:
                await trio.sleep(0.01)
        stalled = next(p for p in session.paths.paths if p.address == f"{paths.addresses[0]}:{paths.port}")
        f = await nfs.open("/f")
        slot0 = session.table.slots[0]
        interrupted_seqid = slot0.seqid + 1

        # the request goes out on a path that stalls, and is given up: slot 0 is interrupted, and
        # the request waits in the stalled path, not yet at the server
        paths[0].stall()
        with trio.move_on_after(0.3):
            await session.compound(interrupted_ops(f), nfs.clientid.machine_cred, pin=stalled)
        assert slot0.interrupted and slot0.seqid == interrupted_seqid
        session.paths.kill(stalled)  # (its reconnection waits behind the stall: the next takes the other path)

        # the next request goes on slot 0 with the next sequence id and is answered SEQ_MISORDERED
        # (the server never saw the interrupted one); as that answer passes, the stalled path lets
        # the interrupted request through, which the server executes with the interrupted sequence
        # id, before the next comes again with that very sequence id: the server takes it for the
        # interrupted request's retry and answers with that request's reply from its cache, or
        # RETRY_UNCACHED_REP when it kept none
        paths[1].delay(HOP * 1000)

        async def release_when_the_misordered_reply_passes() -> None:
            await trio.sleep(1.5 * HOP)
            paths[0].restore()

        violations = session.violations
        async with trio.open_nursery() as n:
            n.start_soon(release_when_the_misordered_reply_passes)
            with trio.fail_after(20):
                got = await then(f)
        assert session.violations == violations  # (nothing was taken for a broken reply)
        assert slot0.seqid == interrupted_seqid + 1 and not slot0.interrupted
        paths[1].restore()
        if not f.closed:
            await f.close()
        return got, interrupted_seqid


async def test_a_read_taken_for_the_interrupted_requests_retry_goes_again_and_returns_its_data(
    proxied_paths, export_path: ExportPath, caplog
) -> None:
    """The interrupted request is a lone SEQUENCE (a lease renewal), whose reply the server caches."""
    caplog.set_level(logging.INFO, "pynfsrdma._session.session")
    got, seqid = await _race(proxied_paths, export_path, lambda f: [], lambda f: f.read())
    # what the user sees: the READ returns the file's data
    assert got == DATA
    # the READ went with the interrupted id, taken by the renewal, then with the one after
    assert f"slot 0 seq {seqid} was answered for the interrupted request" in caplog.text


async def test_a_close_taken_for_an_uncached_reads_retry_goes_again_and_closes(
    proxied_paths, export_path: ExportPath, caplog
) -> None:
    """The interrupted request is a READ, whose reply the server does not cache: the CLOSE after it
    is answered RETRY_UNCACHED_REP, and was not executed."""
    caplog.set_level(logging.INFO, "pynfsrdma._session.session")

    def read(f):
        return [PUTFH4args(f.of.fh), READ4args(f.of.stateid, 0, 100)]

    async def close(f) -> bool:
        await f.close()
        return f.closed

    got, seqid = await _race(proxied_paths, export_path, read, close)
    # what the user sees: close() returns without an error
    assert got is True
    assert f"slot 0 seq {seqid} was answered for the interrupted request" in caplog.text
