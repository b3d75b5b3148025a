"""SETATTR on the mount (chmod, chown, truncate, utimensat): what needs no COMPOUND at all, what
waits with a file's gathered data and goes after it, what goes with that data in one COMPOUND, and
what goes on its own (after the file's gathered writes, which would otherwise undo its times or size).
"""

from __future__ import annotations

import errno
import logging
import stat
from collections.abc import Callable
from typing import Any

import trio

from .._client.attributes import NOW, FileAttrs
from .._client.nfs4 import NFSv4
from .._proto.nfs4 import const as c
from .._rpc.auth import Credential
from .inodes import OWN, Inode, InodeTable
from .lowlevel import EntryAttributes, FUSEError, SetattrFields
from .opens import Opens, SharedOpen

log = logging.getLogger(__name__)

# attribute changes that may wait with a file's gathered data (setattr_fattr4 keywords; see _defer_setattr)
DEFERRABLE_SETATTR = frozenset({"mode", "atime_ns", "mtime_ns"})


def projected(node: Inode) -> bool:
    """Whether ``node.attrs`` are what the server will hold once the data gathered for it and the
    attribute changes kept after that data are sent: the times were set explicitly after the
    last write (so neither the mtime nor the size depends on the server), by the file's one open.
    ``tar``'s chown makes the kernel ask for the attributes first (to clear set-user-ID bits):
    they are answered from here, and the data waits for the close."""
    if len(node.shared) != 1:
        return False
    w = next(iter(node.shared.values())).writer
    return w is not None and "mtime_ns" in w.setattrs


def mtime_alone(fields: SetattrFields) -> bool:
    """Whether a SETATTR sets the mtime to a time given (with FATTR_CTIME or not) and nothing else:
    what the kernel sends when it writes back the times of a file it keeps in its writeback cache
    (``fuse_flush_times``). :meth:`Setattrs.kernels_modify_time` and
    :meth:`Setattrs.kernels_times_written_back` are for those alone."""
    return fields.update_mtime and not (fields.update_mtime_now or fields.update_atime or fields.update_mode
                                        or fields.update_uid or fields.update_gid or fields.update_size)


class Setattrs:
    """The SETATTRs of the files of ``inodes``, whose opens are ``opens``; ``delegated``: whether a
    file's cached attributes are current under a delegation."""

    def __init__(self, nfs: NFSv4, inodes: InodeTable, opens: Opens, delegated: Callable[[Inode], bool]) -> None:
        self.nfs = nfs
        self.inodes = inodes
        self.opens = opens
        self._delegated = delegated

    def kernels_modify_time(self, node: Inode) -> bool:
        """Whether a SETATTR of the mtime alone (:func:`mtime_alone`) is the kernel's own mtime of a
        file it keeps in its writeback cache (``fuse_flush_times``, after writes it stamped) while we
        hold a write attribute delegation on the file: that is the modify time the delegation keeps
        (RFC 9754), answered to CB_GETATTR and given back with it; nothing is sent."""
        return self.opens.writeback_cache and node.is_reg and self.nfs.keeps_times(node.fh)

    def kernels_times_written_back(self, node: Inode, attr: EntryAttributes) -> bool:
        """Whether a SETATTR of the mtime alone (:func:`mtime_alone`) is the kernel writing back times
        of a file it keeps in its writeback cache that it did not stamp itself: nothing is sent, and
        the server's mtime stays the file's.
        The kernel writes an inode's mtime and ctime back (``fuse_write_inode`` ->
        ``fuse_flush_times``: FATTR_MTIME|FATTR_CTIME, no FATTR_MTIME_NOW) whenever the inode is
        dirty, also when only its ctime moved (``fuse_update_ctime`` after a rename, link or unlink),
        and with the mtime it holds: one we gave it, which may be older than the server's now
        (another client's write, or our own that went around the page cache). Sent, it would take
        the server's mtime back, and every other client would see the file change. As the Linux
        client, which sets no mtime on the server but the one a caller asks for, it is not sent
        when the mtime is one we gave the kernel, also when data of the file waits here (written
        around the page cache, which the kernel stamps no time for); a time a caller chose, or the
        kernel stamped at a write(2), is sent."""
        if not self.opens.writeback_cache or not node.is_reg or not node.may_hold(attr.st_mtime_ns):
            return False
        log.debug("times of inode %d written back by the kernel: the server's kept", node.ino)
        return True

    async def setattr(
        self, node: Inode, attr: EntryAttributes, fields: SetattrFields, fh: int | None, cred: Credential
    ) -> bool:
        """Make the changes ``fields`` asks for, with the values of ``attr`` (``fh``: the open file
        the kernel names, if any); False when it asks for none (the caller answers as a GETATTR)."""
        kw: dict[str, Any] = {}
        if fields.update_mode:
            kw["mode"] = attr.st_mode & 0o7777
        if fields.update_uid:
            kw["uid"] = attr.st_uid
        if fields.update_gid:
            kw["gid"] = attr.st_gid
        if fields.update_atime:
            kw["atime_ns"] = NOW if fields.update_atime_now else attr.st_atime_ns
        if fields.update_mtime:
            kw["mtime_ns"] = NOW if fields.update_mtime_now or self._kernels_clock(node, cred) else attr.st_mtime_ns
        if kw and not fields.update_size:
            if self._setattr_changes_nothing(node, kw, cred) or self._defer_setattr(node, kw, cred):
                return True
            if self._kills_setid_for_a_write(node, kw, cred):
                return True
            attrs = await self._write_and_setattr(node, cred, kw)
            if attrs is not None:
                return True
        stateid = None
        await self.opens.sync(node)  # gathered writes go first: a later WRITE would undo times or size
        # truncate(2) by name: no open checked the right to write, and a server lets a file's owner
        # change its size whatever the mode (NFS servers' owner override); ACCESS asks, as the
        # Linux client's permission check does
        if (
            fields.update_size
            and fh is None
            and not await self.nfs.names.access(node.fh, c.ACCESS4_MODIFY, cred) & c.ACCESS4_MODIFY
        ):
            raise FUSEError(errno.EACCES)
        if fields.update_size:
            kw["size"] = attr.st_size
            h = self.opens.files.get(fh) if fh is not None else None
            shared = (
                h.shared
                if h is not None
                else next((s for s in node.shared.values() if s.of.access & c.OPEN4_SHARE_ACCESS_WRITE), None)
            )
            if shared is not None:
                stateid = shared.of.stateid
        if not kw:
            return False
        log.debug("setattr ino=%d fh=%s %s", node.ino, fh, kw)
        asked = self.inodes.asking(node)
        attrs = await self.nfs.names.setattr(node.fh, cred, stateid=stateid, **kw)
        self._attrs_after_setattr(node, attrs, asked)
        if fields.update_size:
            node.data_change = attrs.change  # the kernel truncated its page cache itself
            node.drop_readahead()
        return True

    def _attrs_after_setattr(self, node: Inode, attrs: FileAttrs, asked: int | None) -> None:
        now = trio.current_time()
        self.inodes.refresh(node, attrs, now, asked=asked)
        if node.fetched != now:
            return  # (a write of ours may have come after them)
        for s in node.shared.values():  # newer than what the last WRITE brought back
            w = s.writer
            if w is not None and w.post_attrs is not None and not w.unsent:
                w.post_attrs = (attrs, now)

    def _setattr_changes_nothing(self, node: Inode, kw: dict[str, Any], cred: Credential) -> bool:
        """A chmod/chown to what the file has already (``tar`` as root does both after every file):
        nothing to send, when our attributes are fresh and the caller owns the file (so the server
        could not refuse it: an owner may always chmod, and chown to the owner and group the file has).
        Not with set-user/group-ID bits (the kernel may clear them on the way), nor times (those
        set "now", or ctime moves)."""
        a = node.attrs
        if not kw.keys() <= {"mode", "uid", "gid"} or cred.uid != a.uid:
            return False
        if "mode" in kw and (kw["mode"] != a.mode or kw["mode"] & (stat.S_ISUID | stat.S_ISGID)):
            return False
        if kw.get("uid", a.uid) != a.uid or kw.get("gid", a.gid) != a.gid:
            return False
        return self.inodes.fresh(node, trio.current_time()) or self._delegated(node)

    def _kernels_clock(self, node: Inode, cred: Credential) -> bool:
        """Whether an mtime the kernel sends is its own "now" (its clock's, when writes gathered in
        its page cache, or a ``touch``, moved it), to go as the server's "now": with the writeback
        cache the kernel keeps a file's mtime itself and sends it as a time, which the server lets
        only the file's owner set (utimensat(2)'s rule), while anyone who may write may set "now".
        So for everyone else; an explicit time from someone else is refused by the kernel before it
        comes here where it checks permissions (``default_permissions``)."""
        return self.opens.writeback_cache and node.is_reg and cred.uid not in (0, node.attrs.uid)

    def _kills_setid_for_a_write(self, node: Inode, kw: dict[str, Any], cred: Credential) -> bool:
        """The kernel clears the set-user/group-ID bits before a write by someone other than the
        owner (with no FUSE killpriv support it sends a chmod, as the writer): the server refuses
        that chmod to a non-owner, and clears the bits itself when the WRITE comes. Nothing is sent;
        the attributes are asked again at the next look."""
        a = node.attrs
        setid = a.mode & (stat.S_ISUID | stat.S_ISGID)
        if kw.keys() != {"mode"} or not setid or cred.uid in (0, a.uid):
            return False
        if kw["mode"] != a.mode & ~setid & 0o7777:
            return False
        node.attrs = a.replaced(mode=kw["mode"])
        node.stale()
        return True

    def _defer_setattr(self, node: Inode, kw: dict[str, Any], cred: Credential) -> bool:
        """Times and mode set by the file's owner while the file's one open holds data not yet sent
        (``tar``: write, utimensat, fchown, fchmod, close) wait with the data and go after it in its
        COMPOUND (:meth:`FileWriter.defer_setattr`); the kernel is answered with the attributes as
        they will be. The owner may always set them, so the server has no reason to refuse (a refusal
        is reported by close or fsync, as a failed WRITE is). Not with set-user/group-ID bits (the
        server may clear them)."""
        a = node.attrs
        if not kw.keys() <= DEFERRABLE_SETATTR or cred.uid != a.uid or len(node.shared) != 1:
            return False
        if NOW in kw.values():
            return False  # (the server's "now" is when the SETATTR reaches it)
        if kw.get("mode", 0) & (stat.S_ISUID | stat.S_ISGID):
            return False
        shared: SharedOpen = next(iter(node.shared.values()))
        w, sc = shared.writer, shared.cred
        if (
            w is None
            or (sc.uid, sc.gid, sc.gids) != (cred.uid, cred.gid, cred.gids)
            or not w.defer_setattr(kw)
        ):
            return False
        node.attrs = a.replaced(size=max(a.size, w.gathered_end), **kw)
        if projected(node):
            node.fetched = trio.current_time()  # (see getattr)
        return True

    async def _write_and_setattr(self, node: Inode, cred: Credential, kw: dict[str, Any]) -> FileAttrs | None:
        """Gathered data that fits in one WRITE goes FILE_SYNC in the SETATTR's own COMPOUND (PUTFH,
        WRITE, SETATTR, GETATTR): ``tar``'s write then utimensat take one round trip, and the close
        has nothing left to send. None when there is no such data, or when the WRITE did not go in
        full (the data is gathered again and the usual way sends it, then the SETATTR)."""
        busy = [s for s in node.shared.values() if s.writer is not None and s.writer.unsent]
        if len(busy) != 1:
            return None
        shared = busy[0]
        w = shared.writer
        sc = shared.cred
        if w is None or (sc.uid, sc.gid, sc.gids) != (cred.uid, cred.gid, cred.gids):
            return None
        attrs = await w.write_with_setattr(kw)
        if attrs is None:
            return None
        self._attrs_after_setattr(node, attrs, OWN)
        return attrs
