"""Mount option parsing and the cache/inode decisions, without a mount (sans-I/O)."""

from __future__ import annotations

import pytest

from pynfsrdma._client.attributes import FileAttrs, record_of
from pynfsrdma._fuse.cache import (
    LISTING_RUN,
    LISTING_TRUST,
    NEGATIVE,
    AttrTimeouts,
    Listing,
    NameCache,
    TimedMap,
)
from pynfsrdma._fuse.inodes import OWN, REMAPPED, ROOT_INODE, InodeTable
from pynfsrdma._fuse.options import OptionError, parse_options, parse_remount
from pynfsrdma._proto.nfs4 import const as c


def test_defaults_are_those_of_nfs5() -> None:
    o = parse_options("")
    assert (o.hard, o.timeo, o.retrans) == (True, 600, 2)
    assert (o.acregmin, o.acregmax, o.acdirmin, o.acdirmax) == (3, 60, 30, 60)
    assert o.fuse_options("h:/e", mounter_uid=1000) == {"fsname=h:/e", "subtype=pynfsrdma", "auto_unmount"}
    # root serves every user, as kernel NFS, and the kernel checks each one's permission from the mode
    assert {"allow_other", "default_permissions"} <= o.fuse_options("h:/e", mounter_uid=0)
    assert {"allow_other", "default_permissions"} <= parse_options("allow_other").fuse_options("h:/e", 1000)
    # the way out, for rules the mode bits do not show (ACLs, id mapping): the server alone decides
    assert "default_permissions" not in parse_options("nodefault_permissions").fuse_options("h:/e", 0)
    assert "default_permissions" not in parse_options("squash_uid=7").fuse_options("h:/e", 0)
    assert "default_permissions" in parse_options("default_permissions").fuse_options("h:/e", 1000)
    # then the server checks every name for each caller (the kernel keeps none), where users share it
    assert parse_options("nodefault_permissions").server_checks_each_name(0)
    assert not parse_options("nodefault_permissions").server_checks_each_name(1000)  # the mounter alone
    assert not parse_options("").server_checks_each_name(0)  # the kernel checks
    assert not parse_options("squash_uid=7").server_checks_each_name(0)  # the server sees one user


def test_options_are_parsed() -> None:
    o = parse_options(
        "vers=4.1,proto=tcp,port=2050,rsize=65536,wsize=4194304,soft,timeo=15,retrans=4",
        "actimeo=7,acregmax=9,ro,allow_other,default_permissions,squash_uid=99,rw,_netdev,defaults",
    )
    assert (o.port, o.rsize, o.wsize, o.hard, o.timeo_seconds, o.retrans) == (
        2050,
        65536,
        1 << 20,
        False,
        1.5,
        4,
    )
    assert (o.acregmin, o.acregmax, o.acdirmin, o.acdirmax) == (7, 9, 7, 7)
    assert (o.ro, o.squash_uid, o.squash_gid) == (False, 99, 99)  # rw came later
    assert {"allow_other", "default_permissions"} <= o.fuse_options("x")
    assert (o := parse_options("noac,actimeo=30")).noac and o.acregmax == 0 and o.acdirmin == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus,rsize=4096,frob=2", "unknown mount options: bogus, frob=2"),
        ("vers=3", r"vers=3: NFS versions 4 \(the highest both speak\), 4.1 and 4.2 are supported"),
        ("proto=udp", "proto=udp"),
        ("timeo=x", "timeo=x: not a number"),
        ("timeo", "timeo needs a value"),
        ("port=70000", "out of range"),
        ("soft=1", "takes no value"),
        ("acregmin=10,acregmax=5", "acregmin=10 is larger than acregmax=5"),
        ("squash_gid=5", "squash_gid= needs squash_uid="),
        ("lookupcache=some", "lookupcache=some: use one of all, positive, none"),
        ("max_pages=0", r"max_pages=0: out of range \(1..65535\)"),
        ("max_pages=65536", r"max_pages=65536: out of range \(1..65535\)"),
        ("max_background=0", r"max_background=0: out of range \(1..65535\)"),
        ("max_readahead=-1", r"max_readahead=-1: out of range"),
        ("channel=pyfuse3,max_readahead=65536", "mount option max_readahead needs channel=native"),
    ],
)
def test_bad_options_are_named(text: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_options(text)


def test_fuse_request_sizes_are_sized_unless_given() -> None:
    o = parse_options("")
    assert (o.max_pages, o.max_readahead, o.max_background) == (None, None, None)  # (sized by the mount)
    o = parse_options("max_pages=512,max_readahead=4194304,max_background=20")
    assert (o.max_pages, o.max_readahead, o.max_background) == (512, 4 << 20, 20)


def test_lookupcache_decides_which_names_are_cached() -> None:
    assert parse_options("").negative_names  # nfs(5): lookupcache=all
    assert not parse_options("lookupcache=pos").negative_names
    assert parse_options("lookupcache=positive").lookupcache == "positive"
    assert parse_options("lookupcache=none").lookupcache == "none"
    assert not parse_options("noac").negative_names  # nothing cached at all
    assert not parse_options("acdirmin=0").negative_names


def test_attribute_timeout_adapts_like_linux() -> None:
    t = AttrTimeouts(3, 60, 30, 60)
    assert t.initial(False) == 3 and t.initial(True) == 30
    seq = [3.0]
    for _ in range(6):
        seq.append(t.next(seq[-1], False, changed=False))
    assert seq == [3, 6, 12, 24, 48, 60, 60]
    assert t.next(48, False, changed=True) == 3
    assert not AttrTimeouts.fresh(10.0, 0.0, 10.0)  # noac: never fresh
    assert AttrTimeouts.fresh(10.0, 3.0, 12.9) and not AttrTimeouts.fresh(10.0, 3.0, 13.0)


def test_name_cache_follows_the_directory_change_attribute() -> None:
    n = NameCache(ttl=60)
    n.put(1, "a", 42, parent_change=7)
    n.put(1, "gone", NEGATIVE, parent_change=7)
    assert n.get(1, "a", 7) == 42 and n.get(1, "gone", 7) == NEGATIVE
    assert n.get(1, "a", 8) is None  # the directory changed: the entry is dropped
    assert n.get(1, "a", 7) is None
    n.put(1, "b", 43, 7)
    n.drop_inode(43)
    assert n.get(1, "b", 7) is None
    off = NameCache(ttl=0)
    off.put(1, "a", 42, 7)
    assert off.get(1, "a", 7) is None


def test_a_timed_map_forgets_entries_after_their_time_and_keeps_the_newest() -> None:
    now = [100.0]
    m: TimedMap[str, int] = TimedMap(maxsize=2, ttl=3.0, timer=lambda: now[0])
    m["a"] = 1
    now[0] = 102.9
    assert m.get("a") == 1
    now[0] = 103.0  # three seconds after it was put: gone, whatever was looked up meanwhile
    assert m.get("a") is None and len(m) == 0
    m["b"], m["c"] = 2, 3
    m["b"] = 4  # put again: the newest, with a new time
    m["d"] = 5  # past maxsize: the oldest ("c") goes
    assert (m.get("b"), m.get("c"), m.get("d")) == (4, None, 5)
    now[0] = 106.0  # "b" and "d" were put at 103: expired, and not listed
    assert list(m.items()) == [] and m.pop("c") is None


def test_a_listing_follows_our_own_changes_and_ends_with_anyone_elses() -> None:
    listing = Listing(change=10, ours=float("-inf"), names=set())
    assert not listing.absent("a", now=5.0, ttl=30)  # a directory just made: the server is asked
    assert listing.changed(10, 11, "a", present=True, now=6.0)  # our create, nothing between
    assert not listing.absent("b", 6.01, 30)  # one change of ours is not a run: ask
    assert listing.changed(11, 12, "a", present=False, now=6.1)  # our remove, soon after
    assert listing.absent("a", 6.2, 30) and listing.absent("b", 6.2, 30) and listing.run == LISTING_RUN
    assert not listing.absent("b", 6.1 + LISTING_TRUST, 30)  # the run paused: ask
    assert not listing.absent("b", 6.2, ttl=0.05)  # nor longer than acdirmin
    assert listing.changed(12, 13, "c", present=True, now=20.0) and listing.run == 1  # a new run
    assert not listing.absent("b", 20.01, 30) and listing.seen(13)
    # somebody else changed the directory before our next change, or in a GETATTR we saw
    assert not Listing(12, 0.0, set()).changed(13, 14, "c", present=True, now=1.0)
    assert not Listing(12, 0.0, set()).seen(13)


def test_the_inode_table_ends_a_listing_when_the_directory_changed_without_us() -> None:
    t = InodeTable(b"root", attrs(500, ftype=c.NF4DIR), AttrTimeouts(3, 60, 30, 60), now=0.0)
    d, _ = t.learn(b"fh-d", attrs(9, change=5, ftype=c.NF4DIR), now=1.0, asked=t.asking())
    d.listing = Listing(5, 1.0, {"x"})
    t.refresh(d, attrs(9, change=5, ftype=c.NF4DIR), now=2.0, asked=t.asking())
    assert d.listing is not None
    t.refresh(d, attrs(9, change=6, ftype=c.NF4DIR), now=3.0, asked=t.asking())
    assert d.listing is None


def test_a_directory_takes_the_attributes_its_own_change_brought_back_unless_an_answer_may_be_newer() -> None:
    """A create in a directory brings the directory's attributes back in its COMPOUND: taken, so the
    kernel's next look at it needs no GETATTR. With two changes of ours to it on their way, or a
    GETATTR asked before or during one, whichever answer comes last may be the older: none is
    taken, and the next look asks the server."""
    t = InodeTable(b"root", attrs(500, ftype=c.NF4DIR), AttrTimeouts(3, 60, 30, 60), now=0.0)
    d, _ = t.learn(b"fh-d", attrs(9, change=5, ftype=c.NF4DIR), now=1.0, asked=t.asking())

    with t.changing(d) as asked:  # one create, alone
        d.stale()
        assert t.changed_by_us(d, attrs(9, change=6, ftype=c.NF4DIR), 2.0, asked)
    assert d.attrs.change == 6 and t.fresh(d, 2.5)

    getattr_asked = t.asking(d)  # a GETATTR sent before a create: its answer may show the directory before it
    with t.changing(d) as asked:
        during = t.asking(d)  # and one sent while the create is on its way ...
        t.refresh(d, attrs(9, change=8, ftype=c.NF4DIR), now=2.9, asked=t.asking(d))  # (... answered in it)
        assert d.attrs.change == 6 and not t.fresh(d, 2.9)
        assert t.changed_by_us(d, attrs(9, change=7, ftype=c.NF4DIR), 3.0, asked)
    t.refresh(d, attrs(9, change=6, ftype=c.NF4DIR), now=3.1, asked=getattr_asked)
    assert d.attrs.change == 7 and not t.fresh(d, 3.1)
    t.refresh(d, attrs(9, change=6, ftype=c.NF4DIR), now=3.2, asked=during)
    assert d.attrs.change == 7 and not t.fresh(d, 3.2)

    a, b = t.changing(d), t.changing(d)  # two creates on their way together
    first, second = a.__enter__(), b.__enter__()
    assert not t.changed_by_us(d, attrs(9, change=8, ftype=c.NF4DIR), 4.0, first)  # the second on its way
    a.__exit__(None, None, None)
    # the first was answered since the second was sent: the server may have done it after the second
    assert not t.changed_by_us(d, attrs(9, change=9, ftype=c.NF4DIR), 4.1, second)
    b.__exit__(None, None, None)
    assert d.attrs.change == 7 and not t.fresh(d, 4.1)

    with pytest.raises(OSError), t.changing(d):  # a change that failed: answers asked after it are taken
        raise OSError
    t.refresh(d, attrs(9, change=9, ftype=c.NF4DIR), now=5.0, asked=t.asking(d))
    assert d.attrs.change == 9 and t.fresh(d, 5.0)


def attrs(fileid: int, change: int = 1, ftype: int = c.NF4REG) -> FileAttrs:
    return FileAttrs(type=ftype, fileid=fileid, change=change)


def test_inode_table_counts_lookups_and_forgets() -> None:
    t = InodeTable(b"root", attrs(500, ftype=c.NF4DIR), AttrTimeouts(3, 60, 30, 60), now=0.0)
    assert t.ino_for(attrs(500)) == ROOT_INODE
    assert t.ino_for(attrs(1)) == REMAPPED | 1  # a file whose fileid is the root's inode number
    node, changed = t.learn(b"fh-a", attrs(77), now=1.0, asked=t.asking())
    assert (node.ino, node.lookups, changed) == (77, 1, False)
    node, changed = t.learn(b"fh-a2", attrs(77, change=2), now=2.0, asked=t.asking())
    assert (node.lookups, node.fh, changed, node.timeo) == (2, b"fh-a2", True, 3)
    assert t.fresh(node, 4.9) and not t.fresh(node, 5.0)
    node.opens = 1
    t.forget(77, 2)
    assert t.get(77) is node  # still open: kept
    node.opens = 0
    t.drop_if_unused(node)
    assert t.get(77) is None
    t.forget(ROOT_INODE, 5)
    assert t.get(ROOT_INODE) is t.root


def test_a_listed_file_is_a_record_until_touched_and_its_lookups_are_counted() -> None:
    """A listing's entries are kept as records (no Inode) with the kernel's lookups counted; the
    first touch makes the Inode with every lookup the listings counted; FORGET of a record drops
    it when its count reaches zero; an entry that differs from its record is left to ``learn``."""
    t = InodeTable(b"root", attrs(500, ftype=c.NF4DIR), AttrTimeouts(3, 60, 30, 60), now=0.0)
    assert t.listed(b"fh-a", record_of(attrs(77)), 1.0, ROOT_INODE, "a") == 77
    assert t.listed(b"fh-a", record_of(attrs(77)), 2.0, ROOT_INODE, "a") == 77  # listed again
    assert len(t) == 1  # (the root only: no Inode made)
    assert t.listed(b"fh-a", record_of(attrs(77, change=2)), 3.0, ROOT_INODE, "a") == 0  # changed: learn it
    assert t.listed(b"fh-a", record_of(attrs(77)), 3.0, ROOT_INODE, "b") == 0  # another name (a link)
    assert t.listed(b"fh-r", record_of(attrs(500)), 3.0, ROOT_INODE, "r") == 0  # the root's fileid
    node = t.by_name(ROOT_INODE, "a")
    assert node is not None and t.get(77) is node
    assert (node.fh, node.lookups, node.fetched, node.timeo, node.names) == (b"fh-a", 2, 2.0, 3, ((ROOT_INODE, "a"),))
    assert t.listed(b"fh-a", record_of(attrs(77)), 4.0, ROOT_INODE, "a") == 0  # an Inode now: learn it
    t.forget(77, 2)
    assert t.get(77) is None and t.by_name(ROOT_INODE, "a") is None

    assert t.listed(b"fh-d", record_of(attrs(88, ftype=c.NF4DIR)), 1.0, ROOT_INODE, "d") == 88
    assert t.listed(b"fh-d", record_of(attrs(88, ftype=c.NF4DIR)), 1.0, ROOT_INODE, "d") == 88
    t.forget(88, 1)  # (the second entry did not fit the kernel's buffer)
    assert len(t) == 1
    t.forget(88, 1)
    assert t.get(88) is None and t.by_name(ROOT_INODE, "d") is None and len(t) == 1
    assert t.listed(b"fh-e", record_of(attrs(99)), 1.0, ROOT_INODE, "e") == 99
    node, changed = t.learn(b"fh-e2", attrs(99, change=5), now=2.0, asked=t.asking())  # fileid reused
    assert (node.lookups, node.generation, node.fh, changed) == (2, 1, b"fh-e2", True)
    assert 99 in t.retime(AttrTimeouts(3, 60, 30, 60))


class _Writer:
    def __init__(self) -> None:
        self.unsent = False


class _Open:
    def __init__(self) -> None:
        self.writer = _Writer()


def test_attributes_asked_before_a_write_are_not_kept_as_current() -> None:
    """A GETATTR answered while a write of ours was gathered, on its way, or handed over after it was
    sent may show the file before that write: not taken, and asked again next time (its size, handed
    to the kernel, would cut the kernel's idea of the file short)."""
    t = InodeTable(b"root", attrs(500, ftype=c.NF4DIR), AttrTimeouts(3, 60, 30, 60), now=0.0)
    node, _ = t.learn(b"fh", attrs(7), now=1.0, asked=t.asking())
    assert t.fresh(node, 1.5)
    opened = _Open()
    node.shared[b"owner"] = opened

    asked = t.asking(node)  # GETATTR sent ...
    t.wrote(node)  # ... a write handed over before its reply
    t.refresh(node, attrs(7, change=2), now=2.0, asked=asked)
    assert node.attrs.change == 1 and not t.fresh(node, 2.0)

    opened.writer.unsent = True  # a WRITE on its way when the GETATTR is sent ...
    asked = t.asking(node)
    opened.writer.unsent = False
    t.wrote(node)  # ... answered before the GETATTR's reply
    t.refresh(node, attrs(7, change=3), now=3.0, asked=asked)
    assert not t.fresh(node, 3.0)

    opened.writer.unsent = True  # still on its way when the reply comes
    t.refresh(node, attrs(7, change=3), now=3.0, asked=t.asking())
    assert not t.fresh(node, 3.0)
    opened.writer.unsent = False

    asked = t.asking(node)  # nothing written meanwhile: current
    t.refresh(node, attrs(7, change=4), now=4.0, asked=asked)
    assert t.fresh(node, 4.0)
    t.wrote(node)
    t.refresh(node, attrs(7, change=5), now=5.0, asked=OWN)  # came back with our own last WRITE
    assert t.fresh(node, 5.0)
    other, _ = t.learn(b"fh2", attrs(8), now=5.0, asked=asked)  # a file new to us: no write of ours
    assert t.fresh(other, 5.0)


def test_the_size_told_is_never_below_what_was_written_through_us() -> None:
    """The kernel's size of a file it writes through us comes from its own writes; attributes the
    server gave before our data reached it (a listing's, sent ahead) must not shrink it, or a read
    right after the close finds the end of the file early."""
    t = InodeTable(b"root", attrs(500, ftype=c.NF4DIR), AttrTimeouts(3, 60, 30, 60), now=0.0)
    node, _ = t.learn(b"fh", FileAttrs(type=c.NF4REG, fileid=7, change=1, size=0), now=1.0, asked=t.asking())
    listing_asked = t.asking()  # a READDIR goes out ...
    t.wrote(node, end=1 << 20)  # ... the kernel writes 1 MiB through us ...
    assert t.size(node) == 1 << 20
    t.wrote(node)  # ... its WRITE is answered, and the close's attributes come back with it
    t.refresh(node, FileAttrs(type=c.NF4REG, fileid=7, change=3, size=1 << 20), now=2.0, asked=OWN)
    assert node.size_floor == 0 and t.size(node) == 1 << 20
    # then the READDIR's reply, from before the data: not taken
    t.refresh(node, FileAttrs(type=c.NF4REG, fileid=7, change=2, size=0), now=2.1, asked=listing_asked)
    assert t.size(node) == 1 << 20 and node.attrs.change == 3 and t.ttl(node, 2.1) == 0
    # a truncate of ours, once answered, is the size again
    asked = t.asking(node)
    t.refresh(node, FileAttrs(type=c.NF4REG, fileid=7, change=4, size=10), now=3.0, asked=asked)
    assert t.size(node) == 10 and t.ttl(node, 3.0) == 3


def test_the_nfs5_options_of_fstab_lines_are_taken() -> None:
    o = parse_options("vers=4,nolock,bg,nocto,retry=3,noresvport,_netdev")
    assert o.versions == ("4.2", "4.1")  # nfs(5): the highest both speak
    assert o.local_locks == {"posix", "flock"}  # nolock: every lock local to the mount
    assert (o.bg, o.retry_seconds) == (True, 180.0)
    assert o.notes == ["nocto: every open asks the server (an OPEN, whose reply carries the change attribute), "
                       "as with cto"]
    assert parse_options("vers=4.1").versions == ("4.1",) and parse_options("nfsvers=4").versions == ("4.2", "4.1")
    assert parse_options("local_lock=flock").local_locks == {"flock"}
    assert parse_options("nolock,local_lock=posix").local_locks == {"posix"}
    assert parse_options("").local_locks == set() and not parse_options("noresvport,cto,fg").notes
    # nfs(5): 10000 minutes in the background; in the foreground one try unless retry= is given
    assert parse_options("bg").retry_seconds == 600000 and parse_options("").retry_seconds == 0
    with pytest.raises(OptionError, match="local_lock=some: use one of none, flock, posix, all"):
        parse_options("local_lock=some")
    with pytest.raises(OptionError, match=r"vers=4.0: NFS versions 4 \(the highest both speak\), 4.1 and 4.2"):
        parse_options("vers=4.0")


def test_a_remount_changes_read_only_and_the_attribute_cache_and_nothing_else() -> None:
    now = parse_options("port=2050,soft,actimeo=10")
    kernel = now.fuse_options("h:/e", mounter_uid=0)
    # what mount(8) hands the helper: the generic flags, remount, and the kernel's own options
    new = parse_remount(now, kernel, "ro,nosuid,nodev,relatime,remount,user_id=0,group_id=0,default_permissions,"
                        "allow_other,acregmax=20,port=2050,soft,vers=4.1")
    assert (new.ro, new.acregmin, new.acregmax, new.acdirmin, new.acdirmax) == (True, 10, 20, 10, 10)
    assert (now.ro, now.acregmax) == (False, 10)  # (the options in force are not touched)
    assert parse_remount(new, kernel, "remount,rw").ro is False
    off = parse_remount(now, kernel, "remount,noac")
    assert off.noac and off.acregmax == 0
    assert parse_remount(off, kernel, "remount,ac").acregmax == 60  # nfs(5)'s timeouts again
    with pytest.raises(OptionError, match=r"a remount cannot change the options port, hard \(unmount and mount"):
        parse_remount(now, kernel, "remount,port=2049,hard")
    with pytest.raises(OptionError, match="cannot change the option default_permissions"):
        parse_remount(parse_options("nodefault_permissions"), {"allow_other"}, "remount,default_permissions")


def test_pnfs_and_nopnfs() -> None:
    assert parse_options("").pnfs is False
    assert parse_options("pnfs").pnfs is True
    assert parse_options("pnfs,nopnfs").pnfs is False  # the last one given wins, as nfs(5)'s flags
    with pytest.raises(OptionError, match="pnfs"):
        parse_options("pnfs=1")
