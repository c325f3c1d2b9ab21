"""libvirt's job statistics as a migration's status reports them, pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["progress_of", "result_of"]

_PROGRESS = {
    "memoryTotal": "memory_total",
    "memoryProcessed": "memory_processed",
    "memoryRemaining": "memory_remaining",
    "diskTotal": "disk_total",
    "diskProcessed": "disk_processed",
    "diskRemaining": "disk_remaining",
    "memoryBandwidth": "memory_bps",
    "iterations": "memory_iteration",
    "elapsedMilliseconds": "time_elapsed",
}


def progress_of(stats: Mapping[str, Any]) -> dict[str, int]:
    """status.progress from a running job's `jobStats()` (keys absent in it are left out)."""
    return {k: int(stats[v]) for k, v in _PROGRESS.items() if isinstance(stats.get(v), int)}


def result_of(
    completed: Mapping[str, Any], last_progress: Mapping[str, Any] | None
) -> dict[str, int]:
    """status.result of a migration that succeeded: time, downtime and memory from the
    target's record of the finished job; the disk figures from the source's last report while
    it ran (the target's are all 0)."""
    result: dict[str, int] = {}
    for key, name in (
        ("elapsedMilliseconds", "time_elapsed"),
        ("downtimeMilliseconds", "downtime"),
        ("memoryTotal", "memory_total"),
        ("memoryProcessed", "memory_processed"),
    ):
        if isinstance(completed.get(name), int):
            result[key] = int(completed[name])
    last = last_progress or {}
    for key in ("diskTotal", "diskProcessed"):
        if isinstance(last.get(key), int):
            result[key] = int(last[key])
    if "diskTotal" in result:
        # The source reports once a second, so its last report may come before the disk mirror
        # finished (43 of 50 MiB, in a copy of 2 s); the job succeeded, so all of it was sent.
        result["diskProcessed"] = max(result.get("diskProcessed", 0), result["diskTotal"])
    return result
