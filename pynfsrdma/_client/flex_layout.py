"""The flexible file layout's decisions (RFC 8435), sans-I/O: what a segment says (its mirrors, data
servers, synthetic owners and flags) and which data server a READ or WRITE goes to.

- ``flex_body(ff_layout4)``: the segment's body, checked: every data server has a file handle and a
  numeric synthetic uid and gid (what AUTH_SYS carries to it), else ``BadLayout``.
- ``plan_read``: one mirror's data servers (reads go to one copy, the most efficient mirror first),
  the READ cut at stripe-unit boundaries when a mirror has several data servers (sparse striping,
  5.1: a data server's file offset is the file's own).
- ``plan_write``: every mirror (``FF_FLAGS_WRITE_ONE_MIRROR``: the first only), each cut the same way.
- ``reads_by_layout``: whether a segment serves reads (``FF_FLAGS_NO_READ_IO`` makes a RW segment
  serve writes only: reads ask for a READ segment).
- ``wants_layoutcommit``: unless ``FF_FLAGS_NO_LAYOUTCOMMIT``, writes to the data servers are
  followed by LAYOUTCOMMIT (the metadata server learns the size and times from it).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._proto.nfs4.layout_flexfiles import ff_flags4, ff_layout4


class BadLayout(ValueError):
    """A flexfiles layout this client cannot do I/O by: its I/O goes through the metadata server."""


@dataclass(frozen=True, slots=True)
class DataServer:
    """One data server of a mirror: the device that says where it is, the file handle there and the
    synthetic owner to reach it as."""

    deviceid: bytes
    fh: bytes
    uid: int
    gid: int
    efficiency: int


@dataclass(frozen=True, slots=True)
class FlexBody:
    stripe_unit: int
    mirrors: tuple[tuple[DataServer, ...], ...]
    flags: int


@dataclass(frozen=True, slots=True)
class DsIO:
    """A piece of a READ or WRITE for one data server: the file's range (the same offset there)."""

    server: DataServer
    mirror: int
    offset: int
    length: int


def _owner(text: str, what: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise BadLayout(f"the layout's synthetic {what} is not a number: {text!r}") from None
    if not 0 <= n < 1 << 32:
        raise BadLayout(f"the layout's synthetic {what} is out of range: {n}")
    return n


def flex_body(lo: ff_layout4) -> FlexBody:
    mirrors = []
    for m in lo.ffl_mirrors:
        servers = []
        for ds in m.ffm_data_servers:
            if not ds.ffds_fh_vers:
                raise BadLayout("a data server of the layout has no file handle")
            servers.append(DataServer(bytes(ds.ffds_deviceid), bytes(ds.ffds_fh_vers[0]), _owner(ds.ffds_user, "uid"),
                                      _owner(ds.ffds_group, "gid"), int(ds.ffds_efficiency)))
        if not servers:
            raise BadLayout("a mirror of the layout has no data server")
        if len(servers) > 1 and lo.ffl_stripe_unit == 0:
            raise BadLayout("a mirror of several data servers with a stripe unit of 0")
        mirrors.append(tuple(servers))
    if not mirrors:
        raise BadLayout("the layout has no mirror")
    return FlexBody(int(lo.ffl_stripe_unit), tuple(mirrors), int(lo.ffl_flags))


def reads_by_layout(body: FlexBody, iomode_rw: bool) -> bool:
    return not (iomode_rw and body.flags & ff_flags4.FF_FLAGS_NO_READ_IO)


def wants_layoutcommit(body: FlexBody) -> bool:
    return not body.flags & ff_flags4.FF_FLAGS_NO_LAYOUTCOMMIT


def _cut(body: FlexBody, mirror: int, offset: int, length: int) -> list[DsIO]:
    servers = body.mirrors[mirror]
    if len(servers) == 1:
        return [DsIO(servers[0], mirror, offset, length)]
    unit = body.stripe_unit
    out = []
    pos, end = offset, offset + length
    while pos < end:
        stop = min(end, (pos // unit + 1) * unit)
        out.append(DsIO(servers[(pos // unit) % len(servers)], mirror, pos, stop - pos))
        pos = stop
    return out


def read_mirrors(body: FlexBody) -> list[int]:
    """The mirrors to read from, best first: the highest efficiency of its data servers (5.1)."""
    return sorted(range(len(body.mirrors)), key=lambda i: -max(ds.efficiency for ds in body.mirrors[i]))


def plan_read(body: FlexBody, offset: int, length: int, mirror: int | None = None) -> list[DsIO]:
    """A READ from one mirror (``mirror``, else the best)."""
    return _cut(body, read_mirrors(body)[0] if mirror is None else mirror, offset, length)


def plan_write(body: FlexBody, offset: int, length: int) -> list[DsIO]:
    """A WRITE to every copy: each mirror's data servers (only the first mirror's with
    FF_FLAGS_WRITE_ONE_MIRROR: the server makes the other copies)."""
    n = 1 if body.flags & ff_flags4.FF_FLAGS_WRITE_ONE_MIRROR else len(body.mirrors)
    return [io for m in range(n) for io in _cut(body, m, offset, length)]

