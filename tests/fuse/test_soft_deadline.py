"""A soft mount whose server stops answering: one copy fails within one soft timeout (timeo x
(retrans + 1)), its later system calls at once, and the mount works again once the server answers.
The server is NFS-Ganesha behind the testbed's path proxy, stalled (it reads and answers nothing,
the connection stays up: the worst case, where nothing but the clock tells the client) or cut (every
connection reset, new ones refused: a server gone)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
import trio

from pynfsrdma._testbed.ganesha import ExportPath

TIMEO_DS = 20  # deciseconds: 2 s a try
RETRANS = 1  # one try more: 4 s a system call
BUDGET = TIMEO_DS / 10 * (RETRANS + 1)
SLACK = 1.5  # a busy host's scheduling, FUSE's round trips, the watchdog's tick
CHUNK = 1 << 20


def copy(src: Path, dst: Path, stall_after: int, stall: trio.lowlevel.TrioToken, proxy_fault: object) -> list[
    tuple[str, float, int]
]:
    """What a careful cp does (read, write, fsync, close), the server stalled once ``stall_after``
    bytes are written; returns each failed call, the seconds since the stall, and its errno."""
    failed: list[tuple[str, float, int]] = []
    t0 = 0.0
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with open(src, "rb") as f:
            written = 0
            while chunk := f.read(CHUNK):
                if written == stall_after:
                    trio.from_thread.run_sync(proxy_fault, trio_token=stall)  # type: ignore[arg-type]
                    t0 = time.monotonic()
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    failed.append(("write", time.monotonic() - t0, e.errno or 0))
                    break
                written += len(chunk)
        try:
            os.fsync(fd)
        except OSError as e:
            failed.append(("fsync", time.monotonic() - t0, e.errno or 0))
    finally:
        try:
            os.close(fd)
        except OSError as e:
            failed.append(("close", time.monotonic() - t0, e.errno or 0))
    return failed


@pytest.mark.parametrize("fault", ["stall", "cut"])
async def test_a_server_gone_fails_a_copy_within_one_soft_timeout(
    proxied_paths, mount_url, export_path: ExportPath, tmp_path: Path, fault: str
) -> None:
    paths = await proxied_paths(count=1)
    proxy = paths[0]
    url = f"nfs://{paths.addresses[0]}:{paths.port}{export_path.remote}"
    m = await trio.to_thread.run_sync(mount_url, url, f"soft,timeo={TIMEO_DS},retrans={RETRANS}")
    src = tmp_path / "src"
    src.write_bytes(os.urandom(64 * CHUNK))
    try:
        start = time.monotonic()
        failed = await trio.to_thread.run_sync(
            copy, src, m.path / "dst", 8 * CHUNK, trio.lowlevel.current_trio_token(), getattr(proxy, fault)
        )
        took = time.monotonic() - start
        print(f"copy, the server {fault}: {failed}, {took:.1f} s in all")
        assert failed, "the copy did not fail"
        assert all(code == errno.EIO for _, _, code in failed), failed
        first, last = failed[0][1], failed[-1][1]
        # the first error within one soft timeout, and every later call at once, not each after a
        # timeout of its own (the user's cp: one timeout, not three)
        assert first <= BUDGET + SLACK, failed
        assert last <= BUDGET + SLACK, failed
        # the lost write-back is reported by fsync or close, the first of them to meet it (as the
        # Linux client does, close reports only what failed since the fsync: cp sees it either way)
        assert failed[-1][0] in ("fsync", "close"), failed
    finally:
        proxy.restore()

    # the server answers again: so does the mount (after its path reconnects)
    def write_again() -> None:
        deadline = time.monotonic() + 20
        while True:
            try:
                (m.path / "after").write_bytes(b"answered")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    await trio.to_thread.run_sync(write_again)
    assert (export_path.local / "after").read_bytes() == b"answered"
    rc = await trio.to_thread.run_sync(m.unmount)
    assert rc == 0, m.log.read_text()[-3000:]
