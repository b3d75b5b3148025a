"""Write delegations from nfsd (6.6 and later) on our FUSE mount, in the guest of the real-RDMA rig
(run by ``guest_tests.py`` in a child, step key ``deleg``).

:func:`fuse_write_delegation`: our mount creates a file and nfsd grants it a write delegation
(nfsd's own ``/proc/fs/nfsd/clients/*/states`` lists it). Opens, writes and closes of that file then
send no OPEN and no CLOSE (``pynfsrdma stats``: OPEN and CLOSE counts before and after, and every
operation sent meanwhile). The kernel client's ``stat`` makes nfsd ask us with CB_GETATTR, which we
answer from what we hold: the kernel client sees our size and we keep the delegation. Its open for
reading makes nfsd recall it: our open still open is OPENed for real (CLAIM_DELEG_CUR_FH), the data
reaches the server, we return the delegation, and the kernel client reads every byte, the size and
the mtime we wrote; what we write through that open afterwards reaches it too. The same ten
open/write/close cycles on a file nfsd delegates to nobody are counted beside them (COMPOUNDs).

:func:`client_timestamp_delegation`: whether nfsd grants an attribute delegation (RFC 9754) to an
OPEN that asks for one, through the path API's operations (the path API asks for no delegation).

:func:`fuse_timestamp_delegation`: our mount under one: the times it keeps, what that saves, what
the kernel client sees by CB_GETATTR and after the recall.

Only the standard library and the project (its CLI, control socket and path API) are used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from guest_fuse import mounted, nfsd_delegations, stats

CYCLES = 10  # open, write, close of the delegated file
GETATTR_TRIES = 3  # (fuse_timestamp_delegation)
CLOCK_REALTIME_COARSE = 5  # (linux/time.h; Python's time module does not name it)
HOLD = "import sys; f = open(sys.argv[1], 'rb'); print('open', flush=True); sys.stdin.read()"


def _ops(s: dict[str, Any]) -> dict[str, int]:
    return {k: int(v) for k, v in s["op_counts"].items()}


def _sent(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def _wait(what: str, ok: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {seconds:.0f} s")
        time.sleep(0.5)


def fuse_write_delegation(url: str, options: str, kmount: str) -> str:
    mnt = Path("/run/ours-wdeleg")
    name = f"wdeleg-{os.getpid()}"
    kfile = Path(kmount) / name
    with mounted(url, mnt, options):
        f = mnt / name
        chunk = b"0123456789abcdef" * 256  # 4 KiB a cycle
        with open(f, "wb") as w:  # the OPEN that creates it: nfsd grants the delegation here
            w.write(chunk)
        listed = nfsd_delegations(name)
        ours = [x for x in listed if "pynfsrdma" in x]
        if not any(x.startswith("w ") for x in ours):
            raise RuntimeError(f"nfsd granted our mount no write delegation on its new file: {listed}")
        before = stats(mnt)
        for _ in range(CYCLES):
            with open(f, "ab") as w:
                w.write(chunk)
        time.sleep(1)  # (a CLOSE waits a moment to go with others)
        after = stats(mnt)
        sent = _sent(_ops(before), _ops(after))
        calls = after["rpc"]["calls"] - before["rpc"]["calls"]
        local = after["delegations"]["local_opens"] - before["delegations"]["local_opens"]
        if sent.get("OPEN", 0) or sent.get("CLOSE", 0) or sent.get("ACCESS", 0) > 1 or local != CYCLES:
            raise RuntimeError(f"{CYCLES} opens under a write delegation sent {sent}; {local} made locally")
        # the same cycles on a file nfsd delegates to nobody: the kernel client holds it open to read
        kctrl = Path(kmount) / f"{name}-held"
        kctrl.write_bytes(chunk)
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(kctrl)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdin is not None
            if holder.stdout.readline().strip() != "open":
                raise RuntimeError("the kernel client did not open the control file")
            with open(mnt / kctrl.name, "ab") as w:
                w.write(chunk)
            if any("pynfsrdma" in x for x in nfsd_delegations(kctrl.name)):
                raise RuntimeError(f"nfsd delegated the file the kernel client holds open: {nfsd_delegations(kctrl.name)}")
            before = stats(mnt)
            for _ in range(CYCLES):
                with open(mnt / kctrl.name, "ab") as w:
                    w.write(chunk)
            time.sleep(1)
            after = stats(mnt)
        finally:
            if holder.stdin is not None:
                holder.stdin.close()
            holder.wait(timeout=60)
        plain = _sent(_ops(before), _ops(after))
        plain_calls = after["rpc"]["calls"] - before["rpc"]["calls"]
        if plain_calls <= calls or not plain.get("OPEN"):
            raise RuntimeError(
                f"{CYCLES} cycles: {calls} COMPOUNDs ({sent}) under the delegation, {plain_calls} ({plain}) without"
            )
        kctrl.unlink()
        size = (CYCLES + 1) * len(chunk)
        # the kernel client asks for the size: nfsd asks us (CB_GETATTR), and we keep the delegation.
        # (No drop_caches with a delegation held: nfsd's shrinker then sends CB_RECALL_ANY, keep 0.)
        # nfsd waits about 30 ms for the answer, then recalls instead: in an emulated guest on a
        # loaded host the callback's round trip can take longer; the check is then made again on a
        # new file
        late = 0
        for attempt in range(1, GETATTR_TRIES + 1):
            if attempt > 1:
                f = mnt / f"{name}-{attempt}"
                kfile = Path(kmount) / f.name
                with open(f, "wb") as w:
                    w.write(chunk)
                size = len(chunk)
                if not any(x.startswith("w ") and "pynfsrdma" in x for x in nfsd_delegations(f.name)):
                    raise RuntimeError(f"nfsd granted our mount no write delegation on {f.name}: {nfsd_delegations(f.name)}")
            ours_st = os.stat(f)
            if ours_st.st_size != size:
                raise RuntimeError(f"our mount says {ours_st.st_size} bytes, {size} were written")
            before = stats(mnt)["delegations"]
            kst = os.stat(kfile)
            d = stats(mnt)["delegations"]
            if kst.st_size != size:
                raise RuntimeError(f"the kernel client's stat says {kst.st_size} bytes, {size} were written")
            if d["getattrs"] <= before["getattrs"]:
                raise RuntimeError(f"the kernel client's stat did not go by CB_GETATTR: {d}")
            if d["recalled"] == before["recalled"]:
                break
            _wait("our delegation returned", lambda n=before["returned"]: stats(mnt)["delegations"]["returned"] > n)
            late += 1
            kfile.unlink()
        else:
            raise RuntimeError(f"nfsd recalled instead of waiting for our CB_GETATTR answer {GETATTR_TRIES} times: {d}")
        if not d["held"]:
            raise RuntimeError(f"the kernel client's stat (CB_GETATTR) left us no delegation: {d}")
        returned = d["returned"]
        # one of ours stays open across the recall: it is OPENed for real before the delegation goes
        with open(f, "ab") as keep:
            time.sleep(1.1)  # (so that this write's mtime is not that of the ones before)
            written_at = time.time_ns()
            keep.write(chunk)
            keep.flush()
            size += len(chunk)
            t0 = time.monotonic()
            data = kfile.read_bytes()  # the kernel client opens it to read: nfsd recalls ours
            waited = time.monotonic() - t0
            if len(data) != size or data != chunk * (size // len(chunk)):
                raise RuntimeError(f"the kernel client read {len(data)} bytes after the recall, {size} written")
            _wait("our delegation returned", lambda: stats(mnt)["delegations"]["returned"] > returned)
            d = stats(mnt)["delegations"]
            if d["recalled"] <= late:
                raise RuntimeError(f"returned without a CB_RECALL: {d}")
            if any(x.startswith("w ") and "pynfsrdma" in x for x in nfsd_delegations(f.name)):
                raise RuntimeError("nfsd still lists our write delegation after the return")
            kst, ours_st = os.stat(kfile), os.stat(f)
            if kst.st_mtime_ns != ours_st.st_mtime_ns or kst.st_mtime_ns < written_at - 100_000_000:
                raise RuntimeError(
                    f"mtime: the kernel client sees {kst.st_mtime_ns}, our mount {ours_st.st_mtime_ns}, "
                    f"the last write was at {written_at}"
                )
            # the open that outlived the delegation writes on with open state of its own
            keep.write(b"after the recall\n")
            keep.flush()
        tail = kfile.read_bytes()[size:]  # (close-to-open: the kernel client's open asks)
        if tail != b"after the recall\n":
            raise RuntimeError(f"the kernel client does not see what our open wrote after the recall: {tail!r}")
        final = stats(mnt)["delegations"]
    kfile.unlink()
    return (
        f"nfsd granted our mount {', '.join(ours)} on creating the file; {CYCLES} open/append/close cycles "
        f"under it: {calls} COMPOUNDs, no OPEN, no CLOSE ({sent}); the same cycles on a file nfsd "
        f"delegates to nobody: {plain_calls} COMPOUNDs ({plain}); "
        f"the kernel client's stat answered by our CB_GETATTR ({final['getattrs']}), delegation kept; its "
        f"read recalled it ({final['recalled']} recall, {final['returned']} returned, its read waited "
        f"{waited:.1f} s): {size} bytes, the size and the last write's mtime as ours, and what our open wrote "
        "after the recall"
        + (f"; nfsd recalled at the kernel client's stat {late} time(s) before, the CB_GETATTR round trip "
           "longer than it waits" if late else "")
    )


async def client_timestamp_delegation(url: str) -> str:
    """RFC 9754's attribute delegations: does nfsd grant one (OPEN_DELEGATE_WRITE_ATTRS_DELEG) to an
    OPEN for writing that asks with OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS? What it answers is
    reported, with its runtime switch (debugfs ``nfsd/delegated_timestamps``) and the export's
    supported attributes from 64; the step fails only if the OPEN does."""
    from pynfsrdma._client.api import Client
    from pynfsrdma._proto.nfs4 import const as c

    debug = Path("/sys/kernel/debug")
    if not (debug / "nfsd").exists():
        subprocess.run(["mount", "-t", "debugfs", "debugfs", str(debug)], capture_output=True)
    switch = debug / "nfsd" / "delegated_timestamps"
    enabled = switch.read_text().strip() if switch.exists() else "absent"
    name = f"attrdeleg-{os.getpid()}"
    async with Client.connect(url, timeout=30) as client:
        nfs = client.nfs
        word2 = sorted(a for a in nfs.supported_attrs if a >= 64)
        minor = client.nfs.client.options.minorversion
        nfs.want_delegations = True
        access = c.OPEN4_SHARE_ACCESS_BOTH
        of = await nfs.open(client.root_fh, name, client.cred, access=access | c.OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS,
                            create=True)
        got = of.delegation.type if of.delegation is not None else c.OPEN_DELEGATE_NONE
        of.access = access
        if of.delegation is not None:
            await nfs.return_delegation(of.fh)
        await nfs.close(of, client.cred)
        # the same file opened for reading only, asking for timestamps
        read = c.OPEN4_SHARE_ACCESS_READ
        of = await nfs.open(client.root_fh, name, client.cred, access=read | c.OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS)
        got_read = of.delegation.type if of.delegation is not None else c.OPEN_DELEGATE_NONE
        of.access = read
        if of.delegation is not None:
            await nfs.return_delegation(of.fh)
        await nfs.close(of, client.cred)
    async with Client.connect(url, timeout=30) as client:
        await client.remove(f"/{name}")
    kinds = {c.OPEN_DELEGATE_NONE: "none", c.OPEN_DELEGATE_READ: "read", c.OPEN_DELEGATE_WRITE: "write",
             c.OPEN_DELEGATE_READ_ATTRS_DELEG: "read with timestamps (RFC 9754)",
             c.OPEN_DELEGATE_WRITE_ATTRS_DELEG: "write with timestamps (RFC 9754)"}
    return (f"nfsd's delegated_timestamps switch: {enabled}; an OPEN for writing asking for timestamps got: "
            f"{kinds.get(got, got)}, one for reading only: {kinds.get(got_read, got_read)}; "
            f"the export's supported attributes from 64 (NFSv4.{minor}): {word2}")


def _debugfs_switch() -> Path:
    debug = Path("/sys/kernel/debug")
    if not (debug / "nfsd").exists():
        subprocess.run(["mount", "-t", "debugfs", "debugfs", str(debug)], capture_output=True)
    return debug / "nfsd" / "delegated_timestamps"


def _closes_gone(mnt: Path, closes: int, seconds: float = 1.0) -> None:
    """Until the CLOSE of a file just written and closed went out (the mount gathers CLOSEs nobody
    waits for, up to 100 ms), or ``seconds`` (a CLOSE kept back under a delegation never goes): a
    CLOSE of before must not land among the COMPOUNDs a measurement counts."""
    deadline = time.monotonic() + seconds
    while _ops(stats(mnt)).get("CLOSE", 0) <= closes and time.monotonic() < deadline:
        time.sleep(0.05)


def _write_and_stat(mnt: Path, f: Path, chunk: bytes) -> tuple[int, dict[str, int]]:
    """CYCLES writes, each followed by a stat, through one open of ``f``: the COMPOUNDs sent
    meanwhile and what they carried."""
    with open(f, "ab") as w:
        before = stats(mnt)
        for _ in range(CYCLES):
            w.write(chunk)
            w.flush()
            os.stat(f)
        after = stats(mnt)
    return after["rpc"]["calls"] - before["rpc"]["calls"], _sent(_ops(before), _ops(after))


def _times_seen_and_kept(mnt: Path, f: Path, kfile: Path, chunk: bytes) -> tuple[int, dict[str, Any]] | None:
    """One more write to ``f`` under its attribute delegation; the kernel client's stat (by CB_GETATTR)
    and, after its read recalls the delegation, nfsd must show that write's mtime. Returns the mtime
    and the delegation counts after the return; None when nfsd recalled at the stat, our CB_GETATTR
    answered too late for it."""
    with open(f, "ab") as keep:
        # the kernel stamps a write by its coarse clock (current_time(): the Linux client's, under
        # an attribute delegation, too), which may be behind the fine one
        t0 = time.clock_gettime_ns(CLOCK_REALTIME_COARSE)
        keep.write(chunk)
        keep.flush()
        t1 = time.time_ns()
        ours = os.stat(f).st_mtime_ns
        if not t0 <= ours <= t1:
            raise RuntimeError(f"our mount's mtime {ours} is not that of the write ({t0}..{t1})")
        time.sleep(2)  # (the data reaches nfsd later than this)
        before = stats(mnt)["delegations"]
        seen = os.stat(kfile).st_mtime_ns  # the kernel client: nfsd asks us (CB_GETATTR)
        d = stats(mnt)["delegations"]
        if d["getattrs"] <= before["getattrs"]:
            raise RuntimeError(f"the kernel client's stat did not go by CB_GETATTR: {d}")
        if d["recalled"] > before["recalled"]:
            _wait("our delegation returned", lambda: stats(mnt)["delegations"]["returned"] > before["returned"])
            return None
        if seen != ours:
            raise RuntimeError(f"the kernel client's stat (CB_GETATTR) shows mtime {seen}, our write set {ours}")
        flushed_after = time.time_ns()
        size = len(kfile.read_bytes())  # the kernel client opens it to read: nfsd recalls ours
        _wait("our delegation returned", lambda: stats(mnt)["delegations"]["returned"] > before["returned"])
        d = stats(mnt)["delegations"]
    kst = os.stat(kfile)
    if kst.st_size != size:
        raise RuntimeError(f"the kernel client read {size} bytes, stat says {kst.st_size}")
    if d["times_returned"] <= before["times_returned"]:
        raise RuntimeError(f"the delegation went back without its times: {d}")
    if kst.st_mtime_ns != ours:
        raise RuntimeError(
            f"after the recall nfsd says mtime {kst.st_mtime_ns}, our last write set {ours} "
            f"(the data reached nfsd after {flushed_after})"
        )
    return ours, d


def fuse_timestamp_delegation(url: str, options: str, kmount: str) -> str:
    """RFC 9754's attribute delegations on our FUSE mount: nfsd grants OPEN_DELEGATE_WRITE_ATTRS_DELEG
    to our mount's OPEN (it asks with OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS, nfsd's supported
    attributes naming time_deleg_access/modify). Write-then-stat cycles under it send nothing (size and
    mtime are ours to tell), against the same cycles under a plain write delegation (nfsd's debugfs
    switch ``delegated_timestamps`` off for that file's OPEN). The kernel client's stat goes by
    CB_GETATTR and sees the mtime of our last write, not the time the data reaches nfsd; after the
    recall (the SETATTR of time_deleg_modify before the DELEGRETURN) nfsd keeps that mtime."""
    switch = _debugfs_switch()
    if not switch.exists():
        raise RuntimeError("nfsd has no debugfs switch delegated_timestamps")
    mnt = Path("/run/ours-tdeleg")
    name = f"tdeleg-{os.getpid()}"
    kfile = Path(kmount) / name
    chunk = b"delegated times\n" * 256
    with mounted(url, mnt, options):
        # the same cycles under a plain write delegation (nfsd grants one with the switch off)
        switch.write_text("N\n")
        try:
            plain_file = mnt / f"{name}-plain"
            closes = _ops(stats(mnt)).get("CLOSE", 0)
            plain_file.write_bytes(chunk)
            _closes_gone(mnt, closes)
            granted = stats(mnt)["delegations"]
        finally:
            switch.write_text("Y\n")
        if granted["timestamps"] or not any(x.startswith("w ") for x in nfsd_delegations(plain_file.name)):
            raise RuntimeError(f"with delegated_timestamps off, nfsd granted {nfsd_delegations(plain_file.name)}: {granted}")
        plain_calls, plain = _write_and_stat(mnt, plain_file, chunk)
        f = mnt / name
        closes = _ops(stats(mnt)).get("CLOSE", 0)
        f.write_bytes(chunk)
        _closes_gone(mnt, closes)
        d = stats(mnt)["delegations"]
        if d["timestamps"] != 1:
            raise RuntimeError(f"nfsd granted our new file no attribute delegation: {d}, {nfsd_delegations(name)}")
        calls, sent = _write_and_stat(mnt, f, chunk)
        # (with the writeback cache the kernel keeps size and mtime itself under either delegation:
        # neither sends anything then, and the attribute delegation must not send more)
        cached = bool(stats(mnt)["options"].get("writeback_cache"))
        if (calls > plain_calls if cached else calls >= plain_calls) or sent.get("GETATTR") or sent.get("WRITE", 0) > 1:
            raise RuntimeError(
                f"{CYCLES} writes and stats: {calls} COMPOUNDs ({sent}) under the attribute delegation, "
                f"{plain_calls} ({plain}) under a plain one"
            )
        # nfsd waits about 30 ms for our CB_GETATTR answer, then recalls the delegation instead: in an
        # emulated guest on a loaded host the answer (a stat through the mount for the kernel's size
        # and mtime) can come later than that; the check is then made again on a new file
        late: list[int] = []
        got: tuple[int, dict[str, Any]] | None = None
        for attempt in range(1, GETATTR_TRIES + 1):
            if attempt > 1:
                f = mnt / f"{name}-{attempt}"
                kfile = Path(kmount) / f.name
                granted = stats(mnt)["delegations"]["timestamps"]
                closes = _ops(stats(mnt)).get("CLOSE", 0)
                f.write_bytes(chunk)
                _closes_gone(mnt, closes)
                if stats(mnt)["delegations"]["timestamps"] != granted + 1:
                    raise RuntimeError(f"nfsd granted our new file no attribute delegation: {nfsd_delegations(f.name)}")
            got = _times_seen_and_kept(mnt, f, kfile, chunk)
            if got is not None:
                break
            late.append(stats(mnt)["delegations"]["getattr_ms"])
            kfile.unlink()
        if got is None:
            raise RuntimeError(f"nfsd recalled instead of waiting for our CB_GETATTR answer {GETATTR_TRIES} times "
                               f"(our longest answer so far after each: {late} ms)")
        ours, d = got
        written = (CYCLES + 2 if attempt == 1 else 2) * len(chunk)
        kst = os.stat(kfile)
        if kst.st_size != written:
            raise RuntimeError(f"the kernel client's stat says {kst.st_size} bytes, {written} written")
        plain_file.unlink()
    kfile.unlink()
    return (
        f"nfsd 7.3 granted our mount OPEN_DELEGATE_WRITE_ATTRS_DELEG (delegated_timestamps Y) and "
        f"OPEN_DELEGATE_WRITE with the switch off; {CYCLES} write+stat cycles through one open: "
        f"{calls} COMPOUNDs ({sent}) under the attribute delegation, {plain_calls} ({plain}) under the "
        f"plain one; the kernel client's stat by CB_GETATTR and, after the recall ({d['times_returned']} "
        f"DELEGRETURN with SETATTR of the times), nfsd show our last write's mtime ({ours}), not the "
        "time the data reached it (2 s later)"
        + (f"; nfsd recalled at the kernel client's stat {len(late)} time(s) before, our CB_GETATTR answer "
           f"later than it waits (our longest {late[-1]} ms)" if late else
           f"; our longest CB_GETATTR answer {d['getattr_ms']} ms")
    )
