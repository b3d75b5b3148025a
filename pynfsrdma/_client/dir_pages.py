"""Reading a directory in READDIR pages, the next ones sent ahead while the current one is used.

A listing reads a directory in order: once a page is in, the READDIRs after it go at once (up to
``READDIR_AHEAD`` of them, each after the one before: a READDIR starts at the cookie of the last
entry of the previous reply), so that the server reads on while the entries are used. A reader may
ask again from any entry it was handed (the FUSE kernel takes only what fits its buffer and asks
for the rest from the last entry it took): the last two pages are kept for that. A listing from the
start (a rewind) always asks the server. A listing's first READDIR asks for a small reply
(``FIRST_PAGE``: a small directory costs the server and the connection no more than it holds), and
each READDIR after it for twice the one before, up to ``LISTING_PAGE`` as far as the session
carries it: the COMPOUND and the session's work are paid per READDIR, so a large directory is read
in few, large ones.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

import trio

from .._rpc.auth import Credential
from .nfs4 import VERIFIER_SIZE, ListedEntry, NFSv4

log = logging.getLogger(__name__)

READDIR_AHEAD = 3  # READDIRs of a directory being listed sent ahead of the one in use
FIRST_PAGE = 64 * 1024  # bytes a listing's first READDIR asks for
LISTING_PAGE = 1024 * 1024  # bytes a listing's READDIR asks for, at most


class DirPage:
    """One READDIR's worth of a directory: the entries after ``cookie`` (once the reply is there,
    sent ahead or asked for); ``asked``: the caller's stamp when the READDIR was sent."""

    def __init__(self, cookie: int, asked: int) -> None:
        self.cookie = cookie
        self.asked = asked
        self.done = trio.Event()
        self.result: tuple[list[ListedEntry], bytes, bool] | None = None  # entries, verifier, eof
        self.index: dict[int, int] | None = None  # entry cookie -> position (made when needed)

    def after(self, cookie: int) -> int | None:
        """Where the entries after ``cookie`` start, if this page holds them."""
        if cookie == self.cookie:
            return 0
        if self.index is None:
            entries = self.result[0] if self.result is not None else []
            self.index = {e[1]: n for n, e in enumerate(entries)}  # (e[1]: the entry's cookie)
        pos = self.index.get(cookie)
        return None if pos is None else pos + 1


class DirReader:
    """The pages of one open directory ``fh`` (see the module's text). ``stamp`` is called when a
    READDIR is sent; its value is the page's ``asked``."""

    def __init__(
        self, nfs: NFSv4, fh: bytes, cred: Credential, nursery: trio.Nursery, stamp: Callable[[], int]
    ) -> None:
        self.nfs = nfs
        self.fh = fh
        self.cred = cred
        self._nursery = nursery
        self._stamp = stamp
        self.verifier = bytes(VERIFIER_SIZE)
        self.largest = min(LISTING_PAGE, nfs.maxread)  # (no larger than a reply may be)
        self.maxcount = min(FIRST_PAGE, self.largest)  # what the last READDIR sent asked for
        self.held: list[DirPage] = []  # the last two pages handed out
        # where the reader's last use stopped: (cookie, page, position in it)
        self.resume: tuple[int, DirPage | None, int] = (-1, None, 0)
        self.ahead: collections.deque[DirPage] = collections.deque()  # READDIRs sent ahead

    async def page_after(self, cookie: int) -> tuple[DirPage, int]:
        """The page with the entries after ``cookie`` and where they start in it."""
        page, start = self._held_after(cookie)
        if page is None:
            page = await self._next_page(cookie)
            self.held = [*self.held[-1:], page]
        return page, start

    def stopped_at(self, cookie: int, page: DirPage, i: int) -> None:
        """The reader took the entries up to ``cookie``, entry ``i`` of ``page`` being the next."""
        self.resume = (cookie, page, i)

    def close(self) -> None:
        self.ahead.clear()  # (what is on its way is dropped when it comes)

    def _held_after(self, cookie: int) -> tuple[DirPage | None, int]:
        if not cookie:
            return None, 0
        resume, page, i = self.resume
        if cookie != resume or page is None:
            for page in reversed(self.held):
                pos = page.after(cookie)
                if pos is not None:
                    i = pos
                    break
            else:
                return None, 0
        assert page.result is not None
        entries, _, eof = page.result
        if i >= len(entries) and not eof:
            return None, 0  # (the next READDIR's, most likely sent ahead already)
        return page, i

    async def _next_page(self, cookie: int) -> DirPage:
        """The entries after ``cookie``: from the READDIR sent ahead for it, if there is one (a
        listing read in order), else asked now; the READDIRs after them go ahead."""
        page = None
        if self.ahead and self.ahead[0].cookie == cookie:
            page = self.ahead.popleft()
            await page.done.wait()  # (its result is None when it failed: asked again here)
        if page is None or page.result is None:
            self.ahead.clear()  # (a seek: what was sent ahead is for elsewhere; dropped when it comes)
            page = DirPage(cookie, self._stamp())
            page.result = await self.nfs.directories.readdir_plus(
                self.fh, self.cred, cookie, self.verifier if cookie else bytes(VERIFIER_SIZE), self._size(cookie)
            )
            page.done.set()
        entries, self.verifier, eof = page.result
        if not self.ahead:
            if entries and not eof:
                self._send_ahead(entries[-1][1])
        else:
            self._top_up()
        return page

    def _size(self, cookie: int) -> int:
        """The bytes the READDIR from ``cookie`` asks for: ``FIRST_PAGE`` from the start, else twice
        what the READDIR before it asked for, at most the largest."""
        self.maxcount = min(FIRST_PAGE if not cookie else 2 * self.maxcount, self.largest)
        return self.maxcount

    def _send_ahead(self, cookie: int) -> None:
        page = DirPage(cookie, self._stamp())
        self.ahead.append(page)
        self._nursery.start_soon(self._read_ahead, page, self._size(cookie))

    def _top_up(self) -> None:
        """One more READDIR ahead, after the last one sent if it is back and the directory goes on."""
        last = self.ahead[-1]
        if len(self.ahead) < READDIR_AHEAD and last.done.is_set() and last.result is not None:
            entries, _, eof = last.result
            if entries and not eof:
                self._send_ahead(entries[-1][1])

    async def _read_ahead(self, page: DirPage, maxcount: int) -> None:
        try:
            page.result = await self.nfs.directories.readdir_plus(
                self.fh, self.cred, page.cookie, self.verifier, maxcount
            )
        except Exception as e:  # (the reader asks again and sees it)
            log.debug("READDIR ahead of cookie %d: %s", page.cookie, e)
        finally:
            page.done.set()
        if self.ahead and self.ahead[-1] is page:
            self._top_up()
