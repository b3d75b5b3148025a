"""pynfsrdma: a userspace NFSv4.1/4.2 client (FUSE mount, scripted access, trunking, RPC-over-RDMA).

For scripts, the blocking client::

    import pynfsrdma

    with pynfsrdma.connect("nfs://127.0.0.1:2049/export") as nfs:
        print(nfs.listdir("/"))

and beside it the async one for trio programs, :class:`Client` (``async with Client.connect(url)``).
fsspec (pandas, pyarrow, Dask) opens ``nfs://`` URLs through :mod:`pynfsrdma.fsspec` with no import of
ours. The names below are the public API; everything else may change between releases.
"""

__version__ = "0.1.0"

from .client.api import Client, File
from .client.attributes import FileAttrs, FsStat
from .client.dir_entry import DirEntry
from .client.file_object import RawFile
from .client.locks import LockConflict, LockDenied, LockLost
from .client.sync import SyncClient, connect
from .client.url import NfsURL, URLError, parse_url
from .errors import NFS4Error

__all__ = [
    "Client",
    "DirEntry",
    "File",
    "FileAttrs",
    "FsStat",
    "LockConflict",
    "LockDenied",
    "LockLost",
    "NFS4Error",
    "NfsURL",
    "RawFile",
    "SyncClient",
    "URLError",
    "__version__",
    "connect",
    "parse_url",
]
