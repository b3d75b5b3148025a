"""Several operations of one kind in one COMPOUND, for callers with many small things to do at once
(fsspec's ``cat_ranges``, ``rm`` of a tree, ``walk``): READs of one file (PUTFH, then a READ per
span of ranges near each other (:func:`coalesced`), with the anonymous stateid, whole pages each;
two READs to a COMPOUND unless the URL says
``batchreads=0`` (one) or ``batchreads=1`` (as many as fit)),
REMOVEs in one directory (PUTFH, then a REMOVE per name), and the first READDIR of several directories (PUTFH and READDIR for each). A COMPOUND holds as many as the
session's ca_maxoperations allows, and READs no more data than one reply carries (maxread)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import NFS4Error, ReplyError
from .._proto.nfs4 import const as c
from .._proto.nfs4.compound import ResOp, results_of
from .._proto.nfs4.types import LOOKUP4args, PUTFH4args, READ4args, READDIR4args, REMOVE4args
from .._rpc.auth import Credential
from .._transport.base import ReplyHints
from .compounds import NO_HINTS, VERIFIER_SIZE, Compounds
from .directories import READDIR_BITMAP, ListedEntry, listed_page
from .open_state import ANONYMOUS_STATEID
from .whole_files import NOT_BY_NAME

READ_RESULT_ROOM = 16  # what a READ's result takes in a reply besides its data (status, eof, length)
FIRST_PAGE = 16 * 1024  # a batched READDIR's reply at most: a small directory whole (a large one goes on alone)
PAGE = 4096  # what a batched READ asks for: whole pages of the file


MERGE_GAP = 64_000  # ranges of a file less far apart go in one READ (fsspec's parquet reader's max_gap)


def read_step(maxread: int, pages: bool) -> int:
    """The most one READ asks for: ``maxread``, in whole pages with ``pages``."""
    return max(PAGE, maxread - maxread % PAGE) if pages else maxread


def coalesced(ranges: Sequence[tuple[int, int]], gap: int, limit: int, pages: bool
              ) -> list[tuple[int, int, list[int]]]:
    """``ranges`` (offset, count) of one file as the spans to read, sorted by offset: a range that
    overlaps the span before it, or starts at most ``gap`` bytes after its end, joins it while the
    span (rounded out to whole pages with ``pages``) stays within ``limit`` bytes, one READ. Each
    span's (offset, count) and the indexes of the ranges it serves; a range longer than ``limit``
    is a span of its own, and a range of no bytes is in none."""
    def size(lo: int, hi: int) -> int:
        return -(-hi // PAGE) * PAGE - (lo - lo % PAGE) if pages else hi - lo

    out: list[tuple[int, int, list[int]]] = []
    lo = hi = 0
    for r in sorted((r for r, (_, n) in enumerate(ranges) if n > 0), key=lambda r: ranges[r]):
        offset, count = ranges[r]
        end = max(hi, offset + count)
        if out and offset - hi <= gap and size(lo, end) <= limit:
            hi = end
            out[-1][2].append(r)
            out[-1] = (lo, hi - lo, out[-1][2])
        else:
            lo, hi = offset, offset + count
            out.append((lo, count, [r]))
    return out


def wire_pieces(ranges: Sequence[tuple[int, int]], maxread: int, pages: bool
                ) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[int]]:
    """``ranges`` (offset, count) as READs: each READ's (offset, count), at most ``maxread``; which
    bytes of its data are the range's (skip, count); and the range it serves. ``pages``: each range's
    span rounded out to whole pages of the file (:data:`PAGE`), each READ starting on a page boundary
    and asking for whole pages (the ranges' bytes are then sliced from the READs' data)."""
    step = read_step(maxread, pages)
    reads: list[tuple[int, int]] = []
    cuts: list[tuple[int, int]] = []
    of_range: list[int] = []
    for r, (offset, count) in enumerate(ranges):
        end = offset + count
        lo, hi = (offset - offset % PAGE, -(-end // PAGE) * PAGE) if pages and count else (offset, end)
        for at in range(lo, hi, step):
            n = min(step, hi - at)
            first, last = max(offset, at), min(end, at + n)
            reads.append((at, n))
            cuts.append((first - at, last - first))
            of_range.append(r)
    return reads, cuts, of_range


class Batched:
    """Many READs of one file, many REMOVEs of one directory, several to a COMPOUND, each run by
    ``compounds``.

    ``reads_per_compound`` (None: as many as fit): two by default (``batchreads=0`` in the URL: one,
    ``batchreads=1``: as many as fit). Several READs in one COMPOUND each ask for whole pages from a
    page boundary of the file (:func:`wire_pieces`). Linux's nfsd 7.3 (6.1 is right) reads a READ's
    data into the page after the one its reply says the data is in whenever the data of the READ
    before it does not end on a page of the reply, over TCP and RDMA alike (tests/vm/README.md).
    The first READ's data starts a page of the reply, so its whole pages end on one and the second
    READ is right; the second's data starts after the words of its result, so a third would not be.
    A READ that comes back short (at the end of the file) therefore ends the batch: the READs after
    it in the COMPOUND are not trusted, and go again, each in a COMPOUND of its own. With one READ
    to a COMPOUND, a READ asks for the span's bytes only."""

    def __init__(self, compounds: Compounds) -> None:
        self.compounds = compounds
        self.reads_per_compound: int | None = 2

    def read_batches(self, spans: Sequence[tuple[int, int]], named: bool = False) -> list[list[int]]:
        """``spans`` (offset, count, each at most maxread) as COMPOUNDs' worth of READs: the indexes
        of the spans each takes, in order (``named``: with room for a LOOKUP, :meth:`read_spans_named`)."""
        room = max(1, self.compounds.per_compound() - named)
        if self.reads_per_compound is not None:
            room = min(room, self.reads_per_compound)
        out: list[list[int]] = []
        size = 0
        for i, (_, n) in enumerate(spans):
            if not out or len(out[-1]) >= room or size + n + READ_RESULT_ROOM > self.compounds.maxread:
                out.append([])
                size = 0
            out[-1].append(i)
            size += n + READ_RESULT_ROOM
        return out

    async def read_spans(self, fh: bytes, spans: Sequence[tuple[int, int]], cred: Credential,
                         path: str | None = None) -> list[tuple[memoryview, bool]]:
        """The READs of ``spans`` (offset, count) of ``fh`` in one COMPOUND (as :meth:`read_batches`
        cut them): each one's data (a view of the reply) and eof."""
        ops: list[Any] = [PUTFH4args(fh), *(READ4args(ANONYMOUS_STATEID, o, n) for o, n in spans)]
        got: list[list[tuple[memoryview, bool]]] = []

        def check(res: list[ResOp]) -> None:
            got[:] = [[(r.data, bool(r.eof)) for r in results_of(res, c.OP_READ)]]

        await self.compounds.run(ops, cred, ReplyHints(ddp_sizes=[n for _, n in spans]), path=path, check=check)
        return got[0]

    async def read_spans_named(self, dir_fh: bytes, name: str, spans: Sequence[tuple[int, int]], cred: Credential,
                               path: str | None = None) -> list[tuple[memoryview, bool]] | None:
        """As :meth:`read_spans`, the file found by ``name`` in ``dir_fh`` by the same COMPOUND (PUTFH,
        LOOKUP, the READs): no round trip of its own for the file handle. None when the name cannot
        be read so (a symbolic link, a server that wants an open: :data:`.whole_files.NOT_BY_NAME`)."""
        ops: list[Any] = [PUTFH4args(dir_fh), LOOKUP4args(name),
                          *(READ4args(ANONYMOUS_STATEID, o, n) for o, n in spans)]
        got: list[list[tuple[memoryview, bool]]] = []

        def check(res: list[ResOp]) -> None:
            got[:] = [[(r.data, bool(r.eof)) for r in results_of(res, c.OP_READ)]]

        try:
            await self.compounds.run(ops, cred, ReplyHints(ddp_sizes=[n for _, n in spans]), path=path, check=check)
        except NFS4Error as e:
            if e.op == c.OP_READ and e.status in NOT_BY_NAME:
                return None
            raise
        return got[0]

    async def remove_names(self, dir_fh: bytes, names: Sequence[str], cred: Credential,
                           paths: Sequence[str]) -> tuple[int, NFS4Error | None]:
        """REMOVE ``names`` (at most :meth:`~.compounds.Compounds.per_compound`) from ``dir_fh`` in one COMPOUND, in order:
        how many went, and the error of the one that failed (the server stops there; those after
        it are not sent). ``paths``: the names' paths, for the error."""
        ops: list[Any] = [PUTFH4args(dir_fh), *(REMOVE4args(n) for n in names)]
        try:
            res = await self.compounds.client.compound(ops, cred, NO_HINTS)
        except ReplyError as e:
            raise e.located(None, paths[0] if paths else None) from None
        if res.status == c.NFS4_OK:
            return len(names), None
        removed = max(len(res.resarray) - 2, 0)  # (the PUTFH, and the REMOVE that failed)
        if not res.resarray or res.resarray[-1].opnum != c.OP_REMOVE:
            raise NFS4Error(res.status, res.resarray[-1].opnum if res.resarray else None,
                            paths[0] if paths else None)
        return removed, NFS4Error(res.status, c.OP_REMOVE, paths[removed])

    def readdirs_per_compound(self) -> int:
        """Directories a COMPOUND of first READDIRs holds (a PUTFH and a READDIR each, after the
        SEQUENCE), no more than one reply carries."""
        session = self.compounds.client.session
        ops = session.max_operations if session is not None else 3
        room = session.max_response_size // (FIRST_PAGE + 512) if session is not None else 1
        return max(1, min((ops - 1) // 2, room))

    async def first_pages(self, fhs: Sequence[bytes], cred: Credential, paths: Sequence[str]
                          ) -> tuple[list[tuple[list[ListedEntry], bytes, bool]], int, NFS4Error | None]:
        """The first READDIR page of each directory in ``fhs`` (at most :meth:`readdirs_per_compound`)
        in one COMPOUND, in order, as :meth:`readdir_plus` gives them (entries, verifier, eof); or, when
        one failed (the server stops there), no page, its index and its error (those before it go
        again). ``paths``: the directories' paths, for the error."""
        ops: list[Any] = []
        for fh in fhs:
            ops += [PUTFH4args(fh), READDIR4args(0, bytes(VERIFIER_SIZE), FIRST_PAGE, FIRST_PAGE, READDIR_BITMAP)]
        pages: list[tuple[list[ListedEntry], bytes, bool]] = []

        def check(res: list[ResOp]) -> None:
            pages[:] = [listed_page(r) for r in results_of(res, c.OP_READDIR)]

        try:
            res = await self.compounds.client.compound(ops, cred, ReplyHints(max_reply=FIRST_PAGE * len(fhs)), check=check)
        except ReplyError as e:
            raise e.located(None, paths[0] if paths else None) from None
        if res.status == c.NFS4_OK:
            return pages, 0, None
        failed = min(sum(1 for r in res.resarray if r.opnum == c.OP_READDIR and r.status == c.NFS4_OK), len(fhs) - 1)
        return [], failed, NFS4Error(res.status, res.resarray[-1].opnum if res.resarray else None, paths[failed])
