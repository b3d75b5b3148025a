"""READ and WRITE of the mount's open files: a sequential reader's READs sent ahead (:mod:`.readahead`)
and the rest read as it comes, several in flight; writes handed to the open's writer (gathered, sent
and committed by :mod:`pynfsrdma._client.open_file`), appends placed at the end as the server has it."""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .._client.nfs4 import NFSv4, OpenFile
from .._client.open_file import read_range, with_reopens
from .._client.read_sink import PayloadSink
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential
from .inodes import Inode, InodeTable
from .lowlevel import FUSEError
from .opens import FileHandle, Opens
from .readahead import Extent, assemble

log = logging.getLogger(__name__)


class FileData:
    """The reads and writes of ``opens``' files; ``delegated``: whether a file's cached attributes
    are current under a delegation; ``invalidate``: tell the kernel to drop an inode's cached data."""

    def __init__(
        self, nfs: NFSv4, inodes: InodeTable, opens: Opens, nursery: trio.Nursery,
        delegated: Callable[[Inode], bool], invalidate: Callable[[int], Awaitable[None]],
    ) -> None:
        self.nfs = nfs
        self.inodes = inodes
        self.opens = opens
        self.nursery = nursery
        self._delegated = delegated
        self._invalidate = invalidate

    async def _read_state(self, h: FileHandle, of: OpenFile, off: int, size: int,
                          sink: PayloadSink | None = None) -> tuple[Any, bool]:
        """One READ; when the server lost the open behind it, open again and repeat."""
        return await with_reopens(
            of, functools.partial(self.opens.reopen, h.inode, h.shared),
            lambda: self.nfs.read_write.read(of, h.inode.fh, off, size, h.cred, sink=sink),
        )

    async def read(self, h: FileHandle, off: int, size: int, sink: PayloadSink | None = None) -> Any:
        """The data of ``h`` from ``off``, ``size`` bytes at most (a bytes-like object, or a list of
        them in order when several READs hold it): from the bytes its OPEN read, or from the READs
        sent ahead, when they cover it, else read here; ``sink`` (the request's reply pipe) takes the
        data of a READ made here of exactly this range, spliced."""
        node = h.inode
        await self.opens.sync(node)  # our own gathered writes are read back from the server
        if h.opened is not None:
            first = h.opened.take(off, size)  # (read with the OPEN)
            if first is not None:
                return first
        ra = h.readahead
        if ra is not None:
            # as far ahead as the READs that fill the session's live paths reach, or the mount's window
            ra.max_window = max(self.opens.readahead_window, self._io_window() * self.nfs.maxread)
            cover, new = ra.request(off, size, node.attrs.size)
            for e in new:
                h.fetching.add(e)
                self.nursery.start_soon(self._read_ahead, h, e)
            if cover:
                for e in cover:
                    await e.done.wait()
                data = assemble(cover, off, size)
                if data is not None:
                    return data  # a slice of a reply's view when one READ holds it: no copy
                ra.drop()  # a READ ahead failed or came back short: read it here (and see why)
        return await self._read_direct(h, off, size, sink)

    async def _read_ahead(self, h: FileHandle, e: Extent) -> None:
        try:
            data, eof = await self.nfs.read_write.read(h.shared.of, h.inode.fh, e.offset, e.size, h.cred)
        except Exception as exc:  # the reader's own READ then sees (and reports) it
            e.finish(error=exc)
        else:
            e.finish(data, eof)
        finally:
            e.done.set()
            h.fetching.discard(e)

    def _io_window(self) -> int:
        """READs to keep in flight: as many as fill the session's live paths."""
        return self.nfs.io_window(self.nfs.maxread)

    async def _read_direct(self, h: FileHandle, off: int, size: int, sink: PayloadSink | None) -> Any:
        of = h.shared.of

        def read(o: int, n: int) -> Awaitable[tuple[Any, bool]]:
            # (the sink is for the one READ of the whole range: not for the rest after a short one)
            return self._read_state(h, of, o, n, sink if (o, n) == (off, size) else None)

        views, _ = await read_range(read, off, size, self.nfs.maxread, self._io_window)
        if len(views) == 1:
            return views[0]  # a view of the reply: no copy on the way to the kernel
        if not views:
            return b""
        return views  # several READs (a request larger than rsize): the replies' views, in order, no copy

    async def write(self, h: FileHandle, off: int, buf: bytes) -> int:
        """``buf`` at ``off`` of ``h`` (O_APPEND: at the end of the file), gathered by the open's writer."""
        w = h.shared.writer
        if w is None or not h.access & c.OPEN4_SHARE_ACCESS_WRITE:
            raise FUSEError(errno.EBADF)
        h.written = True
        node = h.inode
        if h.append:
            off = await self._end_for_append(node, off, h.cred)
        node.drop_readahead()
        self.inodes.wrote(node, off + len(buf))  # (before the kernel hears of it: attributes asked until now are older)
        await w.write(off, buf)
        if not self.nfs.keeps_times(node.fh):  # (under an attribute delegation its size and times are ours)
            node.stale()
        return len(buf)

    async def _end_for_append(self, node: Inode, off: int, cred: Credential) -> int:
        """Where a write to a file opened O_APPEND goes: the end of the file as the server has it
        with our writes on top. The kernel appends at the size it holds, which another client's
        appends since it last asked (at the open, or as the attribute cache allows, as the Linux
        client revalidates before an append) have left behind: the write goes to the end instead,
        and the kernel is made to drop its cached pages and size of the file."""
        if not self.inodes.fresh(node, trio.current_time()) and not self._delegated(node):
            await self.opens.sync(node)
            asked = self.inodes.asking(node)
            attrs = await self.nfs.names.getattr(node.fh, cred)
            self.inodes.refresh(node, attrs, trio.current_time(), asked=asked)
        end = self.inodes.size(node)
        if end != off:
            log.debug("append to inode %d at %d, where the kernel had %d", node.ino, end, off)
            node.kernel_view = None  # (with the writeback cache the kernel keeps the size it had)
            self.nursery.start_soon(self._invalidate, node.ino)
        return end
