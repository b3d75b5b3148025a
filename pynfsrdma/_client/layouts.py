"""pNFS layouts held per file (RFC 8881 chapter 12), sans-I/O: segments by range and iomode, the layout
stateid and its seqid order, and the decisions the I/O paths and the callbacks ask of them.

- ``LayoutCache.route(fh, offset, length, iomode)``: a READ or WRITE goes by a segment held
  (``ByLayout``), asks for one first (``AskLayout``), or goes through the metadata server
  (``ViaMDS``, with the reason: the file is being recalled, the server refused a layout...).
- ``granted``: what LAYOUTGET answered; a reply whose stateid seqid is older than the one held is
  stale (12.5.3) and kept out.
- ``recall``: CB_LAYOUTRECALL's answer (NFS4_OK or NFS4ERR_NOMATCHING_LAYOUT, 20.3.3) and the
  LAYOUTRETURNs to send once the file's layout I/O has drained. A recalled range takes no new layout
  I/O at once. A recall of a file whose LAYOUTGET is on its way, naming a layout stateid newer than
  any reply taken in (the server recalling what it granted in a reply not read yet), is answered
  NFS4ERR_DELAY (``asking``): the server sends it again, and by then the grant is held and returned.
  "No matching layout" then would make the server forget a layout the client goes on to use, and
  refuse its LAYOUTCOMMIT.
- ``closing``, ``give_back``: the LAYOUTRETURN a CLOSE sends first when the layout said
  return-on-close, and the one of a file whose I/O goes through the metadata server. A recall of a
  range whose return is under way is answered NFS4_OK: the return is coming.
- ``forget_all``: the client ID or its lease is gone, and the layouts with it (12.7.3): nothing to
  return, the I/O goes through the metadata server until new layouts are granted.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .._proto.nfs4 import const as c
from .._proto.nfs4.types import stateid4

ANY = c.LAYOUTIOMODE4_ANY
READ = c.LAYOUTIOMODE4_READ
RW = c.LAYOUTIOMODE4_RW
NFS4_UINT64_MAX = c.NFS4_UINT64_MAX
_SEQ_HALF = 1 << 31


def seqid_newer(a: int, b: int) -> bool:
    """Is layout stateid seqid ``a`` newer than ``b``? Serial-number order on 32 bits (RFC 8881 12.5.3:
    the seqid wraps past 0xffffffff)."""
    return a != b and (a - b) % (1 << 32) < _SEQ_HALF


def _unseen(recalled: stateid4, held: stateid4 | None) -> bool:
    """Does a recall's layout stateid name state no LAYOUTGET reply taken in has shown? (Its seqid is
    the server's for the recall: one past the last one granted.)"""
    return held is None or recalled.other != held.other \
        or seqid_newer(recalled.seqid, (held.seqid + 1) % (1 << 32))


def range_end(offset: int, length: int) -> int:
    """The first byte after a layout range; a length of all ones means to the end of the file."""
    return NFS4_UINT64_MAX + 1 if length == NFS4_UINT64_MAX else offset + length


def _overlaps(a_off: int, a_len: int, b_off: int, b_len: int) -> bool:
    return a_off < range_end(b_off, b_len) and b_off < range_end(a_off, a_len)


def iomode_serves(held: int, wanted: int) -> bool:
    """Can I/O of iomode ``wanted`` go by a segment ``held``? A RW segment serves reads too (RFC 8881 12.2.9)."""
    return held == wanted or (held == RW and wanted == READ)


def iomode_names(named: int, held: int) -> bool:
    """Does a recall or return for iomode ``named`` take a segment held in iomode ``held``?"""
    return named in (ANY, held)


@dataclass(slots=True)
class Segment:
    """One layout segment (a ``layout4``): its range, iomode and layout-type body, decoded."""

    offset: int
    length: int
    iomode: int
    layout_type: int
    body: Any

    @property
    def end(self) -> int:
        return range_end(self.offset, self.length)

    def covers(self, offset: int) -> bool:
        return self.offset <= offset < self.end


@dataclass(slots=True)
class LayoutReturn:
    """A LAYOUTRETURN to send (FILE type): the file, the range, the iomode and the stateid to return."""

    fh: bytes
    offset: int
    length: int
    iomode: int
    layout_type: int
    stateid: stateid4


@dataclass(slots=True)
class FileLayout:
    """What the client holds of one file's layout."""

    stateid: stateid4 | None = None
    segments: list[Segment] = field(default_factory=list)
    return_on_close: bool = False
    recalls: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, length, iomode) recalled
    busy: int = 0  # layout I/O in flight
    refused: str | None = None  # why the server gives this file no layout: its I/O goes through the MDS
    asking: int = 0  # LAYOUTGETs on their way, their replies not taken in yet

    def empty(self) -> bool:
        return not (self.segments or self.recalls or self.stateid is not None or self.refused is not None
                    or self.busy or self.asking)


@dataclass(frozen=True, slots=True)
class ByLayout:
    segment: Segment


@dataclass(frozen=True, slots=True)
class AskLayout:
    """Send LAYOUTGET first: for ``offset``..``length`` in ``iomode``, at least ``minlength`` bytes."""

    offset: int
    length: int
    minlength: int
    iomode: int


@dataclass(frozen=True, slots=True)
class ViaMDS:
    reason: str


Route = ByLayout | AskLayout | ViaMDS


@dataclass(frozen=True, slots=True)
class RecallAnswer:
    """CB_LAYOUTRECALL's status, and the returns to send once the files' layout I/O has drained."""

    status: int
    returns: list[LayoutReturn]


class LayoutCache:
    """The layouts of one client ID, keyed by file handle, for layouts of ``layout_type``."""

    def __init__(self, layout_type: int, block_size: int = 4096, ask: int = 16 << 20) -> None:
        self.layout_type = layout_type
        self.block_size = block_size
        self.ask = ask  # how much a LAYOUTGET asks for at least: one per I/O would be a round trip each
        self.files: dict[bytes, FileLayout] = {}

    # -- the I/O paths ------------------------------------------------------------------------------------
    def route(self, fh: bytes, offset: int, length: int, iomode: int) -> Route:
        """How a READ (iomode READ) or WRITE (RW) of ``length`` bytes at ``offset`` goes."""
        f = self.files.get(fh)
        if f is not None:
            if f.refused is not None:
                return ViaMDS(f.refused)
            if any(_overlaps(offset, max(length, 1), r_off, r_len) for r_off, r_len, _ in f.recalls):
                return ViaMDS("layout recalled")
            for seg in f.segments:
                if seg.covers(offset) and iomode_serves(seg.iomode, iomode):
                    return ByLayout(seg)
        return self.ask_for(offset, length, iomode)

    def ask_for(self, offset: int, length: int, iomode: int) -> AskLayout:
        """The LAYOUTGET for an I/O of ``length`` bytes at ``offset``."""
        # ask from the block below the offset (nfsd refuses an unaligned loga_offset) for ``ask`` bytes
        # or to the end of the I/O's last block if that is further; a write needs all of its own
        # (minlength > 0: RFC 5663 2.3.1 refuses a RW layout asked with minlength 0)
        bs = self.block_size
        start = offset - offset % bs
        end = -(-(offset + max(length, 1)) // bs) * bs
        return AskLayout(start, max(end - start, self.ask), end - start if iomode == RW else 0, iomode)

    @contextmanager
    def asking(self, fh: bytes) -> Iterator[None]:
        """A LAYOUTGET of ``fh`` and the taking in of its reply (``granted`` or ``refuse``)."""
        f = self.files.setdefault(fh, FileLayout())
        f.asking += 1
        try:
            yield
        finally:
            f.asking -= 1
            if f.empty() and self.files.get(fh) is f:
                del self.files[fh]

    def started(self, fh: bytes) -> None:
        """Layout I/O of ``fh`` began (a recall waits for it to end before returning)."""
        self.files.setdefault(fh, FileLayout()).busy += 1

    def ended(self, fh: bytes) -> bool:
        """Layout I/O of ``fh`` ended; True when none is left in flight."""
        f = self.files.get(fh)
        if f is None:
            return True
        f.busy = max(0, f.busy - 1)
        return f.busy == 0

    def idle(self, fh: bytes) -> bool:
        f = self.files.get(fh)
        return f is None or f.busy == 0

    # -- LAYOUTGET ----------------------------------------------------------------------------------------
    def granted(self, fh: bytes, stateid: stateid4, return_on_close: bool, segments: list[Segment]) -> bool:
        """LAYOUTGET's reply. False when it was stale (an older seqid than the stateid held, or it
        arrived after a recall of the range it covers): its segments are not kept."""
        f = self.files.setdefault(fh, FileLayout())
        if f.stateid is not None and f.stateid.other == stateid.other \
                and not seqid_newer(stateid.seqid, f.stateid.seqid):
            return False
        if any(_overlaps(s.offset, s.length, r_off, r_len) for s in segments for r_off, r_len, _ in f.recalls):
            f.stateid = stateid
            return False
        f.stateid = stateid
        f.return_on_close = f.return_on_close or return_on_close
        f.refused = None
        for seg in segments:
            if seg.layout_type != self.layout_type:
                continue
            f.segments = [s for s in f.segments
                          if not (s.iomode == seg.iomode and seg.offset <= s.offset and s.end <= seg.end)]
            f.segments.append(seg)
        f.segments.sort(key=lambda s: (s.offset, -s.iomode))
        return True

    def refuse(self, fh: bytes, reason: str) -> None:
        """The server gives ``fh`` no layout (LAYOUTUNAVAILABLE, UNKNOWN_LAYOUTTYPE, BADLAYOUT, a device
        that cannot be found or failed): its I/O goes through the metadata server until ``retry``."""
        self.files.setdefault(fh, FileLayout()).refused = reason

    def retry(self, fh: bytes) -> None:
        """Ask for a layout again (the file changed, or time passed since the refusal)."""
        f = self.files.get(fh)
        if f is not None:
            f.refused = None

    # -- CB_LAYOUTRECALL ----------------------------------------------------------------------------------
    def recall(self, layout_type: int, iomode: int, recall: tuple[int, Any]) -> RecallAnswer:
        """CB_LAYOUTRECALL: which held segments it names, taken out of use at once. NFS4ERR_NOMATCHING_LAYOUT
        when none (RFC 8881 20.3.3), or when the type is not ours."""
        kind, what = recall
        if layout_type != self.layout_type:
            return RecallAnswer(c.NFS4ERR_NOMATCHING_LAYOUT, [])
        recalled_sid = None
        if kind == c.LAYOUTRECALL4_FILE:
            fh = bytes(what.lor_fh)
            f = self.files.get(fh)
            if f is not None and f.asking and _unseen(what.lor_stateid, f.stateid):
                return RecallAnswer(c.NFS4ERR_DELAY, [])
            fhs = [fh] if f is not None else []
            offset, length = what.lor_offset, what.lor_length
            recalled_sid = what.lor_stateid
        else:  # FSID or ALL: every file we hold (one export's files share the client's fsid here)
            fhs = list(self.files)
            offset, length = 0, NFS4_UINT64_MAX
        returns = []
        pending = False
        for fh in fhs:
            f = self.files[fh]
            hit = [s for s in f.segments if _overlaps(s.offset, s.length, offset, length)
                   and iomode_names(iomode, s.iomode)]
            if not hit and any(_overlaps(r_off, r_len, offset, length) and (iomode == ANY or r_mode in (ANY, iomode))
                               for r_off, r_len, r_mode in f.recalls):
                # the range's return is under way (a recall's, a close's, a give-back's): nfsd sends
                # the recall again until it arrives, and takes NFS4ERR_NOMATCHING_LAYOUT for "returned"
                # (it forgets the layout, and the LAYOUTCOMMIT before our return gets NFS4ERR_BADLAYOUT)
                pending = True
                continue
            if not hit or f.stateid is None:
                continue
            f.segments = [s for s in f.segments if s not in hit]
            f.recalls.append((offset, length, iomode))
            # the return carries the recall's seqid (RFC 8881 12.5.5.2.1): it says which layout state it answers
            if recalled_sid is not None and recalled_sid.other == f.stateid.other \
                    and seqid_newer(recalled_sid.seqid, f.stateid.seqid):
                f.stateid = recalled_sid
            returns.append(LayoutReturn(fh, offset, length, iomode, self.layout_type, f.stateid))
        if not returns and not pending:
            return RecallAnswer(c.NFS4ERR_NOMATCHING_LAYOUT, [])
        return RecallAnswer(c.NFS4_OK, returns)

    # -- LAYOUTRETURN -------------------------------------------------------------------------------------
    def returned(self, ret: LayoutReturn, stateid: stateid4 | None) -> None:
        """LAYOUTRETURN of ``ret`` answered: the range is ours to ask again; ``stateid`` is the one it gave
        back (``lrs_present``), None when the server holds no more layout of the file."""
        f = self.files.get(ret.fh)
        if f is None:
            return
        f.segments = [s for s in f.segments
                      if not (_overlaps(s.offset, s.length, ret.offset, ret.length) and iomode_names(ret.iomode, s.iomode))]
        f.recalls = [r for r in f.recalls if r != (ret.offset, ret.length, ret.iomode)]
        if stateid is None:
            f.stateid = None
            f.segments = []
        elif f.stateid is None or seqid_newer(stateid.seqid, f.stateid.seqid) or f.stateid.other != stateid.other:
            f.stateid = stateid
        if f.empty():
            del self.files[ret.fh]

    def give_back(self, fh: bytes) -> LayoutReturn | None:
        """The whole layout of ``fh`` to return (a device error, a WRITE through the metadata server):
        out of use at once, and its return under way until ``returned``."""
        f = self.files.get(fh)
        if f is None or f.stateid is None:
            return None
        f.segments = []
        f.recalls.append((0, NFS4_UINT64_MAX, ANY))
        return LayoutReturn(fh, 0, NFS4_UINT64_MAX, ANY, self.layout_type, f.stateid)

    def holds(self, fh: bytes, seg: Segment) -> bool:
        """Is ``seg`` still held (not recalled or returned since an I/O chose it)?"""
        f = self.files.get(fh)
        return f is not None and any(s is seg for s in f.segments)

    def closing(self, fh: bytes) -> LayoutReturn | None:
        """The file's last open is closing: the whole layout to return first, if it was return-on-close."""
        f = self.files.get(fh)
        if f is None or f.stateid is None or not f.return_on_close or not f.segments:
            return None
        f.segments = []
        f.recalls.append((0, NFS4_UINT64_MAX, ANY))
        return LayoutReturn(fh, 0, NFS4_UINT64_MAX, ANY, self.layout_type, f.stateid)

    def forget_all(self) -> int:
        """The client ID (or its lease) is gone and its layouts with it: drop them all, return none.
        Returns how many files had one."""
        n = sum(1 for f in self.files.values() if f.segments or f.stateid is not None)
        self.files.clear()
        return n
