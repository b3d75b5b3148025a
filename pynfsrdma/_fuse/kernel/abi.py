"""The FUSE kernel ABI (``include/uapi/linux/fuse.h``): protocol versions, opcodes, flags and the
byte layout of every structure this client reads or writes. The only place FUSE numbers are written.

Names are the header's. Structures are :class:`struct.Struct` in the host's byte order with no
implicit padding (the header pads every structure to 8 bytes itself); the comment above each names
its fields in order.
"""

from __future__ import annotations

import struct

# -- versions -------------------------------------------------------------------------------------------
FUSE_KERNEL_VERSION = 7
FUSE_KERNEL_MINOR_VERSION = 45  # the newest minor this client speaks
FUSE_OLDEST_MINOR_VERSION = 31  # the oldest it accepts
FUSE_ROOT_ID = 1
FUSE_MIN_READ_BUFFER = 8192

# minors where a structure this client uses changed
MINOR_INIT_EXT = 36  # fuse_init_in grew flags2 and reserved words (64 bytes)
MINOR_EXTLEN = 38  # fuse_in_header.total_extlen (request extensions after the arguments)
MINOR_COPY_FILE_RANGE_64 = 45

# -- opcodes (enum fuse_opcode; what each is: requests.OPCODES) ---------------------------------------
FUSE_LOOKUP = 1
FUSE_FORGET = 2
FUSE_GETATTR = 3
FUSE_SETATTR = 4
FUSE_READLINK = 5
FUSE_SYMLINK = 6
FUSE_MKNOD = 8
FUSE_MKDIR = 9
FUSE_UNLINK = 10
FUSE_RMDIR = 11
FUSE_RENAME = 12
FUSE_LINK = 13
FUSE_OPEN = 14
FUSE_READ = 15
FUSE_WRITE = 16
FUSE_STATFS = 17
FUSE_RELEASE = 18
FUSE_FSYNC = 20
FUSE_SETXATTR = 21
FUSE_GETXATTR = 22
FUSE_LISTXATTR = 23
FUSE_REMOVEXATTR = 24
FUSE_FLUSH = 25
FUSE_INIT = 26
FUSE_OPENDIR = 27
FUSE_READDIR = 28
FUSE_RELEASEDIR = 29
FUSE_FSYNCDIR = 30
FUSE_GETLK = 31
FUSE_SETLK = 32
FUSE_SETLKW = 33
FUSE_ACCESS = 34
FUSE_CREATE = 35
FUSE_INTERRUPT = 36
FUSE_BMAP = 37
FUSE_DESTROY = 38
FUSE_IOCTL = 39
FUSE_POLL = 40
FUSE_NOTIFY_REPLY = 41
FUSE_BATCH_FORGET = 42
FUSE_FALLOCATE = 43
FUSE_READDIRPLUS = 44
FUSE_RENAME2 = 45
FUSE_LSEEK = 46
FUSE_COPY_FILE_RANGE = 47
FUSE_SETUPMAPPING = 48
FUSE_REMOVEMAPPING = 49
FUSE_SYNCFS = 50
FUSE_TMPFILE = 51
FUSE_STATX = 52
FUSE_COPY_FILE_RANGE_64 = 53

# -- notifications (enum fuse_notify_code): fuse_out_header.error of a message with unique 0 -------------
FUSE_NOTIFY_POLL = 1
FUSE_NOTIFY_INVAL_INODE = 2
FUSE_NOTIFY_INVAL_ENTRY = 3
FUSE_NOTIFY_STORE = 4
FUSE_NOTIFY_RETRIEVE = 5
FUSE_NOTIFY_DELETE = 6

# fuse_in_header.unique of an INTERRUPT (and of its reply): the interrupted request's unique with this bit
FUSE_INT_REQ_BIT = 1 << 0

# -- INIT flags (fuse_init_in/out.flags; bits 32..63 travel in flags2 with FUSE_INIT_EXT) ----------------
FUSE_ASYNC_READ = 1 << 0
FUSE_POSIX_LOCKS = 1 << 1
FUSE_FILE_OPS = 1 << 2
FUSE_ATOMIC_O_TRUNC = 1 << 3
FUSE_EXPORT_SUPPORT = 1 << 4
FUSE_BIG_WRITES = 1 << 5
FUSE_DONT_MASK = 1 << 6
FUSE_SPLICE_WRITE = 1 << 7
FUSE_SPLICE_MOVE = 1 << 8
FUSE_SPLICE_READ = 1 << 9
FUSE_FLOCK_LOCKS = 1 << 10
FUSE_HAS_IOCTL_DIR = 1 << 11
FUSE_AUTO_INVAL_DATA = 1 << 12
FUSE_DO_READDIRPLUS = 1 << 13
FUSE_READDIRPLUS_AUTO = 1 << 14
FUSE_ASYNC_DIO = 1 << 15
FUSE_WRITEBACK_CACHE = 1 << 16
FUSE_NO_OPEN_SUPPORT = 1 << 17
FUSE_PARALLEL_DIROPS = 1 << 18
FUSE_HANDLE_KILLPRIV = 1 << 19
FUSE_POSIX_ACL = 1 << 20
FUSE_ABORT_ERROR = 1 << 21
FUSE_MAX_PAGES = 1 << 22
FUSE_CACHE_SYMLINKS = 1 << 23
FUSE_NO_OPENDIR_SUPPORT = 1 << 24
FUSE_EXPLICIT_INVAL_DATA = 1 << 25
FUSE_MAP_ALIGNMENT = 1 << 26
FUSE_SUBMOUNTS = 1 << 27
FUSE_HANDLE_KILLPRIV_V2 = 1 << 28
FUSE_SETXATTR_EXT = 1 << 29
FUSE_INIT_EXT = 1 << 30
FUSE_INIT_RESERVED = 1 << 31
FUSE_SECURITY_CTX = 1 << 32
FUSE_HAS_INODE_DAX = 1 << 33
FUSE_CREATE_SUPP_GROUP = 1 << 34
FUSE_HAS_EXPIRE_ONLY = 1 << 35
FUSE_DIRECT_IO_ALLOW_MMAP = 1 << 36
FUSE_PASSTHROUGH = 1 << 37
FUSE_NO_EXPORT_SUPPORT = 1 << 38
FUSE_HAS_RESEND = 1 << 39
FUSE_ALLOW_IDMAP = 1 << 40
FUSE_OVER_IO_URING = 1 << 41
FUSE_REQUEST_TIMEOUT = 1 << 42

# -- fuse_setattr_in.valid ------------------------------------------------------------------------------
FATTR_MODE = 1 << 0
FATTR_UID = 1 << 1
FATTR_GID = 1 << 2
FATTR_SIZE = 1 << 3
FATTR_ATIME = 1 << 4
FATTR_MTIME = 1 << 5
FATTR_FH = 1 << 6
FATTR_ATIME_NOW = 1 << 7
FATTR_MTIME_NOW = 1 << 8
FATTR_LOCKOWNER = 1 << 9
FATTR_CTIME = 1 << 10
FATTR_KILL_SUIDGID = 1 << 11

# -- fuse_open_out.open_flags ---------------------------------------------------------------------------
FOPEN_DIRECT_IO = 1 << 0
FOPEN_KEEP_CACHE = 1 << 1
FOPEN_NONSEEKABLE = 1 << 2
FOPEN_CACHE_DIR = 1 << 3
FOPEN_STREAM = 1 << 4
FOPEN_NOFLUSH = 1 << 5
FOPEN_PARALLEL_DIRECT_WRITES = 1 << 6

# -- request flags ----------------------------------------------------------------------------------------
FUSE_RELEASE_FLUSH = 1 << 0  # fuse_release_in.release_flags
FUSE_RELEASE_FLOCK_UNLOCK = 1 << 1
FUSE_GETATTR_FH = 1 << 0  # fuse_getattr_in.getattr_flags
FUSE_LK_FLOCK = 1 << 0  # fuse_lk_in.lk_flags
FUSE_WRITE_CACHE = 1 << 0  # fuse_write_in.write_flags
FUSE_WRITE_LOCKOWNER = 1 << 1
FUSE_WRITE_KILL_SUIDGID = 1 << 2
FUSE_READ_LOCKOWNER = 1 << 1  # fuse_read_in.read_flags
FUSE_FSYNC_FDATASYNC = 1 << 0  # fuse_fsync_in.fsync_flags
FUSE_OPEN_KILL_SUIDGID = 1 << 0  # fuse_open_in/fuse_create_in.open_flags
FUSE_EXPIRE_ONLY = 1 << 0  # fuse_notify_inval_entry_out.flags

# -- structures ---------------------------------------------------------------------------------------
# fuse_in_header: len, opcode, unique, nodeid, uid, gid, pid, total_extlen (u16, in 8-byte units), padding
IN_HEADER = struct.Struct("=IIQQIIIHH")
# fuse_out_header: len, error (negative errno), unique
OUT_HEADER = struct.Struct("=IiQ")
# fuse_attr: ino, size, blocks, atime, mtime, ctime, atimensec, mtimensec, ctimensec, mode, nlink, uid,
# gid, rdev, blksize, flags (times as signed: the kernel reads them into a time64_t)
ATTR = struct.Struct("=QQQqqqIIIIIIIIII")
# fuse_entry_out: nodeid, generation, entry_valid, attr_valid, entry_valid_nsec, attr_valid_nsec, attr
ENTRY_OUT = struct.Struct("=QQQQII" + ATTR.format[1:])
# fuse_attr_out: attr_valid, attr_valid_nsec, dummy, attr
ATTR_OUT = struct.Struct("=QII" + ATTR.format[1:])
# fuse_open_out: fh, open_flags, backing_id (padding before 7.40)
OPEN_OUT = struct.Struct("=QIi")
# fuse_write_out: size, padding
WRITE_OUT = struct.Struct("=II")
WRITE_OUT_MAX = 0xFFFFFFFF  # the most a fuse_write_out can say (COPY_FILE_RANGE before 7.45)
# fuse_copy_file_range_out: bytes_copied
COPY_FILE_RANGE_OUT = struct.Struct("=Q")
# fuse_statfs_out (fuse_kstatfs): blocks, bfree, bavail, files, ffree, bsize, namelen, frsize, padding, spare[6]
STATFS_OUT = struct.Struct("=QQQQQIIII24x")
# fuse_getxattr_out: size, padding
GETXATTR_OUT = struct.Struct("=II")
# fuse_lk_out (fuse_file_lock): start, end, type, pid
LK_OUT = struct.Struct("=QQII")
# fuse_lseek_out: offset
LSEEK_OUT = struct.Struct("=Q")
# fuse_dirent: ino, off, namelen, type, then the name, padded to 8 bytes
DIRENT = struct.Struct("=QQII")
# fuse_direntplus: fuse_entry_out, then fuse_dirent
DIRENTPLUS = struct.Struct(ENTRY_OUT.format + DIRENT.format[1:])
DIRENT_ALIGN = 8
DT_SHIFT = 12  # fuse_dirent.type is the DT_* value: the file type bits of the mode (S_IFMT) shifted down

# fuse_init_in: major, minor, max_readahead, flags (before 7.36 that is all of it) ...
INIT_IN = struct.Struct("=IIII")
# ... then (7.36 on) flags2 and eleven unused words
INIT_IN_EXT = struct.Struct("=I44x")
# fuse_init_out: major, minor, max_readahead, flags, max_background (u16), congestion_threshold (u16),
# max_write, time_gran, max_pages (u16), map_alignment (u16), flags2, max_stack_depth,
# request_timeout (u16), unused[11] (u16)
INIT_OUT = struct.Struct("=IIIIHHIIHHIIH22x")
MAX_PAGES_FIELD = 0xFFFF  # fuse_init_out.max_pages is 16 bits wide (and so is the sysctl's range)

# request arguments
FORGET_IN = struct.Struct("=Q")  # nlookup
BATCH_FORGET_IN = struct.Struct("=II")  # count, dummy
FORGET_ONE = struct.Struct("=QQ")  # nodeid, nlookup
GETATTR_IN = struct.Struct("=IIQ")  # getattr_flags, dummy, fh
# fuse_setattr_in: valid, padding, fh, size, lock_owner, atime, mtime, ctime, atimensec, mtimensec,
# ctimensec, mode, unused4, uid, gid, unused5
SETATTR_IN = struct.Struct("=IIQQQqqqIIIIIIII")
MKNOD_IN = struct.Struct("=IIII")  # mode, rdev, umask, padding
MKDIR_IN = struct.Struct("=II")  # mode, umask
RENAME_IN = struct.Struct("=Q")  # newdir
RENAME2_IN = struct.Struct("=QII")  # newdir, flags, padding
LINK_IN = struct.Struct("=Q")  # oldnodeid
OPEN_IN = struct.Struct("=II")  # flags, open_flags
CREATE_IN = struct.Struct("=IIII")  # flags, mode, umask, open_flags
RELEASE_IN = struct.Struct("=QIIQ")  # fh, flags, release_flags, lock_owner
FLUSH_IN = struct.Struct("=QIIQ")  # fh, unused, padding, lock_owner
READ_IN = struct.Struct("=QQIIQII")  # fh, offset, size, read_flags, lock_owner, flags, padding
WRITE_IN = struct.Struct("=QQIIQII")  # fh, offset, size, write_flags, lock_owner, flags, padding
FSYNC_IN = struct.Struct("=QII")  # fh, fsync_flags, padding
SETXATTR_IN = struct.Struct("=II")  # size, flags (FUSE_COMPAT_SETXATTR_IN_SIZE)
SETXATTR_IN_EXT = struct.Struct("=IIII")  # size, flags, setxattr_flags, padding (with FUSE_SETXATTR_EXT)
GETXATTR_IN = struct.Struct("=II")  # size, padding
LK_IN = struct.Struct("=QQQQIIII")  # fh, owner, lk.start, lk.end, lk.type, lk.pid, lk_flags, padding
ACCESS_IN = struct.Struct("=II")  # mask, padding
INTERRUPT_IN = struct.Struct("=Q")  # unique
FALLOCATE_IN = struct.Struct("=QQQII")  # fh, offset, length, mode, padding
LSEEK_IN = struct.Struct("=QQII")  # fh, offset, whence, padding
COPY_FILE_RANGE_IN = struct.Struct("=QQQQQQQ")  # fh_in, off_in, nodeid_out, fh_out, off_out, len, flags

# notifications
NOTIFY_INVAL_INODE_OUT = struct.Struct("=Qqq")  # ino, off (-1: attributes only), len (0: to the end)
NOTIFY_INVAL_ENTRY_OUT = struct.Struct("=QII")  # parent, namelen, flags; then the name and a NUL
NOTIFY_DELETE_OUT = struct.Struct("=QQII")  # parent, child, namelen, padding; then the name and a NUL

# -- FUSE over io_uring (7.42 on; fs/fuse/dev_uring.c) ---------------------------------------------------
# the commands of IORING_OP_URING_CMD on /dev/fuse (enum fuse_uring_cmd)
FUSE_IO_URING_CMD_REGISTER = 1  # register an entry's buffers and fetch a request
FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2  # hand the reply in the entry over and fetch the next request
# fuse_uring_req_header: in_out (fuse_in_header / fuse_out_header), op_in (the opcode's fixed
# argument), then fuse_uring_ent_in_out
FUSE_URING_IN_OUT_HEADER_SZ = 128
FUSE_URING_OP_IN_OUT_SZ = 128
# fuse_uring_ent_in_out: flags, commit_id, payload_sz, padding, reserved
URING_ENT_IN_OUT = struct.Struct("=QQIIQ")
URING_REQ_HEADER_SIZE = FUSE_URING_IN_OUT_HEADER_SZ + FUSE_URING_OP_IN_OUT_SZ + URING_ENT_IN_OUT.size
# fuse_uring_cmd_req (the SQE's command bytes): flags, commit_id, qid, padding
URING_CMD_REQ = struct.Struct("=QQH6x")
URING_IOV_SEGS = 2  # an entry's buffers: the header and the payload

# the largest a request's fixed part gets: what a read buffer needs beyond max_write (the kernel asks
# for at least header + fuse_write_in + max_write; a name or an xattr value may add a little more)
REQUEST_HEADER_ROOM = 4096
