"""fcntl(2) and flock(2) locks of the mount as NFSv4 byte-range locks (RFC 8881 section 9), as the
Linux client maps them: a POSIX lock's owner is the kernel's lock owner; an flock lock is a lock of
the whole file with an owner of its own per open file (nfs(5)).

A lock is where clients meet (sqlite, mailboxes): what was written under a lock reaches the server
before the lock goes, and what is read under a lock is what the server holds when it was taken."""

from __future__ import annotations

import trio

from .._client.locks import TO_EOF, nfs_lock_type, nfs_range
from .._client.nfs4 import NFSv4
from .lowlevel import F_UNLCK, FileLock
from .opens import FileHandle, Invalidate, Opens

# lock owners: (POSIX_LOCK, the kernel's lock_owner) for fcntl locks, (FLOCK_LOCK, file handle) for flock
POSIX_LOCK = "posix"
FLOCK_LOCK = "flock"
INVALIDATE_WAIT = 0.2  # seconds a new lock waits for the kernel to drop the file's cached pages


class PosixLocks:
    """The lock requests of a mount's open files (``opens``)."""

    def __init__(self, nfs: NFSv4, opens: Opens, invalidate: Invalidate) -> None:
        self.nfs = nfs
        self.opens = opens
        self.invalidate = invalidate

    async def getlk(self, h: FileHandle, lock_owner: int, lock: FileLock) -> FileLock:
        """LOCKT: the lock in the way of ``lock``, from any client (its holder's pid is 0: it may be
        on another host), or F_UNLCK."""
        offset, length = nfs_range(lock.start, lock.end)
        conflict = await self.nfs.byte_range_locks.lockt(
            h.shared.of, (POSIX_LOCK, lock_owner), nfs_lock_type(lock.type), offset, length, h.cred
        )
        if conflict is None:
            return FileLock(lock.start, lock.end, F_UNLCK, 0)
        return FileLock(conflict.start, conflict.end, conflict.posix_type, 0)

    async def setlk(self, h: FileHandle, fh: int, lock_owner: int, lock: FileLock, sleep: bool, flock: bool) -> None:
        """LOCK (EAGAIN when another holds it; ``sleep``: asked again until granted, woken early by
        CB_NOTIFY_LOCK, ended by the caller's interruption) or LOCKU. An flock(2) lock is a lock of
        the whole file with a lock owner of its own per open file (FUSE handle ``fh``)."""
        owner = (FLOCK_LOCK, fh) if flock else (POSIX_LOCK, lock_owner)
        offset, length = (0, TO_EOF) if flock else nfs_range(lock.start, lock.end)
        await self.opens.commit(h.inode)
        if lock.type == F_UNLCK:
            if self.nfs.byte_range_locks.lock_state(h.shared.of, owner) is not None:
                await self.nfs.byte_range_locks.locku(h.shared.of, owner, offset, length, h.cred)
            return
        await self.nfs.byte_range_locks.lock(h.shared.of, owner, nfs_lock_type(lock.type), offset, length, h.cred, wait=sleep)
        node = h.inode
        node.stale()
        node.drop_readahead()
        node.data_change = None  # (the kernel's cached pages are not kept by the next open either)
        with trio.move_on_after(INVALIDATE_WAIT):
            await self.invalidate(node.ino, False)

    async def unlock_all(self, h: FileHandle, owner: tuple[str, int]) -> None:
        """Every lock of ``owner`` on the file goes (after what was written under them)."""
        of = h.shared.of
        if not of.closed and self.nfs.byte_range_locks.lock_state(of, owner) is not None:
            await self.opens.commit(h.inode)
            await self.nfs.byte_range_locks.locku(of, owner, 0, TO_EOF, h.cred)

    async def unlock_posix(self, h: FileHandle, lock_owner: int) -> None:
        """close(2) of any descriptor of the file ends the process's POSIX locks on it."""
        await self.unlock_all(h, (POSIX_LOCK, lock_owner))

    async def unlock_flock(self, h: FileHandle, fh: int) -> None:
        """The last close of open file ``fh`` ends its flock lock."""
        await self.unlock_all(h, (FLOCK_LOCK, fh))
