"""fio with ``verify=crc32c`` through the mount: one 512 MiB file, four jobs each on its own quarter,
written sequentially (buffered), then at random offsets (O_DIRECT), and read back and checked."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

pytestmark = pytest.mark.fuse

FILE_SIZE = 512 << 20
JOBS = 4


# buffered, and O_DIRECT (the verify pass then reads from the server, not the kernel's page cache)
@pytest.mark.parametrize(("rw", "bs", "direct"), [("write", "1M", 0), ("randwrite", "64k", 1)])
def test_fio_verify_crc32c(work_dir: Any, rw: str, bs: str, direct: int) -> None:
    part = FILE_SIZE // JOBS
    cmd = [
        "fio",
        "--name=verify",
        f"--filename={work_dir.mnt / 'fio.dat'}",
        f"--rw={rw}",
        f"--bs={bs}",
        f"--size={part}",
        f"--offset_increment={part}",
        f"--numjobs={JOBS}",
        "--ioengine=psync",
        f"--direct={direct}",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--end_fsync=1",
        "--group_reporting",
        "--output-format=json",
        "--verify_state_save=0",  # no verify state files left behind in the working directory
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=work_dir.mnt)
    assert r.returncode == 0, r.stderr + r.stdout[-2000:]
    job = json.loads(r.stdout[r.stdout.index("{") :])["jobs"][0]
    assert job["error"] == 0
    assert job["write"]["io_bytes"] == FILE_SIZE  # every byte written ...
    assert job["read"]["io_bytes"] == FILE_SIZE  # ... and read back through the verify pass
    assert (work_dir.local / "fio.dat").stat().st_size == FILE_SIZE
