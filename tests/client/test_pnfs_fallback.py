"""pNFS asked for against a server that hands out no layouts (NFS-Ganesha's VFS export: its
fs_layout_types is empty): every READ and WRITE goes through the metadata server, the data is the
same, nothing fails, and the client's report says pNFS is on and why the I/O went the other way."""

from __future__ import annotations

import os

import pytest

from pynfsrdma._client.api import Client
from pynfsrdma._client.url import URLError
from pynfsrdma._testbed import Ganesha
from pynfsrdma._testbed.ganesha import ExportPath


async def test_no_layouts_means_everything_through_the_metadata_server(
    ganesha: Ganesha, export_path: ExportPath
) -> None:
    data = os.urandom(3 * 1024 * 1024 + 4093)
    url = f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}?pnfs"
    async with Client.connect(url) as nfs:
        f = await nfs.open("/big", "w")
        await f.pwrite(0, data)
        await f.close()
        g = await nfs.open("/big")
        assert await g.pread(0, len(data) + 10) == data
        await g.close()
        report = nfs.stats()["pnfs"]
    assert (export_path.local / "big").read_bytes() == data
    assert report["enabled"] is True
    assert report["layout"] == "block"
    assert report["counts"].get("read_bytes", 0) == 0 and report["counts"].get("write_bytes", 0) == 0
    # its fs_layout_types is empty: no LAYOUTGET is even sent, and the report says why
    assert report["counts"].get("layoutget", 0) == 0
    assert list(report["through_mds"]) == ["the export's file system hands out no block or SCSI layout (fs_layout_types: none)"]
    # NFS-Ganesha 4.3's EXCHANGE_ID still claims the metadata server's role; 9's says USE_NON_PNFS
    # (docs/testbed.md)
    assert report["server_is_mds"] is (ganesha.version == "4.3")


async def test_nopnfs_and_the_default_ask_for_no_layout(ganesha: Ganesha, export_path: ExportPath) -> None:
    (export_path.local / "f").write_bytes(b"x" * 5000)
    for query in ("", "?nopnfs", "?pnfs=0"):
        async with Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}{query}") as nfs:
            f = await nfs.open("/f")
            assert await f.pread(0, 6000) == b"x" * 5000
            await f.close()
            assert nfs.stats()["pnfs"] == {"enabled": False}


async def test_pnfs_and_nopnfs_together_is_one_line_of_error(ganesha: Ganesha, export_path: ExportPath) -> None:
    with pytest.raises(URLError, match=r"^pnfs and nopnfs together: choose one$"):
        async with Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}?pnfs&nopnfs"):
            pass
    with pytest.raises(URLError, match=r"^pnfs must be 0 or 1, not 'yes'$"):
        async with Client.connect(f"nfs://{ganesha.host}:{ganesha.port}{export_path.remote}?pnfs=yes"):
            pass
