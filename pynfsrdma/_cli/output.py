"""``--json``: every command prints one JSON object (``--watch`` one per line) with ``"version"`` first,
the version of this schema; pynfsrdma(1) documents the fields. Modes are integers, times nanoseconds
since the epoch, sizes bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

JSON_VERSION = 1


def json_text(obj: Mapping[str, Any], indent: int | None = None) -> str:
    return json.dumps({"version": JSON_VERSION, **obj}, indent=indent, sort_keys=True)


def print_json(obj: Mapping[str, Any], indent: int | None = None) -> None:
    print(json_text(obj, indent), flush=True)


__all__ = ["JSON_VERSION", "json_text", "print_json"]
