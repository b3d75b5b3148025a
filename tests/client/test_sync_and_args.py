"""The blocking wrapper for plain scripts, and connecting by arguments instead of a URL."""

from __future__ import annotations

import errno
import fcntl
import gc
import os
import select
import signal
import threading
import time

import pytest
import trio

from pynfsrdma._client.api import Client, LockDenied
from pynfsrdma._client.sync import connect
from pynfsrdma._errors import NFS4Error
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


def test_blocking_client_for_plain_scripts(ganesha: Ganesha, export_path: ExportPath) -> None:
    with connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        nfs.mkdir("/d")
        with nfs.open("/d/f", "wb") as f:
            f.write(b"hello ")
            f.write(b"world")
        with nfs.open("/d/f", "rb") as f:
            assert f.read() == b"hello world"
        assert nfs.listdir("/d") == ["f"]
        assert nfs.stat("/d/f").size == 11
        with pytest.raises(NFS4Error) as ei:
            nfs.stat("/nope")
        assert ei.value.errno == errno.ENOENT
    assert (export_path.local / "d" / "f").read_bytes() == b"hello world"


def test_blocking_files_lock_and_find_holes(ganesha: Ganesha, export_path: ExportPath) -> None:
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}?vers=4.2"
    with connect(url) as a, connect(url) as b, a.open("/f", "w+b", buffering=0) as fa, \
            b.open("/f", "rb", buffering=0) as fb:
        fa.pwrite(1 << 20, b"d" * 65536)
        fa.lock(fcntl.F_WRLCK, 0, 10)
        with pytest.raises(LockDenied) as ei:
            fb.lock(fcntl.F_RDLCK)
        assert ei.value.errno == errno.EAGAIN
        conflict = fb.test_lock(fcntl.F_RDLCK, 5, 1)
        assert conflict is not None and (conflict.start, conflict.end) == (0, 9)
        fa.unlock()
        fb.lock(fcntl.F_RDLCK, wait=True)
        assert fb.seek_data(0) == 1 << 20 and fb.seek_hole(0) == 0
        assert fa.allocate(0, 4096).size == (1 << 20) + 65536
        assert fa.punch_hole(1 << 20, 65536).size == (1 << 20) + 65536
        with pytest.raises(NFS4Error) as ei:
            fb.seek_data(0)  # the data punched away: none left
        assert ei.value.errno == errno.ENXIO


def test_blocking_connect_errors_reach_the_caller() -> None:
    with pytest.raises(OSError, match="refused"):
        connect("nfs://127.0.0.1:1/export", timeout=3)


async def test_connect_by_arguments(ganesha: Ganesha, export_path: ExportPath) -> None:
    async with Client.connect(host=ganesha.host, port=ganesha.port, export=export_path.remote) as nfs:
        await nfs.write_file("/x", b"1")
        assert await nfs.listdir("/") == ["x"]


def test_requests_go_as_the_calling_user_unless_told_otherwise(ganesha: Ganesha, export_path: ExportPath) -> None:
    """A script run by a user writes as that user (as the CLI does), not as root."""
    import os
    import subprocess
    import sys

    os.chmod(export_path.local, 0o777)
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}"
    script = (
        # (imports done as root: the interpreter lives under /root here; import pynfsrdma loads its
        # names when first used, so the one used is taken before the user changes)
        "import encodings.idna, os, sys\nfrom pynfsrdma import connect\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "with connect(sys.argv[1]) as nfs:\n"
        "    nfs.write_file('/mine', b'x')\n"
    )
    subprocess.run([sys.executable, "-c", script, url], check=True, timeout=60)
    st = (export_path.local / "mine").stat()
    assert (st.st_uid, st.st_gid) == (65534, 65534)

    with connect(f"{url}?uid=1234&gid=5678") as nfs:  # libnfs's URL options
        nfs.write_file("/theirs", b"y")
    st = (export_path.local / "theirs").stat()
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    with connect(f"{url}?uid=1234", uid=4321) as nfs:  # an argument wins over the URL
        nfs.write_file("/arg", b"z")
    assert (export_path.local / "arg").stat().st_uid == 4321


def test_an_unknown_url_option_is_an_error_that_names_it(ganesha: Ganesha) -> None:
    from pynfsrdma._client.url import URLError

    with pytest.raises(URLError, match="unknown URL option: nconect"):
        connect(f"nfs://{ganesha.host}:{ganesha.port}/export?nconect=2")


def test_calls_from_threads_are_carried_out_by_workers_that_stay(ganesha: Ganesha, export_path: ExportPath) -> None:
    """Each call of the blocking client is handed to a worker task of its loop that stays for the next
    call (no task started per call): as many workers as calls were in flight at once. Results and
    errors reach the thread that called."""
    (export_path.local / "f").write_bytes(b"x" * 100)
    with connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        loop = nfs._loop
        assert loop._calls is not None
        got: dict[int, list[object]] = {}

        def calls(t: int) -> None:
            out: list[object] = []
            for _ in range(20):
                out.append(nfs.stat("/f").size)
            try:
                nfs.stat(f"/missing-{t}")
            except FileNotFoundError as e:
                out.append(e.filename)
            out.append(nfs.read_bytes("/f", t, 3))
            got[t] = out

        threads = [threading.Thread(target=calls, args=(t,)) for t in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert got == {t: [100] * 20 + [f"/missing-{t}", b"xxx"] for t in range(6)}
        workers = set(loop._calls.child_tasks)
        assert 1 <= len(workers) <= 7  # (the listener, and a worker for each call that came meanwhile)
        for _ in range(30):
            assert nfs.exists("/f")
        assert set(loop._calls.child_tasks) == workers  # the same tasks: none started, none ended


class _Steps(trio.abc.Instrument):
    """How many steps each task of the loop took, by the task's name."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] = self.steps.get(task.name, 0) + 1


def test_calls_one_at_a_time_go_straight_to_the_listener(ganesha: Ganesha, export_path: ExportPath) -> None:
    """A call that finds the loop's listener waiting wakes it through its eventfd and is carried out
    in that step (or, handed before the listener waits, in the step that finished the call before):
    trio's run_sync_soon task (a step of its own before the call's) takes none, and the call's
    answer is the same."""
    (export_path.local / "f").write_bytes(b"x" * 100)
    with connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        nfs.stat("/f")
        steps = _Steps()

        async def add() -> None:
            trio.lowlevel.add_instrument(steps)

        async def remove() -> None:
            trio.lowlevel.remove_instrument(steps)

        nfs._loop.call(add)
        sizes = [nfs.stat("/f").size for _ in range(50)]
        with pytest.raises(FileNotFoundError) as missing:
            nfs.stat("/missing")
        nfs._loop.call(remove)
    assert sizes == [100] * 50
    assert missing.value.errno == errno.ENOENT and missing.value.filename == "/missing"
    assert steps.steps.get("<TrioToken.run_sync_soon task>", 0) == 0, steps.steps
    assert sum(n for name, n in steps.steps.items() if name.endswith("_Loop._listen")) >= 51, steps.steps


def test_a_call_in_flight_when_the_connection_closes_says_so(ganesha: Ganesha, export_path: ExportPath) -> None:
    nfs = connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}")
    nfs.stat("/")
    failed: list[BaseException] = []
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await trio.sleep_forever()

    def waits() -> None:
        try:
            nfs._loop.call(forever)
        except RuntimeError as e:
            failed.append(e)

    th = threading.Thread(target=waits)
    th.start()
    assert started.wait(10)
    nfs.close()
    th.join(10)
    assert [str(e) for e in failed] == ["the connection closed during the call"]
    with pytest.raises(RuntimeError, match=r"^the connection is closed$"):
        nfs.stat("/")


class _Alarm(Exception):
    pass


def test_a_wait_interrupted_leaves_the_threads_next_calls_their_own_answers(
        ganesha: Ganesha, export_path: ExportPath) -> None:
    """A caller's wait broken by a signal (as Ctrl-C breaks it) raises there; the call it left goes
    on, and when it ends it wakes no later call of that thread: each gets its own answer."""
    (export_path.local / "f").write_bytes(b"x" * 100)
    with connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        nfs.stat("/f")
        left_ended = threading.Event()

        async def slow() -> str:
            await trio.sleep(0.5)
            left_ended.set()
            return "the call left"

        def alarm(signum: int, frame: object) -> None:
            raise _Alarm

        old = signal.signal(signal.SIGALRM, alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            with pytest.raises(_Alarm):
                nfs._loop.call(slow)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert left_ended.wait(10)
        assert nfs.read_bytes("/f", 0, 3) == b"xxx"
        assert nfs.stat("/f").size == 100
        with pytest.raises(FileNotFoundError):
            nfs.stat("/missing")


def _eventfds() -> int:
    """How many eventfds this process has open."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"
        except FileNotFoundError:  # (the listing's own)
            pass
    return n


def test_threads_that_called_and_ended_leave_no_descriptor_open(ganesha: Ganesha, export_path: ExportPath) -> None:
    """Each calling thread waits on a descriptor of its own, made at its first call; it is closed
    when the thread ends."""
    (export_path.local / "f").write_bytes(b"x" * 100)
    with connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        nfs.stat("/f")
        gc.collect()
        before = _eventfds()
        sizes: list[int] = []

        def calls() -> None:
            sizes.extend(nfs.stat("/f").size for _ in range(3))

        for _ in range(5):
            threads = [threading.Thread(target=calls) for _ in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        assert sizes == [100] * 120
        # (40 threads called; an earlier test's loop may have closed since). The loop's thread lets
        # go of a call's waker just after it wakes its caller, which may have ended by then
        deadline = time.monotonic() + 5
        while True:
            gc.collect()
            if _eventfds() <= before or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert _eventfds() <= before


def test_a_call_asks_the_kernel_for_no_process_id(ganesha: Ganesha, export_path: ExportPath,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each blocking call checks that it runs in the process of the loop's thread (a forked child has
    none): by the id noted at the start and at each fork, not by a getpid(2) of its own."""
    (export_path.local / "f").write_bytes(b"x" * 100)
    asked: list[int] = []
    real_getpid = os.getpid

    def getpid() -> int:
        asked.append(1)
        return real_getpid()

    with connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        nfs.stat("/f")
        monkeypatch.setattr(os, "getpid", getpid)
        for _ in range(10):
            assert nfs.stat("/f").size == 100
            assert nfs.read_bytes("/f", 0, 3) == b"xxx"
            assert not nfs.closed
        monkeypatch.undo()
        assert len(asked) == 0


def test_a_forked_child_is_told_the_connection_is_closed(ganesha: Ganesha, export_path: ExportPath) -> None:
    """The loop's thread is not in a forked child: a call there fails at once saying so (it would
    otherwise wait for a loop that is not there)."""
    (export_path.local / "f").write_bytes(b"x" * 100)
    with connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}") as nfs:
        assert nfs.stat("/f").size == 100
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: what its call said, on the pipe
            try:
                nfs.stat("/f")
                said = "answered"
            except RuntimeError as e:
                said = f"{nfs.closed} {e}"
            os.write(w, said.encode())
            os._exit(0)
        os.close(w)
        try:
            ready, _, _ = select.select([r], [], [], 20)
            said = os.read(r, 200).decode() if ready else "no answer in 20 s"
        finally:
            if not ready:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
        assert said == "True the connection is closed"
        assert nfs.stat("/f").size == 100
