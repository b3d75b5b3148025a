"""Many calls of a client at once (:meth:`~.api.Client.read_ranges`, ``write_files``, ``remove_many``,
``scandir_many``): together, as many in flight as the session's slots take, several to a COMPOUND where
the protocol allows; an error in the place of each call that failed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import trio

from .._errors import NFS4Error
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential
from .batched import MERGE_GAP, coalesced, read_step, wire_pieces
from .dir_entry import DirEntry
from .export_paths import ExportPaths, names_a_directory
from .nfs4 import NFSv4

T = TypeVar("T")
SMALL_IO = 4096  # the size the window of many small calls at once is reckoned for (io_window)
ReadBytes = Callable[[str, int, "int | None"], Awaitable[bytes]]
WriteFile = Callable[..., Awaitable[None]]


def single_error(eg: BaseExceptionGroup) -> BaseException:
    """The error to raise for trio's exception group ``eg``, so that callers see ``NFS4Error``/
    ``OSError`` rather than a group: the one error inside, or of several (READs failing together)
    the first that is not an OSError (a KeyboardInterrupt, a bug: what they are must not be lost),
    else the first. A group of nothing but cancellations stays a group (trio wants it back)."""
    leaves = [e for e in _leaves(eg) if not isinstance(e, trio.Cancelled)]
    if not leaves:
        return eg
    return next((e for e in leaves if not isinstance(e, OSError)), leaves[0])


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in _leaves(sub)]
    return [e]


class ManyCalls:
    """A client's calls on many paths at once; ``read_bytes`` and ``write_file`` are the client's
    own (one path each), ``io_window(size)`` how many calls of ``size`` bytes go at once."""

    def __init__(self, nfs: NFSv4, cred: Credential, paths: ExportPaths, io_window: Callable[[int], int],
                 read_bytes: ReadBytes, write_file: WriteFile) -> None:
        self.nfs = nfs
        self.cred = cred
        self.paths = paths
        self.io_window = io_window
        self.read_bytes = read_bytes
        self.write_file = write_file

    async def _each(self, items: Sequence[T], call: Callable[[T], Awaitable[Any]]) -> list[Any]:
        """``call(item)`` for every item, together, as many in flight as the session's slots take
        (:meth:`io_window`): each one's result, or the OSError (ValueError) it raised, in order."""
        out: list[Any] = [None] * len(items)
        limit = trio.CapacityLimiter(max(1, self.io_window(SMALL_IO)))

        async def one(i: int, item: T) -> None:
            async with limit:
                try:
                    out[i] = await call(item)
                except (OSError, ValueError) as e:
                    out[i] = e

        try:
            async with trio.open_nursery() as nursery:
                for i, item in enumerate(items):
                    nursery.start_soon(one, i, item)
        except BaseExceptionGroup as eg:
            raise single_error(eg) from None
        return out

    async def read_ranges(self, ranges: Sequence[tuple[str, int, int | None]], gap: int = MERGE_GAP
                          ) -> list[bytes | Exception]:
        """:meth:`.api.Client.read_ranges`."""
        if gap < 0:
            raise ValueError(f"gap must be at least 0, not {gap}")
        out: list[bytes | Exception] = [b""] * len(ranges)
        by_path: dict[str, list[int]] = {}
        for i, (path, _, _) in enumerate(ranges):
            by_path.setdefault(self.paths.norm(path), []).append(i)
        singles: list[int] = []
        files: list[tuple[str, list[int]]] = []
        for path, idx in by_path.items():
            if len(idx) == 1 or any(ranges[i][2] is None or ranges[i][1] < 0 for i in idx):
                singles += idx
            else:
                files.append((path, idx))

        async def single(i: int) -> None:
            path, offset, count = ranges[i]
            out[i] = await self.read_bytes(path, offset, count)

        async def several(item: tuple[str, list[int]]) -> None:
            path, idx = item
            try:
                got = await self._read_spans_of(path, [(ranges[i][1], ranges[i][2] or 0) for i in idx], gap)
            except (OSError, ValueError) as e:
                got = [e] * len(idx)
            for i, data in zip(idx, got, strict=True):
                out[i] = data

        results = await self._each(singles, single)
        for i, r in zip(singles, results, strict=True):
            if isinstance(r, Exception):
                out[i] = r
        await self._each(files, several)
        return out

    async def _read_spans_of(self, path: str, ranges: list[tuple[int, int]], gap: int) -> list[bytes | Exception]:
        """Ranges (offset, count) of one file, as :meth:`read_ranges` sends them: the bytes of each,
        sliced from the data of the READ of its span (:func:`.batched.coalesced`,
        :func:`.batched.wire_pieces`). Each COMPOUND finds the file by its name (PUTFH of the
        directory, LOOKUP, the READs), all in flight together; a name that cannot be read so (a
        symbolic link ...) is looked up first, and its file handle read."""
        nfs = self.nfs
        pages = nfs.batched.reads_per_compound != 1
        spans = coalesced(ranges, gap, read_step(nfs.maxread, pages), pages)
        pieces, cuts, of_span = wire_pieces([(lo, n) for lo, n, _ in spans], nfs.maxread, pages)
        data: list[Any] = [b""] * len(pieces)

        async def again(k: int) -> None:  # (in a COMPOUND of its own)
            at, _ = pieces[k]
            skip, n = cuts[k]
            data[k] = await self.read_bytes(path, at + skip, n)

        async def keep(which: list[int], got: list[tuple[memoryview, bool]]) -> None:
            for j, (k, (view, eof)) in enumerate(zip(which, got, strict=True)):
                at, count = pieces[k]
                skip, n = cuts[k]
                part = view[skip : skip + n]
                data[k] = part
                if part.nbytes < n and not eof:  # (short, not at the end: the server's limit)
                    data[k] = b"".join([part, await self.read_bytes(path, at + skip + part.nbytes, n - part.nbytes)])
                if view.nbytes < count and j < len(which) - 1:
                    # a READ that came back short ends the batch: the data of those after it in the
                    # COMPOUND may not be where the reply says (Batched)
                    failed = [r for r in await self._each(which[j + 1 :], again) if isinstance(r, Exception)]
                    if failed:
                        raise failed[0]
                    return

        npath = self.paths.norm(path)
        by_name = bool(pieces) and npath != "/" and not names_a_directory(path)
        if by_name:
            parent, name = self.paths.split(npath)
            dfh = await self.paths.dir_fh(parent)

            async def named(which: list[int]) -> None:
                nonlocal by_name
                got = await nfs.batched.read_spans_named(dfh, name, [pieces[k] for k in which], self.cred, npath)
                if got is None:
                    by_name = False
                else:
                    await keep(which, got)

            results = await self._each(nfs.batched.read_batches(pieces, named=True), named)
        if not by_name:  # (the longer way)
            fh, attrs = await self.paths.resolve(path, follow=True)
            if attrs.is_dir:
                raise NFS4Error(c.NFS4ERR_ISDIR, c.OP_READ, path)

            async def of_fh(which: list[int]) -> None:
                await keep(which, await nfs.batched.read_spans(fh, [pieces[k] for k in which], self.cred, path))

            results = await self._each(nfs.batched.read_batches(pieces), of_fh)
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]
        of: list[list[Any]] = [[] for _ in spans]
        for k, s in enumerate(of_span):
            of[s].append(data[k])
        out: list[bytes | Exception] = [b""] * len(ranges)
        for (lo, _, members), views in zip(spans, of, strict=True):
            if len(views) > 1:  # (a range longer than one READ: its span's only one)
                out[members[0]] = b"".join(views)
                continue
            whole = memoryview(views[0])
            for r in members:
                offset, count = ranges[r]
                out[r] = bytes(whole[offset - lo : offset - lo + count])
        return out

    async def write_files(self, files: Sequence[tuple[str, Any]], perm: int = 0o644, *,
                          exclusive: bool = False) -> list[Exception | None]:
        """:meth:`.api.Client.write_files`."""
        async def write(item: tuple[str, Any]) -> None:
            await self.write_file(item[0], item[1], perm, exclusive=exclusive)

        return await self._each(files, write)

    async def remove_many(self, paths: Sequence[str]) -> list[Exception | None]:
        """:meth:`.api.Client.remove_many`."""
        out: list[Exception | None] = [None] * len(paths)
        by_dir: dict[str, list[int]] = {}
        for i, p in enumerate(paths):
            try:
                parent, _ = self.paths.split(p)
            except NFS4Error as e:
                out[i] = e
                continue
            by_dir.setdefault(parent, []).append(i)
        room = self.nfs.per_compound()
        chunks = [(d, idx[k : k + room]) for d, idx in by_dir.items() for k in range(0, len(idx), room)]

        async def remove(item: tuple[str, list[int]]) -> None:
            parent, idx = item
            dfh = await self.paths.dir_fh(parent)
            while idx:
                names = [self.paths.split(paths[i])[1] for i in idx]
                done, error = await self.nfs.batched.remove_names(dfh, names, self.cred, [self.paths.norm(paths[i]) for i in idx])
                for i in idx[:done]:
                    self.paths.forget(paths[i])
                if error is None:
                    return
                out[idx[done]] = error
                idx = idx[done + 1 :]

        for (_, idx), r in zip(chunks, await self._each(chunks, remove), strict=True):
            if isinstance(r, Exception):
                for i in idx:
                    out[i] = out[i] or r
        return out

    async def scandir_many(self, paths: Sequence[str]) -> list[list[DirEntry] | Exception]:
        """:meth:`.api.Client.scandir_many`."""
        out: list[Any] = [None] * len(paths)
        npaths: list[str] = [""] * len(paths)
        for i, p in enumerate(paths):
            try:
                npaths[i] = self.paths.norm(p)
            except (OSError, ValueError) as e:
                out[i] = e
        todo = [i for i in range(len(paths)) if out[i] is None]
        fhs = dict(zip(todo, await self._each([npaths[i] for i in todo], self.paths.dir_fh), strict=True))
        for i, fh in fhs.items():
            if isinstance(fh, Exception):
                out[i] = fh
        todo = [i for i in todo if out[i] is None]
        room = self.nfs.batched.readdirs_per_compound()
        chunks = [todo[k : k + room] for k in range(0, len(todo), room)]

        async def list_chunk(idx: list[int]) -> None:
            while len(idx) > 1:
                pages, failed, error = await self.nfs.batched.first_pages([fhs[i] for i in idx], self.cred,
                                                                  [npaths[i] for i in idx])
                if error is None:
                    for i, page in zip(idx, pages, strict=True):
                        try:
                            listing = await self.nfs.directories.listdir_plus(fhs[i], self.cred, path=npaths[i], first=page)
                            out[i] = await self.paths.entries(paths[i], npaths[i], listing)
                        except OSError as e:
                            out[i] = e
                    return
                out[idx[failed]] = error
                idx = idx[:failed] + idx[failed + 1 :]
            for i in idx:  # (one directory: its pages as scandir asks them)
                try:
                    listing = await self.nfs.directories.listdir_plus(fhs[i], self.cred, path=npaths[i])
                    out[i] = await self.paths.entries(paths[i], npaths[i], listing)
                except OSError as e:
                    out[i] = e

        for idx, r in zip(chunks, await self._each(chunks, list_chunk), strict=True):
            if isinstance(r, Exception):
                for i in idx:
                    out[i] = out[i] or r
        return out
