"""What the lab benchmarks share for reporting and waiting: percentiles, a figures line, a
deadline-bounded wait, and whether a fleet's generic controller has a leader.

The leading underscore keeps it out of the list of bench scripts that must have a smoke mode.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

__all__ = ["figures", "leads", "p95", "wait"]


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] if len(values) >= 20 else max(values)


def figures(values: list[float]) -> str:
    """p50, p95 and max of durations in seconds, in milliseconds."""
    return (
        f"p50 {statistics.median(values) * 1e3:6.0f} ms, p95 {p95(values) * 1e3:6.0f} ms, "
        f"max {max(values) * 1e3:6.0f} ms"
    )


def wait(probe: Any, timeout: float, what: str) -> None:
    """Until `probe()` is true; the script ends with a message after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.2)
    raise SystemExit(f"bench: {what} not reached within {timeout:.0f} s")


def leads(fleet: Any) -> bool:
    """Whether one of the fleet's daemons holds the generic controller's Lease."""
    try:
        return bool(fleet.leader())
    except Exception:
        return False
