"""Notifications: messages to the kernel that answer no request (``fuse_out_header.unique`` 0, the
notification code in ``error``), each as bytes to write to /dev/fuse.

The kernel acts on them at once and may wait for requests of this file system to finish first (it
takes the inode's or the directory's lock): whoever writes them must not be the one answering those.
Writing one for an inode or a name the kernel does not hold fails with ENOENT, which means there was
nothing to drop.
"""

from __future__ import annotations

from . import abi

FUSE_NAME_MAX = 1024  # the longest name the kernel takes in a notification


def _message(code: int, body: bytes) -> bytes:
    return abi.OUT_HEADER.pack(abi.OUT_HEADER.size + len(body), code, 0) + body


def _check(name: bytes) -> None:
    if not name or len(name) > FUSE_NAME_MAX or b"\0" in name:
        raise ValueError(f"not a name to notify: {name!r}")


def inval_inode(ino: int, attr_only: bool = False) -> bytes:
    """Drop the kernel's cached attributes of ``ino`` and, unless ``attr_only``, its cached data."""
    offset = -1 if attr_only else 0
    return _message(abi.FUSE_NOTIFY_INVAL_INODE, abi.NOTIFY_INVAL_INODE_OUT.pack(ino, offset, 0))


def inval_entry(parent: int, name: bytes, expire_only: bool = False) -> bytes:
    """Drop the kernel's entry ``name`` in ``parent`` (``expire_only``: only let it time out now,
    which needs FUSE_HAS_EXPIRE_ONLY)."""
    _check(name)
    flags = abi.FUSE_EXPIRE_ONLY if expire_only else 0
    return _message(
        abi.FUSE_NOTIFY_INVAL_ENTRY, abi.NOTIFY_INVAL_ENTRY_OUT.pack(parent, len(name), flags) + name + b"\0"
    )


def delete(parent: int, child: int, name: bytes) -> bytes:
    """``name`` in ``parent``, which was ``child``, is gone: the kernel drops the entry (and tells
    inotify watchers) if it still points to ``child``."""
    _check(name)
    return _message(abi.FUSE_NOTIFY_DELETE, abi.NOTIFY_DELETE_OUT.pack(parent, child, len(name), 0) + name + b"\0")
