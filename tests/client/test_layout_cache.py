"""The per-file layout cache (RFC 8881 chapter 12): which I/O goes by a layout, asks for one, or goes
through the metadata server; stateid seqid order; CB_LAYOUTRECALL's answer and the returns it starts;
return-on-close; lease loss."""

from __future__ import annotations

from pynfsrdma._client.layouts import (
    ANY,
    NFS4_UINT64_MAX,
    READ,
    RW,
    AskLayout,
    ByLayout,
    LayoutCache,
    LayoutReturn,
    Segment,
    ViaMDS,
    seqid_newer,
)
from pynfsrdma._proto.nfs4 import const as c
from pynfsrdma._proto.nfs4.callback import layoutrecall_file4
from pynfsrdma._proto.nfs4.types import fsid4, stateid4

BLOCK = c.LAYOUT4_BLOCK_VOLUME
FH = b"file-1"
OTHER = b"L" * 12
MiB = 1 << 20


def seg(off: int, n: int, io: int) -> Segment:
    return Segment(off, n, io, BLOCK, body=None)


def cache_with(*segs: Segment, seqid: int = 1, roc: bool = False) -> LayoutCache:
    lc = LayoutCache(BLOCK)
    assert lc.granted(FH, stateid4(seqid, OTHER), roc, list(segs))
    return lc


def file_recall(off: int, n: int, seqid: int, fh: bytes = FH) -> tuple[int, layoutrecall_file4]:
    return c.LAYOUTRECALL4_FILE, layoutrecall_file4(fh, off, n, stateid4(seqid, OTHER))


def test_seqid_order_wraps() -> None:
    assert seqid_newer(2, 1)
    assert not seqid_newer(1, 2)
    assert not seqid_newer(5, 5)
    assert seqid_newer(1, 0xFFFFFFFF)
    assert not seqid_newer(0xFFFFFFFF, 1)


def test_no_layout_asks_for_one_from_the_block_below_with_minlength_for_writes() -> None:
    lc = LayoutCache(BLOCK, ask=16 * MiB)
    assert lc.route(FH, 5000, 100, READ) == AskLayout(4096, 16 * MiB, 0, READ)
    assert lc.route(FH, 0, 3 * 4096 + 1, RW) == AskLayout(0, 16 * MiB, 4 * 4096, RW)
    # an I/O larger than what is asked for at least: all of it
    assert lc.route(FH, 100, 20 * MiB, RW) == AskLayout(0, 20 * MiB + 4096, 20 * MiB + 4096, RW)


def test_a_read_goes_by_a_rw_segment_a_write_not_by_a_read_one() -> None:
    lc = cache_with(seg(0, MiB, READ), seg(MiB, MiB, RW))
    assert lc.route(FH, 10, 10, READ) == ByLayout(seg(0, MiB, READ))
    assert lc.route(FH, MiB + 10, 10, READ) == ByLayout(seg(MiB, MiB, RW))
    assert isinstance(lc.route(FH, 10, 10, RW), AskLayout)
    assert isinstance(lc.route(FH, 2 * MiB, 10, READ), AskLayout)


def test_a_stale_layoutget_reply_is_not_kept() -> None:
    lc = cache_with(seg(0, MiB, READ), seqid=5)
    assert not lc.granted(FH, stateid4(4, OTHER), False, [seg(MiB, MiB, READ)])
    assert isinstance(lc.route(FH, MiB, 1, READ), AskLayout)
    assert lc.granted(FH, stateid4(6, OTHER), False, [seg(MiB, MiB, READ)])
    assert isinstance(lc.route(FH, MiB, 1, READ), ByLayout)


def test_a_recall_that_matches_takes_the_range_out_of_use_and_returns_it() -> None:
    lc = cache_with(seg(0, NFS4_UINT64_MAX, RW), seqid=1)
    lc.started(FH)
    ans = lc.recall(BLOCK, ANY, file_recall(0, NFS4_UINT64_MAX, 2))
    assert ans.status == c.NFS4_OK
    # the return answers the recall's seqid
    assert ans.returns == [LayoutReturn(FH, 0, NFS4_UINT64_MAX, ANY, BLOCK, stateid4(2, OTHER))]
    # the I/O goes on through the metadata server, and a LAYOUTGET racing the recall is not kept
    assert lc.route(FH, 10, 10, RW) == ViaMDS("layout recalled")
    assert not lc.granted(FH, stateid4(3, OTHER), False, [seg(0, MiB, RW)])
    assert lc.route(FH, 10, 10, RW) == ViaMDS("layout recalled")
    assert not lc.idle(FH)
    assert lc.ended(FH)
    lc.returned(ans.returns[0], None)
    assert isinstance(lc.route(FH, 10, 10, RW), AskLayout)


def test_a_recall_of_nothing_held_is_nomatching_layout() -> None:
    lc = cache_with(seg(0, MiB, READ))
    assert lc.recall(BLOCK, ANY, file_recall(0, MiB, 2, fh=b"other")).status == c.NFS4ERR_NOMATCHING_LAYOUT
    assert lc.recall(BLOCK, ANY, file_recall(2 * MiB, MiB, 2)).status == c.NFS4ERR_NOMATCHING_LAYOUT
    assert lc.recall(BLOCK, RW, file_recall(0, MiB, 2)).status == c.NFS4ERR_NOMATCHING_LAYOUT
    assert lc.recall(c.LAYOUT4_FLEX_FILES, ANY, file_recall(0, MiB, 2)).status == c.NFS4ERR_NOMATCHING_LAYOUT
    assert isinstance(lc.route(FH, 0, 1, READ), ByLayout)
    assert LayoutCache(BLOCK).recall(BLOCK, ANY, (c.LAYOUTRECALL4_ALL, None)).status == c.NFS4ERR_NOMATCHING_LAYOUT


def test_a_recall_that_overtakes_the_first_layoutget_reply_is_delayed_not_forgotten() -> None:
    """nfsd grants a layout and recalls it at once (a WRITE through it needs the file): the recall can
    come before the LAYOUTGET's reply is taken in. "No matching layout" would make nfsd forget the
    layout the client then writes by, and refuse its LAYOUTCOMMIT; NFS4ERR_DELAY makes nfsd send the
    recall again, and by then the layout is held and goes back."""
    lc = LayoutCache(BLOCK)
    with lc.asking(FH):
        ans = lc.recall(BLOCK, ANY, file_recall(0, NFS4_UINT64_MAX, 2))
        assert (ans.status, ans.returns) == (c.NFS4ERR_DELAY, [])
        # the reply: granted with seqid 1; the recall, sent again, names seqid 2 and takes it back
        assert lc.granted(FH, stateid4(1, OTHER), False, [seg(0, MiB, RW)])
    ans = lc.recall(BLOCK, ANY, file_recall(0, NFS4_UINT64_MAX, 2))
    assert ans.status == c.NFS4_OK
    assert ans.returns == [LayoutReturn(FH, 0, NFS4_UINT64_MAX, ANY, BLOCK, stateid4(2, OTHER))]
    assert lc.route(FH, 10, 10, RW) == ViaMDS("layout recalled")


def test_a_recall_during_a_layoutget_delayed_only_when_it_names_state_not_seen() -> None:
    lc = cache_with(seg(0, MiB, RW), seqid=4)
    with lc.asking(FH):
        # one past the seqid held: the recall of what is held, answered and returned at once
        ans = lc.recall(BLOCK, ANY, file_recall(0, MiB, 5))
        assert ans.status == c.NFS4_OK and len(ans.returns) == 1
    lc = cache_with(seg(0, MiB, RW), seqid=4)
    with lc.asking(FH):
        # further on: a grant in a reply not taken in yet; and a layout stateid this client never saw
        assert lc.recall(BLOCK, ANY, file_recall(0, MiB, 6)).status == c.NFS4ERR_DELAY
        assert lc.recall(BLOCK, ANY, (c.LAYOUTRECALL4_FILE, layoutrecall_file4(
            FH, 0, MiB, stateid4(1, b"M" * 12)))).status == c.NFS4ERR_DELAY
        assert isinstance(lc.route(FH, 0, 1, RW), ByLayout)
    # no LAYOUTGET on its way: nothing held is "no matching layout", as before
    assert LayoutCache(BLOCK).recall(BLOCK, ANY, file_recall(0, MiB, 2)).status == c.NFS4ERR_NOMATCHING_LAYOUT
    lc = LayoutCache(BLOCK)
    with lc.asking(FH):
        pass  # (a LAYOUTGET refused, or answered for nothing: no entry left behind)
    assert FH not in lc.files
    assert lc.recall(BLOCK, ANY, file_recall(0, MiB, 2)).status == c.NFS4ERR_NOMATCHING_LAYOUT


def test_fsid_and_all_recalls_name_every_file_held() -> None:
    lc = cache_with(seg(0, MiB, READ))
    lc.granted(b"file-2", stateid4(1, b"M" * 12), False, [seg(0, MiB, RW)])
    ans = lc.recall(BLOCK, ANY, (c.LAYOUTRECALL4_FSID, fsid4(1, 2)))
    assert ans.status == c.NFS4_OK
    assert sorted(r.fh for r in ans.returns) == [FH, b"file-2"]
    assert lc.route(b"file-2", 0, 1, RW) == ViaMDS("layout recalled")


def test_return_on_close_and_not() -> None:
    lc = cache_with(seg(0, MiB, RW), roc=True)
    ret = lc.closing(FH)
    assert ret == LayoutReturn(FH, 0, NFS4_UINT64_MAX, ANY, BLOCK, stateid4(1, OTHER))
    assert lc.closing(FH) is None
    lc.returned(ret, None)
    assert FH not in lc.files
    assert cache_with(seg(0, MiB, RW), roc=False).closing(FH) is None


def test_a_refused_file_goes_through_the_mds_until_retried() -> None:
    lc = LayoutCache(BLOCK)
    lc.refuse(FH, "the server has no layout for it (NFS4ERR_LAYOUTUNAVAILABLE)")
    assert lc.route(FH, 0, 1, READ) == ViaMDS("the server has no layout for it (NFS4ERR_LAYOUTUNAVAILABLE)")
    lc.retry(FH)
    assert isinstance(lc.route(FH, 0, 1, READ), AskLayout)


def test_lease_loss_forgets_every_layout_and_returns_none() -> None:
    lc = cache_with(seg(0, MiB, RW))
    lc.granted(b"file-2", stateid4(1, b"M" * 12), False, [seg(0, MiB, READ)])
    assert lc.forget_all() == 2
    assert isinstance(lc.route(FH, 0, 1, RW), AskLayout)
    assert lc.recall(BLOCK, ANY, file_recall(0, MiB, 2)).status == c.NFS4ERR_NOMATCHING_LAYOUT
