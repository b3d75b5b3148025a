"""Processes the testbed started and recorded: is this PID still that process, and how to end it.

A recorded PID is only signalled after checking that it is alive (a zombie counts as gone), that its
start time is the recorded one, and that its command line contains the recorded marker, so a PID the
kernel has since given to another process is never touched.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["ProcessRecord", "cmdline", "pid_alive", "start_time", "wait_pid_gone"]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may contain spaces; fields after it are plain
    return data[data.rfind(")") + 2 :].split()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def wait_pid_gone(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to end (or become a zombie); True if it did."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@dataclass(frozen=True)
class ProcessRecord:
    """A process the testbed started: its PID, start time and a string its command line contains."""

    pid: int
    start_time: int
    marker: str

    @classmethod
    def of(cls, pid: int, marker: str) -> ProcessRecord:
        started = start_time(pid)
        if started is None:
            raise ProcessLookupError(f"process {pid} is gone")
        return cls(pid, started, marker)

    def is_running(self) -> bool:
        """Whether the PID is still the process we started (alive, same start time, same command)."""
        return (
            pid_alive(self.pid)
            and start_time(self.pid) == self.start_time
            and any(self.marker in arg for arg in cmdline(self.pid))
        )

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM it (SIGKILL after ``timeout``) if it is still ours; True if it was signalled."""
        if not self.is_running():
            return False
        try:
            os.kill(self.pid, signal.SIGTERM)
            if not wait_pid_gone(self.pid, timeout) and self.is_running():
                os.kill(self.pid, signal.SIGKILL)
                wait_pid_gone(self.pid, timeout)
        except ProcessLookupError:
            pass
        return True

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "marker": self.marker}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessRecord:
        return cls(int(data["pid"]), int(data["start_time"]), str(data["marker"]))
