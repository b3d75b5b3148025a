"""pynfsrdma: a userspace NFSv4.1/4.2 client (FUSE mount, scripted access, trunking, RPC-over-RDMA).

For scripts, the blocking client::

    import pynfsrdma

    with pynfsrdma.connect("nfs://127.0.0.1:2049/export") as nfs:
        print(nfs.listdir("/"))

and beside it the async one for trio programs, :class:`Client` (``async with Client.connect(url)``).
fsspec (pandas, pyarrow, Dask) opens ``nfs://`` URLs through :mod:`pynfsrdma.fsspec` with no import of
ours. The names below are the public API; everything else may change between releases.

The names are loaded on first use (PEP 562): ``import pynfsrdma`` alone costs nothing, so that the
``pynfsrdma`` command's ``--version`` and the commands that need no client start at once.
"""

import importlib as _importlib
import typing as _typing

__version__ = "0.1.0"

if _typing.TYPE_CHECKING:
    from ._client.api import Client, File
    from ._client.attributes import FileAttrs, FsStat
    from ._client.dir_entry import DirEntry
    from ._client.file_object import RawFile
    from ._client.locks import LockConflict, LockDenied, LockLost
    from ._client.sync import SyncClient, connect
    from ._client.url import NfsURL, URLError, parse_url
    from ._errors import NFS4Error

# each public name and the private module that defines it (the imports above, as data)
_WHERE = {
    "Client": "._client.api",
    "File": "._client.api",
    "FileAttrs": "._client.attributes",
    "FsStat": "._client.attributes",
    "DirEntry": "._client.dir_entry",
    "RawFile": "._client.file_object",
    "LockConflict": "._client.locks",
    "LockDenied": "._client.locks",
    "LockLost": "._client.locks",
    "SyncClient": "._client.sync",
    "connect": "._client.sync",
    "NfsURL": "._client.url",
    "URLError": "._client.url",
    "parse_url": "._client.url",
    "NFS4Error": "._errors",
}

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


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    obj = getattr(_importlib.import_module(where, __name__), name)
    # each public name says it lives here (as trio's do): the module that defines it is private and may change
    if callable(obj):
        obj.__module__ = __name__
    globals()[name] = obj
    return obj


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
