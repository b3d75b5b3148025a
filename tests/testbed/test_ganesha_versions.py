"""The two NFS-Ganesha servers of the testbed: the host's 4.3 and 9 from the Debian 13 root it builds
(``Ganesha(version=...)``, ``testbed up --ganesha``, the run's choice ``--ganesha`` / PYNFSRDMA_GANESHA)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pynfsrdma import Client
from pynfsrdma._errors import NFS4Error
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.types import IO_ADVISE4args, PUTFH4args, READ_PLUS4args, stateid4
from pynfsrdma._testbed import Ganesha, GaneshaError, daemon
from pynfsrdma._testbed.debian_root import SERVER_MOUNT_POINT, cache_dir, root_ready
from pynfsrdma._testbed.ganesha import VERSION_ENV
from pynfsrdma._testbed.procs import cmdline, pid_alive

pytestmark = pytest.mark.ganesha

# what each server's log says first
STARTING = {"4.3": "Ganesha Version 4.3", "9": "Ganesha Version 9.14"}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pynfsrdma._cli.main", *args],
        capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})},
    )


def test_the_run_s_server_is_the_version_it_chose(ganesha: Ganesha) -> None:
    chosen = os.environ.get(VERSION_ENV) or "4.3"
    assert ganesha.version == chosen
    assert STARTING[chosen] in ganesha.log_path.read_text()


def test_ganesha_9_runs_from_the_debian_13_root(tmp_path: Path) -> None:
    with Ganesha(tmp_path / "g9", version="9") as server:
        assert server.pid is not None
        root = root_ready()
        assert root is not None and root.parent == cache_dir()
        # the server is the root's ganesha.nfsd, in the root: it sees its directory at the mount point
        assert os.path.samefile(f"/proc/{server.pid}/root", root)
        # and its namespace holds none of the host's mounts (a FUSE mount's copy there would keep
        # that mount alive after fusermount3 -u: issue 30)
        # (all of them: the server's own mountinfo would leave out those outside its root)
        listed = subprocess.run(
            ["nsenter", f"--mount=/proc/{server.pid}/ns/mnt", "cat", "/proc/self/mountinfo"],
            capture_output=True, text=True, check=True,
        )
        seen = {line.split()[4] for line in listed.stdout.splitlines()}
        assert {m for m in seen if m not in ("/", "/proc", SERVER_MOUNT_POINT) and m.split("/")[1] != "dev"} == set()
        assert cmdline(server.pid)[:4] == ["/usr/bin/ganesha.nfsd", "-F", "-L", f"{SERVER_MOUNT_POINT}/ganesha.log"]
        assert STARTING["9"] in server.log_path.read_text()
        assert f'Path = "{SERVER_MOUNT_POINT}/export";' in server.config_path.read_text()

        (server.export_dir / "from-disk").write_bytes(b"written on the host's disk\n")
        done = cli("cat", f"{server.url}/from-disk")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "written on the host's disk\n"
        local = tmp_path / "up"
        local.write_bytes(b"x" * 300_000)
        done = cli("put", str(local), f"{server.url}/over-nfs")
        assert done.returncode == 0, done.stderr
        assert (server.export_dir / "over-nfs").read_bytes() == b"x" * 300_000

        first = server.pid
        server.restart()
        assert server.pid != first and not pid_alive(first)
        done = cli("cat", f"{server.url}/over-nfs")
        assert done.returncode == 0 and len(done.stdout) == 300_000
    # the server's mounts were its own namespace's: none is left on the host or in the root
    mounts = Path("/proc/self/mounts").read_text()
    assert str(root) not in mounts


def test_an_unknown_version_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(GaneshaError) as caught:
        Ganesha(tmp_path / "g", version="7")
    assert str(caught.value) == "NFS-Ganesha version '7' is not one the testbed runs (one of 4.3, 9)"
    state = tmp_path / "tb"
    done = cli("testbed", "up", "--dir", str(state), env={VERSION_ENV: "7"})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "pynfsrdma testbed: NFS-Ganesha version '7' is not one the testbed runs (one of 4.3, 9)"
    ]
    done = cli("testbed", "up", "--ganesha", "7", "--dir", str(state))
    assert done.returncode == 2 and "argument --ganesha: invalid choice: '7'" in done.stderr
    assert not (state / "state.json").exists()


@pytest.fixture
def state_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="tb-", dir="/tmp"))
    yield directory
    daemon.down(directory)
    shutil.rmtree(directory, ignore_errors=True)


def test_testbed_up_ganesha_9_then_down(state_dir: Path) -> None:
    done = cli("testbed", "up", "--ganesha", "9", "--json", "--dir", str(state_dir))
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout)
    assert state["server"]["version"] == "9" and state["started"]
    assert STARTING["9"] in Path(state["server"]["log"]).read_text()
    Path(state["export_dir"], "f").write_bytes(b"from testbed 9\n")
    done = cli("cat", f"{state['url']}/f")
    assert done.returncode == 0 and done.stdout == "from testbed 9\n", done.stderr
    done = cli("testbed", "status", "--dir", str(state_dir))
    assert done.returncode == 0 and f"running: NFS-Ganesha 9 127.0.0.1:{state['server']['port']} " in done.stderr
    # asked again for the other server, it says what runs
    done = cli("testbed", "up", "--ganesha", "4.3", "--dir", str(state_dir))
    assert done.returncode == 0
    assert "it runs with NFS-Ganesha 9: run `down` first for another layout" in done.stderr
    done = cli("testbed", "down", "--dir", str(state_dir))
    assert done.returncode == 0, done.stderr
    assert not pid_alive(state["server"]["pid"])


async def test_what_ganesha_9_says_of_read_plus_and_io_advise(tmp_path: Path) -> None:
    """Why the client sends neither to 9 either: 9.14's VFS backend answers READ_PLUS NFS4ERR_NOTSUPP
    (4.3 answers it with no data), and takes no IO_ADVISE hint (4.3 dies at the next CLOSE after one);
    9 stays up through an OPEN, WRITE and CLOSE after it. Both servers say the same of themselves in
    EXCHANGE_ID (no server_impl_id, one scope); only the pNFS flags differ."""
    with Ganesha(tmp_path / "g9", version="9") as server:
        (server.export_dir / "f").write_bytes(b"data for READ_PLUS" * 100)
        async with Client.connect(f"{server.url}?vers=4.2") as client:
            identity = client.clientid.identity
            assert identity is not None and identity.impl == ""
            assert identity.server_scope.endswith(b"_NFS-Ganesha\x00")
            assert identity.flags & c.EXCHGID4_FLAG_MASK_PNFS == c.EXCHGID4_FLAG_USE_NON_PNFS
            fh, _ = await client.paths.resolve("/f")
            anonymous = stateid4(0, bytes(12))
            with pytest.raises(NFS4Error) as caught:
                await client.nfs.run([PUTFH4args(fh), READ_PLUS4args(anonymous, 0, 1000)], client.cred)
            assert caught.value.status == c.NFS4ERR_NOTSUPP
            advised = await client.nfs.run(
                [PUTFH4args(fh), IO_ADVISE4args(anonymous, 0, 1000, [1 << c.IO_ADVISE4_WILLNEED])], client.cred
            )
            assert advised[-1].status == c.NFS4_OK and advised[-1].res.ior_hints == []
            await client.write_file("/after", b"after IO_ADVISE")
            assert await client.read_file("/after") == b"after IO_ADVISE"
        assert server.running
