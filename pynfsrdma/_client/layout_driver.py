"""What the client's layout drivers share (the block layout, flexfiles): a file's layouts in the
layout cache, its LAYOUTGETs and returns one at a time, the reasons its I/O went through the metadata
server, and CB_LAYOUTRECALL: answered at once, the returns sent once the file's layout I/O drained
and what it wrote is committed (RFC 8881 12.5.5)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import trio

from .._errors import NFS4Error
from .._proto.nfs4.types import stateid4
from .._rpc.auth import Credential
from .layout_ops import LayoutOps
from .layouts import LayoutCache, LayoutReturn

log = logging.getLogger(__name__)

POLL = 0.005  # seconds between looks at a file's layout I/O in flight (a recall, a give-back waits for it)


class LayoutDriver:
    """One layout type's I/O shell: what every driver does the same way. A driver says how what a
    file wrote by its layout is committed before a return (:meth:`commit_before_return`) and at close
    (:meth:`commit_at_close`), and what a return forgets (:meth:`returning`)."""

    def __init__(self, ops: LayoutOps, nursery: trio.Nursery, cache: LayoutCache) -> None:
        self.ops = ops
        self.nursery = nursery
        self.cache = cache
        self.locks: dict[bytes, trio.Lock] = {}  # per file: its LAYOUTGETs and returns one at a time
        self.cred: Credential | None = None  # for returns a recall starts (the last I/O's)
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()  # why I/O went through the metadata server

    def mds(self, reason: str) -> None:
        """An I/O goes through the metadata server, for ``reason``."""
        self.reasons[reason] += 1

    def file_lock(self, fh: bytes) -> trio.Lock:
        lock = self.locks.get(fh)
        if lock is None:
            lock = self.locks[fh] = trio.Lock()
        return lock

    async def drained(self, fh: bytes) -> None:
        """Once no I/O by the file's layout is in flight."""
        while not self.cache.idle(fh):
            await trio.sleep(POLL)

    # -- returns and recalls ---------------------------------------------------------------------------
    async def return_all(self, fh: bytes, cred: Credential) -> None:
        ret = self.cache.give_back(fh)
        if ret is not None:
            await self.send_return(ret, cred)

    async def send_return(self, ret: LayoutReturn, cred: Credential) -> None:
        self.returning(ret.fh)
        self.counts["layoutreturn"] += 1
        try:
            sid: stateid4 | None = await self.ops.layoutreturn(
                ret.fh, ret.stateid, self.cache.layout_type, ret.iomode, ret.offset, ret.length, cred)
        except NFS4Error as e:
            log.info("LAYOUTRETURN: %s", e)
            sid = None
        self.cache.returned(ret, sid)

    def on_recall(self, args: Any) -> int:
        """CB_LAYOUTRECALL: answered now; the returns go once the files' layout I/O has drained."""
        answer = self.cache.recall(args.clora_type, args.clora_iomode, args.clora_recall)
        self.counts["recalls"] += 1
        for ret in answer.returns:
            self.nursery.start_soon(self.return_when_idle, ret)
        return answer.status

    async def return_when_idle(self, ret: LayoutReturn) -> None:
        await self.drained(ret.fh)
        cred = self.cred
        if cred is None:
            return
        await self.commit_before_return(ret.fh, cred)
        await self.send_return(ret, cred)

    async def closing(self, fh: bytes, cred: Credential) -> None:
        """The file's open is closing: what it wrote by the layout committed, a return-on-close layout
        returned; the next open of the file asks for a layout again, whatever made this one's I/O go
        through the metadata server (a recall, a WRITE through it, a refusal, a device error)."""
        await self.commit_at_close(fh, cred)
        ret = self.cache.closing(fh)
        if ret is not None:
            await self.send_return(ret, cred)
        self.cache.retry(fh)

    def layouts_lost(self) -> None:
        """The client ID is gone, and its layouts with it: none is returned."""
        if self.cache.forget_all():
            self.mds("the layouts went with the client ID (a server restart, or the lease ran out)")

    # -- what each driver says ---------------------------------------------------------------------------
    def returning(self, fh: bytes) -> None:
        """A layout of ``fh`` is about to be returned (what the driver keeps of it until then)."""

    async def commit_before_return(self, fh: bytes, cred: Credential) -> None:
        """What ``fh`` wrote by a recalled layout, committed before the layout goes back."""

    async def commit_at_close(self, fh: bytes, cred: Credential) -> None:
        """What ``fh`` wrote by its layout, committed as its open closes."""
