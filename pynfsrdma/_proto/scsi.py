"""SCSI as the SCSI layout (RFC 8154) uses it, sans-I/O.

- ``designators``: the designation descriptors of a Device Identification VPD page (page 0x83,
  SPC-4 7.8.6), as Linux exposes it in ``/sys/class/block/NAME/device/vpd_pg83``: (code set,
  association, designator type, designator). RFC 8154 names a logical unit by one of them.
- ``pr_registration``: the argument of Linux's ``IOC_PR_REGISTER`` (include/uapi/linux/pr.h), the
  persistent reservation REGISTER (and IGNORE EXISTING KEY) a client sends before its first I/O to a
  unit, and again with the new key 0 to unregister.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

VPD_DEVICE_IDENTIFICATION: Final = 0x83
ASSOCIATION_LOGICAL_UNIT: Final = 0  # the designator names the logical unit (not a port or target)

# include/uapi/linux/pr.h: struct pr_registration { __u64 old_key, new_key; __u32 flags, __pad; }
_PR_REGISTRATION = struct.Struct("=QQII")
PR_FL_IGNORE_KEY: Final = 1 << 0


def _iow(kind: str, nr: int, size: int) -> int:
    """Linux's _IOW(kind, nr, size) (asm-generic/ioctl.h: write direction 1 << 30)."""
    return (1 << 30) | (size << 16) | (ord(kind) << 8) | nr


IOC_PR_REGISTER: Final = _iow("p", 200, _PR_REGISTRATION.size)


class Designator(NamedTuple):
    code_set: int
    association: int
    designator_type: int
    designator: bytes


def designators(page: bytes) -> list[Designator]:
    """The designation descriptors of a VPD page 0x83; ValueError if it is not one, or is cut short."""
    if len(page) < 4 or page[1] != VPD_DEVICE_IDENTIFICATION:
        raise ValueError("not a Device Identification VPD page")
    end = min(len(page), 4 + int.from_bytes(page[2:4], "big"))
    out = []
    pos = 4
    while pos + 4 <= end:
        n = page[pos + 3]
        if pos + 4 + n > end:
            raise ValueError(f"a designation descriptor at {pos} runs past the page's end")
        out.append(Designator(page[pos] & 0x0F, (page[pos + 1] >> 4) & 0x3, page[pos + 1] & 0x0F,
                              bytes(page[pos + 4:pos + 4 + n])))
        pos += 4 + n
    return out


def pr_registration(old_key: int, new_key: int, ignore_existing: bool) -> bytes:
    """IOC_PR_REGISTER's argument: register ``new_key`` (0: unregister ``old_key``)."""
    return _PR_REGISTRATION.pack(old_key, new_key, PR_FL_IGNORE_KEY if ignore_existing else 0, 0)


__all__ = ["ASSOCIATION_LOGICAL_UNIT", "IOC_PR_REGISTER", "PR_FL_IGNORE_KEY", "VPD_DEVICE_IDENTIFICATION",
           "Designator", "designators", "pr_registration"]
