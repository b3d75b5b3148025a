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

from ._client.api import Client, File
from ._client.attributes import FileAttrs, FsStat
from ._client.dir_entry import DirEntry
from ._client.file_object import RawFile
from ._client.locks import LockConflict, LockDenied, LockLost
from ._client.sync import SyncClient, connect
from ._client.url import NfsURL, URLError, parse_url
from ._errors import NFS4Error

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


# Each public name says it lives here (as trio's do): the module that defines it is private and may change.
for _name in __all__:
    _obj = globals()[_name]
    if callable(_obj):
        _obj.__module__ = __name__
del _name, _obj
