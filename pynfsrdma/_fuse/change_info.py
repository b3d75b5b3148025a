"""What our own operation's ``change_info4`` (CREATE, OPEN with create, REMOVE, RENAME, LINK) means
for the directory it changed: its cached attributes, its names and the listing we keep of it."""

from __future__ import annotations

import trio

from .._client.attributes import FileAttrs
from .._proto.nfs4.types import change_info4
from .cache import Listing, NameCache, NameReadAhead
from .inodes import Inode, InodeTable
from .options import MountOptions


class DirectoryChanges:
    """The directories of ``inodes`` changed by our operations, with their names in ``names`` and
    the entries read ahead of their LOOKUPs in ``names_ahead`` (by directory)."""

    def __init__(
        self, inodes: InodeTable, names: NameCache, opts: MountOptions, names_ahead: dict[int, NameReadAhead]
    ) -> None:
        self.inodes = inodes
        self.names = names
        self.opts = opts
        self.names_ahead = names_ahead

    def modified(
        self, parent: Inode, name: str, cinfo: change_info4 | None, present: bool, node: Inode | None = None
    ) -> Inode | None:
        """Our operation added (``present``: now leading to ``node`` if given) or removed ``name`` in
        ``parent``, and the server says how the directory's change attribute moved (``cinfo``): its
        attributes and the name's cache entry are stale, its listing follows, or ends (cache.Listing).
        The file the name led to before has one link less and a new ctime: its attributes are stale
        too. Returns that file, if we know it. (:meth:`after` may then take the directory's
        attributes the operation brought back.)"""
        parent.stale()
        self.names.drop(parent.ino, name)
        self.names_ahead.pop(parent.ino, None)
        listing = parent.listing
        if listing is not None and (
            cinfo is None or not listing.changed(cinfo.before, cinfo.after, name, present, trio.current_time())
        ):
            parent.listing = None
        before = self.inodes.unnamed(parent.ino, name)
        if before is not None and before is not node:
            before.stale()
        if node is not None:
            self.inodes.named(node, parent.ino, name)
        return before

    def after(self, parent: Inode, cinfo: change_info4 | None, attrs: FileAttrs | None, asked: int) -> None:
        """After :meth:`modified`: ``attrs``, the directory's attributes from a GETATTR in our
        operation's own COMPOUND (``asked``: from ``InodeTable.changing``), are taken when they show
        the change attribute the server's change_info4 gives as "after" (nothing changed the
        directory between our operation and that GETATTR). The kernel's next look at the directory
        (with default_permissions: its permission check before the next create there) is then
        answered without a GETATTR; otherwise the next look asks the server. (Whether the server
        calls the change_info4 atomic does not matter here: the GETATTR ran after our operation,
        and its answer is the directory as the server has it. NFS-Ganesha calls none atomic.)"""
        if attrs is not None and cinfo is not None and attrs.change == cinfo.after:
            self.inodes.changed_by_us(parent, attrs, trio.current_time(), asked)

    def listed(self, node: Inode) -> None:
        """``node`` is a directory we just made: we know all its names (none)."""
        if self.opts.negative_names and node.is_dir:
            node.listing = Listing(node.attrs.change, float("-inf"), set())
