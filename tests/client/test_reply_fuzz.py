"""The path API and the command line through a few thousand replies of NFS-Ganesha, a fifth of them
broken by the seeded mutating proxy (every class of change, values included): every call's result is
right (the files on the server's disk say so; a stat's size excepted, which a changed value makes
wrong without a client being able to tell) or one OSError with errno set; nothing else escapes,
nothing hangs, no command prints more than one line or a traceback, and each worker process, its
address space capped (RLIMIT_AS), stays under 200 MiB. ``bench/fuzz_replies.py`` runs the same for as
long as you like."""

from __future__ import annotations

import json

import trio

from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath
from pynfsrdma._testbed.mutating_proxy import MutatingProxy
from pynfsrdma._testbed.mutations import Mutation, ReplyMutator
from pynfsrdma._testbed.reply_fuzz import WorkerSettings, run_workload

REPLIES = 3000
RATE = 0.2
SEED = 17


async def test_a_fifth_of_the_replies_broken(ganesha: Ganesha, export_path: ExportPath, nursery: trio.Nursery) -> None:
    mutator = ReplyMutator(seed=SEED, rate=RATE)
    proxy = await nursery.start(MutatingProxy("127.0.0.1", 0, ganesha.host, ganesha.port, mutator).run)
    with trio.fail_after(300):
        out = await run_workload(
            f"nfs://127.0.0.1:{proxy.port}", export_path.local, export_path.remote,
            WorkerSettings(seed=SEED, timeo=1.0, retrans=2, cli_every=40, values=True), workers=4,
            stop=lambda: mutator.counts["replies"] >= REPLIES,
        )
    print(json.dumps(out.summary(), indent=1), json.dumps(dict(mutator.counts)))
    assert mutator.counts["replies"] >= REPLIES and mutator.counts["mutated"] >= REPLIES * RATE / 2
    assert not out.escaped, out.escaped[:5]
    assert not out.wrong, out.wrong[:5]
    assert not out.hangs, out.hangs[:5]
    assert out.cli_runs and not out.cli_bad, out.cli_bad[:5]
    assert sum(out.right.values()) >= out.calls / 4  # (the workload got on: most calls went through)
    assert all(m.value in mutator.counts for m in (Mutation.VALUE, Mutation.STATUS))  # (values changed too)
    assert len(out.peaks) == 4 and max(out.peaks) < 200 << 20, out.peaks
